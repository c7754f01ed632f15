"""``syncedge model eval-precheck``: the pre-check benchmark's figures from the package
command (export/evaluation/precheck.py), its option errors and its contact sheet."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from edge.cli import main

ROOT = Path(__file__).resolve().parent.parent
MODEL = str(ROOT / "models" / "reference")
HISTORY = str(ROOT / "models" / "reference-history")


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["model", "eval-precheck", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("syncedge model eval-precheck: error: "), err
    return lines[0]


def test_unknown_split_is_one_line_naming_the_option(tmp_path, capsys) -> None:
    code, _, err = _run(capsys, "--split", "nowhere", "--out", str(tmp_path / "o"))
    assert code == 2
    line = _one_error_line(err)
    assert "--split" in line and "'nowhere'" in line and "all_held_out" in line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("option", ["--model", "--history-model"])
def test_model_folder_without_manifest_is_one_line_naming_the_option(
        tmp_path, capsys, option: str) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    argv = ["--model", MODEL, "--history-model", HISTORY, "--out", str(tmp_path / "o")]
    argv[argv.index(option) + 1] = str(empty)
    code, _, err = _run(capsys, *argv)
    assert code == 2
    line = _one_error_line(err)
    assert f"{option} {empty}" in line and "model.json" in line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("option", ["--cells", "--threads"])
def test_counts_below_one_are_refused(tmp_path, capsys, option: str) -> None:
    code, _, err = _run(capsys, "--model", MODEL, "--history-model", HISTORY, option, "0",
                        "--out", str(tmp_path / "o"))
    assert code == 2
    assert f"{option} 0" in _one_error_line(err)


def test_out_that_is_a_file_is_refused_before_work(tmp_path, capsys) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    code, _, err = _run(capsys, "--model", MODEL, "--history-model", HISTORY, "--out", str(f))
    assert code == 2
    assert f"--out {f}" in _one_error_line(err)


def test_missing_mujoco_gives_the_install_hint(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "mujoco", None)  # find_spec answers None, import fails
    code, _, err = _run(capsys, "--model", MODEL, "--history-model", HISTORY, "--cells", "1",
                        "--out", str(tmp_path / "o"))
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "'mujoco'" in lines[0] and "pip install" in lines[0], err
    assert "syncedge[train]" in lines[0]


def test_help_says_what_it_measures(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["model", "eval-precheck", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for words in ("truly enters", "robot-mask pixels", "keep-out recall", "false refusals",
                  "truly best", "Spearman", "copy-last", "precheck.json", "precheck.txt",
                  "precheck_<split>.png", ">= 0.95", ">= 0.70", ">= 0.8"):
        assert words in text, words


def _sheet_cell(rng: np.random.Generator, m: int = 8, hw: int = 16):
    from export.evaluation.precheck_sheet import SheetCell

    def frames(n: int) -> np.ndarray:
        return rng.integers(0, 256, (n, hw, hw, 3), dtype=np.uint8)

    enters = np.arange(m) % 2 == 0
    return SheetCell(label="test_all cell 0", start=frames(1)[0], goal=frames(1)[0], goal_index=3,
                     region=((0.1, 0.1), (0.5, 0.1), (0.5, 0.6), (0.1, 0.6)),
                     truth_last=frames(m), pred_last=frames(m), enters=enters,
                     refused=enters.copy(), exceeds=np.zeros(m, bool), chosen=1, best=3)


def test_sheet_size_follows_the_rows_shown() -> None:
    from export.evaluation.precheck_sheet import precheck_sheet, sheet_size

    rng = np.random.default_rng(0)
    cells = [_sheet_cell(rng) for _ in range(3)]
    one, three = precheck_sheet(cells[:1]), precheck_sheet(cells)
    two = precheck_sheet(cells[:2], note="first 2 of 5 cells")
    assert one.dtype == np.uint8 and one.ndim == 3 and one.shape[2] == 3
    assert one.shape == (*sheet_size(1, 8, (16, 16)), 3)
    assert three.shape == (*sheet_size(3, 8, (16, 16)), 3)
    assert two.shape == (*sheet_size(2, 8, (16, 16), note=True), 3)
    row = three.shape[0] - precheck_sheet(cells[:2]).shape[0]
    assert row > 0 and three.shape[0] - one.shape[0] == 2 * row
    assert one.shape[1] == three.shape[1]
    # start, goal, then a truth and a prediction tile per candidate
    fewer = precheck_sheet([_sheet_cell(rng, m=4)])
    assert fewer.shape == (*sheet_size(1, 4, (16, 16)), 3)
    assert fewer.shape[1] * 18 == one.shape[1] * 10


needs_mujoco = pytest.mark.skipif(importlib.util.find_spec("mujoco") is None,
                                  reason="needs MuJoCo")


def _keys(obj: object) -> object:
    """The nesting of dict keys (values of lists and leaves dropped)."""
    if isinstance(obj, dict):
        return {k: _keys(v) for k, v in obj.items()}
    return None


@needs_mujoco
def test_one_cell_writes_json_table_and_sheet_with_the_benchmarks_keys(tmp_path,
                                                                        capsys) -> None:
    out = tmp_path / "eval"
    code, stdout, err = _run(capsys, "--model", MODEL, "--history-model", HISTORY,
                             "--cells", "1", "--split", "test_all", "--threads", "1",
                             "--out", str(out))
    assert code == 0, err
    assert "all_held_out cell 1/1" in err  # progress on stderr
    result = json.loads((out / "precheck.json").read_text())
    bench = json.loads((ROOT / "bench" / "results" / "precheck.json").read_text())
    assert list(result) == list(bench)
    assert _keys(result["options"]) == _keys(bench["options"])
    assert result["options"]["cells"] == 1
    assert result["targets"] == bench["targets"]
    assert list(result["splits"]) == ["all_held_out"]
    assert _keys(result["splits"]["all_held_out"]) == _keys(bench["splits"]["all_held_out"])
    assert result["command"].startswith("syncedge model eval-precheck")
    table = (out / "precheck.txt").read_text()
    assert table.startswith("| split (cells) | model |") and table.strip() in stdout
    from export.evaluation.precheck_sheet import sheet_size

    cells = result["splits"]["all_held_out"]["cells"]
    import cv2

    sheet = cv2.imread(str(out / "precheck_all_held_out.png"))
    assert cells == 1 and sheet.shape == (*sheet_size(cells, 8, (64, 64), note=True), 3)
    records = json.loads((out / "precheck_cells.json").read_text())["all_held_out"]
    assert len(records) == cells
    rec, models = records[0], result["splits"]["all_held_out"]["models"]
    assert set(rec["rows"]) == set(models)
    enters = np.array(rec["true_inside_max"]) >= 4
    assert 0.3 <= enters.mean() <= 0.7  # the rectangle is drawn so
    for label, row in rec["rows"].items():  # the per-cell verdicts give the summary
        refused = np.array(row["refused"])
        want = models[label]["keepout_recall"]["value"]
        assert want == pytest.approx(refused[enters].mean()), label
    assert not any(rec["rows"]["copy_last"]["refused"])  # nothing moves in copy-last


def test_chain_size_off_the_grid_is_refused_before_work(tmp_path, capsys) -> None:
    code, _, err = _run(capsys, "--model", MODEL, "--history-model", HISTORY, "--chain",
                        "--chain-size", "100", "--out", str(tmp_path / "o"))
    assert code == 2
    assert "--chain-size 100" in _one_error_line(err)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("option", ["--chain-motion", "--chain-poses"])
def test_a_chain_refinement_without_the_chain_is_refused_before_work(tmp_path, capsys,
                                                                     option) -> None:
    code, _, err = _run(capsys, "--model", MODEL, "--history-model", HISTORY,
                        option, "--out", str(tmp_path / "o"))
    assert code == 2
    assert f"{option}: needs --chain" in _one_error_line(err)
    assert not (tmp_path / "o").exists()


def test_held_poses_refinements_are_kept_apart_by_their_range() -> None:
    from export.evaluation.precheck import poses_suffix

    assert poses_suffix(0.5) == "-poses32"  # the kept files' names before ranges were named
    assert poses_suffix(1.0) == "-poses32-half1rad"
    assert poses_suffix(0.75) == "-poses32-half0.75rad"


def test_held_poses_half_range_is_checked_before_work(tmp_path, capsys) -> None:
    for argv, want in (
            (("--chain", "--chain-poses-half-range", "1"),
             "--chain-poses-half-range: needs --chain-poses"),
            (("--chain", "--chain-poses", "--chain-poses-half-range", "0"),
             "--chain-poses-half-range 0: expected more than 0 and at most 1.5 rad"),
            (("--chain", "--chain-poses", "--chain-poses-half-range", "2"),
             "--chain-poses-half-range 2: expected more than 0 and at most 1.5 rad")):
        code, _, err = _run(capsys, "--model", MODEL, "--history-model", HISTORY, *argv,
                            "--out", str(tmp_path / "o"))
        assert code == 2 and want in _one_error_line(err), err
        assert not (tmp_path / "o").exists()


@pytest.mark.slow
@needs_mujoco
def test_one_cell_with_the_chain_adds_its_rows_and_sheet_and_keeps_its_read(tmp_path,
                                                                            capsys) -> None:
    """About 100 s: one cell's calibration rendered at 256x256 and read by the chain."""
    out, fits = tmp_path / "eval", tmp_path / "fits"
    argv = ("--model", MODEL, "--history-model", HISTORY, "--cells", "1", "--split",
            "test_all", "--threads", "1", "--chain", "--chain-fits", str(fits))
    code, _, err = _run(capsys, *argv, "--out", str(out))
    assert code == 0, err
    models = json.loads((out / "precheck.json").read_text())["splits"]["all_held_out"]["models"]
    assert {"chain", "chain_motion", "shipped", "copy_last"} <= set(models)
    assert (out / "precheck_all_held_out_chain.png").is_file()
    kept = sorted(fits.glob("*.npz"))
    assert len(kept) == 1 and kept[0].name.startswith("bench-precheck-test_all-000-")
    code, _, err = _run(capsys, *argv, "--out", str(tmp_path / "again"))
    assert code == 0 and "chain in" not in err  # the kept read is reused
    again = json.loads((tmp_path / "again" / "precheck.json").read_text())
    assert again["splits"]["all_held_out"]["models"]["chain"] == models["chain"]


