"""The SQLite index of the calibration cache: schema, connection settings and row codecs.

The index is ``ROOT/index.sqlite3`` in WAL mode (readers never block the writer and the
writer never blocks readers), ``synchronous=FULL`` (a committed entry survives a power
cut), and a busy timeout so that two processes wait for each other's short write
transactions instead of failing. Write transactions start with ``BEGIN IMMEDIATE`` so the
write lock is taken up front and a transaction never has to be retried halfway.

A cache folder this process cannot write (a read-only mount, or its permissions) is opened
read-only (:func:`connect_read_only`): SQLite cannot create the ``-shm`` file a WAL index
needs beside it there, so the index is opened as immutable when no un-merged ``-wal``
file is left, and every write is refused with :class:`CacheReadOnlyError`.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from edge.cache.values import (
    CONTEXT_FORMATS,
    CacheIndexError,
    CacheKey,
    CacheKeyError,
    CacheReadOnlyError,
    EntryInfo,
    QuarantineRecord,
)

__all__ = [
    "INDEX_NAME",
    "INDEX_SCHEMA_VERSION",
    "KEY_WHERE",
    "add_quarantine",
    "connect",
    "connect_read_only",
    "delete_entry",
    "folder_writable",
    "info_to_row",
    "is_read_only",
    "is_referenced",
    "key_params",
    "quarantine_records",
    "read_only_error",
    "read_only_uri",
    "row_json",
    "row_to_info",
    "select_row",
    "total_bytes",
    "upsert_entry",
    "write_transaction",
]

INDEX_NAME = "index.sqlite3"
#: Version of the index layout. An index from a newer version is refused; an index of
#: version 1 (no ``context_format`` column: every context a float32 array) is upgraded in
#: place when opened.
INDEX_SCHEMA_VERSION = 2

_SHA_RE = re.compile(r"^[0-9a-f]{64}$")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    cell_id TEXT NOT NULL, camera_id TEXT NOT NULL, robot_id TEXT NOT NULL,
    model_sha256 TEXT NOT NULL,
    episode_sha256 TEXT, episode_bytes INTEGER, episode_digest TEXT,
    report_sha256 TEXT, report_bytes INTEGER,
    reference_sha256 TEXT, reference_bytes INTEGER, reference_shape TEXT,
    context_sha256 TEXT, context_bytes INTEGER, context_shape TEXT, context_format TEXT,
    created_s REAL, last_used_s REAL, context_evicted_s REAL,
    forced INTEGER, forced_reason TEXT,
    PRIMARY KEY (cell_id, camera_id, robot_id, model_sha256)
);
CREATE INDEX IF NOT EXISTS entries_episode ON entries (episode_sha256);
CREATE INDEX IF NOT EXISTS entries_digest ON entries (episode_digest);
CREATE INDEX IF NOT EXISTS entries_context ON entries (context_sha256);
CREATE INDEX IF NOT EXISTS entries_lru ON entries (last_used_s);
CREATE TABLE IF NOT EXISTS quarantine (
    record_id INTEGER PRIMARY KEY AUTOINCREMENT, time_s REAL NOT NULL,
    key_json TEXT, role TEXT NOT NULL, sha256 TEXT NOT NULL, file TEXT NOT NULL,
    reason TEXT NOT NULL, row_json TEXT NOT NULL
);
"""

_COLUMNS = ("cell_id", "camera_id", "robot_id", "model_sha256",
            "episode_sha256", "episode_bytes", "episode_digest",
            "report_sha256", "report_bytes",
            "reference_sha256", "reference_bytes", "reference_shape",
            "context_sha256", "context_bytes", "context_shape", "context_format",
            "created_s", "last_used_s", "context_evicted_s", "forced", "forced_reason")


def _create_tables(conn: sqlite3.Connection) -> None:
    """Create the index's tables where missing (:data:`_SCHEMA`)."""
    for stmt in filter(str.strip, _SCHEMA.split(";")):
        conn.execute(stmt)


def connect(root: Path, busy_timeout_s: float) -> sqlite3.Connection:
    """Open (creating if needed) the index under ``root`` with the settings above.

    Raises:
        CacheIndexError: the file is not a SQLite database, or was written by a newer
            syncedge (naming the file, the versions and the fix).
    """
    path = root / INDEX_NAME
    try:
        conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise CacheIndexError(f"{path}: expected journal mode WAL, found {mode!r} (the "
                                  f"file system may not support shared memory)")
        conn.execute("PRAGMA synchronous = FULL")
        with write_transaction(conn):
            _create_tables(conn)
            row = conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
            if row is None:
                conn.execute("INSERT INTO meta VALUES ('schema_version', ?)",
                             (str(INDEX_SCHEMA_VERSION),))
                version = INDEX_SCHEMA_VERSION
            else:
                version = int(row[0])
            if version < INDEX_SCHEMA_VERSION:
                _upgrade(conn, version)
                version = INDEX_SCHEMA_VERSION
    except sqlite3.DatabaseError as exc:
        raise _unreadable(path, root, exc) from None
    if version > INDEX_SCHEMA_VERSION:
        conn.close()
        raise _newer(path, version)
    return conn


