"""Joint samples, their status flags and per-stream statistics."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field

import numpy as np

__all__ = ["JointSample", "Status", "StreamStats"]


class Status(enum.IntFlag):
    """Status flags of one joint sample (combine with ``|``).

    ``OK`` (no flag) means fresh values read in one valid cycle right after another valid one.
    ``GAP``: one or more cycles before this sample failed (timeout, CRC, lost frame); the count is
    in :attr:`JointSample.missed`. ``STALE``: the values were not refreshed in this cycle (never
    set on a sample that is yielded as fresh). ``FAULT``: the device reported an error
    (hardware error bit, EtherCAT slave out of OP); the values are still the ones read.
    """

    OK = 0
    GAP = 1
    STALE = 2
    FAULT = 4


@dataclass(frozen=True)
class JointSample:
    """One reading of every joint of a stream.

    Attributes:
        position_rad: float64 ``(J,)`` joint positions, rad (m for a prismatic joint).
        velocity_rad_s: float64 ``(J,)`` joint velocities, rad/s; NaN where the device has none.
        effort_nm: float64 ``(J,)`` joint efforts, N*m; NaN where the device has none.
        receipt_ns: host ``time.monotonic_ns()`` when the reply was complete.
        device_counter: the device's own sequence number, or -1 where the protocol has none.
        device_stamp_ns: the device's own clock in ns, or -1 where the protocol has none.
        status: :class:`Status` flags.
        missed: number of failed cycles just before this sample (0 unless ``GAP``).
        fault: a short reason when ``FAULT`` is set, else ``""``.
        request_ns: host ``time.monotonic_ns()`` just before the request that produced this
            sample was sent (servo buses, EtherCAT), or -1 where the device sends on its own
            clock (framed stream, replayed logs without it). With ``receipt_ns`` it gives the
            round trip from which :func:`firmware_bridge.timebase.capture_stamps` estimates
            the latency.
    """

    position_rad: np.ndarray
    velocity_rad_s: np.ndarray
    effort_nm: np.ndarray
    receipt_ns: int
    device_counter: int = -1
    device_stamp_ns: int = -1
    status: Status = Status.OK
    missed: int = 0
    fault: str = ""
    request_ns: int = -1

    @property
    def joints(self) -> int:
        """Number of joints ``J``."""
        return int(self.position_rad.shape[0])

    def to_record(self) -> dict:
        """Return a JSON-ready dict (lists of floats; NaN written as ``None``)."""

        def clean(a: np.ndarray) -> list:
            return [None if not np.isfinite(v) else float(v) for v in a]

        return {
            "receipt_ns": int(self.receipt_ns),
            "device_counter": int(self.device_counter),
            "device_stamp_ns": int(self.device_stamp_ns),
            "status": int(self.status),
            "missed": int(self.missed),
            "fault": self.fault,
            "request_ns": int(self.request_ns),
            "position_rad": clean(self.position_rad),
            "velocity_rad_s": clean(self.velocity_rad_s),
            "effort_nm": clean(self.effort_nm),
        }

    @classmethod
    def from_record(cls, rec: dict) -> JointSample:
        """Inverse of :meth:`to_record`."""

        def arr(v: list) -> np.ndarray:
            return np.array([np.nan if x is None else x for x in v], dtype=np.float64)

        return cls(
            position_rad=arr(rec["position_rad"]),
            velocity_rad_s=arr(rec["velocity_rad_s"]),
            effort_nm=arr(rec["effort_nm"]),
            receipt_ns=int(rec["receipt_ns"]),
            device_counter=int(rec.get("device_counter", -1)),
            device_stamp_ns=int(rec.get("device_stamp_ns", -1)),
            status=Status(int(rec.get("status", 0))),
            missed=int(rec.get("missed", 0)),
            fault=str(rec.get("fault", "")),
            request_ns=int(rec.get("request_ns", -1)),
        )


@dataclass
class StreamStats:
    """Counters of one stream since it was opened (all counts are cycles or events).

    Attributes:
        samples: valid samples delivered.
        gaps: samples delivered with the ``GAP`` flag (one per run of failed cycles).
        lost_cycles: failed cycles (timeouts, corrupt replies, lost EtherCAT frames).
        timeouts: cycles that ended in the bridge's deadline.
        crc_errors: replies or frames rejected by their checksum or CRC.
        resyncs: times the decoder skipped bytes to find the next frame or packet.
        reconnects: times the device was reopened after it vanished.
        faults: samples delivered with the ``FAULT`` flag.
        stale_replies: replies rejected because a per-cycle value (the EtherCAT DC system
            time) showed them to be late, replayed or duplicated (also counted as lost).
        first_ns, last_ns: receipt stamps of the first and last valid samples.
        slots: for a stream paced at ``rate_hz``, the slots of that grid from the first
            sample to the last (``round((last_ns - first_ns) * rate_hz) + 1``); 0 unpaced.
        empty_slots: ``slots - samples``: slots that delivered no sample, whatever the
            reason (lost frame, overrun, a wait longer than one period).
        worst_gap_ns: the longest time between two consecutive valid samples, ns.
    """

    samples: int = 0
    gaps: int = 0
    lost_cycles: int = 0
    timeouts: int = 0
    crc_errors: int = 0
    resyncs: int = 0
    reconnects: int = 0
    faults: int = 0
    stale_replies: int = 0
    first_ns: int = -1
    last_ns: int = -1
    slots: int = 0
    empty_slots: int = 0
    worst_gap_ns: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def rate_hz(self) -> float:
        """Mean valid-sample rate between the first and last sample, Hz (0 if < 2 samples)."""
        if self.samples < 2 or self.last_ns <= self.first_ns:
            return 0.0
        return (self.samples - 1) * 1e9 / (self.last_ns - self.first_ns)

    def as_dict(self) -> dict:
        """Return the counters and ``rate_hz`` as a JSON-ready dict."""
        d = asdict(self)
        d["rate_hz"] = self.rate_hz
        return d
