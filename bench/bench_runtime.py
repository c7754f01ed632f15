"""Benchmark of the edge runtime (issue targets in docs/runtime.md, "Benchmark").

    python bench/bench_runtime.py --model DIR [--threads 2] [--horizon 32] [--out FILE.json]
    python bench/bench_runtime.py --synthetic contract   # no model yet: a synthetic one

Measures, on the given backend (default ONNX Runtime CPU):

1. rollout frames/s at batch 1 and at the largest exported batch (16 for the reference
   model), and the per-candidate throughput ratio;
2. time to the first predicted frame from a cold process with a cached context
   (a subprocess: imports, model load, context read, encode start, one step);
3. time to obtain the context: read from the calibration cache vs re-encoded from the
   calibration episode (encoder + calibration graphs);
4. peak resident memory of a ``simulate`` subprocess;
5. the PyTorch step-by-step comparison, through :func:`torch_step_by_step_fps` (n/a
   where torch is not installed).

Prints a table and writes JSON. ``--synthetic tiny|contract`` writes a synthetic model
(``tests/fixtures/tiny_model.py``) first: ``tiny`` = the test sizes, ``contract`` = the
reference model's expected sizes (64x64, latent 8x16x16, S=4, A=K=7, L=8, D=16, batches
1 and 16) with random weights, so throughput figures are indicative only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edge.cache.store import CalibrationCache  # noqa: E402
from edge.cache.values import CacheKey  # noqa: E402
from edge.episode import Episode, EpisodeMetadata, save_episode  # noqa: E402
from edge.runtime.context import CalibrationContext, encode_calibration  # noqa: E402
from edge.runtime.model import WorldModel, load_model  # noqa: E402
from edge.runtime.rollout import Rollout  # noqa: E402

__all__ = ["main", "rollout_fps", "torch_step_by_step_fps"]


def torch_step_by_step_fps(model_dir: Path, batch: int, horizon: int,
                           threads: int, repeats: int = 3) -> float | None:
    """PyTorch step-by-step rollout frames/s of the same model, or None without torch.

    Loads the PyTorch checkpoints named in ``model.json``'s provenance (``run``) when they
    exist, else builds the same architecture from the recorded configuration (random
    weights run the same arithmetic). Same thread count, ``torch.inference_mode()``, the
    same ring buffer (``kernels.reference``) and uint8 conversion as :func:`rollout_fps`:
    per step the step network and the decoder. Returns ``batch * horizon / seconds``.
    """
    try:
        import torch

        from export.evaluation.zero_shot import load_world_model
        from export.models.latent import ModelConfig
        from export.models.latent import WorldModel as TorchWorldModel
    except ImportError:
        return None
    from edge.manifest import load_manifest
    from kernels.reference import decode_frames, ring_fill, ring_linearise, ring_push

    man = load_manifest(model_dir / "model.json")
    run = man.provenance.get("run")
    if man.contract.family == "warp":
        from export.models.warp import WarpConfig, WarpModel

        net = WarpModel(WarpConfig.from_dict(man.provenance["config"])).eval()
    elif run and (Path(run) / "dynamics.pt").is_file():
        net = load_world_model(run)
    elif "config" in man.provenance:
        net = TorchWorldModel(ModelConfig.from_dict(man.provenance["config"])).eval()
    else:
        return None
    torch.set_num_threads(threads)
    c = man.contract
    ch, lh, lw = c.latent_shape
    s, a = c.history_length, c.max_dof
    h, w = c.resolution
    rng = np.random.default_rng(0)
    start = rng.integers(0, 256, (batch, h, w, 3), dtype=np.uint8)
    actions = rng.normal(0, 0.02, (batch, horizon, a)).astype(np.float32)
    ring_l = np.zeros((batch, s, ch * lh * lw), np.float32)
    ring_a = np.zeros((batch, s, a), np.float32)
    hist_l, hist_a = np.empty_like(ring_l), np.empty_like(ring_a)
    mask = np.ones(a, np.uint8)
    best = float("inf")

    def dec(z: torch.Tensor) -> torch.Tensor:
        out = net.decoder(z)
        return out[0] if isinstance(out, tuple) else out  # the warp decoder adds its mask

    with torch.inference_mode():
        ctx = torch.from_numpy(rng.normal(0, 0.1, c.context_shape).astype(np.float32))
        for rep in range(repeats + 1):  # the first run warms up
            t0 = time.perf_counter()
            x = torch.from_numpy(start).permute(0, 3, 1, 2)
            z0 = net.encoder(x)
            offset = np.ascontiguousarray((x.float() / 255.0 - dec(z0)).numpy())
            wi = ring_fill(ring_l, ring_a, z0.reshape(batch, -1).numpy())
            for t in range(horizon):
                ring_linearise(ring_l, ring_a, wi, hist_l, hist_a)
                nxt = net.step(torch.from_numpy(hist_l).reshape(batch, s, ch, lh, lw),
                               torch.from_numpy(hist_a), torch.from_numpy(actions[:, t]), ctx)
                decode_frames(dec(nxt).numpy(), offset if c.residual_decoding else None)
                wi = ring_push(ring_l, ring_a, wi, nxt.reshape(batch, -1).numpy(),
                               actions[:, t], mask)
            if rep:
                best = min(best, time.perf_counter() - t0)
    return batch * horizon / best


def _calibration_episode(model: WorldModel, seed: int = 0) -> Episode:
    c = model.contract
    rng = np.random.default_rng(seed)
    t, a = c.calibration_frames, c.max_dof
    h, w = c.resolution
    actions = np.zeros((t, a), np.float32)
    for k in range(a):
        actions[k * c.segment_frames:k * c.segment_frames + 3, k] = [0.1, 0.2, 0.1]
    meta = EpisodeMetadata(cell_id="bench", camera_id="cam", robot_id="rob", robot="bench",
                           dof_names=tuple(f"j{i}" for i in range(a)),
                           dof_units=("rad",) * a, fps=c.frame_rate_hz, kind="calibration",
                           source="bench")
    return Episode(rng.integers(0, 256, (t, h, w, 3), dtype=np.uint8), actions,
                   np.arange(t) / c.frame_rate_hz, meta)


def rollout_fps(model: WorldModel, ctx: CalibrationContext, n: int, horizon: int,
                repeats: int = 3) -> float:
    """Predicted candidate frames/s of a rollout of ``n`` candidates (best of ``repeats``)."""
    h, w = model.contract.resolution
    rng = np.random.default_rng(0)
    start = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    actions = rng.normal(0, 0.02, (n, horizon, model.contract.max_dof)).astype(np.float32)
    r = Rollout(model, ctx, max_horizon=horizon, max_candidates=n)
    r.run(start, actions)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        r.reset(start, actions)
        t0 = time.perf_counter()
        for _ in range(horizon):
            r.step()
        best = min(best, time.perf_counter() - t0)
    return n * horizon / best


_COLD = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
from edge.runtime.model import load_model
from edge.cache.store import CalibrationCache
from edge.runtime.context import CalibrationContext
from edge.runtime.rollout import Rollout
model = load_model(sys.argv[1], intra_op_num_threads=int(sys.argv[3]))
t1 = time.perf_counter()
with CalibrationCache(sys.argv[2]) as cache:
    ctx = CalibrationContext(cache.get_context("bench", "cam", "rob", model.sha256),
                             model.sha256)
h, w = model.contract.resolution
r = Rollout(model, ctx, max_horizon=1)
r.reset(np.zeros((h, w, 3), np.uint8), np.zeros((1, model.contract.max_dof), np.float32))
r.step()
t2 = time.perf_counter()
print(json.dumps({"import_and_load_s": t1 - t0, "context_to_first_frame_s": t2 - t1,
                  "in_process_s": t2 - t0}))
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def cold_first_frame(model_dir: Path, cache_root: Path, threads: int) -> dict:
    """Wall time from spawning a fresh interpreter to its first predicted frame."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _COLD, str(model_dir), str(cache_root),
                          str(threads)], capture_output=True, text=True, check=True,
                         env=_env(), cwd=ROOT)
    wall = time.perf_counter() - t0
    d = json.loads(out.stdout.strip().splitlines()[-1])
    d["process_wall_s"] = wall
    return d


