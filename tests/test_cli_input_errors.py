"""Bad simulate inputs end in one line naming the path and what was expected (exit 2),
never a traceback."""

from __future__ import annotations

from pathlib import Path

from edge.cli import main

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "cell_sample"
BASE = ["simulate", "--model", str(ROOT / "models" / "reference"), "--calibration",
        str(SAMPLE / "calibration.npz")]


def _run(args: list[str], capsys) -> tuple[int, str]:
    code = main(BASE + args)
    return code, capsys.readouterr().err


def test_an_empty_actions_file_is_named(tmp_path: Path, capsys) -> None:
    empty = tmp_path / "empty.npy"
    empty.write_bytes(b"")
    code, err = _run(["--start", str(SAMPLE / "test.npz"), "--actions", str(empty),
                      "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and f"{empty}: " in err and "empty" in err.lower()
    assert "Traceback" not in err


def test_a_folder_as_start_says_so(tmp_path: Path, capsys) -> None:
    code, err = _run(["--start", str(tmp_path), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "is a folder" in err and "found ''" not in err


def test_an_existing_file_as_out_says_so(tmp_path: Path, capsys) -> None:
    f = tmp_path / "taken"
    f.write_text("x")
    code, err = _run(["--start", str(SAMPLE / "test.npz"), "--out", str(f)], capsys)
    assert code == 2 and f"{f}: " in err and "folder" in err
    assert f.read_text() == "x"


def test_ctrl_c_is_one_line_and_exit_130(capsys) -> None:
    import argparse

    from edge.cli import run_parsed

    def interrupted(_: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    code = run_parsed(argparse.Namespace(func=interrupted, command="simulate"))
    assert code == 130 and "interrupted" in capsys.readouterr().err


def test_a_folder_where_a_file_is_expected_is_named(tmp_path: Path, capsys) -> None:
    import argparse

    from edge.cli import run_parsed

    def opens_a_folder(_: argparse.Namespace) -> int:
        open(tmp_path, "rb")  # noqa: SIM115 - the error is the point
        return 0

    code = run_parsed(argparse.Namespace(func=opens_a_folder, command="bundle"))
    err = capsys.readouterr().err
    assert code == 2 and f"{tmp_path}: is a folder; expected a file" in err
