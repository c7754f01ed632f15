"""``export.evaluation.motion_programs.composition_episode``: the planner's held poses
rendered for a generated cell, as the futures evaluation and the pre-check benchmark
refine a chain read with them."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mujoco") is None,
                                reason="needs mujoco")


@pytest.fixture(scope="module")
def gen():
    from export.cells.generate import CellGenerator, GenerateOptions

    with CellGenerator(GenerateOptions(motion_episodes=0, segmentation=False)) as g:
        yield g


def _cell(split: str = "test_convention", seed: int = 3):
    from export.cells.sampling import sample_cell

    return sample_cell(np.random.default_rng(seed), split, f"motion-programs-{seed}")


def test_held_poses_about_the_calibrations_home_in_the_controllers_convention(gen) -> None:
    from edge.calibrate.plan import plan_poses
    from export.cells.robots import robot_spec
    from export.evaluation.motion_programs import composition_episode
    from export.models.chain_fit import motion_frames_to_use

    cell = _cell()
    conv = cell.convention
    spec = robot_spec(cell.robot)
    home_canon = np.asarray(spec.home_rad, np.float64) + 0.05
    q_home = conv.to_controller(home_canon[None])[0]
    ep = composition_episode(gen, cell, q_home, 8, 0.4, seed=11, poses=True)
    n = plan_poses(spec, 11, count=8, half_range=0.4).episode_positions().shape[0]
    assert ep.metadata.kind == "motion" and ep.num_frames == n
    assert ep.frames.shape == (n, 64, 64, 3) and ep.robot_mask is None
    q = ep.joint_positions
    np.testing.assert_allclose(q[0], q_home, atol=1e-9)  # starts at the calibration's home
    canon = conv.to_canonical(q)
    assert np.abs(canon - home_canon).max() <= 0.4 + 1e-9
    assert np.abs(canon - home_canon).max() > 0.2  # the joints did turn
    idx, held = motion_frames_to_use(q, ep.metadata.dof_units)
    assert held and len(idx) == 8  # the refinement reads one frame per held pose
    # the frames show the poses: a pose's frames differ from home's
    assert np.abs(ep.frames[idx[0]].astype(int) - ep.frames[0].astype(int)).max() > 30


def test_latency_shows_each_frame_the_pose_read_frames_before(gen) -> None:
    from export.evaluation.motion_programs import composition_episode

    cell = _cell("test_robot", 5)
    from export.cells.robots import robot_spec

    q_home = cell.convention.to_controller(
        np.asarray(robot_spec(cell.robot).home_rad, np.float64)[None])[0]
    on_time = composition_episode(gen, cell, q_home, 3, 0.3, seed=2, poses=True)
    late = composition_episode(gen, cell, q_home, 3, 0.3, seed=2, poses=True,
                               latency_frames=2)
    np.testing.assert_array_equal(late.joint_positions, on_time.joint_positions)
    np.testing.assert_array_equal(late.frames[2:], on_time.frames[:-2])
    np.testing.assert_array_equal(late.frames[:2], on_time.frames[[0, 0]])
    assert not np.array_equal(late.frames, on_time.frames)
