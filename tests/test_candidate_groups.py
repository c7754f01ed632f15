"""Candidates in parallel: a batched call split into groups of rows, each group in its own
ONNX Runtime sessions on its own thread (``WorldModel(candidate_workers=...)``)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from edge.episode import load_episode
from edge.runtime.backends.ort import OrtCpuRunner
from edge.runtime.context import encode_calibration
from edge.runtime.errors import BackendError, CallOrderError, RolloutInputError
from edge.runtime.model import WorldModel, default_candidate_workers, load_model
from edge.runtime.rollout import Rollout
from tests.fixtures.runtime import calibration_episode, tiny_model_dir

SAMPLE = "samples/cell_sample"


def _factory(threads: int):
    return lambda p: OrtCpuRunner(p, intra_op_num_threads=threads)


def _inputs(n: int, t: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    start = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
    return start, rng.normal(0, 0.2, (n, t, 3)).astype(np.float32)


def test_the_plan_covers_every_row_once_in_near_equal_groups() -> None:
    with WorldModel(tiny_model_dir(), runner_factory=_factory(2), candidate_workers=2) as m:
        assert m.batch_sizes == (1, 4) and m.candidate_groups == 2
        assert m.shard_plan(4) == [[(0, 1), (1, 1)], [(2, 1), (3, 1)]]
        assert m.shard_plan(1) == [[(0, 1)]]  # one row: not split
        with pytest.raises(RolloutInputError, match=r"step batch 3: not exported"):
            m.shard_plan(3)
    with WorldModel(tiny_model_dir(), runner_factory=_factory(3), candidate_workers=3) as m:
        assert m.shard_plan(4) == [[(0, 1), (1, 1)], [(2, 1)], [(3, 1)]]
        # every worker's sessions get the model's threads divided among the workers
        assert {r.intra_op_num_threads for w in m._workers for r in w.values()} == {1}
    with WorldModel(tiny_model_dir(), runner_factory=_factory(1), candidate_workers=8) as m:
        assert m.shard_plan(4) == [[(0, 1)], [(1, 1)], [(2, 1)], [(3, 1)]]


@pytest.mark.parametrize(("workers", "n"), [(2, 4), (3, 4), (2, 7)])
def test_groups_give_the_frames_of_one_session(workers: int, n: int) -> None:
    start, actions = _inputs(n, 6, seed=5)  # 7 candidates: two chunks of the b4 graphs
    cal = calibration_episode(3, 4, 16, 16, seed=3)
    with WorldModel(tiny_model_dir(), runner_factory=_factory(1)) as one:
        ctx = encode_calibration(one, cal)
        want = Rollout(one, ctx, max_horizon=6, max_candidates=n).run(start, actions)
    seen: set[str] = set()
    with WorldModel(tiny_model_dir(), runner_factory=_factory(workers),
                    candidate_workers=workers) as m:
        for w in m._workers:  # record which threads run the groups' sessions
            for r in w.values():
                infer = r._infer

                def spy(feeds, outputs, infer=infer):
                    seen.add(threading.current_thread().name)
                    return infer(feeds, outputs)
                r._infer = spy
        r = Rollout(m, encode_calibration(m, cal), max_horizon=6, max_candidates=n)
        got = r.run(start, actions)
        assert r.chunks == (1 if n <= 4 else 2)
    # the b1 and b4 graphs round differently in the last bit at most
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
    assert (got == want).mean() > 0.99
    assert len(seen) == workers and threading.current_thread().name in seen


def test_groups_give_the_robot_masks_of_one_session() -> None:
    start, actions = _inputs(4, 5, seed=2)
    cal = calibration_episode(3, 4, 16, 16, seed=1)
    d = tiny_model_dir(robot_mask=True)
    out = {}
    for workers in (1, 2):
        with WorldModel(d, runner_factory=_factory(workers), candidate_workers=workers) as m:
            r = Rollout(m, encode_calibration(m, cal), max_horizon=5, max_candidates=4,
                        robot_mask=True)
            out[workers] = (r.run(start, actions), r.robot_masks())
    assert np.abs(out[1][0].astype(int) - out[2][0].astype(int)).max() <= 1
    np.testing.assert_allclose(out[2][1], out[1][1], atol=1e-5)


def _second_group_rollout(horizon: int, patch) -> tuple[WorldModel, Rollout]:
    """Two groups over 4 candidates on the tiny model, the second group's fused b1 runner's
    ``_infer`` replaced by ``patch(original)``; the rollout is reset (model active)."""
    start, actions = _inputs(4, horizon, seed=1)
    m = WorldModel(tiny_model_dir(), runner_factory=_factory(2), candidate_workers=2).activate()
    ctx = encode_calibration(m, calibration_episode(3, 4, 16, 16, seed=3))
    runner = m._workers[1]["fused_b1"]
    runner._infer = patch(runner._infer)
    r = Rollout(m, ctx, max_horizon=horizon, max_candidates=4)
    r.reset(start, actions)
    return m, r


def test_a_failing_group_raises_after_every_group_is_done() -> None:
    def broken(infer):
        def run(feeds, outputs):
            raise BackendError("step_decoder_b1.onnx: inference failed: test")
        return run
    m, r = _second_group_rollout(3, broken)
    with m:
        with pytest.raises(BackendError, match="inference failed: test"):
            r.step()
        # the first group may have pushed this step: stepping on needs a reset first
        with pytest.raises(CallOrderError, match=r"call reset\(\) first"):
            r.step()
    assert m._pool is None and m._workers == []  # deactivated: threads and sessions freed


def test_worker_counts_and_defaults() -> None:
    with pytest.raises(RolloutInputError, match=r"candidate_workers: expected an integer >= 1"):
        WorldModel(tiny_model_dir(), candidate_workers=0)
    assert default_candidate_workers("cpu", 2) == 2
    assert default_candidate_workers("cpu", 1) == 1
    assert default_candidate_workers("cpu", 16) == 4
    assert default_candidate_workers("tensorrt", 8) == 1
    assert default_candidate_workers("ort-cuda", 8) == 1
    m = load_model(tiny_model_dir(), intra_op_num_threads=2)
    try:
        assert m.candidate_groups == 2 and m.shard_plan(4) == [[(0, 1), (1, 1)], [(2, 1), (3, 1)]]
    finally:
        m.deactivate()
    m = load_model(tiny_model_dir(), intra_op_num_threads=2, candidate_workers=1)
    try:
        assert m.candidate_groups == 1 and m.shard_plan(4) == [[(0, 4)]]
    finally:
        m.deactivate()
    assert m.candidate_groups == 0  # not activated


def test_the_shipped_model_in_groups_gives_its_frames() -> None:
    cal = load_episode(f"{SAMPLE}/calibration.npz")
    ep = load_episode(f"{SAMPLE}/test.npz")
    out = {}
    for workers in (1, 2):
        m = load_model("models/reference", intra_op_num_threads=2, candidate_workers=workers)
        try:
            acts = np.zeros((16, 8, m.contract.max_dof), np.float32)
            scale = np.linspace(0.5, 1.5, 16, dtype=np.float32)[:, None, None]
            acts[:, :, :ep.num_dof] = ep.actions[:8][None] * scale
            r = Rollout(m, encode_calibration(m, cal), max_horizon=8, max_candidates=16)
            assert r.batch == 16
            out[workers] = r.run(ep.frames[0], acts)
        finally:
            m.deactivate()
    diff = np.abs(out[1].astype(int) - out[2].astype(int))
    assert diff.max() <= 1 and (diff == 0).mean() > 0.999


@pytest.mark.parametrize("workers", [1, 2])
def test_row_work_runs_around_each_group_on_its_thread(workers: int) -> None:
    calls: list[tuple[str, str, int, int]] = []

    def work(kind):
        return lambda first, stop: calls.append(
            (kind, threading.current_thread().name, first, stop))
    with WorldModel(tiny_model_dir(), runner_factory=_factory(workers),
                    candidate_workers=workers) as m:
        c = m.contract
        feeds = {"history_latents": np.zeros((4, c.history_length, *c.latent_shape), np.float32),
                 "history_actions": np.zeros((4, c.history_length, c.max_dof), np.float32),
                 "action": np.zeros((4, c.max_dof), np.float32),
                 "context": np.zeros(c.context_shape, np.float32)}
        nxt = np.zeros((4, *c.latent_shape), np.float32)
        frames = np.zeros((4, 3, *c.resolution), np.float32)
        m.step_decode(4, feeds, nxt, frames, work("before"), work("after"))
    spans = sorted((k, a, b) for k, _, a, b in calls)
    if workers == 1:
        assert spans == [("after", 0, 4), ("before", 0, 4)]
    else:
        assert spans == [("after", 0, 2), ("after", 2, 4), ("before", 0, 2), ("before", 2, 4)]
        thread_of = {(a, b): t for k, t, a, b in calls if k == "before"}
        assert thread_of[(0, 2)] == threading.current_thread().name != thread_of[(2, 4)]
        assert all(thread_of[(a, b)] == t for k, t, a, b in calls if k == "after")


def test_nan_in_one_group_is_counted_over_all_groups() -> None:
    def poisoned(infer):
        def run(feeds, outputs):
            result = infer(feeds, outputs)
            outputs["frames"][...] = np.nan
            return result
        return run
    m, r = _second_group_rollout(2, poisoned)
    with m:
        # the second group's two rows: 2 x 3 x 16 x 16 values
        with pytest.raises(RolloutInputError, match=r"step 0: the decoder produced NaN .*found "
                                                    r"1536 NaN value"):
            r.step()


def test_unfused_step_and_decoder_in_groups_give_the_frames_of_one_session() -> None:
    start, actions = _inputs(7, 6, seed=5)
    cal = calibration_episode(3, 4, 16, 16, seed=3)
    out = {}
    for fuse, workers in ((True, 1), (False, 2)):
        with WorldModel(tiny_model_dir(), runner_factory=_factory(2), fuse_step_decoder=fuse,
                        candidate_workers=workers) as m:
            assert bool(m._fused) is fuse
            out[fuse] = Rollout(m, encode_calibration(m, cal), max_horizon=6,
                                max_candidates=7).run(start, actions)
    assert np.abs(out[True].astype(int) - out[False].astype(int)).max() <= 1
