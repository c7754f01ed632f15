"""Image and control metrics for predicted frames (pure NumPy).

Frames are uint8 ``[..., H, W, 3]`` RGB unless stated; values are compared on the 0..255
scale with peak 255.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "psnr",
    "ssim",
    "motion_mask",
    "masked_psnr",
    "bootstrap_mean_ci",
    "direction_agreement",
]


def psnr(pred: np.ndarray, target: np.ndarray) -> float:
    """Peak signal-to-noise ratio in dB of two uint8 images (or stacks); inf if identical."""
    mse = float(np.mean((pred.astype(np.float64) - target.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10.0 * np.log10(255.0**2 / mse)


def _gaussian_window(size: int = 11, sigma: float = 1.5) -> np.ndarray:
    x = np.arange(size) - (size - 1) / 2
    g = np.exp(-(x**2) / (2 * sigma**2))
    return g / g.sum()


def _filter(img: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Separable 'valid' filtering of ``[H, W]`` by the 1-D window ``g``."""
    k = len(g)
    h, w = img.shape
    rows = sum(g[i] * img[i:h - k + 1 + i, :] for i in range(k))
    return sum(g[i] * rows[:, i:w - k + 1 + i] for i in range(k))


def ssim(pred: np.ndarray, target: np.ndarray) -> float:
    """Structural similarity of two uint8 ``[H, W, 3]`` images, mean over channels.

    Wang, Bovik, Sheikh and Simoncelli, "Image quality assessment: from error visibility to
    structural similarity", IEEE TIP 2004: 11x11 Gaussian window (sigma 1.5), K1 = 0.01,
    K2 = 0.03, L = 255, mean of the SSIM map over the valid region. Images smaller than the
    window use a window of their smaller side.
    """
    if pred.shape != target.shape or pred.ndim != 3:
        raise ValueError(f"ssim: expected two [H, W, 3] images of one shape, found "
                         f"{pred.shape} and {target.shape}")
    size = min(11, pred.shape[0], pred.shape[1])
    g = _gaussian_window(size, 1.5)
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    vals = []
    for ch in range(pred.shape[2]):
        x = pred[..., ch].astype(np.float64)
        y = target[..., ch].astype(np.float64)
        mx, my = _filter(x, g), _filter(y, g)
        sxx = _filter(x * x, g) - mx**2
        syy = _filter(y * y, g) - my**2
        sxy = _filter(x * y, g) - mx * my
        m = ((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx**2 + my**2 + c1) * (sxx + syy + c2))
        vals.append(m.mean())
    return float(np.mean(vals))


def motion_mask(frames: np.ndarray, start: np.ndarray, threshold: int = 10) -> np.ndarray:
    """Pixels where ground truth changed from the start frame.

    Args:
        frames: uint8 ``[T, H, W, 3]`` ground truth.
        start: uint8 ``[H, W, 3]`` start frame.
        threshold: a pixel changed if its largest channel difference exceeds this (0..255).

    Returns:
        bool ``[T, H, W]``.
    """
    diff = np.abs(frames.astype(np.int16) - start.astype(np.int16)).max(-1)
    return diff > threshold


def masked_psnr(pred: np.ndarray, target: np.ndarray, mask: np.ndarray) -> float:
    """PSNR in dB over the pixels where ``mask [..., H, W]`` is true (all channels).

    Returns NaN when the mask is empty, inf when the masked pixels are identical.
    """
    m = np.broadcast_to(mask[..., None], pred.shape)
    if not m.any():
        return float("nan")
    d = pred.astype(np.float64)[m] - target.astype(np.float64)[m]
    mse = float(np.mean(d**2))
    return float("inf") if mse == 0 else 10.0 * np.log10(255.0**2 / mse)


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
