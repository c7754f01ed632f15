"""Combining futures evaluations run on separate cell ranges (scripts/chain_eval_merge.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import chain_eval_merge as merge  # noqa: E402


def _run(path: Path, split: str, cells: int, ret: float, psnr: list[float],
         extra: bool = False) -> str:
    d = {"split": split, "cells": cells,
         "retrieval": {"chain/all_joints/8": ret, **({"other/all_joints/8": 1.0} if extra else {})},
         "psnr_at_step": {"chain/psnr": psnr}}
    path.write_text(json.dumps(d))
    return str(path)


def test_combine_weights_each_run_by_its_cells(tmp_path):
    a = _run(tmp_path / "a.json", "test_robot", 1, 0.5, [30.0, 20.0], extra=True)
    b = _run(tmp_path / "b.json", "test_robot", 3, 0.9, [26.0, 24.0])
    out = tmp_path / "m.json"
    assert merge.main(["--combine", a, b, "--out", str(out)]) == 0
    m = json.loads(out.read_text())
    assert m["cells"] == 4 and m["runs"] == [a, b]
    assert m["retrieval"] == {"chain/all_joints/8": pytest.approx(0.8)}  # common keys only
    assert m["psnr_at_step"]["chain/psnr"] == pytest.approx([27.0, 23.0])
    assert "start_arm_precision" not in m  # neither run has it
    for path, shares in ((a, [0.25]), (b, [0.5, 0.75, 1.0])):
        d = json.loads(Path(path).read_text())
        d["start_arm_precision"] = {"chain": shares, **({"other": [0.0]} if path == a else {})}
        Path(path).write_text(json.dumps(d))
    assert merge.combine([a, b])["start_arm_precision"] == {"chain": [0.25, 0.5, 0.75, 1.0]}
    c = _run(tmp_path / "c.json", "stress", 2, 0.1, [1.0, 1.0])
    with pytest.raises(ValueError, match="several splits"):
        merge.combine([a, c])


def _per_cell_run(path: Path, cells: list[str], hits: dict[str, list[float]]) -> str:
    d = {"split": "test_robot", "cells": len(cells), "retrieval": {"x/all_joints/8": 0.5},
         "psnr_at_step": {"x/psnr": [1.0]},
         "per_cell": {"cells": cells,
                      "retrieval": {f"{k}/all_joints/8": v for k, v in hits.items()},
                      "psnr_at_16": {f"{k}/psnr": [20.0 + h for h in v] for k, v in hits.items()}}}
    path.write_text(json.dumps(d))
    return str(path)


def test_paired_compares_the_cells_both_runs_scored(tmp_path):
    a = _per_cell_run(tmp_path / "a.json", ["c0", "c1", "c2", "c3"],
                      {"read": [0.5, 0.5, 1.0, 0.25]})
    b = _per_cell_run(tmp_path / "b.json", ["c1", "c2", "c3", "c9"],
                      {"anchored": [0.75, 1.0, 0.0, 1.0]})
    r = merge.paired(f"{a}:read", f"{b}:anchored")
    # cells c1-c3 only: differences +0.25, 0, -0.25
    assert r["cells"] == 3 and r["difference"] == pytest.approx(0.0)
    assert (r["better"], r["worse"]) == (1, 1)
    assert r["interval_95"][0] < 0 < r["interval_95"][1]
    assert merge.paired(f"{a}:read", f"{b}:anchored", figure="psnr")["mean_b"] \
        == pytest.approx(20.0 + 1.75 / 3)
    same = merge.paired(f"{a}:read", f"{a}:read")
    assert same["difference"] == 0.0 and same["interval_95"] == [0.0, 0.0]
    with pytest.raises(ValueError, match="no read/all_joints/8"):
        merge.paired(f"{b}:read", f"{a}:read")
    old = _run(tmp_path / "old.json", "test_robot", 1, 0.5, [30.0])
    with pytest.raises(ValueError, match="per-cell figures"):
        merge.paired(f"{old}:chain", f"{a}:read")


def test_combine_joins_per_cell_figures_in_order(tmp_path):
    a = _per_cell_run(tmp_path / "a.json", ["c0", "c1"], {"read": [0.5, 1.0], "x": [0.0, 0.0]})
    b = _per_cell_run(tmp_path / "b.json", ["c2"], {"read": [0.25]})
    m = merge.combine([a, b])
    assert m["per_cell"]["cells"] == ["c0", "c1", "c2"]
    assert m["per_cell"]["retrieval"] == {"read/all_joints/8": [0.5, 1.0, 0.25]}
    assert m["per_cell"]["psnr_at_16"] == {"read/psnr": [20.5, 21.0, 20.25]}
