"""Joint logs: what ``syncedge bridge record`` writes and ``replay://`` reads.

Format (JSON Lines, UTF-8, one object per line, schema version 1):

====================  ==========================================================================
line                  content
====================  ==========================================================================
first                 ``{"kind": "header", "schema": 1, "url": str, "joints": [str, ...]}``
each sample           ``{"kind": "sample", **JointSample.to_record()}``
last (when closed)    ``{"kind": "stats", **StreamStats.as_dict()}``
====================  ==========================================================================
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from edge.joints import JointSample

from .errors import BridgeError
from .sample import StreamStats

__all__ = ["JointLog", "JointLogWriter", "read_joint_log"]

SCHEMA = 1


class JointLogWriter:
    """Append samples to a joint log; use as a context manager.

    With ``atomic`` the log is written to ``<path>.partial`` beside ``path`` and renamed to
    ``path`` only by :meth:`close`, so ``path`` never holds a log cut short by a crash; a
    process killed mid-recording leaves the ``.partial`` file, which reads as a log without
    its statistics line.

    Args:
        path: file to create (overwritten).
        url: the stream's URL; joints: joint names (``J``).
        atomic: write beside ``path`` and rename on close.
    """

    def __init__(self, path: str | os.PathLike, url: str, joints: list[str],
                 atomic: bool = False):
        self.path = os.fspath(path)
        self._writing = self.path + ".partial" if atomic else self.path
        self._f = open(self._writing, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._write({"kind": "header", "schema": SCHEMA, "url": url, "joints": list(joints)})

    def _write(self, obj: dict) -> None:
        self._f.write(json.dumps(obj, separators=(",", ":")) + "\n")

    def write(self, sample: JointSample) -> None:
        """Append one sample."""
        self._write({"kind": "sample", **sample.to_record()})

    def close(self, stats: StreamStats | None = None) -> None:
        """Write the statistics line (if given), flush, fsync and close (with ``atomic``, then
        rename the log to ``path``)."""
        if self._f.closed:
            return
        if stats is not None:
            self._write({"kind": "stats", **stats.as_dict()})
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        if self._writing != self.path:
            os.replace(self._writing, self.path)

    def __enter__(self) -> JointLogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class JointLog:
    """A joint log read back: header fields, samples and the stats dict (empty if absent)."""

    url: str
    joints: list[str]
    samples: list[JointSample] = field(default_factory=list)
    stats: dict = field(default_factory=dict)


def read_joint_log(path: str | os.PathLike) -> JointLog:
    """Read a joint log.

    Raises:
        BridgeError: naming the file and line when a line is not valid JSON, the header is
            missing or its schema is not 1.
        OSError: the file cannot be read.
    """
    log: JointLog | None = None
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BridgeError(f"{path}:{lineno}: expected a JSON object, found {exc}") from None
            kind = obj.get("kind")
            if log is None:
                if kind != "header" or obj.get("schema") != SCHEMA:
                    raise BridgeError(f"{path}:{lineno}: expected a header with schema {SCHEMA}, "
                                      f"found kind={kind!r} schema={obj.get('schema')!r}")
                log = JointLog(url=obj["url"], joints=list(obj["joints"]))
            elif kind == "sample":
                log.samples.append(JointSample.from_record(obj))
            elif kind == "stats":
                log.stats = {k: v for k, v in obj.items() if k != "kind"}
            else:
                raise BridgeError(f"{path}:{lineno}: expected kind 'sample' or 'stats', "
                                  f"found {kind!r}")
    if log is None:
        raise BridgeError(f"{path}: expected a joint log header, found an empty file")
    return log
