"""The chain is read from a calibration of any timing at the planner's poses
(export.models.chain_fit.sweep_timing): the frames ingest picks, the recorded frame rate
kept, and a sweep ingest cannot find refused before any fitting."""

from __future__ import annotations

import numpy as np
import pytest
from test_calibrate_ingest import episode_from, source_index, sweep_positions

from export.models.chain_fit import read_chain_calibration, sweep_timing


def _slow_episode(rate_hz: float = 30.0):
    amps, order = [0.5, -0.3, 0.7], [2, 0, 1]
    t, q = sweep_positions(amps, order, rate_hz, phase_s=2.0, pause_s=0.5)
    ep = episode_from(q, t)
    meta = ep.metadata.__class__(**{**ep.metadata.__dict__, "fps": rate_hz})
    return ep.__class__(frames=ep.frames, actions=ep.actions, timestamps=ep.timestamps,
                        metadata=meta, joint_positions=ep.joint_positions).validate(), q


def test_a_slow_sweep_is_read_at_the_planner_poses_keeping_its_frame_rate() -> None:
    ep, q = _slow_episode()
    assert ep.num_frames > 10 * (8 * 3 + 1)  # a 30 Hz recording of 2 s phases
    out, report = sweep_timing(ep)
    assert report["normalised"] and report["recorded_frames"] == ep.num_frames
    assert out.num_frames == 8 * 3 + 1 and out.frames.shape[1:] == ep.frames.shape[1:]
    assert out.metadata.fps == 30.0  # actions stay joint changes per recorded frame rate
    src = [source_index(f) for f in out.frames]
    assert src == report["source_frames"]
    np.testing.assert_array_equal(out.joint_positions, q[src])
    # the sweeps in the order recorded, each 8 frames, home first and last
    assert [s.dof for s in out.metadata.segments] == ["j2", "j0", "j1"]
    assert np.abs(out.joint_positions[0]).max() < 2e-3  # ingest: home within 0.2% of A
    assert np.abs(out.joint_positions[-1]).max() < 2e-3


def test_the_planner_timing_is_read_as_recorded() -> None:
    ep, _ = _slow_episode()
    planned, _ = sweep_timing(ep)
    again, report = sweep_timing(planned)
    assert again is planned and not report["normalised"]


def test_a_sweep_that_never_returns_is_refused_before_any_fitting() -> None:
    ep, q = _slow_episode()
    cut = ep.num_frames - 75  # ends halfway back: the last channel still away
    short = ep.__class__(frames=ep.frames[:cut], actions=ep.actions[:cut],
                         timestamps=ep.timestamps[:cut], metadata=ep.metadata,
                         joint_positions=q[:cut]).validate()
    with pytest.raises(ValueError, match="the calibration's sweeps: .*j1"):
        sweep_timing(short)
    with pytest.raises(ValueError, match="the calibration's sweeps"):
        read_chain_calibration(short, size=(16, 16), fovy_deg=45.0)
