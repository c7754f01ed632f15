"""The decoder's warp and compositing with either sampler, ONNX Runtime and eager PyTorch.

    python bench/bench_warp_sampler.py [--threads 2] [--runs 7] [--batches 1 16]
        [--flow-px 3] [--out bench/results/warp_sampler.json]

Times :func:`export.models.warp.warp_composite` (the frame warped at the arm's flow and at
the fill flow, the robot mask at the arm's flow, composited with the fill weight) at the
shipped model's shapes (64x64 frames, 3 + 1 channels) with each sampler of
:data:`export.models.warp.SAMPLERS`: ``grid_sample`` (three GridSamples, what the shipped
decoder graphs run) and ``gather`` (one GatherElements, :func:`bilinear_sample`). Each is
exported the way ``syncedge export onnx`` exports (opset 18, constant folding) and run in
ONNX Runtime's CPU provider with the product's session options
(:class:`edge.runtime.backends.ort.OrtCpuRunner`, ``--threads`` intra-op threads), and run
eagerly in PyTorch (``torch.set_num_threads``, ``inference_mode``). All configurations are
interleaved in every round (one warm-up call, then a timed loop per configuration); the
figures are medians over ``--runs`` rounds, ms per call. Inputs are random: frame and mask
uniform in [0, 1], flows normal with ``--flow-px`` px standard deviation, fill weight
uniform. The maximum absolute difference of every output against eager ``grid_sample`` is
reported. The 1-minute load average before and after is recorded (the machine is shared).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

__all__ = ["main", "warp_inputs"]

NAMES = ("image", "mask", "flows", "o")


def warp_inputs(batch: int, flow_px: float, size: int = 64, seed: int = 0) -> tuple:
    """Random inputs of :func:`warp_composite` (torch tensors): image ``[B, 3, S, S]`` and
    mask ``[B, 1, S, S]`` in [0, 1], flows ``[B, 4, S, S]`` (px, normal with ``flow_px``
    standard deviation), fill weight ``[B, 1, S, S]`` in [0, 1]."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return (torch.rand(batch, 3, size, size, generator=g),
            torch.rand(batch, 1, size, size, generator=g),
            torch.randn(batch, 4, size, size, generator=g) * flow_px,
            torch.rand(batch, 1, size, size, generator=g))


def _module(sampler: str, size: int):
    from torch import nn

    from export.models.warp import identity_grid, warp_composite

    class Composite(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("base", identity_grid(size), persistent=False)

        def forward(self, image, mask, flows, o):
            return warp_composite(image, mask, flows, o, self.base, sampler)

    return Composite().eval()


def _session(module, args: tuple, path: Path, threads: int):
    import onnx
    import onnxruntime as ort
    import torch

    from edge.runtime.backends.ort import OrtCpuRunner
    from export.variants.onnx_export import OPSET

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, str(path), dynamo=False, opset_version=OPSET,
                          input_names=list(NAMES), output_names=["frames", "robot_mask"],
                          do_constant_folding=True)
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto, full_check=True)
    ops = collections.Counter(n.op_type for n in proto.graph.node)
    opts = OrtCpuRunner(path, intra_op_num_threads=threads).session_options()
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"]), dict(ops)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    p.add_argument("--flow-px", type=float, default=3.0)
    p.add_argument("--out", default="")
    args = p.parse_args(argv)

    import torch

    from export.models.warp import SAMPLERS

    torch.set_num_threads(args.threads)
    calls: dict[tuple[str, str, int], Any] = {}
    diffs: dict[tuple[str, str, int], float] = {}
    ops: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode():
        for b in args.batches:
            ins = warp_inputs(b, args.flow_px)
            ref = [t.numpy() for t in _module("grid_sample", 64)(*ins)]
            feeds = {n: t.numpy() for n, t in zip(NAMES, ins, strict=True)}
            for sampler in SAMPLERS:
                mod = _module(sampler, 64)
                sess, ops[sampler] = _session(mod, ins, Path(tmp) / f"{sampler}_b{b}.onnx",
                                              args.threads)
                calls[("ort", sampler, b)] = lambda s=sess, f=feeds: s.run(None, f)
                calls[("torch", sampler, b)] = lambda m=mod, x=ins: m(*x)
                for side in ("ort", "torch"):
                    out = calls[(side, sampler, b)]()
                    out = [o if isinstance(o, np.ndarray) else o.numpy() for o in out]
                    diffs[(side, sampler, b)] = max(float(np.abs(a - r).max())
                                                    for a, r in zip(out, ref, strict=True))
        load_before = os.getloadavg()[0]
        times: dict[tuple[str, str, int], list[float]] = collections.defaultdict(list)
        for _ in range(args.runs):
            for key, fn in calls.items():
                reps = max(1, 160 // key[2])
                fn()
                t0 = time.perf_counter()
                for _ in range(reps):
                    fn()
                times[key].append((time.perf_counter() - t0) / reps * 1e3)
        load_after = os.getloadavg()[0]

    rows = []
    for (side, sampler, b), ts in times.items():
        rows.append({"backend": side, "sampler": sampler, "batch": b,
                     "ms": float(np.median(ts)), "ms_runs": ts,
                     "max_abs_diff_vs_grid_sample": diffs[(side, sampler, b)]})
    print(f"threads {args.threads}, median of {args.runs} interleaved rounds, flows "
          f"N(0, {args.flow_px} px); 1-minute load {load_before:.2f} before, "
          f"{load_after:.2f} after")
    print(f"{'backend':8s} {'sampler':12s} " + " ".join(f"{'b' + str(b) + ' ms':>9s}"
                                                      for b in args.batches)
          + f" {'max |diff|':>10s}")
    for side in ("ort", "torch"):
        for sampler in SAMPLERS:
            ms = [next(r["ms"] for r in rows if r["backend"] == side and
                       r["sampler"] == sampler and r["batch"] == b) for b in args.batches]
            d = max(diffs[(side, sampler, b)] for b in args.batches)
            print(f"{side:8s} {sampler:12s} " + " ".join(f"{m:9.3f}" for m in ms)
                  + f" {d:10.2e}")
    for b in args.batches:
        ort_ratio = (next(r["ms"] for r in rows if r["backend"] == "ort" and
                          r["sampler"] == "grid_sample" and r["batch"] == b)
                     / next(r["ms"] for r in rows if r["backend"] == "ort" and
                            r["sampler"] == "gather" and r["batch"] == b))
        print(f"batch {b}: ONNX Runtime gather {ort_ratio:.2f}x faster than GridSample")
    for sampler, counts in ops.items():
        print(f"{sampler} graph operators: "
              + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if args.out:
        import onnxruntime

        Path(args.out).write_text(json.dumps({
            "rows": rows, "operators": ops, "threads": args.threads, "runs": args.runs,
            "flow_px": args.flow_px, "load_1min_before": load_before,
            "load_1min_after": load_after, "time_utc": time.strftime(
                "%Y-%m-%d %H:%M UTC", time.gmtime()),
            "versions": {"torch": torch.__version__, "onnxruntime": onnxruntime.__version__}},
            indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
