"""Lifecycle shared by the fake devices that serve a pty from a child process."""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

__all__ = ["ChildPtyDevice"]


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
        self._proc = ctx.Process(target=target, daemon=True,
                                 args=(*args, self.path, ready, self._stop))
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
