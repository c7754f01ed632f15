"""What the chain model's commands put in their outputs and messages: the rollout's frame
rate, the channels a chain does not model, the anchoring decision of ``calibrate validate
--chain``, and names where indices were printed."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from pathlib import Path

import numpy as np

from edge.cli import main
from edge.episode import load_episode
from edge.runtime.chain import load_chain_calibration, save_chain_calibration

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "cell_sample"
CHAIN = SAMPLE / "chain.npz"
KIT = ROOT / "samples" / "precheck"


def _chain_with_info(tmp_path: Path, name: str, **calibration) -> Path:
    """The sample chain with ``info.calibration`` updated by ``calibration``."""
    chain = load_chain_calibration(CHAIN)
    info = {**chain.info, "calibration": {**chain.info["calibration"], **calibration}}
    return save_chain_calibration(tmp_path / name, dataclasses.replace(chain, info=info))


def _kit_argv(out: Path, chain: Path) -> list[str]:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"^(syncedge precheck --model models/reference .*?)(?<!\\)$", text,
                  re.M | re.S)
    assert m
    argv = shlex.split(m.group(1).replace("\\\n", " "))[1:]
    for flag in ("--model", "--calibration"):
        i = argv.index(flag)
        del argv[i:i + 2]
    argv[argv.index("--out") + 1] = str(out)
    return [*argv, "--chain", str(chain)]


def test_a_chain_read_at_30_hz_rolls_out_at_the_start_episode_s_rate(tmp_path, capsys,
                                                                     monkeypatch):
    """A 10 Hz start episode with a chain read from a 30 Hz sweep: the actions are per
    frame of the start episode, so the outputs are at 10 Hz (they were at 30 Hz, 3x too
    fast); a bare frame start takes the calibration's 30 Hz, and both say which."""
    import cv2

    chain30 = _chain_with_info(tmp_path, "chain30.npz", fps=30.0)
    test = load_episode(SAMPLE / "test.npz")
    assert test.metadata.fps == 10.0
    out = tmp_path / "sim"
    assert main(["simulate", "--chain", str(chain30), "--start", str(SAMPLE / "test.npz"),
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    horizon = test.num_frames - 1
    with np.load(out / "prediction.npz") as z:
        np.testing.assert_allclose(z["step_times_s"], np.arange(1, horizon + 1) / 10.0)
    cap = cv2.VideoCapture(str(out / "prediction.mp4"))
    assert abs(cap.get(cv2.CAP_PROP_FPS) - 10.0) < 0.01
    cap.release()
    m = json.loads((out / "metrics.json").read_text())
    assert m["frame_rate_hz"] == 10.0
    assert "the start episode" in m["frame_rate_from"]
    assert "at 10 Hz (the start episode's" in printed

    # a bare frame: nothing but the chain's calibration gives a rate
    start = tmp_path / "start.npy"
    np.save(start, test.frames[0])
    acts = tmp_path / "zero.npy"
    np.save(acts, np.zeros((1, 4, 7), np.float32))
    q = ",".join(f"{x:.9f}" for x in test.joint_positions[0])
    assert main(["simulate", "--chain", str(chain30), "--start", str(start), "--actions",
                 str(acts), f"--start-joints={q}", "--out", str(tmp_path / "frame")]) == 0
    printed = capsys.readouterr().out
    with np.load(tmp_path / "frame" / "prediction.npz") as z:
        np.testing.assert_allclose(z["step_times_s"], np.arange(1, 5) / 30.0)
    m = json.loads((tmp_path / "frame" / "metrics.json").read_text())
    assert m["frame_rate_hz"] == 30.0 and "calibration" in m["frame_rate_from"]
    assert "at 30 Hz (the chain's calibration" in printed

    # precheck from the same 10 Hz start
    monkeypatch.chdir(ROOT)
    assert main(_kit_argv(tmp_path / "pc", chain30)) == 0
    rep = json.loads((tmp_path / "pc" / "report.json").read_text())
    with np.load(tmp_path / "pc" / "prediction.npz") as z:
        t = z["step_times_s"]
    np.testing.assert_allclose(t, np.arange(1, len(t) + 1) / 10.0)
    assert rep["frame_rate_hz"] == 10.0 and "the start episode" in rep["frame_rate_from"]
