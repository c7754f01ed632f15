"""Every pre-check rule on constructed frames and actions with known verdicts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge.precheck.evaluate import evaluate
from edge.precheck.rules import GoalRule, JointLimits, KeepOutRegion, KeepOutRule, Rules
from edge.runtime.errors import RuntimeInputError

H = W = 8
LEFT_HALF = KeepOutRegion("left", ((0.0, 0.0), (0.5, 0.0), (0.5, 1.0), (0.0, 1.0)))


def _case(n: int = 3, t: int = 4):
    start = np.full((H, W, 3), 100, np.uint8)
    frames = np.repeat(start[None, None], n, 0).repeat(t, 1).copy()  # (N, T, H, W, 3)
    actions = np.full((n, t, 2), 0.01, np.float32)
    return start, frames, actions


def test_keep_out_first_failing_step() -> None:
    start, frames, actions = _case()
    frames[0, 2, 1, 1] = 200  # candidate 0: motion inside the keep-out at step 2
    frames[1, 1, 1, 6] = 200  # candidate 1: motion outside it (right half)
    frames[2, 3, 0, 0] = 110  # candidate 2: a change below the threshold
    rules = Rules(Path("r.yaml"), keep_out=KeepOutRule((LEFT_HALF,), motion_threshold=20))
    res = evaluate(rules, start, None, actions, frames)
    v0, v1, v2 = res.verdicts
    assert (v0.passed, v0.first_fail_step, v0.first_fail_rule) == (False, 2, "keep_out")
    assert "1 px moved" in v0.detail
    assert v1.passed and v2.passed
    assert res.chosen in (1, 2) and res.ranking[-1] == 0
    assert res.keepout_mask[:, :4].all() and not res.keepout_mask[:, 4:].any()
    allowed = Rules(Path("r.yaml"), keep_out=KeepOutRule((LEFT_HALF,), 20, max_moved_pixels=1))
    assert evaluate(allowed, start, None, actions, frames).verdicts[0].passed


def test_joint_limits_from_start_plus_summed_actions() -> None:
    start, frames, actions = _case(n=2, t=5)
    actions[0, :, 0] = 0.3  # q = 0.5 + 0.3 (t+1): 0.8, 1.1 -> fails at step 1
    actions[1, :, 1] = -0.1  # q1 = -0.1 .. -0.5: inside [-1, 1]
    rules = Rules(Path("r.yaml"), joint_limits=JointLimits((-1.0, -1.0), (1.0, 1.0)))
    res = evaluate(rules, start, np.array([0.5, 0.0]), actions, frames)
    assert (res.verdicts[0].first_fail_step, res.verdicts[0].first_fail_rule) == (1, "joint_limits")
    assert res.verdicts[1].passed and res.chosen == 1
    with pytest.raises(RuntimeInputError, match="needs the start joint state"):
        evaluate(rules, start, None, actions, frames)
    with pytest.raises(RuntimeInputError, match="expected 2 values"):
        evaluate(rules, start, np.zeros(3), actions, frames)


def test_per_step_action_bound_and_rule_order() -> None:
    start, frames, actions = _case(n=2, t=4)
    actions[0, 3, 1] = -0.2  # bound 0.1 broken at step 3
    actions[1, 1, 0] = 0.5  # step 1: both the bound and the joint limit break; bound first
    rules = Rules(Path("r.yaml"), max_step_action=(0.1,),
                  joint_limits=JointLimits((-0.4, -1.0), (0.4, 1.0)))
    res = evaluate(rules, start, np.zeros(2), actions, frames)
    assert (res.verdicts[0].first_fail_step, res.verdicts[0].first_fail_rule) == \
        (3, "max_step_action")
    assert (res.verdicts[1].first_fail_step, res.verdicts[1].first_fail_rule) == \
        (1, "max_step_action")
    assert res.chosen is None
    assert "|action[1]| = 0.2 > 0.1 at step 3" in res.verdicts[0].detail
    # with the channels' names, each detail names the channel beside its index
    named = evaluate(rules, start, np.zeros(2), actions, frames,
                     dof_names=["shoulder", "elbow"])
    assert "|action[1 (elbow)]| = 0.2 > 0.1 at step 3" in named.verdicts[0].detail
    limits_only = Rules(Path("r.yaml"), joint_limits=rules.joint_limits)
    named = evaluate(limits_only, start, np.zeros(2), actions, frames,
                     dof_names=["shoulder", "elbow"])
    assert named.verdicts[1].first_fail_rule == "joint_limits"
    assert named.verdicts[1].detail.startswith("joint 0 (shoulder) at 0.51 outside")
    # names of another count than the channels: the index alone
    other = evaluate(limits_only, start, np.zeros(2), actions, frames, dof_names=["a"])
    assert other.verdicts[1].detail.startswith("joint 0 at 0.51 outside")
    with pytest.raises(RuntimeInputError, match="expected 1 or 2 values"):
        evaluate(Rules(Path("r.yaml"), max_step_action=(0.1, 0.1, 0.1)), start, None, actions,
                 frames)


def test_goal_ssim_threshold_and_ranking() -> None:
    rng = np.random.default_rng(0)
    start, frames, actions = _case(n=3, t=3)
    goal = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    frames[0, -1] = goal  # reaches the goal exactly
    frames[1, -1] = np.clip(goal.astype(int) + rng.integers(-40, 40, goal.shape), 0, 255)
    rules = Rules(Path("r.yaml"), goal=GoalRule(Path("g.png"), min_ssim=0.5))
    res = evaluate(rules, start, None, actions, frames, names=["a", "b", "c"], goal=goal)
    v = {x.name: x for x in res.verdicts}
    assert v["a"].passed and v["a"].scores["goal_ssim"] == pytest.approx(1.0)
    assert not v["c"].passed and v["c"].first_fail_rule == "goal" and v["c"].first_fail_step == 2
    assert res.ranking[0] == 0 and res.chosen == 0 and v["a"].rank == 1
    with pytest.raises(RuntimeInputError, match="goal image"):
        evaluate(rules, start, None, actions, frames, goal=None)


def test_ranking_prefers_less_keepout_energy_then_smaller_actions() -> None:
    start, frames, actions = _case(n=3, t=2)
    frames[0, 0, 0, 0] = 110  # below the threshold but some energy
    actions[2] *= 3  # larger actions
    rules = Rules(Path("r.yaml"), keep_out=KeepOutRule((LEFT_HALF,), motion_threshold=20))
    res = evaluate(rules, start, None, actions, frames)
    assert all(v.passed for v in res.verdicts)
    assert res.ranking == [1, 2, 0] and res.chosen == 1


def test_max_step_action_is_inclusive_at_the_limit_in_the_actions_precision() -> None:
    """A float32 action clipped at the bound (float32(0.05) > 0.05 in float64) passes; the
    next float32 above it fails."""
    start, frames, actions = _case(n=2)
    actions[0, 1, 0] = np.float32(0.05)
    actions[1, 1, 0] = np.nextafter(np.float32(0.05), np.float32(1.0))
    res = evaluate(Rules(Path("r.yaml"), max_step_action=(0.05,)), start, None, actions, frames)
    assert res.verdicts[0].passed, res.verdicts[0].detail
    assert not res.verdicts[1].passed and res.verdicts[1].first_fail_step == 1


def test_keep_out_on_the_predicted_robot_mask() -> None:
    start, frames, actions = _case()
    masks = np.zeros((3, 4, H, W), np.float32)
    masks[0, 1, 0:2, 0:2] = 0.9  # candidate 0: 4 robot pixels inside the left half, step 1
    masks[1, :, 0:4, 6:8] = 1.0  # candidate 1: the robot stays in the right half
    masks[2, :, 0:4, 0:4] = 0.4  # candidate 2: unsure, below 0.5: not robot
    frames[1, 0, 1, 1] = 250  # motion inside the region that is not the robot
    ko = KeepOutRule((LEFT_HALF,), motion_threshold=20, basis="auto")
    res = evaluate(Rules(Path("r.yaml"), keep_out=ko), start, None, actions, frames,
                   robot_masks=masks)
    assert res.keepout_basis == "robot_mask"
    v0, v1, v2 = res.verdicts
    assert (v0.passed, v0.first_fail_step, v0.first_fail_rule) == (False, 1, "keep_out")
    assert "4 px of the predicted robot" in v0.detail and "allowed 3" in v0.detail
    assert v1.passed and v2.passed and v0.scores["keepout_robot_max"] == 4
    # the same frames on motion: candidate 1's moved pixel is what refuses it
    on_motion = Rules(Path("r.yaml"), keep_out=KeepOutRule((LEFT_HALF,), 20, basis="motion"))
    res = evaluate(on_motion, start, None, actions, frames, robot_masks=masks)
    assert res.keepout_basis == "motion against the start frame"
    assert [v.passed for v in res.verdicts] == [True, False, True]
    # basis robot_mask without a mask is an error, not a silent fallback
    strict = Rules(Path("r.yaml"), keep_out=KeepOutRule((LEFT_HALF,), 20, basis="robot_mask"))
    with pytest.raises(RuntimeInputError, match="predicts no robot mask"):
        evaluate(strict, start, None, actions, frames)


def test_keep_out_on_robot_counts_equals_keep_out_on_the_masks() -> None:
    """The counts a rollout gives (the device path's only output) decide as the masks do."""
    from edge.precheck.rules import rasterise
    from kernels import reference as ref

    start, frames, actions = _case()
    rng = np.random.default_rng(0)
    masks = rng.random((3, 4, H, W), dtype=np.float32) * np.float32(0.56)
    masks[2] = 0.0  # candidate 2 is never robot
    ko = KeepOutRule((LEFT_HALF,), motion_threshold=20, max_robot_pixels=2)
    rules = Rules(Path("r.yaml"), keep_out=ko)
    keep = rasterise(ko.regions, H, W)
    counts = ref.robot_in_keepout(masks.reshape(-1, H, W), keep).reshape(3, 4)
    on_masks = evaluate(rules, start, None, actions, frames, robot_masks=masks)
    on_counts = evaluate(rules, start, None, actions, frames, robot_counts=counts)
    assert on_masks.keepout_basis == on_counts.keepout_basis == "robot_mask"
    assert [(v.passed, v.first_fail_step, v.detail, v.scores) for v in on_masks.verdicts] == \
        [(v.passed, v.first_fail_step, v.detail, v.scores) for v in on_counts.verdicts]
    assert not all(v.passed for v in on_counts.verdicts) and on_counts.verdicts[2].passed
    # basis motion ignores the counts; basis robot_mask accepts counts in place of masks
    motion = Rules(Path("r.yaml"), keep_out=KeepOutRule((LEFT_HALF,), 20, basis="motion"))
    res = evaluate(motion, start, None, actions, frames, robot_counts=counts)
    assert res.keepout_basis == "motion against the start frame"
    strict = Rules(Path("r.yaml"), keep_out=KeepOutRule((LEFT_HALF,), 20, basis="robot_mask"))
    assert evaluate(strict, start, None, actions, frames,
                    robot_counts=counts).keepout_basis == "robot_mask"
    with pytest.raises(RuntimeInputError, match="masks or their counts, not both"):
        evaluate(rules, start, None, actions, frames, robot_masks=masks, robot_counts=counts)
    with pytest.raises(RuntimeInputError, match=r"robot counts: expected integers \[3, 4\], "
                                                 r"found int32 \[3, 3\]"):
        evaluate(rules, start, None, actions, frames, robot_counts=counts[:, :3])
    with pytest.raises(RuntimeInputError, match=r"robot masks: expected float32 \[3, 4, 8, 8\], "
                                                 r"found float64"):
        evaluate(rules, start, None, actions, frames, robot_masks=masks.astype(np.float64))


def test_motion_is_measured_against_the_zero_action_rollout() -> None:
    start, frames, actions = _case(n=2)
    drift = np.repeat(start[None], 4, 0).copy()
    drift[:, 2, 2] = 180  # the model changes this pixel even when nothing moves
    frames[:, :, 2, 2] = 180  # so every candidate shows it
    frames[1, 3, 5, 1] = 200  # candidate 1 really moves inside the region at step 3
    ko = KeepOutRule((LEFT_HALF,), motion_threshold=20, basis="motion")
    rules = Rules(Path("r.yaml"), keep_out=ko)
    against_start = evaluate(rules, start, None, actions, frames)
    assert [v.passed for v in against_start.verdicts] == [False, False]
    res = evaluate(rules, start, None, actions, frames, reference_frames=drift)
    assert res.keepout_basis == "motion against the zero-action rollout"
    assert [v.passed for v in res.verdicts] == [True, False]
    assert res.verdicts[1].first_fail_step == 3
