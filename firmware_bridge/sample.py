"""Per-stream statistics (joint samples and their status flags: :mod:`edge.joints`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["StreamStats"]


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
        stale_samples: samples delivered with the ``STALE`` flag (the device sent the same
            counter again: nothing new).
        late_frames: frames older than one already delivered (numbered behind it, within
            the reorder window of the framed stream), dropped: never delivered, not a lost
            cycle (the cycle they belong to was counted missed when the next one came).
        restarts: times the device's numbering started again (samples delivered with the
            ``RESTART`` flag).
        clock_jumps: times the device's clock jumped while the stream ran and the stream
            re-anchored on it (EtherCAT: the DC system time, once replies in a row agree with
            each other; a framed device's clock jumps are found by the time alignment,
            :func:`edge.timebase.capture_stamps`).
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
    stale_samples: int = 0
    late_frames: int = 0
    restarts: int = 0
    clock_jumps: int = 0
    first_ns: int = -1
    last_ns: int = -1
    slots: int = 0
    empty_slots: int = 0
    worst_gap_ns: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate_hz(self) -> float:
        """Mean valid-sample rate between the first and last sample, Hz (0 if < 2 samples)."""
        if self.samples < 2 or self.last_ns <= self.first_ns:
            return 0.0
        return (self.samples - 1) * 1e9 / (self.last_ns - self.first_ns)

    def as_dict(self) -> dict[str, Any]:
        """Return the counters and ``rate_hz`` as a JSON-ready dict."""
        d = asdict(self)
        d["rate_hz"] = self.rate_hz
        return d
