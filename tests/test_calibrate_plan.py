"""Calibration planning: robot specs, the sweep program (the generator's profile), files."""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np
import pytest

from edge.calibrate.errors import PlanError
from edge.calibrate.plan import (
    SEGMENT_FRAMES,
    SWEEP_PROFILE,
    load_program,
    plan_motion,
    plan_poses,
    plan_sweep,
    save_program,
)
from edge.calibrate.spec import load_robot_spec, robot_spec_from_dict
from edge.commands import calibrate
from edge.errors import EdgeError

ROOT = Path(__file__).resolve().parents[1]
SPECS = sorted((ROOT / "samples" / "robots").glob("*.yaml"))


def _spec_dict(**over):
    d = {"robot": "toy", "frame_rate_hz": 10, "dofs": [
        {"name": "a", "lower": -1.0, "upper": 1.0, "home": 0.0, "sweep_max": 0.5},
        {"name": "b", "lower": -0.4, "upper": 2.0, "home": 0.0, "sweep_max": 0.5},
        {"name": "c", "unit": "m", "lower": 0.0, "upper": 0.6, "home": 0.55, "sweep_max": 0.4}]}
    d.update(over)
    return d


def test_profile_and_segment_length_match_the_cell_generator() -> None:
    from export.cells import trajectories

    assert SEGMENT_FRAMES == trajectories.SEGMENT_FRAMES
    assert np.allclose(SWEEP_PROFILE, trajectories.SWEEP_PROFILE)


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_shipped_specs_plan_within_limits(path: Path) -> None:
    spec = load_robot_spec(path)
    for seed in range(5):
        p = plan_sweep(spec, seed)
        q = p.positions
        assert p.episode_frames == SEGMENT_FRAMES * len(spec.dofs) + 1
        assert (q >= np.array(p.lower)).all() and (q <= np.array(p.upper)).all()
        assert np.allclose(q[0], q[-1]) and sorted(s.dof for s in p.sweeps) == sorted(spec.dof_names)
        for s in p.sweeps:
            assert spec.sweep_min - 1e-9 <= abs(s.amplitude) <= 0.5 + 1e-9


def test_sweep_moves_one_dof_at_a_time_with_the_profile() -> None:
    spec = robot_spec_from_dict(_spec_dict())
    p = plan_sweep(spec, seed=3)
    acts = np.diff(p.episode_positions(), axis=0)  # (8n, n)
    for s in p.sweeps:
        c = spec.dof_names.index(s.dof)
        rows = acts[s.start:s.stop]
        assert np.allclose(rows[:, c], np.asarray(SWEEP_PROFILE) * s.amplitude)
        assert np.allclose(np.delete(rows, c, axis=1), 0)
    # 'b' has only 0.4 of room below home and 'c' 0.03 above: they sweep the other way
    amp = {s.dof: s.amplitude for s in p.sweeps}
    assert amp["c"] < 0
    signs = {plan_sweep(spec, s).sweeps[0].amplitude > 0 for s in range(20)}
    assert signs == {True, False}, "sign is randomised"


def test_bad_specs_are_refused_with_the_key() -> None:
    d = _spec_dict()
    d["dofs"][1]["name"] = "a"
    with pytest.raises(PlanError, match="duplicated DoF name"):
        robot_spec_from_dict(d)
    with pytest.raises(PlanError, match="colour: unknown key"):
        robot_spec_from_dict(_spec_dict(colour="red"))
    d = _spec_dict()
    d["dofs"][0].update(lower=-0.1, upper=0.1)
    with pytest.raises(PlanError, match=r"dofs\[0\] \(a\): expected room"):
        robot_spec_from_dict(d)
    with pytest.raises(PlanError, match="segment_frames: expected 8"):
        robot_spec_from_dict(_spec_dict(segment_frames=4))


