"""Entry records of the calibration cache: a copy of each index row beside the blobs.

``ROOT/entries/<sha256 of the key text>.json`` holds, for every entry, the same columns as
its index row (key, blob names, sizes, shapes, times, forced flag) as strict JSON::

    {"schema_version": 1, "entry": {"cell_id": ..., "episode_sha256": ..., ...}}

:class:`~edge.cache.store.CalibrationCache` writes the record (atomically: temporary
file, fsync, rename) right after the row's transaction commits, and deletes it when the
entry is removed or quarantined. The index stays the source of truth; a record may lag it
(a writer killed between the commit and the record, a context evicted or dropped since),
which is why :func:`edge.cache.rebuild.rebuild_index`, which rebuilds the index from the
records when it is lost or corrupt, verifies every blob a record names before restoring
it. ``gc`` deletes blobs no index row refers to: after losing the index, rebuild it before
running ``gc``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from edge.cache.index import info_to_row
from edge.cache.values import CacheKey, EntryInfo
from edge.fileio import write_json_atomic

__all__ = ["RECORDS_DIR", "RECORD_SCHEMA_VERSION", "read_records", "record_path",
           "remove_record", "write_record"]

RECORDS_DIR = "entries"
#: Version of the record layout; newer records are reported, not read.
RECORD_SCHEMA_VERSION = 1


def record_path(root: Path, key: CacheKey) -> Path:
    """``ROOT/entries/<sha256 of CELL/CAMERA/ROBOT/MODEL>.json``."""
    text = f"{key.cell_id}/{key.camera_id}/{key.robot_id}/{key.model_sha256}"
    return root / RECORDS_DIR / f"{hashlib.sha256(text.encode()).hexdigest()}.json"


def write_record(root: Path, info: EntryInfo) -> Path:
    """Write (or replace) the record of ``info.key`` atomically; returns its path."""
    return write_json_atomic(record_path(root, info.key),
                             {"schema_version": RECORD_SCHEMA_VERSION,
                              "entry": info_to_row(info)})


def remove_record(root: Path, key: CacheKey) -> None:
    """Delete the record of ``key`` (nothing when there is none)."""
    record_path(root, key).unlink(missing_ok=True)


def read_records(root: Path) -> list[tuple[Path, dict[str, Any] | None, str]]:
    """Every record under ``ROOT/entries``: ``(path, row, "")`` for a readable one (``row``
    has the index columns), ``(path, None, why)`` for one that is not."""
    out: list[tuple[Path, dict[str, Any] | None, str]] = []
    folder = root / RECORDS_DIR
    if not folder.is_dir():
        return out
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            out.append((path, None, f"unreadable record ({exc})"))
            continue
        if not isinstance(data, dict) or not isinstance(data.get("entry"), dict):
            out.append((path, None, "expected an object with 'entry', found something else"))
            continue
        version = data.get("schema_version")
        if version != RECORD_SCHEMA_VERSION:
            out.append((path, None, f"record schema version {version!r}; this syncedge "
                                    f"reads {RECORD_SCHEMA_VERSION}"))
            continue
        out.append((path, data["entry"], ""))
    return out
