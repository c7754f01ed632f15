"""Bad input to the export, cells, model-evaluation and bundle commands: one line naming
the path or option and what was expected, exit code 2, nothing half-written; and model
folders published whole (``edge.fileio.staged_folder``)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from tiny_model import make_tiny_model  # noqa: E402

from edge.cli import main  # noqa: E402
from edge.fileio import atomic_write, check_file_target, staged_folder  # noqa: E402
from export.errors import ExportError  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def _run(capsys, *argv: str) -> tuple[int, str]:
    """Exit code and stderr of ``syncedge ARGV`` (argparse's exit included)."""
    try:
        rc = main(list(argv))
    except SystemExit as exc:
        rc = int(exc.code or 0)
    return rc, capsys.readouterr().err


# -- staged model folders ------------------------------------------------------------------
def test_staged_folder_replaces_the_whole_folder(tmp_path) -> None:
    out = tmp_path / "model"
    out.mkdir()
    (out / "model.json").write_text("{}")
    (out / "step_b8.onnx").write_text("old graph")
    with staged_folder(out, "model.json") as stage:
        assert stage != out and stage.parent == out.parent
        (stage / "model.json").write_text('{"new": 1}')
    assert sorted(p.name for p in out.iterdir()) == ["model.json"]  # b8 of before is gone
    assert json.loads((out / "model.json").read_text()) == {"new": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no staging left
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~umask  # not mkdtemp's 0700


def test_staged_folder_failure_leaves_out_untouched(tmp_path) -> None:
    out = tmp_path / "model"
    out.mkdir()
    (out / "model.json").write_text("{}")
    with pytest.raises(RuntimeError, match="graph failed"):
        with staged_folder(out, "model.json") as stage:
            (stage / "encoder.onnx").write_text("half")
            raise RuntimeError("graph failed")
    assert sorted(p.name for p in out.iterdir()) == ["model.json"]
    assert (out / "model.json").read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    new = tmp_path / "new"
    with pytest.raises(RuntimeError):
        with staged_folder(new, "model.json"):
            raise RuntimeError("graph failed")
    assert not new.exists()  # a failed first export creates no empty --out


def test_staged_folder_puts_the_earlier_folder_back_when_publishing_fails(
        tmp_path, monkeypatch) -> None:
    import edge.fileio as fileio

    out = tmp_path / "model"
    out.mkdir()
    (out / "model.json").write_text("earlier")
    real = os.replace

    def fail_publish(src, dst) -> None:
        if ".staging-" in str(src):
            raise OSError(28, "No space left on device", str(dst))
        real(src, dst)

    monkeypatch.setattr(fileio.os, "replace", fail_publish)
    with pytest.raises(OSError, match="No space left"):
        with staged_folder(out, "model.json") as stage:
            (stage / "model.json").write_text("new")
    assert (out / "model.json").read_text() == "earlier"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_staged_folder_refuses_a_file_and_a_foreign_folder(tmp_path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError) as e:
        with staged_folder(tmp_path / "file", "model.json"):
            pass
    assert e.value.filename == str(tmp_path / "file")
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "a.png").write_text("x")
    with pytest.raises(FileExistsError, match="a folder of other files, without model.json"):
        with staged_folder(foreign, "model.json"):
            pass
    assert (foreign / "a.png").is_file()
    with staged_folder(tmp_path / "empty", "model.json") as stage:  # an empty one is fine
        (stage / "model.json").write_text("{}")
    assert (tmp_path / "empty" / "model.json").is_file()


def test_staged_folder_names_the_folder_asked_for_when_staging_fails(tmp_path,
                                                                     monkeypatch) -> None:
    import errno
    import tempfile

    def full(**kw):  # the parent is read-only or full: mkdtemp names its own temporary
        raise PermissionError(errno.EACCES, "Permission denied",
                              str(Path(kw["dir"]) / ".model.staging-x1y2"))

    monkeypatch.setattr(tempfile, "mkdtemp", full)
    with pytest.raises(PermissionError) as e:
        with staged_folder(tmp_path / "model", "model.json"):
            pass
    assert e.value.filename == str(tmp_path / "model")


def test_atomic_write_to_a_folder_names_the_folder(tmp_path) -> None:
    with pytest.raises(IsADirectoryError) as e:
        atomic_write(tmp_path, lambda f: f.write(b"x"))
    assert e.value.filename == str(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == []  # no temporary left
    with pytest.raises(FileExistsError):
        check_file_target(__file__)
    assert check_file_target(__file__, overwrite=True) == Path(__file__)
    # a device node or a pipe is never written over (os.replace would replace the node)
    import os
    import stat

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for call in (lambda: check_file_target(fifo, overwrite=True),
                 lambda: atomic_write(fifo, lambda f: f.write(b"x"))):
        with pytest.raises(FileExistsError, match="not a regular file") as e:
            call()
        assert e.value.filename == str(fifo)
    assert stat.S_ISFIFO(fifo.stat().st_mode) and sorted(tmp_path.iterdir()) == [fifo]


def test_atomic_write_failures_name_the_file_asked_for_not_the_temporary(tmp_path,
                                                                         monkeypatch) -> None:
    import tempfile

    target = tmp_path / "x.bundle"

    def denied(*a, **k):
        raise PermissionError(13, "Permission denied", str(tmp_path / ".x.bundle.abc.tmp"))
    monkeypatch.setattr(tempfile, "mkstemp", denied)
    with pytest.raises(PermissionError) as e:
        atomic_write(target, lambda f: f.write(b"x"))
    assert e.value.filename == str(target)
    monkeypatch.undo()

    def full(f):
        raise OSError(28, "No space left on device")  # no filename: the write itself
    with pytest.raises(OSError) as e:
        atomic_write(target, full)
    assert e.value.filename == str(target) and e.value.errno == 28
    assert list(tmp_path.iterdir()) == []  # no temporary left


def test_quantise_failure_leaves_no_folder(tmp_path, monkeypatch) -> None:
    from export.variants import quantise

    src = make_tiny_model(tmp_path / "m")
    calls = []

    def fail_second(a, b) -> None:
        calls.append(a)
        if len(calls) == 2:
            raise ExportError("conversion failed")
        Path(b).write_bytes(Path(a).read_bytes())

    monkeypatch.setattr(quantise, "convert_fp16", fail_second)
    with pytest.raises(ExportError, match="conversion failed"):
        quantise.quantise_model(quantise.QuantiseOptions(str(src), "fp16", str(tmp_path / "h")))
    assert not (tmp_path / "h").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_quantise_replaces_an_earlier_variant_folder(tmp_path) -> None:
    from export.variants.quantise import QuantiseOptions, quantise_model

    src = make_tiny_model(tmp_path / "m")
    out = tmp_path / "h"
    quantise_model(QuantiseOptions(str(src), "fp16", str(out)))
    (out / "step_b8.onnx").write_text("a graph of an earlier export")
    quantise_model(QuantiseOptions(str(src), "fp16", str(out)))
    assert not (out / "step_b8.onnx").exists()
    assert (out / "model.json").is_file()


def test_quantise_refuses_a_file_out_before_work(tmp_path, capsys) -> None:
    src = make_tiny_model(tmp_path / "m")
    (tmp_path / "taken").write_text("x")
    rc, err = _run(capsys, "export", "quantise", str(src), "--variant", "fp16", "--out",
                   str(tmp_path / "taken"))
    assert rc == 2 and f"{tmp_path / 'taken'}: an existing file; give another path" in err
    assert (tmp_path / "taken").read_text() == "x"


# -- run folders and checkpoints -------------------------------------------------------------
@pytest.mark.parametrize("what", ["missing", "file", "model", "empty"])
def test_export_onnx_names_a_bad_run_folder(tmp_path, capsys, what) -> None:
    run = tmp_path / "run"
    expected = {"missing": "no such folder", "file": "a file",
                "model": "a model folder (model.json), not a training run",
                "empty": "no warp.pt, ae.pt or dynamics.pt there"}[what]
    if what == "file":
        run.write_text("x")
    elif what == "model":
        make_tiny_model(run)
    elif what == "empty":
        run.mkdir()
    rc, err = _run(capsys, "export", "onnx", "--run", str(run), "--out", str(tmp_path / "o"))
    assert rc == 2
    assert f"--run {run}: {expected}" in err and "models/reference-checkpoints" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("content", [b"garbage\n", b"PK\x03\x04" + b"\0" * 200])
def test_a_damaged_warp_checkpoint_is_one_line(tmp_path, capsys, content) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "warp.pt").write_bytes(content)
    rc, err = _run(capsys, "export", "onnx", "--run", str(run), "--out", str(tmp_path / "o"))
    assert rc == 2 and f"{run / 'warp.pt'}: not a readable checkpoint" in err
    assert "Traceback" not in err and not (tmp_path / "o").exists()


def test_a_checkpoint_of_another_kind_is_named(tmp_path) -> None:
    import torch

    from export.variants.warp_export import load_warp_checkpoint

    run = tmp_path / "run"
    run.mkdir()
    torch.save({"weights": {}}, run / "warp.pt")  # a dictionary without the warp keys
    with pytest.raises(ExportError, match=r"warp\.pt: not a warp checkpoint of this version"):
        load_warp_checkpoint(run)


# -- check-ops ---------------------------------------------------------------------------------
def test_check_ops_of_a_damaged_onnx_file(tmp_path, capsys) -> None:
    src = make_tiny_model(tmp_path / "m")
    graph = next(src.glob("*.onnx"))
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(graph.read_bytes()[:20])
    rc, err = _run(capsys, "export", "check-ops", str(bad))
    assert rc == 2 and f"{bad}: not a readable ONNX model" in err and "Traceback" not in err
    rc, err = _run(capsys, "export", "check-ops", str(REPO / "samples/cell_sample/test.npz"))
    assert rc == 2 and "neither a model folder (model.json) nor an .onnx file" in err


# -- whole numbers -------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, option", [
    (["cells", "generate", "--split", "val", "--out", "X", "--cells-per-chunk", "0"],
     "--cells-per-chunk"),
    (["cells", "generate", "--split", "val", "--out", "X", "--size", "0"], "--size"),
    (["cells", "generate", "--split", "val", "--out", "X", "--motion-frames", "1"],
     "--motion-frames"),
    (["cells", "preview", "--count", "0"], "--count"),
    (["export", "quantise", "M", "--variant", "fp16", "--out", "X", "--samples", "0"],
     "--samples"),
    (["export", "check", "M", "--run", "R", "--data", "D", "--max-cells", "0"], "--max-cells"),
    (["export", "check", "M", "--run", "R", "--data", "D", "--horizon", "0"], "--horizon"),
    (["export", "onnx", "--run", "R", "--out", "X", "--batch-sizes", "1", "0"],
     "--batch-sizes"),
    (["model", "eval", "--horizon", "0"], "--horizon"),
    (["model", "eval", "--max-cells", "0"], "--max-cells"),
])
def test_counts_below_their_bound_are_refused_before_work(tmp_path, capsys, monkeypatch,
                                                          argv, option) -> None:
    monkeypatch.chdir(tmp_path)
    rc, err = _run(capsys, *argv)
    assert rc == 2 and option in err and "expected a whole number >=" in err
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("option", ["--fp32-max-abs", "--int8-loss-db", "--fp16-loss-db"])
@pytest.mark.parametrize("value", ["nan", "inf", "-0.5", "loose"])
def test_a_gate_limit_that_is_no_number_is_refused_before_the_check(tmp_path, capsys,
                                                                    monkeypatch, option,
                                                                    value) -> None:
    # a NaN limit ran the whole check, recorded "failed, limit None" over a passed record
    # and then died formatting the table
    monkeypatch.chdir(tmp_path)
    rc, err = _run(capsys, "export", "check", "M", "--run", "R", "--data", "D",
                   f"{option}={value}")
    assert rc == 2 and option in err and "expected a finite number >= 0" in err
    assert list(tmp_path.iterdir()) == []  # nothing written


