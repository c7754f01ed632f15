"""Content-addressed blob files of the calibration cache, and the byte encodings they hold.

A blob is a file named by the sha256 of its bytes: ``ROOT/blobs/ab/cdef...`` (first two hex
digits as a folder). Blobs are written atomically (:func:`edge.fileio.atomic_write`), so a
blob file under its final name is always complete; a reader still hashes it on every read,
which catches bytes changed or truncated afterwards. Encodings:

- context and reference frame: ``.npy`` bytes (:func:`npy_bytes`), no pickled objects;
- coverage report: strict JSON, UTF-8, sorted keys (:func:`json_bytes`);
- calibration episode: the episode file format (:func:`edge.episode.save_episode`).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edge.cache.values import CacheKey, CacheValueError
from edge.episode import Episode, load_episode
from edge.fileio import atomic_write, fsync_dir
from edge.fileio import file_digest as sha256_file  # (hex sha256, size in bytes)

__all__ = [
    "BlobFault",
    "BlobStore",
    "check_context",
    "context_bytes",
    "context_load",
    "check_episode",
    "check_reference",
    "check_report",
    "describe_context_format",
    "episode_digest",
    "expected_context_format",
    "format_mismatch",
    "json_bytes",
    "npy_bytes",
    "npy_load",
    "sha256_bytes",
    "sha256_file",
]


class BlobFault(Exception):
    """A blob is missing, altered or undecodable; ``str()`` says what was expected and found.

    Internal to the cache: :class:`edge.cache.store.CalibrationCache` turns it into a
    quarantine record and a :class:`~edge.cache.values.CacheCorruptError`.
    """


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()




def npy_bytes(arr: np.ndarray) -> bytes:
    """``arr`` as ``.npy`` file bytes (C order)."""
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
    return buf.getvalue()


def npy_load(data: bytes, dtype: np.dtype | type, shape: tuple[int, ...]) -> np.ndarray:
    """Decode ``.npy`` bytes, requiring ``dtype`` and ``shape``.

    Raises:
        BlobFault: for undecodable bytes or another dtype or shape (expected and found).
    """
    dt = np.dtype(dtype)
    fast = _npy_fast(data, dt, tuple(shape))
    if fast is not None:
        return fast
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise BlobFault(f"not a readable .npy array ({exc})") from None
    if arr.dtype != np.dtype(dtype) or tuple(arr.shape) != tuple(shape):
        raise BlobFault(f"expected {np.dtype(dtype)} {tuple(shape)}, "
                        f"found {arr.dtype} {tuple(arr.shape)}")
    return arr


def _npy_fast(data: bytes, dt: np.dtype, shape: tuple[int, ...]) -> np.ndarray | None:
    """Decode a version-1 ``.npy`` header written by :func:`npy_bytes` without parsing it
    as Python syntax; ``None`` when it is anything else (the slow path then decides)."""
    if len(data) < 10 or data[:8] != b"\x93NUMPY\x01\x00":
        return None
    offset = 10 + int.from_bytes(data[8:10], "little")
    header = data[10:offset]
    want = (f"{{'descr': '{dt.str}', 'fortran_order': False, 'shape': {shape!r}, }}"
            .encode())
    count = int(np.prod(shape, dtype=np.int64))
    if header.rstrip(b" \n") != want or len(data) - offset != count * dt.itemsize:
        return None
    return np.frombuffer(data, dt, count, offset).reshape(shape).copy()


def json_bytes(obj: Any) -> bytes:
    """``obj`` as strict JSON (no NaN), sorted keys, UTF-8.

    Raises:
        ValueError, TypeError: for values strict JSON cannot hold.
    """
    return json.dumps(obj, sort_keys=True, allow_nan=False, separators=(",", ":")).encode()


def episode_digest(episode: Episode) -> str:
    """sha256 over an episode's metadata and arrays (name, dtype, shape, bytes).

    Unlike the file's sha256 this does not depend on the zip timestamps of the episode
    file, so saving the same episode twice gives the same digest.
    """
    h = hashlib.sha256()
    h.update(json_bytes(episode.metadata.to_json_dict()))
    for name in ("frames", "actions", "timestamps", "joint_positions", "ee_px", "robot_mask"):
        arr = getattr(episode, name)
        if arr is None:
            continue
        arr = np.ascontiguousarray(arr)
        h.update(f"|{name}|{arr.dtype.str}|{arr.shape}|".encode())
        h.update(arr.tobytes())
    return h.hexdigest()




class BlobStore:
    """The ``blobs/``, ``quarantine/`` and ``tmp/`` folders under a cache root.

    Args:
        root: the cache root folder (created if missing).
        create: create the folders if missing (``False`` for a read-only cache, whose
            missing folders simply hold nothing).
    """

    def __init__(self, root: Path, create: bool = True):
        self.root = root
        self.blob_dir = root / "blobs"
        self.quarantine_dir = root / "quarantine"
        self.tmp_dir = root / "tmp"
        if create:
            for d in (self.blob_dir, self.quarantine_dir, self.tmp_dir):
                d.mkdir(parents=True, exist_ok=True)

    def path(self, sha: str) -> Path:
        """Where the blob named ``sha`` lives."""
        return self.blob_dir / sha[:2] / sha[2:]

    def tmp_path(self, suffix: str) -> Path:
        """A fresh, unused path under ``tmp/`` (for staging an episode file)."""
        return self.tmp_dir / f"{uuid.uuid4().hex}{suffix}"

    def write(self, data: bytes) -> tuple[str, int]:
        """Store ``data``; return its sha256 and size.

        An existing blob with the same name is kept when its bytes verify (its modification
        time is refreshed) and rewritten otherwise.
        """
        sha = sha256_bytes(data)
        if not self.keep(sha):
            atomic_write(self.path(sha), lambda f: f.write(data))
            fsync_dir(self.path(sha).parent)
        return sha, len(data)

    def adopt(self, staged: Path) -> tuple[str, int]:
        """Move a complete, fsynced file from ``tmp/`` into the store; return sha256, size."""
        sha, size = sha256_file(staged)
        if self.keep(sha):
            staged.unlink(missing_ok=True)
        else:
            path = self.path(sha)
            path.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged, path)
            fsync_dir(path.parent)
        return sha, size

    def keep(self, sha: str) -> bool:
        """Whether the blob exists and verifies; if so its modification time is refreshed
        (so :meth:`CalibrationCache.gc`'s grace period protects a blob about to be reused)."""
        path = self.path(sha)
        try:
            if sha256_file(path)[0] != sha:
                return False
            os.utime(path)
        except OSError:
            return False
        return True

    def exists(self, sha: str) -> bool:
        """Whether the blob file is present (not verified)."""
        return self.path(sha).is_file()

    def read(self, sha: str, size: int | None = None) -> bytes:
        """The blob's bytes, verified against its name (and ``size`` when given).

        Raises:
            BlobFault: missing file, other size (truncated or grown), or other sha256.
        """
        path = self.path(sha)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise BlobFault(f"blob file {path} is missing") from None
        except OSError as exc:
            raise BlobFault(f"blob file {path} cannot be read ({exc})") from None
        if size is not None and len(data) != size:
            raise BlobFault(f"blob file {path}: expected {size} bytes, found {len(data)} "
                            f"(truncated or altered)")
        found = sha256_bytes(data)
        if found != sha:
            raise BlobFault(f"blob file {path}: expected sha256 {sha[:16]}..., found "
                            f"{found[:16]}... (bytes altered)")
        return data

    def quarantine(self, sha: str) -> str:
        """Move the blob file to ``quarantine/``; return its new path (``""`` if missing)."""
        src = self.path(sha)
        dst = self.quarantine_dir / f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}-{sha}"
        try:
            os.replace(src, dst)
        except FileNotFoundError:
            return ""
        return str(dst)

    def unlink(self, sha: str) -> int:
        """Delete the blob file; return the bytes freed (0 if it was absent)."""
        path = self.path(sha)
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            return 0
        return size

    def scan(self) -> Iterator[tuple[str, Path, float]]:
        """Every file under ``blobs/`` and ``tmp/``: ``(sha256 or "", path, mtime_s)``.

        Temporary files of interrupted writes (and anything not named like a blob) come
        with ``""`` as the name.
        """
        for d in sorted(self.blob_dir.iterdir()):
            if not d.is_dir():
                yield "", d, d.stat().st_mtime
                continue
            for p in sorted(d.iterdir()):
                name = d.name + p.name
                ok = len(name) == 64 and all(c in "0123456789abcdef" for c in name)
                try:
                    mtime = p.stat().st_mtime
                except FileNotFoundError:
                    continue
                yield (name if ok and p.is_file() else ""), p, mtime
        for p in sorted(self.tmp_dir.iterdir()):
            try:
                yield "", p, p.stat().st_mtime
            except FileNotFoundError:
                continue


