"""The rollout keeps the decoder's predicted robot mask when asked (the pre-check's
keep-out basis)."""

from __future__ import annotations

import numpy as np
import pytest

from edge.episode import load_episode
from edge.runtime.context import encode_calibration
from edge.runtime.errors import CallOrderError, RolloutInputError
from edge.runtime.model import load_model
from edge.runtime.rollout import Rollout

SAMPLE = "samples/cell_sample"


@pytest.fixture(scope="module")
def shipped():
    model = load_model("models/reference", intra_op_num_threads=1)
    ctx = encode_calibration(model, load_episode(f"{SAMPLE}/calibration.npz"))
    yield model, ctx
    model.deactivate()


def test_masks_come_with_the_same_frames(shipped) -> None:
    model, ctx = shipped
    ep = load_episode(f"{SAMPLE}/test.npz")
    acts = np.zeros((3, 6, model.contract.max_dof), np.float32)
    acts[0, :, :ep.num_dof] = ep.actions[:6]
    acts[1, :, 1] = 0.05
    with_mask = Rollout(model, ctx, max_horizon=6, max_candidates=3, robot_mask=True)
    frames = with_mask.run(ep.frames[0], acts)
    masks = with_mask.robot_masks()
    assert masks.shape == (3, 6, 64, 64) and masks.dtype == np.float32
    assert 0.0 <= masks.min() and masks.max() <= 1.0
    plain = Rollout(model, ctx, max_horizon=6, max_candidates=3).run(ep.frames[0], acts)
    np.testing.assert_array_equal(frames, plain)
    # the robot is in the picture, and a zero-action candidate's mask does not change
    assert (masks[2] >= 0.5).sum(axis=(1, 2)).min() > 20
    np.testing.assert_allclose(masks[2], np.repeat(masks[2, :1], 6, 0), atol=1e-5)
    # the moving candidates' masks do
    assert np.abs(masks[1, -1] - masks[2, -1]).max() > 0.1
    assert np.abs(masks[0, -1] - masks[2, -1]).max() > 0.1


def test_masks_without_asking_or_without_a_mask_output_are_refused(shipped) -> None:
    from tests.fixtures.runtime import tiny_model_dir

    model, ctx = shipped
    ro = Rollout(model, ctx, max_horizon=2)
    ro.run(np.zeros((64, 64, 3), np.uint8), np.zeros((1, 2, 7), np.float32))
    with pytest.raises(CallOrderError, match="robot_mask=True"):
        ro.robot_masks()
    tiny = load_model(tiny_model_dir(), intra_op_num_threads=1)
    try:
        assert not tiny.has_robot_mask
        from edge.runtime.context import CalibrationContext

        tctx = CalibrationContext(np.zeros(tiny.contract.context_shape, np.float32),
                                  tiny.sha256)
        with pytest.raises(RolloutInputError, match="predicts no robot mask"):
            Rollout(tiny, tctx, max_horizon=2, robot_mask=True)
    finally:
        tiny.deactivate()


def test_keepout_counts_are_the_kept_masks_counted(shipped) -> None:
    """With a keep-out mask the rollout counts the robot-mask pixels >= 0.5 inside it each
    step: the counts of its own masks (robot_mask=True), the same without keeping them."""
    from kernels import reference as ref

    model, ctx = shipped
    ep = load_episode(f"{SAMPLE}/test.npz")
    acts = np.zeros((2, 5, model.contract.max_dof), np.float32)
    acts[0, :, :ep.num_dof] = ep.actions[:5]
    acts[1, :, 1] = 0.05
    keep = np.zeros((64, 64), np.uint8)
    keep[:, 44:] = 1  # the robot's right part
    both = Rollout(model, ctx, max_horizon=5, max_candidates=2, robot_mask=True, keepout=keep)
    frames = both.run(ep.frames[0], acts)
    counts, masks = both.robot_keepout_counts(), both.robot_masks()
    assert counts.shape == (2, 5) and counts.dtype == np.int32 and counts.min() > 0
    assert np.array_equal(counts, ((masks >= 0.5) & (keep != 0)).sum(axis=(2, 3)))
    assert np.array_equal(counts, ref.robot_in_keepout(masks.reshape(-1, 64, 64), keep)
                          .reshape(2, 5))
    only = Rollout(model, ctx, max_horizon=5, max_candidates=2, keepout=keep)
    np.testing.assert_array_equal(only.run(ep.frames[0], acts), frames)
    np.testing.assert_array_equal(only.robot_keepout_counts(), counts)
    with pytest.raises(CallOrderError, match="robot_mask=True"):
        only.robot_masks()


def test_precheck_on_the_cpu_decides_on_the_mask_as_before(shipped, tmp_path) -> None:
    """``precheck`` on the CPU, now from the rollout's counts: the basis, verdicts and
    details that ``evaluate`` gives on the kept masks."""
    import argparse
    import json

    from edge.commands import precheck
    from edge.precheck.evaluate import evaluate
    from edge.precheck.rules import load_rules

    model, ctx = shipped
    ep = load_episode(f"{SAMPLE}/test.npz")
    acts = np.zeros((3, 5, ep.num_dof), np.float32)
    acts[0] = ep.actions[:5]
    acts[1, :, 0] = 0.08
    np.save(tmp_path / "cands.npy", acts)
    (tmp_path / "rules.yaml").write_text(
        "keep_out:\n  motion_threshold: 20\n  max_robot_pixels: 180\n  regions:\n"
        "    - polygon: [[0.7, 0], [1, 0], [1, 1], [0.7, 1]]\n")
    parser = argparse.ArgumentParser(prog="syncedge")
    precheck.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["precheck", "--calibration", f"{SAMPLE}/calibration.npz",
                              "--start", f"{SAMPLE}/test.npz", "--actions",
                              str(tmp_path / "cands.npy"), "--rules", str(tmp_path / "rules.yaml"),
                              "--model", "models/reference", "--backend", "cpu", "--threads", "1",
                              "--out", str(tmp_path / "out")])
    args.func(args)
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    ro = Rollout(model, ctx, max_horizon=5, max_candidates=3, robot_mask=True)
    frames = ro.run(ep.frames[0], acts)
    want = evaluate(load_rules(tmp_path / "rules.yaml"), ep.frames[0], ep.joint_positions[0],
                    acts, frames, robot_masks=ro.robot_masks())
    assert rep["keepout_basis"] == want.keepout_basis == "robot_mask"
    assert [(v["passed"], v["first_fail_step"], v["detail"], v["scores"]["keepout_robot_max"])
            for v in rep["verdicts"]] == [(v.passed, v.first_fail_step, v.detail,
                                           v.scores["keepout_robot_max"]) for v in want.verdicts]
    assert [v.passed for v in want.verdicts] == [True, True, False]  # the still robot is in
    assert "px of the predicted robot inside the keep-out regions" in want.verdicts[2].detail
