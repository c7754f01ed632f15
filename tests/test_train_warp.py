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


def test_true_flow_loss_counts_the_robot_and_the_static_scene_not_what_is_uncovered() -> None:
    from export.train.warp import true_flow_loss

    target = torch.zeros(1, 2, 64, 64)
    mask = torch.zeros(1, 1, 64, 64)
    mask[..., 8:24, 8:24] = 1.0  # the robot at the target
    target[:, 0, 8:24, 8:24] = 3.0  # it came from 3 px to the right
    valid = torch.ones(1, 1, 64, 64)
    valid[..., 40:48, 40:48] = 0.0  # uncovered by the arm: no flow of the arm there
    b = {"true_flow": target, "true_flow_valid": valid, "mask": mask}
    assert float(true_flow_loss(target.clone(), None, b)) == 0.0
    coarse = torch.nn.functional.avg_pool2d(target, 4)
    assert float(true_flow_loss(target.clone(), coarse, b)) == pytest.approx(0.0, abs=1e-6)
    anything = target.clone()
    anything[..., 40:48, 40:48] = 50.0
    assert float(true_flow_loss(anything, None, b)) == 0.0
    still = torch.zeros_like(target)  # an arm that does not move: 2.5 px (smooth L1) each
    assert float(true_flow_loss(still, None, b)) == pytest.approx(2.5, abs=1e-5)
    assert float(true_flow_loss(still, torch.zeros(1, 2, 16, 16), b)) == pytest.approx(5.0,
                                                                                    abs=1e-5)


def test_true_flow_batches_replace_dis_and_train() -> None:
    cells = _cells()
    for c in cells:
        for m in c.motions:
            t = len(m.frames)
            link = np.where(m.robot_mask, 0, 255).astype(np.uint8)
            pose = np.tile(np.array([2, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1], np.float32),
                           (t, 1, 1))
            pose[:, 0, 1] = np.linspace(0, 0.1, t)  # the link slides sideways
            m.geometry = {"depth": np.where(m.robot_mask, 2.0, 0.0).astype(np.float32),
                          "link": link, "poses": pose,
                          "camera": np.array([0, 0, 0, 1, 0, 0, 0, 0, 1, 0.1, 0.1, -0.1, 0.0])}
    ps = PairSet(cells, "cpu")
    b = ps.batch(np.random.default_rng(3), 2, 4, 16, flow_target="true")
    assert "dis" not in b and b["true_flow"].shape == (8, 2, 64, 64)
    robot = b["mask"].bool()[:, 0]
    assert (b["true_flow"][:, 1].abs() < 1e-4).all()
    assert (b["true_flow"][:, 0][robot] != 0).any() and (b["true_flow"][:, 0][~robot] == 0).all()
    same = ps.batch(np.random.default_rng(3), 2, 4, 16)  # the same pairs, with DIS
    assert torch.equal(same["target"], b["target"]) and torch.equal(same["cum"], b["cum"])
    cfg = WarpConfig(feat_channels=8, motion_channels=8, global_channels=4,
                     summary_channels=4, cal_width=8, dec_width=8, joint_width=8)
    model = WarpModel(cfg)
    total, parts = losses(model, b, 0.1, 1.0, 0.2, true_flow_weight=0.05)
    assert np.isfinite(float(total.detach())) and parts["flow"] > 0
    total.backward()
    assert model.step.joint[-1].weight.grad is not None
    bare = PairSet(_cells(), "cpu")
    with pytest.raises(Exception, match="no geometry"):
        bare.batch(np.random.default_rng(3), 2, 4, 16, flow_target="true")


def test_a_plate_batch_fills_from_each_cells_calibration_frames() -> None:
    from export.models.warp import background_plate
    from export.train.warp import batch_forward

    cfg = WarpConfig(feat_channels=8, motion_channels=8, global_channels=4,
                     summary_channels=4, cal_width=8, dec_width=8, joint_width=8,
                     composite="layered")
    torch.manual_seed(0)
    model = WarpModel(cfg).eval()
    with torch.no_grad():
        model.decoder.mask_head[-1].bias.fill_(-30.0)  # the start mask sees no robot
        for p in model.parameters():  # a trained-looking model: nonzero flows and fill
            p.add_(torch.randn_like(p) * 0.05)
    b = PairSet(_cells(), "cpu").batch(np.random.default_rng(3), 2, 3, 16)
    with torch.no_grad():
        z, plain = batch_forward(model, b)
        _, filled = batch_forward(model, b, plate=True)
        plates = torch.cat([background_plate(model, f) for f in b["cal_frames"]])
        # no robot seen: every pixel valid, each plate the mean of its cell's frames
        assert plates[:, 3].min() == 1.0
        mean = b["cal_frames"].to(torch.float32).mean(1) / 255.0
        assert torch.allclose(plates[:, :3], mean, atol=1e-5)
        manual = model.decoder.flows(z, plates[b["owner"]])["frames"]
    assert torch.allclose(filled["frames"], manual, atol=1e-6)
    o = plain["o"]
    assert (o > 0).any() and (o == 0).any()
    changed = (filled["frames"] - plain["frames"]).abs().amax(1, keepdim=True) > 1e-6
    assert changed.any() and not (changed & (o == 0)).any()  # only where the fill is used
    total, _ = losses(model, b, 0.1, 1.0, 0.2, plate=True)
    assert np.isfinite(float(total.detach()))


def test_the_per_dof_field_loss_turns_the_targets_into_each_sweep_direction() -> None:
    # given fields: the loss is zero where they equal the target with the sin fields
    # turned into the channel's sweep direction, and not when the direction is ignored
    from export.train.warp import dof_field_loss

    gen = torch.Generator().manual_seed(0)
    target = torch.randn(2, 3, 4, 16, 16, generator=gen)
    direction = torch.tensor([[1.0, -1.0, 0.0], [-1.0, 1.0, 1.0]])
    context = torch.zeros(2, 3, 5, 16, 16)
    context[:, :, -1] = direction[:, :, None, None]
    turned = target.clone()
    turned[:, :, 0:2] *= direction[:, :, None, None, None]

    b = {"dof_fields": target, "dof_cover": torch.ones(2, 1, 16, 16)}
    loss, epe = dof_field_loss(turned, context, b)
    assert float(loss) == 0.0 and float(epe) == 0.0
    loss, epe = dof_field_loss(target, context, b)
    assert float(loss) > 0 and float(epe) > 0  # the -1 channels' sin fields are wrong
    b["dof_cover"] = torch.zeros(2, 1, 16, 16)  # no robot: nothing to score
    loss, epe = dof_field_loss(target, context, b)
    assert float(loss) == 0.0
