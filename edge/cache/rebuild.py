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
3. The new index is written under ``ROOT/tmp/`` and moved into place; the old index file
   (and its ``-wal``/``-shm`` files) goes to ``ROOT/quarantine/index-<time>.sqlite3``.
   Records are rewritten for the restored entries (a cache from before records existed
   gets them from its readable rows).

Quarantine records of the old index are not carried over (the quarantined files stay under
``ROOT/quarantine/``). Other processes must not use the cache while it is rebuilt.
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
from edge.cache.values import CacheError, CacheKey, EntryInfo, RebuildReport
from edge.cache.verify import Fault, decode, key_or_none
from edge.fileio import fsync_dir

__all__ = ["rebuild_index"]

_SIDE_FILES = ("-wal", "-shm")


def _old_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of the old index that SQLite can still read (none if it does not open)."""
    if not path.is_file():
        return []
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
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
        What was restored, what was skipped and why, where the old index went.
    Raises:
        CacheError: ``root`` is not a calibration cache (no ``blobs/`` folder).
        CacheIndexError / OSError: the new index cannot be written.
    """
    root = Path(root)
    if not (root / "blobs").is_dir():
        raise CacheError(f"{root}: expected a calibration cache root (with blobs/), found "
                         f"{'no such folder' if not root.exists() else 'no blobs/ folder'}")
    blobs = BlobStore(root)
    index = root / ix.INDEX_NAME
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
                         moved, {"old_index_rows": len(old), "records": len(records)})
