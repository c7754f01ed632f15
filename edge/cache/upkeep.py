"""Upkeep of the calibration cache: LRU eviction of contexts, deleting unreferenced
blobs, and garbage collection.

Blob files are deleted only while holding the index's write lock, after checking that no
row refers to them. :meth:`CalibrationCache.put` checks, under the same lock, that every
blob it is about to reference exists (writing it again if not), so a blob reused by a
concurrent put is never lost to a deletion.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path

from edge.cache import index as ix
from edge.cache.blobs import BlobStore
from edge.cache.values import CacheKey, GcReport

__all__ = ["collect_garbage", "evict_over_cap", "unlink_unreferenced"]

log = logging.getLogger("edge.cache.store")


def evict_over_cap(conn: sqlite3.Connection, cap: int, protect: CacheKey) -> list[str]:
    """Inside a write transaction: drop least recently used contexts (never ``protect``'s)
    until the referenced bytes fit ``cap``; return the evicted context blob names."""
    total = ix.total_bytes(conn)
    evicted: list[str] = []
    if total <= cap:
        return evicted
    rows = conn.execute("SELECT rowid, * FROM entries WHERE context_sha256 IS NOT NULL "
                        "ORDER BY last_used_s, created_s").fetchall()
    for row in rows:
        if total <= cap:
            break
        if ix.key_params(protect) == tuple(row[c] for c in ("cell_id", "camera_id",
                                                            "robot_id", "model_sha256")):
            continue
        conn.execute("UPDATE entries SET context_sha256 = NULL, context_bytes = NULL, "
                     "context_shape = NULL, context_format = NULL, context_evicted_s = ? WHERE rowid = ?",
                     (time.time(), row["rowid"]))
        evicted.append(row["context_sha256"])
        total = ix.total_bytes(conn)
        log.info("calibration cache: evicted the context of %s/%s/%s/%s (size cap %d bytes)",
                 row["cell_id"], row["camera_id"], row["robot_id"],
                 str(row["model_sha256"])[:12], cap)
    return evicted


def unlink_unreferenced(conn: sqlite3.Connection, blobs: BlobStore,
                        shas: Iterable[object]) -> int:
    """Delete the blobs among ``shas`` that no row refers to, under the write lock; return
    the bytes freed."""
    todo = sorted({s for s in shas if isinstance(s, str) and s})
    freed = 0
    if todo:
        with ix.write_transaction(conn):
            for sha in todo:
                if not ix.is_referenced(conn, sha):
                    freed += blobs.unlink(sha)
    return freed


def collect_garbage(conn: sqlite3.Connection, blobs: BlobStore, grace_s: float) -> GcReport:
    """See :meth:`CalibrationCache.gc`."""
    integrity = str(conn.execute("PRAGMA quick_check").fetchone()[0])
    now = time.time()
    named: list[str] = []  # blobs
    temps: list[Path] = []  # leftovers of interrupted writes, anything not named like a blob
    for sha, path, mtime in blobs.scan():
        if now - mtime < grace_s:
            continue
        if sha:
            named.append(sha)
        else:
            temps.append(path)
    removed: list[str] = []
    freed = 0
    if named:
        with ix.write_transaction(conn):
            for sha in named:
                if not ix.is_referenced(conn, sha):
                    freed += blobs.unlink(sha)
                    removed.append(sha)
    removed_tmp: list[str] = []
    for path in temps:
        try:
            if path.is_dir():
                path.rmdir()
            else:
                path.unlink()
            removed_tmp.append(str(path))
        except OSError:
            continue
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.OperationalError:
        pass  # busy: a later checkpoint will do it
    return GcReport(tuple(removed), freed, tuple(removed_tmp),
                    tuple(ix.quarantine_records(conn)), integrity)
