"""Calibration recorded at other timings against the planner's: margin over zeroed kept.

Renders each cell's calibration sweep again at the timings of
``export.evaluation.calibration_timing.DEFAULT_MATRIX`` (MuJoCo), ingests it, and scores the shipped
model's rollouts (motion-region PSNR@16, futures retrieval@8) with each context beside
the planner-timing context and the zeroed calibration. Prints a table and writes JSON.

    python bench/bench_calibration_timing.py --data data/cells --split test_convention \\
        --cells 16 --json bench/results/calibration_timing.json

Needs the training extra (MuJoCo, the robot assets) and generated cells
(``syncedge cells generate --split test_convention --out data/cells --chunks 0-1``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="data/cells", help="cells folder (default data/cells)")
    p.add_argument("--split", default="test_convention")
    p.add_argument("--model", default="models/reference")
    p.add_argument("--cells", type=int, default=16, help="cells (default 16)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--variants", default=None, metavar="NAME,...",
                   help="only these timings of export.evaluation.calibration_timing.DEFAULT_MATRIX")
    p.add_argument("--json", default="bench/results/calibration_timing.json")
    args = p.parse_args()
    os.environ.setdefault("MUJOCO_GL", "egl")
    from edge.fileio import write_json_atomic
    from export.evaluation.calibration_timing import (
        DEFAULT_MATRIX,
        evaluate_timing,
        format_timing_table,
    )

    variants = DEFAULT_MATRIX
    if args.variants:
        names = [n.strip() for n in args.variants.split(",")]
        unknown = sorted(set(names) - {v.name for v in DEFAULT_MATRIX})
        if unknown:
            p.error(f"--variants: unknown {unknown}; expected names from "
                    f"{[v.name for v in DEFAULT_MATRIX]}")
        variants = tuple(v for v in DEFAULT_MATRIX if v.name in names)
    result = evaluate_timing(args.data, args.split, args.model, variants=variants,
                             max_cells=args.cells, threads=args.threads,
                             progress=lambda m: print(m, file=sys.stderr, flush=True))
    result["load_average"] = list(os.getloadavg())
    print(format_timing_table(result))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.json, result)
    print(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