# -- cells -----------------------------------------------------------------------------------------
def test_preview_of_the_sample_cell_folder_skips_its_chain_calibrations(tmp_path,
                                                                       capsys) -> None:
    from export.cells.preview import load_cell_dir

    eps = load_cell_dir(REPO / "samples/cell_sample")
    assert "test" in eps and "calibration" in eps
    assert not {"chain", "chain_motion"} & set(eps)
    out = tmp_path / "sample.png"  # the README's command: 64 px episodes beside 256 px ones
    rc = main(["cells", "preview", "--episode", str(REPO / "samples/cell_sample"), "--out",
               str(out)])
    printed = capsys.readouterr().out
    assert rc == 0 and out.stat().st_size > 1000
    assert "left out at another resolution than 64x64: calibration_256, commissioning_256" \
        in printed
    rc, err = _run(capsys, "cells", "preview", "--episode", str(tmp_path / "nowhere"),
                   "--out", str(tmp_path / "p.png"))
    assert rc == 2 and f"{tmp_path / 'nowhere'}" in err and "no such episode file or cell " \
        "folder" in err
    rc, err = _run(capsys, "cells", "preview", "--episode", str(REPO / "samples/cell_sample"),
                   "--out", str(tmp_path))
    assert rc == 2 and f"{tmp_path}: is a folder; expected a file" in err


