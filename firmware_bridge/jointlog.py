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

import functools
import json
import math
import operator
import os
from dataclasses import dataclass, field

from edge.errors import TimebaseError
from edge.joints import JointSample, Status

from .errors import BridgeError
from .sample import StreamStats

__all__ = ["JointLog", "JointLogWriter", "read_joint_log"]

SCHEMA = 1


class JointLogWriter:
    """Append samples to a joint log; use as a context manager.

    With ``atomic`` the log is written to ``<path>.partial`` beside ``path`` and renamed to
    ``path`` only by :meth:`close`, so ``path`` never holds a log cut short: a process killed
    mid-recording, or a ``with`` block left by an exception, leaves the ``.partial`` file
    (which reads as a log, without its statistics line in the first case);
    :meth:`close_partial` closes it there on purpose and :meth:`discard` removes it.

    Args:
        path: file to create (overwritten unless ``exclusive``).
        url: the stream's URL; joints: joint names (``J``).
        atomic: write beside ``path`` and rename on close.
        exclusive: refuse a ``path`` that exists (``FileExistsError``) instead of
            overwriting it (not with ``atomic``, whose caller checks ``path`` itself).

    Attributes:
        path: the finished log's path; partial_path: the file being written
            (``<path>.partial`` with ``atomic``, else ``path``).

    Raises:
        OSError: the file cannot be created.
    """

    def __init__(self, path: str | os.PathLike, url: str, joints: list[str],
                 atomic: bool = False, exclusive: bool = False):
        self.path = os.fspath(path)
        self.partial_path = self.path + ".partial" if atomic else self.path
        mode = "x" if exclusive and not atomic else "w"
        self._f = open(self.partial_path, mode, encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._write({"kind": "header", "schema": SCHEMA, "url": url, "joints": list(joints)})

    def _write(self, obj: dict) -> None:
        self._f.write(json.dumps(obj, separators=(",", ":")) + "\n")

    def write(self, sample: JointSample) -> None:
        """Append one sample."""
        self._write({"kind": "sample", **sample.to_record()})

    def _finish(self, stats: StreamStats | None) -> bool:
        """Write the statistics line (if given), flush, fsync and close; False if the file
        was already closed."""
        if self._f.closed:
            return False
        if stats is not None:
            self._write({"kind": "stats", **stats.as_dict()})
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        return True

    def close(self, stats: StreamStats | None = None) -> None:
        """Write the statistics line (if given), flush, fsync and close (with ``atomic``, then
        rename the log to ``path``). Does nothing once the log is closed."""
        if self._finish(stats) and self.partial_path != self.path:
            os.replace(self.partial_path, self.path)

    def close_partial(self, stats: StreamStats | None = None) -> str:
        """Close the log where it is being written (``<path>.partial`` with ``atomic``),
        without renaming it to ``path``: a recording that ended early. Returns that path."""
        self._finish(stats)
        return self.partial_path

    def discard(self) -> None:
        """Close the log and remove the file being written (nothing worth keeping)."""
        self._finish(None)
        try:
            os.remove(self.partial_path)
        except FileNotFoundError:
            pass

    def __enter__(self) -> JointLogWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:  # never rename a log cut short by an error: it stays under its partial name
            self.close_partial()


@dataclass
class JointLog:
    """A joint log read back: header fields, samples and the stats dict (empty if absent)."""

    url: str
    joints: list[str]
    samples: list[JointSample] = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    #: the last line, cut short (no newline, not a whole JSON object: the recorder lost
    #: power or the file was truncated) and left out: ``"<path>:<line>: ..."``; else None
    cut_last_line: str | None = None


def read_joint_log(path: str | os.PathLike) -> JointLog:
    """Read a joint log, checking every line against the format above.

    Each sample must have ``receipt_ns`` (an integer >= 0, never below the previous
    sample's) and ``position_rad``, ``velocity_rad_s``, ``effort_nm``: ``J`` finite numbers
    or ``null`` each, ``J`` the number of joints in the header.

    A last line cut short (without its newline, and not a whole JSON object: a recorder
    that lost power mid-line, a log truncated by a copy) is left out and said in
    :attr:`JointLog.cut_last_line`; the whole lines before it are the log.

    Raises:
        BridgeError: naming the file and line (and the field, what was expected and what was
            found) when a line is not UTF-8 text or not a JSON object, the header is missing,
            its schema is not 1 or its joints are not a list of names, or a sample is
            malformed.
        OSError: the file cannot be read.
    """
    log: JointLog | None = None
    last_receipt = -1
    cut: str | None = None
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            where = f"{os.fspath(path)}:{lineno}"
            whole = raw.endswith(b"\n")  # only the last line can lack it
            try:
                line = raw.decode("utf-8")
                obj = json.loads(line)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                if not whole and log is not None:
                    cut = (f"{where}: the last line is cut short ({len(raw)} bytes, no "
                           f"newline: the log was truncated or its recorder stopped "
                           f"mid-line); the {len(log.samples)} samples before it are read")
                    break
                if isinstance(exc, UnicodeDecodeError):
                    raise BridgeError(f"{where}: expected UTF-8 text, found byte "
                                      f"0x{raw[exc.start]:02x} at column {exc.start + 1} (the "
                                      f"log is damaged; record it again or cut the log before "
                                      f"this line)") from None
                raise BridgeError(f"{where}: expected a JSON object, found {exc}") from None
            if not isinstance(obj, dict):
                raise BridgeError(f"{where}: expected a JSON object, found "
                                  f"{type(obj).__name__}")
            kind = obj.get("kind")
            if log is None:
                schema = obj.get("schema")
                if kind == "header" and isinstance(schema, int) and schema > SCHEMA:
                    raise BridgeError(f"{where}: a joint log of schema {schema}, written by a "
                                      f"newer syncedge; this one reads schema {SCHEMA}: "
                                      f"upgrade syncedge to read it")
                if kind != "header" or obj.get("schema") != SCHEMA:
                    raise BridgeError(f"{where}: expected a header with schema {SCHEMA}, "
                                      f"found kind={kind!r} schema={obj.get('schema')!r}")
                joints = obj.get("joints")
                if not isinstance(joints, list) or not joints or \
                        not all(isinstance(j, str) for j in joints):
                    raise BridgeError(f"{where}: field 'joints': expected a list of joint "
                                      f"names, found {joints!r}")
                log = JointLog(url=str(obj.get("url", "")), joints=list(joints))
            elif kind == "sample":
                sample = _sample(obj, len(log.joints), last_receipt, where)
                last_receipt = sample.receipt_ns
                log.samples.append(sample)
            elif kind == "stats":
                log.stats = {k: v for k, v in obj.items() if k != "kind"}
            else:
                raise BridgeError(f"{where}: expected kind 'sample' or 'stats', "
                                  f"found {kind!r}")
    if log is None:
        raise BridgeError(f"{path}: expected a joint log header, found an empty file")
    log.cut_last_line = cut
    return log


#: The per-joint arrays of a sample line.
_ARRAYS = ("position_rad", "velocity_rad_s", "effort_nm")
#: A sample line's integer fields and their lowest allowed value (-1: none recorded).
_INTEGERS = {"device_counter": -1, "device_stamp_ns": -1, "status": 0, "missed": 0,
             "request_ns": -1}
_ALL_STATUS = int(functools.reduce(operator.or_, Status))
#: Every key a sample line may hold (:meth:`edge.joints.JointSample.to_record`).
_SAMPLE_KEYS = frozenset(("kind", "receipt_ns", "fault", "pings", *_ARRAYS, *_INTEGERS))


def _sample(obj: dict, joints: int, last_receipt: int, where: str) -> JointSample:
    """Check one sample line against the header's ``joints`` and build the sample.

    Raises:
        BridgeError: ``where`` (file:line), the field, what was expected and what was found.
    """
    receipt = obj.get("receipt_ns")
    if not isinstance(receipt, int) or isinstance(receipt, bool) or receipt < 0:
        raise BridgeError(f"{where}: field 'receipt_ns': expected an integer >= 0, found "
                          f"{receipt!r}")
    if receipt < last_receipt:
        raise BridgeError(f"{where}: field 'receipt_ns': expected >= the previous sample's "
                          f"{last_receipt} (receipt stamps never step back), found {receipt}")
    for name in _ARRAYS:
        values = obj.get(name)
        if not isinstance(values, list):
            raise BridgeError(f"{where}: field {name!r}: expected a list of {joints} numbers "
                              f"(one per joint of the header), found {values!r}")
        if len(values) != joints:
            raise BridgeError(f"{where}: field {name!r}: expected {joints} values (one per "
                              f"joint of the header), found {len(values)}")
        for j, v in enumerate(values):
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise BridgeError(f"{where}: field {name!r}[{j}]: expected a finite number or "
                                  f"null (unknown), found {v!r}")
    for name, low in _INTEGERS.items():
        v = obj.get(name, low)
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise BridgeError(f"{where}: field {name!r}: expected an integer >= {low}"
                              f"{' (-1: none)' if low < 0 else ''}, found {v!r}")
    status = obj.get("status", 0)
    if status & ~_ALL_STATUS:
        raise BridgeError(f"{where}: field 'status': expected a combination of the flags "
                          f"{', '.join(f'{f.name}={f.value}' for f in Status if f.value)} "
                          f"(0: OK), found {status}")
    if not isinstance(obj.get("fault", ""), str):
        raise BridgeError(f"{where}: field 'fault': expected a string, found "
                          f"{obj.get('fault')!r}")
    unknown = sorted(set(obj) - _SAMPLE_KEYS)
    if unknown:
        raise BridgeError(f"{where}: unknown field {unknown[0]!r}: expected only "
                          f"{', '.join(sorted(_SAMPLE_KEYS))}")
    try:
        return JointSample.from_record(obj)
    except (TimebaseError, TypeError, ValueError) as exc:
        raise BridgeError(f"{where}: expected a joint sample, found {exc}") from None
