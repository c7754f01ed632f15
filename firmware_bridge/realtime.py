"""Real-time scheduling for a joint stream's cycle loop (the ``rt_priority`` URL option).

A 1 kHz master on a loaded Linux machine loses slots while the kernel runs other
processes: a lost frame costs one slot of waiting, but the process may then not run for
several more (docs/bridge.md, Benchmark). ``SCHED_FIFO`` (POSIX realtime scheduling,
``sched_setscheduler(2)``) lets the loop preempt normal processes. It needs root or
``CAP_SYS_NICE`` (or an ``RLIMIT_RTPRIO`` allowance). The loop sleeps between cycles
(``select()`` on the socket), so it cannot starve the machine.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from .errors import BridgeError

__all__ = ["RealtimePriority"]


class RealtimePriority:
    """Run the calling thread at ``SCHED_FIFO priority`` while applied; restore after.

    The thread that calls :meth:`apply` is the one switched (Linux schedules threads);
    :meth:`restore` puts that same thread back, from whichever thread calls it.

    Args:
        priority: 0 (leave the scheduling as it is) or 1-99 (``SCHED_FIFO`` priority).
        url: the stream's URL, for messages.

    Raises:
        BridgeError: a priority outside 0-99 (at construction); the OS refused it, or has
            no realtime scheduling (at :meth:`apply`).
    """

    def __init__(self, priority: int, url: str):
        if not 0 <= int(priority) <= 99:
            raise BridgeError(f"{url}: rt_priority: expected 0 (off) or 1-99, found "
                              f"{priority}")
        self.priority, self.url = int(priority), url
        self._saved: tuple[int, int, int] | None = None  # (thread id, policy, priority)

    def apply(self) -> None:
        """Switch the calling thread to ``SCHED_FIFO`` (no-op at priority 0)."""
        if self.priority == 0 or self._saved is not None:
            return
        if not hasattr(os, "sched_setscheduler"):
            raise BridgeError(f"{self.url}: rt_priority={self.priority}: this OS has no "
                              f"realtime scheduling calls; use rt_priority=0")
        tid = threading.get_native_id()
        saved = (tid, os.sched_getscheduler(tid), os.sched_getparam(tid).sched_priority)
        try:
            os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(self.priority))
        except OSError as exc:
            raise BridgeError(
                f"{self.url}: cannot run the cycle loop at SCHED_FIFO {self.priority} "
                f"({exc.strerror or exc}): run as root, give the interpreter CAP_SYS_NICE "
                f"(setcap cap_sys_nice+ep), or raise RLIMIT_RTPRIO for the user; or pass "
                f"rt_priority=0 to run at normal priority") from exc
        self._saved = saved

    def restore(self) -> None:
        """Put back the scheduling :meth:`apply` found (never raises)."""
        if self._saved is None:
            return
        tid, policy, prio = self._saved
        self._saved = None
        try:
            os.sched_setscheduler(tid, policy, os.sched_param(prio))
        except OSError:  # the thread has ended, or nothing to undo
            pass

    @property
    def applied(self) -> bool:
        """Whether a thread runs at the realtime priority now."""
        return self._saved is not None

    def follow(self) -> None:
        """Make the calling thread the one at the realtime priority (moving it from another
        thread if needed; no-op at priority 0 or when it already is)."""
        if self.priority == 0:
            return
        if self._saved is not None and self._saved[0] == threading.get_native_id():
            return
        self.restore()
        self.apply()

    def describe(self) -> str:
        """What is in force, e.g. ``"SCHED_FIFO 3 (rt_priority=3)"``."""
        if self._saved is not None:
            return f"SCHED_FIFO {self.priority} (rt_priority={self.priority})"
        return f"as the process was (rt_priority={self.priority})"

    def __enter__(self) -> RealtimePriority:
        self.apply()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.restore()
