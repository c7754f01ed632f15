"""Portable calibration archives: cache entries moved between devices as one file.

An archive is a zip file (stored, not compressed: the episode is compressed already)::

    calibration-archive.json   {"format", "schema_version", "blobs": {sha256: bytes},
                                "entries": [{"key", "blobs": {role: sha256},
                                             "context_shape", "context_format",
                                             "reference_shape", "created_s", "forced",
                                             "forced_reason"}]}
    blobs/<sha256>             one file per blob, named by the sha256 of its bytes

``context_format`` (``"npy"`` or ``"chain"``, as the index's) is in schema version 2; an
archive without chain calibrations is written as version 1 (no ``context_format``), which
every syncedge reads. Reading validates everything before anything is stored: strict manifest keys, the set of
blob files equals the manifest's, every blob's size and sha256, each key listed once, each
context in the format its key's model reads, and every decoded value (episode, context,
reference frame, report) as :meth:`CalibrationCache.put` would. The
checksums detect accidental or deliberate changes to the data; they do not say who made
the archive (it is not signed).
"""

from __future__ import annotations

import json
import math
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from edge.cache.blobs import (
    BlobFault,
    BlobStore,
    check_context,
    check_episode,
    check_reference,
    context_load,
    format_mismatch,
    npy_load,
    sha256_bytes,
)
from edge.cache.values import (
    BLOB_ROLES,
    CONTEXT_FORMATS,
    CacheArchiveError,
    CacheError,
    CacheKey,
    EntryInfo,
)
from edge.episode import Episode, load_episode
from edge.errors import EpisodeError
from edge.fileio import atomic_write

__all__ = ["ARCHIVE_FORMAT", "ARCHIVE_SCHEMA_VERSION", "ArchiveItem", "read_archive",
           "write_archive"]

ARCHIVE_FORMAT = "syncedge-calibration-archive"
ARCHIVE_SCHEMA_VERSION = 2  # the newest written and read; 1 is read too
MANIFEST_NAME = "calibration-archive.json"
_TOP_KEYS = {"format", "schema_version", "blobs", "entries"}
_ENTRY_KEYS = {"key", "blobs", "context_shape", "reference_shape", "created_s", "forced",
               "forced_reason"}  # version 1; version 2 adds "context_format"


@dataclass(frozen=True)
class ArchiveItem:
    """One validated entry read from an archive (the arguments of ``put``)."""

    key: CacheKey
    episode: Episode
    context: Any  # float32, shape as stored; or a ChainCalibration; or None
    report: dict[str, Any]
    reference_frame: np.ndarray  # (H, W, 3) uint8
    forced: bool
    forced_reason: str
    created_s: float


def write_archive(path: Path, entries: Sequence[tuple[EntryInfo, Mapping[str, bytes]]]) -> Path:
    """Write ``entries`` (index row, ``{role: verified blob bytes}``) atomically to ``path``."""
    blobs: dict[str, bytes] = {}
    listed = []
    for info, data in entries:
        roles = info.blobs()
        for role, sha in roles.items():
            blobs[sha] = data[role]
        listed.append({
            "key": info.key.to_json_dict(), "blobs": roles,
            "context_shape": list(info.context_shape) if info.context_sha256 else None,
            "reference_shape": list(info.reference_shape), "created_s": info.created_s,
            "forced": info.forced, "forced_reason": info.forced_reason,
            "context_format": info.context_format if info.context_sha256 else None})
    version = ARCHIVE_SCHEMA_VERSION if any(e["context_format"] not in (None, "npy")
                                            for e in listed) else 1
    if version == 1:
        for e in listed:
            del e["context_format"]
    manifest = {"format": ARCHIVE_FORMAT, "schema_version": version,
                "blobs": {sha: len(b) for sha, b in sorted(blobs.items())}, "entries": listed}
    text = json.dumps(manifest, indent=2, sort_keys=True, allow_nan=False).encode()

    def write(f: IO[bytes]) -> None:
        with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as zf:
            zf.writestr(MANIFEST_NAME, text)
            for sha, b in sorted(blobs.items()):
                zf.writestr(f"blobs/{sha}", b)

    return atomic_write(path, write)


