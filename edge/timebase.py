"""Time alignment: latency offsets, device-clock estimation, and frame/sample pairing.

Pure NumPy, in ``edge`` so that both the calibration recorder (``edge/calibrate``) and the
transports (``firmware_bridge``, which import ``edge``) use it.

All stamps are integers in nanoseconds on the host's ``time.monotonic_ns()`` clock unless a
name says ``device``. A stream's *latency* is how long after the physical event its stamp is
taken (a camera that stamps frames on arrival, 30 ms after exposure, has latency 0.03 s);
corrected stamp = stamp - latency. Frames and joint samples are paired by corrected stamp,
never by arrival order.

:func:`capture_stamps` puts joint samples on the host clock at their capture, with the
latency of their receipt stamps estimated from the stream itself:

* request/reply streams (servo buses, EtherCAT): by round trip. A sample was captured
  between its request and its reply; with the minimum round trip over the recording (a reply
  that met no burst or queue) split evenly between the two directions, capture = request +
  min RTT / 2. The error is at most min RTT / 2 if the base delay is not symmetric.
* device-stamped streams that ping their device (framed): by ping round trip, as NTP
  (RFC 5905) does. Each answered ping (:class:`edge.joints.Ping`) gives host send t1, device
  arrival t2, device answer t3, host receipt t4; the ping with the smallest round trip
  ``(t4 - t1) - (t3 - t2)`` (an answer that met no burst) gives the device clock's offset
  ``(t2 + t3) / 2 - (t1 + t4) / 2``, and the drift is the median slope between the
  fastest deliveries of the samples (the lower envelope, below).
  The error is at most min RTT / 2 if the link's base delay is not symmetric; a constant
  delay inside the device before it stamps a sample is still not seen.
* device-stamped streams without pings, or whose device answered none: one-way device
  stamps cannot separate the clock offset from the mean delay. The least-squares fit of
  :class:`ClockEstimator` absorbs the mean delay (half a USB-serial burst); the lower
  envelope (the fastest delivery) absorbs only the minimum delay: at least the frame's wire
  time and the link's delay, plus any constant delay in the device, which must be measured
  by other means and entered as ``joint_latency_s``.
* anything else: receipt stamps, latency unknown (enter ``joint_latency_s``).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from edge.errors import TimebaseError
from edge.joints import JointSample, Ping, Status

__all__ = ["BOUND_NOT_MEASURED", "CaptureStamps", "ClockEstimator", "ClockJump", "Pairing", "capture_stamps", "pair_frames",
           "pair_samples", "samples_to_arrays"]


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
            raise TimebaseError(f"ClockEstimator window: expected >= 2, found {window}")
        self.window = window
        self._pairs: deque[tuple[float, float]] = deque()
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
            raise TimebaseError(f"clock estimate: expected at least 2 stamp pairs, found {n}")
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


def samples_to_arrays(samples: Sequence[JointSample]
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


def pair_frames(frame_stamps_ns: ArrayLike, sample_stamps_ns: ArrayLike, positions: ArrayLike,
                *, tolerance_s: float, frame_latency_s: float = 0.0,
                joint_latency_s: float = 0.0, valid: ArrayLike | None = None) -> Pairing:
    """Pair camera frames with joint samples by time, interpolating linearly.

    Args:
        frame_stamps_ns: int ``(F,)`` frame receipt stamps, ns.
        sample_stamps_ns: int ``(N,)`` joint sample stamps, ns, non-decreasing. Receipt
            stamps of a bursty link repeat (one read delivers several samples): of each run
            of equal stamps only the newest sample (the last) is used.
        positions: float ``(N, J)`` joint values at those stamps.
        tolerance_s: a frame is paired only when a sample lies within this distance on each
            side of its corrected stamp (an exact hit needs just that one sample).
        frame_latency_s, joint_latency_s: per-stream latency offsets, s.
        valid: optional bool ``(N,)``; samples with False are ignored.

    Returns:
        :class:`Pairing`.

    Raises:
        TimebaseError: shapes disagree or sample stamps step back.
    """
    f = np.asarray(frame_stamps_ns, dtype=np.int64) - int(round(frame_latency_s * 1e9))
    t = np.asarray(sample_stamps_ns, dtype=np.int64) - int(round(joint_latency_s * 1e9))
    q = np.asarray(positions, dtype=np.float64)
    if q.ndim != 2 or q.shape[0] != t.shape[0]:
        raise TimebaseError(f"pair_frames positions: expected shape (N={t.shape[0]}, J), "
                          f"found {q.shape}")
    if valid is not None:
        keep = np.asarray(valid, dtype=bool)
        t, q = t[keep], q[keep]
    if t.size:
        d = np.diff(t)
        if np.any(d < 0):
            raise TimebaseError(f"pair_frames sample stamps: expected strictly increasing once "
                              f"repeats are merged, found a step back at index "
                              f"{int(np.argmax(d < 0)) + 1}; sort the samples or drop the "
                              f"ones from before a reconnect")
        newest = np.concatenate([d > 0, [True]])  # a run of equal stamps: keep its newest
        t, q = t[newest], q[newest]
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


@dataclass(frozen=True)
class ClockJump:
    """A discontinuity of a device's clock inside one stream (a reset, a reboot, a step set
    by hand or by a time server).

    Attributes:
        sample: index of the first sample stamped by the clock after the jump.
        device_step_ns: how far the device clock stepped there beyond the host's elapsed
            time, ns (positive: the device clock jumped ahead; negative: it went back).
    """

    sample: int
    device_step_ns: int


@dataclass(frozen=True)
class CaptureStamps:
    """Result of :func:`capture_stamps`.

    Attributes:
        stamps_ns: int64 ``(N,)`` estimated capture times on the host clock, ns.
        method: ``"round trip"`` (request/reply), ``"ping round trip"`` (device stamps
            through the pings), ``"device clock"`` (the stamps' lower envelope: the stream
            sent no pings), ``"device clock (no pong)"`` (the same, because the device
            answered none of the pings it was sent) or ``"receipt"``. With clock jumps, the
            method of the longest stretch between them.
        latency_s: mean receipt stamp - capture estimate, s (what to enter as
            ``joint_latency_s`` when pairing on receipt stamps); None for ``"receipt"``.
        detail: the figures behind the estimate (ms, ppm, or a note such as
            ``"error bound": BOUND_NOT_MEASURED``), for printing.
        jumps: the device clock's discontinuities (:class:`ClockJump`); each stretch
            between them was placed on the host clock on its own.
        receipt_reason: why receipt stamps were used (``method == "receipt"``), for printing.
        out_of_sequence: indices of samples that arrived after a later capture of the same
            device clock (delivered out of order, or the same frame sent again without the
            ``STALE`` flag): left out of the estimate and placed by their own device stamps,
            so ``stamps_ns`` is not increasing there (see :func:`capture_stamps`).
    """

    stamps_ns: np.ndarray
    method: str
    latency_s: float | None
    detail: dict[str, Any]
    jumps: tuple[ClockJump, ...] = ()
    receipt_reason: str = "the stream has neither request stamps nor device stamps"
    out_of_sequence: tuple[int, ...] = ()

    def describe(self) -> str:
        """One line for a report: method, latency and the figures behind it, and the
        device clock's jumps if it jumped."""
        if self.latency_s is None:
            return f"latency: unknown (receipt stamps; {self.receipt_reason}): enter joint_latency_s"
        figures = ", ".join(f"{k} {v}" if isinstance(v, int | str) else f"{k} {v:.3f}"
                            for k, v in self.detail.items())
        line = f"latency: {self.latency_s * 1e3:.3f} ms by {self.method} ({figures})"
        if self.method.startswith("device clock"):
            line += ("; without answered pings the link's own delay is not seen (a device "
                     "that answers pings measures it; else enter joint_latency_s)")
        if self.jumps:
            big = max(self.jumps, key=lambda j: abs(j.device_step_ns))
            line += (f"; the device clock jumped {len(self.jumps)} time(s) (largest "
                     f"{big.device_step_ns / 1e6:+.3f} ms at sample {big.sample}): each stretch "
                     f"between jumps was placed on the host clock on its own")
        if self.out_of_sequence:
            line += (f"; {len(self.out_of_sequence)} sample(s) arrived after a later one "
                     f"(out of order, or sent twice without the stale flag; first at sample "
                     f"{self.out_of_sequence[0]}): left out of the estimate and placed by their "
                     f"device stamps")
        return line


