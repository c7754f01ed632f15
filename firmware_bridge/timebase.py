"""Time alignment: latency offsets, device-clock estimation, and frame/sample pairing.

All stamps are integers in nanoseconds on the host's ``time.monotonic_ns()`` clock unless a
name says ``device``. A stream's *latency* is how long after the physical event its stamp is
taken (a camera that stamps frames on arrival, 30 ms after exposure, has latency 0.03 s);
corrected stamp = stamp - latency. Frames and joint samples are paired by corrected stamp,
never by arrival order.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from .errors import BridgeError
from .sample import JointSample, Status

__all__ = ["ClockEstimator", "Pairing", "pair_frames", "samples_to_arrays"]


class ClockEstimator:
    """Continuous estimate of ``host = device * (1 + drift) + offset`` from stamp pairs.

    A least-squares line through the most recent ``window`` pairs (device stamp, host receipt
    stamp), updated in O(1) per pair. Transport delay that is constant is absorbed into the
    offset (it is part of the latency); jitter averages out.

    Args:
        window: number of recent pairs in the fit (>= 2).
    """

    def __init__(self, window: int = 2000):
        if window < 2:
            raise BridgeError(f"ClockEstimator window: expected >= 2, found {window}")
        self.window = window
        self._pairs: deque = deque()
        self._d0: int | None = None
        self._h0: int | None = None
        self._sx = self._sy = self._sxx = self._sxy = 0.0

    def update(self, device_ns: int, host_ns: int) -> None:
        """Add one (device stamp, host stamp) pair, both ns."""
        if self._d0 is None:
            self._d0, self._h0 = device_ns, host_ns
        d0, h0 = self._d0, self._h0
        assert h0 is not None  # set together with _d0
        x = (device_ns - d0) / 1e9
        y = (host_ns - h0) / 1e9 - x
        self._pairs.append((x, y))
        self._sx += x
        self._sy += y
        self._sxx += x * x
        self._sxy += x * y
        if len(self._pairs) > self.window:
            ox, oy = self._pairs.popleft()
            self._sx -= ox
            self._sy -= oy
            self._sxx -= ox * ox
            self._sxy -= ox * oy

    def _fit(self) -> tuple[float, float]:
        n = len(self._pairs)
        if n < 2:
            raise BridgeError(f"clock estimate: expected at least 2 stamp pairs, found {n}")
        den = n * self._sxx - self._sx * self._sx
        b = 0.0 if den <= 1e-18 else (n * self._sxy - self._sx * self._sy) / den
        a = (self._sy - b * self._sx) / n
        return a, b

    @property
    def drift_ppm(self) -> float:
        """How much faster the host clock runs than the device's, parts per million."""
        return self._fit()[1] * 1e6

    @property
    def offset_ns(self) -> int:
        """Host stamp of device time 0, ns (``to_host(0)``)."""
        return self.to_host(0)

    def to_host(self, device_ns: int) -> int:
        """Map a device stamp (ns) to the host clock (ns). Raises before two pairs."""
        a, b = self._fit()
        d0, h0 = self._d0, self._h0
        assert d0 is not None and h0 is not None  # _fit() raised unless pairs were added
        x = (device_ns - d0) / 1e9
        return int(h0 + round((x + a + b * x) * 1e9))


def samples_to_arrays(samples: list[JointSample]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stack samples: ``(stamps_ns int64 (N,), positions float64 (N, J), valid bool (N,))``.

    ``valid`` is False for ``STALE`` samples (their values were not refreshed).
    """
    stamps = np.array([s.receipt_ns for s in samples], dtype=np.int64)
    pos = np.stack([s.position_rad for s in samples]) if samples else np.zeros((0, 0))
    valid = np.array([not (s.status & Status.STALE) for s in samples], dtype=bool)
    return stamps, pos, valid


@dataclass(frozen=True)
class Pairing:
    """Result of :func:`pair_frames`.

    Attributes:
        positions: float64 ``(F, J)`` interpolated joint positions at each frame; NaN rows for
            unpaired frames.
        paired: bool ``(F,)``.
        unpaired: int64 indices of frames left unpaired (no sample within the tolerance on
            both sides).
        frame_stamps_ns: int64 ``(F,)`` corrected frame stamps used for pairing.
    """

    positions: np.ndarray
    paired: np.ndarray
    unpaired: np.ndarray
    frame_stamps_ns: np.ndarray


def pair_frames(frame_stamps_ns, sample_stamps_ns, positions, *, tolerance_s: float,
                frame_latency_s: float = 0.0, joint_latency_s: float = 0.0,
                valid=None) -> Pairing:
    """Pair camera frames with joint samples by time, interpolating linearly.

    Args:
        frame_stamps_ns: int ``(F,)`` frame receipt stamps, ns.
        sample_stamps_ns: int ``(N,)`` joint sample stamps, ns, strictly increasing.
        positions: float ``(N, J)`` joint values at those stamps.
        tolerance_s: a frame is paired only when a sample lies within this distance on each
            side of its corrected stamp (an exact hit needs just that one sample).
        frame_latency_s, joint_latency_s: per-stream latency offsets, s.
        valid: optional bool ``(N,)``; samples with False are ignored.

    Returns:
        :class:`Pairing`.

    Raises:
        BridgeError: shapes disagree or sample stamps are not strictly increasing.
    """
    f = np.asarray(frame_stamps_ns, dtype=np.int64) - int(round(frame_latency_s * 1e9))
    t = np.asarray(sample_stamps_ns, dtype=np.int64) - int(round(joint_latency_s * 1e9))
    q = np.asarray(positions, dtype=np.float64)
    if q.ndim != 2 or q.shape[0] != t.shape[0]:
        raise BridgeError(f"pair_frames positions: expected shape (N={t.shape[0]}, J), "
                          f"found {q.shape}")
    if valid is not None:
        keep = np.asarray(valid, dtype=bool)
        t, q = t[keep], q[keep]
    if t.size and np.any(np.diff(t) <= 0):
        raise BridgeError("pair_frames sample stamps: expected strictly increasing, found a "
                          "repeat or a step back")
    out = np.full((f.shape[0], q.shape[1]), np.nan)
    tol = int(tolerance_s * 1e9)
    hi = np.searchsorted(t, f, side="left")  # first sample at or after the frame
    paired = np.zeros(f.shape[0], dtype=bool)
    for k, (fs, h) in enumerate(zip(f, hi, strict=True)):
        if h < t.size and t[h] == fs:
            out[k], paired[k] = q[h], True
        elif 0 < h < t.size and fs - t[h - 1] <= tol and t[h] - fs <= tol:
            w = (fs - t[h - 1]) / (t[h] - t[h - 1])
            out[k], paired[k] = (1 - w) * q[h - 1] + w * q[h], True
    return Pairing(out, paired, np.flatnonzero(~paired), f)
