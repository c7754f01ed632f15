"""Lifecycle shared by the fake devices that serve a pty from a child process."""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["ChildPtyDevice", "Event", "hardware_priority"]


def hardware_priority() -> None:
    """Give the calling (device) process the timing of hardware on a loaded machine.

    A servo, an ESC or a controller answers within microseconds whatever the host is doing;
    a fake in a child process would otherwise wait behind every other runnable process.
    Real-time priority (``SCHED_FIFO`` 1) where allowed (root), else ``nice -10``, else
    nothing. The fakes sleep between messages, so they cannot starve the machine.
    """
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except (OSError, AttributeError):
        try:
            os.nice(-10)
        except OSError:
            pass


class Event(Protocol):
    """A ``threading``/``multiprocessing`` event: how a child says it is ready, and is told
    to stop."""

    def set(self) -> None:
        """Set the flag."""
        ...

    def is_set(self) -> bool:
        """Whether the flag is set."""
        ...

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the flag (at most ``timeout`` s); whether it is set."""
        ...


def _run_child(target: Callable[..., None], *args: Any) -> None:
    hardware_priority()
    target(*args)


class ChildPtyDevice:
    """Start ``target(*args, path, ready, stop)`` in a forked child that creates the port
    ``path`` (a symlink to its pty) and sets ``ready``; stop and clean up on exit.

    Subclasses implement :meth:`_child` returning ``(target, args)``; use as a context
    manager.

    Attributes:
        path: the port path to open, set by :meth:`start`.
    """

    name = "fake device"
    prefix = "fakedev-"

    def __init__(self) -> None:
        self.path = ""
        self._proc: Any = None
        self._dir = ""

    def _child(self) -> tuple[Callable[..., None], tuple[Any, ...]]:
        raise NotImplementedError

    def start(self) -> str:
        """Start the child process; returns the port path once it exists.

        Raises:
            RuntimeError: if the child has not created the port within 5 s.
        """
        self._dir = tempfile.mkdtemp(prefix=self.prefix)
        self.path = os.path.join(self._dir, "tty")
        ctx = mp.get_context("fork")
        ready, self._stop = ctx.Event(), ctx.Event()
        target, args = self._child()
        self._proc = ctx.Process(target=_run_child, daemon=True,
                                 args=(target, *args, self.path, ready, self._stop))
        self._proc.start()
        if not ready.wait(5.0):
            self.stop()
            raise RuntimeError(f"{self.name} did not start within 5 s")
        return self.path

    def stop(self) -> None:
        """Stop the child process and remove its files."""
        if self._proc is not None:
            self._stop.set()
            self._proc.join(2.0)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()
            self._proc = None
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> ChildPtyDevice:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