def test_keep_out_margins_are_checked_before_work(tmp_path, capsys) -> None:
    for argv, want in ((("--keep-out-margin", "1"), "--keep-out-margin: needs --chain"),
                       (("--chain", "--keep-out-margin", "40"),
                        "--keep-out-margin 40: expected 0..32 px")):
        code, _, err = _run(capsys, "--model", MODEL, "--history-model", HISTORY, *argv,
                            "--out", str(tmp_path / "o"))
        assert code == 2 and want in _one_error_line(err)
        assert not (tmp_path / "o").exists()


@needs_mujoco
def test_a_grown_keep_out_refuses_at_least_what_the_region_refuses(tmp_path, capsys) -> None:
    """From the kept chain read of the first in-distribution cell (bench/chain_fits/precheck,
    copied: a read is only made where the rendering differs), the margin rows refuse a
    superset of the margin-0 row's candidates, so recall and false refusals only grow."""
    import shutil

    fits = tmp_path / "fits"
    shutil.copytree(Path(__file__).resolve().parent.parent / "bench" / "chain_fits" /
                    "precheck", fits)
    out = tmp_path / "eval"
    code, _, err = _run(capsys, "--model", MODEL, "--history-model", HISTORY, "--cells", "2",
                        "--split", "in_distribution", "--threads", "1", "--chain",
                        "--chain-fits", str(fits), "--keep-out-margin", "1",
                        "--keep-out-margin", "3", "--out", str(out))
    assert code == 0, err
    result = json.loads((out / "precheck.json").read_text())
    assert result["options"]["keep_out_margins_px"] == [1.0, 3.0]
    models = result["splits"]["in_distribution"]["models"]
    rows = [models[k] for k in ("chain", "chain_margin_1px", "chain_margin_3px")]
    for key in ("keepout_recall", "keepout_false_refusals"):
        values = [r[key]["value"] for r in rows if r[key]["value"] is not None]
        assert values == sorted(values), (key, values)
    assert rows[2]["keepout_false_refusals"]["value"] > rows[0]["keepout_false_refusals"]["value"]
