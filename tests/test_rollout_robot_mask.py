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
