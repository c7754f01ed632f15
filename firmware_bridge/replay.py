"""``replay://FILE``: play a joint log back as a stream.

URL form: ``replay:///path/log.jsonl?speed=1.0&loop=0``. ``speed=0`` delivers samples as fast as
they are read; otherwise the original receipt spacing is reproduced (divided by ``speed``).
Receipt stamps are re-based on the host clock, and the host stamps of each sample's request
and pings move with its receipt stamp (so a replayed log gets the latency method its
recording had); device counters and stamps are kept. The
whole log is read and checked when the stream opens (:func:`~.jointlog.read_joint_log`): a
damaged or malformed line is refused there, naming the file, the line and the field, before
any sample is replayed.
"""

from __future__ import annotations

import os
import time
from typing import Any

from edge.joints import Ping, Status

from .errors import BridgeError, EndOfLogError
from .jointlog import JointLog, read_joint_log
from .stream import JointStream, LinkLostError, Reading
from .url import Options

__all__ = ["ReplayStream"]


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
        self._log = log = read_joint_log(self.path)
        if not log.samples:
            raise BridgeError(f"{self.path}: expected at least one sample, found none")
        self._i = 0
        self._start_ns = time.monotonic_ns()

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
            self._start_ns = time.monotonic_ns()
        s = samples[self._i]
        self._i += 1
        if self.speed > 0:
            due = self._start_ns + int((s.receipt_ns - samples[0].receipt_ns) / self.speed)
            delay = due - time.monotonic_ns()
            if delay > 0:
                time.sleep(delay / 1e9)
        # a recorded gap replays as a gap: the cycles missed before this sample; the host
        # stamps of its request and pings move with its receipt stamp
        receipt_ns = time.monotonic_ns()
        shift = receipt_ns - s.receipt_ns
        pings = tuple(Ping(p.send_ns + shift, p.device_rx_ns, p.device_tx_ns,
                           p.receipt_ns + shift if p.answered else -1) for p in s.pings)
        return Reading(s.position_rad, s.velocity_rad_s, s.effort_nm, receipt_ns,
                       s.device_counter, s.device_stamp_ns, s.fault,
                       skipped=s.missed if s.status & Status.GAP else 0,
                       request_ns=s.request_ns + shift if s.request_ns >= 0 else -1,
                       pings=pings, restart=bool(s.status & Status.RESTART),
                       sequenced=True)
