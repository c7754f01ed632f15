"""Rebuild the calibration cache's index from its entry records and blobs.

When ``ROOT/index.sqlite3`` is corrupt (not a database, a damaged page) or lost, every
calibration is unreachable although its blobs are intact. :func:`rebuild_index` (the
command ``syncedge cache rebuild``) makes a new index:

1. Candidates: every readable row of the old index (opened read-only, when it opens at
   all) and every entry record (``ROOT/entries/*.json``, :mod:`edge.cache.records`); per
   key the old row comes first (it is the newer: last use, eviction), then the record.
2. Each candidate is checked as a read would: its row must parse, and its episode,
   report and reference blobs must verify (sha256, size) and decode; a context that is
   missing or damaged is left out (the entry keeps its episode, so the context is encoded
   again with ``syncedge calibrate store --cell``). The first candidate that passes is
   restored; a key with none is skipped, with the reason.
3. A healthy old index (SQLite opens it, ``PRAGMA quick_check`` passes, its tables and
   schema version read) is rebuilt in place: in one transaction its rows are replaced by
   the restored ones (rows that failed are recorded in its quarantine table), and nothing
   is moved. Otherwise the new index is written under ``ROOT/tmp/`` and moved into place;
   the damaged index file (and its ``-wal``/``-shm`` files) goes to
   ``ROOT/quarantine/index-<time>.sqlite3``. Records are rewritten for the restored
   entries (a cache from before records existed gets them from its readable rows).

Quarantine records of a replaced index are not carried over (the quarantined files stay
under ``ROOT/quarantine/``). Other processes must not use the cache while it is rebuilt.
An index of a newer schema version is refused (upgrade syncedge), as is a read-only folder.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

from edge.cache import index as ix
from edge.cache.blobs import BlobStore
from edge.cache.records import read_records, write_record
from edge.cache.values import CacheError, CacheIndexError, CacheKey, EntryInfo, RebuildReport
from edge.cache.verify import Fault, decode, key_or_none
from edge.fileio import fsync_dir

__all__ = ["rebuild_index"]

_SIDE_FILES = ("-wal", "-shm")


def _health(path: Path) -> str | None:
    """Why the index file ``path`` is damaged, or ``None`` when it is healthy: SQLite
    opens it, ``PRAGMA quick_check`` says ``ok``, and its ``meta`` and ``entries`` tables
    and schema version read.

    Raises:
        CacheIndexError: a sound index of a newer schema version (a rebuild would drop
            what that version keeps: upgrade syncedge).
    """
    try:
        conn = sqlite3.connect(ix.read_only_uri(path), uri=True)
    except sqlite3.Error as exc:
        return f"SQLite cannot open it ({exc})"
    try:
        check = [r[0] for r in conn.execute("PRAGMA quick_check")]
        if check != ["ok"]:
            return "SQLite's quick check failed: " + "; ".join(map(str, check[:3]))
        row = conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
        conn.execute("SELECT * FROM entries LIMIT 1").fetchall()
        conn.execute("SELECT * FROM quarantine LIMIT 1").fetchall()
        version = int(row[0]) if row is not None else None
    except (sqlite3.Error, ValueError, TypeError) as exc:
        return f"SQLite cannot read it ({exc})"
    finally:
        conn.close()
    if version is None:
        return "it records no schema version"
    if version > ix.INDEX_SCHEMA_VERSION:
        raise CacheIndexError(f"{path}: index schema version {version} is newer than this "
                              f"syncedge reads ({ix.INDEX_SCHEMA_VERSION}); upgrade syncedge "
                              f"(a rebuild would drop what that version keeps)")
    return None


def _old_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of the old index that SQLite can still read (none if it does not open)."""
    if not path.is_file():
        return []
    try:
        conn = sqlite3.connect(ix.read_only_uri(path), uri=True)
    except sqlite3.Error:
        return []
    try:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("SELECT * FROM entries")]
    except sqlite3.Error:
        return []
    finally:
        conn.close()


def _verify(blobs: BlobStore, row: dict[str, Any]) -> tuple[EntryInfo, bool]:
    """Parse ``row`` and verify its blobs; returns the info (without a context when its
    blob fails) and whether the context was dropped.

    Raises:
        ValueError: a malformed row. Fault: a required blob fails.
    """
    import dataclasses

    info = ix.row_to_info(row)  # type: ignore[arg-type]  # a dict indexes like a Row
    for role in ("episode", "report", "reference"):
        decode(blobs, role, info)
    if info.context_sha256 is None:
        return info, False
    try:
        decode(blobs, "context", info)
        return info, False
    except Fault:
        return dataclasses.replace(info, context_sha256=None, context_bytes=0,
                                   context_shape=()), True