def _unreadable(path: Path, root: Path, exc: Exception,
                read_only: bool = False) -> CacheIndexError:
    where = (" where its folder is writable (this one is read-only)" if read_only else "")
    return CacheIndexError(
        f"{path}: expected a calibration-cache index (SQLite), found an unreadable file "
        f"({exc}); rebuild it from the blobs with 'syncedge cache rebuild --root "
        f"{root}'{where} (or import entries again from exported archives)")


def _newer(path: Path, version: int) -> CacheIndexError:
    return CacheIndexError(f"{path}: index schema version {version} is newer than this "
                           f"syncedge reads ({INDEX_SCHEMA_VERSION}); upgrade syncedge")


def folder_writable(root: Path) -> bool:
    """Whether this process can write the cache folder ``root`` and its index file (both
    must be writable for SQLite to keep the index's ``-wal`` and ``-shm`` files beside
    it). ``False`` on a read-only mount, or where permissions forbid it."""
    index = root / INDEX_NAME
    return os.access(root, os.W_OK | os.X_OK) and (
        not index.exists() or os.access(index, os.R_OK | os.W_OK))


def read_only_error(root: Path, what: str) -> CacheReadOnlyError:
    """The error for a write (``what``: ``"storing a calibration"``, ``"cache gc"``) asked
    of the read-only cache folder ``root``: names the folder and what to do."""
    return CacheReadOnlyError(
        f"calibration cache folder {root} is read-only (this process cannot write it: a "
        f"read-only mount or its permissions), so {what} cannot be done; make the folder "
        f"writable (mount it read-write, or give this user write permission), or use a "
        f"writable cache folder with --cache-dir DIR (copy the entries there with "
        f"'syncedge cache export' and 'syncedge cache import --root DIR'); reading the "
        f"cache (list, show, simulate --cell) works as it is")


def read_only_uri(path: Path, immutable: bool = False) -> str:
    """The SQLite URI opening the index file ``path`` read-only (``immutable``: without
    the ``-shm`` file, for a folder where it cannot be created; only when no ``-wal``
    content is left to merge)."""
    return path.resolve().as_uri() + "?mode=ro" + ("&immutable=1" if immutable else "")


def connect_read_only(root: Path) -> sqlite3.Connection:
    """Open the index under the read-only folder ``root`` for reading only (``PRAGMA
    query_only``; :func:`is_read_only` is true for it). A folder without an index (or with
    an empty index file) reads as an empty cache.

    Raises:
        CacheIndexError: the file is not a SQLite database, was written by a newer
            syncedge, or holds changes in its ``-wal`` file that cannot be read without
            creating the ``-shm`` file in this folder (naming the file and the fix).
    """
    path = root / INDEX_NAME
    wal = path.with_name(path.name + "-wal")
    pending = wal.is_file() and wal.stat().st_size > 0
    if not path.exists() or (path.stat().st_size == 0 and not pending):  # nothing cached
        conn = sqlite3.connect(":memory:", isolation_level=None)
        conn.row_factory = sqlite3.Row
        _create_tables(conn)
        conn.execute("INSERT INTO meta VALUES ('schema_version', ?)",
                     (str(INDEX_SCHEMA_VERSION),))
        conn.execute("PRAGMA query_only = ON")
        return conn
    try:
        conn = sqlite3.connect(read_only_uri(path, immutable=not pending), uri=True,
                               isolation_level=None)
    except sqlite3.Error as exc:
        if pending:
            raise _pending_wal(path, wal, exc) from None
        raise _unreadable(path, root, exc, read_only=True) from None
    conn.row_factory = sqlite3.Row
    try:
        conn.execute("PRAGMA query_only = ON")
        row = conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
        conn.execute("SELECT 1 FROM entries LIMIT 1").fetchall()
        version = INDEX_SCHEMA_VERSION if row is None else int(row[0])
    except sqlite3.Error as exc:
        conn.close()
        if pending and "unable to open" in str(exc):
            raise _pending_wal(path, wal, exc) from None
        raise _unreadable(path, root, exc, read_only=True) from None
    if version > INDEX_SCHEMA_VERSION:
        conn.close()
        raise _newer(path, version)
    return conn