# -- bundles and keys --------------------------------------------------------------------------------
def test_keygen_refuses_a_name_that_is_a_path_and_a_file_out(tmp_path, capsys) -> None:
    rc, err = _run(capsys, "bundle", "keygen", "--out", str(tmp_path / "k"), "--name",
                   "../../escape")
    assert rc == 2 and "--name '../../escape': expected a plain file name stem" in err
    assert not list(tmp_path.rglob("*.pem"))
    (tmp_path / "f").write_text("x")
    rc, err = _run(capsys, "bundle", "keygen", "--out", str(tmp_path / "f"))
    assert rc == 2 and f"--out {tmp_path / 'f'}: an existing file" in err


def test_bundle_build_never_overwrites_and_names_a_folder_out(tmp_path, capsys) -> None:
    src = make_tiny_model(tmp_path / "m")
    assert _run(capsys, "bundle", "keygen", "--out", str(tmp_path / "k"))[0] == 0
    key = str(tmp_path / "k" / "oem.key.pem")
    (tmp_path / "old.bundle").write_bytes(b"the installed one")
    rc, err = _run(capsys, "bundle", "build", str(src), "--target", "cpu", "--key", key,
                   "--out", str(tmp_path / "old.bundle"))
    assert rc == 2 and f"{tmp_path / 'old.bundle'}: already exists" in err
    assert (tmp_path / "old.bundle").read_bytes() == b"the installed one"
    folder = tmp_path / "dir"
    folder.mkdir()
    rc, err = _run(capsys, "bundle", "build", str(src), "--target", "cpu", "--key", key,
                   "--out", str(folder))
    assert rc == 2 and f"{folder}: is a folder; expected a file" in err and ".tmp" not in err
    rc, err = _run(capsys, "bundle", "verify", str(folder))
    assert rc == 2 and f"{folder}: a folder; expected a bundle file" in err


