"""Verified reads and quarantine for the calibration cache.

:func:`decode` reads one blob of an entry, checks its sha256 and size, and decodes it;
any problem raises :class:`Fault`. :func:`quarantine_blob` and :func:`parse_row` decide,
under the index's write lock, whether a fault is real (the row still refers to the blob and
it still fails) or a concurrent writer's change (the caller reads again), and for a real
one move the blob to ``quarantine/``, update the index, record it, and raise
:class:`~edge.cache.values.CacheCorruptError`.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from edge.cache import index as ix
from edge.cache.blobs import (
    BlobFault,
    BlobStore,
    check_episode,
    context_load,
    expected_context_format,
    format_mismatch,
    npy_load,
)
from edge.cache.records import remove_record
from edge.cache.values import CacheCorruptError, CacheError, CacheKey, CacheKeyError, EntryInfo
from edge.episode import load_episode

__all__ = ["Fault", "decode", "key_or_none", "parse_row", "quarantine_blob"]


class Fault(Exception):
    """One blob of an entry failed (``checksum``: missing, truncated or altered bytes;
    otherwise the bytes verify but do not decode to what the row says). ``row_only``: the
    blob is sound but this row may not use it (a context of a format its key's model does
    not read), so only this row loses it and the blob stays for the rows that may."""

    def __init__(self, role: str, sha: str, reason: str, checksum: bool,
                 row_only: bool = False):
        super().__init__(reason)
        self.role, self.sha, self.reason, self.checksum = role, sha, reason, checksum
        self.row_only = row_only


def key_or_none(row: sqlite3.Row) -> CacheKey | None:
    """The row's key, or ``None`` when its key columns are malformed."""
    try:
        return CacheKey(row["cell_id"], row["camera_id"], row["robot_id"], row["model_sha256"])
    except (CacheKeyError, IndexError):
        return None


def decode(blobs: BlobStore, role: str, info: EntryInfo) -> Any:
    """Read, verify and decode the ``role`` blob of ``info``.

    Returns:
        context: float32 array of ``info.context_shape`` (a chain calibration for
        ``info.context_format == "chain"``); reference: uint8 ``[H, W, 3]``;
        report: dict; episode: :class:`~edge.episode.Episode` (validated, ids match).
    Raises:
        Fault: the blob is missing, altered, truncated or does not decode.
    """
    sha = getattr(info, f"{role}_sha256")
    if role == "context":
        why = format_mismatch(info.key, info.context_format)
        if why is not None:
            raise Fault(role, sha, f"blob file {blobs.path(sha)}: {why}", checksum=False,
                        row_only=True)
    try:
        data = blobs.read(sha, getattr(info, f"{role}_bytes"))
    except BlobFault as exc:
        raise Fault(role, sha, str(exc), checksum=True) from None
    try:
        if role == "context":
            return context_load(data, info.context_format, info.context_shape,
                                "chain calibration")
        if role == "reference":
            return npy_load(data, np.uint8, info.reference_shape)
        if role == "report":
            report = json.loads(data)
            if not isinstance(report, dict):
                raise BlobFault(f"expected a JSON object, found {type(report).__name__}")
            return report
        return check_episode(load_episode(blobs.path(sha)), info.key)
    except (BlobFault, ValueError, CacheError) as exc:
        raise Fault(role, sha, f"blob file {blobs.path(sha)}: {exc}", checksum=False) from None


def parse_row(conn: sqlite3.Connection, root: Path, row: sqlite3.Row) -> EntryInfo:
    """Parse an ``entries`` row (selected with its ``rowid``); quarantine a malformed one.

    Raises:
        CacheCorruptError: the row is malformed; it was deleted and recorded.
    """
    try:
        return ix.row_to_info(row)
    except ValueError as exc:
        reason = f"index row {row['rowid']} is malformed: {exc}"
    if ix.is_read_only(conn):
        raise CacheCorruptError(
            f"calibration cache {root / ix.INDEX_NAME}: {reason}; expected a well-formed "
            f"entry; the cache folder is read-only, so the row was left as it is: store or "
            f"import the calibration again in a writable cache",
            key=key_or_none(row), role="row", file=root / ix.INDEX_NAME)
    with ix.write_transaction(conn):
        now = conn.execute("SELECT rowid, * FROM entries WHERE rowid = ?",
                           (row["rowid"],)).fetchone()
        if now is not None and ix.row_json(now) == ix.row_json(row):
            conn.execute("DELETE FROM entries WHERE rowid = ?", (row["rowid"],))
            k = key_or_none(row)
            if k is not None:
                remove_record(root, k)
            ix.add_quarantine(conn, key_or_none(row), "row", "", "", reason, ix.row_json(row))
    raise CacheCorruptError(
        f"calibration cache {root / ix.INDEX_NAME}: {reason}; expected a well-formed entry, "
        f"so the row was quarantined: store or import the calibration again",
        key=key_or_none(row), role="row", file=root / ix.INDEX_NAME)


