"""CPU rollout: ONNX Runtime (the product's ``Rollout``) against eager PyTorch on the same
weights, with a per-operator time table, FLOPs per step and the fraction of GEMM peak.

    python bench/bench_cpu_rollout.py [--model models/reference]
        [--checkpoints models/reference-checkpoints] [--threads 2] [--horizon 16]
        [--runs 5] [--batches 1 16] [--out bench/results/cpu_rollout.json]

Both sides in one process and one run, the same way: the start frame and calibration of
``samples/cell_sample`` (the context from the model's own calibration graph), the same
start latent and candidate actions, the ring buffer and uint8 conversion of
``kernels.reference`` between the graphs, ``--threads`` threads (``torch.set_num_threads``
and ONNX Runtime's ``intra_op_num_threads``), ``torch.inference_mode()``, one full
warm-up rollout, then the median of ``--runs`` timed rollouts of ``--horizon`` steps
(reset excluded). The first step after loading is timed apart (``first_step_ms``). The
frames of both are compared (max |difference| in uint8 levels). PyTorch runs the modules
``syncedge export onnx`` exported (``export.variants.warp_export.warp_graph_modules``) with the
checkpoint's weights.

ONNX Runtime is measured in four configurations: ``ort_before`` (what this project ran
before: spinning intra-op pools, one session per graph), ``ort`` (the current defaults:
threads that sleep between runs, each batch's step and decoder fused into one graph,
``WorldModel(fuse_step_decoder=True)``, and the candidates of a batch split into
``edge.runtime.model.default_candidate_workers`` groups that run at the same time, each
on ``--threads`` / groups intra-op threads), ``ort_one_session`` (the same with the whole
batch in one session on ``--threads`` intra-op threads, the default until the candidate
groups) and ``ort_unfused`` (one session, separate step and decoder sessions). Eager
PyTorch is measured as the target asks (``torch``: the whole batch, ``--threads``
intra-op threads) and split the same way as ``ort`` (``torch_groups``: the same groups
of rows on Python threads, ``torch.set_num_threads(--threads / groups)``), so the gain of
the grouping is shown on both sides. The per-operator tables come from ONNX Runtime's profiler and
``torch.profiler`` on separate, profiled runs (profiling adds overhead; the frames/s
figures come from unprofiled runs). FLOPs are counted from the shapes the profiler
records: Conv ``2*N*Cout*Hout*Wout*Cin/group*kh*kw``, Einsum ``2*prod(index sizes)``,
MatMul/Gemm ``2*M*N*K``. The GEMM peak is the best of ``--threads``-thread float32 matrix
products (NumPy and PyTorch, 2048^2) in this run. Memory-bound operators (GridSample,
Resize, Concat, ...) are reported in bytes/s (inputs + outputs).

Prints a table and writes JSON. Measure only when the machine is otherwise idle: the
1-minute load average before and after is recorded.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from edge.episode import load_episode  # noqa: E402
from edge.runtime.backends.ort import OrtCpuRunner  # noqa: E402
from edge.runtime.context import encode_calibration  # noqa: E402
from edge.runtime.model import WorldModel, default_candidate_workers  # noqa: E402
from edge.runtime.rollout import Rollout  # noqa: E402
from kernels import reference as ref  # noqa: E402

__all__ = ["count_flops", "gemm_peak_gflops", "main"]

GEMM_OPS = ("Conv", "FusedConv", "NchwcConv", "Einsum", "MatMul", "Gemm", "FusedMatMul")
TARGETS = {"ort_vs_torch": 1.5, "batch16_per_candidate": 3.0, "gemm_fraction_b16": 0.35}


def gemm_peak_gflops(threads: int, n: int = 2048, repeats: int = 5) -> dict[str, float]:
    """Best float32 ``n x n`` matrix product rate (GFLOP/s) of NumPy and of PyTorch."""
    import torch

    torch.set_num_threads(threads)
    out = {}
    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    for name, mm, x in (("numpy", np.matmul, a), ("torch", torch.mm, torch.from_numpy(a))):
        mm(x, x)
        best = min(_timed(lambda mm=mm, x=x: mm(x, x)) for _ in range(repeats))
        out[name] = 2.0 * n ** 3 / best / 1e9
    return out


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _shape_list(v: Any) -> list[list[int]]:
    """Shapes from an ORT profiler ``input_type_shape`` entry: ``[{"float": [1, 2]}, ...]``."""
    return [list(next(iter(d.values()))) for d in v or []]


def count_flops(op: str, ins: list[list[int]], outs: list[list[int]],
                attrs: dict[str, Any] | None = None) -> float:
    """Multiply-add FLOPs (2 per MAC) of one GEMM-class node from its I/O shapes; 0 for
    other operators. ``attrs`` may give an Einsum ``equation``."""
    if not ins or not outs:
        return 0.0
    if op in ("Conv", "FusedConv", "NchwcConv"):
        w, y = ins[1], outs[0]
        return 2.0 * float(np.prod(y)) * float(np.prod(w[1:]))
    if op in ("MatMul", "FusedMatMul"):
        a, y = ins[0], outs[0]
        return 2.0 * float(np.prod(y)) * a[-1]
    if op == "Gemm":
        return 2.0 * float(np.prod(outs[0])) * ins[0][-1]
    if op == "Einsum":
        eq = (attrs or {}).get("equation", "")
        if "->" not in eq:
            return 0.0
        lhs = eq.replace(" ", "").split("->")[0].split(",")
        sizes: dict[str, int] = {}
        for term, shape in zip(lhs, ins, strict=False):
            for ch, d in zip(term, shape, strict=False):
                sizes[ch] = d
        return 2.0 * float(np.prod(list(sizes.values())))
    return 0.0


def _inputs(model: WorldModel, n: int, horizon: int) -> tuple[np.ndarray, np.ndarray, Any]:
    cal = load_episode(ROOT / "samples/cell_sample/calibration.npz")
    test = load_episode(ROOT / "samples/cell_sample/test.npz")
    ctx = encode_calibration(model, cal)
    rng = np.random.default_rng(0)
    acts = test.actions[:horizon].astype(np.float32)
    if len(acts) < horizon:
        acts = np.concatenate([acts, np.zeros((horizon - len(acts), acts.shape[1]), np.float32)])
    full = np.zeros((n, horizon, model.contract.max_dof), np.float32)
    full[:, :, :acts.shape[1]] = acts[None] * rng.uniform(0.5, 1.5, (n, 1, 1)).astype(np.float32)
    return test.frames[0], full, ctx


class _ProfiledRunner(OrtCpuRunner):
    """``OrtCpuRunner`` with ONNX Runtime's profiler on (files under ``profile_dir``);
    ``unoptimised`` turns graph optimisations off (the graph's own operators and shapes,
    for counting FLOPs)."""

    def __init__(self, path, threads: int, profile_dir: str, unoptimised: bool = False):
        super().__init__(path, intra_op_num_threads=threads)
        self.profile_dir, self.unoptimised = profile_dir, unoptimised

    def session_options(self):
        import onnxruntime as ort

        opts = super().session_options()
        opts.enable_profiling = True
        opts.profile_file_prefix = str(Path(self.profile_dir) / self.path.stem)
        if self.unoptimised:
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        return opts


def _model(model_dir: Path, threads: int, before: bool, profile_dir: str = "",
           unoptimised: bool = False, fused: bool = True, workers: int = 1) -> WorldModel:
    if profile_dir:
        factory = lambda p: _ProfiledRunner(p, threads, profile_dir, unoptimised)  # noqa: E731
    else:  # before: the spinning pools this project used until now
        factory = lambda p: OrtCpuRunner(p, intra_op_num_threads=threads,  # noqa: E731
                                         allow_spinning=before)
    return WorldModel(model_dir, runner_factory=factory, fuse_step_decoder=fused,
                      candidate_workers=workers).activate()


def ort_rollout(model_dir: Path, n: int, horizon: int, runs: int, threads: int,
                before: bool = False, fused: bool = True, workers: int = 1) -> dict[str, Any]:
    """The product's rollout: first step, median frames/s, the frames of the last run, and
    how the batch was split (``groups``: per group, its ``[first row, graph batch]`` runs)."""
    model = _model(model_dir, threads, before, fused=fused and not before, workers=workers)
    try:
        start, actions, ctx = _inputs(model, n, horizon)
        r = Rollout(model, ctx, max_horizon=horizon, max_candidates=n)
        r.reset(start, actions)
        first = _timed(r.step)
        for _ in range(horizon - 1):
            r.step()
        times = []
        for _ in range(runs):
            r.reset(start, actions)
            times.append(_timed(lambda: [r.step() for _ in range(horizon)]))
        frames = r.frames()
        z0 = model.encode(start).copy()
        groups = model.shard_plan(r.batch) if workers > 1 else [[(0, r.batch)]]
    finally:
        model.deactivate()
    med = float(np.median(times))
    return {"fps": n * horizon / med, "step_ms": med / horizon * 1e3, "first_step_ms": first * 1e3,
            "run_s": times, "frames": frames, "start_latent": z0, "context": ctx.values,
            "actions": actions, "batch": r.batch, "groups": [[list(x) for x in g] for g in groups]}


def torch_rollout(ckpt: Path, model_dir: Path, n: int, horizon: int, runs: int, threads: int,
                  z0: np.ndarray, context: np.ndarray, actions: np.ndarray,
                  profile: bool = False, groups: int = 1) -> dict[str, Any]:
    """Eager PyTorch, the same loop: the exported step and decoder modules, same weights.
    ``groups`` > 1 splits the batch's rows into that many contiguous groups, each stepped
    and decoded by its own modules on a Python thread (the ring buffer and uint8 frames
    stay whole, as in ``Rollout``), with ``threads // groups`` PyTorch threads."""
    import torch

    from edge.manifest import load_model_dir
    from export.variants.warp_export import load_warp_model, warp_graph_modules

    man = load_model_dir(model_dir)
    b = next(s for s in man.batch_sizes if s >= n)
    groups = max(1, min(groups, b))
    if b % groups:
        raise SystemExit(f"--batches: a batch of {b} does not split into {groups} equal groups")
    torch.set_num_threads(max(1, threads // groups))
    # the same graph structure as the exported model (its per-DoF flow fields made once
    # per rollout where the state carries them; z0 is the prepared start latent)
    prepared = "joint_fields" in (man.contract.state_layout or {})
    g = b // groups
    mods = warp_graph_modules(load_warp_model(ckpt, joint_fields_in_state=prepared),
                              tuple(sorted({*man.batch_sizes, g})))
    step, dec = mods[f"step_b{b}"][0].eval(), mods[f"decoder_b{b}"][0].eval()
    gstep, gdec = mods[f"step_b{g}"][0].eval(), mods[f"decoder_b{g}"][0].eval()
    c = man.contract
    s, a, lat = c.history_length, c.max_dof, int(np.prod(c.latent_shape))
    ring_l = np.zeros((b, s, lat), np.float32)
    ring_a = np.zeros((b, s, a), np.float32)
    hist_l, hist_a = np.zeros_like(ring_l), np.zeros_like(ring_a)
    acts = np.zeros((b, horizon, a), np.float32)
    acts[:n] = actions
    mask = np.ones(a, np.uint8)
    act_t = np.zeros((b, a), np.float32)
    frames = np.zeros((horizon, b, *c.resolution, 3), np.uint8)
    ctx = torch.from_numpy(context)
    z_start = np.repeat(z0.reshape(1, -1), b, axis=0)
    if prepared:  # once per rollout, outside the timed steps (as Rollout.reset does it)
        with torch.inference_mode():
            z_start = mods[f"prepare_b{b}"][0](torch.from_numpy(z_start).view(
                b, *c.latent_shape), ctx).reshape(b, -1).numpy().copy()

    nxt_all = np.zeros((b, lat), np.float32)
    dec_all = np.zeros((b, 3, *c.resolution), np.float32)
    pool = None
    if groups > 1:
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(groups - 1)

    def group(k: int) -> None:
        rows = slice(k * g, (k + 1) * g)
        with torch.inference_mode():
            nxt = gstep(torch.from_numpy(hist_l[rows]).view(g, s, *c.latent_shape),
                        torch.from_numpy(hist_a[rows]), torch.from_numpy(act_t[rows]), ctx)
            nxt_all[rows] = nxt.reshape(g, -1).numpy()
            dec_all[rows] = gdec(nxt)[0].numpy()

    def one(t: int, w: int) -> int:
        ref.select_action(acts, mask, t, out=act_t)
        ref.ring_linearise(ring_l, ring_a, w, hist_l, hist_a)
        if pool is None:
            nxt = step(torch.from_numpy(hist_l).view(b, s, *c.latent_shape),
                       torch.from_numpy(hist_a), torch.from_numpy(act_t), ctx)
            nxt_all[:] = nxt.reshape(b, -1).numpy()
            dec_all[:] = dec(nxt)[0].numpy()
        else:
            futures = [pool.submit(group, k) for k in range(1, groups)]
            group(0)
            for f in futures:
                f.result()
        w = ref.ring_push(ring_l, ring_a, w, nxt_all, act_t, mask)
        ref.decode_frames(dec_all, None, out=frames[t])
        return w

    with torch.inference_mode():
        w = ref.ring_fill(ring_l, ring_a, z_start)
        first = time.perf_counter()
        w = one(0, w)
        first = time.perf_counter() - first
        for t in range(1, horizon):
            w = one(t, w)
        times = []
        for _ in range(runs):
            w = ref.ring_fill(ring_l, ring_a, z_start)
            t0 = time.perf_counter()
            for t in range(horizon):
                w = one(t, w)
            times.append(time.perf_counter() - t0)
        table = None
        if profile:
            from torch.profiler import ProfilerActivity
            from torch.profiler import profile as tprofile

            w = ref.ring_fill(ring_l, ring_a, z_start)
            with tprofile(activities=[ProfilerActivity.CPU]) as prof:
                for t in range(horizon):
                    w = one(t, w)
            table = [{"op": e.key, "calls_per_step": e.count / horizon,
                      "self_ms_per_step": e.self_cpu_time_total / 1e3 / horizon}
                     for e in prof.key_averages() if e.self_cpu_time_total > 0]
            table.sort(key=lambda r: -r["self_ms_per_step"])
    if pool is not None:
        pool.shutdown()
    torch.set_num_threads(threads)
    med = float(np.median(times))
    return {"fps": n * horizon / med, "step_ms": med / horizon * 1e3, "first_step_ms": first * 1e3,
            "run_s": times, "frames": frames[:, :n].transpose(1, 0, 2, 3, 4), "ops": table}


def _profile(model_dir: Path, n: int, horizon: int, threads: int, unoptimised: bool
             ) -> tuple[dict[tuple[str, str], dict[str, float]], float, int]:
    """Per (graph, operator): time (us), calls, FLOPs, bytes over two profiled rollouts;
    the second rollout's ms/step; the batch of the graphs."""
    import onnx

    eq = {}
    for f in model_dir.glob("*.onnx"):
        for node in onnx.load(str(f), load_external_data=False).graph.node:
            if node.op_type == "Einsum":
                eq[node.name] = onnx.helper.get_attribute_value(node.attribute[0]).decode()
    rows: dict[tuple[str, str], dict[str, float]] = collections.defaultdict(
        lambda: {"us": 0.0, "calls": 0, "flops": 0.0, "bytes": 0.0})
    with tempfile.TemporaryDirectory() as tmp:
        model = _model(model_dir, threads, before=False, profile_dir=tmp, fused=False,
                       unoptimised=unoptimised)
        try:
            start, actions, ctx = _inputs(model, n, horizon)
            r = Rollout(model, ctx, max_horizon=horizon, max_candidates=n)
            r.run(start, actions)
            t0 = time.perf_counter()
            r.run(start, actions)
            wall = time.perf_counter() - t0
            b = r.batch
            files = {k: model.runner(k)._session.end_profiling()
                     for k in (f"step_b{b}", f"decoder_b{b}")}
        finally:
            model.deactivate()
        for graph, path in files.items():
            for e in json.loads(Path(path).read_text()):
                if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
                    continue
                a = e["args"]
                op = a["op_name"]
                ins = _shape_list(a.get("input_type_shape"))
                outs = _shape_list(a.get("output_type_shape"))
                row = rows[(graph.split("_b")[0], op)]
                row["us"] += e["dur"]
                row["calls"] += 1
                row["flops"] += count_flops(op, ins, outs,
                                            {"equation": eq.get(e["name"][:-12], "")})
                row["bytes"] += 4.0 * sum(float(np.prod(s)) for s in ins + outs)
    return rows, wall / horizon * 1e3, b


def ort_op_table(model_dir: Path, n: int, horizon: int, threads: int) -> dict[str, Any]:
    """Per-operator times (optimised graphs, step and decoder in separate sessions so each
    operator is attributed to its graph) with FLOPs counted on
    the unoptimised graph (its own Conv/Einsum shapes; the optimised graph pads channels
    to the CPU's block size); memory-bound operators with bytes moved."""
    rows, wall, b = _profile(model_dir, n, horizon, threads, unoptimised=False)
    raw, _, _ = _profile(model_dir, n, horizon, threads, unoptimised=True)
    steps = 2 * horizon  # two profiled rollouts
    flops = collections.Counter()
    for (graph, op), row in raw.items():
        flops[(graph, "Conv" if "Conv" in op else op)] += row["flops"]
    table = []
    for (graph, op), row in rows.items():
        f = flops.get((graph, "Conv" if "Conv" in op else op), 0.0) if op in GEMM_OPS else 0.0
        table.append({"graph": graph, "op": op, "calls_per_step": row["calls"] / steps,
                      "ms_per_step": row["us"] / 1e3 / steps, "mflop_per_step": f / 1e6 / steps,
                      "mbyte_per_step": row["bytes"] / 1e6 / steps})
    table.sort(key=lambda r: -r["ms_per_step"])
    return {"batch": b, "rows": table, "profiled_step_ms": wall,
            "mflop_per_step_total": sum(flops.values()) / 1e6 / steps}


def _fmt_table(rows: list[dict], peak: float, n: int) -> list[str]:
    out = [f"  {'graph':<8} {'operator':<22} {'calls':>5} {'ms/step':>8} {'share':>6} "
           f"{'MFLOP/step':>10} {'GFLOP/s':>8} {'% peak':>6} {'GB/s':>6}"]
    total = sum(r["ms_per_step"] for r in rows)
    for r in rows[:18]:
        ms = r["ms_per_step"]
        gf = r["mflop_per_step"] / ms if ms and r["mflop_per_step"] else None
        gbs = r["mbyte_per_step"] / ms if ms and not r["mflop_per_step"] else None
        out.append(f"  {r['graph']:<8} {r['op']:<22} {r['calls_per_step']:>5.0f} {ms:>8.3f} "
                   f"{ms / total:>6.1%} {r['mflop_per_step']:>10.1f} "
                   f"{'' if gf is None else f'{gf:8.1f}':>8} "
                   f"{'' if gf is None else f'{gf / peak:6.1%}':>6} "
                   f"{'' if gbs is None else f'{gbs:6.2f}':>6}")
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; prints tables, writes JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=ROOT / "models/reference")
    ap.add_argument("--checkpoints", type=Path, default=ROOT / "models/reference-checkpoints")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--horizon", type=int, default=16)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/cpu_rollout.json")
    ap.add_argument("--idle-peak", type=float, default=260.0,
                    help="GFLOP/s of the 2-thread float32 GEMM on this CPU when idle (the "
                         "260-271 figure measured earlier); fractions are also given "
                         "against it, since a busy machine measures a lower peak")
    args = ap.parse_args(argv)
    if args.runs < 5:
        ap.error("--runs: at least 5 (the median of at least 5 runs)")
    load0 = os.getloadavg()
    peak = gemm_peak_gflops(args.threads)
    peak_best = max(peak.values())
    res: dict[str, Any] = {
        "command": "python bench/bench_cpu_rollout.py " + " ".join(argv or sys.argv[1:]),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpu": _cpu_name(), "cores": os.cpu_count(), "python": platform.python_version(),
                    "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE")},
        "versions": _versions(), "threads": args.threads, "horizon": args.horizon,
        "runs": args.runs, "model": str(args.model), "gemm_peak_gflops": peak,
        "idle_peak_gflops": args.idle_peak, "load_avg_1m_before": load0[0], "batches": {}}
    lines = []
    workers = default_candidate_workers("cpu", args.threads)
    res["candidate_workers"] = workers
    for n in args.batches:
        before = ort_rollout(args.model, n, args.horizon, args.runs, args.threads, before=True)
        ort = ort_rollout(args.model, n, args.horizon, args.runs, args.threads, workers=workers)
        one = ort_rollout(args.model, n, args.horizon, args.runs, args.threads)
        fused = ort_rollout(args.model, n, args.horizon, args.runs, args.threads, fused=False)
        tor = torch_rollout(args.checkpoints, args.model, n, args.horizon, args.runs,
                            args.threads, ort["start_latent"], ort["context"], ort["actions"],
                            profile=True)
        tgroups = len(ort["groups"])
        tor_g = torch_rollout(args.checkpoints, args.model, n, args.horizon, args.runs,
                              args.threads, ort["start_latent"], ort["context"], ort["actions"],
                              groups=tgroups) if tgroups > 1 else None
        diff = np.abs(ort["frames"].astype(int) - tor["frames"].astype(int))
        ops = ort_op_table(args.model, n, args.horizon, args.threads)
        gemm = [r for r in ops["rows"] if r["mflop_per_step"] > 0]
        gemm_ms = sum(r["ms_per_step"] for r in gemm)
        gemm_mflop = sum(r["mflop_per_step"] for r in gemm)
        step_mflop = ops["mflop_per_step_total"]
        keys = ("fps", "step_ms", "first_step_ms", "run_s")
        row = {"batch_graph": ort["batch"], "candidate_groups": ort["groups"],
               "ort": {k: ort[k] for k in keys},
               "ort_one_session": {k: one[k] for k in keys},
               "ort_one_session_frames_max_abs_diff_u8": int(np.abs(
                   one["frames"].astype(int) - ort["frames"].astype(int)).max()),
               "torch_groups": {k: tor_g[k] for k in keys} if tor_g else None,
               "torch_groups_frames_max_abs_diff_u8": int(np.abs(
                   tor_g["frames"].astype(int) - tor["frames"].astype(int)).max())
               if tor_g else None,
               "ort_vs_torch_groups": ort["fps"] / tor_g["fps"] if tor_g else None,
               "ort_one_session_vs_torch": one["fps"] / tor["fps"],
               "ort_before": {k: before[k] for k in ("fps", "step_ms", "first_step_ms", "run_s")},
               "ort_unfused": {k: fused[k] for k in ("fps", "step_ms", "first_step_ms", "run_s")},
               "ort_unfused_frames_max_abs_diff_u8": int(np.abs(
                   fused["frames"].astype(int) - ort["frames"].astype(int)).max()),
               "torch": {k: tor[k] for k in ("fps", "step_ms", "first_step_ms", "run_s")},
               "ort_vs_torch": ort["fps"] / tor["fps"],
               "ort_before_vs_torch": before["fps"] / tor["fps"],
               "frames_max_abs_diff_u8": int(diff.max()),
               "frames_fraction_differing": float((diff > 0).mean()),
               "mflop_per_step": step_mflop,
               "step_fraction_of_peak": step_mflop / ort["step_ms"] / peak_best,
               "step_fraction_of_idle_peak": step_mflop / ort["step_ms"] / args.idle_peak,
               "gemm_ops_fraction_of_idle_peak": (gemm_mflop / gemm_ms / args.idle_peak)
               if gemm_ms else None,
               "gemm_ops_ms_per_step": gemm_ms,
               "gemm_ops_fraction_of_peak": (gemm_mflop / gemm_ms / peak_best)
               if gemm_ms else None,
               "ort_ops": ops, "torch_ops": (tor["ops"] or [])[:25]}
        res["batches"][str(n)] = row
        split = ", ".join("+".join(f"b{s}" for _, s in g) for g in ort["groups"])
        lines.append(f"batch {n} (graphs b{ort['batch']}; {len(ort['groups'])} candidate "
                     f"group(s): {split}): ONNX Runtime {ort['fps']:.1f} frames/s "
                     f"({ort['step_ms']:.2f} ms/step, first step {ort['first_step_ms']:.2f} ms); "
                     f"one session {one['fps']:.1f}; before {before['fps']:.1f}; not fused "
                     f"{fused['fps']:.1f}; eager PyTorch {tor['fps']:.1f} "
                     f"({tor['step_ms']:.2f} ms/step, first {tor['first_step_ms']:.2f} ms); "
                     f"ratio {row['ort_vs_torch']:.2f}x (target >= {TARGETS['ort_vs_torch']}x; "
                     f"one session {row['ort_one_session_vs_torch']:.2f}x); "
                     f"frames max |diff| {row['frames_max_abs_diff_u8']} u8 levels")
        if tor_g:
            lines.append(f"  eager PyTorch in the same {len(ort['groups'])} groups: "
                         f"{tor_g['fps']:.1f} frames/s; ONNX Runtime / it "
                         f"{row['ort_vs_torch_groups']:.2f}x")
        lines.append(f"  {step_mflop:.1f} MFLOP/step (conv/matmul): step at "
                     f"{row['step_fraction_of_peak']:.1%} of the {peak_best:.0f} GFLOP/s GEMM "
                     f"peak measured in this run ({row['step_fraction_of_idle_peak']:.1%} of "
                     f"the idle {args.idle_peak:.0f}); conv/matmul operators at "
                     f"{(row['gemm_ops_fraction_of_peak'] or 0):.1%} of it while they run "
                     f"({(row['gemm_ops_fraction_of_idle_peak'] or 0):.1%} of the idle peak)")
        lines.append(f"  ONNX Runtime per operator (profiled run: "
                     f"{ops['profiled_step_ms']:.2f} ms/step):")
        lines.extend(_fmt_table(ops["rows"], peak_best, n))
        lines.append("  eager PyTorch per operator (self CPU, profiled run):")
        for r in row["torch_ops"][:10]:
            lines.append(f"    {r['op']:<40} {r['calls_per_step']:>5.0f} {r['self_ms_per_step']:>8.3f} ms")
    if "1" in res["batches"] and "16" in res["batches"]:
        b1, b16 = res["batches"]["1"], res["batches"]["16"]
        res["batch16_per_candidate_ratio"] = b16["ort"]["fps"] / b1["ort"]["fps"]
        lines.append(f"batch 16 / batch 1 per-candidate throughput: "
                     f"{res['batch16_per_candidate_ratio']:.2f}x (target >= "
                     f"{TARGETS['batch16_per_candidate']}x)")
    res["load_avg_1m_after"] = os.getloadavg()[0]
    res["targets"] = TARGETS
    head = (f"CPU rollout, {args.threads} threads, horizon {args.horizon}, median of "
            f"{args.runs}; GEMM peak {peak_best:.0f} GFLOP/s ({', '.join(f'{k} {v:.0f}' for k, v in peak.items())}); "
            f"load average (1 min) {load0[0]:.2f} before, {res['load_avg_1m_after']:.2f} after")
    print(head)
    print("\n".join(lines))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


def _cpu_name() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    m = re.search(r"model name\s*:\s*(.+)", text)
    return m.group(1).strip() if m else platform.processor()


def _versions() -> dict[str, str]:
    import onnxruntime
    import torch

    return {"onnxruntime": onnxruntime.__version__, "torch": torch.__version__,
            "numpy": np.__version__}


if __name__ == "__main__":
    sys.exit(main())
