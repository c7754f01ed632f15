"""Benchmark of the GPU rollout step: steps/s with and without CUDA graphs, memcpy nodes.

    python bench/bench_kernels.py [--out results.json] [--steps 64] [--repeats 5]

On an NVIDIA GPU (pycuda installed) the step and decoder are a toy linear model run by
pycuda kernels (TensorRT engines stand in for them on a device), around the real rollout
kernels; the first rollout's outputs are checked against the NumPy twin. Without a GPU
it benchmarks the NumPy reference rollout and says so. Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels import reference as ref  # noqa: E402

__all__ = ["ToyModel", "cpu_rollout", "main", "make_inputs"]

# Toy model, written with explicitly rounded float32 operations so the GPU and the
# NumPy twin agree bit for bit:
#   next[b, l] = 0.5 * (h[b, S-1, l] + h[b, 0, l]) + 0.01 * sum_a act[b, a] * ((l + a) % 7 - 3)
#   frame[b, c, y, x] = 0.25 * z[b, c % C, y * h // H, x * w // W] + 0.5
_TOY_SOURCE = r"""
extern "C" __global__ void toy_step(float* out, const float* hist, const float* act,
                                    int B, int S, int L, int A) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)B * L) return;
    long long b = i / L; int l = (int)(i % L);
    float v = __fmul_rn(0.5f, __fadd_rn(hist[(b * S + S - 1) * L + l], hist[(b * S) * L + l]));
    float acc = 0.0f;
    for (int a = 0; a < A; ++a)
        acc = __fadd_rn(acc, __fmul_rn(act[b * A + a], (float)((l + a) % 7 - 3)));
    out[i] = __fadd_rn(v, __fmul_rn(0.01f, acc));
}
extern "C" __global__ void toy_decode(float* frames, const float* z, int B, int C, int h, int w,
                                      int H, int W) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)B * 3 * H * W) return;
    int x = (int)(i % W); int y = (int)((i / W) % H); int c = (int)((i / ((long long)H * W)) % 3);
    long long b = i / (3LL * H * W);
    float v = z[((b * C + c % C) * h + y * h / H) * w + x * w / W];
    frames[i] = __fadd_rn(__fmul_rn(0.25f, v), 0.5f);
}
"""


class ToyModel:
    """Toy step and decoder: pycuda executors (``step_executor``/``decoder_executor``)
    and their NumPy twins (``step``/``decode``). Shapes as in ``edge.runtime.cuda_step.StepShapes``."""

    def __init__(self, shapes, launcher=None):
        self.shapes = shapes
        self._launcher = launcher
        if launcher is not None:
            from pycuda.compiler import SourceModule

            self._mod = SourceModule(_TOY_SOURCE, no_extern_c=True, options=["--fmad=false"])
            self._step = self._mod.get_function("toy_step")
            self._step.prepare("PPPiiii")
            self._dec = self._mod.get_function("toy_decode")
            self._dec.prepare("PPiiiiii")

    def step(self, hist_latents, action):
        """NumPy twin: hist float32 [B, S, L], action [B, A] -> float32 [B, L]."""
        s = self.shapes
        coef = (((np.arange(s.latent)[None, :] + np.arange(s.action)[:, None]) % 7) - 3).astype(
            np.float32
        )  # (A, L)
        v = np.float32(0.5) * (hist_latents[:, -1] + hist_latents[:, 0])
        acc = np.zeros((s.batch, s.latent), np.float32)
        for a in range(s.action):
            acc = acc + action[:, a : a + 1] * coef[a][None, :]
        return v + np.float32(0.01) * acc

    def decode(self, z):
        """NumPy twin: z float32 [B, L] -> float32 [B, 3, H, W]."""
        s = self.shapes
        c, h, w = s.latent_shape
        zz = z.reshape(s.batch, c, h, w)
        ys = np.arange(s.height) * h // s.height
        xs = np.arange(s.width) * w // s.width
        chans = np.arange(3) % c
        up = zz[:, chans][:, :, ys][:, :, :, xs]  # (B, 3, H, W), nearest upsampling
        return np.ascontiguousarray(np.float32(0.25) * up + np.float32(0.5))

    def _launch(self, fn, n, stream_handle, *args):
        grid = ((n + 255) // 256, 1)
        # The executors receive a raw stream handle: use the launcher's own Stream object
        # when it is the same stream (always, here).
        assert stream_handle == self._launcher.stream_handle
        fn.prepared_async_call(grid, (256, 1, 1), self._launcher.stream, *args)

    @property
    def step_executor(self):
        """DeviceExecutor running the toy step."""
        model = self

        class _Step:
            def enqueue(self, inputs, outputs, stream_handle):
                s = model.shapes
                model._launch(model._step, s.batch * s.latent, stream_handle,
                              outputs["next_latent"], inputs["history_latents"],
                              inputs["action"], s.batch, s.slots, s.latent, s.action)  # fmt: skip

        return _Step()

    @property
    def decoder_executor(self):
        """DeviceExecutor running the toy decoder."""
        model = self

        class _Dec:
            def enqueue(self, inputs, outputs, stream_handle):
                s = model.shapes
                c, h, w = s.latent_shape
                model._launch(model._dec, s.batch * 3 * s.height * s.width, stream_handle,
                              outputs["frames"], inputs["latents"], s.batch, c, h, w, s.height,
                              s.width)  # fmt: skip

        return _Dec()


def make_inputs(shapes, seed=0):
    """Random rollout inputs for ``shapes`` (dict of NumPy arrays)."""
    rng = np.random.default_rng(seed)
    s = shapes
    return {
        "start_latent": rng.uniform(-1, 1, (s.batch, s.latent)).astype(np.float32),
        "actions": rng.uniform(-0.5, 0.5, (s.batch, s.horizon, s.action)).astype(np.float32),
        "dof_mask": (np.arange(s.action) % 4 != 3).astype(np.uint8),
        "start_frame": rng.integers(0, 256, (s.height, s.width, 3), dtype=np.uint8),
        "keepout": (rng.random((s.height, s.width)) < 0.25).astype(np.uint8),
        "threshold": 8,
        "goal": rng.integers(0, 256, (s.height, s.width, 3), dtype=np.uint8),
    }


def cpu_rollout(model, inputs):
    """The rollout with the NumPy reference kernels: (frames [T,B,H,W,3], moved, energy, goal)."""
    s = model.shapes
    rl = np.empty((s.batch, s.slots, s.latent), np.float32)
    ra = np.empty((s.batch, s.slots, s.action), np.float32)
    w = ref.ring_fill(rl, ra, inputs["start_latent"])
    hl, ha = ref.ring_linearise(rl, ra, w)
    frames, moved, energy, goal = [], [], [], []
    for t in range(inputs["actions"].shape[1]):
        act = ref.select_action(inputs["actions"], inputs["dof_mask"], t)
        z = model.step(hl, act)
        w = ref.ring_push_linearise(rl, ra, hl, ha, w, z, act, inputs["dof_mask"])
        f = ref.decode_frames(model.decode(z))
        sc = ref.precheck_scores(f, inputs["start_frame"], inputs["keepout"],
                                 inputs["threshold"], inputs["goal"])  # fmt: skip
        frames.append(f)
        moved.append(sc.moved_in_keepout)
        energy.append(sc.motion_energy)
        goal.append(sc.goal_mse)
    return np.stack(frames), np.stack(moved), np.stack(energy), np.stack(goal)


def _gpu_available() -> bool:
    try:
        import pycuda.driver as cuda

        cuda.init()
        return cuda.Device.count() > 0
    except Exception:  # no pycuda, no driver or no device: benchmark the CPU path
        return False


def _time_rollouts(fn, repeats):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench_gpu(shapes, repeats):
    """Steps/s eager and with graphs, memcpy nodes per step, parity with the NumPy twin."""
    from edge.runtime.cuda_step import CudaRolloutStep
    from kernels.launcher import KernelLauncher

    inputs = make_inputs(shapes)
    results = {"device": None, "load_path": None, "modes": {}}
    with KernelLauncher() as launcher:
        results["device"] = launcher.driver.Context.get_device().name()
        results["load_path"] = launcher.load_path
        model = ToyModel(shapes, launcher)
        want = cpu_rollout(model, inputs)
        for use_graph in (False, True):
            with CudaRolloutStep(launcher, model.step_executor, model.decoder_executor, shapes,
                                 use_graph=use_graph) as step:  # fmt: skip
                kw = {k: inputs[k] for k in ("goal",)}

                def rollout(step=step, kw=kw):
                    step.reset(inputs["start_latent"], inputs["actions"], inputs["dof_mask"],
                               inputs["start_frame"], inputs["keepout"], inputs["threshold"],
                               **kw)  # fmt: skip
                    step.run()
                    launcher.synchronize()

                rollout()
                out = step.outputs()
                same = bool(np.array_equal(out.frames, want[0])
                            and np.array_equal(out.moved_in_keepout, want[1])
                            and np.array_equal(out.motion_energy, want[2])
                            and np.array_equal(out.goal_mse, want[3]))  # fmt: skip
                seconds = _time_rollouts(rollout, repeats)
                results["modes"]["graph" if use_graph else "eager"] = {
                    "steps_per_s": shapes.horizon / seconds,
                    "memcpy_nodes_per_step": step.memcpy_nodes_per_step,
                    "graph_nodes": dict(step.node_counts),
                    "matches_numpy": same,
                }
    return results


def bench_cpu(shapes, repeats):
    """Steps/s of the NumPy reference rollout (no GPU)."""
    model = ToyModel(shapes)
    inputs = make_inputs(shapes)
    seconds = _time_rollouts(lambda: cpu_rollout(model, inputs), repeats)
    return {
        "device": "cpu (no GPU found)",
        "modes": {"numpy": {"steps_per_s": shapes.horizon / seconds}},
    }


def main(argv=None) -> int:
    """Run the benchmark; print a table and write JSON (``--out``)."""
    from edge.runtime.cuda_step import StepShapes

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--steps", type=int, default=64, help="horizon T (default 64)")
    parser.add_argument("--batch", type=int, default=8, help="candidates B (default 8)")
    parser.add_argument("--size", type=int, default=64, help="frame height = width (default 64)")
    parser.add_argument("--repeats", type=int, default=5, help="timed rollouts, best kept")
    args = parser.parse_args(argv)
    shapes = StepShapes(batch=args.batch, slots=4, latent_shape=(16, 8, 8), action=7,
                        height=args.size, width=args.size, horizon=args.steps)  # fmt: skip
    gpu = _gpu_available()
    if not gpu:
        print("no NVIDIA GPU found (or pycuda missing): benchmarking the NumPy reference only")
    res = bench_gpu(shapes, args.repeats) if gpu else bench_cpu(shapes, args.repeats)
    res["shapes"] = {"batch": shapes.batch, "slots": shapes.slots,
                     "latent_shape": list(shapes.latent_shape), "action": shapes.action,
                     "height": shapes.height, "width": shapes.width, "horizon": shapes.horizon}  # fmt: skip
    print(f"device: {res['device']}")
    print(f"{'mode':<8} {'steps/s':>10} {'memcpy/step':>12} {'matches NumPy':>14}")
    for mode, row in res["modes"].items():
        memcpy = row.get("memcpy_nodes_per_step")
        print(f"{mode:<8} {row['steps_per_s']:>10.1f} {'-' if memcpy is None else memcpy:>12} "
              f"{str(row.get('matches_numpy', '-')):>14}")  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    ok = all(row.get("matches_numpy", True) for row in res["modes"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
