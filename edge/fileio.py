"""Atomic file writes: a temporary file in the same directory, fsync, then rename.

A reader never sees a half-written file under the final name, and a failed write leaves
the previous file (if any) untouched and no temporary file behind. :func:`staged_folder`
does the same for a whole folder (a model folder written by ``export onnx``).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_write", "check_file_target", "check_folder_target", "file_digest",
           "fsync_dir", "not_utf8", "sha256_file", "staged_folder", "write_json_atomic"]


def not_utf8(path: str | os.PathLike[str], exc: UnicodeDecodeError, expected: str) -> str:
    """The one-line message for a text file that is not UTF-8 (a PNG or another binary
    given where text is expected): the path, the first byte that does not decode and its
    offset, and what was expected."""
    return (f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
            f"{exc.start}): expected {expected}")


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
        IsADirectoryError: ``path`` is a folder (``filename`` is ``path``), before writing.
        FileExistsError: ``path`` exists and is not a regular file (a device, a pipe, a
            socket: replacing it would destroy it), before writing.
        OSError: from the file system; nothing is left under ``path`` or as a temporary.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a folder", str(path))
    _refuse_special(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:  # name the file asked for, not the temporary's random name
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    try:
        os.fchmod(fd, mode & ~_umask())
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.errno is not None and exc.filename in (tmp, None):
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write ``obj`` as indented, key-sorted strict JSON (no NaN), atomically."""
    text = json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n"
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def check_file_target(path: str | os.PathLike[str], overwrite: bool = False) -> Path:
    """Refuse, before any work, an output file path that is a folder, an existing file that
    is not a regular file (a device, a pipe), or, without ``overwrite``, an existing file.

    Raises:
        IsADirectoryError: ``path`` is a folder; ``filename`` is ``path``.
        FileExistsError: ``path`` exists and is not a regular file, whatever
            ``overwrite``.
        FileExistsError: ``path`` exists and ``overwrite`` is False; ``filename`` is
            ``path``.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a folder", str(path))
    _refuse_special(path)
    if path.exists() and not overwrite:
        raise FileExistsError(errno.EEXIST, "already exists", str(path))
    return path


def _refuse_special(path: Path) -> None:
    """Refuse an output path that exists and is not a regular file (``/dev/sda``, a pipe):
    moving a file over it would replace the device node or pipe, not write into it."""
    if path.exists() and not path.is_file():
        raise FileExistsError(errno.EEXIST, "exists and is not a regular file (a device, a "
                              "pipe or a socket; writing there would replace it): give the "
                              "path of a file", str(path))


def check_folder_target(out: str | os.PathLike[str], marker: str) -> Path:
    """Refuse, before any work, an ``out`` that :func:`staged_folder` would not replace.

    Raises:
        FileExistsError: ``out`` is an existing file, or a non-empty folder without
            ``marker``; ``filename`` is ``out``.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise FileExistsError(errno.EEXIST, "an existing file", str(out))
    if out.is_dir() and not (out / marker).is_file() and any(out.iterdir()):
        raise FileExistsError(errno.EEXIST, f"a folder of other files, without {marker} (only "
                              f"a folder with {marker}, or an empty one, is replaced)",
                              str(out))
    return out


@contextmanager
def staged_folder(out: str | os.PathLike[str], marker: str) -> Iterator[Path]:
    """Build a folder beside ``out`` and publish it as ``out`` only when the block succeeds.

    Yields a fresh staging folder (``.<name>.staging-*`` in ``out``'s parent). On normal
    exit an existing ``out`` (a folder holding ``marker``, or an empty one) is replaced as
    a whole, so no file of an earlier content stays behind; on an exception the staging
    folder is removed and ``out`` is untouched.

    Args:
        out: the final folder.
        marker: the file that makes an existing folder one of this kind (``model.json``):
            only such a folder, or an empty one, is replaced.

    Raises:
        FileExistsError: ``out`` is an existing file, or a non-empty folder without
            ``marker`` (another kind of folder, never replaced); ``filename`` is ``out``;
            raised before the block runs.
        OSError: from the file system.
    """
    out = Path(out)
    check_folder_target(out, marker)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.staging-", dir=out.parent))
    except OSError as exc:  # a read-only or full parent: name the folder asked for
        raise type(exc)(exc.errno, exc.strerror, str(out)) from None
    os.chmod(stage, 0o777 & ~_umask())  # a folder's usual mode, not mkdtemp's 0700
    try:
        yield stage
        old = None
        if out.is_dir():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, old / out.name)
        try:
            os.replace(stage, out)
        except OSError:
            if old is not None:  # put the earlier folder back: never leave no --out at all
                os.replace(old / out.name, out)
                shutil.rmtree(old, ignore_errors=True)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if stage.exists():
            shutil.rmtree(stage, ignore_errors=True)


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