def _lower_envelope(x: np.ndarray, y: np.ndarray
                    ) -> tuple[float, float, float, float, np.ndarray]:
    """Lines through ``y`` (host - device, ns) against ``x`` (device time, ns): the lower
    envelope's ``(slope, intercept)``, the least-squares line's, and the indices of the K
    fastest deliveries (int64; one per stretch of the stream).

    The envelope: the median slope (:func:`_median_slope`) between the fastest delivery of
    each of K stretches, fitted again without the stretches whose fastest delivery lies
    far above that line (more than 3 scaled MADs), then lowered to the fastest delivery
    overall. A delivery is never faster than the link allows, so minima are robust where
    means are not; the median and the second fit keep a host stall (every delivery of the
    stretches it covers held back: a line through them tilts by thousands of ppm) from
    tilting the line."""
    slope, icept = np.polyfit(x, y, 1)  # least squares: through the mean delay
    resid = y - (slope * x + icept)
    chunks = np.array_split(np.arange(len(x)), int(np.clip(len(x) // 50, 2, 50)))
    low = np.array([c[np.argmin(resid[c])] for c in chunks if c.size], dtype=np.int64)
    e_slope = float(slope)
    if low.size >= 2:
        e_slope = _median_slope(x[low], y[low])
        r = y[low] - e_slope * x[low]
        mad = 1.4826 * float(np.median(np.abs(r - np.median(r))))
        fast = r <= np.median(r) + 3 * mad
        if 2 <= fast.sum() < low.size:
            e_slope = _median_slope(x[low][fast], y[low][fast])
    e_icept = float(np.min(y - e_slope * x))
    return float(e_slope), e_icept, float(slope), float(icept), low


def _median_slope(x: np.ndarray, y: np.ndarray) -> float:
    """Theil-Sen slope of ``y`` against ``x`` (the median of the pairwise slopes): a few
    stretches whose fastest delivery was unusually fast (a device that stamped late) do not
    tilt it, as they tilt a least-squares line through the minima."""
    i, j = np.triu_indices(x.size, 1)
    keep = x[j] != x[i]
    return float(np.median((y[j] - y[i])[keep] / (x[j] - x[i])[keep])) if keep.any() else 0.0


def _ping_arrays(pings: Sequence[Ping]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of answered pings: ``(round trip ns int64 (P,), host midpoint ns float64 (P,),
    device midpoint ns float64 (P,))``."""
    t1, t2, t3, t4 = (np.array(v, dtype=np.int64) for v in zip(
        *((p.send_ns, p.device_rx_ns, p.device_tx_ns, p.receipt_ns) for p in pings),
        strict=True))
    rtt = (t4 - t1) - (t3 - t2)
    return rtt, t1 + (t4 - t1) / 2.0, t2 + (t3 - t2) / 2.0


#: What an estimate says for its error bound when the round trip it went by is 0 or less
#: (a reply stamped no later than its request: a link without wire time, such as a pty).
BOUND_NOT_MEASURED = "not measured (min RTT 0: no wire time)"


def _rtt_figures(rtt: np.ndarray, best: int) -> dict[str, float | str]:
    """The round-trip figures every round-trip estimate prints: the round trip it went by
    (``rtt[best]``, ns), p50/p99 over all, and the error bound (half the one it went by;
    ``"error bound": BOUND_NOT_MEASURED`` instead where that round trip is 0 or less)."""
    figures: dict[str, float | str] = {
        "min RTT ms": float(rtt[best]) / 1e6,
        "RTT p50 ms": float(np.percentile(rtt, 50)) / 1e6,
        "RTT p99 ms": float(np.percentile(rtt, 99)) / 1e6}
    if rtt[best] <= 0:
        figures["error bound"] = BOUND_NOT_MEASURED
    else:
        figures["error bound ms"] = float(rtt[best] // 2) / 1e6
    return figures


def capture_stamps(samples: Sequence[JointSample]) -> CaptureStamps:
    """Estimate each sample's capture time on the host clock, and the receipt latency.

    Round trip where every sample has ``request_ns``; else, where every sample has an
    increasing ``device_stamp_ns``, the device stamps mapped to the host clock through the
    answered ping with the smallest round trip (:attr:`JointSample.pings`), or, without an
    answered ping, through the stamps' lower envelope; else receipt stamps (see the module
    docstring for what each can and cannot know).

    ``STALE`` samples (the device sent the same frame again: no new capture) are left out
    of the estimate: they would read as clock jumps and deliveries out of order. Each keeps
    the capture time of the sample it repeats (the last one before it that is not
    ``STALE``; the first one after it where none came before), so ``stamps_ns`` still has
    one entry per sample, and :class:`ClockJump` indices count every sample.

    A device-stamped stream may also deliver a sample after a later one without flagging
    it (a link that reorders, a device that sends a frame twice): a device stamp not above
    every stamp before it. That is told from the device clock stepping back by the level
    of ``receipt - device`` after it (:func:`_out_of_sequence`): a clock that stepped back
    by ``D`` raises the level of every later sample by ``D``; a late delivery leaves the
    later samples' level where it was. Such samples are left out of the estimate and
    placed by their own device stamps on the clock of the sample before them
    (:attr:`CaptureStamps.out_of_sequence`; sort by ``stamps_ns`` before pairing, as
    :func:`pair_samples` does).

    Args:
        samples: ``N`` joint samples of one stream, in order of receipt, at least 2 of them
            not ``STALE``.

    Returns:
        :class:`CaptureStamps` (``stamps_ns`` int64 ``(N,)``, ns); ``describe()`` prints the
        method and its figures (for a ping round trip: pings answered, min RTT, RTT p50/p99,
        error bound = min RTT / 2, drift, and how far the lower envelope alone would have
        placed the samples).

    Raises:
        TimebaseError: fewer than 2 samples that are not ``STALE``.
    """
    fresh = np.array([not (s.status & Status.STALE) for s in samples], dtype=bool)  # (N,)
    if int(fresh.sum()) < 2:
        raise TimebaseError(f"capture_stamps: expected at least 2 samples that are not STALE, "
                            f"found {int(fresh.sum())} of {len(samples)}; record longer")
    dev = np.array([s.device_stamp_ns for s in samples], dtype=np.int64)  # (N,)
    rx = np.array([s.receipt_ns for s in samples], dtype=np.int64)
    late = np.zeros(len(samples), dtype=bool)  # delivered after a later capture
    if (dev[fresh] >= 0).all() and not all(samples[i].request_ns >= 0
                                           for i in np.flatnonzero(fresh)):
        restart = np.array([bool(samples[i].status & Status.RESTART)
                            for i in np.flatnonzero(fresh)], dtype=bool)
        late[fresh] = _out_of_sequence(dev[fresh], rx[fresh], restart)
        if int((fresh & ~late).sum()) < 2:  # too few left to place a clock: as before
            late[:] = False
    use = fresh & ~late
    if use.all():
        return _capture_stamps(samples)
    kept = np.flatnonzero(use)  # (K,) indices of the samples the estimate uses
    est = _capture_stamps(_kept_samples(samples, use))
    # a STALE sample takes the stamp of the last kept sample before it (else the first after)
    src = np.maximum(np.searchsorted(kept, np.arange(len(samples)), side="right") - 1, 0)
    jumps = tuple(ClockJump(int(kept[j.sample]), j.device_step_ns) for j in est.jumps)
    stamps = est.stamps_ns[src]
    # a late sample: its own device stamp on the clock of the kept sample before it
    stamps[late] = stamps[late] + (dev[late] - dev[kept[src[late]]])
    latency = None if est.latency_s is None else float(np.mean(rx[kept] - est.stamps_ns)) / 1e9
    return CaptureStamps(stamps, est.method, latency, est.detail, jumps, est.receipt_reason,
                         tuple(int(i) for i in np.flatnonzero(late)))


#: How many steps back of a device clock :func:`_out_of_sequence` follows before it stops
#: looking for late samples (stamps that never advance would step back at every sample;
#: each step costs a pass over the stream).
MAX_STEPS_BACK = 64


def _out_of_sequence(dev: np.ndarray, rx: np.ndarray,
                     restart: np.ndarray | None = None) -> np.ndarray:
    """Which samples of a device-stamped stream arrived after a later capture of the same
    clock: bool ``(N,)`` of ``dev``, ``rx`` (int64 ``(N,)`` device and receipt stamps, ns);
    ``restart``: bool ``(N,)``, the samples the stream flagged ``RESTART`` (the device
    started again there: never a late delivery).

    A run of samples whose device stamps are not above the highest before them (since the
    clock last stepped back) is either a late delivery (reordered, or sent twice) or the
    device clock stepping back by ``D = highest before - lowest in the run + one period``.
    Delivery delay only adds, so the minimum of ``receipt - device`` over up to ``w``
    samples after the run tells them apart: the clock that stepped back raises it by
    ``D``; after a late delivery it stays where it was before the run. The run is late
    where that minimum rose by less than the larger of ``D / 2`` and 4 sigma of the scatter
    of such minima over the stream (a step that small cannot be told from delivery
    jitter). A run that reaches the end of the stream (nothing after it to compare) is late
    only where it is at most ``w`` samples long and every stamp in it repeats one before it
    exactly (a device clock on a grid of ticks that steps back by whole ticks repeats
    earlier stamps too, but for as long as the stream goes on). After a step back, the
    clock's new stretch is searched the same way from its first sample (a sample reordered
    inside it is found too). ``w = clip(N // 20, 5, 20)``.

    Known limit: a sample reordered across the step itself (the new clock's first sample
    delivered before the old clock's last) is taken for late, and the step is found one
    sample later."""
    n = dev.size
    late = np.zeros(n, dtype=bool)
    steps = np.diff(dev)
    if n < 2 or (steps > 0).all():
        return late
    period = float(np.median(steps[steps > 0])) if (steps > 0).any() else 0.0
    level = (rx - dev).astype(np.float64)  # (N,) host - device: delay plus the clock offset
    w = int(np.clip(n // 20, 5, 20))
    cand0 = np.concatenate([[False], dev[1:] <= np.maximum.accumulate(dev)[:-1]])
    ok = level[~cand0]
    nb = ok.size // w
    sigma = 0.0
    if nb >= 3:
        d = np.diff(ok[:nb * w].reshape(nb, w).min(1))
        sigma = 1.4826 * float(np.median(np.abs(d - np.median(d))))

    def before_run(start: int, r0: int) -> np.ndarray:
        """Up to ``w`` samples before ``r0`` in the stretch from ``start``, not late."""
        lo = max(start, r0 - 4 * w)
        got = lo + np.flatnonzero(~late[lo:r0])
        return got[-w:] if got.size >= w or lo == start else \
            (start + np.flatnonzero(~late[start:r0]))[-w:]

    def after_run(r1: int, high: int) -> np.ndarray:
        """Up to ``w`` samples from ``r1`` on whose stamps are above ``high``."""
        hi = min(n, r1 + 4 * w)
        got = r1 + np.flatnonzero(dev[r1:hi] > high)
        return got[:w] if got.size >= w or hi == n else \
            (r1 + np.flatnonzero(dev[r1:] > high))[:w]

    start, a = 0, 1  # the clock's latest stretch begins at start; search from a
    for _ in range(MAX_STEPS_BACK):  # a clock that steps back at every sample: not late
        if a >= n:
            break
        top = np.maximum.accumulate(dev[start:])  # (n - start,) highest so far
        cand = dev[start + 1:] <= top[:-1]  # cand[k]: sample start + 1 + k
        idx = start + 1 + np.flatnonzero(cand[a - start - 1:]) + (a - start - 1)
        if idx.size == 0:
            break
        jumped = False
        for run in np.split(idx, np.flatnonzero(np.diff(idx) > 1) + 1):
            r0, r1 = int(run[0]), int(run[-1]) + 1
            high = int(top[r0 - 1 - start])  # highest stamp before the run
            after = after_run(r1, high)
            if restart is not None and restart[r0]:
                late[r0:r1] = False  # the device said it started again
            elif after.size == 0:
                late[r0:r1] = r1 - r0 <= w and bool(np.isin(dev[r0:r1], dev[start:r0]).all())
            else:
                step_back = float(high - dev[r0:r1].min()) + period
                rise = float(level[after].min() - level[before_run(start, r0)].min())
                late[r0:r1] = rise < max(step_back / 2, 4 * sigma)
            if not late[r0]:  # the clock stepped back: a new stretch from r0
                start, a, jumped = r0, r0 + 1, True
                break
        if not jumped:
            break
    return late


def _kept_samples(samples: Sequence[JointSample], keep: np.ndarray) -> list[JointSample]:
    """The samples where ``keep`` (bool ``(N,)``) is True; the pings a sample left out
    carries move to the kept sample before it (the first kept one where none came before),
    so that no ping is lost with it."""
    out: list[JointSample] = []
    early: tuple[Ping, ...] = ()  # pings of samples left out before the first kept one
    for s, ok in zip(samples, keep, strict=True):
        if ok:
            out.append(dataclasses.replace(s, pings=early + s.pings) if early else s)
            early = ()
        elif s.pings and out:
            out[-1] = dataclasses.replace(out[-1], pings=out[-1].pings + s.pings)
        else:
            early += s.pings
    return out


def _capture_stamps(samples: Sequence[JointSample]) -> CaptureStamps:
    """:func:`capture_stamps` of ``N >= 2`` samples none of which is ``STALE``."""
    rx = np.array([s.receipt_ns for s in samples], dtype=np.int64)  # (N,)
    req = np.array([s.request_ns for s in samples], dtype=np.int64)
    dev = np.array([s.device_stamp_ns for s in samples], dtype=np.int64)
    if (req >= 0).all():
        rtt = rx - req
        half = int(rtt.min()) // 2
        stamps = req + half
        return CaptureStamps(stamps, "round trip", float(np.mean(rx - stamps)) / 1e9,
                             _rtt_figures(rtt, int(np.argmin(rtt))))
    if (dev >= 0).all():
        return _device_stamps(samples, dev, rx)
    reason = ("the stream has neither request stamps nor device stamps" if (dev < 0).all()
              else f"{int((dev < 0).sum())} of {len(dev)} samples carry no device stamp")
    return CaptureStamps(rx.copy(), "receipt", None, {}, receipt_reason=reason)


#: The smallest step of a device clock read as a jump, ns: far above a serial link's
#: delivery jitter as seen in the minimum over a window, far below a frame period.
MIN_CLOCK_JUMP_NS = 20_000_000


def _level_steps(dev: np.ndarray, rx: np.ndarray) -> list[ClockJump]:
    """Steps of ``host - device`` inside one stretch of increasing device stamps: where the
    minimum over the ``w`` samples after an index differs from the minimum over the ``w``
    before it by more than :data:`MIN_CLOCK_JUMP_NS` (and 8 sigma of the block minima's
    scatter), after the drift is taken out, and the new level holds over up to ``4 w``
    samples (a stall of the host delays a run of receipts but does not move their minimum
    for long). Minima, as in :func:`_lower_envelope`: delivery delay only adds. A step
    within ``w`` samples of either end is not seen."""
    n = dev.size
    if n < 20:
        return []
    w = int(np.clip(n // 20, 5, 50))
    x = (dev - dev[0]).astype(np.float64)
    y = (rx - dev).astype(np.float64) - float(rx[0] - dev[0])
    nb = n // w
    blocks = np.arange(nb * w).reshape(nb, w)
    arg = blocks[np.arange(nb), np.argmin(y[blocks], 1)]
    steps = np.diff(x[arg])
    slope = float(np.median(np.diff(y[arg])[steps > 0] / steps[steps > 0])) if (steps > 0).any() \
        else 0.0
    r = y - slope * x  # (n,) without the drift
    d = np.diff(r[arg])
    sigma = 1.4826 * float(np.median(np.abs(d - np.median(d)))) if d.size else 0.0
    thr = max(float(MIN_CLOCK_JUMP_NS), 8.0 * sigma)
    mins = np.lib.stride_tricks.sliding_window_view(r, w).min(1)  # mins[i] = min(r[i:i+w])
    at = np.arange(w, n - w + 1)
    shift = mins[at] - mins[at - w]
    out: list[ClockJump] = []
    big = np.flatnonzero(np.abs(shift) > thr)
    for run in np.split(big, np.flatnonzero(np.diff(big) > 1) + 1) if big.size else []:
        # a drop of the level is seen by the windows that end at the jump, a rise by those
        # that start there
        s = int(at[run[-1]] if shift[run[-1]] < 0 else at[run[0]])
        span = min(4 * w, s, n - s)
        step = float(r[s:s + span].min() - r[s - span:s].min())
        if abs(step) > thr and np.sign(step) == np.sign(shift[run[0]]):
            out.append(ClockJump(_jump_sample(r, s, w, span, step), int(round(-step))))
    return out


def _jump_sample(r: np.ndarray, s: int, w: int, span: int, step: float) -> int:
    """The first sample on the new level of a step of ``step`` ns in ``r`` (``host -
    device``, drift taken out) that the windows place at ``s``, give or take ``w``: the
    windows' minima can put it a few samples off where delivery bursts hide the level (a
    sample of the new clock placed with the old one's offset is a whole step off). Against
    the level before (the minimum over ``span`` samples ending ``w`` before ``s``): after a
    drop, the first sample below it by half the step (delivery only adds, so no sample of
    the old clock is); after a rise, the first from which every sample up to ``s + w`` is
    above it by half the step. ``s`` where no sample qualifies."""
    lo = max(1, s - w)
    before = r[max(0, lo - span):lo]
    seg = r[lo:min(r.size, s + w)]
    if not before.size or not seg.size:
        return s
    level = float(before.min())
    if step < 0:
        hit = np.flatnonzero(seg < level + step / 2)
        return lo + int(hit[0]) if hit.size else s
    above = seg > level + step / 2
    tail = np.flatnonzero(~above)  # the first index after the last sample not above it
    first = int(tail[-1]) + 1 if tail.size else 0
    return lo + first if first < seg.size else s


def _clock_stretches(dev: np.ndarray, rx: np.ndarray) -> tuple[list[tuple[int, int]],
                                                               list[ClockJump]]:
    """Split a device-stamped stream where the device clock jumps: where a stamp does not
    increase (a reset or a step back), and where ``host - device`` steps
    (:func:`_level_steps`). Returns ``([(start, stop), ...], jumps)``; one stretch
    ``[(0, N)]`` for a clock that never jumped."""
    n = dev.size
    back = (np.flatnonzero(np.diff(dev) <= 0) + 1).tolist()
    jumps = [ClockJump(i, int((dev[i] - dev[i - 1]) - (rx[i] - rx[i - 1]))) for i in back]
    edges = [0, *back, n]
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        jumps += [ClockJump(a + j.sample, j.device_step_ns) for j in _level_steps(dev[a:b], rx[a:b])]
    jumps.sort(key=lambda j: j.sample)
    cuts = [0, *(j.sample for j in jumps), n]
    return list(zip(cuts[:-1], cuts[1:], strict=True)), jumps


def _device_stamps(samples: Sequence[JointSample], dev: np.ndarray, rx: np.ndarray
                   ) -> CaptureStamps:
    """:func:`capture_stamps` of a stream whose every sample carries a device stamp: the
    device clock placed on the host clock stretch by stretch between its jumps
    (:func:`_clock_stretches`); a stretch of one sample keeps its receipt stamp less the
    others' mean latency."""
    stretches, jumps = _clock_stretches(dev, rx)
    if not jumps:
        return _one_clock(samples, dev, rx, check_pings=False)
    parts: list[CaptureStamps | None] = [
        _one_clock(samples[a:b], dev[a:b], rx[a:b], check_pings=True) if b - a >= 2 else None
        for a, b in stretches]
    done = [(p, b - a) for p, (a, b) in zip(parts, stretches, strict=True) if p is not None]
    if not done:
        return CaptureStamps(rx.copy(), "receipt", None, {}, jumps=tuple(jumps),
                             receipt_reason="the device clock jumped at every sample")
    lat = float(np.average([p.latency_s or 0.0 for p, _ in done], weights=[k for _, k in done]))
    stamps = np.concatenate([p.stamps_ns if p is not None
                             else rx[a:b] - int(round(lat * 1e9))
                             for p, (a, b) in zip(parts, stretches, strict=True)])
    main = max(done, key=lambda pk: pk[1])[0]
    return CaptureStamps(stamps, main.method, float(np.mean(rx - stamps)) / 1e9,
                         {**main.detail, "clock jumps": len(jumps)}, jumps=tuple(jumps))


def _one_clock(samples: Sequence[JointSample], dev: np.ndarray, rx: np.ndarray,
               check_pings: bool) -> CaptureStamps:
    """The device clock of one stretch without jumps (stamps increasing) on the host clock:
    through the answered ping with the smallest round trip, else the lower envelope.
    ``check_pings``: keep only pings whose clock offset lies within
    :data:`MIN_CLOCK_JUMP_NS` plus their round trip of the stretch's envelope (a ping
    answered by the clock before or after a jump does not belong to this stretch)."""
    x = (dev - dev[0]).astype(np.float64)  # (N,) device time, ns
    y = (rx - dev[0]).astype(np.float64) - x  # (N,) host - device, ns
    e_slope, e_icept, slope, icept, low = _lower_envelope(x, y)
    env = e_slope * x + e_icept
    env_stamps = dev + np.round(env).astype(np.int64)
    pings = [p for s in samples for p in s.pings]
    answered = [p for p in pings if p.answered]
    if answered and check_pings:
        rtt, host_mid, dev_mid = _ping_arrays(answered)
        at = np.interp(dev_mid - dev[0], x, env)  # the envelope's host - device there
        fits = np.abs(host_mid - dev_mid - at) <= MIN_CLOCK_JUMP_NS + rtt
        answered = [p for p, ok in zip(answered, fits, strict=True) if ok]
    if answered:
        rtt, host_mid, dev_mid = _ping_arrays(answered)
        best = int(np.argmin(rtt))
        drift = _median_slope(x[low], y[low]) if low.size >= 2 else e_slope
        # host = dev + drift * (dev - dev[0]) + c, through the best ping's midpoints
        c = host_mid[best] - dev_mid[best] - drift * (dev_mid[best] - dev[0])
        stamps = dev + np.round(drift * x + c).astype(np.int64)
        return CaptureStamps(stamps, "ping round trip", float(np.mean(rx - stamps)) / 1e9, {
            "pings": len(answered), **_rtt_figures(rtt, best), "drift ppm": drift * 1e6,
            "device clock alone ms": float(np.mean(env_stamps - stamps)) / 1e6})
    detail = {"drift ppm": e_slope * 1e6,
              "least-squares bias ms": float(np.mean(slope * x + icept - env)) / 1e6,
              "delivery p99 ms": float(np.percentile(y - env, 99)) / 1e6}
    if pings:
        return CaptureStamps(env_stamps, "device clock (no pong)",
                             float(np.mean(rx - env_stamps)) / 1e9,
                             {"pings unanswered": len(pings), **detail})
    return CaptureStamps(env_stamps, "device clock", float(np.mean(rx - env_stamps)) / 1e9,
                         detail)


def pair_samples(frame_stamps_ns: ArrayLike, samples: Sequence[JointSample], *,
                 tolerance_s: float, frame_latency_s: float = 0.0
                 ) -> tuple[Pairing, CaptureStamps]:
    """Pair camera frames with joint samples placed at their estimated capture times.

    The default way to pair: :func:`capture_stamps` estimates each sample's capture time
    (and the receipt latency, to print), then :func:`pair_frames` interpolates positions at
    each latency-corrected frame stamp. ``STALE`` samples are left out of both (they carry
    no new capture); samples that arrived out of order are paired at their capture.

    Args:
        frame_stamps_ns: int ``(F,)`` frame stamps, ns; samples: ``N >= 2`` joint samples
            of one stream, in order; tolerance_s, frame_latency_s: as :func:`pair_frames`.

    Returns:
        ``(pairing, estimate)``; ``pairing.positions`` is float64 ``(F, J)``.

    Raises:
        TimebaseError: fewer than 2 samples that are not ``STALE``, or stamps that step back.
    """
    est = capture_stamps(samples)
    _, pos, valid = samples_to_arrays(samples)
    order = np.argsort(est.stamps_ns, kind="stable")  # samples that arrived late, in place
    return pair_frames(frame_stamps_ns, est.stamps_ns[order], pos[order],
                       tolerance_s=tolerance_s, frame_latency_s=frame_latency_s,
                       valid=valid[order]), est
