"""Warp-model training pieces on small synthetic cells: batches, losses, the contrastive
(futures-retrieval) term."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="training needs torch (pip install '.[train]')")

from export.cells.sampling import Convention  # noqa: E402
from export.models.warp import WarpConfig, WarpModel  # noqa: E402
from export.train.data import Cell, Motion  # noqa: E402
from export.train.warp import PairSet, losses  # noqa: E402


def _cells(n: int = 3, seed: int = 0) -> list[Cell]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        acts = np.zeros((57, 7), np.float32)
        for k in range(7):
            acts[8 * k:8 * k + 3, k] = [0.1, 0.2, 0.1]
        motions = [Motion(rng.integers(0, 256, (32, 64, 64, 3), dtype=np.uint8),
                          rng.normal(0, 0.05, (32, 7)).astype(np.float32),
                          robot_mask=rng.random((32, 64, 64)) < 0.1) for _ in range(2)]
        out.append(Cell(f"c{i}", "train", "panda", 7, Convention(tuple(range(7)), (1,) * 7),
                        rng.integers(0, 256, (57, 64, 64, 3), dtype=np.uint8), acts,
                        np.ones(7, np.float32), motions))
    return out


def test_shared_start_batches_share_one_start_with_distinct_targets() -> None:
    ps = PairSet(_cells(), "cpu")
    b = ps.batch(np.random.default_rng(1), 2, 4, 16, shared_start=True)
    starts = b["start"].reshape(2, 4, -1)
    assert all(torch.equal(starts[j, 0], starts[j, k]) for j in range(2) for k in range(4))
    cums = b["cum"].reshape(2, 4, -1)
    for j in range(2):
        assert len({tuple(c.tolist()) for c in cums[j]}) == 4
    indep = ps.batch(np.random.default_rng(1), 2, 4, 16)
    assert not all(torch.equal(indep["start"][0], s) for s in indep["start"][1:4])


def test_losses_with_the_contrastive_term_are_finite_and_train() -> None:
    cfg = WarpConfig(feat_channels=8, motion_channels=8, global_channels=4,
                     summary_channels=4, cal_width=8, dec_width=8, joint_width=8)
    model = WarpModel(cfg)
    b = PairSet(_cells(), "cpu").batch(np.random.default_rng(2), 2, 4, 16, shared_start=True)
    total, parts = losses(model, b, 0.1, 1.0, 0.2, contrast_weight=0.1, pairs=4)
    assert np.isfinite(float(total.detach())) and parts["contrast"] > 0
    total.backward()
    grads = [p.grad for p in model.decoder.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    off, parts_off = losses(model, b, 0.1, 1.0, 0.2)
    assert parts_off["contrast"] == 0.0 and float(off.detach()) < float(total.detach())