def _fail(path: Path, msg: str) -> CacheArchiveError:
    return CacheArchiveError(f"calibration archive {path}: {msg}")


def _shape(path: Path, where: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(n, int) and n >= 0 for n in value):
        raise _fail(path, f"{where}: expected a list of sizes, found {value!r}")
    return tuple(value)


def read_archive(path: Path, store: BlobStore) -> list[ArchiveItem]:
    """Read and validate every entry of the archive at ``path``.

    ``store`` provides a staging folder for the episode files (their validation reads a
    file); nothing is added to the store.

    Raises:
        CacheArchiveError: naming the archive, the member or field, expected and found.
    """
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            if MANIFEST_NAME not in names:
                raise _fail(path, f"expected a member {MANIFEST_NAME}, found "
                                  f"{sorted(names)[:5]}")
            manifest = _manifest(path, zf.read(MANIFEST_NAME))
            expected = {MANIFEST_NAME} | {f"blobs/{sha}" for sha in manifest["blobs"]}
            if names != expected:
                extra, missing = sorted(names - expected), sorted(expected - names)
                raise _fail(path, f"expected exactly the blobs listed in {MANIFEST_NAME}, "
                                  f"found extra {extra} and missing {missing}")
            data: dict[str, bytes] = {}
            for sha, size in manifest["blobs"].items():
                member = f"blobs/{sha}"
                b = zf.read(member)
                if len(b) != size or sha256_bytes(b) != sha:
                    raise _fail(path, f"member {member}: expected {size} bytes with that "
                                      f"sha256, found {len(b)} bytes with sha256 "
                                      f"{sha256_bytes(b)[:16]}... (altered)")
                data[sha] = b
    except CacheArchiveError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, KeyError) as exc:
        raise _fail(path, f"expected a readable zip archive, found a corrupt, truncated or "
                          f"altered file ({type(exc).__name__}: {exc})") from None
    _refuse_duplicate_keys(path, manifest["entries"])
    return [_item(path, i, e, data, store, manifest["schema_version"])
            for i, e in enumerate(manifest["entries"])]


def _refuse_duplicate_keys(path: Path, entries: list[Any]) -> None:
    """Refuse an archive listing one key twice (which copy would win is not the
    archive's to decide), before anything is decoded or stored."""
    seen: dict[CacheKey, int] = {}
    for i, e in enumerate(entries):
        try:
            key = CacheKey.from_json_dict(e.get("key") if isinstance(e, dict) else None)
        except CacheError:
            continue  # _item names the malformed key
        if key in seen:
            raise _fail(path, f"{MANIFEST_NAME}:entries[{seen[key]}] and entries[{i}]: "
                              f"expected each key once, found {key} twice; nothing was "
                              f"imported: export the entries again (one archive holds one "
                              f"entry per key)")
        seen[key] = i


def _manifest(path: Path, raw: bytes) -> dict[str, Any]:
    try:
        m = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise _fail(path, f"{MANIFEST_NAME}: expected strict JSON, found: {exc}") from None
    if not isinstance(m, dict) or set(m) != _TOP_KEYS:
        found = sorted(m) if isinstance(m, dict) else type(m).__name__
        raise _fail(path, f"{MANIFEST_NAME}: expected keys {sorted(_TOP_KEYS)}, found {found}")
    if m["format"] != ARCHIVE_FORMAT:
        raise _fail(path, f"{MANIFEST_NAME}:format: expected {ARCHIVE_FORMAT!r}, "
                          f"found {m['format']!r}")
    if m["schema_version"] not in (1, ARCHIVE_SCHEMA_VERSION):
        raise _fail(path, f"{MANIFEST_NAME}:schema_version: expected 1 or "
                          f"{ARCHIVE_SCHEMA_VERSION}, found {m['schema_version']!r}; a newer "
                          "archive needs a newer syncedge")
    blobs = m["blobs"]
    if not isinstance(blobs, dict) or not all(
            isinstance(s, str) and len(s) == 64 and all(c in "0123456789abcdef" for c in s)
            and isinstance(n, int) and n >= 0 for s, n in blobs.items()):
        raise _fail(path, f"{MANIFEST_NAME}:blobs: expected {{sha256: byte count}}")
    if not isinstance(m["entries"], list) or not m["entries"]:
        raise _fail(path, f"{MANIFEST_NAME}:entries: expected a non-empty list")
    return m


