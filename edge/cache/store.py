"""The calibration cache: one cell's calibration, per model, ready for the rollout.

Layout under the root (by default ``state_root()/calibration``; see
docs/calibration-cache.md)::

    ROOT/index.sqlite3        SQLite index in WAL mode (one row per key)
    ROOT/blobs/ab/cdef...     content-addressed blobs (file name = sha256 of its bytes)
    ROOT/entries/             one JSON record per entry, a copy of its index row
                              (edge/cache/records.py): 'syncedge cache rebuild' rebuilds
                              the index from them and the blobs
    ROOT/quarantine/          corrupt blobs moved out of use
    ROOT/tmp/                 episode files being staged

Key: :class:`~edge.cache.values.CacheKey` (cell, camera, robot, model sha256). An entry
holds the calibration episode (one blob per episode, shared by every model's entry), the
float32 context that model made from it, the coverage report (JSON) and a uint8 reference
frame. Guarantees:

- Writes are atomic: blobs first (temporary file, fsync, rename), then the index row in one
  short transaction; a writer killed at any point leaves either the old entry or the new
  one, and at worst unreferenced blobs that :meth:`CalibrationCache.gc` deletes.
- Two processes may use one root at once (WAL, busy timeout, ``BEGIN IMMEDIATE``).
- Every read verifies the sha256 of each blob it uses. A corrupt blob or index row is moved
  to quarantine, recorded, and :class:`~edge.cache.values.CacheCorruptError` is raised:
  corrupt data is never returned. A corrupt context only drops the context (the entry keeps
  its episode, so the caller re-encodes); any other corruption removes the entry.
- With ``size_cap_bytes``, least recently used contexts are evicted (never episodes,
  reports or reference frames); :meth:`CalibrationCache.get_context` then returns ``None``
  and the caller re-encodes from the episode and stores the context again.
"""

from __future__ import annotations

import builtins
import dataclasses
import logging
import os
import sqlite3
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edge.cache import index as ix
from edge.cache.blobs import (
    BlobStore,
    check_context,
    check_episode,
    check_reference,
    check_report,
    context_bytes,
    episode_digest,
    npy_bytes,
)
from edge.cache.records import remove_record, write_record
from edge.cache.upkeep import collect_garbage, evict_over_cap, unlink_unreferenced
from edge.cache.values import (
    CacheConflictError,
    CacheCorruptError,
    CacheError,
    CacheKey,
    CacheKeyError,
    CacheReadOnlyError,
    CacheValueError,
    Entry,
    EntryInfo,
    GcReport,
    QuarantineRecord,
)
from edge.cache.verify import Fault, decode, parse_row, quarantine_blob
from edge.episode import Episode, save_episode

__all__ = ["CalibrationCache", "check_writable", "default_root"]

log = logging.getLogger(__name__)

_RETRIES = 3  # re-reads when a concurrent writer changed the row under a read


def check_writable(root: str | os.PathLike[str], what: str) -> None:
    """Refuse, before any work and without creating anything, ``what`` (``"storing a
    calibration"``) on a cache root this process cannot write: the folder itself, or where
    it does not exist yet, the nearest folder above it that does.

    Raises:
        CacheReadOnlyError: naming the folder and what to do.
    """
    folder = Path(root)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if folder.is_dir() and not ix.folder_writable(folder):
        raise ix.read_only_error(folder, what)


def default_root() -> Path:
    """``state_root()/calibration`` (not created)."""
    from edge.state import state_root

    return state_root() / "calibration"