def check_episode(episode: Episode | str | os.PathLike[str], key: CacheKey) -> Episode:
    """Load (if a path) and validate a calibration episode for ``key``.

    Raises:
        EpisodeError: the episode does not validate (file and field named).
        CacheValueError: not an episode, not ``kind="calibration"``, or its metadata ids
            differ from the key's.
    """
    if isinstance(episode, (str, os.PathLike)):
        episode = load_episode(episode)
    if not isinstance(episode, Episode):
        raise CacheValueError(f"calibration episode for {key.short}: expected an Episode or "
                              f"an episode file path, found {type(episode).__name__}")
    episode.validate()
    meta = episode.metadata
    if meta.kind != "calibration":
        raise CacheValueError(f"calibration episode for {key.short}: expected metadata.kind "
                              f"'calibration', found {meta.kind!r}")
    for name in ("cell_id", "camera_id", "robot_id"):
        want, got = getattr(key, name), getattr(meta, name)
        if want != got:
            raise CacheValueError(f"calibration episode for {key.short}: expected "
                                  f"metadata.{name} {want!r} (from the key), found {got!r}")
    return episode


def expected_context_format(key: CacheKey) -> str:
    """The ``context_format`` the model of ``key`` reads: ``"chain"`` for the chain model
    (:data:`edge.runtime.chain.CHAIN_MODEL_SHA256`), ``"npy"`` (a float32 array) for every
    other model (an exported ONNX model, identified by its ``model.json`` sha256)."""
    from edge.runtime.chain import CHAIN_MODEL_SHA256

    return "chain" if key.model_sha256 == CHAIN_MODEL_SHA256 else "npy"


