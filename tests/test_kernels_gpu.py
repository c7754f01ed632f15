"""Kernels on an NVIDIA GPU against the NumPy reference; graph-captured rollout (gpu marker)."""

from __future__ import annotations

import numpy as np
import pytest

from kernels import reference as ref
from kernels.launcher import KernelLauncher, RingShape

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def launcher():
    with KernelLauncher() as k:
        yield k


class _Dev:
    """Device copies of host arrays, freed together."""

    def __init__(self, k):
        self.k, self.cuda, self.allocs = k, k.driver, []

    def put(self, arr):
        alloc = self.cuda.mem_alloc(max(arr.nbytes, 1))
        self.cuda.memcpy_htod(alloc, np.ascontiguousarray(arr))
        self.allocs.append(alloc)
        return alloc

    def get(self, alloc, like):
        self.k.synchronize()
        out = np.empty_like(like)
        self.cuda.memcpy_dtoh(out, alloc)
        return out


def test_loaded_from_fatbin_or_compiled(launcher):
    assert launcher.load_path in ("fatbin",) or launcher.load_path.startswith("nvcc sm_")


@pytest.mark.parametrize("w", [0, 3, 4])
def test_ring_kernels_match(launcher, w):
    rng = np.random.default_rng(w)
    b, s, lat, a = 3, 5, 37, 6
    shape = RingShape(b, s, lat, a)
    rl = rng.standard_normal((b, s, lat)).astype(np.float32)
    ra = rng.standard_normal((b, s, a)).astype(np.float32)
    z = rng.standard_normal((b, lat)).astype(np.float32)
    act = rng.standard_normal((b, a)).astype(np.float32)
    mask = np.array([1, 0, 1, 1, 0, 1], np.uint8)
    d = _Dev(launcher)
    g_rl, g_ra, g_hl, g_ha = d.put(rl), d.put(ra), d.put(rl), d.put(ra)
    state = d.put(np.array([w, 0], np.int32))
    launcher.ring_push_linearise(shape, g_rl, g_ra, g_hl, g_ha, d.put(z), d.put(act),
                                 d.put(mask), state)  # fmt: skip
    launcher.ring_advance(shape, state)
    rl2, ra2 = rl.copy(), ra.copy()
    hl2, ha2 = np.empty_like(rl), np.empty_like(ra)
    nxt = ref.ring_push_linearise(rl2, ra2, hl2, ha2, w, z, act, mask)
    assert np.array_equal(d.get(g_rl, rl), rl2) and np.array_equal(d.get(g_ra, ra), ra2)
    assert np.array_equal(d.get(g_hl, rl), hl2) and np.array_equal(d.get(g_ha, ra), ha2)
    assert list(d.get(state, np.zeros(2, np.int32))) == [nxt, 1]
    # Separate push then linearise agree with the fused kernel.
    g_rl3, g_ra3, state3 = d.put(rl), d.put(ra), d.put(np.array([w, 0], np.int32))
    launcher.ring_push(shape, g_rl3, g_ra3, d.put(z), d.put(act), d.put(mask), state3)
    launcher.ring_advance(shape, state3)
    launcher.ring_linearise(shape, g_hl, g_ha, g_rl3, g_ra3, state3)
    assert np.array_equal(d.get(g_hl, rl), hl2) and np.array_equal(d.get(g_rl3, rl), rl2)
    # Fill.
    start = rng.standard_normal((b, lat)).astype(np.float32)
    launcher.ring_fill(shape, g_rl, g_ra, g_hl, g_ha, d.put(start), state)
    ref.ring_fill(rl2, ra2, start)
    assert np.array_equal(d.get(g_rl, rl), rl2) and np.array_equal(d.get(g_hl, rl), rl2)
    assert not d.get(g_ra, ra).any() and list(d.get(state, np.zeros(2, np.int32))) == [0, 0]


def test_select_action_and_store_step_match(launcher):
    rng = np.random.default_rng(7)
    actions = rng.standard_normal((4, 6, 5)).astype(np.float32)
    mask = np.array([1, 0, 0, 1, 1], np.uint8)
    d = _Dev(launcher)
    out = d.put(np.zeros((4, 5), np.float32))
    for t in (0, 5, 9):
        state = d.put(np.array([0, t], np.int32))
        launcher.select_action(out, d.put(actions), d.put(mask), 4, 6, 5, state)
        assert np.array_equal(d.get(out, np.zeros((4, 5), np.float32)),
                              ref.select_action(actions, mask, t))  # fmt: skip
    src = rng.integers(0, 256, 1000, dtype=np.uint8)
    dst = d.put(np.zeros((3, 1000), np.uint8))
    launcher.store_step(dst, d.put(src), 1000, 3, d.put(np.array([0, 1], np.int32)))
    got = d.get(dst, np.zeros((3, 1000), np.uint8))
    assert np.array_equal(got[1], src) and not got[0].any() and not got[2].any()


