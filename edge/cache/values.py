"""Value types and errors of the calibration cache (see :mod:`edge.cache.store`).

Every error derives from :class:`CacheError` (an :class:`edge.errors.EdgeError`), so the
CLI prints it as one line and exits 2. Messages name the subject (a key, a file), what was
expected and what was found.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from edge.episode import Episode
from edge.errors import EdgeError

__all__ = [
    "BLOB_ROLES",
    "CONTEXT_FORMATS",
    "CacheArchiveError",
    "CacheConflictError",
    "CacheCorruptError",
    "CacheError",
    "CacheIndexError",
    "CacheKey",
    "CacheKeyError",
    "CacheReadOnlyError",
    "CacheValueError",
    "Entry",
    "EntryInfo",
    "GcReport",
    "ID_MAX_CHARS",
    "check_id",
    "QuarantineRecord",
    "RebuildReport",
]

#: The blobs an entry refers to, in the order they are written.
BLOB_ROLES = ("episode", "report", "reference", "context")
#: How a context blob is encoded: a float32 ``.npy`` array (exported ONNX models) or a
#: chain calibration file (the chain model).
CONTEXT_FORMATS = ("npy", "chain")

_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
ID_MAX_CHARS = 200
_BAD_ID_CHARS = re.compile(r"[/\x00-\x1f\x7f]")


class CacheError(EdgeError):
    """Base class of every calibration-cache error."""


class CacheKeyError(CacheError, ValueError):
    """A key is malformed, unknown, or a key prefix matches several entries."""


class CacheValueError(CacheError, ValueError):
    """A value given to :meth:`CalibrationCache.put` has the wrong type, dtype or shape."""


class CacheConflictError(CacheError):
    """An import would replace an existing entry, or an export an existing file, and
    replacing was not asked for."""


class CacheIndexError(CacheError):
    """The SQLite index cannot be opened or read (not a database, newer schema)."""


class CacheReadOnlyError(CacheError):
    """A write (store, import, remove, gc, rebuild) was asked of a cache whose folder this
    process cannot write (a read-only mount, or its permissions); reads still work."""


class CacheArchiveError(CacheError, ValueError):
    """An exported archive is malformed, incomplete or altered (checksum mismatch)."""


class CacheCorruptError(CacheError):
    """A stored entry failed verification and was quarantined; it was not used.

    Attributes:
        key: the entry's key, or ``None`` when the index row itself was unreadable.
        role: ``"episode"``, ``"report"``, ``"reference"``, ``"context"`` or ``"row"``.
        file: the blob file concerned (before it was moved to quarantine), or ``None``.
    """

    def __init__(self, message: str, *, key: CacheKey | None, role: str,
                 file: object = None):
        super().__init__(message)
        self.key = key
        self.role = role
        self.file = file


def check_id(name: str, value: object) -> str:
    """``value`` as a cell, camera or robot id of a :class:`CacheKey` (``name`` for the
    message).

    Raises:
        CacheKeyError: an empty id, one longer than :data:`ID_MAX_CHARS` or holding ``/`` or
            control characters.
    """
    if not isinstance(value, str) or not value:
        raise CacheKeyError(f"key field {name}: expected a non-empty string, found {value!r}")
    if len(value) > ID_MAX_CHARS or _BAD_ID_CHARS.search(value):
        raise CacheKeyError(
            f"key field {name}: expected at most {ID_MAX_CHARS} printable characters without '/', "
            f"found {value!r}")
    return value


@dataclass(frozen=True, order=True)
class CacheKey:
    """Identity of a cache entry: one calibration of one cell, camera and robot unit, for one
    model (``model_sha256``: the sha256 of the model's ``model.json``, 64 lowercase hex
    digits; see :func:`edge.manifest.model_sha256`).

    The text form (CLI, messages) is ``CELL/CAMERA/ROBOT/MODEL_SHA256``.

    Raises:
        CacheKeyError: for an empty id, an id containing ``/`` or control characters, or a
            model sha256 that is not 64 lowercase hex digits.
    """

    cell_id: str
    camera_id: str
    robot_id: str
    model_sha256: str

    def __post_init__(self) -> None:
        check_id("cell_id", self.cell_id)
        check_id("camera_id", self.camera_id)
        check_id("robot_id", self.robot_id)
        if not isinstance(self.model_sha256, str) or not _SHA_RE.match(self.model_sha256):
            raise CacheKeyError(f"key field model_sha256: expected 64 lowercase hex digits, "
                                f"found {self.model_sha256!r}")

    def __str__(self) -> str:
        return f"{self.cell_id}/{self.camera_id}/{self.robot_id}/{self.model_sha256}"

    @property
    def short(self) -> str:
        """The text form with the model sha256 cut to 12 digits (for tables and logs)."""
        return f"{self.cell_id}/{self.camera_id}/{self.robot_id}/{self.model_sha256[:12]}"

    def to_json_dict(self) -> dict[str, str]:
        """The four fields as a JSON object."""
        return {"cell_id": self.cell_id, "camera_id": self.camera_id,
                "robot_id": self.robot_id, "model_sha256": self.model_sha256}

    @classmethod
    def from_json_dict(cls, d: Any, where: str = "key") -> CacheKey:
        """Build a key from :meth:`to_json_dict`'s output.

        Raises:
            CacheKeyError: naming ``where`` for a missing, unknown or malformed field.
        """
        fields = ("cell_id", "camera_id", "robot_id", "model_sha256")
        if not isinstance(d, Mapping) or set(d) != set(fields):
            found = sorted(d) if isinstance(d, Mapping) else type(d).__name__
            raise CacheKeyError(f"{where}: expected an object with keys {list(fields)}, "
                                f"found {found}")
        return cls(*(d[f] for f in fields))


@dataclass(frozen=True)
class EntryInfo:
    """One index row: what an entry holds, without reading its blobs.

    Attributes:
        key: the entry's key.
        episode_sha256, report_sha256, reference_sha256: blob names (sha256 of the bytes).
        context_sha256: the context blob, or ``None`` once evicted (or never stored).
        episode_bytes, report_bytes, reference_bytes, context_bytes: blob sizes in bytes
            (``context_bytes`` is 0 without a context).
        context_shape: shape of the float32 context (``()`` without a context, and for a
            chain calibration).
        reference_shape: ``(H, W, 3)`` of the uint8 reference frame.
        episode_digest: sha256 of the episode's arrays and metadata (independent of the
            file's zip timestamps); used to store an episode once for every model.
        created_s, last_used_s: Unix times in seconds (wall clock).
        context_evicted_s: Unix time the context was evicted by the size cap, or ``None``.
        forced: stored although its coverage check failed.
        forced_reason: why it was forced (empty unless ``forced``).
        context_format: how the context blob is encoded (:data:`CONTEXT_FORMATS`):
            ``"npy"``, a float32 ``.npy`` array (an exported ONNX model's context);
            ``"chain"``, a chain calibration file (the chain model's,
            :func:`edge.runtime.chain.chain_bytes`).
    """

    key: CacheKey
    episode_sha256: str
    episode_bytes: int
    report_sha256: str
    report_bytes: int
    reference_sha256: str
    reference_bytes: int
    reference_shape: tuple[int, ...]
    context_sha256: str | None
    context_bytes: int
    context_shape: tuple[int, ...]
    episode_digest: str
    created_s: float
    last_used_s: float
    context_evicted_s: float | None
    forced: bool
    forced_reason: str
    context_format: str = "npy"

    @property
    def total_bytes(self) -> int:
        """Bytes of every blob the entry refers to (shared blobs counted in full)."""
        return self.episode_bytes + self.report_bytes + self.reference_bytes + self.context_bytes

    def blobs(self) -> dict[str, str]:
        """``{role: sha256}`` for each blob the entry refers to."""
        out = {"episode": self.episode_sha256, "report": self.report_sha256,
               "reference": self.reference_sha256}
        if self.context_sha256 is not None:
            out["context"] = self.context_sha256
        return out

    @property
    def flags(self) -> tuple[str, ...]:
        """Short flags for tables: ``forced``, ``evicted`` (context evicted),
        ``no-context`` (stored without one)."""
        out = []
        if self.forced:
            out.append("forced")
        if self.context_sha256 is None:
            out.append("evicted" if self.context_evicted_s is not None else "no-context")
        return tuple(out)


@dataclass(frozen=True)
class Entry:
    """A verified entry with its data loaded.

    Attributes:
        info: the index row.
        episode: the calibration episode (validated on load).
        context: float32 array of ``info.context_shape`` (for the reference model
            ``[K, D, h, w]``), or an :class:`edge.runtime.chain.ChainCalibration` (the
            chain model's entries, ``info.context_format == "chain"``), or ``None`` when
            evicted: re-encode it from ``episode``.
        report: the coverage report (a JSON object).
        reference_frame: uint8 ``[H, W, 3]`` RGB frame for detecting a moved camera.
    """

    info: EntryInfo
    episode: Episode
    context: Any
    report: dict[str, Any]
    reference_frame: np.ndarray

    @property
    def key(self) -> CacheKey:
        """The entry's key."""
        return self.info.key


@dataclass(frozen=True)
class QuarantineRecord:
    """A corrupt blob or index row moved out of use.

    Attributes:
        record_id: increasing number.
        time_s: Unix time of the quarantine, seconds.
        key: the affected entry's key, or ``None`` for an unreadable row.
        role: ``"episode"``, ``"report"``, ``"reference"``, ``"context"`` or ``"row"``.
        sha256: the blob's expected sha256, or ``""`` for a row.
        file: where the blob now lies under ``quarantine/`` (``""`` if it was missing).
        reason: what was wrong (expected and found).
        row_json: the index row as it was, JSON text (for diagnosis).
    """

    record_id: int
    time_s: float
    key: CacheKey | None
    role: str
    sha256: str
    file: str
    reason: str
    row_json: str


@dataclass(frozen=True)
class GcReport:
    """What :meth:`CalibrationCache.gc` did.

    Attributes:
        removed_blobs: sha256 names of unreferenced blobs deleted.
        freed_bytes: their total size in bytes.
        removed_temp_files: leftover temporary files of interrupted writes deleted.
        quarantine: every quarantine record (nothing is deleted from quarantine).
        integrity: result of SQLite's ``PRAGMA quick_check`` (``"ok"`` when sound).
    """

    removed_blobs: tuple[str, ...]
    freed_bytes: int
    removed_temp_files: tuple[str, ...]
    quarantine: tuple[QuarantineRecord, ...]
    integrity: str


@dataclass(frozen=True)
class RebuildReport:
    """What :func:`edge.cache.rebuild.rebuild_index` did.

    Attributes:
        restored: the keys of the entries in the new index, sorted.
        without_context: those among them whose context blob was missing or damaged (the
            entry keeps its episode: re-encode with ``syncedge calibrate store --cell``).
        skipped: ``(key text, reason)`` per entry that could not be restored (a damaged or
            missing episode, report or reference blob; an unreadable record).
        old_index: where the previous index file was moved (``None``: there was none, or
            it was healthy and rebuilt in place).
        sources: how many candidate rows came from the old index and from the records.
        in_place: the old index was healthy (SQLite opened and checked it), so its rows
            were replaced in place and nothing was quarantined.
        damage: why the old index was replaced (``""`` when rebuilt in place or absent).
    """

    restored: tuple[CacheKey, ...]
    without_context: tuple[CacheKey, ...]
    skipped: tuple[tuple[str, str], ...]
    old_index: str | None
    sources: Mapping[str, int]
    in_place: bool = False
    damage: str = ""
