"""Shared pieces of the virtual-cell calibration tests: the model, the CLI, recordings."""

from __future__ import annotations

from pathlib import Path

from edge.calibrate.assemble import AssembleOptions, assemble_episode
from edge.calibrate.camera import open_camera
from edge.calibrate.check import EpisodeArrays, check_arrays
from edge.calibrate.plan import JointProgram, plan_sweep
from edge.calibrate.record import RawRecording, RecordOptions, record
from edge.commands import calibrate
from edge.commands.common import run_command
from edge.episode import Episode

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


def record_sim(camera_query: str = "", joint_query: str = "", seed: int = 5
               ) -> tuple[RawRecording, Episode, bool, list]:
    """Record the test cell through the API: ``(raw, episode, complete, truth)``."""
    from firmware_bridge.url import stream_for_url

    prog = program(seed)
    cam = open_camera(CELL + camera_query)
    js = calibrate.open_joints(CELL + joint_query)
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


def codes(camera_query: str = "", joint_query: str = "") -> dict:
    """The check report of a recording with these virtual-cell options."""
    _, ep, _, _ = record_sim(camera_query, joint_query)
    return check_arrays(EpisodeArrays.from_episode(ep))