class CalibrationCache:
    """A calibration cache rooted at one folder (created if missing).

    Args:
        root: the cache root folder.
        size_cap_bytes: when set, after each :meth:`put` the least recently used contexts
            are evicted until the bytes of all referenced blobs fit (the context just stored
            is kept; episodes, reports and reference frames are never evicted, so they may
            exceed the cap on their own).
        busy_timeout_s: how long to wait for another process's write transaction.
        touch_interval_s: ``last_used`` is rewritten on a read only when it is older than
            this, so a hot read path does not write to the index every time.

    Raises:
        CacheIndexError: the index is unreadable or from a newer syncedge.
        CacheReadOnlyError: ``root`` does not exist and cannot be created.

    A root this process cannot write (a read-only mount, or its permissions;
    :func:`edge.cache.index.folder_writable`) is opened read-only (:attr:`read_only`):
    reads work, ``last_used_s`` is not refreshed, a corrupt blob or row is reported but
    not moved to quarantine, and every write raises
    :class:`~edge.cache.values.CacheReadOnlyError` naming the folder.

    One instance holds one SQLite connection; use it from one thread (open another
    instance per thread or process). Close it with :meth:`close` or a ``with`` block.
    """

    def __init__(self, root: str | os.PathLike[str], size_cap_bytes: int | None = None, *,
                 busy_timeout_s: float = 10.0, touch_interval_s: float = 10.0):
        if size_cap_bytes is not None and size_cap_bytes < 0:
            raise CacheValueError(f"size_cap_bytes: expected >= 0 or None, found {size_cap_bytes}")
        self.root = Path(root)
        self.size_cap_bytes = size_cap_bytes
        self.touch_interval_s = touch_interval_s
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CacheReadOnlyError(
                f"calibration cache folder {self.root}: no such folder, and it cannot be "
                f"created ({exc.strerror or exc}); expected an existing cache folder, or "
                f"one in a writable folder (--cache-dir DIR)") from None
        #: the folder cannot be written: reads only (see the class docstring)
        self.read_only = not ix.folder_writable(self.root)
        self.blobs = BlobStore(self.root, create=not self.read_only)
        self._conn = (ix.connect_read_only(self.root) if self.read_only
                      else ix.connect(self.root, busy_timeout_s))

    def require_writable(self, what: str) -> None:
        """Refuse, before any work, ``what`` (``"storing a calibration"``) on a read-only
        cache.

        Raises:
            CacheReadOnlyError: naming the folder and what to do.
        """
        if self.read_only:
            raise ix.read_only_error(self.root, what)

    def close(self) -> None:
        """Close the index connection."""
        self._conn.close()

    def __enter__(self) -> CalibrationCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- writing

    def put(self, key: CacheKey, episode: Episode | str | os.PathLike[str],
            context: np.ndarray | None, report: Mapping[str, Any],
            reference_frame: np.ndarray, *, forced: bool = False,
            forced_reason: str = "") -> Entry:
        """Store (or replace) the entry of ``key``.

        Args:
            key: cell, camera, robot and model sha256.
            episode: the calibration episode, or the path of its episode file; its
                ``metadata.kind`` must be ``"calibration"`` and its cell, camera and robot
                ids must equal the key's.
            context: float32, the model's calibration output (reference model
                ``[K, D, h, w]``), finite; or the chain model's
                :class:`edge.runtime.chain.ChainCalibration`; ``None`` to store the entry
                without one.
            report: the coverage report, a strict-JSON object.
            reference_frame: uint8 ``[H, W, 3]`` RGB, the camera's view at calibration.
            forced: the episode failed its coverage check and is stored anyway.
            forced_reason: why (required, non-empty, when ``forced``).

        Returns:
            The stored entry (with the arrays given).
        Raises:
            CacheValueError, EpisodeError: an argument fails validation (nothing written).
            CacheIndexError / OSError: the index or the file system failed.
        """
        return self._put(key, episode, context, report, reference_frame, forced,
                         forced_reason, None)

    def _put(self, key: CacheKey, episode: Episode | str | os.PathLike[str],
             context: np.ndarray | None, report: Mapping[str, Any],
             reference_frame: np.ndarray, forced: bool, forced_reason: str,
             created_s: float | None) -> Entry:
        self.require_writable("storing a calibration")
        if not isinstance(key, CacheKey):
            raise CacheValueError(f"key: expected a CacheKey, found {type(key).__name__}")
        ep = check_episode(episode, key)
        ctx = check_context(context, key)
        ref = check_reference(reference_frame, key)
        report_data = check_report(report, key)
        if forced and not (isinstance(forced_reason, str) and forced_reason.strip()):
            raise CacheValueError(f"entry {key.short}: forced=True needs a forced_reason (why "
                                  f"the failed check is overridden), found {forced_reason!r}")
        digest = episode_digest(ep)
        ep_sha, ep_size = self._store_episode(ep, digest)
        datas = {"report": report_data, "reference": npy_bytes(ref)}
        ctx_shape: tuple[int, ...] = ()
        ctx_format = "npy"
        if ctx is not None:
            datas["context"], ctx_shape, ctx_format = context_bytes(ctx)
        shas = {role: self.blobs.write(data) for role, data in datas.items()}
        now = time.time()
        info = EntryInfo(
            key=key, episode_sha256=ep_sha, episode_bytes=ep_size,
            report_sha256=shas["report"][0], report_bytes=shas["report"][1],
            reference_sha256=shas["reference"][0], reference_bytes=shas["reference"][1],
            reference_shape=tuple(ref.shape),
            context_sha256=shas["context"][0] if ctx is not None else None,
            context_bytes=shas["context"][1] if ctx is not None else 0,
            context_shape=ctx_shape, context_format=ctx_format,
            episode_digest=digest, created_s=now if created_s is None else created_s,
            last_used_s=now, context_evicted_s=None, forced=bool(forced),
            forced_reason=forced_reason if forced else "")
        with ix.write_transaction(self._conn):
            # A blob reused above may have been deleted since (gc, eviction, replacement):
            # under the write lock nothing can delete it any more, so make sure it is there.
            if not self.blobs.exists(info.episode_sha256):
                sha, size = self._save_episode_blob(ep)
                info = dataclasses.replace(info, episode_sha256=sha, episode_bytes=size)
            for role, data in datas.items():
                if not self.blobs.exists(shas[role][0]):
                    self.blobs.write(data)
            old = ix.select_row(self._conn, key)
            ix.upsert_entry(self._conn, info)
            evicted = self._evict_over_cap(key)
        # the record after the commit: a writer killed before it leaves no record of an
        # entry that was never committed (a missing or older record only makes 'cache
        # rebuild' verify its blobs and skip what is gone)
        write_record(self.root, info)
        stale = list(evicted)
        if old is not None:
            stale += [old[f"{r}_sha256"] for r in ("episode", "report", "reference", "context")]
        self._unlink_unreferenced(stale)
        return Entry(info, ep, ctx, dict(report), ref)

    def _save_episode_blob(self, ep: Episode) -> tuple[str, int]:
        staged = self.blobs.tmp_path(".npz")
        try:
            save_episode(ep, staged)
            return self.blobs.adopt(staged)
        finally:
            staged.unlink(missing_ok=True)

    def _store_episode(self, ep: Episode, digest: str) -> tuple[str, int]:
        """Reuse the blob of an identical episode already stored, else write one."""
        for row in self._conn.execute(
                "SELECT DISTINCT episode_sha256, episode_bytes FROM entries "
                "WHERE episode_digest = ?", (digest,)):
            sha, size = row[0], row[1]
            if isinstance(sha, str) and len(sha) == 64 and self.blobs.keep(sha):
                return sha, int(size)
        return self._save_episode_blob(ep)

    def _evict_over_cap(self, protect: CacheKey) -> list[str]:
        if self.size_cap_bytes is None:
            return []
        return evict_over_cap(self._conn, self.size_cap_bytes, protect)

    def _unlink_unreferenced(self, shas: Iterable[object]) -> int:
        return unlink_unreferenced(self._conn, self.blobs, shas)

    def remove(self, key: CacheKey) -> bool:
        """Delete the entry of ``key`` and the blobs no other entry uses.

        Returns:
            Whether there was such an entry.
        Raises:
            CacheReadOnlyError: the cache folder is read-only.
        """
        self.require_writable("removing an entry")
        with ix.write_transaction(self._conn):
            row = ix.select_row(self._conn, key)
            if row is None:
                return False
            ix.delete_entry(self._conn, key)
        remove_record(self.root, key)
        self._unlink_unreferenced(row[f"{r}_sha256"] for r in
                                  ("episode", "report", "reference", "context"))
        return True

    # ----------------------------------------------------------------- reading

    def get(self, key: CacheKey) -> Entry | None:
        """The entry of ``key`` with every blob verified and decoded, or ``None``.

        The context is ``None`` when it was evicted (re-encode it from ``entry.episode``).

        Raises:
            CacheCorruptError: a blob or the row failed verification; it was quarantined
                (see the class docstring) and nothing of it is returned.
        """
        for _ in range(_RETRIES):
            row = ix.select_row(self._conn, key)
            if row is None:
                return None
            info = self._parse_row(row)
            try:
                entry = self._load(info)
            except Fault as fault:
                self._on_fault(info, fault)
                continue
            self._touch(info)
            return entry
        raise CacheError(f"calibration cache entry {key}: expected a stable index row, found "
                         f"it changing on each of {_RETRIES} reads; try again")

    def get_context(self, cell_id: str, camera_id: str, robot_id: str,
                    model_sha256: str) -> Any:
        """The stored context for this cell, camera, robot and model: the rollout's fast
        path (one index lookup, one small file read, one sha256).

        Returns:
            float32 array in the shape it was stored (reference model ``[K, D, h, w]``), a
            :class:`edge.runtime.chain.ChainCalibration` for a chain entry, or ``None``
            when there is no entry or its context was evicted: re-encode then.
        Raises:
            CacheKeyError: a malformed id or model sha256.
            CacheCorruptError: the context blob or the row failed verification; it was
                quarantined and dropped, so the next call returns ``None``.
        """
        key = CacheKey(cell_id, camera_id, robot_id, model_sha256)
        for _ in range(_RETRIES):
            row = ix.select_row(self._conn, key)
            if row is None:
                return None
            info = self._parse_row(row)
            if info.context_sha256 is None:
                return None
            try:
                arr = decode(self.blobs, "context", info)
            except Fault as fault:
                self._on_fault(info, fault)
                continue
            self._touch(info)
            return arr
        raise CacheError(f"calibration cache entry {key}: expected a stable index row, found "
                         f"it changing on each of {_RETRIES} reads; try again")

    def info(self, key: CacheKey) -> EntryInfo | None:
        """The index row of ``key`` (no blob is read), or ``None``.

        Raises:
            CacheCorruptError: the row is malformed (it was quarantined).
        """
        row = ix.select_row(self._conn, key)
        return None if row is None else self._parse_row(row)

    def list(self, cell_id: str | None = None, camera_id: str | None = None,
             robot_id: str | None = None, model_prefix: str | None = None) -> list[EntryInfo]:
        """Index rows, sorted by key, optionally filtered (``model_prefix``: the start of
        the model sha256). No blob is read. A malformed row is quarantined, logged and left
        out (see :meth:`quarantine`)."""
        out = []
        for row in self._conn.execute("SELECT rowid, * FROM entries ORDER BY cell_id, "
                                      "camera_id, robot_id, model_sha256").fetchall():
            try:
                info = self._parse_row(row)
            except CacheCorruptError as exc:
                log.warning("%s", exc)
                continue
            k = info.key
            if ((cell_id is None or k.cell_id == cell_id)
                    and (camera_id is None or k.camera_id == camera_id)
                    and (robot_id is None or k.robot_id == robot_id)
                    and (model_prefix is None or k.model_sha256.startswith(model_prefix))):
                out.append(info)
        return out

    def find(self, text: str) -> CacheKey:
        """Resolve ``CELL/CAMERA/ROBOT/MODEL`` where MODEL is the model sha256 or a prefix of
        at least 4 hex digits.

        Raises:
            CacheKeyError: malformed text, no matching entry, or several (listing them).
        """
        parts = text.split("/")
        if len(parts) != 4 or not all(parts) or len(parts[3]) < 4:
            raise CacheKeyError(f"key {text!r}: expected CELL/CAMERA/ROBOT/MODEL_SHA256 (the "
                                f"model sha256 or at least its first 4 hex digits)")
        hits = [i.key for i in self.list(parts[0], parts[1], parts[2],
                                         model_prefix=parts[3].lower())]
        if not hits:
            raise CacheKeyError(f"key {text!r}: expected a cached entry, found none "
                                f"(see: syncedge cache list)")
        if len(hits) > 1:
            raise CacheKeyError(f"key {text!r}: expected one entry, found {len(hits)}: "
                                + ", ".join(k.short for k in hits) + "; give more digits")
        return hits[0]

    def total_bytes(self) -> int:
        """Bytes of every distinct blob the index refers to."""
        return ix.total_bytes(self._conn)

    # (builtins.list: the method list() above shadows the builtin in this class body)
    def quarantine(self) -> builtins.list[QuarantineRecord]:
        """Every quarantine record, oldest first."""
        return ix.quarantine_records(self._conn)

    def _touch(self, info: EntryInfo) -> None:
        now = time.time()
        if self.read_only or now - info.last_used_s < self.touch_interval_s:
            return
        try:
            self._conn.execute(f"UPDATE entries SET last_used_s = ? WHERE {ix.KEY_WHERE} "
                               "AND last_used_s < ?", (now, *ix.key_params(info.key), now))
        except sqlite3.OperationalError as exc:  # LRU order only: never fail a read on it
            log.warning("calibration cache %s: last-used time of %s not updated (%s)",
                        self.root, info.key.short, exc)

    def _load(self, info: EntryInfo) -> Entry:
        b = self.blobs
        ctx = decode(b, "context", info) if info.context_sha256 else None
        return Entry(info, decode(b, "episode", info), ctx, decode(b, "report", info),
                     decode(b, "reference", info))

    def _parse_row(self, row: sqlite3.Row) -> EntryInfo:
        return parse_row(self._conn, self.root, row)

    def _on_fault(self, info: EntryInfo, fault: Fault) -> None:
        quarantine_blob(self._conn, self.blobs, info, fault)

    # ------------------------------------------------------------------ upkeep

    def gc(self, grace_s: float = 3600.0) -> GcReport:
        """Delete blobs no entry refers to and leftover temporary files, when older than
        ``grace_s`` seconds (so a write in progress in another process is not disturbed);
        check the index (``PRAGMA quick_check``); report the quarantine (kept for
        inspection: nothing under ``quarantine/`` is deleted).

        Raises:
            CacheReadOnlyError: the cache folder is read-only.
        """
        self.require_writable("cache gc")
        return collect_garbage(self._conn, self.blobs, grace_s)

    # ---------------------------------------------------------------- archives

    def export(self, keys: CacheKey | Iterable[CacheKey], path: str | os.PathLike[str], *,
               overwrite: bool = False) -> Path:
        """Write the entries of ``keys`` (verified first; each once) to one portable
        archive file, atomically.

        Args:
            keys: the entries to write.
            path: the archive file; an existing file there is refused unless ``overwrite``.
            overwrite: replace an existing file at ``path``.

        Raises:
            CacheConflictError: ``path`` exists and ``overwrite`` is false (checked first;
            nothing written). CacheKeyError: a key has no entry. CacheCorruptError: an
            entry failed verification (quarantined; nothing written).
        """
        from edge.cache.archive import write_archive

        out = Path(path)
        if out.is_dir():
            raise CacheConflictError(f"export: {out} is a folder; expected an archive file "
                                     f"path (e.g. {out / 'calibration.zip'})")
        if out.exists() and not overwrite:
            raise CacheConflictError(
                f"export: {out} already exists; expected a new archive path (nothing was "
                f"written): choose another path or remove the file, or replace it with "
                f"overwrite=True ('syncedge cache export --overwrite')")
        keys = [keys] if isinstance(keys, CacheKey) else list(dict.fromkeys(keys))
        entries = []
        for key in keys:
            if self.get(key) is None:
                raise CacheKeyError(f"export: expected an entry for {key}, found none")
            info = self.info(key)
            assert info is not None
            entries.append((info, {role: self.blobs.read(sha) for role, sha in
                                   info.blobs().items()}))
        return write_archive(Path(path), entries)

    def import_(self, path: str | os.PathLike[str], *,
                replace: bool = False) -> builtins.list[CacheKey]:
        """Validate every entry of an archive made by :meth:`export`, then store them.

        Raises:
            CacheArchiveError: malformed, incomplete or altered archive, a key listed
                twice, or a context whose format is not the one its key's model reads
                (nothing stored).
            CacheConflictError: an entry exists and ``replace`` is false (nothing stored).
            CacheReadOnlyError: the cache folder is read-only (checked first).
        """
        from edge.cache.archive import read_archive

        self.require_writable("importing an archive")
        items = read_archive(Path(path), self.blobs)
        clash = [it.key for it in items if not replace and self.info(it.key) is not None]
        if clash:
            raise CacheConflictError(
                f"{path}: expected new entries, found {len(clash)} already cached ("
                + ", ".join(k.short for k in clash) + "); import again with --replace to "
                "replace them ('syncedge cache import --replace')")
        for it in items:
            self._put(it.key, it.episode, it.context, it.report, it.reference_frame,
                      it.forced, it.forced_reason, it.created_s)
        return [it.key for it in items]
