"""Benchmark: calibration-cache latency (get_context, full get, put).

Measures the rollout's fast path (``get_context``: one index lookup, one blob read, one
sha256) and the full verified ``get`` and ``put``, for the reference model's context size
by default. Re-encoding the context needs the model, so the comparison against encoding
belongs to the runtime's benchmark; these are the cache's own figures.

    python bench/bench_cache.py [--reads 2000] [--puts 50] [--out bench/results/cache.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from edge.cache.store import CalibrationCache  # noqa: E402
from edge.cache.values import CacheKey  # noqa: E402
from edge.episode import Episode, EpisodeMetadata  # noqa: E402


def _episode(cell: str, dofs: int, size: int, seed: int) -> Episode:
    rng = np.random.default_rng(seed)
    t = 8 * dofs + 1
    actions = rng.normal(0, 0.05, (t, dofs)).astype(np.float32)
    actions[-1] = 0
    meta = EpisodeMetadata(cell_id=cell, camera_id="cam", robot_id="robot", robot="bench",
                           dof_names=tuple(f"j{i}" for i in range(dofs)),
                           dof_units=("rad",) * dofs, fps=10.0, kind="calibration")
    return Episode(frames=rng.integers(0, 256, (t, size, size, 3), dtype=np.uint8),
                   actions=actions, timestamps=np.arange(t, dtype=np.float64) / 10.0,
                   metadata=meta)


def _stats(samples_s: list[float]) -> dict[str, float]:
    a = np.asarray(samples_s) * 1e6
    return {"p50_us": float(np.percentile(a, 50)), "p99_us": float(np.percentile(a, 99)),
            "mean_us": float(a.mean()), "n": int(a.size)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reads", type=int, default=2000)
    ap.add_argument("--puts", type=int, default=50)
    ap.add_argument("--context-shape", default="7,16,8,8", help="K,D,h,w (float32)")
    ap.add_argument("--frame-size", type=int, default=64, help="episode frames, px square")
    ap.add_argument("--dofs", type=int, default=7)
    ap.add_argument("--root", default=None, help="cache root (default: a temporary folder)")
    ap.add_argument("--out", default="bench/results/cache.json")
    args = ap.parse_args()
    shape = tuple(int(x) for x in args.context_shape.split(","))
    rng = np.random.default_rng(0)
    ctx = rng.normal(size=shape).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.root or tmp) / "calibration"
        cache = CalibrationCache(root)
        ep0 = _episode("cell-0", args.dofs, args.frame_size, 0)
        put_s, put_same_episode_s = [], []
        for i in range(args.puts):
            ep = dataclasses.replace(ep0, metadata=dataclasses.replace(ep0.metadata,
                                                                       cell_id=f"cell-{i}"))
            key = CacheKey(f"cell-{i}", "cam", "robot", f"{i:064x}")
            t0 = time.perf_counter()
            cache.put(key, ep, ctx, {"verdict": "pass"}, ep.frames[0])
            put_s.append(time.perf_counter() - t0)
            key2 = CacheKey(f"cell-{i}", "cam", "robot", f"{i + 1:064x}")
            t0 = time.perf_counter()
            cache.put(key2, ep, ctx + 1, {"verdict": "pass"}, ep.frames[0])
            put_same_episode_s.append(time.perf_counter() - t0)
        key = CacheKey("cell-0", "cam", "robot", f"{0:064x}")
        for _ in range(20):
            cache.get_context(*dataclasses.astuple(key))
        ctx_s = []
        for _ in range(args.reads):
            t0 = time.perf_counter()
            got = cache.get_context(*dataclasses.astuple(key))
            ctx_s.append(time.perf_counter() - t0)
        assert got is not None and np.array_equal(got, ctx)
        get_s = []
        for _ in range(max(1, args.reads // 20)):
            t0 = time.perf_counter()
            cache.get(key)
            get_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        cold = CalibrationCache(root)
        cold.get_context(*dataclasses.astuple(key))
        open_and_read_s = time.perf_counter() - t0
        cold.close()
        cache.close()
    result = {
        "context_shape": list(shape), "context_bytes": int(ctx.nbytes),
        "episode": {"frames": 8 * args.dofs + 1, "size_px": args.frame_size},
        "get_context": _stats(ctx_s), "get_full_verified": _stats(get_s),
        "put_new_episode": _stats(put_s), "put_shared_episode": _stats(put_same_episode_s),
        "open_index_and_first_get_context_us": open_and_read_s * 1e6,
        "platform": platform.platform(), "python": platform.python_version(),
    }
    print(f"{'operation':<28}{'p50 us':>10}{'p99 us':>10}{'n':>7}")
    for name in ("get_context", "get_full_verified", "put_new_episode", "put_shared_episode"):
        s = result[name]
        print(f"{name:<28}{s['p50_us']:>10.1f}{s['p99_us']:>10.1f}{s['n']:>7}")
    print(f"{'open + first get_context':<28}{open_and_read_s * 1e6:>10.1f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
