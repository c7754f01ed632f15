"""NumPy reference of the rollout kernels against independent float64 / list formulas."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from kernels import reference as ref
from kernels.errors import KernelInputError, NonFiniteOutputError


def _ring(b=2, s=4, lat=5, a=3):
    return np.zeros((b, s, lat), np.float32), np.zeros((b, s, a), np.float32)


def test_fill_sets_every_slot_to_start_and_zero_actions():
    rl, ra = _ring()
    ra[...] = 7.0
    start = np.arange(10, dtype=np.float32).reshape(2, 5)
    assert ref.ring_fill(rl, ra, start) == 0
    assert np.array_equal(rl, np.repeat(start[:, None], 4, axis=1))
    assert not ra.any() and not np.signbit(ra).any()


@pytest.mark.parametrize("pushes", [1, 3, 4, 5, 11])
def test_push_and_linearise_keep_the_last_s_entries_in_order(pushes):
    rng = np.random.default_rng(pushes)
    b, s, lat, a = 2, 4, 5, 3
    rl, ra = _ring(b, s, lat, a)
    start = rng.standard_normal((b, lat)).astype(np.float32)
    w = ref.ring_fill(rl, ra, start)
    mask = np.array([1, 0, 1], np.uint8)
    oracle = deque([(start, np.zeros((b, a), np.float32))] * s, maxlen=s)
    for _ in range(pushes):
        z = rng.standard_normal((b, lat)).astype(np.float32)
        act = rng.standard_normal((b, a)).astype(np.float32)
        w = ref.ring_push(rl, ra, w, z, act, mask)
        oracle.append((z, act * mask))
    assert w == pushes % s
    hl, ha = ref.ring_linearise(rl, ra, w)
    for pos, (z, act) in enumerate(oracle):
        assert np.array_equal(hl[:, pos], z)
        assert np.array_equal(ha[:, pos], act)


def test_push_linearise_equals_push_then_linearise():
    rng = np.random.default_rng(0)
    rl, ra = _ring(3, 5, 4, 2)
    rl[...] = rng.standard_normal(rl.shape)
    rl2, ra2 = rl.copy(), ra.copy()
    hl, ha = np.empty_like(rl), np.empty_like(ra)
    z = rng.standard_normal((3, 4)).astype(np.float32)
    act = rng.standard_normal((3, 2)).astype(np.float32)
    mask = np.ones(2, np.uint8)
    w = ref.ring_push_linearise(rl, ra, hl, ha, 4, z, act, mask)
    assert w == 0
    w2 = ref.ring_push(rl2, ra2, 4, z, act, mask)
    hl2, ha2 = ref.ring_linearise(rl2, ra2, w2)
    assert np.array_equal(hl, hl2) and np.array_equal(ha, ha2) and np.array_equal(rl, rl2)
    assert np.array_equal(hl[:, -1], z)


def test_zero_dof_mask_stores_exact_positive_zero():
    rl, ra = _ring(1, 2, 1, 3)
    act = np.array([[np.nan, -0.0, -5.0]], np.float32)
    ref.ring_push(rl, ra, 1, np.ones((1, 1), np.float32), act, np.zeros(3, np.uint8))
    assert not ra.any() and not np.signbit(ra).any() and not np.isnan(ra).any()


def test_ring_errors_name_the_argument():
    rl, ra = _ring()
    with pytest.raises(KernelInputError, match=r"w: expected an integer in \[0, 4\), found 4"):
        ref.ring_push(
            rl,
            ra,
            4,
            np.zeros((2, 5), np.float32),
            np.zeros((2, 3), np.float32),
            np.ones(3, np.uint8),
        )
    with pytest.raises(
        KernelInputError, match=r"new_latent: expected dtype float32, found float64"
    ):
        ref.ring_push(
            rl, ra, 0, np.zeros((2, 5)), np.zeros((2, 3), np.float32), np.ones(3, np.uint8)
        )
    with pytest.raises(KernelInputError, match=r"dof_mask: expected shape \[3\], found \[4\]"):
        ref.ring_push(
            rl,
            ra,
            0,
            np.zeros((2, 5), np.float32),
            np.zeros((2, 3), np.float32),
            np.ones(4, np.uint8),
        )


def test_select_action_masks_and_clamps():
    actions = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)
    mask = np.array([0, 1], np.uint8)
    assert np.array_equal(ref.select_action(actions, mask, 1), [[0, 3], [0, 9]])
    assert np.array_equal(ref.select_action(actions, mask, 99), [[0, 5], [0, 11]])


def _round_half_up_f64(v32: np.ndarray) -> np.ndarray:
    t = (v32.astype(np.float32) * np.float32(255)).astype(np.float64)
    return np.floor(t + 0.5)


def test_decode_layout_and_rounding_random():
    rng = np.random.default_rng(1)
    x = rng.uniform(-0.2, 1.2, (2, 3, 4, 5)).astype(np.float32)
    off = rng.uniform(-0.1, 0.1, x.shape).astype(np.float32)
    frames = ref.decode_frames(x, off)
    v = np.clip(x + off, 0, 1)
    want = _round_half_up_f64(v).astype(np.uint8).transpose(0, 2, 3, 1)
    assert frames.shape == (2, 4, 5, 3) and frames.dtype == np.uint8
    assert np.array_equal(frames, want)
    assert frames[1, 2, 3, 0] == want[1, 2, 3, 0]


def _exact_half_inputs():
    """float32 v with v * 255 == k + 0.5 exactly (float32 product), k = 0..254."""
    found = []
    for k in range(255):
        v = np.float32((k + 0.5) / 255)
        for _ in range(4):
            t = v * np.float32(255)
            if t == np.float32(k + 0.5):
                found.append((v, k))
                break
            v = np.nextafter(v, np.float32(2 if t < k + 0.5 else -1), dtype=np.float32)
    return found


def test_decode_rounds_exact_halves_up_and_just_below_down():
    cases = _exact_half_inputs()
    assert len(cases) > 100
    vs = np.array([v for v, _ in cases], np.float32)
    ks = np.array([k for _, k in cases])
    below = np.nextafter(vs, np.float32(-1), dtype=np.float32)
    x = np.stack([vs, below, vs])[None].reshape(1, 3, 1, -1)
    frames = ref.decode_frames(x)
    assert np.array_equal(frames[0, 0, :, 0], ks + 1)
    assert np.array_equal(frames[0, 0, :, 1], ks)


def test_decode_out_of_range_and_infinities():
    vals = np.array([-1.0, 0.0, 1.0, 1.5, np.inf, -np.inf, 0.999, 1e-9], np.float32)
    x = np.broadcast_to(vals, (1, 3, 1, 8)).copy()
    frames = ref.decode_frames(x)
    assert list(frames[0, 0, :, 0]) == [0, 0, 255, 255, 255, 0, 255, 0]


def test_decode_nan_is_an_error_naming_the_count():
    x = np.full((1, 3, 2, 2), 0.5, np.float32)
    x[0, 1, 0, 0] = np.nan
    off = np.zeros_like(x)
    off[0, 0, 1, 1] = np.nan
    x[0, 2, 1, 0] = np.inf
    off[0, 2, 1, 0] = -np.inf
    frames, count = ref.decode_frames_counting(x, off)
    assert count == 3 and frames[0, 0, 0, 1] == 0 and frames[0, 1, 1, 0] == 0
    assert frames[0, 1, 1, 1] == 128 and frames[0, 1, 0, 2] == 0
    with pytest.raises(NonFiniteOutputError, match="found 3 NaN value") as info:
        ref.decode_frames(x, off)
    assert info.value.nan_count == 3


def _naive_scores(pred, start, keepout, thr, goal):
    p = pred.astype(np.float64)
    d = np.abs(p - start.astype(np.float64))
    inside = keepout != 0
    moved = [int(((d[b].max(-1) > thr) & inside).sum()) for b in range(len(p))]
    energy = [
        float(((d[b][inside] / 255.0) ** 2).mean()) if inside.any() else 0.0 for b in range(len(p))
    ]
    mse = [float((((p[b] - goal.astype(np.float64)) / 255.0) ** 2).mean()) for b in range(len(p))]
    return np.array(moved), np.array(energy), np.array(mse)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_precheck_matches_float64_within_1e6(seed):
    rng = np.random.default_rng(seed)
    b, h, w = 5, 17, 23
    start = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    pred = np.clip(start.astype(int) + rng.integers(-40, 41, (b, h, w, 3)), 0, 255).astype(np.uint8)
    keep = (rng.random((h, w)) < 0.3).astype(np.uint8)
    goal = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    thr = int(rng.integers(0, 40))
    got = ref.precheck_scores(pred, start, keep, thr, goal)
    moved, energy, mse = _naive_scores(pred, start, keep, thr, goal)
    assert got.moved_in_keepout.dtype == np.int32 and np.array_equal(got.moved_in_keepout, moved)
    assert got.motion_energy.dtype == np.float32 and got.goal_mse.dtype == np.float32
    np.testing.assert_allclose(got.motion_energy, energy, rtol=1e-6, atol=0)
    np.testing.assert_allclose(got.goal_mse, mse, rtol=1e-6, atol=0)
    np.testing.assert_allclose(ref.goal_mse(pred, goal), mse, rtol=1e-6, atol=0)


def test_precheck_empty_mask_threshold_edges_and_no_goal():
    start = np.zeros((2, 2, 3), np.uint8)
    pred = np.full((1, 2, 2, 3), 10, np.uint8)
    empty = ref.precheck_scores(pred, start, np.zeros((2, 2), np.uint8), 0)
    assert empty.moved_in_keepout[0] == 0 and empty.motion_energy[0] == 0.0
    assert empty.goal_mse is None
    full = np.ones((2, 2), np.uint8)
    assert ref.precheck_scores(pred, start, full, 9).moved_in_keepout[0] == 4
    assert ref.precheck_scores(pred, start, full, 10).moved_in_keepout[0] == 0
    with pytest.raises(KernelInputError, match=r"threshold: expected an integer in \[0, 255\]"):
        ref.precheck_scores(pred, start, full, 256)


def test_robot_in_keepout_counts_hand_made_masks():
    keep = np.zeros((3, 4), np.uint8)
    keep[0, :2] = 1
    keep[1, 1] = 7  # any nonzero value is inside
    mask = np.zeros((4, 3, 4), np.float32)
    mask[0, 0, 0] = 0.5  # exactly 0.5: robot
    mask[0, 0, 1] = np.nextafter(np.float32(0.5), np.float32(0))  # just below: not robot
    mask[0, 1, 1] = 1.0
    mask[0, 2, :] = 1.0  # robot, but outside the keep-out mask
    mask[1] = 1.0  # robot everywhere: every keep-out pixel
    mask[2, 0, 0] = np.nan  # NaN is not robot
    mask[2, 1, 1] = 0.75
    got = ref.robot_in_keepout(mask, keep)
    assert got.dtype == np.int32 and got.shape == (4,)
    assert got.tolist() == [2, 3, 1, 0]
    # an empty keep-out mask counts nothing, however much robot there is
    assert ref.robot_in_keepout(mask, np.zeros((3, 4), np.uint8)).tolist() == [0, 0, 0, 0]
    # no items: an empty result
    assert ref.robot_in_keepout(np.zeros((0, 3, 4), np.float32), keep).shape == (0,)


def test_robot_in_keepout_errors_name_the_argument():
    keep = np.ones((2, 2), np.uint8)
    with pytest.raises(KernelInputError, match=r"robot_mask: expected dtype float32, found float64"):
        ref.robot_in_keepout(np.zeros((1, 2, 2)), keep)
    with pytest.raises(KernelInputError, match=r"robot_mask: expected shape \[\*, \*, \*\], found "
                                               r"\[1, 1, 2, 2\]"):
        ref.robot_in_keepout(np.zeros((1, 1, 2, 2), np.float32), keep)
    with pytest.raises(KernelInputError, match=r"keepout: expected shape \[2, 2\], found \[2, 3\]"):
        ref.robot_in_keepout(np.zeros((1, 2, 2), np.float32), np.ones((2, 3), np.uint8))
    with pytest.raises(KernelInputError, match=r"keepout: expected dtype uint8, found bool"):
        ref.robot_in_keepout(np.zeros((1, 2, 2), np.float32), np.ones((2, 2), bool))