def test_export_check_refuses_its_out_and_run_before_the_check(tmp_path, capsys) -> None:
    src = make_tiny_model(tmp_path / "m")
    (tmp_path / "parity.json").write_text("{}")
    rc, err = _run(capsys, "export", "check", str(src), "--run", str(tmp_path / "run"),
                   "--data", str(tmp_path / "cells"), "--out", str(tmp_path / "parity.json"))
    assert rc == 2 and f"{tmp_path / 'parity.json'}: already exists" in err
    rc, err = _run(capsys, "export", "check", str(src), "--run", str(tmp_path / "run"),
                   "--data", str(tmp_path / "cells"), "--out", str(tmp_path))
    assert rc == 2 and f"{tmp_path}: is a folder; expected a file" in err
    rc, err = _run(capsys, "export", "check", str(src), "--run", str(tmp_path / "run"),
                   "--data", str(tmp_path / "cells"))
    assert rc == 2 and f"--run {tmp_path / 'run'}: no such folder" in err
    assert (tmp_path / "parity.json").read_text() == "{}"


def test_a_file_as_the_cells_folder_is_named(tmp_path) -> None:
    from export.train.data import load_cells

    (tmp_path / "cells.npz").write_text("x")
    with pytest.raises(ExportError, match=r"cells\.npz: a file; expected the cells folder"):
        load_cells(tmp_path / "cells.npz", ["train"])


@pytest.mark.parametrize("argv", [
    ["export", "check-ops", "{m}"], ["export", "upgrade", "{m}"],
    ["simulate", "--model", "{m}", "--start", "samples/cell_sample/test.npz",
     "--calibration", "samples/cell_sample/calibration.npz", "--out", "{out}"],
])
def test_a_model_path_that_is_no_folder_says_what_it_is(tmp_path, capsys, monkeypatch,
                                                        argv) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    out = tmp_path / "sim"
    bundle = tmp_path / "int8-cpu.bundle"
    bundle.write_bytes(b"\x1f\x8b")
    as_bundle = ("neither a model folder (model.json) nor an .onnx file"
                 if argv[1] == "check-ops" else
                 f"a bundle file, not a model folder; install it ('syncedge bundle install "
                 f"{bundle}')")
    for model, says in ((tmp_path / "nope", "no such model folder"), (bundle, as_bundle)):
        rc, err = _run(capsys, *(a.format(m=model, out=out) for a in argv))
        assert rc == 2 and f"{model}: {says}" in err, err
    assert not out.exists() and not (tmp_path / "nope").exists()
