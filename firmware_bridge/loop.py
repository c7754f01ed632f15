"""``loop://``: a synthetic joint device for tests and demos (no hardware, no I/O).

URL form: ``loop://?joints=6&rate_hz=500&drop_every=0&fault_every=0``. Joint ``j`` follows
``0.5 * sin(2*pi*0.5*t + j)`` rad with its exact derivative as velocity. ``drop_every=N`` fails
every N-th cycle (a lost reply); ``fault_every=N`` flags every N-th sample as a device fault.
The device counter counts cycles, the device stamp is the host clock.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from edge.joints import positional_names

from .stream import CycleError, JointStream, Reading
from .url import Options

__all__ = ["LoopStream"]


class LoopStream(JointStream):
    """Synthetic stream; see the module docstring for the URL form."""

    URL_FORM = "loop://?joints=6&rate_hz=500&drop_every=0&fault_every=0"

    def __init__(self, url: str = "loop://", *, joints: int = 6, drop_every: int = 0,
                 fault_every: int = 0, **kw: Any):
        kw.setdefault("rate_hz", 500.0)
        super().__init__(url, **kw)
        self._n = joints
        self.drop_every, self.fault_every = drop_every, fault_every
        self._count = 0

    @classmethod
    def from_url(cls, url: str, target: str, opts: Options, **kw: Any) -> LoopStream:
        """Build from a parsed URL (see :func:`firmware_bridge.url.stream_for_url`)."""
        args: dict[str, Any] = dict(  # constructor keywords of mixed types
            joints=opts.int("joints", 6, 1, 64), rate_hz=opts.float("rate_hz", 500.0, 0),
            drop_every=opts.int("drop_every", 0, 0), fault_every=opts.int("fault_every", 0, 0))
        opts.finish()
        args.update(kw)
        return cls(url, **args)

    @property
    def joint_names(self) -> list[str]:
        return positional_names(self._n)

    def _open(self) -> None:
        self._t0 = time.monotonic_ns()

    def _close(self) -> None:
        pass

    def _cycle(self) -> Reading:
        self._count += 1
        if self.drop_every and self._count % self.drop_every == 0:
            raise CycleError("lost", f"{self.url}: cycle {self._count} dropped (drop_every)")
        now = time.monotonic_ns()
        t = (now - self._t0) / 1e9
        ph = 2 * math.pi * 0.5 * t + np.arange(self._n)
        fault = "injected fault" if self.fault_every and self._count % self.fault_every == 0 else ""
        return Reading(0.5 * np.sin(ph), 0.5 * math.pi * np.cos(ph), np.zeros(self._n), now,
                       device_counter=self._count, device_stamp_ns=now, fault=fault)
