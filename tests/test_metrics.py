"""Evaluation metrics on hand-made arrays with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edge.metrics import (
    bootstrap_mean_ci,
    direction_agreement,
    masked_psnr,
    motion_mask,
    psnr,
    ssim,
)


def test_psnr_known_values() -> None:
    a = np.zeros((4, 4, 3), np.uint8)
    b = np.full((4, 4, 3), 255, np.uint8)
    assert psnr(a, b) == pytest.approx(0.0)
    c = a.copy()
    c[0, 0, 0] = 16  # mse = 256 / 48
    assert psnr(a, c) == pytest.approx(10 * math.log10(255**2 / (256 / 48)))
    assert psnr(a, a) == math.inf


def test_ssim_identical_is_one_and_inverted_is_negative() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
    assert ssim(x, x) == pytest.approx(1.0)
    assert ssim(x, 255 - x) < 0
    flat = np.full((32, 32, 3), 100, np.uint8)
    # Constant images differing by a luminance offset: only the luminance term is < 1.
    c1 = (0.01 * 255) ** 2
    expected = (2 * 100 * 120 + c1) / (100**2 + 120**2 + c1)
    assert ssim(flat, flat + 20) == pytest.approx(expected)
    with pytest.raises(ValueError, match="one shape"):
        ssim(x, x[:16])


def test_motion_mask_and_masked_psnr() -> None:
    start = np.zeros((4, 4, 3), np.uint8)
    gt = np.zeros((2, 4, 4, 3), np.uint8)
    gt[1, 0, 0] = [0, 50, 0]
    gt[0, 3, 3] = [5, 5, 5]  # below threshold
    m = motion_mask(gt, start, threshold=10)
    assert m.sum() == 1 and m[1, 0, 0]
    pred = gt.copy()
    pred[1, 0, 0, 1] = 40  # error 10 on one of 3 values in the mask
    assert masked_psnr(pred, gt, m) == pytest.approx(10 * math.log10(255**2 / (100 / 3)))
    assert math.isnan(masked_psnr(pred, gt, np.zeros_like(m)))


def test_bootstrap_interval_brackets_the_mean_and_shrinks_with_n() -> None:
    rng = np.random.default_rng(0)
    small = rng.normal(1.0, 1.0, 20)
    big = rng.normal(1.0, 1.0, 2000)
    m, lo, hi = bootstrap_mean_ci(small)
    assert lo < m < hi and m == pytest.approx(small.mean())
    _, lo2, hi2 = bootstrap_mean_ci(big)
    assert (hi2 - lo2) < (hi - lo) / 5 and lo2 < 1.0 < hi2
    assert bootstrap_mean_ci(np.array([2.0, 2.0, 2.0])) == (2.0, 2.0, 2.0)
    assert all(math.isnan(x) for x in bootstrap_mean_ci(np.array([np.nan])))


def test_direction_agreement() -> None:
    true = np.array([[1.0, 0], [0, 2.0], [0.1, 0], [-3.0, 0]])
    pred = np.array([[2.0, 0.1], [0, -1.0], [5.0, 5.0], [-1.0, 1.0]])
    frac, cos, n = direction_agreement(pred, true, min_true_px=1.0)
    assert n == 3 and frac == pytest.approx(2 / 3)
    assert cos == pytest.approx((2 / np.hypot(2, 0.1) - 1 + 1 / np.sqrt(2)) / 3)
