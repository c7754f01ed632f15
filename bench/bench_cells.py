"""Benchmark: cell rendering throughput per core, per robot, before and after decimation.

Renders RGB plus the segmentation pass (robot mask) for each robot at 64 and 128 px, with
the original meshes and with decimated meshes, in one process with Mesa's llvmpipe
limited to one thread (LP_NUM_THREADS=1), so the figures are frames/s per core.

    python bench/bench_cells.py [--frames 120] [--out bench/results/cells.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ["LP_NUM_THREADS"] = "1"  # llvmpipe: one rendering thread = one core
os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402

from export.cells.robots import ROBOTS, robot_spec  # noqa: E402
from export.cells.sampling import sample_cell  # noqa: E402
from export.cells.scene import CellScene, RenderSettings  # noqa: E402
from export.cells.trajectories import random_trajectory  # noqa: E402


def measure(robot: str, size: int, face_budget: int | None, frames: int) -> dict:
    rng = np.random.default_rng(0)
    split = "test_robot" if robot == "kinova3" else "train"
    cell = sample_cell(rng, split, "bench", robot=robot)
    t0 = time.perf_counter()
    scene = CellScene(robot, RenderSettings(size, size, face_budget))
    build_s = time.perf_counter() - t0
    scene.apply_cell(cell)
    q = random_trajectory(rng, robot_spec(robot), frames)
    for i in range(5):
        scene.render(q[i])
    cpu0, t0 = time.process_time(), time.perf_counter()
    for i in range(frames):
        scene.render(q[i])
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    faces = int(scene.model.mesh_facenum.sum())
    scene.close()
    return {"robot": robot, "size_px": size, "decimated": face_budget is not None,
            "face_budget": face_budget, "faces": faces, "frames": frames,
            "frames_per_s_wall": frames / wall, "frames_per_cpu_s": frames / cpu,
            "scene_build_s": build_s}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=120)
    ap.add_argument("--robots", default=",".join(ROBOTS))
    ap.add_argument("--out", default="bench/results/cells.json")
    args = ap.parse_args()
    rows = []
    print(f"{'robot':8} {'px':>4} {'meshes':>9} {'faces':>7} {'frames/s/core':>14} "
          f"{'frames/cpu-s':>13} {'build s':>8}")
    for robot in args.robots.split(","):
        for size in (64, 128):
            for budget in (None, 8000):
                n = args.frames if budget else max(20, args.frames // 4)
                r = measure(robot, size, budget, n)
                rows.append(r)
                print(f"{robot:8} {size:4d} {'decimated' if budget else 'original':>9} "
                      f"{r['faces']:7d} {r['frames_per_s_wall']:14.1f} "
                      f"{r['frames_per_cpu_s']:13.1f} {r['scene_build_s']:8.2f}", flush=True)
    dec64 = [r for r in rows if r["decimated"] and r["size_px"] == 64]
    wall = [r["frames_per_s_wall"] for r in dec64]
    cpu = [r["frames_per_cpu_s"] for r in dec64]
    summary = {"min_decimated_64px_frames_per_s": min(wall),
               "mean_decimated_64px_frames_per_s": float(np.mean(wall)),
               "min_decimated_64px_frames_per_cpu_s": min(cpu),
               "mean_decimated_64px_frames_per_cpu_s": float(np.mean(cpu)),
               "target_frames_per_s_per_core_64px": 100}
    print(f"decimated 64 px, wall clock: min {min(wall):.0f}, mean {np.mean(wall):.0f} frames/s "
          f"per core; per CPU-second (what one core delivers when the machine is shared): "
          f"min {min(cpu):.0f}, mean {np.mean(cpu):.0f} (target >= 100)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "summary": summary, "machine": {
        "python": sys.version.split()[0], "platform": platform.platform(),
        "cpu_count": os.cpu_count(), "loadavg": os.getloadavg()}}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
