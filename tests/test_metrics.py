"""Metrics on hand-made arrays with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edge.metrics import (
    MetricError,
    bootstrap_mean_ci,
    direction_agreement,
    gaussian_window,
    masked_psnr,
    motion_mask,
    psnr,
    ssim,
)


def test_psnr_known_values() -> None:
    a = np.zeros((4, 4, 3), np.uint8)
    b = np.full((4, 4, 3), 255, np.uint8)
    assert psnr(a, b) == pytest.approx(0.0)
    c = np.full((4, 4, 3), 10, np.uint8)
    d = np.full((4, 4, 3), 20, np.uint8)  # MSE 100
    assert psnr(c, d) == pytest.approx(10 * math.log10(255**2 / 100))
    assert psnr(c, c) == math.inf


def test_masked_psnr_and_motion_mask() -> None:
    start = np.zeros((4, 4, 3), np.uint8)
    truth = start.copy()
    truth[0, 0] = [100, 0, 0]
    truth[1, 1] = [0, 5, 0]  # below the threshold
    m = motion_mask(truth, start, threshold=8)
    assert m.sum() == 1 and m[0, 0]
    pred = truth.copy()
    pred[0, 0, 0] = 90  # squared error 100 over 3 values
    assert masked_psnr(pred, truth, m) == pytest.approx(10 * math.log10(255**2 / (100 / 3)))
    assert masked_psnr(pred, truth, np.zeros((4, 4), bool)) is None


def test_ssim_identity_and_constants() -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (20, 20, 3)).astype(np.uint8)
    assert ssim(a, a) == pytest.approx(1.0)
    x, y = 100.0, 150.0
    c1 = (0.01 * 255) ** 2
    want = (2 * x * y + c1) / (x * x + y * y + c1)  # variances are 0: contrast term is 1
    got = ssim(np.full((16, 16), x), np.full((16, 16), y))
    assert got == pytest.approx(want, rel=1e-9)


def test_ssim_matches_direct_weighted_sums_on_one_window() -> None:
    rng = np.random.default_rng(1)
    a = rng.uniform(0, 255, (11, 11))
    b = np.clip(a + rng.normal(0, 30, a.shape), 0, 255)
    w = gaussian_window(11, 1.5)
    assert w.sum() == pytest.approx(1.0)
    mx, my = (w * a).sum(), (w * b).sum()
    vx, vy = (w * (a - mx) ** 2).sum(), (w * (b - my) ** 2).sum()
    cxy = (w * (a - mx) * (b - my)).sum()
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    want = (2 * mx * my + c1) * (2 * cxy + c2) / ((mx**2 + my**2 + c1) * (vx + vy + c2))
    assert ssim(a, b) == pytest.approx(want, rel=1e-9)
    assert ssim(a, 255 - a) < 0


def test_metric_shape_errors() -> None:
    with pytest.raises(MetricError, match="same shape"):
        psnr(np.zeros((4, 4, 3)), np.zeros((4, 5, 3)))
    with pytest.raises(MetricError, match="mask: expected shape"):
        masked_psnr(np.zeros((4, 4, 3)), np.zeros((4, 4, 3)), np.zeros((3, 3), bool))


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


def test_stacks_pool_over_frames() -> None:
    start = np.zeros((4, 4, 3), np.uint8)
    truth = np.zeros((2, 4, 4, 3), np.uint8)
    truth[1, 2, 2] = [0, 60, 0]
    m = motion_mask(truth, start)
    assert m.shape == (2, 4, 4) and m.sum() == 1
    pred = truth.copy()
    pred[1, 2, 2, 1] = 50
    assert masked_psnr(pred, truth, m) == pytest.approx(10 * math.log10(255**2 / (100 / 3)))
    assert psnr(pred, truth) == pytest.approx(10 * math.log10(255**2 / (100 / 96)))


def test_rollout_sheet_places_each_frame_in_its_column() -> None:
    from export.evaluation.zero_shot import rollout_sheet

    b, t, h = 3, 16, 8
    colour = lambda v: np.full((h, h, 3), v, np.uint8)  # noqa: E731
    start = np.stack([colour(10 + i) for i in range(b)])
    truth = np.stack([[colour(100 + k) for k in range(t)] for _ in range(b)])
    cal = np.stack([[colour(150 + k) for k in range(t)] for _ in range(b)])
    zero = np.stack([[colour(200 + i) for _ in range(t)] for i in range(b)])
    from edge.visual import row_label_height

    sheet = rollout_sheet(start, truth, cal, zero, ["a", "b", "c"], max_cells=2)
    tile = (h + 2) * 2  # 2 px gap, scaled x2
    band = row_label_height(h * 2)  # the cell id above each row
    assert sheet.shape == (2 * (band + tile), 10 * tile, 3)
    centre = lambda r, c: sheet[r * (band + tile) + band + h, c * tile + h, 0]  # noqa: E731
    # columns: start, truth at 4/8/12/16, calibrated at 4/8/12/16, zeroed at 16
    assert [centre(1, c) for c in range(10)] == [11, 103, 107, 111, 115, 153, 157, 161, 165, 201]


def test_evaluation_names_a_cell_whose_episode_lacks_a_needed_array() -> None:
    import types

    from export.errors import ExportError
    from export.evaluation.zero_shot import _required

    cell = types.SimpleNamespace(cell_id="test_convention-0000-007")
    assert _required(np.zeros(2), cell, "ee_px").shape == (2,)
    with pytest.raises(ExportError, match="cell test_convention-0000-007: .* no ee_px"):
        _required(None, cell, "ee_px")