def _pending_wal(path: Path, wal: Path, exc: Exception) -> CacheIndexError:
    return CacheIndexError(
        f"{path}: the index has changes in {wal.name} not yet merged into it, and in this "
        f"read-only folder SQLite cannot create {path.name}-shm to read them ({exc}); open "
        f"the cache once where its folder is writable (any 'syncedge cache list --root "
        f"{path.parent}' merges them), then use it read-only again")


def is_read_only(conn: sqlite3.Connection) -> bool:
    """Whether ``conn`` was opened by :func:`connect_read_only` (it refuses every write)."""
    return bool(conn.execute("PRAGMA query_only").fetchone()[0])


def _upgrade(conn: sqlite3.Connection, version: int) -> None:
    """Upgrade an index of an older schema version in place (inside the write transaction
    of :func:`connect`): version 1 gains ``context_format`` (its contexts are all
    ``"npy"``, which a NULL reads as)."""
    columns = {r[1] for r in conn.execute("PRAGMA table_info(entries)")}
    if "context_format" not in columns:
        conn.execute("ALTER TABLE entries ADD COLUMN context_format TEXT")
    conn.execute("UPDATE meta SET value = ? WHERE name = 'schema_version'",
                 (str(INDEX_SCHEMA_VERSION),))


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``; rolls back on any exception."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _shape(text: Any, what: str) -> tuple[int, ...]:
    try:
        shape = json.loads(text)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected a JSON list of sizes, found {text!r}") from None
    if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise ValueError(f"{what}: expected a JSON list of sizes, found {text!r}")
    return tuple(shape)


def _sha(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _SHA_RE.match(value):
        raise ValueError(f"{what}: expected 64 hex digits, found {value!r}")
    return value


def _size(value: Any, what: str) -> int:
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"{what}: expected a byte count, found {value!r}")
    return value