@pytest.mark.parametrize("with_offset", [False, True])
def test_decode_matches(launcher, with_offset):
    rng = np.random.default_rng(11)
    b, h, w = 3, 45, 61
    x = rng.uniform(-0.3, 1.3, (b, 3, h, w)).astype(np.float32)
    halves = np.array([(k + 0.5) / 255 for k in range(255)], np.float32)
    x.reshape(-1)[:255] = halves
    x.reshape(-1)[255:510] = np.nextafter(halves, np.float32(1))
    x.reshape(-1)[-4:] = [np.nan, np.inf, -np.inf, -0.0]
    off = rng.uniform(-0.05, 0.05, x.shape).astype(np.float32) if with_offset else None
    d = _Dev(launcher)
    frames = d.put(np.zeros((b, h, w, 3), np.uint8))
    nan = d.put(np.zeros(1, np.int32))
    launcher.decode_frames(frames, d.put(x), d.put(off) if with_offset else 0, b, h, w, nan)
    want, n_want = ref.decode_frames_counting(x, off)
    assert np.array_equal(d.get(frames, want), want)
    assert int(d.get(nan, np.zeros(1, np.int32))[0]) == n_want == 1


@pytest.mark.parametrize("hw", [(1, 1), (37, 53), (128, 128)])
def test_precheck_matches(launcher, hw):
    rng = np.random.default_rng(hw[0])
    b, (h, w) = 6, hw
    start = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    pred = rng.integers(0, 256, (b, h, w, 3), dtype=np.uint8)
    keep = (rng.random((h, w)) < 0.3).astype(np.uint8)
    goal = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    d = _Dev(launcher)
    moved, energy, mse = d.put(np.zeros(b, np.int32)), d.put(np.zeros(b, np.float32)), d.put(
        np.zeros(b, np.float32))  # fmt: skip
    launcher.precheck_scores(moved, energy, mse, d.put(pred), d.put(start), d.put(keep),
                             d.put(goal), b, h, w, 17)  # fmt: skip
    want = ref.precheck_scores(pred, start, keep, 17, goal)
    assert np.array_equal(d.get(moved, want.moved_in_keepout), want.moved_in_keepout)
    assert np.array_equal(d.get(energy, want.motion_energy), want.motion_energy)
    assert np.array_equal(d.get(mse, want.goal_mse), want.goal_mse)


@pytest.mark.parametrize("hw", [(1, 1), (37, 53), (128, 128)])
def test_robot_in_keepout_matches(launcher, hw):
    rng = np.random.default_rng(hw[1])
    b, (h, w) = 5, hw
    mask = rng.random((b, 1, h, w), dtype=np.float32)
    mask.reshape(-1)[::3] = np.float32(0.5)
    mask.reshape(-1)[1::3] = np.nextafter(np.float32(0.5), np.float32(0))
    mask.reshape(-1)[-1] = np.nan
    keep = (rng.random((h, w)) < 0.4).astype(np.uint8)
    d = _Dev(launcher)
    count = d.put(np.full(b, -1, np.int32))
    launcher.robot_in_keepout(count, d.put(mask), d.put(keep), b, h, w)
    want = ref.robot_in_keepout(mask[:, 0], keep)
    assert np.array_equal(d.get(count, want), want)
    launcher.robot_in_keepout(count, d.put(mask), d.put(np.zeros((h, w), np.uint8)), b, h, w)
    assert not d.get(count, want).any()


@pytest.mark.parametrize("use_graph", [False, True])
def test_graph_captured_rollout_equals_cpu_rollout(launcher, use_graph):
    from bench.bench_kernels import ToyModel, cpu_rollout, make_inputs
    from edge.runtime.cuda_step import CudaRolloutStep, StepShapes

    shapes = StepShapes(batch=4, slots=3, latent_shape=(4, 4, 4), action=5, height=16,
                        width=16, horizon=9)  # fmt: skip
    model = ToyModel(shapes, launcher)
    inputs = make_inputs(shapes, seed=5)
    want = cpu_rollout(model, inputs)
    with CudaRolloutStep(launcher, model.step_executor, model.decoder_executor, shapes,
                         use_graph=use_graph, warmup_steps=2) as step:  # fmt: skip
        for _ in range(2):  # a second rollout replays the same graph
            step.reset(inputs["start_latent"], inputs["actions"], inputs["dof_mask"],
                       inputs["start_frame"], inputs["keepout"], inputs["threshold"],
                       goal=inputs["goal"])  # fmt: skip
            step.run()
            out = step.outputs()
            assert np.array_equal(out.frames, want[0])
            assert np.array_equal(out.moved_in_keepout, want[1])
            assert np.array_equal(out.motion_energy, want[2])
            assert np.array_equal(out.goal_mse, want[3])
        if use_graph:
            assert step.memcpy_nodes_per_step == 0
            assert step.node_counts["kernel"] >= 10
        else:
            assert step.memcpy_nodes_per_step is None
