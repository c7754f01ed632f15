"""Cell sampling, controller conventions and splits (no rendering)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from export.cells.robots import HELD_OUT_ROBOTS, ROBOTS, STRESS_ROBOTS, TRAIN_ROBOTS, robot_spec
from export.cells.sampling import (
    DISTANCE_M,
    ELEVATION_DEG,
    FOVY_DEG,
    HELD_OUT_AZIMUTH_DEG,
    SPLITS,
    TRAIN_AZIMUTH_DEG,
    Convention,
    chunk_seed,
    is_held_out_convention,
    sample_cell,
    sample_convention,
)
from export.cells.trajectories import (
    SEGMENT_FRAMES,
    calibration_sweep,
    motion_range,
    motion_trajectory,
    random_trajectory,
    two_joint_trajectory,
)
from export.errors import CellError


def _cells(split: str, n: int = 60):
    rng = np.random.default_rng(chunk_seed(split, 0))
    return [sample_cell(rng, split, f"{split}-{i}") for i in range(n)]


def test_at_least_five_robots_and_held_out_robots_never_train() -> None:
    assert len(ROBOTS) >= 5 and len(TRAIN_ROBOTS) >= 5
    assert not set(TRAIN_ROBOTS) & set(HELD_OUT_ROBOTS)


def test_splits_are_disjoint_in_their_held_out_factors() -> None:
    cells = {s: _cells(s) for s in SPLITS}
    in_band = lambda c, band: band[0] <= c.azimuth_deg < band[1]  # noqa: E731
    for s, cs in cells.items():
        held_robot = s in ("test_robot", "test_all")
        held_cam = s in ("test_camera", "test_all")
        held_conv = s in ("test_convention", "test_all", "stress")
        if s == "stress":
            for c in cs:
                assert c.robot in STRESS_ROBOTS and is_held_out_convention(c.convention)
                assert not in_band(c, TRAIN_AZIMUTH_DEG) and not in_band(c, HELD_OUT_AZIMUTH_DEG)
                assert not ELEVATION_DEG[0] <= c.elevation_deg <= ELEVATION_DEG[1]
                assert not DISTANCE_M[0] <= c.distance_m <= DISTANCE_M[1]
                assert not FOVY_DEG[0] <= c.fovy_deg <= FOVY_DEG[1]
                assert not 0.3 <= c.ambient_rgb[0] <= 0.5
                assert all(not 0.5 <= li["diffuse"][1] <= 0.9 for li in c.lights)
            continue
        for c in cs:
            assert c.robot not in STRESS_ROBOTS
            assert (c.robot in HELD_OUT_ROBOTS) == held_robot, (s, c.robot)
            assert in_band(c, HELD_OUT_AZIMUTH_DEG if held_cam else TRAIN_AZIMUTH_DEG), s
            assert is_held_out_convention(c.convention) == held_conv, s
            assert c.split == s
    assert TRAIN_AZIMUTH_DEG[1] <= HELD_OUT_AZIMUTH_DEG[0]
    ids = [c.cell_id for cs in cells.values() for c in cs]
    seeds = [c.seed for cs in cells.values() for c in cs]
    assert len(set(ids)) == len(ids) and len(set(seeds)) == len(seeds)


def test_training_cells_vary_camera_light_colour_robot_and_convention() -> None:
    cs = _cells("train", 40)
    assert len({c.robot for c in cs}) == len(TRAIN_ROBOTS)
    for attr in ("azimuth_deg", "elevation_deg", "distance_m", "fovy_deg"):
        assert np.std([getattr(c, attr) for c in cs]) > 1e-3
    assert len({c.convention for c in cs}) > 30
    assert len({tuple(c.floor_rgb) for c in cs}) == 40
    assert sum(c.convention.is_identity for c in cs) < 5


def test_chunk_seeds_are_stable_and_distinct() -> None:
    seeds = {chunk_seed(s, c) for s in SPLITS for c in range(50)}
    assert len(seeds) == len(SPLITS) * 50
    assert chunk_seed("train", 3) == chunk_seed("train", 3)
    with pytest.raises(CellError, match="unknown split 'bogus'"):
        chunk_seed("bogus", 0)


def test_sampling_is_deterministic_per_seed() -> None:
    a = _cells("test_all", 5)
    b = _cells("test_all", 5)
    assert a == b


def test_forcing_a_robot_outside_its_split_is_refused() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(CellError, match="robot 'kinova3' is not in split 'train'"):
        sample_cell(rng, "train", "x", robot="kinova3")
    with pytest.raises(CellError, match="unknown robot 'r2d2'"):
        robot_spec("r2d2")


def test_held_out_conventions_are_a_fixed_minority() -> None:
    all7 = [Convention(p, s) for p in itertools.islice(itertools.permutations(range(7)), 200)
            for s in itertools.product((-1, 1), repeat=7)]
    frac = np.mean([is_held_out_convention(c) for c in all7])
    assert 0.08 < frac < 0.18
    rng = np.random.default_rng(1)
    for _ in range(50):
        assert not is_held_out_convention(sample_convention(rng, 7, held_out=False))
        assert is_held_out_convention(sample_convention(rng, 6, held_out=True))


def test_convention_maps_and_composes() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(4, 5))
    a = Convention((2, 0, 4, 1, 3), (1, -1, 1, 1, -1))
    b = Convention((1, 2, 3, 4, 0), (-1, -1, 1, -1, 1))
    np.testing.assert_allclose(a.to_canonical(a.to_controller(x)), x)
    np.testing.assert_allclose(a.to_controller(x)[:, 1], -x[:, 0])
    np.testing.assert_allclose(b.compose(a).to_controller(x), b.to_controller(a.to_controller(x)))
    with pytest.raises(CellError, match="invalid convention"):
        Convention((0, 0), (1, 1))


@pytest.mark.parametrize("robot", sorted(ROBOTS))
def test_calibration_sweep_moves_each_dof_in_its_own_segment(robot: str) -> None:
    spec = robot_spec(robot)
    rng = np.random.default_rng(3)
    start = np.asarray(spec.home_rad)
    q, segments = calibration_sweep(rng, spec, start)
    n = spec.num_dof
    assert q.shape == (n * SEGMENT_FRAMES + 1, n)
    assert sorted(s.joint for s in segments) == list(range(n))
    dq = np.diff(q, axis=0)
    lim = np.asarray(spec.limits_rad)
    assert (q >= lim[:, 0]).all() and (q <= lim[:, 1]).all()
    for k, s in enumerate(segments):
        assert (s.start, s.stop) == (k * SEGMENT_FRAMES, (k + 1) * SEGMENT_FRAMES)
        rows = dq[s.start:s.stop]
        others = np.delete(rows, s.joint, axis=1)
        assert np.all(others == 0), "the other DoFs hold"
        moved = rows[:, s.joint]
        assert np.isclose(moved[:3].sum(), s.amplitude_rad), "out by the amplitude"
        assert np.isclose(moved.sum(), 0.0), "and back"
        assert moved[3] == 0 and moved[7] == 0, "pauses"
        assert 0.3 <= abs(s.amplitude_rad) <= 0.5
    np.testing.assert_allclose(q[-1], start, atol=1e-12)


def test_sweep_order_sign_and_magnitude_are_randomised() -> None:
    spec = robot_spec("panda")
    sweeps = [calibration_sweep(np.random.default_rng(i), spec, np.asarray(spec.home_rad))[1]
              for i in range(10)]
    assert len({tuple(s.joint for s in sw) for sw in sweeps}) > 5
    amps = np.array([[s.amplitude_rad for s in sorted(sw, key=lambda s: s.joint)]
                     for sw in sweeps])
    assert (amps > 0).any() and (amps < 0).any() and np.std(np.abs(amps)) > 0.01


def test_random_trajectory_is_smooth_and_within_range() -> None:
    spec = robot_spec("ur5e")
    lo, hi = motion_range(spec)
    q = random_trajectory(np.random.default_rng(4), spec, 64)
    assert q.shape == (64, 6)
    assert (q >= lo - 1e-12).all() and (q <= hi + 1e-12).all()
    step = np.abs(np.diff(q, axis=0))
    assert step.max() < 0.35 and step.mean() > 0.02
    accel = np.abs(np.diff(q, 2, axis=0))
    assert accel.max() < 0.2


def test_two_joint_trajectory_moves_few_joints_gently() -> None:
    spec = robot_spec("ur5e")
    lo, hi = motion_range(spec)
    q = two_joint_trajectory(np.random.default_rng(4), spec, 64)
    wide = random_trajectory(np.random.default_rng(4), spec, 64)
    assert q.shape == (64, 6)
    assert (q >= lo - 1e-12).all() and (q <= hi + 1e-12).all()
    step = np.abs(np.diff(q, axis=0))
    assert step.max() < 0.2 and step.mean() > 0.01
    moving = (step > 0.02).sum(1).mean()
    assert moving < 3.5 < (np.abs(np.diff(wide, axis=0)) > 0.02).sum(1).mean()
    assert np.abs(np.diff(q, 2, axis=0)).max() < 0.15


def test_motion_trajectory_dispatches_and_refuses_unknown_profiles() -> None:
    spec = robot_spec("ur5e")
    a = motion_trajectory(np.random.default_rng(1), spec, 20, "two_joint")
    assert np.array_equal(a, two_joint_trajectory(np.random.default_rng(1), spec, 20))
    b = motion_trajectory(np.random.default_rng(1), spec, 20, "all_joints")
    assert np.array_equal(b, random_trajectory(np.random.default_rng(1), spec, 20))
    with pytest.raises(CellError, match="unknown motion profile 'wild'"):
        motion_trajectory(np.random.default_rng(1), spec, 20, "wild")
    with pytest.raises(CellError, match="at least 2 frames"):
        two_joint_trajectory(np.random.default_rng(1), spec, 1)


def test_generate_options_refuse_an_unknown_motion_profile() -> None:
    from export.cells.generate import GenerateOptions

    assert GenerateOptions().motion == "all_joints"
    with pytest.raises(CellError, match="motion profile 'wild'"):
        GenerateOptions(motion="wild")
