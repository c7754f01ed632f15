"""Small random warp models and calibrations shared by the warp-model property tests."""

from __future__ import annotations

import numpy as np
import torch

from export.models.warp import WarpModel

#: a warp model small enough to run many times in a test
SMALL = dict(feat_channels=8, motion_channels=8, global_channels=4, summary_channels=4,
             cal_width=8, dec_width=8, joint_width=8)


def perturbed(model: WarpModel) -> WarpModel:
    """``model`` made to look trained (every weight nonzero), in eval mode."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


def calibration(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Random calibration frames uint8 ``[57, 3, 64, 64]`` and actions ``[57, 7]``: each
    channel swept out in its own 8-frame segment, alternating signs."""
    rng = np.random.default_rng(seed)
    frames = torch.from_numpy(rng.integers(0, 256, (57, 3, 64, 64), dtype=np.uint8))
    acts = torch.zeros(57, 7)
    for k in range(7):
        acts[8 * k:8 * k + 3, k] = torch.tensor([0.1, 0.2, 0.1]) * (-1) ** k
    return frames, acts
