"""scripts/anchor_policy.py: the automatic anchoring choice scored on hand-made cells."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from anchor_policy import main, policy_table  # noqa: E402


def _cells():
    # 4 cells: the estimate, retrieval@8 as read / anchored, PSNR@16 as read / anchored
    est, est_a = [0.2, 0.55, 0.85, 0.95], [0.4, 0.7, 0.9, 0.95]
    r8, a8 = [0.25, 0.5, 0.75, 1.0], [0.75, 0.75, 0.75, 0.75]
    p, pa = [19.0, 22.0, 24.0, 25.0], [23.0, 23.0, 24.0, 24.0]
    return {"split": "hand", "cells": 4,
            "start_arm_precision": {"chain_dis": [0.1, 0.5, 0.8, 1.0]},
            "start_arm_on_arm_estimate": {"chain_dis": est, "chain_dis_anchor": est_a},
            "per_cell": {"retrieval": {"chain_dis/all_joints/8": r8,
                                       "chain_dis_anchor/all_joints/8": a8,
                                       "chain_dis/all_joints/16": r8,
                                       "chain_dis_anchor/all_joints/16": a8},
                         "psnr_at_16": {"copy_last/psnr": [20.0] * 4,
                                        "chain_dis/psnr": p, "chain_dis_anchor/psnr": pa}}}


def test_each_policy_takes_the_anchored_figures_only_below_its_threshold():
    t = policy_table(_cells(), thresholds=(0.5, 0.9))
    never, always = t["policies"]["never"], t["policies"]["always"]
    assert never == {"anchored": 0, "retrieval_at_8": 0.625, "retrieval_at_16": 0.625,
                     "psnr16_over_copy_last_db": 2.5, "cells_below_copy_last": 1}
    assert always["anchored"] == 4 and always["retrieval_at_8"] == 0.75
    assert always["psnr16_over_copy_last_db"] == 3.5 and always["cells_below_copy_last"] == 0
    half = t["policies"]["below 0.5"]  # only the first cell anchored
    assert half["anchored"] == 1 and half["retrieval_at_8"] == pytest.approx(0.75)
    assert half["psnr16_over_copy_last_db"] == pytest.approx((3 + 2 + 4 + 5) / 4)
    assert t["policies"]["below 0.9"]["anchored"] == 3  # 0.95 is not below 0.9
    assert t["anchored_low"]["cells"] == 1 and t["anchored_low"]["retrieval_at_8"] == 0.75
    assert t["anchored_low"]["psnr16_over_copy_last_db"] == 3.0
    assert t["estimate_vs_true_r"] > 0.9


def test_the_cli_prints_the_table_and_refuses_another_json(tmp_path, capsys):
    (tmp_path / "cells.json").write_text(json.dumps(_cells()))
    assert main([str(tmp_path / "cells.json"), "--json", str(tmp_path / "out.json")]) == 0
    out = capsys.readouterr().out
    assert "| below 0.8 | 2 |" in out and "| never | 0 | 0.625 |" in out
    assert json.loads((tmp_path / "out.json").read_text())["cells"] == 4
    (tmp_path / "other.json").write_text(json.dumps({"split": "x"}))
    assert main([str(tmp_path / "other.json")]) == 2
    assert "expected the JSON of scripts/chain_fit_eval.py --anchor" in capsys.readouterr().err