def test_program_files_round_trip_and_cli(tmp_path: Path, capsys) -> None:
    parser = argparse.ArgumentParser(prog="syncedge")
    calibrate.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["calibrate", "plan", "--robot", str(SPECS[0]), "--seed", "4",
                              "--out", str(tmp_path / "plan")])
    assert args.func(args) == 0
    assert "expected duration" in capsys.readouterr().out
    p = load_program(tmp_path / "plan.json")
    assert p == p and p.seed == 4 and p.kind == "calibration"
    with open(tmp_path / "plan.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["time_s", *p.dof_names] and len(rows) == len(p.positions) + 1
    assert np.allclose(np.array(rows[1:], float)[:, 1:], p.positions, atol=1e-8)
    m = plan_motion(load_robot_spec(SPECS[0]), seed=1, frames=12)
    save_program(m, tmp_path / "m.json")
    back = load_program(tmp_path / "m.json")
    assert back.kind == "motion" and back.episode_frames == 12
    assert np.allclose(back.positions, m.positions)
    (tmp_path / "bad.json").write_text('{"format": "other"}')
    with pytest.raises(PlanError, match="expected format"):
        load_program(tmp_path / "bad.json")


def test_poses_program_holds_each_pose_within_range_and_refinement_reads_the_holds() -> None:
    """``plan_poses``: the episode starts at home, eases to each of ``count`` poses and holds
    it; every joint within ``home +- half_range`` (a tenth for a DoF in m) and the limits
    less the margin; the refinement's frame choice finds exactly the holds' middle frames
    (the pose reached at the move's last frame, then held 3 more: the second of the last
    two)."""
    from edge.calibrate.spec import LIMIT_MARGIN
    from export.models.chain_fit import motion_frames_to_use

    spec = robot_spec_from_dict(_spec_dict(), "toy.yaml")
    prog = plan_poses(spec, seed=5, count=10, half_range=0.3, move_s=0.5, hold_s=0.3)
    assert prog.kind == "motion" and prog.sweeps == ()
    q = prog.episode_positions()
    home = np.array([d.home for d in spec.dofs])
    assert len(q) == 1 + 10 * (5 + 3) and np.array_equal(q[0], home)
    ends = np.arange(1, 11) * 8
    poses = q[ends]
    assert np.array_equal(q[ends - 1], poses) and np.array_equal(q[ends - 2], poses)
    reach = np.array([0.3, 0.3, 0.03])
    lower = np.array([d.lower for d in spec.dofs]) + LIMIT_MARGIN
    upper = np.array([d.upper for d in spec.dofs]) - LIMIT_MARGIN
    assert (np.abs(poses - home) <= reach + 1e-12).all()
    assert (poses >= lower - 1e-12).all() and (poses <= upper + 1e-12).all()
    assert (np.ptp(poses, axis=0) > 0.5 * np.minimum(reach, (upper - lower) / 2)).all()
    # no jump: the largest knot-to-knot change is the eased move's (pi/2 / 5 of the step)
    steps = np.abs(np.diff(q, axis=0))
    assert (steps <= np.pi / 2 / 5 * np.abs(np.diff(np.vstack([home, poses]), axis=0)).max(0)
            + 1e-9).all()
    pick, held = motion_frames_to_use(q, prog.dof_units)
    assert held and pick.tolist() == (ends - 1).tolist()
    with pytest.raises(PlanError, match="at least 2 poses"):
        plan_poses(spec, 1, count=1)
    with pytest.raises(PlanError, match="expected > 0"):
        plan_poses(spec, 1, half_range=0.0)
    with pytest.raises(PlanError, match="hold of at least 2"):
        plan_poses(spec, 1, hold_s=0.1)


@pytest.mark.parametrize("rate_hz", [10.0, 30.0])
def test_held_poses_read_settled_frames_under_a_camera_late_by_up_to_half_the_hold(
        rate_hz: float) -> None:
    """docs/calibration.md step 2: the refinement reads the holds' middle frames, which show
    the held pose whatever the camera's latency against the joint readings up to half the
    hold (0.2 s of the default 0.4 s); a camera later than that shows the move instead.
    Frame t of a camera late by L frames shows the pose read at t - L."""
    from export.models.chain_fit import motion_frames_to_use

    spec = robot_spec_from_dict(_spec_dict(frame_rate_hz=rate_hz), "toy.yaml")
    prog = plan_poses(spec, seed=3, count=12)  # the defaults: 0.8 s moves, 0.4 s holds
    q = prog.episode_positions()
    pick, held = motion_frames_to_use(q, prog.dof_units)  # chosen from the joint readings
    assert held and len(pick) == 12
    half_hold = int(round(0.4 * rate_hz)) // 2
    for lag in range(half_hold + 2):
        shown = q[np.maximum(pick - lag, 0)]
        settled = np.array_equal(shown, q[pick])
        assert settled == (lag <= half_hold), (lag, half_hold)


def test_plan_cli_writes_held_poses_and_refuses_two_kinds(tmp_path: Path, capsys) -> None:
    parser = argparse.ArgumentParser(prog="syncedge")
    calibrate.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["calibrate", "plan", "--robot", str(SPECS[0]), "--seed", "2",
                              "--poses", "12", "--half-range", "0.4",
                              "--out", str(tmp_path / "poses")])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "12 held poses within 0.4 rad of home" in out and "collisions not" in out
    p = load_program(tmp_path / "poses.json")
    home = np.array([d.home for d in load_robot_spec(SPECS[0]).dofs])
    assert p.kind == "motion" and p.episode_frames == 1 + 12 * 12
    assert np.abs(p.episode_positions() - home).max() <= 0.4 + 1e-9
    args = parser.parse_args(["calibrate", "plan", "--robot", str(SPECS[0]), "--poses",
                              "--motion", "--out", str(tmp_path / "both")])
    with pytest.raises(EdgeError, match="--motion and --poses"):
        args.func(args)
    assert not (tmp_path / "both.json").exists()
    args = parser.parse_args(["calibrate", "plan", "--robot", str(SPECS[0]), "--half-range",
                              "0.2", "--out", str(tmp_path / "sweep")])
    with pytest.raises(EdgeError, match="only with --poses or --motion"):
        args.func(args)
    assert not (tmp_path / "sweep.json").exists()


