"""How well ``calibrate check`` measures a camera's lag against the joint readings.

Renders calibration sweeps with MuJoCo (``export.cells``) on cells of every held-out split
and the stress split, each with its frames shown ``lag`` frames late (frame t shows the
pose read at t - lag, linear between knots), and measures the lag from each episode with
``edge.calibrate.check.estimate_camera_lag``; and checks each episode with ``calibrate
check``'s ``check_arrays`` (the joint readings on time, the frames late): a lag under the
check's half-frame limit must not fail a DoF that passes on time (``no_image_motion`` on
the DoFs that pass at lag 0). Prints a table (per lag: mean and largest error, mean R^2,
DoFs failing no_image_motion beyond those at lag 0) and writes JSON.

    python bench/bench_camera_lag.py --cells 8 --out bench/results/camera_lag.json

About 3 s per cell and lag on 2 cores (rendering dominates).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

LAGS = (0.0, 0.2, 0.35, 0.5, 1.0, 1.4, 2.0, 3.0, -0.5, -1.0, -2.0)
SPLITS = ("test_convention", "test_robot", "test_camera", "test_all", "stress")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", type=int, default=8, help="cells, drawn in turn from "
                   f"{', '.join(SPLITS)} (default 8)")
    p.add_argument("--lags", type=float, nargs="+", default=list(LAGS),
                   help="lags to render, frames (default %(default)s)")
    p.add_argument("--sweep-amplitude", type=float, nargs=2, default=(0.2, 0.8),
                   metavar=("LOW", "HIGH"), help="sweep magnitude range, rad (default 0.2 0.8)")
    p.add_argument("--seed", type=int, default=100, help="first cell seed (default 100)")
    p.add_argument("--out", default="bench/results/camera_lag.json", help="JSON to write")
    args = p.parse_args(argv)
    if args.cells < 1:
        p.error(f"--cells {args.cells}: expected 1 or more")
    os.environ.setdefault("MUJOCO_GL", "egl")
    import dataclasses

    from edge.calibrate.check import (
        EpisodeArrays,
        check_arrays,
        estimate_camera_lag,
        positions_seen_late,
    )
    from edge.episode import actions_from_positions
    from export.cells.generate import CellGenerator, GenerateOptions
    from export.cells.robots import robot_spec
    from export.cells.sampling import sample_cell
    from export.cells.trajectories import calibration_sweep

    gen = CellGenerator(GenerateOptions(cells_per_chunk=1, motion_episodes=0))
    rows = []
    t0 = time.perf_counter()
    for i in range(args.cells):
        split = SPLITS[i % len(SPLITS)]
        cell = sample_cell(np.random.default_rng(args.seed + i), split, f"lag-{i:03d}")
        spec = robot_spec(cell.robot)
        rng = np.random.default_rng(cell.seed)
        start = np.asarray(spec.home_rad) + rng.uniform(-0.1, 0.1, size=spec.num_dof)
        q, sweep = calibration_sweep(rng, spec, start, tuple(args.sweep_amplitude))
        on_time = None
        for lag in sorted(args.lags, key=lambda x: x != 0.0):  # lag 0 first
            ep = gen.render_episode(cell, positions_seen_late(q, lag), "calibration", sweep)
            got = estimate_camera_lag(ep.frames, q, fps=ep.metadata.fps)
            assert got is not None
            read = dataclasses.replace(ep, joint_positions=q,
                                       actions=actions_from_positions(q).astype(np.float32))
            report = check_arrays(EpisodeArrays.from_episode(read))
            blind = sorted({r["dof"] for r in report["reasons"]
                            if r["code"] == "no_image_motion" and r["dof"]})
            if lag == 0.0:
                on_time = set(blind)
            rows.append({"cell": cell.cell_id, "split": split, "robot": cell.robot,
                         "lag_frames": lag, "measured_frames": got["frames"],
                         "error_frames": got["frames"] - lag, "r2": got["r2"],
                         "r2_at_zero": got["r2_at_zero"], "no_image_motion": blind,
                         "no_image_motion_beyond_on_time":
                             None if on_time is None else sorted(set(blind) - on_time),
                         "noise_floor": report["dofs"][0]["noise_floor"]
                         if report["dofs"] else None})
        print(f"[{time.perf_counter() - t0:6.0f} s] cell {i + 1}/{args.cells} ({split}, "
              f"{cell.robot})", file=sys.stderr, flush=True)
    table = []
    print("| lag, frames | cells | mean error | largest error | mean R^2 | mean R^2 at no lag "
          "| DoFs failing no_image_motion beyond lag 0's | median noise floor |")
    print("|---|---|---|---|---|---|---|---|")
    for lag in args.lags:
        r = [x for x in rows if x["lag_frames"] == lag]
        err = np.array([x["error_frames"] for x in r])
        beyond = [x["no_image_motion_beyond_on_time"] for x in r]
        line = {"lag_frames": lag, "cells": len(r), "mean_error": float(err.mean()),
                "largest_error": float(np.abs(err).max()),
                "mean_r2": float(np.mean([x["r2"] for x in r])),
                "mean_r2_at_zero": float(np.mean([x["r2_at_zero"] for x in r])),
                "no_image_motion_beyond_on_time": None if None in beyond else
                sum(len(b) for b in beyond),
                "median_noise_floor": float(np.median([x["noise_floor"] or 0.0 for x in r]))}
        table.append(line)
        print(f"| {lag:+.2f} | {len(r)} | {line['mean_error']:+.3f} | "
              f"{line['largest_error']:.3f} | {line['mean_r2']:.3f} | "
              f"{line['mean_r2_at_zero']:.3f} | {line['no_image_motion_beyond_on_time']} | "
              f"{line['median_noise_floor']:.4f} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = "python bench/bench_camera_lag.py " + " ".join(sys.argv[1:] if argv is None else argv)
    out.write_text(json.dumps({"command": cmd, "table": table, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
