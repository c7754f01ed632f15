"""``trace+URL``: wrap any stream and record every sample it yields.

With ``trace_path=FILE`` in the query the samples go to a joint log (readable by
``replay://``); without it each sample is logged at DEBUG level on ``firmware_bridge.trace``.
"""

from __future__ import annotations

import logging
import os
import threading

from edge.joints import JointSample

from .errors import BridgeError
from .jointlog import JointLogWriter
from .stream import JointStream, Reading

__all__ = ["TraceStream"]

log = logging.getLogger("firmware_bridge.trace")


class TraceStream(JointStream):
    """Delegate to ``inner``, tracing each sample; statistics and pacing (``rate_hz``) are
    the inner stream's. A ``trace_path`` that exists is refused when the stream opens
    (:class:`~.errors.BridgeError`; a log is never overwritten)."""

    def __init__(self, inner: JointStream, trace_path: str | None = None):
        super().__init__("trace+" + inner.url, rate_hz=inner.rate_hz,
                         read_timeout_s=inner.read_timeout_s)
        self.inner, self.trace_path = inner, trace_path
        self.stats = inner.stats
        self._writer: JointLogWriter | None = None
        self._writing = threading.Lock()  # a reader thread may still be in read() at close

    #: The inner stream's optional methods the recorder calls (``calibrate record`` runs a
    #: simulated controller's program and wakes a blocked read at the end), passed through.
    PASSED_THROUGH = ("execute_program", "wake")

    def __getattr__(self, name: str):
        # only reached for what the class does not define; "inner" itself is set in
        # __init__, so asking for it before then must not recurse
        if name in TraceStream.PASSED_THROUGH and "inner" in self.__dict__:
            return getattr(self.inner, name)
        raise AttributeError(name)

    @property
    def joint_names(self) -> list[str]:
        return self.inner.joint_names

    def describe(self) -> dict:
        return self.inner.describe()

    def _open(self) -> None:
        if self.trace_path and os.path.lexists(self.trace_path):
            raise BridgeError(f"{self.url}: trace_path {self.trace_path} already exists; name "
                              "another file or move that one away (a log is never overwritten)")
        self.inner.open()
        if self.trace_path:
            try:
                self._writer = JointLogWriter(self.trace_path, self.inner.url,
                                              self.joint_names, exclusive=True)
            except FileExistsError as exc:
                self.inner.close()
                raise BridgeError(f"{self.url}: trace_path {self.trace_path} already exists "
                                  "(a log is never overwritten)") from exc

    def _close(self) -> None:
        with self._writing:
            writer, self._writer = self._writer, None
        if writer:
            writer.close(self.inner.stats)
        self.inner.close()

    def _cycle(self) -> Reading:  # never called: read() is delegated
        raise NotImplementedError

    def read(self) -> JointSample:
        """Read from the inner stream and trace the sample (raises like the inner stream)."""
        s = self.inner.read()
        with self._writing:  # a sample read after close began is not traced
            if self._writer:
                self._writer.write(s)
            elif not self.trace_path:
                log.debug("%s %s", self.inner.url, s.to_record())
        return s