def describe_context_format(fmt: str) -> str:
    """What a ``context_format`` holds, for messages."""
    return ("a chain calibration" if fmt == "chain" else
            "a float32 .npy array (an ONNX model's context)" if fmt == "npy" else repr(fmt))


def format_mismatch(key: CacheKey, found: str) -> str | None:
    """Why a context of ``found`` format cannot be ``key``'s (``None`` when it can): a
    chain calibration is stored only under the chain model's identity, and that identity
    holds nothing else."""
    from edge.runtime.chain import CHAIN_MODEL_SHA256

    want = expected_context_format(key)
    if found == want:
        return None
    model = (f"model {key.model_sha256[:12]}... is the chain model" if want == "chain" else
             f"model {key.model_sha256[:12]}... is not the chain model (whose "
             f"calibrations are cached under {CHAIN_MODEL_SHA256[:12]}...)")
    return (f"expected {describe_context_format(want)}: {model}; found "
            f"{describe_context_format(found)}")


def check_context(context: object, key: CacheKey) -> Any:
    """Check a context: a float32 array, at least 1-D, not empty, all finite; or a chain
    calibration (:class:`edge.runtime.chain.ChainCalibration`, validated); or ``None``.
    Its kind must be the one the key's model reads (:func:`expected_context_format`).

    Raises:
        CacheValueError: naming the key, the expected and the found kind, dtype, shape or
            value.
    """
    if context is None:
        return None
    from edge.runtime.chain import ChainCalibration, ChainFileError

    if not isinstance(context, (np.ndarray, ChainCalibration)):
        raise CacheValueError(f"context for {key.short}: expected a float32 array or a "
                              f"chain calibration, found {type(context).__name__}")
    why = format_mismatch(key, "npy" if isinstance(context, np.ndarray) else "chain")
    if why is not None:
        raise CacheValueError(f"context for {key.short}: {why}")
    if isinstance(context, ChainCalibration):
        try:
            context.validate(f"context for {key.short}")
        except ChainFileError as exc:
            raise CacheValueError(str(exc)) from None
        return context
    if context.dtype != np.float32:
        raise CacheValueError(f"context for {key.short}: expected a float32 array, found "
                              f"{context.dtype}")
    if context.ndim < 1 or context.size == 0:
        raise CacheValueError(f"context for {key.short}: expected a non-empty array of at least "
                              f"one dimension, found shape {context.shape}")
    if not np.isfinite(context).all():
        raise CacheValueError(f"context for {key.short}: expected finite values, found "
                              f"{int((~np.isfinite(context)).sum())} NaN/inf")
    return context


