"""The per-DoF flow network's wide branch (``WarpConfig.joint_dilations``) and its attention
from the start frame to each channel's calibration rest frame (``joint_attention``):
warm-started from a model without them, they change nothing; trained, they keep the
properties that hold by construction (zero actions give the start frame, relabelling
changes nothing)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="training needs torch (pip install '.[train]')")

from export.models.warp import WarpConfig, WarpModel  # noqa: E402
from export.train.warp import _warm_start, calibration_states  # noqa: E402
from tests.warp_helpers import SMALL  # noqa: E402
from tests.warp_helpers import calibration as _calibration  # noqa: E402
from tests.warp_helpers import perturbed as _perturbed  # noqa: E402


def _frames(model, start, actions, frames, acts, perm=None, signs=None):
    with torch.no_grad():
        if perm is not None:
            acts, actions = acts[:, perm] * signs, actions[..., perm] * signs
        ctx = model.calibration(calibration_states(model, frames[None])[0], acts,
                                torch.ones(7))
        z = model.rollout(model.encoder(start), actions, ctx)
        return model.decoder(z.flatten(0, 1))[0]


def _exact_at_zero_and_under_relabelling(model, fr, acts, seed: int):
    """Zero actions give the start frame; relabelling the calibration and the actions
    together gives the same frames; returns the frames of a random rollout."""
    start = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    zero = _frames(model, start, torch.zeros(2, 5, 7), fr, acts)
    assert (zero.reshape(2, 5, 3, 64, 64) * 255 - start[:, None].float()).abs().max() < 1e-3
    rng = np.random.default_rng(seed)
    actions = torch.tensor(rng.normal(0, 0.1, (2, 4, 7)), dtype=torch.float32)
    perm = torch.tensor(rng.permutation(7))
    signs = torch.tensor(rng.choice([-1.0, 1.0], 7), dtype=torch.float32)
    a = _frames(model, start, actions, fr, acts)
    assert (a - _frames(model, start, actions, fr, acts, perm, signs)).abs().max() < 1e-5
    assert (a - _frames(model, start, torch.zeros(2, 4, 7), fr, acts)).abs().max() > 1e-4
    return start, actions, a


def test_config_round_trips_and_old_configs_stay_as_they_were():
    cfg = WarpConfig(**SMALL, joint_dilations=(2, 4, 8), joint_attention=8)
    d = cfg.to_dict()
    assert d["joint_dilations"] == [2, 4, 8] and d["joint_attention"] == 8
    assert WarpConfig.from_dict(d) == cfg
    old = WarpConfig(**SMALL).to_dict()
    assert "joint_dilations" not in old and "joint_attention" not in old


NEW = [dict(joint_dilations=(2, 4, 8)), dict(joint_attention=8),
       dict(joint_dilations=(2, 4), joint_attention=8)]


@pytest.mark.parametrize("extra", NEW)
def test_warm_start_without_the_branch_gives_the_same_frames(tmp_path, extra):
    torch.manual_seed(0)
    base, (fr, acts) = _perturbed(WarpModel(WarpConfig(**SMALL))), _calibration()
    path = str(tmp_path / "base.pt")
    torch.save({"model": base.state_dict()}, path)
    wide = WarpModel(WarpConfig(**SMALL, **extra))
    _warm_start(wide, path)
    wide.eval()
    start = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    actions = torch.randn(2, 4, 7) * 0.1
    assert torch.equal(_frames(base, start, actions, fr, acts),
                       _frames(wide, start, actions, fr, acts))


@pytest.mark.parametrize("extra", NEW[1:])
def test_attention_keeps_zero_actions_relabelling_and_cached_contexts_exact(extra):
    torch.manual_seed(2)
    model, (fr, acts) = _perturbed(WarpModel(WarpConfig(**SMALL, **extra))), _calibration()
    assert model.cfg.context_channels == 2 * 8 + 4 + 8 + 1
    start, actions, a = _exact_at_zero_and_under_relabelling(model, fr, acts, 6)
    # the keys reach the frames: another calibration rest frame changes them
    other = fr.clone()
    other[0] = torch.flip(fr[0], [2])
    assert (a - _frames(model, start, actions, other, acts)).abs().max() > 1e-5
    # the context made once and fed to every step gives the frames of a fresh one
    with torch.no_grad():
        ctx = model.calibration(calibration_states(model, fr[None])[0], acts, torch.ones(7))
        z = model.rollout(model.encoder(start), actions, ctx.clone())
        b = model.decoder(z.flatten(0, 1))[0]
    assert torch.equal(a, b)


def test_the_branch_reaches_far_cells_and_keeps_zero_actions_and_relabelling_exact():
    torch.manual_seed(1)
    model, (fr, acts) = _perturbed(WarpModel(WarpConfig(**SMALL, joint_dilations=(2, 4, 8)))), \
        _calibration()
    # receptive field: a change in one corner of the input reaches the opposite corner
    x = torch.zeros(1, 8, 16, 16, requires_grad=True)
    h = model.step.joint[1](model.step.joint[0](torch.cat([x, x, x], 1)))
    out = model.step.joint[2:](h + model.step.joint_wide(h))
    out[0, :, 15, 15].sum().backward()
    assert x.grad is not None and x.grad[0, :, 0, 0].abs().sum() > 0
    _exact_at_zero_and_under_relabelling(model, fr, acts, 5)
