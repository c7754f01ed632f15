"""Reference model: relabelling augmentation, context/step separation, invariance, inputs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="training tests need torch (pip install '.[train]')")

from edge.episode import CalibrationSegment, Episode, EpisodeMetadata  # noqa: E402
from edge.runtime.calibration_input import CalibrationInputError, prepare_calibration  # noqa: E402
from export.cells.sampling import Convention, is_held_out_convention  # noqa: E402
from export.errors import ExportError  # noqa: E402
from export.models.latent import ModelConfig, WorldModel  # noqa: E402
from export.train.data import Cell, Motion, relabel, sample_relabelling  # noqa: E402
from export.train.latent import (  # noqa: E402
    ARCH,
    LatentSet,
    TrainOptions,
    degrade_frames,
    load_checkpoint,
    save_checkpoint,
)

CFG = ModelConfig(latent_channels=4, latent_size=4, ae_width=8, history=3, max_dof=3,
                  segment_frames=8, context_channels=6, step_width=8, step_blocks=1,
                  image_size=16)


def _calibration(n: int = 3, a_width: int | None = None, seed: int = 0) -> Episode:
    rng = np.random.default_rng(seed)
    a_width = a_width or n
    t = n * 8 + 1
    actions = np.zeros((t, a_width), np.float32)
    profile = np.array([0.25, 0.5, 0.25, 0, -0.25, -0.5, -0.25, 0], np.float32)
    order = rng.permutation(n)
    segs = []
    for k, c in enumerate(order):
        amp = float(rng.uniform(0.3, 0.5) * rng.choice([-1, 1]))
        actions[k * 8:(k + 1) * 8, c] = profile * amp
        segs.append(CalibrationSegment(f"j{c}", k * 8, (k + 1) * 8, amp))
    meta = EpisodeMetadata("c", "cam", "r", "toy", tuple(f"j{i}" for i in range(a_width)),
                           ("rad",) * a_width, 10.0, kind="calibration", segments=tuple(segs))
    return Episode(rng.integers(0, 255, (t, 16, 16, 3), dtype=np.uint8), actions,
                   np.arange(t) / 10.0, meta)


def _model(cfg: ModelConfig = CFG) -> WorldModel:
    torch.manual_seed(0)
    return WorldModel(cfg).eval()


def _context(model: WorldModel, ep: Episode, actions: np.ndarray | None = None) -> torch.Tensor:
    frames, acts, mask = prepare_calibration(ep, CFG.max_dof, CFG.segment_frames)
    if actions is not None:
        acts = actions
    lat = model.encode_frames(torch.from_numpy(frames))
    return model.calibration(lat, torch.from_numpy(acts), torch.from_numpy(mask))


@pytest.mark.parametrize("global_channels", [0, 1])
def test_calibrated_model_is_invariant_to_channel_relabelling(global_channels: int) -> None:
    model = _model(dataclasses.replace(CFG, global_token_channels=global_channels))
    ep = _calibration()
    rng = np.random.default_rng(1)
    start = torch.randn(2, 4, 4, 4)
    acts = rng.normal(0, 0.1, (2, 5, 3)).astype(np.float32)
    r = Convention((2, 0, 1), (-1, 1, -1))
    with torch.no_grad():
        base = model.rollout(start, torch.from_numpy(acts), _context(model, ep))
        _, cal_a, _ = prepare_calibration(ep, 3, 8)
        ctx_r = _context(model, ep, relabel(cal_a, r))
        moved = model.rollout(start, torch.from_numpy(relabel(acts, r)), ctx_r)
    assert torch.allclose(base, moved, atol=1e-5)
    with torch.no_grad():  # relabelling only the calibration changes the rollout
        wrong = model.rollout(start, torch.from_numpy(acts), ctx_r)
    assert not torch.allclose(base, wrong, atol=1e-3)


def test_cached_context_gives_the_same_rollout(tmp_path) -> None:
    model = _model()
    ctx = _context(model, _calibration())
    np.save(tmp_path / "ctx.npy", ctx.detach().numpy())
    cached = torch.from_numpy(np.load(tmp_path / "ctx.npy"))
    start = torch.randn(1, 4, 4, 4)
    acts = torch.randn(1, 6, 3) * 0.1
    with torch.no_grad():
        a = model.rollout(start, acts, ctx)
        b = model.rollout(start, acts, cached)
    assert torch.equal(a, b)


def test_absent_and_masked_channels_get_zero_context() -> None:
    model = _model()
    ep = _calibration(n=2)
    ctx = _context(model, ep)
    assert ctx.shape == (3, 6, 4, 4)
    assert torch.count_nonzero(ctx[2]) == 0 and torch.count_nonzero(ctx[:2]) > 0
    frames, acts, mask = prepare_calibration(ep, 3, 8)
    lat = model.encode_frames(torch.from_numpy(frames))
    zero = model.calibration(lat, torch.from_numpy(acts), torch.zeros(3))
    assert torch.count_nonzero(zero) == 0


def test_bad_calibration_episodes_are_refused_with_reasons() -> None:
    ep = _calibration(n=3)
    short = dataclasses.replace(ep, frames=ep.frames[:17], actions=ep.actions[:17],
                                timestamps=ep.timestamps[:17])
    with pytest.raises(CalibrationInputError, match=r"17 frames; expected 3 DoF segments.*"
                                                    r"missing or extra"):
        prepare_calibration(short, 3, 8)
    wide = _calibration(n=3, a_width=3)
    with pytest.raises(CalibrationInputError, match="action width 3; the model takes at most 2"):
        prepare_calibration(wide, 2, 8)
    with pytest.raises(CalibrationInputError, match="16x16; the model takes 64x64"):
        prepare_calibration(ep, 3, 8, resolution=(64, 64), source="cal.npz")
    twice = ep.actions.copy()
    first = np.abs(twice[:8]).sum(0).argmax()
    second = np.abs(twice[8:16]).sum(0).argmax()
    twice[:8, second] = 2 * twice[:8, first]  # moves with the first DoF, and more
    with pytest.raises(CalibrationInputError, match=r"moved most in the same segment 0"):
        prepare_calibration(dataclasses.replace(ep, actions=twice), 3, 8)
    frozen = ep.actions.copy()
    frozen[:, 2] = 0
    with pytest.raises(CalibrationInputError, match="DoF 'j2' never moved"):
        prepare_calibration(dataclasses.replace(ep, actions=frozen), 3, 8)


def _cell(rng: np.random.Generator) -> Cell:
    ep = _calibration()
    frames, acts, mask = prepare_calibration(ep, 3, 8)
    motion = Motion(rng.integers(0, 255, (12, 16, 16, 3), dtype=np.uint8),
                    rng.normal(0, 0.1, (12, 3)).astype(np.float32))
    return Cell("c0", "train", "toy", 3, Convention((1, 2, 0), (1, -1, 1)), frames, acts, mask,
                [motion])


def test_relabelling_augmentation_changes_actions_never_video() -> None:
    rng = np.random.default_rng(0)
    cell = _cell(rng)
    model = _model()
    latents = LatentSet([cell], model)
    opts = TrainOptions(stage="dynamics", data="", out="", steps=1, calibration_dropout=0.0,
                        history_mask=0.0)
    z = latents.motion_latents[0][0]
    for seed in range(20):
        b = latents.batch(np.random.default_rng(seed), 1, CFG, 3, opts)
        hl, tgt = b["hist_latents"][0], b["targets"][0]
        # The video (latents) is an untouched window of the episode's latents.
        matches = [t0 for t0 in range(len(z) - 3)
                   if torch.equal(tgt, z[t0 + 1:t0 + 4]) and torch.equal(hl[-1], z[t0])]
        assert matches
        t0 = matches[0]
        fut = b["actions"][0].numpy()
        orig = cell.motions[0].actions[t0:t0 + 3]
        # Actions are a signed permutation of the originals, the same for calibration.
        perm = [int(np.argmax([np.allclose(np.abs(fut[:, j]), np.abs(orig[:, i]))
                               for i in range(3)])) for j in range(3)]
        signs = [int(np.sign(fut[0, j] / orig[0, perm[j]])) for j in range(3)]
        r = Convention(tuple(perm), tuple(signs))
        np.testing.assert_allclose(b["cal_actions"][0].numpy(), relabel(cell.cal_actions, r),
                                   atol=1e-6)


def test_relabelling_never_produces_a_held_out_convention() -> None:
    rng = np.random.default_rng(3)
    for n in (6, 7):
        for _ in range(300):
            conv = Convention(tuple(int(i) for i in rng.permutation(n)),
                              tuple(int(s) for s in rng.choice([-1, 1], n)))
            if is_held_out_convention(conv):
                continue
            r = sample_relabelling(rng, conv)
            assert not is_held_out_convention(r.compose(conv))


def test_global_token_channels_are_constant_over_the_grid() -> None:
    cfg = dataclasses.replace(CFG, global_token_channels=1)
    ctx = _context(_model(cfg), _calibration())
    assert ctx.shape == (3, 6, 4, 4)
    glob = ctx[:, -1]  # the last learned channel is the pooled one
    assert torch.allclose(glob, glob[:, :1, :1].expand_as(glob))
    assert not torch.allclose(ctx[:, -2], ctx[:, -2, :1, :1].expand_as(ctx[:, -2]))
    with pytest.raises(ValueError, match="global_token_channels"):
        dataclasses.replace(CFG, global_token_channels=2)  # D - C = 2 learned channels


def test_checkpoint_from_another_architecture_is_refused(tmp_path) -> None:
    path = tmp_path / "ae.pt"
    save_checkpoint(path, {"arch": "some-other-net", "config": {}})
    with pytest.raises(ExportError, match=r"ae.pt: checkpoint of architecture 'some-other-net'"):
        load_checkpoint(path)
    save_checkpoint(path, {"arch": ARCH, "config": CFG.to_dict()})
    with pytest.raises(ExportError, match=r"configuration differs.*step_width"):
        load_checkpoint(path, dataclasses.replace(CFG, step_width=16))
    older = CFG.to_dict()  # made before global_token_channels existed: still CFG
    del older["global_token_channels"]
    save_checkpoint(path, {"arch": ARCH, "config": older})
    assert load_checkpoint(path, CFG)["config"] == older
    with pytest.raises(ExportError, match=r"configuration differs.*global_token_channels"):
        load_checkpoint(path, dataclasses.replace(CFG, global_token_channels=1))
    path.write_bytes(b"garbage")
    with pytest.raises(ExportError, match="not a readable checkpoint"):
        load_checkpoint(path)


def test_keypoint_degradation_changes_frames_but_not_where_the_arm_is() -> None:
    frames = np.full((6, 64, 64, 3), 40, np.uint8)
    for i in range(6):  # a bright block in a different place in every frame
        frames[i, 10 + 5 * i:18 + 5 * i, 20 + 3 * i:30 + 3 * i] = 220
    x = torch.from_numpy(frames)
    rng = np.random.default_rng(0)
    assert torch.equal(degrade_frames(x, rng, 0.0), x)
    out = degrade_frames(x, rng, 1.0)
    assert out.shape == x.shape and out.dtype == torch.uint8
    assert torch.equal(x, torch.from_numpy(frames))  # the input is not modified
    ys, xs = np.mgrid[:64, :64]
    for before, after in zip(frames, out.numpy(), strict=True):
        block = before.mean(-1) > 100
        assert np.abs(after.astype(int) - before)[block].mean() > 10  # visibly degraded
        assert after.max() < 220  # dimmer, blurred peak
        cen = []
        for img in (before, after):
            w = img.mean(-1) - np.median(img.mean(-1))
            w = np.where(w > 0.3 * w.max(), w, 0)
            cen.append([(w * xs).sum() / w.sum(), (w * ys).sum() / w.sum()])
        assert np.allclose(cen[0], cen[1], atol=0.6)  # the block did not move


def test_single_frame_start_pads_the_history_like_the_runtime() -> None:
    rng = np.random.default_rng(0)
    cell = _cell(rng)
    latents = LatentSet([cell], _model())
    z = latents.motion_latents[0][0]
    padded = TrainOptions(stage="dynamics", data="", out="", steps=1, calibration_dropout=0.0,
                          history_mask=0.0, single_frame_start=1.0)
    real = dataclasses.replace(padded, single_frame_start=0.0)
    seen_real_history = False
    for seed in range(10):
        b = latents.batch(np.random.default_rng(seed), 2, CFG, 3, padded)
        for hl, ha, tgt in zip(b["hist_latents"], b["hist_actions"], b["targets"], strict=True):
            t0 = next(t for t in range(len(z) - 3) if torch.equal(tgt, z[t + 1:t + 4]))
            assert all(torch.equal(h, z[t0]) for h in hl)  # the start frame, repeated
            assert not ha.any()  # with zero actions
        r = latents.batch(np.random.default_rng(seed), 2, CFG, 3, real)
        seen_real_history |= not torch.equal(r["hist_latents"][:, 0], r["hist_latents"][:, -1])
    assert seen_real_history


def test_batch_names_each_samples_own_calibration() -> None:
    rng = np.random.default_rng(5)
    cells = [_cell(rng), _cell(rng)]
    cells[1] = dataclasses.replace(cells[1], cell_id="c1",
                                   cal_frames=255 - cells[1].cal_frames)
    latents = LatentSet(cells, _model())
    assert latents.cal_store.shape == (2, *latents.cal_latents[0].shape)
    opts = TrainOptions(stage="dynamics", data="", out="", steps=1, calibration_dropout=0.0,
                        history_mask=0.0)
    b = latents.batch(np.random.default_rng(0), 16, CFG, 3, opts)
    assert b["cal_index"].dtype == torch.int64 and set(b["cal_index"].tolist()) == {0, 1}
    for i, tgt in zip(b["cal_index"].tolist(), b["targets"], strict=True):
        z = latents.motion_latents[i][0]  # the window comes from the same cell's motion
        assert any(torch.equal(tgt, z[t + 1:t + 4]) for t in range(len(z) - 3))
        assert torch.equal(latents.cal_store[i], latents.cal_latents[i])


def test_cuda_training_without_a_gpu_is_refused_by_name() -> None:
    from export.train.latent import _training_device

    assert _training_device("cpu") == torch.device("cpu")
    with pytest.raises(ExportError, match="--device: unknown device 'tpu'"):
        _training_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ExportError, match="--device cuda: PyTorch finds no CUDA GPU"):
            _training_device("cuda")
