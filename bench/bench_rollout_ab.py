"""Interleaved A/B of ONNX Runtime rollouts of model folders, with eager PyTorch alongside.

    python bench/bench_rollout_ab.py --models /tmp/reexport models/reference
        [--checkpoints models/reference-checkpoints] [--threads 2] [--horizon 16]
        [--rounds 9] [--batches 1 16] [--no-torch] [--out ab.json]

For comparing two exports of the same checkpoint on a shared machine, where
``bench/bench_cpu_rollout.py`` (one folder per run) sees the load change between runs.
Per batch size every folder is loaded once (the product's ``Rollout``, fused step and
decoder, ``--threads`` intra-op threads, threads that sleep between runs) and warmed up
with one rollout; then each round times one ``--horizon``-step rollout of every folder,
one after the other, and (unless ``--no-torch``) one eager PyTorch rollout of the
checkpoint (``bench_cpu_rollout.torch_rollout``: the exported modules, same weights,
``torch.set_num_threads``; its modules are rebuilt each round, outside the timing).
Inputs are those of ``bench_cpu_rollout`` (the sample cell's start frame, calibration and
actions, candidates scaled). Frames/s are medians over rounds; the frames of every folder
are compared with the first's (max uint8 difference). The 1-minute load average before and
after is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_cpu_rollout as cpu  # noqa: E402
import numpy as np  # noqa: E402

from edge.runtime.rollout import Rollout  # noqa: E402

__all__ = ["main"]


def _batch(dirs: list[Path], ckpt: Path, n: int, horizon: int, rounds: int, threads: int,
           torch_side: bool) -> dict[str, Any]:
    models, rolls = [], []
    try:
        for d in dirs:
            m = cpu._model(d, threads, False, fused=True)
            models.append(m)
            start, actions, ctx = cpu._inputs(m, n, horizon)
            r = Rollout(m, ctx, max_horizon=horizon, max_candidates=n)
            r.reset(start, actions)
            for _ in range(horizon):
                r.step()
            rolls.append(r)
        z0 = models[0].encode(start).copy()
        times: dict[str, list[float]] = {str(d): [] for d in dirs}
        times["torch"] = []
        frames = {}
        for _ in range(rounds):
            for d, r in zip(dirs, rolls, strict=True):
                r.reset(start, actions)
                t0 = time.perf_counter()
                for _ in range(horizon):
                    r.step()
                times[str(d)].append(time.perf_counter() - t0)
                frames[str(d)] = r.frames().copy()
            if torch_side:
                tr = cpu.torch_rollout(ckpt, dirs[0], n, horizon, 1, threads, z0, ctx.values,
                                       actions)
                times["torch"].append(tr["run_s"][0])
    finally:
        for m in models:
            m.deactivate()
    ref = frames[str(dirs[0])].astype(int)
    return {"fps": {k: n * horizon / float(np.median(v)) for k, v in times.items() if v},
            "run_s": times,
            "max_u8_diff_vs_first": {k: int(np.abs(f.astype(int) - ref).max())
                                     for k, f in frames.items()}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", required=True, type=Path)
    p.add_argument("--checkpoints", type=Path, default=ROOT / "models/reference-checkpoints")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--horizon", type=int, default=16)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--out", default="")
    args = p.parse_args(argv)

    load_before = os.getloadavg()[0]
    res = {n: _batch(args.models, args.checkpoints, n, args.horizon, args.rounds,
                     args.threads, not args.no_torch) for n in args.batches}
    load_after = os.getloadavg()[0]
    print(f"{args.threads} threads, horizon {args.horizon}, median of {args.rounds} "
          f"interleaved rounds; 1-minute load {load_before:.2f} before, {load_after:.2f} after")
    for n, r in res.items():
        fps = r["fps"]
        line = ", ".join(f"{k} {v:.1f}" for k, v in fps.items())
        print(f"batch {n}: frames/s {line}; max uint8 diff vs {args.models[0]}: "
              + ", ".join(f"{k} {v}" for k, v in r["max_u8_diff_vs_first"].items()))
        if "torch" in fps:
            print("  ONNX Runtime / PyTorch: " + ", ".join(
                f"{k} {v / fps['torch']:.2f}x" for k, v in fps.items() if k != "torch"))
    if len(args.batches) > 1:
        lo, hi = min(args.batches), max(args.batches)
        print(f"batch {hi} / batch {lo} per-candidate throughput: " + ", ".join(
            f"{d} {res[hi]['fps'][str(d)] / res[lo]['fps'][str(d)]:.2f}x" for d in args.models))
    if args.out:
        Path(args.out).write_text(json.dumps({
            "batches": {str(n): r for n, r in res.items()}, "threads": args.threads,
            "horizon": args.horizon, "rounds": args.rounds, "load_1min_before": load_before,
            "load_1min_after": load_after,
            "time_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
