"""Calibration ingest (edge.calibrate.ingest): sweeps of any timing into the model's.

Synthetic action arrays only: a sweep of each DoF in turn with a given camera rate, phase
duration, pause, amplitude, order and sign (linear or eased, as a drive with acceleration
limits moves). Each frame's pixels carry its own index, so the test can see which recorded
frame became which output frame.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import numpy as np
import pytest

from edge.calibrate.ingest import (
    IngestError,
    IngestOptions,
    ingest_calibration,
    normalise_calibration,
    positions_at_frames,
    segment_sweeps,
)
from edge.calibrate.plan import SWEEP_PROFILE
from edge.episode import Episode, EpisodeMetadata, actions_from_positions
from edge.runtime.calibration_input import prepare_calibration

AMP_RANGE = (0.2, 0.8)  # the shipped model's contract.calibration_amplitude_rad
OPTS = IngestOptions(amplitude_rad=AMP_RANGE)


def sweep_positions(amps, order, rate_hz, phase_s, pause_s, lead_s=0.5, eased=True,
                    offset_s=0.0):
    """float64 [T, n] positions sampled at rate_hz: each DoF (in ``order``) out over
    phase_s, pause, back over phase_s, pause; returns (times_s, q)."""
    n = len(amps)
    seg = 2 * phase_s + 2 * pause_s
    total = lead_s + n * seg + lead_s
    t = offset_s + np.arange(int(total * rate_hz)) / rate_hz
    q = np.zeros((len(t), n))
    for k, c in enumerate(order):
        t0 = lead_s + k * seg
        u_out = np.clip((t - t0) / phase_s, 0, 1)
        u_back = np.clip((t - t0 - phase_s - pause_s) / phase_s, 0, 1)
        if eased:
            u_out = 0.5 - 0.5 * np.cos(np.pi * u_out)
            u_back = 0.5 - 0.5 * np.cos(np.pi * u_back)
        q[:, c] += amps[c] * (u_out - u_back)
    return t - t[0], q


def episode_from(q, times_s, size=(16, 16), kind="calibration", names=None):
    n = q.shape[1]
    frames = np.zeros((len(q), *size, 3), np.uint8)
    frames[..., 0] = (np.arange(len(q)) % 256)[:, None, None]
    frames[..., 1] = (np.arange(len(q)) // 256)[:, None, None]
    names = names or tuple(f"j{i}" for i in range(n))
    meta = EpisodeMetadata(cell_id="c", camera_id="cam", robot_id="r", robot="test",
                           dof_names=names, dof_units=("rad",) * n, fps=10.0, kind=kind)
    return Episode(frames=frames, actions=actions_from_positions(q),
                   timestamps=np.asarray(times_s, np.float64), metadata=meta,
                   joint_positions=np.asarray(q, np.float64)).validate()


def source_index(frame):
    return int(frame[0, 0, 0]) + 256 * int(frame[0, 0, 1])


def _check_normalised(ep_out, q, amps, order):
    n = len(amps)
    assert ep_out.num_frames == 8 * n + 1
    assert [s.dof for s in ep_out.metadata.segments] == [f"j{c}" for c in order]
    src = [source_index(f) for f in ep_out.frames]
    assert src == ep_out.metadata.extra["ingest"]["source_frames"]
    assert src == sorted(src)  # time order kept
    for k, c in enumerate(order):
        rows = q[src[8 * k:8 * k + 9], c] / amps[c]  # the 9 poses as fractions
        want = np.concatenate([[0.0], np.cumsum(SWEEP_PROFILE)])
        assert np.abs(rows - want).max() <= 0.2, (k, rows)
        others = np.delete(q[src[8 * k:8 * k + 9]], c, axis=1)
        assert np.abs(others).max() <= 0.05 * np.abs(amps).max()  # the others held
        seg = ep_out.metadata.segments[k]
        assert seg.amplitude == pytest.approx(q[src[8 * k + 3], c] - q[src[8 * k], c], abs=1e-6)
        assert abs(seg.amplitude) >= 0.75 * abs(amps[c])


RATES = (10.0, 15.0, 30.0)
PHASES = (0.3, 0.6, 1.0, 2.0)
AMPS = (0.21, 0.5, 0.79)  # the range less the peak a frame can miss


@pytest.mark.parametrize("rate_hz,phase_s,amp", list(itertools.product(RATES, PHASES, AMPS)))
def test_every_timing_within_the_ranges_is_accepted(rate_hz, phase_s, amp):
    rng = np.random.default_rng(int(rate_hz * 100 + phase_s * 10 + amp * 1000))
    n = 7
    order = list(rng.permutation(n))
    signs = rng.choice([-1.0, 1.0], size=n)
    amps = signs * amp * rng.uniform(0.99, 1.01, size=n)
    pause_s = float(rng.choice([0.1, 0.5, 1.0]))
    t, q = sweep_positions(amps, order, rate_hz, phase_s, pause_s, eased=bool(rng.integers(2)),
                           offset_s=float(rng.uniform(0, 1 / rate_hz)))
    ep = episode_from(q, t)
    out, report = ingest_calibration(ep, (16, 16), 8, OPTS)
    assert report["normalised"] is True
    _check_normalised(out, q, amps, order)
    # the model's own input check takes it, amplitude range included
    frames, actions, mask = prepare_calibration(out, 7, 8, (16, 16), amplitude_rad=AMP_RANGE)
    assert frames.shape == (57, 16, 16, 3) and mask.sum() == 7


def test_fewer_dofs_other_frame_size_and_no_pauses():
    amps = np.array([0.4, -0.3, 0.6])
    t, q = sweep_positions(amps, [2, 0, 1], 30.0, 0.5, 0.0)
    ep = episode_from(q, t, size=(48, 64))
    out, report = ingest_calibration(ep, (16, 16), 8, OPTS)
    assert out.frames.shape == (25, 16, 16, 3)
    assert report["recorded_resolution"] == [48, 64] and report["resolution"] == [16, 16]
    _check_normalised(out, q, amps, [2, 0, 1])
    # without a pause the pause frame is the peak frame or its neighbour within 0.2%
    src = report["source_frames"]
    assert src[4] - src[3] in (0, 1)
    assert abs(out.actions[3, 2]) <= 0.002 * 0.6


def test_the_planner_timing_passes_through_unchanged():
    amps = np.array([0.3, -0.45])
    q = np.zeros((17, 2))
    for k, c in enumerate([1, 0]):
        q[8 * k + 1:8 * k + 9, c] = np.cumsum(SWEEP_PROFILE) * amps[c]
    ep = episode_from(q, np.arange(17) / 10.0)
    out, report = ingest_calibration(ep, (16, 16), 8, OPTS)
    assert out is ep and report["normalised"] is False
    # and forced through the segmenter it picks the same frames
    out2, rep2 = normalise_calibration(ep, (16, 16), OPTS)
    assert rep2["source_frames"] == list(range(17))
    np.testing.assert_array_equal(out2.actions, ep.actions)


def test_a_joint_stream_at_another_rate_is_interpolated_to_the_frames():
    amps = np.array([0.5, 0.35])
    tj, qj = sweep_positions(amps, [0, 1], 250.0, 0.8, 0.2)  # joints at 250 Hz
    tf = np.arange(0, tj[-1], 1 / 15.0)  # camera at 15 Hz
    qf = positions_at_frames(tf, tj, qj)
    ep = episode_from(np.zeros_like(qf), tf)  # no positions of its own at the frames
    out, report = normalise_calibration(ep, None, OPTS, joint_times_s=tj, joint_positions=qj)
    assert report["positions_from"].startswith("joint stream")
    _check_normalised(out, qf, amps, [0, 1])


def _refused(code, q, t, opts=OPTS):
    with pytest.raises(IngestError) as exc:
        ingest_calibration(episode_from(q, t), (16, 16), 8, opts)
    assert exc.value.code == code, str(exc.value)
    return exc.value


def test_amplitude_just_below_and_above_the_range_is_refused():
    t, q = sweep_positions(np.array([0.4, 0.195]), [0, 1], 10.0, 0.5, 0.2)
    e = _refused("amplitude", q, t)
    assert e.dof == "j1" and "0.195" in str(e) and "0.2-0.8" in str(e)
    t, q = sweep_positions(np.array([-0.81, 0.4]), [1, 0], 10.0, 0.5, 0.2)
    e = _refused("amplitude", q, t)
    assert e.dof == "j0" and "0.810" in str(e)


def test_a_sweep_faster_than_the_camera_is_refused():
    # 0.1 s out at 10 Hz: at most one frame between home and the peak
    t, q = sweep_positions(np.array([0.4, 0.5]), [0, 1], 10.0, 0.1, 0.3, eased=False,
                           offset_s=0.03)
    assert np.sum((np.abs(q[:, 0]) > 0.01) & (np.abs(q[:, 0]) < 0.39)) <= 2
    e = _refused("unseen", q, t)
    assert e.dof in ("j0", "j1") and "sweep slower" in str(e)


def test_two_dofs_moving_at_once_are_refused_naming_both():
    t, q = sweep_positions(np.array([0.4, 0.5, 0.3]), [0, 1, 2], 15.0, 0.5, 0.2)
    i = np.flatnonzero(np.abs(q[:, 1]) > 0.2)[:5]
    q[i, 2] += 0.1  # j2 moves while j1 sweeps
    e = _refused("simultaneous", q, t)
    assert "'j1'" in str(e) and "'j2'" in str(e) and e.frames[0] >= i[0]
    # a holding joint that wanders a little is not a second sweep
    t, q = sweep_positions(np.array([0.4, 0.5, 0.3]), [0, 1, 2], 15.0, 0.5, 0.2)
    q[i, 2] += 0.03
    out, _ = ingest_calibration(episode_from(q, t), (16, 16), 8, OPTS)
    assert out.num_frames == 25


def test_a_dof_never_swept_is_refused():
    t, q = sweep_positions(np.array([0.4, 0.0, 0.3]), [0, 1, 2], 10.0, 0.5, 0.2)
    e = _refused("never_swept", q, t)
    assert e.dof == "j1"


def test_a_dof_that_goes_out_and_never_comes_back_is_refused():
    t, q = sweep_positions(np.array([0.4, 0.5]), [0, 1], 10.0, 0.5, 0.2)
    last = np.flatnonzero(np.abs(q[:, 1]) > 0.45)[0]
    q[last:, 1] = q[last, 1]  # j1 stays out
    e = _refused("no_return", q, t)
    assert e.dof == "j1" and str(last - 0) in str(e) or e.frames is not None


def test_a_second_excursion_of_a_dof_is_recorded_and_the_larger_used():
    t, q = sweep_positions(np.array([0.4, 0.5]), [0, 1], 10.0, 0.5, 0.2, lead_s=1.0)
    q[2:5, 0] = [0.05, 0.08, 0.05]  # a small nudge of j0 in the lead-in
    sweeps = segment_sweeps(q, ("j0", "j1"), OPTS)
    s0 = next(s for s in sweeps if s.dof == "j0")
    assert s0.ignored == ((3, 3),) and abs(s0.amplitude) == pytest.approx(0.4, abs=0.01)


def test_a_validation_episode_is_not_a_calibration():
    t, q = sweep_positions(np.array([0.4]), [0], 10.0, 0.5, 0.2)
    with pytest.raises(IngestError) as exc:
        normalise_calibration(episode_from(q, t, kind="validation"), (16, 16), OPTS)
    assert exc.value.code == "not_calibration"


@pytest.mark.parametrize("eased", [False, True])
def test_the_slowest_camera_sees_the_fastest_accepted_sweep_at_any_phase(eased):
    # 0.3 s per phase at 10 Hz (the planner's own speed): accepted whatever the camera's
    # phase against the motion
    for offset in np.linspace(0, 0.1, 21)[:-1]:
        t, q = sweep_positions(np.array([0.4, -0.5]), [1, 0], 10.0, 0.3, 0.1, eased=eased,
                               offset_s=float(offset))
        out, _ = ingest_calibration(episode_from(q, t), (16, 16), 8, OPTS)
        assert out.num_frames == 17


def drawn_episode(q, times_s):
    """An episode whose frames show each DoF as a block moving in its own column."""
    ep = episode_from(q, times_s, size=(32, 32))
    frames = np.full((len(q), 32, 32, 3), 40, np.uint8)
    for c in range(q.shape[1]):
        y = (14 + np.round(q[:, c] * 20)).astype(int)
        for i in range(len(q)):
            frames[i, y[i]:y[i] + 4, 4 * c + 1:4 * c + 4] = 230
    from dataclasses import replace
    return replace(ep, frames=frames).validate()


def test_check_reports_a_slow_sweep_as_its_normalised_episode():
    from edge.calibrate.check import EpisodeArrays, check_arrays

    t, q = sweep_positions(np.array([0.4, -0.5, 0.3]), [2, 0, 1], 30.0, 1.0, 0.5)
    report = check_arrays(EpisodeArrays.from_episode(drawn_episode(q, t)))
    assert report["verdict"] == "pass", report["reasons"]
    assert report["frames"] == 25 and report["ingest"]["recorded_frames"] == len(q)
    assert [d["dof"] for d in report["dofs"]] == ["j0", "j1", "j2"]


def test_check_gives_the_one_real_reason_of_a_broken_sweep():
    from edge.calibrate.check import EpisodeArrays, check_arrays

    t, q = sweep_positions(np.array([0.4, 0.5, 0.3]), [0, 1, 2], 15.0, 0.5, 0.2)
    q[np.flatnonzero(np.abs(q[:, 1]) > 0.2), 2] += 0.1  # j2 moves while j1 sweeps
    report = check_arrays(EpisodeArrays.from_episode(drawn_episode(q, t)))
    assert report["verdict"] == "fail"
    assert [r["code"] for r in report["reasons"]] == ["simultaneous"]
    assert report["dofs"] == []


def test_store_keeps_the_episode_in_the_model_timing_with_what_ingest_did(tmp_path, capsys):
    from edge.cache.store import CalibrationCache
    from edge.cache.values import CacheKey
    from edge.commands import calibrate
    from edge.commands.common import run_command
    from edge.episode import save_episode
    from edge.manifest import load_manifest

    model = "models/reference"
    t, q = sweep_positions(np.array([0.4, -0.5, 0.3]), [2, 0, 1], 30.0, 1.0, 0.5)
    save_episode(drawn_episode(q, t), tmp_path / "slow.npz")
    assert run_command("calibrate", calibrate.register, [
        "store", str(tmp_path / "slow.npz"), "--model", model, "--cache-dir",
        str(tmp_path / "cache"), "--threads", "1"]) == 0
    import hashlib
    sha = hashlib.sha256(open(f"{model}/model.json", "rb").read()).hexdigest()
    with CalibrationCache(tmp_path / "cache") as cache:
        entry = cache.get(CacheKey("c", "cam", "r", sha))
    assert entry is not None
    assert entry.episode.num_frames == 25 and entry.episode.resolution == (64, 64)
    ing = entry.report["ingest"]
    assert ing["normalised"] is True and ing["recorded_frames"] == len(q)
    assert [s["dof"] for s in ing["sweeps"]] == ["j2", "j0", "j1"]
    assert tuple(load_manifest(f"{model}/model.json").contract.resolution) == (64, 64)
    # storing again under the same key says it replaced the entry
    assert run_command("calibrate", calibrate.register, [
        "store", str(tmp_path / "slow.npz"), "--model", model, "--cache-dir",
        str(tmp_path / "cache"), "--threads", "1"]) == 0
    assert "replaced the entry stored before under this key" in capsys.readouterr().out


def test_a_slow_planned_sweep_is_what_ingest_accepts():
    from edge.calibrate.errors import PlanError
    from edge.calibrate.plan import SWEEP_PROFILE as PROFILE
    from edge.calibrate.plan import plan_sweep, sweep_profile
    from edge.calibrate.spec import robot_spec_from_dict

    spec = robot_spec_from_dict({"robot": "toy", "frame_rate_hz": 30, "dofs": [
        {"name": f"j{i}", "lower": -1.5, "upper": 1.5, "home": 0.0, "sweep_max": 0.5}
        for i in range(4)]})
    prog = plan_sweep(spec, 3, phase_s=1.2, pause_s=0.4, amplitude=(0.25, 0.6))
    seg = prog.sweeps[0].stop - prog.sweeps[0].start
    assert seg == 2 * 36 + 2 * 12 and prog.episode_frames == 4 * seg + 1
    assert all(0.25 <= abs(s.amplitude) <= 0.6 for s in prog.sweeps)
    q = prog.episode_positions()
    out, report = ingest_calibration(episode_from(q, np.arange(len(q)) / 30.0), (16, 16), 8,
                                     OPTS)
    assert out.num_frames == 33 and [s.dof for s in out.metadata.segments] == \
        [s.dof for s in prog.sweeps]
    # 3 frames eased out is the generator's own profile
    np.testing.assert_allclose(sweep_profile(10.0, 0.3, 0.1), PROFILE, atol=1e-12)
    with pytest.raises(PlanError, match="at least 3 frames per phase"):
        plan_sweep(spec, 3, phase_s=0.05)


def test_plan_cli_takes_the_sweep_timing_and_amplitude(tmp_path, capsys):
    import json as _json

    from edge.commands import calibrate
    from edge.commands.common import run_command

    spec = tmp_path / "toy.yaml"
    spec.write_text("robot: toy\nframe_rate_hz: 15\ndofs:\n"
                    "  - {name: a, lower: -1.5, upper: 1.5, home: 0.0, sweep_max: 0.5}\n"
                    "  - {name: b, lower: -1.5, upper: 1.5, home: 0.0, sweep_max: 0.5}\n")
    assert run_command("calibrate", calibrate.register, [
        "plan", "--robot", str(spec), "--seed", "1", "--sweep-seconds", "0.8",
        "--pause-seconds", "0.2", "--amplitude", "0.3-0.4", "--out", str(tmp_path / "p")]) == 0
    d = _json.loads((tmp_path / "p.json").read_text())
    assert d["segment_frames"] == 2 * 12 + 2 * 3 and d["model_timing"] is False
    assert all(0.3 <= abs(s["amplitude"]) <= 0.4 for s in d["sweeps"])
    with pytest.raises(SystemExit):
        run_command("calibrate", calibrate.register, [
            "plan", "--robot", str(spec), "--amplitude", "0.4", "--out", str(tmp_path / "q")])
    assert "expected LOW-HIGH" in capsys.readouterr().err


@pytest.mark.parametrize("size", [(96, 96), (480, 640)])
def test_the_model_takes_a_calibration_at_the_camera_frame_size(size):
    from edge.runtime.context import encode_calibration, model_timing
    from edge.runtime.model import load_model

    amps = np.array([0.4, -0.3])
    q = np.zeros((17, 2))
    for k, c in enumerate([1, 0]):
        q[8 * k + 1:8 * k + 9, c] = np.cumsum(SWEEP_PROFILE) * amps[c]
    ep = episode_from(q, np.arange(17) / 10.0, size=size)
    model = load_model("models/reference", intra_op_num_threads=1)
    try:
        out, report = model_timing(model, ep)
        assert out.resolution == (64, 64) and report["recorded_resolution"] == list(size)
        assert out.num_frames == 17
        ctx = encode_calibration(model, ep)
        assert ctx.values.shape == tuple(model.contract.context_shape)
    finally:
        model.deactivate()


def test_ingest_cli_writes_the_episode_in_the_model_timing(tmp_path, capsys):
    from edge.commands import calibrate
    from edge.commands.common import run_command
    from edge.episode import load_episode, save_episode

    t, q = sweep_positions(np.array([0.4, -0.5]), [1, 0], 30.0, 1.0, 0.3)
    save_episode(episode_from(q, t, size=(48, 64)), tmp_path / "slow.npz")
    argv = ["ingest", str(tmp_path / "slow.npz"), "--model", "models/reference", "--out",
            str(tmp_path / "norm.npz")]
    assert run_command("calibrate", calibrate.register, argv) == 0
    out = load_episode(tmp_path / "norm.npz")
    assert out.num_frames == 17 and out.resolution == (64, 64)
    assert out.metadata.extra["ingest"]["recorded_frames"] == len(q)
    text = capsys.readouterr().out
    assert "j1" in text and f"{len(q)} recorded frames -> 17 at 64x64" in text
    # an existing output is refused before any work
    assert run_command("calibrate", calibrate.register, argv) == 2
    assert "exists" in capsys.readouterr().err
    # a broken sweep: the one reason, exit 2
    q2 = q.copy()
    q2[np.flatnonzero(np.abs(q[:, 0]) > 0.2), 1] += 0.2
    save_episode(episode_from(q2, t), tmp_path / "both.npz")
    assert run_command("calibrate", calibrate.register, [
        "ingest", str(tmp_path / "both.npz"), "--model", "models/reference", "--out",
        str(tmp_path / "n2.npz")]) == 2
    err = capsys.readouterr().err
    assert "moved at the same time" in err and not (tmp_path / "n2.npz").exists()


def test_check_cli_draws_and_says_the_normalised_episode(tmp_path, capsys):
    from edge.calibrate.check import EpisodeArrays, check_episode
    from edge.commands import calibrate
    from edge.commands.common import run_command
    from edge.episode import save_episode

    t, q = sweep_positions(np.array([0.4, -0.5, 0.3]), [2, 0, 1], 30.0, 1.0, 0.5)
    ep = drawn_episode(q, t)
    report, checked = check_episode(EpisodeArrays.from_episode(ep))
    assert len(checked.frames) == 25 and report["frames"] == 25  # the sheets' frames
    save_episode(ep, tmp_path / "slow.npz")
    assert run_command("calibrate", calibrate.register, [
        "check", str(tmp_path / "slow.npz"), "--out", str(tmp_path / "chk")]) == 0
    out = capsys.readouterr().out
    assert f"normalised to the model's timing: {len(q)} recorded frames" in out
    assert " measured " in out and " planned " not in out  # ingest measured them
    assert (tmp_path / "chk" / "coverage.png").is_file()


def test_a_channel_in_metres_has_its_own_away_floor():
    """A gripper (m) swept 1 cm is found beside joints swept 0.4 rad; 1 mm is refused as
    never swept, the floor given in m; while a joint sweeps, a gripper wandering 1 cm counts
    as moving (a share of a sweep in rad is no tolerance in m)."""
    t, q = sweep_positions(np.array([0.4, 0.5, 0.01]), [0, 1, 2], 30.0, 1.0, 0.5)
    units = ("rad", "rad", "m")
    sweeps = segment_sweeps(q, ("j0", "j1", "grip"), None, units)
    assert [s.dof for s in sweeps] == ["j0", "j1", "grip"]
    assert abs(sweeps[2].amplitude) == pytest.approx(0.01, rel=0.02)
    with pytest.raises(IngestError, match=r"'grip' never left home by more than 0.02 rad"):
        segment_sweeps(q, ("j0", "j1", "grip"))  # read as rad: below the rad floor
    t, q = sweep_positions(np.array([0.4, 0.5, 0.001]), [0, 1, 2], 30.0, 1.0, 0.5)
    with pytest.raises(IngestError, match=r"'grip' never left home by more than 0.002 m") as e:
        segment_sweeps(q, ("j0", "j1", "grip"), None, units)
    assert e.value.code == "never_swept"
    with pytest.raises(IngestError, match=r"^no DoF left home by more than 0.002 m / 0.02 rad "
                                          r"\(largest excursion of any 0.0000\): the episode "
                                          r"holds no sweep") as e:
        segment_sweeps(np.zeros_like(q), ("j0", "j1", "grip"), None, units)  # nothing moved
    assert e.value.code == "never_swept"
    t, q = sweep_positions(np.array([0.4, 0.5, 0.03]), [0, 1, 2], 30.0, 1.0, 0.5)
    j0 = sweeps[0]
    q[j0.start + 5:j0.stop - 5, 2] = 0.01  # the gripper opens 1 cm while j0 sweeps
    with pytest.raises(IngestError) as e:
        segment_sweeps(q, ("j0", "j1", "grip"), None, units)
    assert e.value.code == "simultaneous" and e.value.dof == "grip"
    segment_sweeps(q, ("j0", "j1", "grip"))  # as rad, 1 cm is inside 0.15 of 0.4 rad


def test_a_partial_recording_is_refused_as_partial_not_as_a_dof_never_swept():
    import dataclasses

    from tests.calib_cell_helpers import sweep_episode

    ep = sweep_episode()
    cut = dataclasses.replace(ep, frames=ep.frames[:20], actions=ep.actions[:20],
                              timestamps=ep.timestamps[:20],
                              joint_positions=ep.joint_positions[:20],
                              metadata=dataclasses.replace(ep.metadata, extra={
                                  "recording": {"complete": False,
                                                "disconnected": "camera gone"}}))
    with pytest.raises(IngestError) as e:
        normalise_calibration(cut)
    assert e.value.code == "partial_recording" and "camera gone" in str(e.value)


def test_the_coverage_sheet_of_a_normalised_episode_names_the_recorded_frames_and_times():
    from edge.calibrate.check import EpisodeArrays, check_episode, tile_names

    t, q = sweep_positions(np.array([0.4, -0.5, 0.3]), [2, 0, 1], 30.0, 1.0, 0.5)
    t = t + 100.0  # a recording's stamps do not start at 0
    report, checked = check_episode(EpisodeArrays.from_episode(drawn_episode(q, t)))
    src = report["ingest"]["source_frames"]
    assert report["ingest"]["source_times_s"] == [round(t[i] - t[0], 4) for i in src]
    seg = report["dofs"][1]["segment_start"]
    names = tile_names(checked, report, seg, 9)
    # each tile is the recorded frame it shows, at that frame's time in the recording
    assert names == [f"f{src[r]} {t[src[r]] - t[0]:.1f}s" for r in range(seg, seg + 9)]
    assert (checked.frames[seg:seg + 9] ==
            np.stack([drawn_episode(q, t).frames[src[r]] for r in range(seg, seg + 9)])).all()
    # not the normalised episode's own 10 Hz clock: its sweep of 1 s phases spans > 2 s
    assert float(names[-1].split()[1][:-1]) - float(names[0].split()[1][:-1]) > 2.0
    # an episode in the model's timing keeps its own indices and times
    own = EpisodeArrays.from_episode(drawn_episode(q[:17], np.arange(17) / 10.0 + 5.0))
    assert tile_names(own, {"dofs": []}, 8, 9) == [f"f{r} {r / 10:.1f}s" for r in range(8, 17)]


def test_the_coverage_sheet_of_a_camera_size_import_stays_viewable():
    """An import at 640x480 drew its coverage sheet at 2x the frames (11556x4296 px for
    four DoFs); tiles taller than SHEET_TILE_PX are reduced to it, keeping the aspect."""
    import cv2

    from edge.calibrate.check import SHEET_TILE_PX, EpisodeArrays, check_episode, coverage_sheets

    t, q = sweep_positions(np.array([0.4, -0.5, 0.3]), [2, 0, 1], 30.0, 1.0, 0.5)
    ep = drawn_episode(q, t)
    big = dataclasses.replace(ep, frames=np.stack([cv2.resize(f, (640, 480),
                                                              interpolation=cv2.INTER_NEAREST)
                                                   for f in ep.frames])).validate()
    report, arr = check_episode(EpisodeArrays.from_episode(big))
    sheet = coverage_sheets(arr, report)["coverage"]
    # three rows of 9 tiles of 256x192 px, with their labels
    assert sheet.shape[0] < 3 * (SHEET_TILE_PX + 40) and sheet.shape[1] < 9 * (256 + 16)


def test_two_episodes_of_one_file_name_keep_their_own_check_sheets(tmp_path, monkeypatch,
                                                                    capsys):
    import json

    from edge.commands import calibrate
    from edge.commands.common import run_command
    from edge.episode import save_episode

    monkeypatch.setenv("SYNCEDGE_HOME", str(tmp_path / "home"))
    paths = []
    for cell, amps in (("cell_a", [0.4, -0.5, 0.3]), ("cell_b", [0.3, 0.6])):
        t, q = sweep_positions(np.array(amps), list(range(len(amps))), 30.0, 1.0, 0.5)
        (tmp_path / cell).mkdir()
        save_episode(drawn_episode(q, t), tmp_path / cell / "cal.npz")
        paths.append(tmp_path / cell / "cal.npz")

    def check(path):
        assert run_command("calibrate", calibrate.register, ["check", str(path)]) == 0
        out = Path(capsys.readouterr().out.strip().splitlines()[-1]).parent
        return out, json.loads((out / "report.json").read_text())

    first, rep_a = check(paths[0])
    assert first == tmp_path / "home" / "checks" / "cal" and len(rep_a["dofs"]) == 3
    second, rep_b = check(paths[1])
    assert second != first and second.name.startswith("cal-") and len(rep_b["dofs"]) == 2
    assert len(json.loads((first / "report.json").read_text())["dofs"]) == 3  # kept
    assert check(paths[0])[0] == first  # the same file finds its own folder again


def test_check_notes_a_metadata_fps_the_timestamps_do_not_keep(tmp_path, capsys):
    """metadata.fps says 60 Hz, the stamps step 1/30 s: the check reads the timing from the
    stamps (same verdict as with the right fps) and says the two disagree."""
    from dataclasses import replace

    from edge.calibrate.check import EpisodeArrays, check_arrays, frame_rate_note
    from edge.commands import calibrate
    from edge.commands.common import run_command
    from edge.episode import save_episode

    t, q = sweep_positions(np.array([0.4, -0.5, 0.3]), [2, 0, 1], 30.0, 1.0, 0.5)
    ep = drawn_episode(q, t)
    ep = replace(ep, metadata=replace(ep.metadata, fps=30.0))  # as an import records it
    right = check_arrays(EpisodeArrays.from_episode(ep))
    assert right["notes"] == []
    wrong = replace(ep, metadata=replace(ep.metadata, fps=60.0))
    report = check_arrays(EpisodeArrays.from_episode(wrong))
    assert report["verdict"] == right["verdict"] == "pass"
    assert len(report["notes"]) == 1
    assert report["notes"][0].startswith("metadata.fps is 60 Hz but the timestamps step "
                                         "33.3 ms (30 Hz, median)")
    save_episode(wrong, tmp_path / "wrong_fps.npz")
    assert run_command("calibrate", calibrate.register, [
        "check", str(tmp_path / "wrong_fps.npz"), "--out", str(tmp_path / "chk")]) == 0
    assert "note: " in capsys.readouterr().err
    # within 10% (a camera's jitter, 29.97 Hz against 30) is no note
    assert frame_rate_note(30.0, np.arange(50) / 29.97) is None
    assert frame_rate_note(None, np.arange(50) / 15.0) is None


def test_check_notes_motion_between_the_sweeps_that_no_reading_explains():
    """A channel the program swept but the joint stream left out moves the picture where
    every reading stands at home: the check notes the frames (the verdict stays the
    recorded channels')."""
    from dataclasses import replace

    from edge.calibrate.check import EpisodeArrays, check_arrays

    t, q = sweep_positions(np.array([0.4, -0.5, 0.3]), [2, 0, 1], 30.0, 1.0, 0.5)
    ep = drawn_episode(q, t)
    ep = replace(ep, metadata=replace(ep.metadata, fps=30.0))  # as an import records it
    clean = check_arrays(EpisodeArrays.from_episode(ep))
    assert clean["verdict"] == "pass" and clean["notes"] == []
    spans = [sw["frames"] for sw in clean["ingest"]["sweeps"]]
    gap = range(max(b for _a, b in spans[:1]) + 1, min(a for a, _b in spans[1:]))
    assert len(gap) >= 2  # the pause between the first two sweeps
    frames = ep.frames.copy()
    for i in gap:  # a fourth link, unreported, moving in its own column
        frames[i, 20:24, 24:28] = 230
    report = check_arrays(EpisodeArrays.from_episode(replace(ep, frames=frames)))
    assert report["verdict"] == "pass"
    assert len(report["notes"]) == 1
    assert report["notes"][0].startswith(f"the picture changed in {len(gap)} recorded "
                                         f"frame(s) between the sweeps")
    assert f"frames {gap[0]}..{gap[-1]}" in report["notes"][0]
