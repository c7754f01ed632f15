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