def context_bytes(context: Any) -> tuple[bytes, tuple[int, ...], str]:
    """A checked context's blob bytes, the shape the index records and its
    ``context_format``: ``.npy`` bytes, the array's shape and ``"npy"`` for an array; the
    chain calibration file's bytes, ``()`` and ``"chain"`` for a chain calibration."""
    if isinstance(context, np.ndarray):
        return npy_bytes(context), tuple(context.shape), "npy"
    from edge.runtime.chain import chain_bytes

    return chain_bytes(context), (), "chain"


def context_load(data: bytes, fmt: str, shape: tuple[int, ...], where: str) -> Any:
    """Decode a context blob of ``fmt`` (see :func:`context_bytes`).

    Raises:
        BlobFault: the bytes do not decode to what the index says.
    """
    if fmt == "chain":
        from edge.runtime.chain import ChainFileError, chain_from_bytes

        try:
            return chain_from_bytes(data, where)
        except ChainFileError as exc:
            raise BlobFault(str(exc)) from None
    return npy_load(data, np.float32, shape)


def check_reference(frame: object, key: CacheKey) -> np.ndarray:
    """Check a reference frame: uint8 ``[H, W, 3]`` RGB.

    Raises:
        CacheValueError: naming the key, the expected and the found dtype or shape.
    """
    if (not isinstance(frame, np.ndarray) or frame.dtype != np.uint8 or frame.ndim != 3
            or frame.shape[2] != 3 or frame.shape[0] == 0 or frame.shape[1] == 0):
        found = (f"{frame.dtype} {frame.shape}" if isinstance(frame, np.ndarray)
                 else type(frame).__name__)
        raise CacheValueError(f"reference frame for {key.short}: expected uint8 [H, W, 3], "
                              f"found {found}")
    return frame


def check_report(report: object, key: CacheKey) -> bytes:
    """Encode a coverage report (a JSON object) as :func:`json_bytes`.

    Raises:
        CacheValueError: not a mapping, or not strict JSON (NaN, non-string keys, objects).
    """
    if not isinstance(report, Mapping):
        raise CacheValueError(f"coverage report for {key.short}: expected a JSON object "
                              f"(mapping), found {type(report).__name__}")
    try:
        return json_bytes(dict(report))
    except (TypeError, ValueError) as exc:
        raise CacheValueError(f"coverage report for {key.short}: expected strict JSON, "
                              f"found a value it cannot hold ({exc})") from None