def _item(path: Path, i: int, e: Any, data: Mapping[str, bytes], store: BlobStore,
          version: int = ARCHIVE_SCHEMA_VERSION) -> ArchiveItem:
    where = f"{MANIFEST_NAME}:entries[{i}]"
    keys = _ENTRY_KEYS | ({"context_format"} if version >= 2 else set())
    if not isinstance(e, dict) or set(e) != keys:
        found = sorted(e) if isinstance(e, dict) else type(e).__name__
        raise _fail(path, f"{where}: expected keys {sorted(keys)}, found {found}")
    fmt = e.get("context_format") or "npy"
    if fmt not in CONTEXT_FORMATS:
        raise _fail(path, f"{where}.context_format: expected one of "
                          f"{list(CONTEXT_FORMATS)}, found {fmt!r}")
    try:
        key = CacheKey.from_json_dict(e["key"], f"{where}.key")
    except CacheError as exc:
        raise _fail(path, str(exc)) from None
    roles = e["blobs"]
    needed = set(BLOB_ROLES) - ({"context"} if e["context_shape"] is None else set())
    if not isinstance(roles, dict) or set(roles) != needed or not all(
            r in data for r in roles.values()):
        raise _fail(path, f"{where}.blobs: expected {sorted(needed)} naming listed blobs, "
                          f"found {roles!r}")
    if e["context_shape"] is not None:
        why = format_mismatch(key, fmt)
        if why is not None:
            raise _fail(path, f"member blobs/{roles['context']} ({where}.context_format, "
                              f"the context of {key.short}): {why}; nothing was imported: "
                              f"export the entry again from the cache that made it")
    if not isinstance(e["forced"], bool) or not isinstance(e["forced_reason"], str):
        raise _fail(path, f"{where}: expected forced (bool) and forced_reason (text)")
    created = e["created_s"]
    if not isinstance(created, (int, float)) or not math.isfinite(created):
        raise _fail(path, f"{where}.created_s: expected seconds, found {created!r}")
    try:
        ctx = None
        if e["context_shape"] is not None:
            ctx = context_load(data[roles["context"]], fmt,
                               _shape(path, f"{where}.context_shape", e["context_shape"]),
                               "chain calibration")
            check_context(ctx, key)
        ref = npy_load(data[roles["reference"]], np.uint8,
                       _shape(path, f"{where}.reference_shape", e["reference_shape"]))
        check_reference(ref, key)
        report = json.loads(data[roles["report"]])
        if not isinstance(report, dict):
            raise BlobFault(f"report: expected a JSON object, found {type(report).__name__}")
        staged = store.tmp_path(".npz")
        try:
            staged.write_bytes(data[roles["episode"]])
            episode = check_episode(load_episode(staged), key)
        finally:
            staged.unlink(missing_ok=True)
    except CacheArchiveError:
        raise
    except (BlobFault, CacheError, EpisodeError, ValueError) as exc:
        raise _fail(path, f"{where} ({key.short}): {exc}") from None
    return ArchiveItem(key, episode, ctx, report, ref, e["forced"], e["forced_reason"],
                       float(created))