def test_a_robot_with_a_slide_plans_each_unit_within_its_own_range() -> None:
    """A tool slide of 8 cm was refused by the revolute joints' sweep_min of 0.3 (it
    applied to metres too), and lowering sweep_min for the slide drew the joints below the
    model's range. Each DoF now sweeps from the smallest sweep of its unit (or its own)."""
    from edge.calibrate.spec import robot_spec_to_dict

    d = _spec_dict()
    d["dofs"][2] = {"name": "slide", "unit": "m", "lower": 0.0, "upper": 0.08, "home": 0.0,
                    "sweep_max": 0.06}
    spec = robot_spec_from_dict(d)
    assert [spec.dof_sweep_min(x) for x in spec.dofs] == [0.3, 0.3, 0.02]
    for seed in range(20):
        for amplitude in (None, (0.2, 0.4)):
            amps = {s.dof: abs(s.amplitude)
                    for s in plan_sweep(spec, seed=seed, amplitude=amplitude).sweeps}
            lo, hi = amplitude or (0.3, 0.5)
            assert lo <= amps["a"] <= hi and lo <= amps["b"] <= hi
            assert 0.02 <= amps["slide"] <= 0.06
    # a DoF's own sweep_min, and the spec's for metres, round trip
    d["dofs"][0]["sweep_min"] = 0.45
    spec = robot_spec_from_dict({**d, "sweep_min_m": 0.05})
    assert [spec.dof_sweep_min(x) for x in spec.dofs] == [0.45, 0.3, 0.05]
    assert robot_spec_from_dict(robot_spec_to_dict(spec)) == spec
    assert min(abs(s.amplitude) for s in plan_sweep(spec, seed=3).sweeps if s.dof == "a") \
        >= 0.45
    d["dofs"][2]["sweep_max"] = 0.01
    with pytest.raises(PlanError, match=r"dofs\[2\] \(slide\): expected room to sweep at least "
                                        r"sweep_min_m=0.02 m"):
        robot_spec_from_dict(d)
