"""What the chain model's commands put in their outputs and messages: the rollout's frame
rate, the channels a chain does not model, the anchoring decision of ``calibrate validate
--chain``, and names where indices were printed."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np

from edge.cli import main
from edge.episode import load_episode
from edge.runtime.chain import load_chain_calibration, save_chain_calibration
from tests.helpers import precheck_kit_argv

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "cell_sample"
CHAIN = SAMPLE / "chain.npz"
KIT = ROOT / "samples" / "precheck"


def _chain_with_info(tmp_path: Path, name: str, **calibration) -> Path:
    """The sample chain with ``info.calibration`` updated by ``calibration``."""
    chain = load_chain_calibration(CHAIN)
    info = {**chain.info, "calibration": {**chain.info["calibration"], **calibration}}
    return save_chain_calibration(tmp_path / name, dataclasses.replace(chain, info=info))


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
    assert main(precheck_kit_argv(tmp_path / "pc", chain30)) == 0
    rep = json.loads((tmp_path / "pc" / "report.json").read_text())
    with np.load(tmp_path / "pc" / "prediction.npz") as z:
        t = z["step_times_s"]
    np.testing.assert_allclose(t, np.arange(1, len(t) + 1) / 10.0)
    assert rep["frame_rate_hz"] == 10.0 and "the start episode" in rep["frame_rate_from"]


def _three_channel_calibration(tmp_path: Path) -> tuple[Path, float]:
    """The two-link sweep of tests/test_chain_fit.py (128x128 for a 32x32 grid) with a
    third channel, ``wrist``, whose sweep moves nothing the camera sees."""
    from edge.episode import CalibrationSegment, Episode, EpisodeMetadata, save_episode
    from tests.test_chain_fit import SIZE, F, TwoLinkArm, _render_sweep

    arm = TwoLinkArm()
    q2, _ = arm.sweep()
    frames2 = _render_sweep(arm, q2, 4)
    q = np.concatenate([np.concatenate([q2, np.zeros((8, 2))]), np.zeros((25, 1))], 1)
    q[17:25, 2] = [0.1, 0.3, 0.4, 0.4, 0.3, 0.1, 0.0, 0.0]
    frames = np.concatenate([frames2, np.repeat(frames2[:1], 8, 0)])
    fovy = float(np.degrees(2 * np.arctan(0.5 * SIZE / F)))
    meta = EpisodeMetadata(
        cell_id="three-ch", camera_id="cam", robot_id="arm", robot="two-link",
        dof_names=("shoulder", "elbow", "wrist"), dof_units=("rad", "rad", "rad"), fps=10.0,
        kind="calibration", camera={"fovy_deg": fovy},
        segments=(CalibrationSegment("shoulder", 0, 8, 0.4),
                  CalibrationSegment("elbow", 8, 16, 0.4),
                  CalibrationSegment("wrist", 16, 24, 0.4)))
    acts = np.zeros((len(q), 3), np.float32)
    acts[:-1] = np.diff(q, axis=0)
    ep = Episode(frames, acts, np.arange(len(q)) / 10.0, meta, joint_positions=q)
    return save_episode(ep, tmp_path / "cal3.npz"), fovy


def test_a_channel_the_chain_does_not_model_is_named_everywhere(tmp_path, capsys):
    """A channel whose sweep moves no arm pixel gets a zero axis and carries nothing: it
    was left out silently ("(1 of 2 channels)" in the log, ok elsewhere) and turning it
    alone predicted no change. read-chain, chain.json, calibrate store --chain and
    simulate / precheck with actions on it now name it and say why."""
    from tests.test_chain_fit import SIZE

    cal, _ = _three_channel_calibration(tmp_path)
    out = tmp_path / "chain.npz"
    assert main(["model", "read-chain", "--calibration", str(cal), "--out", str(out),
                 "--grid", str(SIZE), "--photometric", "0", "--threads", "1"]) == 0
    cap = capsys.readouterr()
    log = cap.out + cap.err
    chain = load_chain_calibration(out)
    assert not chain.axes[2].any() and not chain.carried[2].any()
    assert re.search(r"warning: .*wrist.*not modelled", log), log
    assert "moved 0 arm pixels" in log
    report = json.loads(out.with_suffix(".json").read_text())
    (row,) = report["unmodelled_channels"]
    assert row["channel"] == "wrist" and row["index"] == 2 and "moved 0 arm pixels" in \
        row["why"]
    assert chain.info["unmodelled_channels"] == report["unmodelled_channels"]
    # stored in the cache: said on store
    cache = str(tmp_path / "cache")
    assert main(["calibrate", "store", str(cal), "--chain", str(out), "--cache-dir", cache,
                 "--force", "synthetic sweep"]) == 0
    cap = capsys.readouterr()
    assert re.search(r"warning: .*wrist.*not modelled", cap.out + cap.err)
    # a start held at home, actions turning the wrist only: said once, naming it
    from edge.episode import save_episode

    ep = load_episode(cal)
    small = ep.frames.reshape(len(ep.frames), SIZE, 4, SIZE, 4, 3).mean((2, 4)).round() \
        .astype(np.uint8)
    still = dataclasses.replace(ep, frames=np.repeat(small[:1], 5, 0),
                                actions=np.zeros((5, 3), np.float32),
                                timestamps=np.arange(5) / 10.0,
                                joint_positions=np.repeat(ep.joint_positions[:1], 5, 0),
                                metadata=dataclasses.replace(ep.metadata, kind="motion",
                                                             segments=()),
                                robot_mask=None, ee_px=None)
    start = save_episode(still, tmp_path / "still.npz")
    acts = np.zeros((2, 4, 3), np.float32)
    acts[0, :, 2] = 0.1
    np.save(tmp_path / "acts.npy", acts)
    assert main(["simulate", "--chain", str(out), "--start", str(start), "--actions",
                 str(tmp_path / "acts.npy"), "--out", str(tmp_path / "sim")]) == 0
    err = capsys.readouterr().err
    said = [ln for ln in err.splitlines() if "not predicted" in ln]
    assert len(said) == 1 and "wrist" in said[0] and "shoulder" not in said[0], err
    m = json.loads((tmp_path / "sim" / "metrics.json").read_text())
    assert any("wrist" in w and "not predicted" in w for w in m["warnings"])
    # actions that leave it still: nothing said
    acts[0, :, 2] = 0.0
    acts[0, :, 0] = 0.05
    np.save(tmp_path / "acts.npy", acts)
    assert main(["simulate", "--chain", str(out), "--start", str(start), "--actions",
                 str(tmp_path / "acts.npy"), "--out", str(tmp_path / "sim2")]) == 0
    assert "not predicted" not in capsys.readouterr().err


def test_a_chain_stored_with_the_sweep_at_another_resolution_says_so(tmp_path, capsys):
    """The sample chain was read from the 256x256 recording of the sweep; storing it with a
    64x64 recording of the same sweep whose render differs by more than 2 levels (a lit
    cell's shaded edges: 3.3 on the virtual cell) was refused as "read from another
    calibration episode". The refusal now names both resolutions and the episode to
    store."""
    import cv2

    from edge.episode import save_episode

    chain = load_chain_calibration(CHAIN)
    assert chain.info["calibration"]["resolution"] == [256, 256]
    ep = load_episode(SAMPLE / "calibration_256.npz")
    small = np.stack([cv2.resize(f, (64, 64), interpolation=cv2.INTER_AREA)
                      for f in ep.frames]).astype(np.int16)
    small = np.clip(small + 4, 0, 255).astype(np.uint8)  # rendered a little brighter
    cal64 = save_episode(dataclasses.replace(ep, frames=small, robot_mask=None, ee_px=None),
                         tmp_path / "cal64.npz")
    assert main(["calibrate", "store", str(cal64), "--chain", str(CHAIN), "--cache-dir",
                 str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "256x256" in err and "64x64" in err, err
    assert "samples/cell_sample/calibration_256.npz" in err, err
    assert "another calibration episode" not in err, err
    # the same sweep recorded at the chain's own resolution, unchanged, is still stored
    assert main(["calibrate", "store", str(SAMPLE / "calibration_256.npz"), "--chain",
                 str(CHAIN), "--cache-dir", str(tmp_path / "cache")]) == 0
