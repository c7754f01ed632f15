"""Bad simulate inputs end in one line naming the path and what was expected (exit 2),
never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

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


def test_sigterm_is_handled_as_ctrl_c_with_exit_143(monkeypatch, capsys) -> None:
    """SIGTERM (a service manager stopping a recording) was the default: the process died
    and kept nothing. It now raises in the main thread as Ctrl-C does (what a command keeps
    on Ctrl-C it keeps), exits 143, and the handler before it is put back."""
    import os
    import signal
    import time

    import edge.cli as cli_mod

    seen = {}

    def register(sub):
        p = sub.add_parser("wait")

        def func(_):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            except KeyboardInterrupt as exc:  # what record catches to keep its partial
                seen["caught"] = type(exc).__name__
                raise
            return 0

        p.set_defaults(func=func)

    monkeypatch.setattr(cli_mod, "entries", lambda group: ["wait"])
    monkeypatch.setattr(cli_mod, "load", lambda group, name: register)
    before = signal.getsignal(signal.SIGTERM)
    t0 = time.monotonic()
    code = main(["wait"])
    assert code == 143 and time.monotonic() - t0 < 4 and seen["caught"] == "Terminated"
    assert "terminated (SIGTERM)" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before
    # every other way out of main puts it back too (it stayed after --help's SystemExit)
    assert main([]) == 2
    for argv in (["--version"], ["wait", "--no-such-option"]):
        with pytest.raises(SystemExit):
            main(argv)
        assert signal.getsignal(signal.SIGTERM) is before


def test_a_folder_where_a_file_is_expected_is_named(tmp_path: Path, capsys) -> None:
    import argparse

    from edge.cli import run_parsed

    def opens_a_folder(_: argparse.Namespace) -> int:
        open(tmp_path, "rb")  # noqa: SIM115 - the error is the point
        return 0

    code = run_parsed(argparse.Namespace(func=opens_a_folder, command="bundle"))
    err = capsys.readouterr().err
    assert code == 2 and f"{tmp_path}: is a folder; expected a file" in err


def test_simulate_writes_the_predicted_frames_losslessly(tmp_path: Path) -> None:
    import numpy as np

    from edge.episode import load_episode
    from edge.runtime.context import encode_calibration
    from edge.runtime.model import load_model
    from edge.runtime.rollout import Rollout

    out = tmp_path / "o"
    assert main(BASE + ["--start", str(SAMPLE / "test.npz"), "--out", str(out)]) == 0
    with np.load(out / "prediction.npz", allow_pickle=False) as z:
        frames, times, names = z["frames"], z["step_times_s"], z["candidate_names"]
    ep = load_episode(SAMPLE / "test.npz")
    t = ep.num_frames - 1
    assert frames.dtype == np.uint8 and frames.shape == (1, t, 64, 64, 3)
    import json

    report = json.loads((out / "metrics.json").read_text())
    assert np.allclose(times, np.arange(1, t + 1) / 10.0) and list(names) == report["names"]
    m = load_model(ROOT / "models" / "reference")
    try:
        ctx = encode_calibration(m, load_episode(SAMPLE / "calibration.npz"))
        want = Rollout(m, ctx, max_horizon=t).run(ep.frames[0], ep.actions[None, :t])
    finally:
        m.deactivate()
    assert np.array_equal(frames, want)