def _time(value: Any, what: str, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if not isinstance(value, (int, float)) or value != value:
        raise ValueError(f"{what}: expected a time in seconds, found {value!r}")
    return float(value)


def row_to_info(row: sqlite3.Row) -> EntryInfo:
    """Parse and check one ``entries`` row.

    Raises:
        ValueError: naming the column, what was expected and what was found.
    """
    try:
        key = CacheKey(row["cell_id"], row["camera_id"], row["robot_id"], row["model_sha256"])
    except CacheKeyError as exc:
        raise ValueError(str(exc)) from None
    ctx_sha = row["context_sha256"]
    ctx_format = "npy"
    if ctx_sha is None:
        ctx_shape: tuple[int, ...] = ()
        ctx_bytes = 0
    else:
        ctx_sha = _sha(ctx_sha, "context_sha256")
        ctx_shape = _shape(row["context_shape"], "context_shape")
        ctx_bytes = _size(row["context_bytes"], "context_bytes")
        # rows of version 1 (and records written by it) have no context_format: "npy"
        found = row["context_format"] if "context_format" in row.keys() else None
        ctx_format = "npy" if found is None else found
        if ctx_format not in CONTEXT_FORMATS:
            raise ValueError(f"context_format: expected one of {list(CONTEXT_FORMATS)}, "
                             f"found {found!r}")
        if ctx_format == "chain" and ctx_shape:
            raise ValueError(f"context_shape: expected [] for a chain calibration, found "
                             f"{list(ctx_shape)}")
    ref_shape = _shape(row["reference_shape"], "reference_shape")
    if len(ref_shape) != 3 or ref_shape[2] != 3:
        raise ValueError(f"reference_shape: expected [H, W, 3], found {list(ref_shape)}")
    forced = row["forced"]
    if forced not in (0, 1):
        raise ValueError(f"forced: expected 0 or 1, found {forced!r}")
    reason = row["forced_reason"]
    if not isinstance(reason, str):
        raise ValueError(f"forced_reason: expected text, found {reason!r}")
    return EntryInfo(
        key=key,
        episode_sha256=_sha(row["episode_sha256"], "episode_sha256"),
        episode_bytes=_size(row["episode_bytes"], "episode_bytes"),
        report_sha256=_sha(row["report_sha256"], "report_sha256"),
        report_bytes=_size(row["report_bytes"], "report_bytes"),
        reference_sha256=_sha(row["reference_sha256"], "reference_sha256"),
        reference_bytes=_size(row["reference_bytes"], "reference_bytes"),
        reference_shape=ref_shape,
        context_sha256=ctx_sha,
        context_bytes=ctx_bytes,
        context_shape=ctx_shape,
        episode_digest=_sha(row["episode_digest"], "episode_digest"),
        created_s=_time(row["created_s"], "created_s"),  # type: ignore[arg-type]
        last_used_s=_time(row["last_used_s"], "last_used_s"),  # type: ignore[arg-type]
        context_evicted_s=_time(row["context_evicted_s"], "context_evicted_s", optional=True),
        forced=bool(forced),
        forced_reason=reason,
        context_format=ctx_format,
    )


def info_to_row(info: EntryInfo) -> dict[str, Any]:
    """The ``entries`` columns of ``info``."""
    return {
        **info.key.to_json_dict(),
        "episode_sha256": info.episode_sha256, "episode_bytes": info.episode_bytes,
        "episode_digest": info.episode_digest,
        "report_sha256": info.report_sha256, "report_bytes": info.report_bytes,
        "reference_sha256": info.reference_sha256, "reference_bytes": info.reference_bytes,
        "reference_shape": json.dumps(list(info.reference_shape)),
        "context_sha256": info.context_sha256,
        "context_bytes": info.context_bytes if info.context_sha256 else None,
        "context_shape": json.dumps(list(info.context_shape)) if info.context_sha256 else None,
        "context_format": info.context_format if info.context_sha256 else None,
        "created_s": info.created_s, "last_used_s": info.last_used_s,
        "context_evicted_s": info.context_evicted_s,
        "forced": int(info.forced), "forced_reason": info.forced_reason,
    }


KEY_WHERE = "cell_id = ? AND camera_id = ? AND robot_id = ? AND model_sha256 = ?"


def key_params(key: CacheKey) -> tuple[str, str, str, str]:
    """The key as parameters for ``KEY_WHERE``."""
    return (key.cell_id, key.camera_id, key.robot_id, key.model_sha256)


def select_row(conn: sqlite3.Connection, key: CacheKey) -> sqlite3.Row | None:
    """The raw row of ``key`` (with its ``rowid``), or ``None``."""
    return conn.execute(f"SELECT rowid, * FROM entries WHERE {KEY_WHERE}",
                        key_params(key)).fetchone()


def upsert_entry(conn: sqlite3.Connection, info: EntryInfo) -> None:
    """Insert or replace the row of ``info.key`` (inside a write transaction)."""
    row = info_to_row(info)
    cols = ", ".join(_COLUMNS)
    marks = ", ".join(f":{c}" for c in _COLUMNS)
    conn.execute(f"INSERT OR REPLACE INTO entries ({cols}) VALUES ({marks})", row)


def delete_entry(conn: sqlite3.Connection, key: CacheKey) -> bool:
    """Delete the row of ``key``; return whether there was one."""
    return conn.execute(f"DELETE FROM entries WHERE {KEY_WHERE}",
                        key_params(key)).rowcount > 0


def is_referenced(conn: sqlite3.Connection, sha: str) -> bool:
    """Whether any row refers to the blob ``sha`` in any role."""
    return conn.execute(
        "SELECT 1 FROM entries WHERE episode_sha256 = ?1 OR report_sha256 = ?1 "
        "OR reference_sha256 = ?1 OR context_sha256 = ?1 LIMIT 1", (sha,)).fetchone() is not None


def row_json(row: sqlite3.Row) -> str:
    """A row as JSON text (for quarantine records)."""
    return json.dumps({k: row[k] for k in row.keys() if k != "rowid"}, sort_keys=True,
                      default=repr)


def add_quarantine(conn: sqlite3.Connection, key: CacheKey | None, role: str, sha: str,
                   file: str, reason: str, row_text: str) -> None:
    """Record one quarantined blob or row (inside a write transaction)."""
    conn.execute(
        "INSERT INTO quarantine (time_s, key_json, role, sha256, file, reason, row_json) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (time.time(), json.dumps(key.to_json_dict()) if key else None, role, sha, file,
         reason, row_text))


def quarantine_records(conn: sqlite3.Connection) -> list[QuarantineRecord]:
    """Every quarantine record, oldest first."""
    out = []
    for r in conn.execute("SELECT * FROM quarantine ORDER BY record_id"):
        try:
            key = CacheKey.from_json_dict(json.loads(r["key_json"])) if r["key_json"] else None
        except (ValueError, CacheKeyError):
            key = None
        out.append(QuarantineRecord(r["record_id"], r["time_s"], key, r["role"], r["sha256"],
                                    r["file"], r["reason"], r["row_json"]))
    return out


def total_bytes(conn: sqlite3.Connection) -> int:
    """Bytes of every distinct blob referenced by the index."""
    row = conn.execute(
        "SELECT COALESCE(SUM(n), 0) FROM ("
        " SELECT episode_sha256 AS s, episode_bytes AS n FROM entries"
        " UNION SELECT report_sha256, report_bytes FROM entries"
        " UNION SELECT reference_sha256, reference_bytes FROM entries"
        " UNION SELECT context_sha256, context_bytes FROM entries"
        "  WHERE context_sha256 IS NOT NULL)").fetchone()
    return int(row[0])