def simulate_peak_rss(model_dir: Path, work: Path, threads: int) -> dict:
    """Peak RSS (MiB) and wall time of ``simulate`` on a calibration + motion episode."""
    cmd = [sys.executable, "-m", "edge.commands.simulate", "--calibration",
           str(work / "cal.npz"), "--start", str(work / "motion.npz"), "--model",
           str(model_dir), "--threads", str(threads), "--out", str(work / "sim")]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=_env(), cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"simulate failed: {proc.stderr.read().decode()}")
    proc.stderr.close()
    return {"peak_rss_mib": usage.ru_maxrss / 1024.0, "wall_s": wall}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; prints a table, writes JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, help="model folder (model.json + graphs)")
    ap.add_argument("--synthetic", choices=("tiny", "contract"),
                    help="write a synthetic model of these sizes instead of --model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--horizon", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("bench_runtime.json"))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-runtime-") as tmp:
        work = Path(tmp)
        model_dir = args.model
        if model_dir is None:
            from tests.fixtures.tiny_model import TinySizes, write_tiny_model

            sizes = TinySizes() if args.synthetic != "contract" else TinySizes(
                64, 64, 8, 16, 16, history=4, dof=7, segment=8, ctx_dim=16, batches=(1, 16))
            model_dir = write_tiny_model(work / "model", sizes)
        model = load_model(model_dir, intra_op_num_threads=args.threads)
        c = model.contract
        cal = _calibration_episode(model)
        save_episode(cal, work / "cal.npz")
        t0 = time.perf_counter()
        ctx = encode_calibration(model, cal)
        encode_s = time.perf_counter() - t0
        np.save(work / "ctx.npy", ctx.values)
        with CalibrationCache(work / "cache") as cache:
            cache.put(CacheKey("bench", "cam", "rob", model.sha256), cal, ctx.values,
                      {"verdict": "pass"}, cal.frames[0])
        t0 = time.perf_counter()
        with CalibrationCache(work / "cache") as cache:  # opened cold, as on the device
            values = cache.get_context("bench", "cam", "rob", model.sha256)
        cached = CalibrationContext(values, model.sha256, c.max_dof)
        read_s = time.perf_counter() - t0
        assert np.array_equal(cached.values, ctx.values)
        motion = Episode(cal.frames[:min(17, len(cal.frames))].copy(),
                         cal.actions[:min(17, len(cal.frames))].copy(),
                         cal.timestamps[:min(17, len(cal.frames))].copy(), cal.metadata)
        save_episode(motion, work / "motion.npz")
        big = max(model.batch_sizes)
        fps1 = rollout_fps(model, ctx, 1, args.horizon, args.repeats)
        fpsb = rollout_fps(model, ctx, big, args.horizon, args.repeats)
        torch_fps = torch_step_by_step_fps(Path(model_dir), 1, args.horizon, args.threads,
                                           args.repeats)
        model.deactivate()
        cold = cold_first_frame(Path(model_dir), work / "cache", args.threads)
        sim = simulate_peak_rss(Path(model_dir), work, args.threads)
    res = {
        "model": str(args.model or f"synthetic:{args.synthetic or 'tiny'}"),
        "resolution": list(c.resolution), "latent_shape": list(c.latent_shape),
        "history": c.history_length, "max_dof": c.max_dof, "threads": args.threads,
        "horizon": args.horizon, "backend": "cpu",
        "fps_batch1": fps1, f"fps_batch{big}": fpsb, "batch_max": big,
        "per_candidate_ratio": fpsb / fps1,
        "torch_step_by_step_fps_batch1": torch_fps,
        "torch_step_by_step_note": None if torch_fps is not None else
        "not measured: torch is not installed (pip install '.[train]')",
        "onnx_vs_torch_ratio": None if not torch_fps else fps1 / torch_fps,
        "cold_first_frame": cold,
        "context_read_s": read_s, "context_encode_s": encode_s,
        "context_speedup": encode_s / max(read_s, 1e-9),
        "simulate": sim,
    }
    rows = [
        ("rollout frames/s, batch 1", f"{fps1:.1f}", ">= 60 (64x64, FP32, 2 cores)"),
        (f"rollout frames/s, batch {big}", f"{fpsb:.1f}", ""),
        ("per-candidate ratio", f"{fpsb / fps1:.2f}x", ">= 4x"),
        ("PyTorch step-by-step frames/s", "n/a (torch not installed)" if torch_fps is None
         else f"{torch_fps:.1f}", "ONNX >= 3x"),
        ("cold process to first frame", f"{cold['process_wall_s']:.3f} s", "< 1 s"),
        ("  of which in-process", f"{cold['in_process_s']:.3f} s", ""),
        ("context read (calibration cache)", f"{read_s * 1e3:.2f} ms", ""),
        ("context re-encoded", f"{encode_s * 1e3:.2f} ms", ""),
        ("context speed-up", f"{encode_s / max(read_s, 1e-9):.0f}x", ">= 10x"),
        ("simulate peak RSS", f"{sim['peak_rss_mib']:.0f} MiB", "< 500 MB"),
    ]
    print(f"model {res['model']}  {c.resolution[0]}x{c.resolution[1]}  threads {args.threads}")
    for name, value, target in rows:
        print(f"  {name:<32} {value:>14}   {target}")
    args.out.write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
