"""Benchmark of the chain model's rollout beside the shipped ONNX warp model, one run.

    python bench/bench_chain.py [--threads 2] [--repeats 5] [--out bench/results/chain.json]

On the shipped sample cell (``samples/cell_sample``: the chain calibration ``chain.npz``
and the warp model ``models/reference`` with ``calibration.npz``), from the test
episode's first frame and joint readings: 16 steps of 1 candidate and of 16 candidates
(the episode's own actions plus small random changes), each timed as the median of
``--repeats`` runs after one warm-up, for both models in the same process. Prints a table
and writes JSON. Targets (docs/architecture.md, "Model contract"): >= 60 frames/s at
batch 1 and 16 candidates x 16 steps in <= 0.5 s on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SAMPLE = ROOT / "samples" / "cell_sample"


def _median_s(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns 0."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2, help="threads (default 2)")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs (default 5)")
    ap.add_argument("--horizon", type=int, default=16, help="steps (default 16)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "chain.json"))
    args = ap.parse_args(argv)

    import cv2

    from edge.episode import load_episode
    from edge.runtime.chain import chain_rollout, load_chain_calibration
    from edge.runtime.context import encode_calibration
    from edge.runtime.model import load_model
    from edge.runtime.rollout import Rollout

    cv2.setNumThreads(args.threads)
    chain = load_chain_calibration(SAMPLE / "chain.npz")
    test = load_episode(SAMPLE / "test.npz")
    k, t = chain.num_dof, args.horizon
    start, q0 = test.frames[0], test.joint_positions[0, :k]
    rng = np.random.default_rng(0)
    base = test.actions[:t, :k].astype(np.float32)
    acts = {1: base[None], 16: (base[None] + rng.normal(0, 0.02, (16, t, k))).astype(np.float32)}
    model = load_model(ROOT / "models" / "reference", intra_op_num_threads=args.threads)
    try:
        ctx = encode_calibration(model, load_episode(SAMPLE / "calibration.npz"))
        rows = []
        for n, a in acts.items():
            chain_s = _median_s(lambda a=a: chain_rollout(chain, start, q0, a), args.repeats)
            roll = Rollout(model, ctx, max_horizon=t, max_candidates=n)
            a_warp = np.zeros((n, t, model.contract.max_dof), np.float32)
            a_warp[..., :k] = a
            warp_s = _median_s(lambda r=roll, a=a_warp: r.run(start, a), args.repeats)
            rows.append({"candidates": n, "steps": t,
                         "chain_s": round(chain_s, 5), "chain_frames_per_s": round(n * t / chain_s, 1),
                         "warp_onnx_s": round(warp_s, 5),
                         "warp_onnx_frames_per_s": round(n * t / warp_s, 1)})
    finally:
        model.deactivate()
    print(f"{'candidates x steps':>18} | {'chain (NumPy) s':>15} | {'frames/s':>9} | "
          f"{'warp (ONNX Runtime) s':>21} | {'frames/s':>9}")
    for r in rows:
        print(f"{r['candidates']:>9} x {r['steps']:<6} | {r['chain_s']:>15.4f} | "
              f"{r['chain_frames_per_s']:>9.1f} | {r['warp_onnx_s']:>21.4f} | "
              f"{r['warp_onnx_frames_per_s']:>9.1f}")
    # candidates per second at 16 over those at 1 (= the frames/s ratio)
    per_candidate = {name: round(rows[1][f"{name}_frames_per_s"]
                                 / rows[0][f"{name}_frames_per_s"], 2)
                     for name in ("chain", "warp_onnx")}
    print(f"per-candidate throughput, {rows[1]['candidates']} candidates over 1: chain "
          f"{per_candidate['chain']:.2f}x, warp {per_candidate['warp_onnx']:.2f}x")
    out = {"threads": args.threads, "repeats": args.repeats, "statistic": "median",
           "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                       "python": platform.python_version(), "numpy": np.__version__,
                       "opencv": cv2.__version__},
           "chain_arm_pixels": int(chain.robot.sum()), "rows": rows,
           "per_candidate_batch16_over_1": per_candidate,
           "targets": {"batch1_frames_per_s": 60, "16x16_seconds": 0.5}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
