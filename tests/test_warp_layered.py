"""The layered composite (``WarpConfig.composite = "layered"``): only the robot layer moves.

Hand-made frames, masks and flows with known answers, both samplers, the configuration
round trip, and the exported graphs' zero-action property for a layered model.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from export.models.warp import (
    COMPOSITES,
    WarpConfig,
    WarpDecoder,
    WarpModel,
    identity_grid,
    plate_from_masks,
    warp_composite,
)
from tests.warp_helpers import SMALL, calibration, perturbed

BASE = identity_grid(64)


def _scene(shift_px: int):
    """A start frame with a bright 8x8 'arm' at rows/cols 20-27 on a textured background,
    its mask, and a flow that moves the arm ``shift_px`` to the right: the backward flow is
    ``-shift_px`` in x everywhere (a smooth flow that spreads past the arm, as a coarse
    16x16 field does)."""
    g = torch.Generator().manual_seed(3)
    image = torch.rand(1, 3, 64, 64, generator=g) * 0.5
    image[:, :, 20:28, 20:28] = 1.0
    mask = torch.zeros(1, 1, 64, 64)
    mask[:, :, 20:28, 20:28] = 1.0
    flows = torch.zeros(1, 4, 64, 64)
    flows[:, 0] = -float(shift_px)
    return image, mask, flows, torch.zeros(1, 1, 64, 64)


@pytest.mark.parametrize("sampler", ["grid_sample", "gather"])
def test_the_arm_moves_and_the_static_scene_stays_put(sampler):
    image, mask, flows, o = _scene(4)
    frames, robot = warp_composite(image, mask, flows, o, BASE, sampler, "layered")
    # the arm arrives 4 px to the right, exactly (integer flow)
    assert torch.allclose(frames[:, :, 20:28, 24:32], image[:, :, 20:28, 20:28], atol=1e-6)
    assert torch.allclose(robot[:, :, 20:28, 24:32], torch.ones(1, 1, 8, 8), atol=1e-6)
    # every pixel the arm neither leaves nor reaches is the start frame's, exactly
    keep = torch.ones(64, 64, dtype=torch.bool)
    keep[20:28, 20:32] = False
    assert torch.equal(frames[..., keep], image[..., keep])
    assert robot[..., keep].abs().max().item() == 0.0
    # what the arm uncovered (no fill weight here) still shows the start frame there
    assert torch.equal(frames[:, :, 20:28, 20:24], image[:, :, 20:28, 20:24])
    # blend drags the whole static scene by the same flow: the background moves
    blended, _ = warp_composite(image, mask, flows, o, BASE, sampler, "blend")
    assert (blended[..., keep] - image[..., keep]).abs().max().item() > 0.1


@pytest.mark.parametrize("sampler", ["grid_sample", "gather"])
def test_the_fill_replaces_only_uncovered_background(sampler):
    image, mask, flows, o = _scene(4)
    flows[:, 2] = -8.0  # the fill samples 8 px to the left
    o[:, :, 20:28, 20:24] = 1.0  # where the arm was and no longer is
    frames, robot = warp_composite(image, mask, flows, o, BASE, sampler, "layered")
    assert torch.allclose(frames[:, :, 20:28, 20:24], image[:, :, 20:28, 12:16], atol=1e-6)
    # the fill weight does not hide the arm where the arm arrives
    o[:, :, 20:28, 24:32] = 1.0
    frames2, robot2 = warp_composite(image, mask, flows, o, BASE, sampler, "layered")
    assert torch.allclose(frames2[:, :, 20:28, 24:32], image[:, :, 20:28, 20:28], atol=1e-6)
    assert torch.equal(robot2, robot)


@pytest.mark.parametrize("composite", COMPOSITES)
def test_zero_flows_and_fill_give_the_start_frame_exactly(composite):
    g = torch.Generator().manual_seed(5)
    image = torch.randint(0, 256, (2, 3, 64, 64), generator=g).to(torch.float32) / 255.0
    mask = torch.rand(2, 1, 64, 64, generator=g)
    for sampler in ("grid_sample", "gather"):
        frames, _ = warp_composite(image, mask, torch.zeros(2, 4, 64, 64),
                                   torch.zeros(2, 1, 64, 64), BASE, sampler, composite)
        # to uint8 as the runtime rounds: identical
        assert torch.equal(torch.round(frames * 255.0), torch.round(image * 255.0))


def test_both_samplers_agree_on_random_layered_inputs():
    g = torch.Generator().manual_seed(7)
    args = (torch.rand(2, 3, 64, 64, generator=g), torch.rand(2, 1, 64, 64, generator=g),
            torch.randn(2, 4, 64, 64, generator=g) * 5.0, torch.rand(2, 1, 64, 64, generator=g))
    ref = warp_composite(*args, BASE, "grid_sample", "layered")
    out = warp_composite(*args, BASE, "gather", "layered")
    for a, r in zip(out, ref, strict=True):
        assert (a - r).abs().max().item() <= 2e-6


def test_unknown_composites_are_refused_and_the_choice_round_trips():
    with pytest.raises(ValueError, match="composite 'stack'"):
        WarpConfig(composite="stack")
    image, mask, flows, o = _scene(0)
    with pytest.raises(ValueError, match="composite 'stack'"):
        warp_composite(image, mask, flows, o, BASE, "gather", "stack")
    assert "composite" not in WarpConfig().to_dict()  # earlier models' model.json unchanged
    cfg = WarpConfig(composite="layered")
    assert cfg.to_dict()["composite"] == "layered"
    assert WarpConfig.from_dict(cfg.to_dict()) == cfg


def test_a_layered_decoder_keeps_the_static_scene_of_a_moving_rollout():
    torch.manual_seed(0)
    cfg = WarpConfig(**SMALL, composite="layered")
    model = perturbed(WarpModel(cfg))
    with torch.no_grad():  # a start mask that sees no robot: the robot layer is empty
        model.decoder.mask_head[-1].bias.fill_(-30.0)
    frames_u8, acts = calibration()
    from export.train.warp import calibration_states

    ctx = model.calibration(calibration_states(model, frames_u8[None])[0], acts,
                            torch.ones(7))
    start = frames_u8[:1]
    with torch.no_grad():
        z0 = model.encoder(start)
        z = model.rollout(z0, torch.full((1, 4, 7), 0.1), ctx)
        out = model.decoder.flows(z[:, -1])
    img = out["start"]
    moved = out["mask"]
    # wherever the robot layer is empty and nothing is filled, the frame is the start frame
    away = ((moved < 1e-6) & (out["o"] < 1e-6)).expand_as(img)
    assert away.any()
    assert torch.allclose(out["frames"][away], img[away], atol=1e-6)
    # the same weights blended move those pixels
    blend = WarpDecoder(dataclasses.replace(cfg, composite="blend"))
    blend.load_state_dict(model.decoder.state_dict())
    with torch.no_grad():
        frames_b = blend.flows(z[:, -1])["frames"]
    assert (frames_b[away] - img[away]).abs().max().item() > 1e-3


def test_a_plate_is_the_mean_of_the_frames_where_no_robot_is_near():
    frames = torch.zeros(3, 3, 16, 16, dtype=torch.uint8)
    frames[0] = 30
    frames[1] = 90
    frames[2] = 150
    robot = torch.zeros(3, 1, 16, 16)
    robot[0, :, 4:8, 4:8] = 1.0  # frame 0 has the robot here, frames 1-2 elsewhere
    robot[1:, :, 4:8, 10:14] = 1.0
    robot[:, :, 0, 0] = 1.0  # every frame has the robot at (0, 0)
    plate = plate_from_masks(frames, robot, margin_px=0)
    assert plate.shape == (1, 4, 16, 16)
    assert torch.allclose(plate[0, :3, 5, 5], torch.full((3,), 120 / 255))  # frames 1, 2
    assert torch.allclose(plate[0, :3, 5, 11], torch.full((3,), 30 / 255))  # frame 0 only
    assert torch.allclose(plate[0, :3, 15, 15], torch.full((3,), 90 / 255))  # all three
    assert plate[0, 3, 0, 0] == 0.0 and plate[0, :3, 0, 0].abs().max() == 0.0
    assert plate[0, 3].sum() == 16 * 16 - 1
    # the margin grows each mask: the pixel next to frame 0's robot comes from 1 and 2 only
    grown = plate_from_masks(frames, robot, margin_px=1)
    assert torch.allclose(grown[0, :3, 5, 3], torch.full((3,), 120 / 255))
    assert torch.allclose(plate[0, :3, 5, 3], torch.full((3,), 90 / 255))
    with pytest.raises(ValueError, match="plate_from_masks"):
        plate_from_masks(frames, robot[:2])


@pytest.mark.parametrize("sampler", ["grid_sample", "gather"])
def test_the_fill_takes_the_plate_where_it_is_valid(sampler):
    image, mask, flows, o = _scene(4)
    flows[:, 2] = -8.0
    o[:, :, 20:28, 20:24] = 1.0
    plate = torch.zeros(1, 4, 64, 64)
    plate[:, :3] = 0.25
    plate[:, 3, :, 22:] = 1.0  # valid from column 22 on
    frames, _ = warp_composite(image, mask, flows, o, BASE, sampler, "layered", plate)
    assert torch.allclose(frames[:, :, 20:28, 22:24], torch.full((1, 3, 8, 2), 0.25))
    assert torch.allclose(frames[:, :, 20:28, 20:22], image[:, :, 20:28, 12:14], atol=1e-6)
    # no fill weight, no plate: the plate changes nothing where o is zero
    same, _ = warp_composite(image, mask, flows, torch.zeros_like(o), BASE, sampler,
                             "layered", plate)
    ref, _ = warp_composite(image, mask, flows, torch.zeros_like(o), BASE, sampler, "layered")
    assert torch.equal(same, ref)


def test_a_layered_model_exports_and_its_graphs_keep_zero_actions_exact(tmp_path):
    pytest.importorskip("onnxruntime")
    from pathlib import Path

    import numpy as np

    from edge.episode import load_episode
    from edge.runtime.context import encode_calibration
    from edge.runtime.model import load_model
    from edge.runtime.rollout import Rollout
    from export.variants.warp_export import export_warp_model

    sample = Path(__file__).resolve().parent.parent / "samples" / "cell_sample"
    torch.manual_seed(4)
    cfg = WarpConfig(**SMALL, composite="layered")
    model = perturbed(WarpModel(cfg))
    run = tmp_path / "run"
    run.mkdir()
    torch.save({"model": model.state_dict(), "config": cfg.to_dict(), "step": 0,
                "options": {}, "history": [], "cells": 0}, run / "warp.pt")
    export_warp_model(str(run), str(tmp_path / "fp32"))
    m = load_model(tmp_path / "fp32", intra_op_num_threads=1)
    try:
        assert m.manifest.provenance["config"]["composite"] == "layered"
        ctx = encode_calibration(m, load_episode(sample / "calibration.npz"))
        start = load_episode(sample / "test.npz").frames[0]
        r = Rollout(m, ctx, max_horizon=6, max_candidates=2)
        zero = r.run(start, np.zeros((2, 6, 7), np.float32))
        assert np.abs(zero.astype(int) - start.astype(int)[None, None]).max() <= 1
        moved = r.run(start, np.full((2, 6, 7), 0.1, np.float32))
        assert np.abs(moved.astype(int) - start.astype(int)[None, None]).max() > 8
    finally:
        m.deactivate()
