"""Atomic file writes: a temporary file in the same directory, fsync, then rename.

A reader never sees a half-written file under the final name, and a failed write leaves
the previous file (if any) untouched and no temporary file behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_write", "file_digest", "fsync_dir", "sha256_file", "write_json_atomic"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike[str], write: Callable[[IO[bytes]], object],
                 mode: int = 0o666) -> Path:
    """Call ``write(f)`` on a temporary binary file, then move it over ``path``.

    Args:
        path: final file path; parent folders are created.
        write: writes the content to the open file object (its return value is ignored).
        mode: permission bits before the umask (default: like ``open``).

    Returns:
        The final path.
    Raises:
        OSError: from the file system; nothing is left under ``path`` or as a temporary.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode & ~_umask())
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write ``obj`` as indented, key-sorted strict JSON (no NaN), atomically."""
    text = json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n"
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def file_digest(path: str | os.PathLike[str]) -> tuple[str, int]:
    """Hex sha256 and size in bytes of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
            size += len(block)
    return h.hexdigest(), size


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file's bytes."""
    return file_digest(path)[0]


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory, so that a rename into it is durable (POSIX)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
