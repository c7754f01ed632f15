"""Shared pieces of the virtual-cell calibration tests: the model, the CLI, recordings."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edge.calibrate.assemble import AssembleOptions, assemble_episode
from edge.calibrate.camera import open_camera
from edge.calibrate.check import EpisodeArrays, check_arrays
from edge.calibrate.plan import JointProgram, plan_sweep
from edge.calibrate.record import RawRecording, RecordOptions, record
from edge.calibrate.sources import open_joints
from edge.commands import calibrate
from edge.commands.common import run_command
from edge.episode import Episode, EpisodeMetadata, actions_from_positions

ROOT = Path(__file__).resolve().parents[1]
CELL = "sim://cell?split=test_all&seed=3"
REFERENCE_MODEL = ROOT / "models" / "reference"


def model_dir() -> Path:
    """The reference model when present, else a tiny synthetic one at the contract's sizes
    that matter here (64x64 frames, 7 DoFs, 8-frame segments)."""
    if (REFERENCE_MODEL / "model.json").is_file():
        return REFERENCE_MODEL
    from tests.fixtures.runtime import tiny_model_dir

    return tiny_model_dir(height=64, width=64, lat_h=8, lat_w=8, dof=7, segment=8,
                          batches=(1,))


def cli(*argv: str) -> int:
    """Run ``syncedge calibrate ARGV`` in-process; returns the exit code."""
    return run_command("calibrate", calibrate.register, list(argv))


def program(seed: int = 5) -> JointProgram:
    """The sweep program of the test cell."""
    import export.cells.virtual as virtual

    return plan_sweep(virtual.virtual_robot_spec("test_all", 3), seed)


def record_sim(camera_query: str = "", joint_query: str = "", seed: int = 5,
               camera_latency_s: float | None = None, prog: JointProgram | None = None
               ) -> tuple[RawRecording, Episode, bool, list]:
    """Record the test cell through the API: ``(raw, episode, complete, truth)``;
    ``camera_latency_s``: the latency the recorder corrects by (default the simulated
    camera's own, ``latency_ms``), as ``calibrate record --camera-latency-s`` sets it;
    ``prog``: the program (default :func:`program` of ``seed``, the model's timing)."""
    from firmware_bridge.url import stream_for_url

    prog = prog or program(seed)
    cam = open_camera(CELL + camera_query, camera_latency_s)
    js = open_joints(CELL + joint_query)
    try:
        raw = record(cam, js, prog, RecordOptions())
    finally:
        truth = list(cam.cell.truth)
        cam.close()
        js.close()
    assert stream_for_url  # the bridge opened the sim scheme
    ep, complete = assemble_episode(raw, prog, AssembleOptions(
        (64, 64), "cell-3", "cell-3-cam", "cell-3-kinova3", camera_latency_s=cam.latency_s,
        joint_latency_s=js.latency_s))
    return raw, ep, complete, truth


def codes(camera_query: str = "", joint_query: str = "",
          camera_latency_s: float | None = None) -> dict:
    """The check report of a recording with these virtual-cell options."""
    _, ep, _, _ = record_sim(camera_query, joint_query, camera_latency_s=camera_latency_s)
    return check_arrays(EpisodeArrays.from_episode(ep))


def sweep_episode(kind: str = "calibration") -> Episode:
    """Cell ``cell-1``/``cam-1``/``robot-1``, 7 DoFs, 64x64, 10 Hz, with joint positions.

    ``calibration``: every DoF swept out and back in the planner's 8-frame segments (57
    frames), each DoF brightening its own band of the picture, so the check passes.
    ``validation``: 24 frames of small random motion of every DoF."""
    n, seg = 7, 8
    q = np.zeros((n * seg + 1, n))
    rng = np.random.default_rng(3)
    for k in range(n):
        amp = rng.uniform(0.3, 0.5) * rng.choice([-1, 1])
        steps = np.array([0.25, 0.5, 0.25, 0, -0.25, -0.5, -0.25, 0]) * amp
        q[k * seg + 1:(k + 1) * seg + 1, k] = np.cumsum(steps)
    if kind == "validation":
        q = np.cumsum(rng.normal(0, 0.03, (24, n)), axis=0)
    frames = np.full((len(q), 64, 64, 3), 40, np.uint8)
    for k in range(n):
        frames[:, :, 9 * k:9 * k + 8, :] = (120 + 200 * q[:, k])[:, None, None, None] \
            .clip(0, 255).astype(np.uint8)
    meta = EpisodeMetadata("cell-1", "cam-1", "robot-1", "toy", tuple(f"j{i}" for i in
                                                                       range(n)),
                           ("rad",) * n, 10.0, kind=kind, source="test")
    return Episode(frames, actions_from_positions(q), np.arange(len(q)) / 10.0, meta,
                   joint_positions=q)


def camera_rate_sweep_episode(fps: float = 30.0, extra_still: int = 0) -> Episode:
    """A calibration at a camera's rate (not the model's): cell ``cell-1``, 7 DoFs, 64x64,
    each swept out over 1 s (smooth), held 0.3 s, back over 1 s, held 0.4 s, one after
    another (0.5 s still before them, 1.5 s after), each brightening its own band of the picture (as :func:`sweep_episode`);
    ``extra_still`` more joints that never move (gripper fingers), with no band."""
    n = 7
    out_s, hold_s, back_s, rest_s = 1.0, 0.3, 1.0, 0.4
    period = out_s + hold_s + back_s + rest_s
    t = np.arange(int(round((n * period + 2.0) * fps)) + 1) / fps  # 0.5 s before, 1.5 after
    rng = np.random.default_rng(3)
    amps = rng.uniform(0.3, 0.5, n) * rng.choice([-1, 1], n)
    q = np.zeros((len(t), n + extra_still))
    for k in range(n):
        u = t - 0.5 - k * period  # time into DoF k's sweep
        up = np.clip(u / out_s, 0, 1)
        down = np.clip((u - out_s - hold_s) / back_s, 0, 1)
        q[:, k] = amps[k] * (0.5 - 0.5 * np.cos(np.pi * up) - (0.5 - 0.5 * np.cos(np.pi * down)))
    q[:, n:] = 0.02
    frames = np.full((len(q), 64, 64, 3), 40, np.uint8)
    for k in range(n):
        frames[:, :, 9 * k:9 * k + 8, :] = (120 + 200 * q[:, k])[:, None, None, None] \
            .clip(0, 255).astype(np.uint8)
    names = tuple(f"j{i}" for i in range(n)) + tuple(f"finger{i}" for i in range(extra_still))
    meta = EpisodeMetadata("cell-1", "cam-1", "robot-1", "toy", names, ("rad",) * len(names),
                           fps, kind="calibration", source="test")
    return Episode(frames, actions_from_positions(q), t, meta, joint_positions=q)
