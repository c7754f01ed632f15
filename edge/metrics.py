"""Image metrics for predicted frames (pure NumPy).

- :func:`psnr`: peak signal-to-noise ratio, dB, peak 255.
- :func:`ssim`: structural similarity (Wang, Bovik, Sheikh, Simoncelli 2004): 11x11
  Gaussian window with sigma 1.5, K1 = 0.01, K2 = 0.03, dynamic range L = 255, computed
  over the "valid" window positions (no padding) of each channel, then averaged over
  positions and channels. Images smaller than 11 px use a window of their size.
- :func:`motion_mask` and :func:`masked_psnr`: PSNR over the pixels where the ground truth
  moved away from the start frame (the "motion region").
- :func:`bootstrap_mean_ci` and :func:`direction_agreement`: paired statistics and the
  per-DoF control probe of the model evaluation.
"""

from __future__ import annotations

import math

import numpy as np

from edge.errors import EdgeError

__all__ = ["MetricError", "bootstrap_mean_ci", "direction_agreement", "gaussian_window",
           "masked_psnr", "motion_mask", "psnr", "ssim"]

_PEAK = 255.0


class MetricError(EdgeError, ValueError):
    """Images passed to a metric do not match (shape, dtype)."""


def _pair(a: np.ndarray, b: np.ndarray, stacks: bool = False
          ) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise MetricError(f"metric: expected two images of the same shape, found "
                          f"{list(a.shape)} and {list(b.shape)}")
    if a.ndim not in (2, 3) and not (stacks and a.ndim >= 4):
        raise MetricError(f"metric: expected [H, W] or [H, W, C] images, found {list(a.shape)}")
    return a.astype(np.float64), b.astype(np.float64)


def psnr(pred: np.ndarray, truth: np.ndarray) -> float:
    """PSNR in dB of two images with values 0..255 (``[H, W]``, ``[H, W, C]`` or a stack
    ``[..., H, W, C]``, pooled). Returns ``inf`` for identical images.
    """
    a, b = _pair(pred, truth, stacks=True)
    mse = float(np.mean((a - b) ** 2))
    return math.inf if mse == 0.0 else 10.0 * math.log10(_PEAK * _PEAK / mse)


def masked_psnr(pred: np.ndarray, truth: np.ndarray, mask: np.ndarray) -> float | None:
    """PSNR in dB over the pixels where ``mask`` is true; None if the mask is empty.

    ``pred``/``truth``: ``[H, W, C]`` or a stack ``[T, H, W, C]``; ``mask``: bool ``[H, W]``
    or ``[T, H, W]`` (all channels of a masked pixel count).
    """
    a, b = _pair(pred, truth, stacks=True)
    m = np.asarray(mask, bool)
    if m.shape != a.shape[:-1]:
        raise MetricError(f"mask: expected shape {list(a.shape[:-1])}, found {list(m.shape)}")
    if not m.any():
        return None
    mse = float(np.mean((a[m] - b[m]) ** 2))
    return math.inf if mse == 0.0 else 10.0 * math.log10(_PEAK * _PEAK / mse)


def motion_mask(truth: np.ndarray, start: np.ndarray, threshold: int = 8) -> np.ndarray:
    """Pixels where ``max over channels |truth - start| > threshold`` (0..255).

    ``truth`` ``[H, W, 3]`` or ``[T, H, W, 3]``, ``start`` ``[H, W, 3]``; returns bool
    ``[H, W]`` or ``[T, H, W]``.
    """
    t = np.asarray(truth)
    if t.ndim == 4:
        return np.stack([motion_mask(f, start, threshold) for f in t])
    a, b = _pair(t, start)
    d = np.abs(a - b)
    return (d.max(axis=-1) if d.ndim == 3 else d) > threshold


def gaussian_window(size: int = 11, sigma: float = 1.5) -> np.ndarray:
    """Normalised 2-D Gaussian window float64 ``[size, size]`` (sums to 1)."""
    x = np.arange(size, dtype=np.float64) - (size - 1) / 2.0
    g = np.exp(-(x * x) / (2.0 * sigma * sigma))
    g /= g.sum()
    return np.outer(g, g)


def _filter_valid(x: np.ndarray, g1: np.ndarray) -> np.ndarray:
    """Separable correlation with the 1-D kernel ``g1`` over the valid region of ``x [H, W]``."""
    k = len(g1)
    rows = np.lib.stride_tricks.sliding_window_view(x, k, axis=0) @ g1  # (H-k+1, W)
    return np.lib.stride_tricks.sliding_window_view(rows, k, axis=1) @ g1  # (H-k+1, W-k+1)


def ssim(pred: np.ndarray, truth: np.ndarray, *, window: int = 11, sigma: float = 1.5,
         k1: float = 0.01, k2: float = 0.03, data_range: float = _PEAK) -> float:
    """Mean SSIM of two images (``[H, W]`` or ``[H, W, C]``, values 0..``data_range``).

    Raises:
        MetricError: shapes differ or are not images.
    """
    a, b = _pair(pred, truth)
    if a.ndim == 2:
        a, b = a[..., None], b[..., None]
    size = min(window, a.shape[0], a.shape[1])
    x = np.arange(size, dtype=np.float64) - (size - 1) / 2.0
    g1 = np.exp(-(x * x) / (2.0 * sigma * sigma))
    g1 /= g1.sum()
    c1, c2 = (k1 * data_range) ** 2, (k2 * data_range) ** 2
    scores = []
    for ch in range(a.shape[2]):
        p, q = a[..., ch], b[..., ch]
        mu_p, mu_q = _filter_valid(p, g1), _filter_valid(q, g1)
        s_pp = _filter_valid(p * p, g1) - mu_p * mu_p
        s_qq = _filter_valid(q * q, g1) - mu_q * mu_q
        s_pq = _filter_valid(p * q, g1) - mu_p * mu_q
        num = (2 * mu_p * mu_q + c1) * (2 * s_pq + c2)
        den = (mu_p ** 2 + mu_q ** 2 + c1) * (s_pp + s_qq + c2)
        scores.append(float(np.mean(num / den)))
    return float(np.mean(scores))


def bootstrap_mean_ci(values: np.ndarray, n_boot: int = 2000, alpha: float = 0.05,
                      seed: int = 0) -> tuple[float, float, float]:
    """Mean of ``values [N]`` (NaN ignored) and its percentile bootstrap (1-alpha) interval."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, len(v), size=(n_boot, len(v)))].mean(1)
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(v.mean()), float(lo), float(hi)


def direction_agreement(pred_disp: np.ndarray, true_disp: np.ndarray,
                        min_true_px: float = 1.0) -> tuple[float, float, int]:
    """How often predicted displacements point the true way.

    Args:
        pred_disp, true_disp: float ``[N, 2]`` pixel displacements.
        min_true_px: ignore cases whose true displacement is shorter than this.

    Returns:
        (fraction with positive cosine, mean cosine, number of cases counted).
    """
    p = np.asarray(pred_disp, np.float64)
    t = np.asarray(true_disp, np.float64)
    keep = np.linalg.norm(t, axis=1) >= min_true_px
    if not keep.any():
        return float("nan"), float("nan"), 0
    p, t = p[keep], t[keep]
    cos = (p * t).sum(1) / (np.linalg.norm(p, axis=1) * np.linalg.norm(t, axis=1) + 1e-9)
    return float((cos > 0).mean()), float(cos.mean()), int(keep.sum())
