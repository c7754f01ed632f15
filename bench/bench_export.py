"""Benchmark of the exported variants: ONNX Runtime CPU step latency and rollout PSNR drift.

    python bench/bench_export.py --model models/reference --run runs/reference \\
        --data data/cells [--int8 DIR] [--fp16 DIR] [--threads 2] [--out FILE.json]

``--model`` is the FP32 model folder (``syncedge export onnx``). Without ``--int8`` /
``--fp16`` the variants are made into a temporary folder with ``export quantise`` (INT8
from ``DATA/train``). For each variant that ONNX Runtime CPU can load:

1. step latency: the ``step_b1`` and ``step_b16`` graphs alone (median and p90 of
   ``--repeats`` timed runs after 5 warm-up runs, ms, with ``--threads`` intra-op threads),
   fed a held-out cell's real history window;
2. rollout PSNR drift: the parity measurement of ``syncedge export check`` (16-step
   runtime rollout on held-out cells against ground truth, loss per step against the
   PyTorch FP32 rollout) and the variant's gate verdict; nothing is written into the
   model folders.

Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edge.runtime.model import load_model  # noqa: E402
from export.variants.parity import (  # noqa: E402
    CheckOptions,
    ReferenceCase,
    check_variant,
    folders_family,
    reference_cases,
)
from export.variants.parity_gates import Gates  # noqa: E402
from export.variants.quantise import QuantiseOptions, quantise_model  # noqa: E402

__all__ = ["main", "step_latency_ms"]


def step_latency_ms(model_dir: Path, case: ReferenceCase, batch: int, threads: int,
                    repeats: int) -> dict[str, float]:
    """Median and p90 latency (ms) of one ``step_b{batch}`` call on ONNX Runtime CPU."""
    with load_model(model_dir, intra_op_num_threads=threads, candidate_workers=1) as wm:
        idx = np.arange(batch) % len(case.actions)
        feeds = {"history_latents": np.ascontiguousarray(case.hist_latents[idx]),
                 "history_actions": np.ascontiguousarray(case.hist_actions[idx]),
                 "action": np.ascontiguousarray(case.actions[idx]), "context": case.context}
        out = np.empty((batch, *case.latents.shape[1:]), np.float32)
        for _ in range(5):
            wm.step(batch, feeds, out)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            wm.step(batch, feeds, out)
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return {"median_ms": statistics.median(times),
            "p90_ms": times[min(len(times) - 1, int(0.9 * len(times)))]}


def _max(values: list) -> float:
    """Largest value; NaN when any is missing (a non-finite figure is stored as null)."""
    return float("nan") if any(v is None for v in values) else max(values)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, required=True, help="FP32 model folder")
    ap.add_argument("--run", type=Path, required=True, help="training run of the model")
    ap.add_argument("--data", type=Path, required=True, help="cells root")
    ap.add_argument("--int8", type=Path, help="INT8 model folder (default: made here)")
    ap.add_argument("--fp16", type=Path, help="FP16 model folder (default: made here)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--max-cells", type=int, default=8, help="held-out cells per split")
    ap.add_argument("--out", type=Path, default=Path("bench_export.json"))
    args = ap.parse_args(argv)

    family, mode = folders_family([str(args.model)])
    opts = CheckOptions(run=str(args.run), data=str(args.data), max_cells=args.max_cells,
                        gates=Gates(), family=family, calibration_mode=mode)
    torch_model, cases = reference_cases(opts)
    with tempfile.TemporaryDirectory(prefix="syncedge-bench-export-") as tmp:
        folders = {"fp32": args.model}
        for v in ("int8", "fp16"):
            given = getattr(args, v)
            if given is None:
                given = Path(tmp) / v
                quantise_model(QuantiseOptions(str(args.model), v, str(given),
                                               data=str(args.data), command="bench"))
            folders[v] = given
        res: dict = {"model": str(args.model), "run": str(args.run), "data": str(args.data),
                     "threads": args.threads, "repeats": args.repeats,
                     "cells": [c.cell_id for c in cases], "variants": {}}
        for v, folder in folders.items():
            row: dict = {"folder": str(folder)}
            try:
                for b in (1, 16):
                    row[f"step_b{b}"] = step_latency_ms(folder, cases[0], b, args.threads,
                                                        args.repeats)
            except Exception as exc:  # e.g. an FP16 kernel ONNX Runtime CPU lacks
                row["error"] = f"{type(exc).__name__}: {exc}"
                res["variants"][v] = row
                continue
            rec = check_variant(folder, torch_model, cases, opts)
            row.update(gate=rec["gate"], rollout=rec["rollout"],
                       one_step_max_abs=rec["one_step_max_abs"])
            res["variants"][v] = row
    fp32_b1 = res["variants"]["fp32"].get("step_b1", {}).get("median_ms")
    print(f"model {args.model}  cells {len(cases)}  threads {args.threads}  "
          f"(step latency: median of {args.repeats}, ms)")
    print(f"  {'variant':8} {'step b1':>9} {'step b16':>9} {'b16/cand':>9} {'vs fp32 b1':>10} "
          f"{'PSNR@16':>8} {'max loss dB':>11} {'gate':>6}")
    for v, row in res["variants"].items():
        if "error" in row:
            print(f"  {v:8} not run on ONNX Runtime CPU: {row['error'][:80]}")
            continue
        b1, b16 = row["step_b1"]["median_ms"], row["step_b16"]["median_ms"]
        ro, g = row["rollout"], row["gate"]
        loss = _max(ro["psnr_loss_db"])
        print(f"  {v:8} {b1:9.3f} {b16:9.3f} {b16 / 16:9.3f} {fp32_b1 / b1:9.2f}x "
              f"{ro['psnr_db'][-1]:8.2f} {loss:11.3f} {'pass' if g['passed'] else 'FAIL':>6}")
    print("  rollout PSNR loss per step (dB, mean over cells, against the PyTorch FP32 rollout):")
    for v, row in res["variants"].items():
        if "rollout" in row:
            print(f"  {v:8} " + " ".join("  n/a" if x is None else f"{x:5.2f}"
                                         for x in row["rollout"]["psnr_loss_db"]))
    args.out.write_text(json.dumps(res, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