def quarantine_blob(conn: sqlite3.Connection, blobs: BlobStore, info: EntryInfo,
                    fault: Fault) -> None:
    """Handle ``fault`` found while reading ``info``.

    Returns (so the caller reads again) when the row no longer refers to the blob or the
    blob verifies now (a concurrent writer changed or repaired it). Otherwise moves the blob
    to quarantine; every row using it loses its context (role ``context``) or is deleted
    (any other role); each is recorded; and raises. A ``row_only`` fault (a sound context
    blob of a format the key's model does not read) drops the context of this row alone
    and leaves the blob in place for the rows that may use it (``gc`` deletes it once no
    row refers to it). In a read-only cache nothing is moved or changed.

    Raises:
        CacheCorruptError: naming the key, the role, the file and what was wrong.
    """
    col = f"{fault.role}_sha256"
    path = blobs.path(fault.sha)
    if ix.is_read_only(conn):
        _raise(info.key, fault, "", path, read_only=blobs.root)
    if fault.row_only:
        with ix.write_transaction(conn):
            row = ix.select_row(conn, info.key)
            if row is None or row[col] != fault.sha or \
                    (row["context_format"] or "npy") != info.context_format:
                return
            conn.execute("UPDATE entries SET context_sha256 = NULL, context_bytes = NULL, "
                         "context_shape = NULL, context_format = NULL, "
                         "context_evicted_s = NULL WHERE rowid = ?", (row["rowid"],))
            ix.add_quarantine(conn, info.key, fault.role, fault.sha, "", fault.reason,
                              ix.row_json(row))
        _raise(info.key, fault, "", path)
    with ix.write_transaction(conn):
        row = ix.select_row(conn, info.key)
        if row is None or row[col] != fault.sha:
            return
        if fault.checksum:
            try:
                blobs.read(fault.sha, row[f"{fault.role}_bytes"])
                return
            except BlobFault:
                pass
        moved = blobs.quarantine(fault.sha)
        for r in conn.execute(f"SELECT rowid, * FROM entries WHERE {col} = ?",
                              (fault.sha,)).fetchall():
            if fault.role == "context":
                conn.execute("UPDATE entries SET context_sha256 = NULL, context_bytes = NULL, "
                             "context_shape = NULL, context_format = NULL, context_evicted_s = NULL WHERE rowid = ?",
                             (r["rowid"],))
            else:
                conn.execute("DELETE FROM entries WHERE rowid = ?", (r["rowid"],))
                k = key_or_none(r)
                if k is not None:
                    remove_record(blobs.root, k)
            ix.add_quarantine(conn, key_or_none(r), fault.role, fault.sha, moved, fault.reason,
                              ix.row_json(r))
    _raise(info.key, fault, moved, path)


def _raise(key: CacheKey, fault: Fault, moved: str, path: Path,
           read_only: Path | None = None) -> NoReturn:
    store = (f"'syncedge calibrate store --cell {key.cell_id} --camera-id {key.camera_id} "
             f"--robot-id {key.robot_id} "
             + ("--chain'" if expected_context_format(key) == "chain" else "--model DIR'"))
    if read_only is not None:
        done = (f"the cache folder {read_only} is read-only, so nothing was moved or "
                f"recorded; in a writable cache, "
                + (f"re-encode the context with {store}" if fault.role == "context" else
                   "store the calibration again or import it from an archive"))
    elif fault.row_only:
        done = ("the context was dropped from this entry and recorded in quarantine (the "
                "blob stays for the entries that may use it); the entry keeps its episode: "
                f"encode the context again with {store}")
    else:
        what = (f"the context was dropped: re-encode it from the cached calibration episode "
                f"({store})" if fault.role == "context" else
                "the entry was removed: store the calibration again or import it from an "
                "archive")
        done = (f"moved to {moved or 'nowhere (file missing)'} and recorded in quarantine; "
                f"{what}")
    what_failed = ("is not one its key's model reads" if fault.row_only else
                   "failed verification")
    raise CacheCorruptError(
        f"calibration cache entry {key}: {fault.role} blob {what_failed} "
        f"({fault.reason}); {done}", key=key, role=fault.role, file=path)
