"""Host build of the CUDA kernel bodies (g++) against the NumPy reference, bit for bit."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from kernels import reference as ref
from kernels.hostlib import HostKernels, build_host_library

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the host build")


@pytest.fixture(scope="session")
def host(tmp_path_factory) -> HostKernels:
    return HostKernels(build_host_library(tmp_path_factory.mktemp("host_kernels")))


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint32) if a.dtype == np.float32 else a


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(_bits(a), _bits(b))


def _ring_case(rng, b, s, lat, a):
    rl = rng.standard_normal((b, s, lat)).astype(np.float32)
    ra = rng.standard_normal((b, s, a)).astype(np.float32)
    return rl, ra


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 3, 7, 4), (3, 8, 33, 6)])
def test_ring_fill_push_linearise_match(host, shape):
    b, s, lat, a = shape
    rng = np.random.default_rng(sum(shape))
    start = rng.standard_normal((b, lat)).astype(np.float32)
    r1, r2 = _ring_case(rng, *shape), _ring_case(rng, *shape)
    assert host.ring_fill(*r1, start) == ref.ring_fill(*r2, start)
    assert _same(r1[0], r2[0]) and _same(r1[1], r2[1])
    mask = (rng.random(a) < 0.6).astype(np.uint8)
    w1 = w2 = 0
    for _ in range(2 * s + 1):  # wraps around twice
        z = rng.standard_normal((b, lat)).astype(np.float32)
        act = rng.standard_normal((b, a)).astype(np.float32)
        act[0, 0] = np.nan
        w1 = host.ring_push(*r1, w1, z, act, mask)
        w2 = ref.ring_push(*r2, w2, z, act, mask)
        assert w1 == w2
        assert _same(r1[0], r2[0]) and _same(r1[1], r2[1])
        h1 = host.ring_linearise(*r1, w1, np.empty_like(r1[0]), np.empty_like(r1[1]))
        h2 = ref.ring_linearise(*r2, w2)
        assert _same(h1[0], h2[0]) and _same(h1[1], h2[1])


@pytest.mark.parametrize("w", [0, 2, 4])
def test_fused_push_linearise_matches(host, w):
    rng = np.random.default_rng(w)
    b, s, lat, a = 2, 5, 9, 3
    r1 = _ring_case(rng, b, s, lat, a)
    r2 = (r1[0].copy(), r1[1].copy())
    h1 = (np.empty_like(r1[0]), np.empty_like(r1[1]))
    h2 = (np.empty_like(r1[0]), np.empty_like(r1[1]))
    z = rng.standard_normal((b, lat)).astype(np.float32)
    act = rng.standard_normal((b, a)).astype(np.float32)
    for mask in (np.zeros(a, np.uint8), np.array([1, 0, 1], np.uint8)):
        n1 = host.ring_push_linearise(*r1, *h1, w, z, act, mask)
        n2 = ref.ring_push_linearise(*r2, *h2, w, z, act, mask)
        assert n1 == n2 == (w + 1) % s
        for x, y in zip((*r1, *h1), (*r2, *h2), strict=True):
            assert _same(x, y)


def test_select_action_matches(host):
    rng = np.random.default_rng(3)
    actions = rng.standard_normal((4, 6, 5)).astype(np.float32)
    mask = np.array([1, 0, 0, 1, 1], np.uint8)
    for t in (-1, 0, 3, 5, 6, 100):
        got = host.select_action(actions, mask, t, np.empty((4, 5), np.float32))
        assert _same(got, ref.select_action(actions, mask, t))


def _decode_inputs(rng, b, h, w):
    x = rng.uniform(-0.3, 1.3, (b, 3, h, w)).astype(np.float32)
    flat = x.reshape(-1)
    halves = np.array([(k + 0.5) / 255 for k in range(255)], np.float32)
    n = min(len(halves), flat.size // 2)
    flat[:n] = halves[:n]  # near-exact .5 products
    flat[n : 2 * n] = np.nextafter(halves[:n], np.float32(1))
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 1e-30, 1 - 2**-24], np.float32)
    flat[-len(specials) :] = specials
    return x


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 16, 17), (3, 31, 8)])
@pytest.mark.parametrize("with_offset", [False, True])
def test_decode_matches(host, shape, with_offset):
    rng = np.random.default_rng(sum(shape) + with_offset)
    b, h, w = shape
    x = _decode_inputs(rng, b, h, w) if b * h * w > 1 else np.full((1, 3, 1, 1), 0.5, np.float32)
    off = rng.uniform(-0.05, 0.05, x.shape).astype(np.float32) if with_offset else None
    if off is not None:
        off.reshape(-1)[0] = np.nan
    got, n_got = host.decode_frames_counting(x, off, np.empty((b, h, w, 3), np.uint8))
    want, n_want = ref.decode_frames_counting(x, off)
    assert n_got == n_want
    assert _same(got, want)


def test_decode_random_dense_rounding_sweep(host):
    # Every float32 in a band around each .5 boundary of the first few levels.
    base = np.array([(k + 0.5) / 255 for k in range(0, 255, 17)], np.float32)
    ulps = np.arange(-64, 65, dtype=np.int32)
    vals = (base.view(np.int32)[:, None] + ulps[None]).view(np.float32).reshape(-1)
    x = np.broadcast_to(vals, (1, 3, 1, vals.size)).copy()
    got, _ = host.decode_frames_counting(x, None, np.empty((1, 1, vals.size, 3), np.uint8))
    assert _same(got, ref.decode_frames(x))


@pytest.mark.parametrize("seed", range(4))
def test_precheck_matches(host, seed):
    rng = np.random.default_rng(seed)
    b, h, w = int(rng.integers(1, 6)), int(rng.integers(1, 40)), int(rng.integers(1, 40))
    start = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    pred = rng.integers(0, 256, (b, h, w, 3), dtype=np.uint8)
    pred[0] = start  # no motion at all
    keep = (rng.random((h, w)) < [0.0, 0.2, 1.0, 0.5][seed]).astype(np.uint8) * (1 + seed)
    goal = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    for thr in (0, int(rng.integers(1, 255)), 255):
        for g in (None, goal):
            moved, energy, mse = host.precheck_scores(pred, start, keep, thr, g)
            want = ref.precheck_scores(pred, start, keep, thr, g)
            assert _same(moved, want.moved_in_keepout)
            assert _same(energy, want.motion_energy)
            assert (mse is None and want.goal_mse is None) or _same(mse, want.goal_mse)


def test_precheck_extremes(host):
    start = np.zeros((64, 64, 3), np.uint8)
    pred = np.full((2, 64, 64, 3), 255, np.uint8)
    keep = np.ones((64, 64), np.uint8)
    moved, energy, mse = host.precheck_scores(pred, start, keep, 254, start)
    assert list(moved) == [4096, 4096] and list(energy) == [1.0, 1.0] and list(mse) == [1.0, 1.0]


@pytest.mark.parametrize("seed", range(4))
def test_robot_in_keepout_matches(host, seed):
    rng = np.random.default_rng(seed)
    b, h, w = int(rng.integers(1, 6)), int(rng.integers(1, 40)), int(rng.integers(1, 40))
    mask = rng.random((b, h, w), dtype=np.float32)
    flat = mask.reshape(-1)
    flat[: flat.size // 4] = np.float32(0.5)  # exactly at the threshold
    flat[flat.size // 4 : flat.size // 2] = np.nextafter(np.float32(0.5), np.float32(0))
    flat[-1] = np.nan
    rng.shuffle(flat)
    keep = (rng.random((h, w)) < [0.0, 0.2, 1.0, 0.5][seed]).astype(np.uint8) * (1 + seed)
    got = host.robot_in_keepout(mask, keep)
    want = ref.robot_in_keepout(mask, keep)
    assert _same(got, want)
    assert seed != 0 or not got.any()  # the empty keep-out mask


def test_robot_in_keepout_extremes(host):
    mask = np.ones((3, 64, 64), np.float32)
    mask[1] = 0.0
    keep = np.ones((64, 64), np.uint8)
    assert host.robot_in_keepout(mask, keep).tolist() == [4096, 0, 4096]
