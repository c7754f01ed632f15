"""Feature statistics in the form LeRobot's dataset writer stores them (LeRobot 0.4.4).

LeRobot keeps, per feature, ``min``, ``max``, ``mean``, ``std``, ``count`` and the
quantiles ``q01``, ``q10``, ``q50``, ``q90``, ``q99`` (its QUANTILES normaliser, used for
state and action by pi0.5, reads them): per episode in the ``stats/<feature>/<stat>``
columns of ``meta/episodes/*.parquet``, and for the whole dataset in ``meta/stats.json``.
The layout follows LeRobot 0.4.4's ``lerobot/datasets/compute_stats.py`` (checked against
a fixture made from it, tests/fixtures/lerobot_0_4_4):

- a vector feature ``[n, d]``: each statistic ``[d]``; a scalar feature ``[n]`` (timestamp,
  indices): ``[1]``; ``min``/``max`` keep the feature's dtype (an int64 index stays an
  integer), ``count`` is ``[n]`` as int64;
- a camera: per channel over the frames (all of them up to 100, then about n**0.75, evenly
  spaced, as LeRobot samples them), divided by 255, each statistic ``[3, 1, 1]``, ``count``
  the number of frames used;
- quantiles of one episode are its values' inverted-CDF quantiles (LeRobot estimates the
  same from a 5000-bin histogram, so the two agree to a bin); with fewer than 2 values
  every quantile is the mean, as in LeRobot;
- the dataset's statistics combine the episodes' as LeRobot's ``aggregate_stats`` does:
  exact min, max, mean and std, counts summed, and each quantile the count-weighted mean
  of the episodes' quantiles.

One difference, on purpose: LeRobot 0.4.4 squares uint8 pixels without widening them, so
the camera ``std`` it writes is wrong (it wraps around); here it is the frames' std.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["QUANTILES", "STAT_KEYS", "aggregate_stats", "feature_stats", "image_stats",
           "stats_to_json"]

QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
STAT_KEYS = ("min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99")
_Q_KEYS = STAT_KEYS[5:]

Stats = dict[str, np.ndarray]


def _moments(x: np.ndarray, count: int) -> Stats:
    """Stats of ``x`` ``[n, d]`` per column; ``count`` is what ``count`` records."""
    mean = x.mean(0, dtype=np.float64)
    out = {"min": x.min(0), "max": x.max(0), "mean": mean,
           "std": x.astype(np.float64).std(0), "count": np.array([count], np.int64)}
    for key, q in zip(_Q_KEYS, QUANTILES, strict=True):
        out[key] = (np.quantile(x, q, axis=0, method="inverted_cdf").astype(np.float64)
                    if len(x) >= 2 else mean.copy())
    return out


def feature_stats(values: np.ndarray) -> Stats:
    """Statistics of one episode's feature.

    Args:
        values: ``[n]`` (a scalar per frame: each statistic ``[1]``) or ``[n, d]`` (each
            statistic ``[d]``), any numeric dtype; n >= 1.

    Returns:
        ``min``/``max`` in the values' dtype, ``mean``/``std`` and quantiles float64,
        ``count`` int64 ``[1]`` = n.

    Raises:
        ValueError: no values, or more than 2 dimensions.
    """
    x = np.asarray(values)
    if x.ndim not in (1, 2) or len(x) == 0:
        raise ValueError(f"feature stats: expected values [n] or [n, d] with n >= 1, found "
                         f"shape {list(x.shape)}")
    return _moments(x.reshape(len(x), -1), len(x))


def _sample_indices(n: int) -> np.ndarray:
    """Which of n frames LeRobot reads for a camera's statistics (evenly spaced)."""
    num = n if n < 100 else max(100, min(int(n ** 0.75), 10_000))
    return np.round(np.linspace(0, n - 1, num)).astype(int)


def image_stats(frames: np.ndarray) -> Stats:
    """Per-channel statistics of one episode's camera, in [0, 1].

    Args:
        frames: uint8 ``[n, H, W, 3]`` RGB (n >= 1). Frames of 300 px or more a side are
            strided down to about 150 px first, as LeRobot does.

    Returns:
        each statistic float64 ``[3, 1, 1]`` (divided by 255), ``count`` int64 ``[1]``: the
        number of frames used.

    Raises:
        ValueError: not uint8 ``[n, H, W, 3]``.
    """
    f = np.asarray(frames)
    if f.dtype != np.uint8 or f.ndim != 4 or f.shape[-1] != 3 or len(f) == 0:
        raise ValueError(f"image stats: expected uint8 frames [n, H, W, 3], found {f.dtype} "
                         f"{list(f.shape)}")
    f = f[_sample_indices(len(f))]
    h, w = f.shape[1:3]
    if max(h, w) >= 300:
        step = int(w / 150) if w > h else int(h / 150)
        f = f[:, ::step, ::step]
    st = _moments(f.reshape(-1, 3), len(f))
    return {k: v if k == "count" else (v.astype(np.float64) / 255.0).reshape(3, 1, 1)
            for k, v in st.items()}


def aggregate_stats(per_episode: Sequence[Stats]) -> Stats:
    """One feature's dataset statistics from its episodes' (see the module doc).

    Args:
        per_episode: :func:`feature_stats` or :func:`image_stats` results, same shapes.

    Raises:
        ValueError: no episodes.
    """
    if not per_episode:
        raise ValueError("aggregate stats: no episodes")
    means = np.stack([s["mean"] for s in per_episode])  # (E, ...)
    counts = np.array([int(s["count"][0]) for s in per_episode], np.float64)  # (E,)
    total = float(counts.sum())
    w = counts.reshape(-1, *([1] * (means.ndim - 1)))  # (E, 1, ...)
    mean = (means * w).sum(0) / total
    stds = np.stack([s["std"] for s in per_episode])
    out = {"min": np.min(np.stack([s["min"] for s in per_episode]), 0),
           "max": np.max(np.stack([s["max"] for s in per_episode]), 0),
           "mean": mean, "std": np.sqrt(((stds ** 2 + (means - mean) ** 2) * w).sum(0) / total),
           "count": np.array([int(total)], np.int64)}
    for key in _Q_KEYS:
        out[key] = (np.stack([s[key] for s in per_episode]) * w).sum(0) / total
    return out


def stats_to_json(stats: Mapping[str, Stats]) -> dict[str, dict[str, list]]:
    """``{feature: {stat: nested lists}}`` in :data:`STAT_KEYS` order (ints stay ints)."""
    return {feature: {k: np.asarray(st[k]).tolist() for k in STAT_KEYS}
            for feature, st in stats.items()}