def rebuild_index(root: str | os.PathLike[str]) -> RebuildReport:
    """Rebuild ``ROOT/index.sqlite3`` from the old index's readable rows, the entry
    records and the blobs (see the module docstring).

    Returns:
        What was restored, what was skipped and why, whether the old index was healthy
        (rebuilt in place) or where it went.
    Raises:
        CacheError: ``root`` is not a calibration cache (no ``blobs/`` folder).
        CacheReadOnlyError: the cache folder is read-only.
        CacheIndexError: the old index is of a newer schema version; or, with OSError,
            the new index cannot be written.
    """
    root = Path(root)
    if not (root / "blobs").is_dir():
        raise CacheError(f"{root}: expected a calibration cache root (with blobs/), found "
                         f"{'no such folder' if not root.exists() else 'no blobs/ folder'}")
    if not ix.folder_writable(root):
        raise ix.read_only_error(root, "'syncedge cache rebuild'")
    blobs = BlobStore(root)
    index = root / ix.INDEX_NAME
    damage = _health(index) if index.is_file() else None
    candidates: dict[CacheKey, list[dict[str, Any]]] = {}
    skipped: list[tuple[str, str]] = []
    old = _old_rows(index)
    records = read_records(root)
    for row in old:
        key = key_or_none(row)  # type: ignore[arg-type]
        if key is not None:
            candidates.setdefault(key, []).append(row)
    for path, rec, why in records:
        key = key_or_none(rec) if rec is not None else None  # type: ignore[arg-type]
        if rec is None or key is None:
            skipped.append((str(path), why or "the record's key is malformed"))
            continue
        candidates.setdefault(key, []).append(rec)
    restored: list[EntryInfo] = []
    dropped: list[CacheKey] = []
    for key in sorted(candidates):
        reasons = []
        for row in candidates[key]:
            try:
                info, no_ctx = _verify(blobs, row)
            except ValueError as exc:
                reasons.append(f"malformed row ({exc})")
                continue
            except Fault as fault:
                reasons.append(f"{fault.role} blob failed verification ({fault.reason})")
                continue
            restored.append(info)
            if no_ctx:
                dropped.append(key)
            break
        else:
            skipped.append((key.short, "; ".join(dict.fromkeys(reasons))))
    sources = {"old_index_rows": len(old), "records": len(records)}
    if index.is_file() and damage is None:
        _rebuild_in_place(root, old, restored)
        for info in restored:
            write_record(root, info)
        return RebuildReport(tuple(i.key for i in restored), tuple(dropped), tuple(skipped),
                             None, sources, in_place=True)
    stage = root / "tmp" / f"rebuild-{uuid.uuid4().hex}"
    stage.mkdir(parents=True)
    try:
        conn = ix.connect(stage, busy_timeout_s=10.0)
        try:
            with ix.write_transaction(conn):
                for info in restored:
                    ix.upsert_entry(conn, info)
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("PRAGMA journal_mode = DELETE")  # one self-contained file to move
        finally:
            conn.close()
        moved = None
        if index.exists():
            dst = root / "quarantine" / f"index-{time.strftime('%Y%m%dT%H%M%S')}-" \
                f"{uuid.uuid4().hex[:8]}.sqlite3"
            os.replace(index, dst)
            moved = str(dst)
            for side in _SIDE_FILES:
                p = index.with_name(index.name + side)
                if p.exists():
                    os.replace(p, dst.with_name(dst.name + side))
        else:
            for side in _SIDE_FILES:
                index.with_name(index.name + side).unlink(missing_ok=True)
        os.replace(stage / ix.INDEX_NAME, index)
        fsync_dir(root)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    for info in restored:
        write_record(root, info)
    return RebuildReport(tuple(i.key for i in restored), tuple(dropped), tuple(skipped),
                         moved, sources, damage=damage or "")


def _rebuild_in_place(root: Path, old: list[dict[str, Any]],
                      restored: list[EntryInfo]) -> None:
    """Replace the rows of the healthy index under ``root`` by ``restored`` in one
    transaction; each old row not restored as it was (its blobs failed, or it did not
    parse) is recorded in the index's quarantine table with its content."""
    keep = {info.key for info in restored}
    conn = ix.connect(root, busy_timeout_s=10.0)
    try:
        with ix.write_transaction(conn):
            for row in old:
                key = key_or_none(row)  # type: ignore[arg-type]
                if key is not None and key in keep:
                    continue
                ix.add_quarantine(conn, key, "row", "", "",
                                  "left out by 'syncedge cache rebuild': its row or blobs "
                                  "failed verification", ix.row_json(row))  # type: ignore[arg-type]
            conn.execute("DELETE FROM entries")
            for info in restored:
                ix.upsert_entry(conn, info)
    finally:
        conn.close()
