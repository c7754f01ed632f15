"""The TensorRT engine cache on the device (``state_root()/engines``), without TensorRT.

An engine is only valid for the exact ONNX graph, TensorRT version, GPU compute
capability, precision mode and input shapes it was built for, so those form the key
(:class:`EngineKey`). Layout::

    engines/<onnx sha256[:16]>/<key digest>.engine   serialized engine
    engines/<onnx sha256[:16]>/<key digest>.json     the key + the engine's sha256 (last)
    engines/timing/<trt version>-sm<cc>.cache        builder timing cache

The sidecar ``.json`` is written after the engine, so its presence marks a complete
entry. A missing, mismatching or undeserialisable entry means "build again": lookups
never raise for a bad entry; they remove it and report why.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from edge.errors import EdgeError
from edge.fileio import atomic_write, write_json_atomic
from edge.state import state_root

__all__ = ["EngineCacheError", "EngineKey", "CacheResult", "EngineCache"]

T = TypeVar("T")


class EngineCacheError(EdgeError, RuntimeError):
    """An engine could not be built or a freshly built engine does not deserialise."""


@dataclass(frozen=True)
class EngineKey:
    """Everything an engine depends on.

    Attributes:
        onnx_sha256: sha256 of the ONNX graph file (as in ``model.json``).
        trt_version: ``tensorrt.__version__`` (e.g. ``"10.3.0.30"``).
        compute_capability: GPU compute capability, ``"8.7"``.
        precision: build mode, e.g. ``"typed"`` (strongly typed: precision from the
            graph's casts and Q/DQ) or ``"flag-fp16"`` (weakly typed with the FP16 flag).
        shapes: ((input name, static shape, dtype), ...) in graph order.
        options: other builder options that change the engine (workspace, opt level).
    """

    onnx_sha256: str
    trt_version: str
    compute_capability: str
    precision: str
    shapes: tuple[tuple[str, tuple[int, ...], str], ...]
    options: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict:
        """JSON form (lists for tuples)."""
        return {"onnx_sha256": self.onnx_sha256, "trt_version": self.trt_version,
                "compute_capability": self.compute_capability, "precision": self.precision,
                "shapes": [[n, list(s), d] for n, s, d in self.shapes],
                "options": [list(o) for o in self.options]}

    def digest(self) -> str:
        """Stable 32-hex-digit digest of the key (sha256 of its canonical JSON)."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True)
class CacheResult(Generic[T]):
    """Outcome of :meth:`EngineCache.get_or_build`.

    Attributes:
        engine: the deserialised engine.
        action: ``"loaded"`` (cache hit) or ``"built"``.
        reason: why it was built: ``"missing"``, ``"corrupt: ..."``, ``"mismatch: ..."``,
            ``"forced"``; empty for a hit.
        path: the engine file.
    """

    engine: T
    action: str
    reason: str
    path: Path


class EngineCache:
    """Engine files under ``root`` (default ``state_root()/engines``)."""

    def __init__(self, root: str | os.PathLike[str] | None = None):
        self.root = Path(root) if root is not None else state_root() / "engines"

    def path_for(self, key: EngineKey) -> Path:
        """The engine file path for ``key`` (its sidecar has suffix ``.json``)."""
        return self.root / key.onnx_sha256[:16] / f"{key.digest()}.engine"

    def timing_cache_path(self, trt_version: str, compute_capability: str) -> Path:
        """Where the builder's timing cache for this TensorRT and GPU is kept."""
        return self.root / "timing" / f"{trt_version}-sm{compute_capability.replace('.', '')}.cache"

    def _discard(self, path: Path) -> None:
        path.with_suffix(".json").unlink(missing_ok=True)
        path.unlink(missing_ok=True)

    def load(self, key: EngineKey) -> tuple[bytes | None, str]:
        """Read a complete, matching entry.

        Returns:
            (engine bytes, "") on a hit; (None, reason) otherwise, after removing a bad
            entry. Reasons: ``"missing"``, ``"corrupt: ..."``, ``"mismatch: ..."``.
        """
        path = self.path_for(key)
        side = path.with_suffix(".json")
        if not side.is_file():
            return None, "missing"
        try:
            meta = json.loads(side.read_text(encoding="utf-8"))
            blob = path.read_bytes()
        except (OSError, ValueError) as exc:
            self._discard(path)
            return None, f"corrupt: unreadable entry ({exc})"
        if meta.get("key") != key.to_json():
            self._discard(path)
            return None, "mismatch: the entry was built for another key"
        if hashlib.sha256(blob).hexdigest() != meta.get("engine_sha256"):
            self._discard(path)
            return None, "corrupt: engine bytes do not match their recorded sha256"
        return blob, ""

    def store(self, key: EngineKey, blob: bytes) -> Path:
        """Write an engine and then its sidecar, atomically; return the engine path."""
        path = self.path_for(key)
        atomic_write(path, lambda f: f.write(blob))
        write_json_atomic(path.with_suffix(".json"),
                          {"key": key.to_json(), "engine_sha256": hashlib.sha256(blob).hexdigest(),
                           "engine_bytes": len(blob)})
        return path

    def get_or_build(self, key: EngineKey, build: Callable[[], bytes],
                     deserialize: Callable[[bytes], T | None], force: bool = False
                     ) -> CacheResult[T]:
        """Load the engine for ``key``, building (and caching) it when needed.

        Args:
            key: the engine's key.
            build: returns a serialized engine (runs the TensorRT builder).
            deserialize: returns the engine, or ``None``/raises when the bytes are unusable
                (``trt.Runtime.deserialize_cuda_engine``).
            force: build even when a valid entry exists.
        Returns:
            A :class:`CacheResult`.
        Raises:
            EngineCacheError: a freshly built engine does not deserialise (a cached one
                that fails is rebuilt instead).
        """
        path = self.path_for(key)
        reason = "forced"
        if not force:
            blob, reason = self.load(key)
            if blob is not None:
                engine = _try(deserialize, blob)
                if engine is not None:
                    return CacheResult(engine, "loaded", "", path)
                self._discard(path)
                reason = "corrupt: cached engine did not deserialise"
        blob = build()
        engine = _try(deserialize, blob)
        if engine is None:
            raise EngineCacheError(f"{path}: the engine just built for ONNX "
                                   f"{key.onnx_sha256[:12]}... does not deserialise with "
                                   f"TensorRT {key.trt_version}; not cached")
        self.store(key, blob)
        return CacheResult(engine, "built", reason, path)


def _try(deserialize: Callable[[bytes], T | None], blob: bytes) -> T | None:
    try:
        return deserialize(blob)
    except Exception:  # TensorRT raises various types for a bad plan; rebuild instead
        return None
