"""The warp model's start-offset block (``WarpConfig.start_offset``): the start pose's joint
offsets from the calibration's home pose, read through each channel's rigid-rotation terms.
Small random models; the properties hold by construction, so they are checked exactly."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="training needs torch (pip install '.[train]')")

from export.cells.sampling import Convention  # noqa: E402
from export.models.warp import WarpConfig, WarpModel  # noqa: E402
from export.train.data import Cell, Motion  # noqa: E402
from export.train.warp import PairSet, _warm_start, calibration_states, losses  # noqa: E402
from tests.warp_helpers import SMALL, perturbed  # noqa: E402
from tests.warp_helpers import calibration as _calibration  # noqa: E402


def _model(start_offset: bool, seed: int = 0) -> WarpModel:
    torch.manual_seed(seed)
    return perturbed(WarpModel(WarpConfig(**SMALL, start_offset=start_offset)))


def _frames(model, start, actions, offset, frames, acts, perm=None, signs=None):
    with torch.no_grad():
        if perm is not None:
            acts, actions, offset = acts[:, perm] * signs, actions[..., perm] * signs, \
                offset[:, perm] * signs
        ctx = model.calibration(calibration_states(model, frames[None])[0], acts,
                                torch.ones(7))
        z0 = model.encoder(start)
        if model.cfg.start_offset:
            z0 = model.with_offset(z0, offset)
        z = model.rollout(z0, actions, ctx)
        return model.decoder(z.flatten(0, 1))[0]


def test_zero_actions_give_the_start_frame_at_any_start_offset():
    model, (fr, acts) = _model(True), _calibration()
    start = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    offset = torch.tensor(np.random.default_rng(3).uniform(-0.8, 0.8, (2, 7)), dtype=torch.float32)
    out = _frames(model, start, torch.zeros(2, 5, 7), offset, fr, acts)
    assert (out.reshape(2, 5, 3, 64, 64) * 255 - start[:, None].float()).abs().max() < 1e-3


def test_a_zero_offset_is_the_model_without_the_block(tmp_path):
    """Warm-started from a model without the block, a zero offset changes nothing."""
    base, (fr, acts) = _model(False), _calibration()
    new = WarpModel(WarpConfig(**SMALL, start_offset=True))
    path = str(tmp_path / "base.pt")
    torch.save({"model": base.state_dict()}, path)
    _warm_start(new, path)
    new.eval()
    start = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    actions = torch.randn(2, 4, 7) * 0.1
    a = _frames(base, start, actions, torch.zeros(2, 7), fr, acts)
    b = _frames(new, start, actions, torch.zeros(2, 7), fr, acts)
    assert torch.equal(a, b)
    # the per-DoF flow network is copied, not restarted from zero
    assert torch.equal(new.step.joint[-1].weight, base.step.joint[-1].weight)
    # and the offset does reach the frames
    c = _frames(new, start, actions, torch.full((2, 7), 0.5), fr, acts)
    assert (c - b).abs().max() > 1e-4


def test_relabelling_with_the_offset_gives_the_same_frames():
    model, (fr, acts) = _model(True), _calibration()
    rng = np.random.default_rng(5)
    start = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    actions = torch.tensor(rng.normal(0, 0.1, (2, 4, 7)), dtype=torch.float32)
    offset = torch.tensor(rng.uniform(-0.6, 0.6, (2, 7)), dtype=torch.float32)
    perm = torch.tensor(rng.permutation(7))
    signs = torch.tensor(rng.choice([-1.0, 1.0], 7), dtype=torch.float32)
    a = _frames(model, start, actions, offset, fr, acts)
    b = _frames(model, start, actions, offset, fr, acts, perm, signs)
    assert (a - b).abs().max() < 1e-5


def test_batches_carry_the_start_frames_offset_from_the_calibration_home():
    rng = np.random.default_rng(0)
    acts = np.zeros((57, 7), np.float32)
    home = rng.uniform(-1, 1, 7).astype(np.float32)
    jp = (home + rng.uniform(-0.5, 0.5, (32, 7))).astype(np.float32)
    mo = Motion(rng.integers(0, 256, (32, 64, 64, 3), dtype=np.uint8),
                np.diff(jp, axis=0, append=jp[-1:]).astype(np.float32),
                robot_mask=rng.random((32, 64, 64)) < 0.1, joint_positions=jp)
    mask = np.array([1, 1, 1, 1, 1, 1, 0], np.float32)
    cell = Cell("c0", "train", "panda", 6, Convention(tuple(range(6)), (1,) * 6),
                rng.integers(0, 256, (57, 64, 64, 3), dtype=np.uint8), acts, mask, [mo],
                cal_home=home)
    ps = PairSet([cell], "cpu")
    b = ps.batch(np.random.default_rng(1), 1, 4, 8, shared_start=True)
    start = b["start"][0]
    s = next(i for i in range(32) if torch.equal(torch.from_numpy(mo.frames[i]).permute(2, 0, 1),
                                                 start))
    want = (jp[s] - home) * mask
    assert np.allclose(b["offset"][0].numpy(), want, atol=1e-6)
    assert b["offset"][0, 6] == 0.0  # a padded channel carries no offset
    total, _ = losses(WarpModel(WarpConfig(**SMALL, start_offset=True)), b, 0.1, 1.0, 0.2)
    assert np.isfinite(float(total.detach()))


def test_with_offset_on_a_model_without_the_block_is_refused():
    model = _model(False)
    with pytest.raises(ValueError, match="no start-offset block"):
        model.with_offset(torch.zeros(1, model.cfg.layout.channels, 16, 16), torch.zeros(1, 7))
