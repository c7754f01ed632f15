"""bench/bench_precheck.py (a command line over export/evaluation/precheck.py): the figures it
reports, the cells it draws and what the command line writes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _bench():
    from export.evaluation import precheck as precheck_eval
    return precheck_eval


def _bench_script():
    spec = importlib.util.spec_from_file_location("bench_precheck",
                                                  ROOT / "bench" / "bench_precheck.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_spearman_ranks_with_ties_and_counts_a_constant_prediction_as_zero() -> None:
    b = _bench()
    assert b.spearman(np.array([1.0, 2, 3, 4]), np.array([10.0, 20, 30, 40])) == pytest.approx(1)
    assert b.spearman(np.array([4.0, 3, 2, 1]), np.array([1.0, 2, 3, 4])) == pytest.approx(-1)
    assert b.spearman(np.array([1.0, 1, 2, 3]), np.array([1.0, 2, 3, 4])) == pytest.approx(
        np.corrcoef([1.5, 1.5, 3, 4], [1, 2, 3, 4])[0, 1])
    assert b.spearman(np.zeros(4), np.array([1.0, 2, 3, 4])) == 0.0


def test_summary_pools_candidates_and_bootstraps_over_cells() -> None:
    b = _bench()
    rows = [{"enters": [True, True, False, False], "keepout_refused": [True, False, True, False],
             "keepout_moved_max": [9, 3, 5, 0],
             "jl_correct": [True] * 4, "chosen_is_best": True, "spearman": 0.5},
            {"enters": [True, False, False, False], "keepout_refused": [True, False, False,
                                                                        False],
             "keepout_moved_max": [7, 1, 2, 0],
             "jl_correct": [True, True, True, False], "chosen_is_best": False, "spearman": 0.9},
            {"enters": [False] * 4, "keepout_refused": [False] * 4,
             "keepout_moved_max": [0, 0, 1, 0], "jl_correct": [True] * 4,
             "chosen_is_best": None, "spearman": None}]
    s = b.summarise(rows, resamples=200)
    assert s["keepout_recall"]["value"] == pytest.approx(2 / 3)  # 2 of 3 entering refused
    assert s["keepout_false_refusals"]["value"] == pytest.approx(1 / 9)
    assert s["joint_limit_accuracy"]["value"] == pytest.approx(11 / 12)
    assert s["chosen_is_truly_best"]["value"] == pytest.approx(0.5)
    assert s["spearman_median"]["value"] == pytest.approx(0.7)
    # 9 candidates stay out, moving at most 5, 0, 1, 2, 0, 0, 0, 1, 0 pixels: at 2 one of
    # 9 (11%) is refused, at 5 none; recall at 5: 9 and 7 of the entering 9, 3, 7 are > 5
    assert s["max_moved_pixels_for_10pct_false_refusals"]["value"] == 5
    assert s["keepout_recall_at_10pct_false_refusals"]["value"] == pytest.approx(2 / 3)
    lo, hi = s["keepout_recall"]["ci95"]
    assert 0 <= lo <= 2 / 3 <= hi <= 1


@pytest.mark.slow
def test_drawn_cells_have_the_documented_truth() -> None:
    import importlib.util as iu

    if iu.find_spec("mujoco") is None:
        pytest.skip("needs MuJoCo")
    from export.cells.generate import CellGenerator, GenerateOptions

    b = _bench()
    with CellGenerator(GenerateOptions(motion_episodes=0)) as gen:
        c = b.draw_cell(gen, "test_all", 0)
    assert c is not None
    assert 0.3 <= c["enters"].mean() <= 0.7
    h, w = c["futures"].robot_mask.shape[-2:]
    from edge.precheck.rules import KeepOutRegion, rasterise

    m = rasterise((KeepOutRegion("r", tuple(c["region"])),), h, w).astype(bool)
    assert not (c["futures"].robot_mask[0, 0] & m).any()
    if c["goal"] is not None:
        safe = ~c["enters"] & ~c["exceeds"]
        assert safe[c["best"]] and c["true_dist"][c["best"]] == pytest.approx(0, abs=1e-9)


def test_bench_script_passes_its_options_and_writes_the_json(tmp_path, monkeypatch,
                                                             capsys) -> None:
    mod = _bench_script()
    seen = []
    metric = {"value": 0.5, "ci95": [0.25, 0.75]}
    result = {"command": "c", "options": {}, "targets": {},
              "splits": {"all_held_out": {"data_split": "test_all", "cells": 2,
                                          "cells_without_a_fitting_keep_out": 0,
                                          "models": {"shipped": {
                                              k: metric for k in (
                                                  "keepout_recall", "keepout_false_refusals",
                                                  "keepout_recall_at_10pct_false_refusals",
                                                  "joint_limit_accuracy",
                                                  "chosen_is_truly_best",
                                                  "spearman_median")}}}},
              "seconds": 1.0}

    def fake(opts):
        seen.append(opts)
        return result

    monkeypatch.setattr(mod, "evaluate_precheck", fake)
    out = tmp_path / "r" / "precheck.json"
    assert mod.main(["--cells", "2", "--split", "all_held_out", "--threads", "1",
                     "--out", str(out)]) == 0
    (opts,) = seen
    assert (opts.cells, opts.splits, opts.threads, opts.out) == (2, ("all_held_out",), 1, None)
    assert Path(opts.model) == ROOT / "models" / "reference"
    assert Path(opts.history_model) == ROOT / "models" / "reference-history"
    assert opts.command == ("python bench/bench_precheck.py --cells 2 --split all_held_out "
                            f"--threads 1 --out {out}")
    assert json.loads(out.read_text()) == result
    stdout = capsys.readouterr().out
    assert "| all_held_out (2) | shipped | 0.50 [0.25, 0.75] |" in stdout
    assert stdout.rstrip().endswith(str(out))
