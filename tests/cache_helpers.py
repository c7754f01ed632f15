"""Builders shared by the calibration-cache tests."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from edge.cache.store import CalibrationCache
from edge.cache.values import CacheKey
from edge.episode import Episode
from tests.helpers import make_episode


def model_sha(name: str) -> str:
    """A stand-in model sha256 derived from a name."""
    return hashlib.sha256(name.encode()).hexdigest()


def key(cell: str = "cell-1", model: str = "m1", camera: str = "cam-1",
        robot: str = "robot-1") -> CacheKey:
    """A key with the ids :func:`calibration` uses by default; ``model="chain"`` is the
    chain model's identity (whose entries hold chain calibrations), any other name a
    stand-in ONNX model (whose entries hold float32 contexts)."""
    from edge.runtime.chain import CHAIN_MODEL_SHA256

    return CacheKey(cell, camera, robot,
                    CHAIN_MODEL_SHA256 if model == "chain" else model_sha(model))


def calibration(k: CacheKey, seed: int = 0) -> Episode:
    """A small calibration episode whose ids match ``k``."""
    import dataclasses

    ep = make_episode(t=9, a=3, h=8, w=10, seed=seed, kind="calibration")
    meta = dataclasses.replace(ep.metadata, cell_id=k.cell_id, camera_id=k.camera_id,
                               robot_id=k.robot_id)
    return dataclasses.replace(ep, metadata=meta)


def context(seed: int = 0, shape: tuple[int, ...] = (3, 4, 4, 4)) -> np.ndarray:
    """A float32 context (default 768 bytes of data)."""
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def report(ok: bool = True) -> dict[str, Any]:
    """A small coverage report."""
    return {"verdict": "pass" if ok else "fail", "dofs": {"j0": 0.31, "j1": 0.4}}


def put(cache: CalibrationCache, k: CacheKey, seed: int = 0, **kw: Any):
    """Store a full entry for ``k``; returns the :class:`Entry`."""
    ep = calibration(k, seed)
    return cache.put(k, ep, kw.pop("ctx", context(seed)), report(), ep.frames[0], **kw)


def blob_file(cache: CalibrationCache, sha: str) -> Path:
    """Where a blob lives."""
    return cache.blobs.path(sha)
