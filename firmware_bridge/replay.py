"""``replay://FILE``: play a joint log back as a stream.

URL form: ``replay:///path/log.jsonl?speed=1.0&loop=0``. ``speed=0`` delivers samples as fast as
they are read; otherwise the original receipt spacing is reproduced (divided by ``speed``).
Receipt stamps are re-based on the host clock: each sample is stamped with the moment it
was due (its original spacing), not the moment the replay's sleep happened to end, unless
the replay fell more than :data:`BEHIND_NS` behind (a stalled host: then when it came), so
a replay at ``speed=1`` gives the timing figures its recording gave. The host stamps of
each sample's request and pings move with its receipt stamp (so a replayed log gets the
latency method its recording had); device counters are kept, and device stamps (of
samples and pings) are kept at ``speed=1`` and run ``speed`` times faster otherwise, so
that a replay at another speed reads the device clock's own drift, not the speed. The
whole log is read and checked when the stream opens (:func:`~.jointlog.read_joint_log`): a
damaged or malformed line is refused there, naming the file, the line and the field, before
any sample is replayed; a last line cut short is left out and said (a warning on the
``firmware_bridge.replay`` logger).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from edge.joints import Ping, Status

from .errors import BridgeError, EndOfLogError
from .jointlog import JointLog, read_joint_log
from .stream import JointStream, LinkLostError, Reading
from .url import Options

__all__ = ["BEHIND_NS", "ReplayStream"]

log = logging.getLogger("firmware_bridge.replay")

#: How late a replayed sample may be handed over and still be stamped with the moment it
#: was due, ns; later (a stalled host), it is stamped when it came.
BEHIND_NS = 5_000_000


class ReplayStream(JointStream):
    """Replay a joint log; raises :class:`BridgeError` at the end unless ``loop=1``."""

    URL_FORM = "replay:///path/to/log.jsonl?speed=1.0&loop=0"

    def __init__(self, url: str, path: str, *, speed: float = 1.0, loop: bool = False,
                 **kw: Any):
        super().__init__(url, **kw)
        self.path, self.speed, self.loop = path, speed, loop
        self._log: JointLog | None = None

    @classmethod
    def _url_options(cls, opts: Options) -> dict[str, Any]:
        return dict(speed=opts.float("speed", 1.0, 0.0), loop=bool(opts.int("loop", 0, 0, 1)))

    @property
    def joint_names(self) -> list[str]:
        return self._log.joints if self._log else []

    def _open(self) -> None:
        if not os.path.exists(self.path):
            raise LinkLostError(f"no joint log at {self.path}")
        self._log = jl = read_joint_log(self.path)
        if not jl.samples:
            raise BridgeError(f"{self.path}: expected at least one sample, found none")
        if jl.cut_last_line and not getattr(self, "_said_cut", False):
            log.warning(jl.cut_last_line)
            self._said_cut = True  # once, not again at each reconnect
        self._i = 0
        self._start_ns = self._last_receipt_ns = time.monotonic_ns()
        # each sample's device clock origin: its stamps run ``speed`` times faster from it;
        # a device that started again (RESTART, or a stamp below the origin: a late sample
        # of the same clock lies above it) begins a new origin, so a replay slower than the
        # recording never stamps below 0
        origins, origin = [], -1
        for x in jl.samples:
            d = x.device_stamp_ns
            if d >= 0 and (origin < 0 or d < origin or x.status & Status.RESTART):
                origin = d
            origins.append(origin)
        self._origins_ns = origins

    def _close(self) -> None:
        pass

    def _cycle(self) -> Reading:
        log = self._log
        assert log is not None  # set by _open(); read() runs cycles only while open
        samples = log.samples
        if self._i >= len(samples):
            if not self.loop:
                raise EndOfLogError(f"{self.url}: end of the log after {len(samples)} "
                                    f"samples")
            self._i = 0
            self._start_ns = self._last_receipt_ns = time.monotonic_ns()
        s = samples[self._i]
        self._i += 1
        receipt_ns = time.monotonic_ns()
        if self.speed > 0:
            due = self._start_ns + int((s.receipt_ns - samples[0].receipt_ns) / self.speed)
            if due > receipt_ns:
                time.sleep((due - receipt_ns) / 1e9)
                receipt_ns = time.monotonic_ns()
            if receipt_ns - due <= BEHIND_NS:  # on time: stamped when it was due
                receipt_ns = max(due, self._last_receipt_ns)  # never before the last one
        self._last_receipt_ns = receipt_ns
        # a recorded gap replays as a gap: the cycles missed before this sample; the host
        # stamps of its request and pings move with its receipt stamp, the device's run
        # ``speed`` times faster
        shift = receipt_ns - s.receipt_ns
        d0 = self._origins_ns[self._i - 1]

        def device(d: int) -> int:
            if self.speed in (0, 1) or d < 0:
                return d
            return max(0, d0 + int((d - d0) / self.speed))

        pings = tuple(Ping(p.send_ns + shift, device(p.device_rx_ns), device(p.device_tx_ns),
                           p.receipt_ns + shift if p.answered else -1) for p in s.pings)
        return Reading(s.position_rad, s.velocity_rad_s, s.effort_nm, receipt_ns,
                       s.device_counter, device(s.device_stamp_ns), s.fault,
                       skipped=s.missed if s.status & Status.GAP else 0,
                       request_ns=s.request_ns + shift if s.request_ns >= 0 else -1,
                       pings=pings, restart=bool(s.status & Status.RESTART),
                       sequenced=True)
