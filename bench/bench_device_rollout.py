"""The GPU rollout of the shipped model: CUDA-graph replay against eager launches.

    python bench/bench_device_rollout.py [--model models/reference]
        [--checkpoints models/reference-checkpoints] [--horizon 16] [--runs 5]
        [--batches 1 16] [--out bench_device_rollout.json]

Needs an NVIDIA GPU, pycuda (the rollout kernels' launcher) and PyTorch with CUDA: TensorRT
cannot be installed on the machines this project has, so the step and decoder run as the
checkpoint's PyTorch modules on the GPU (``bench/torch_executor.py``) behind the same
``DeviceExecutor`` interface the TensorRT engines implement, around the real kernels and
``edge.runtime.cuda_step.CudaRolloutStep``. Per batch: step latency (ms, median of ``--runs``
rollouts of ``--horizon`` steps after one warm-up rollout, synchronised at the end) with
eager launches and with the captured graph, the graph's memcpy nodes and kernel nodes,
host copies per step (``edge.runtime.device_copies``), and the frames' max |difference| (uint8
levels) against the CPU rollout (ONNX Runtime, ``Rollout``) from the same start latent,
context and actions, and, as the device path runs it for a model with a robot mask, the
per-step count of robot-mask pixels >= 0.5 inside a keep-out mask (the right 40% of the
frame) against the CPU rollout's counts (``robot_counts_max_abs_diff``, pixels). TF32 is
off. Prints a table and writes JSON; exits 2 without a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

__all__ = ["main"]


def right_keepout(h: int, w: int) -> np.ndarray:
    """The keep-out mask of this benchmark: uint8 ``[h, w]``, 1 in the right 40% columns."""
    keep = np.zeros((h, w), np.uint8)
    keep[:, int(round(0.6 * w)):] = 1
    return keep


def _cpu_reference(model_dir: Path, n: int, horizon: int,
                   keepout: np.ndarray | None = None) -> dict[str, Any]:
    from edge.episode import load_episode
    from edge.runtime.context import encode_calibration
    from edge.runtime.model import load_model
    from edge.runtime.rollout import Rollout

    model = load_model(model_dir, intra_op_num_threads=4)
    try:
        cal = load_episode(ROOT / "samples/cell_sample/calibration.npz")
        test = load_episode(ROOT / "samples/cell_sample/test.npz")
        ctx = encode_calibration(model, cal)
        c = model.contract
        acts = np.zeros((n, horizon, c.max_dof), np.float32)
        k = min(horizon, len(test.actions))
        scale = np.linspace(0.5, 1.5, n, dtype=np.float32)[:, None, None]
        acts[:, :k, :test.actions.shape[1]] = test.actions[None, :k] * scale
        r = Rollout(model, ctx, max_horizon=horizon, max_candidates=n, keepout=keepout)
        frames = r.run(test.frames[0], acts)
        # the latent the steps start from: encoded, then prepared once (prepare_b1) where
        # the model has prepare graphs, as Rollout.reset does
        z0 = model.encode(test.frames[0]).reshape(1, *c.latent_shape)
        z0 = model.prepare(1, z0, ctx.values, np.empty_like(z0)).reshape(1, -1)
        return {"frames": frames, "z0": z0, "context": ctx.values, "actions": acts,
                "start": test.frames[0], "contract": c, "batch": r.batch,
                "keepout": keepout,
                "robot_counts": None if keepout is None else r.robot_keepout_counts()}
    finally:
        model.deactivate()


def device_modules(model_dir: Path, checkpoints: Path, batch: int) -> dict[str, Any]:
    """The PyTorch modules standing in for the engines of ``model_dir`` at ``batch``
    (:func:`export.variants.warp_export.warp_graph_modules`), built from ``checkpoints`` the
    way the model was exported: with the per-DoF flow fields in the state where the model
    has prepare graphs (its latent then has their channels too).

    Raises:
        ValueError: the modules' step or decoder shapes differ from the model's graphs.
    """
    from edge.manifest import load_model_dir
    from export.variants.warp_export import load_warp_model, warp_graph_modules

    manifest = load_model_dir(model_dir, verify=False)
    mods = warp_graph_modules(load_warp_model(checkpoints,
                                              joint_fields_in_state=manifest.has_prepare),
                              (batch,))
    for name in (f"step_b{batch}", f"decoder_b{batch}"):
        got = [tuple(t.shape) for t in mods[name][2]]
        want = [tuple(t.shape) for t in manifest.graphs[name].outputs]
        if got != want:
            raise ValueError(f"{checkpoints}: the {name} module's outputs {got} differ from "
                             f"{model_dir}'s graph outputs {want}")
    return mods


def _one_batch(launcher: Any, mods: dict, ref: dict, horizon: int, runs: int) -> dict[str, Any]:
    import torch

    from bench.torch_executor import TorchExecutor
    from edge.runtime.cuda_step import CudaRolloutStep, StepShapes
    from edge.runtime.device_copies import copy_counts

    c, b, n = ref["contract"], ref["batch"], len(ref["actions"])
    ch, lh, lw = c.latent_shape
    h, w = c.resolution
    s, a = c.history_length, c.max_dof
    step_mod = mods[f"step_b{b}"][0].cuda().eval()
    dec_mod = mods[f"decoder_b{b}"][0].cuda().eval()
    step_exec = TorchExecutor(step_mod, [("history_latents", (b, s, ch, lh, lw)),
                                         ("history_actions", (b, s, a)), ("action", (b, a)),
                                         ("context", tuple(c.context_shape))],
                              [("next_latent", (b, ch, lh, lw))])
    dec_exec = TorchExecutor(dec_mod, [("latents", (b, ch, lh, lw))],
                             [("frames", (b, 3, h, w)), ("robot_mask", (b, 1, h, w))])
    ctx = torch.from_numpy(ref["context"]).cuda()
    torch.cuda.synchronize()
    shapes = StepShapes(batch=b, slots=s, latent_shape=(ch, lh, lw), action=a, height=h,
                        width=w, horizon=horizon)
    acts = np.zeros((b, horizon, a), np.float32)
    acts[:n] = ref["actions"]
    z0 = np.repeat(ref["z0"], b, axis=0)
    out: dict[str, Any] = {"graph_batch": b, "candidates": n}
    for mode in ("eager", "graph"):
        row: dict[str, Any] = {}
        try:
            keepout = ref.get("keepout")
            with CudaRolloutStep(launcher, step_exec, dec_exec, shapes,
                                 use_graph=mode == "graph",
                                 robot_mask=keepout is not None) as step:
                times = []
                for i in range(runs + 1):
                    step.reset(z0, acts, np.ones(a, np.uint8), ref["start"],
                               np.zeros((h, w), np.uint8) if keepout is None else keepout, 0,
                               extra_inputs={"context": ctx.data_ptr()})
                    c0 = copy_counts()
                    t0 = time.perf_counter()
                    step.run()
                    launcher.synchronize()
                    dt = time.perf_counter() - t0
                    copies = copy_counts() - c0
                    if i:
                        times.append(dt)
                res = step.outputs()
                frames = res.frames[:, :n].transpose(1, 0, 2, 3, 4)
                diff = np.abs(frames.astype(int) - ref["frames"].astype(int))
                if res.robot_in_keepout is not None and ref.get("robot_counts") is not None:
                    counts = res.robot_in_keepout[:, :n].T.astype(int)
                    row["robot_counts"] = counts.tolist()
                    row["robot_counts_max_abs_diff"] = int(
                        np.abs(counts - ref["robot_counts"].astype(int)).max())
                row.update(step_ms=float(np.median(times)) / horizon * 1e3,
                           run_s=times, host_copies_per_step=copies.total / horizon,
                           memcpy_nodes_per_step=step.memcpy_nodes_per_step,
                           node_counts=dict(step.node_counts),
                           frames_max_abs_diff_u8=int(diff.max()),
                           frames_fraction_differing=float((diff > 0).mean()))
        except Exception as exc:  # report what failed (e.g. capture of the torch ops)
            row["error"] = f"{type(exc).__name__}: {exc}"
            row["traceback"] = traceback.format_exc(limit=6)
        out[mode] = row
    e, g = out["eager"].get("step_ms"), out["graph"].get("step_ms")
    out["graph_speedup"] = e / g if e and g else None
    return out


def main(argv: list[str] | None = None) -> int:
    """Run on a GPU; prints a table, writes JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=ROOT / "models/reference")
    ap.add_argument("--checkpoints", type=Path, default=ROOT / "models/reference-checkpoints")
    ap.add_argument("--horizon", type=int, default=16)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--out", type=Path, default=Path("bench_device_rollout.json"))
    args = ap.parse_args(argv)
    from edge.manifest import load_model_dir

    # one captured step runs one graph batch: refuse a batch no step graph holds up front
    manifest = load_model_dir(args.model, verify=False)
    graph_batches = list(manifest.batch_sizes)
    bad = [n for n in args.batches if n < 1 or not graph_batches or n > graph_batches[-1]]
    if bad:
        print(f"bench_device_rollout: --batches {bad}: {args.model} has step graphs for "
              f"batches {graph_batches}; give batches from 1 to "
              f"{graph_batches[-1] if graph_batches else '?'}", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        print("bench_device_rollout: needs PyTorch with CUDA", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("bench_device_rollout: no CUDA GPU visible to PyTorch", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    from kernels.launcher import KernelLauncher

    res: dict[str, Any] = {"command": "python bench/bench_device_rollout.py "
                           + " ".join(argv or sys.argv[1:]),
                           "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                           "executors": "PyTorch modules (bench/torch_executor.py); no TensorRT",
                           "horizon": args.horizon, "runs": args.runs, "batches": {}}
    with KernelLauncher() as launcher:
        res["kernel_load_path"] = launcher.load_path
        for n in args.batches:
            h, w = manifest.contract.resolution
            ref = _cpu_reference(args.model, n, args.horizon, right_keepout(h, w))
            mods = device_modules(args.model, args.checkpoints, ref["batch"])
            res["batches"][str(n)] = _one_batch(launcher, mods, ref, args.horizon, args.runs)
    print(f"GPU rollout, {res['gpu']}, kernels from {res['kernel_load_path']}, "
          f"horizon {args.horizon}, median of {args.runs}")
    print(f"  {'batch':>5} {'mode':<6} {'ms/step':>8} {'memcpy nodes':>12} "
          f"{'host copies/step':>16} {'max |diff| u8':>13} {'robot px |diff|':>15}")
    for n, row in res["batches"].items():
        for mode in ("eager", "graph"):
            r = row[mode]
            if "error" in r:
                print(f"  {n:>5} {mode:<6} failed: {r['error']}")
                continue
            print(f"  {n:>5} {mode:<6} {r['step_ms']:>8.3f} {str(r['memcpy_nodes_per_step']):>12} "
                  f"{r['host_copies_per_step']:>16.2f} {r['frames_max_abs_diff_u8']:>13} "
                  f"{str(r.get('robot_counts_max_abs_diff')):>15}")
        if row["graph_speedup"]:
            print(f"  {n:>5} graph replay {row['graph_speedup']:.2f}x faster than eager launch")
    args.out.write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    failed = any("error" in row[m] for row in res["batches"].values() for m in ("eager", "graph"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
