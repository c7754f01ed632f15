"""The warp model's chain-composed per-DoF flows (``WarpConfig.compose_joints``): each
channel's backward flow sampled where the more proximal channels have moved the pixel.
Small random models and hand-made fields with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="training needs torch (pip install '.[train]')")

from export.models.warp import WarpConfig, WarpModel  # noqa: E402
from export.train.warp import calibration_states  # noqa: E402

SMALL = dict(feat_channels=8, motion_channels=8, global_channels=4, summary_channels=4,
             cal_width=8, dec_width=8, joint_width=8)


def _model(seed: int = 0) -> WarpModel:
    torch.manual_seed(seed)
    m = WarpModel(WarpConfig(**SMALL, compose_joints=True))
    with torch.no_grad():  # a trained-looking model: every motion weight nonzero
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return m.eval()


def _frames(model, start, actions, perm=None, signs=None):
    rng = np.random.default_rng(1)
    frames = torch.from_numpy(rng.integers(0, 256, (57, 3, 64, 64), dtype=np.uint8))
    acts = torch.zeros(57, 7)
    for k in range(7):
        acts[8 * k:8 * k + 3, k] = torch.tensor([0.1, 0.2, 0.1]) * (-1) ** k
    with torch.no_grad():
        if perm is not None:
            acts, actions = acts[:, perm] * signs, actions[..., perm] * signs
        ctx = model.calibration(calibration_states(model, frames[None])[0], acts, torch.ones(7))
        z = model.rollout(model.encoder(start), actions, ctx)
        return model.decoder(z.flatten(0, 1))[0]


def test_compose_needs_the_per_dof_flow_network():
    with pytest.raises(ValueError, match="joint_width"):
        WarpConfig(compose_joints=True)


def test_zero_actions_give_the_start_frame():
    model = _model()
    start = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    out = _frames(model, start, torch.zeros(2, 5, 7))
    assert (out.reshape(2, 5, 3, 64, 64) * 255 - start[:, None].float()).abs().max() < 1e-3


def test_relabelling_gives_the_same_frames():
    model = _model()
    rng = np.random.default_rng(5)
    start = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    actions = torch.tensor(rng.normal(0, 0.1, (2, 4, 7)), dtype=torch.float32)
    perm = torch.tensor(rng.permutation(7))
    signs = torch.tensor(rng.choice([-1.0, 1.0], 7), dtype=torch.float32)
    a = _frames(model, start, actions)
    b = _frames(model, start, actions, perm, signs)
    assert (a - b).abs().max() < 1e-5


def test_one_moving_channel_is_its_own_flow():
    step = _model().step
    f = torch.randn(2, 7, 4, 16, 16) * 3
    c_sin, c_cos = torch.zeros(2, 7), torch.zeros(2, 7)
    c_sin[:, 4], c_cos[:, 4] = 0.5, 0.2
    want = 0.5 * f[:, 4, :2] + 0.2 * f[:, 4, 2:]
    assert torch.allclose(step.compose(f, c_sin, c_cos), want, atol=1e-6)


def test_the_distal_flow_is_read_where_the_proximal_one_moved_the_pixel():
    """Two channels: the proximal one (larger field) shifts every pixel by 8 px to the right
    (2 grid cells); the distal one moves only the pixels of one column band. The composed
    flow at x is the proximal shift plus the distal flow read at x + 8 px, not at x."""
    step = _model().step
    f = torch.zeros(1, 7, 4, 16, 16)
    f[0, 2, 0] = 8.0  # channel 2: dx = +8 px everywhere (the sin term)
    f[0, 5, 1, :, 10] = 3.0  # channel 5: dy = +3 px on grid column 10 only
    c_sin = torch.zeros(1, 7)
    c_sin[0, 2] = c_sin[0, 5] = 1.0
    out = step.compose(f, c_sin, torch.zeros(1, 7))[0]
    assert torch.allclose(out[0], torch.full((16, 16), 8.0))
    # the distal band is met from grid column 8 (8 + 2 cells = 10), not from column 10
    assert torch.allclose(out[1, :, 8], torch.full((16,), 3.0))
    assert out[1, :, 10].abs().max() < 1e-6
    # the sum would have put it at column 10
    summed = (c_sin[0, :, None, None, None] * f[0, :, :2]).sum(0)
    assert summed[1, :, 10].min() == 3.0 and summed[1, :, 8].abs().max() == 0


def test_the_order_follows_the_fields_not_the_channel_index():
    step = _model().step
    f = torch.zeros(1, 7, 4, 16, 16)
    f[0, 6, 0] = 8.0  # the largest field is the last channel here
    f[0, 0, 1, :, 10] = 3.0
    c_sin = torch.zeros(1, 7)
    c_sin[0, 0] = c_sin[0, 6] = 1.0
    out = step.compose(f, c_sin, torch.zeros(1, 7))[0]
    assert torch.allclose(out[1, :, 8], torch.full((16,), 3.0))
    assert not math.isnan(float(out.sum()))
