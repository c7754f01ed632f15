"""`syncedge model eval-frames` refuses bad input before any work, one line each, and
writes its results as one folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge.cli import main

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parent.parent
WARP = f"a=warp:{REPO / 'models/reference-checkpoints'}"


def _run(capsys, *argv: str) -> tuple[int, str]:
    try:
        rc = main(["model", "eval-frames", *argv])
    except SystemExit as exc:
        rc = int(exc.code or 0)
    return rc, capsys.readouterr().err


@pytest.fixture
def cells(tmp_path: Path) -> Path:
    """A data folder with an (empty) held-out convention split."""
    (tmp_path / "cells" / "test_convention").mkdir(parents=True)
    return tmp_path / "cells"


def test_missing_data_is_refused_and_nothing_is_written(capsys, tmp_path: Path) -> None:
    out = tmp_path / "out"
    rc, err = _run(capsys, "--model", WARP, "--data", str(tmp_path / "nodata"), "--out",
                   str(out))
    assert rc == 2 and "--data" in err and "found nothing" in err
    assert "syncedge cells generate" in err and not out.exists()
    (tmp_path / "afile").write_text("x")
    rc, err = _run(capsys, "--model", WARP, "--data", str(tmp_path / "afile"), "--out",
                   str(out))
    assert rc == 2 and "found a file" in err and not out.exists()
    rc, err = _run(capsys, "--model", WARP, "--data", str(tmp_path), "--split", "stress",
                   "--out", str(out))
    assert rc == 2 and "no stress folder in it" in err and not out.exists()


def test_bad_models_and_variants_are_refused(capsys, tmp_path: Path, cells: Path) -> None:
    out = tmp_path / "out"
    base = ("--data", str(cells), "--out", str(out))
    rc, err = _run(capsys, "--model", WARP, "--model", WARP, *base)
    assert rc == 2 and "the label 'a' is given twice" in err
    rc, err = _run(capsys, "--model", f"b=warp:{tmp_path}", *base)
    assert rc == 2 and "has no warp.pt" in err
    rc, err = _run(capsys, "--model", f"b=latent:{tmp_path}", *base)
    assert rc == 2 and "has no ae.pt, dynamics.pt" in err
    rc, err = _run(capsys, "--model", WARP, "--variants", "calibrated,bogus", *base)
    assert rc == 2 and "unknown variant(s) 'bogus'" in err
    rc, err = _run(capsys, "--model", WARP, "--variants-of", "a=zeroed,nope", *base)
    assert rc == 2 and "--variants-of" in err and "'nope'" in err
    assert not out.exists()


def test_out_that_is_not_an_earlier_result_is_refused(capsys, tmp_path: Path,
                                                      cells: Path) -> None:
    (tmp_path / "file").write_text("keep")
    rc, err = _run(capsys, "--model", WARP, "--data", str(cells), "--out",
                   str(tmp_path / "file"))
    assert rc == 2 and "an existing file" in err
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("keep")
    rc, err = _run(capsys, "--model", WARP, "--data", str(cells), "--out", str(other))
    assert rc == 2 and "without eval_frames.json" in err
    assert (tmp_path / "file").read_text() == "keep" and (other / "notes.txt").is_file()


def test_results_replace_an_earlier_result_whole(tmp_path: Path) -> None:
    from export.evaluation.frames import write_frames_eval

    out = tmp_path / "out"
    out.mkdir()
    (out / "eval_frames.json").write_text("{}")
    (out / "rollouts_old.png").write_bytes(b"stale")
    paths = write_frames_eval({"options": {"models": {}}, "splits": {}, "targets": {}}, out)
    assert sorted(p.name for p in out.iterdir()) == ["eval_frames.json", "eval_frames.txt"]
    assert json.loads((out / "eval_frames.json").read_text())["splits"] == {}
    assert set(paths) == {out / "eval_frames.json", out / "eval_frames.txt"}
