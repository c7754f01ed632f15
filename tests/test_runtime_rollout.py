"""The rollout loop: ring buffer vs naive history, batching, allocation, replay, golden,
call order, DoF mask, context handling and bad inputs."""

from __future__ import annotations

import numpy as np
import pytest

from edge.runtime.calibration_input import CalibrationInputError
from edge.runtime.context import (
    CalibrationContext,
    context_from_source,
    encode_calibration,
    pad_calibration,
)
from edge.runtime.errors import (
    CallOrderError,
    ContextMismatchError,
    RolloutInputError,
    RuntimeInputError,
)
from edge.runtime.model import WorldModel, load_model
from edge.runtime.rollout import Rollout, RolloutParams
from tests.fixtures.runtime import (
    FakeRunner,
    MemoryContextSource,
    calibration_episode,
    tiny_model_dir,
)


@pytest.fixture(scope="module")
def model():
    m = load_model(tiny_model_dir(), intra_op_num_threads=1)
    yield m
    m.deactivate()


@pytest.fixture(scope="module")
def ctx(model):
    return encode_calibration(model, calibration_episode(3, 4, 16, 16, seed=3))


def _inputs(n: int, t: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    start = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
    return start, rng.normal(0, 0.2, (n, t, 3)).astype(np.float32)


def naive_rollout(model: WorldModel, ctx: CalibrationContext, start, actions) -> np.ndarray:
    """Full-history reference: keep every latent; history = the last S (padded with z0)."""
    c = model.contract
    s = c.history_length
    z0 = model.encode(start)
    lat, act = [z0], [np.zeros(c.max_dof, np.float32)]
    dec0 = model.runner("decoder_b1").infer({"latents": z0[None]})["frames"][0]
    offset = start.transpose(2, 0, 1).astype(np.float32) / np.float32(255) - dec0
    frames = []
    for a in actions:
        hist_l = ([z0] * s + lat)[-s:]
        hist_a = ([np.zeros_like(a)] * s + act)[-s:]
        z = model.runner("step_b1").infer({
            "history_latents": np.stack(hist_l)[None], "history_actions": np.stack(hist_a)[None],
            "action": a[None], "context": ctx.values})["next_latent"][0]
        lat.append(z)
        act.append(a)
        x = model.runner("decoder_b1").infer({"latents": z[None]})["frames"][0] + offset
        u8 = np.floor(np.clip(x, 0, 1).astype(np.float64) * 255 + 0.5).astype(np.uint8)
        frames.append(u8.transpose(1, 2, 0))
    return np.stack(frames)


def test_ring_buffer_equals_naive_full_history(model, ctx) -> None:
    start, actions = _inputs(1, 9)  # T > 2 * S: the ring wraps several times
    got = Rollout(model, ctx, max_horizon=9).run(start, actions)[0]
    want = naive_rollout(model, ctx, start, actions[0])
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
    assert (got == want).mean() > 0.99


def test_wrong_ring_order_would_be_detected(model, ctx) -> None:
    start, actions = _inputs(1, 6)
    base = Rollout(model, ctx, max_horizon=6).run(start, actions)
    shuffled = actions.copy()
    shuffled[0, [1, 2]] = shuffled[0, [2, 1]]
    other = Rollout(model, ctx, max_horizon=6).run(start, shuffled)
    assert not np.array_equal(base[0, 3:], other[0, 3:])


def test_batched_equals_unbatched(model, ctx) -> None:
    start, actions = _inputs(6, 5, seed=1)  # 6 candidates: 2 chunks of the b4 graph, padded
    r = Rollout(model, ctx, max_horizon=5, max_candidates=6)
    assert (r.batch, r.chunks) == (4, 2)
    batched = r.run(start, actions)
    single = Rollout(model, ctx, max_horizon=5)
    for i in range(6):
        one = single.run(start, actions[i])
        assert np.abs(batched[i].astype(int) - one[0].astype(int)).max() <= 1


def test_step_allocates_nothing_new(model, ctx) -> None:
    start, actions = _inputs(3, 6)
    r = Rollout(model, ctx, max_horizon=6, max_candidates=3)
    names = ["ring_latents", "ring_actions", "hist_latents", "hist_actions", "actions",
             "action_t", "start_latents", "next_latents", "decoded", "offset", "out_frames"]
    before = {n: (id(getattr(r, n)), getattr(r, n).ctypes.data) for n in names}
    r.reset(start, actions)
    views = []
    for _ in range(6):
        views.append(r.step())
    after = {n: (id(getattr(r, n)), getattr(r, n).ctypes.data) for n in names}
    assert before == after
    for t, v in enumerate(views):
        assert v.base is r.out_frames or v.base is r.out_frames.base
        assert np.shares_memory(v, r.out_frames[t])


def test_reset_and_replay_gives_the_same_frames(model, ctx) -> None:
    start, actions = _inputs(2, 7)
    r = Rollout(model, ctx, max_horizon=7, max_candidates=2)
    first = r.run(start, actions)
    r.run(*_inputs(2, 4, seed=9))  # something else in between
    assert np.array_equal(r.run(start, actions), first)


def test_streaming_yields_the_same_frames(model, ctx) -> None:
    start, actions = _inputs(2, 5)
    r = Rollout(model, ctx, max_horizon=5, max_candidates=2)
    full = r.run(start, actions)
    seen = [(t, f.copy()) for t, f in r.stream(start, actions)]
    assert [t for t, _ in seen] == list(range(5))
    assert np.array_equal(np.stack([f for _, f in seen], axis=1), full)


def test_golden_result_on_the_tiny_model(model) -> None:
    ctx = CalibrationContext(np.full(model.contract.context_shape, 0.1, np.float32),
                             model.sha256, 3)
    start = np.tile(np.linspace(0, 255, 16, dtype=np.uint8)[None, :, None], (16, 1, 3))
    actions = np.tile(np.array([0.1, -0.05, 0.02], np.float32), (1, 4, 1))
    frames = Rollout(model, ctx, max_horizon=4).run(start, actions)[0]
    means = frames.reshape(4, -1).mean(axis=1)
    np.testing.assert_allclose(means, GOLDEN_MEANS, atol=0.05)
    assert frames[0, 0, 0].tolist() == GOLDEN_FIRST_PIXEL


# Computed once with onnxruntime 1.23 on x86-64 (seed 0 tiny model); frames are uint8, so
# a float difference between platforms moves a mean by far less than the tolerance.
GOLDEN_MEANS = [122.801, 119.099, 115.501, 112.077]
GOLDEN_FIRST_PIXEL = [3, 14, 0]


def test_fake_backend_rollout_matches_onnxruntime(model, ctx) -> None:
    start, actions = _inputs(2, 3)
    with WorldModel(tiny_model_dir(), runner_factory=FakeRunner) as fake:
        fctx = CalibrationContext(ctx.values, fake.sha256, 3)
        got = Rollout(fake, fctx, max_horizon=3, max_candidates=2).run(start, actions)
    want = Rollout(model, ctx, max_horizon=3, max_candidates=2).run(start, actions)
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


def test_wrong_call_order_names_the_call(model, ctx) -> None:
    r = Rollout(model, ctx, max_horizon=2)
    with pytest.raises(CallOrderError, match=r"reset\(\)"):
        r.step()
    with pytest.raises(CallOrderError, match=r"reset\(\)"):
        r.frames()
    r.reset(*_inputs(1, 2))
    r.step()
    r.step()
    with pytest.raises(CallOrderError, match="all 2 steps are taken; call reset"):
        r.step()
    with pytest.raises(CallOrderError, match=r"activate\(\)"):
        _ = WorldModel(tiny_model_dir()).manifest


def test_dof_mask_ignores_masked_channels(model, ctx) -> None:
    start, actions = _inputs(1, 4)
    params = RolloutParams(dof_mask=(1, 0, 1))
    r = Rollout(model, ctx, params, max_horizon=4)
    a = r.run(start, actions)
    changed = actions.copy()
    changed[..., 1] += 5.0
    assert np.array_equal(r.run(start, changed), a)
    assert not np.array_equal(Rollout(model, ctx, max_horizon=4).run(start, changed), a)
    with pytest.raises(RolloutInputError, match="dof_mask"):
        Rollout(model, ctx, RolloutParams(dof_mask=(0, 0, 0)))


@pytest.mark.parametrize("case, match", [
    ("width", "expected 3 action channels"),
    ("nan", "expected finite values, found nan"),
    ("inf", "expected finite values, found inf"),
    ("frame", r"start frame: expected uint8 \[16, 16, 3\]"),
    ("too_many", "expected 1..2 candidates"),
    ("too_long", "expected 1..4 steps"),
])
def test_bad_rollout_inputs(model, ctx, case: str, match: str) -> None:
    start, actions = _inputs(2, 4)
    if case == "width":
        actions = actions[..., :2]
    elif case == "nan":
        actions[1, 2, 0] = np.nan
    elif case == "inf":
        actions[0, 0, 2] = np.inf
    elif case == "frame":
        start = start[:8]
    elif case == "too_many":
        actions = np.concatenate([actions, actions])
    elif case == "too_long":
        actions = np.concatenate([actions, actions], axis=1)
    r = Rollout(model, ctx, max_horizon=4, max_candidates=2)
    with pytest.raises(RolloutInputError, match=match):
        r.reset(start, actions)


def test_context_from_another_model_is_refused(model, ctx) -> None:
    other = CalibrationContext(ctx.values, "0" * 64, 3, "other")
    with pytest.raises(ContextMismatchError, match="made by model 000000000000"):
        Rollout(model, other)
    wrong = CalibrationContext(ctx.values[:2], model.sha256, 3, "short")
    with pytest.raises(ContextMismatchError, match="expected float32"):
        Rollout(model, wrong)
    with load_model(tiny_model_dir(seed=1), intra_op_num_threads=1) as m2:
        with pytest.raises(ContextMismatchError, match="re-encode"):
            Rollout(m2, ctx)


def test_calibration_padding_and_mask(model) -> None:
    ep = calibration_episode(2, 4, 16, 16)  # 2 DoFs: 9 frames, padded to 13
    frames, actions, mask = pad_calibration(model, ep)
    assert frames.shape[0] == actions.shape[0] == 13
    assert mask.tolist() == [1.0, 1.0, 0.0]
    assert np.array_equal(frames[9:], np.repeat(ep.frames[-1:], 4, axis=0))
    assert not actions[9:].any() and not actions[:, 2].any()
    c = encode_calibration(model, ep)
    assert c.num_dof == 2 and c.values.shape == model.contract.context_shape
    r = Rollout(model, c, max_horizon=2)
    assert r.action_width == 2
    r.reset(_inputs(1, 2)[0], np.zeros((2, 2), np.float32))  # 2 wide accepted
    with pytest.raises(CalibrationInputError, match="16 frames; expected 3 DoF segments of 4 "
                                                    "frames plus one"):
        pad_calibration(model, calibration_episode(3, 5, 16, 16))
    with pytest.raises(CalibrationInputError, match="8x8; the model takes 16x16"):
        pad_calibration(model, calibration_episode(2, 4, 8, 8))
    import dataclasses

    ep = calibration_episode(2, 4, 16, 16)
    motion = dataclasses.replace(ep, metadata=dataclasses.replace(ep.metadata, kind="motion"))
    with pytest.raises(CalibrationInputError, match="a 'motion' episode; expected a "
                                                    "calibration episode"):
        pad_calibration(model, motion)


def test_context_from_source(model, ctx) -> None:
    src = MemoryContextSource()
    with pytest.raises(RuntimeInputError, match="no context for cell 'c'"):
        context_from_source(src, model, "c", "cam", "rob")
    src.put("c", "cam", "rob", model.sha256, ctx.values)
    got = context_from_source(src, model, "c", "cam", "rob")
    assert np.array_equal(got.values, ctx.values) and got.model_sha256 == model.sha256
    src.put("c", "cam", "rob", model.sha256, ctx.values[..., :2])
    with pytest.raises(ContextMismatchError):
        context_from_source(src, model, "c", "cam", "rob")


class _CountingRunner(FakeRunner):
    """Counts infer() calls per graph file."""

    calls: dict[str, int] = {}

    def _infer(self, feeds, outputs):
        _CountingRunner.calls[self.path.stem] = _CountingRunner.calls.get(self.path.stem, 0) + 1
        return super()._infer(feeds, outputs)


def test_each_request_runs_the_smallest_exported_batch_that_fits(ctx) -> None:
    """A rollout sized for 4 candidates runs the b1 graphs for one candidate (not b4, 4x
    the work), the b4 graphs for 3, and two b4 chunks for 6 in a rollout sized for 8."""
    with WorldModel(tiny_model_dir(), runner_factory=_CountingRunner) as m:
        r = Rollout(m, ctx, max_horizon=3, max_candidates=8)
        assert (r.batch, r.chunks) == (4, 2)
        for n, plan, calls in [(1, (1, 1), {"step_b1": 3}), (3, (4, 1), {"step_b4": 3}),
                               (6, (4, 2), {"step_b4": 6}), (1, (1, 1), {"step_b1": 3})]:
            start, actions = _inputs(n, 3, seed=n)
            _CountingRunner.calls = {}
            frames = r.run(start, actions)
            assert (r.batch, r.chunks) == plan
            assert {k: v for k, v in _CountingRunner.calls.items()
                    if k.startswith("step")} == calls
            one = Rollout(m, ctx, max_horizon=3).run(start, actions[0])
            assert frames.shape == (n, 3, 16, 16, 3)
            assert np.abs(frames[0].astype(int) - one[0].astype(int)).max() <= 1


def test_unexported_batch_is_a_clear_error(model, ctx) -> None:
    feeds = {"history_latents": np.zeros((32, 3, 4, 4, 4), np.float32)}
    with pytest.raises(RolloutInputError, match=r"step batch 32: not exported by .*; exported "
                                                r"batch sizes are \[1, 4\]"):
        model.step(32, feeds, np.zeros((32, 4, 4, 4), np.float32))
    with pytest.raises(RolloutInputError, match=r"decoder batch 2: not exported"):
        model.decode(2, np.zeros((2, 4, 4, 4), np.float32), np.zeros((2, 3, 16, 16), np.float32))
    with pytest.raises(RolloutInputError, match=r"graph 'step_b32': not in .*model.json"):
        model.runner("step_b32")
    r = Rollout(model, ctx, max_horizon=2, max_candidates=1)
    assert r.path == "host" and r.device_graph is None


def test_fused_step_and_decoder_give_the_same_frames(model, ctx) -> None:
    start, actions = _inputs(5, 6, seed=4)
    want = Rollout(model, ctx, max_horizon=6, max_candidates=5).run(start, actions)
    from edge.runtime.backends.ort import OrtCpuRunner

    def factory(p):
        return OrtCpuRunner(p, intra_op_num_threads=1)

    with WorldModel(tiny_model_dir(), runner_factory=factory, fuse_step_decoder=True) as fused:
        assert sorted(fused._fused) == [1, 4]
        got = Rollout(fused, ctx, max_horizon=6, max_candidates=5).run(start, actions)
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
    assert (got == want).mean() > 0.99
