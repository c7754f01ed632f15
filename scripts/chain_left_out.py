"""Which channels the chain reads of a split's cells leave out, how ``calibrate check``
judged those DoFs, and how futures retrieval goes with the number left out.

A channel whose sweep moves fewer than ``MIN_CARRIED_PX`` arm pixels on the model's grid
gets no axis (``export.models.chain_fit``); the check judges the same sweep by its image
motion at the episode's own resolution. For every kept read ``<fits>/<cell>_dis.npz``
(``scripts/chain_fit_eval.py --fits``) this lists the channels with a zero axis beside the
check's figures for the DoF, and with ``--eval`` (a ``chain_fit_eval.py`` JSON with
per-cell figures of the same cells) retrieval by the count left out per cell:

    python scripts/chain_left_out.py --fits bench/chain_fits/futures/test_robot \\
        --calibration-data data/cells256 --split test_robot \\
        --eval docs/eval/chain_fit/anchor_test_robot_0-63.json --json OUT.json

Prints a table; writes JSON (one row per channel) with ``--json``.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fits", required=True, help="folder of kept reads <cell>_dis.npz")
    p.add_argument("--calibration-data", required=True,
                   help="cells folder holding <split>/chunk-*/<cell>/calibration.npz")
    p.add_argument("--split", required=True)
    p.add_argument("--eval", help="chain_fit_eval.py JSON with per_cell figures")
    p.add_argument("--prediction", default="chain_dis_anchor",
                   help="prediction of --eval to read retrieval of (default chain_dis_anchor)")
    p.add_argument("--json", help="write the per-channel rows here")
    args = p.parse_args(argv)

    from edge.calibrate.check import CHAIN_MIN_MOVED_PX, check_arrays, load_for_check

    reads = sorted(Path(args.fits).glob("*_dis.npz"))
    if not reads:
        print(f"error: no <cell>_dis.npz under {args.fits}: expected the reads "
              f"scripts/chain_fit_eval.py --fits keeps", file=sys.stderr)
        return 2
    rows = []
    for path in reads:
        cell = path.name[:-len("_dis.npz")]
        found = sorted(Path(args.calibration_data, args.split).glob(f"*/{cell}/calibration.npz"))
        if not found:
            print(f"error: no calibration.npz of {cell} under "
                  f"{Path(args.calibration_data, args.split)}", file=sys.stderr)
            return 2
        axes = np.load(path)["axes"]
        arr = load_for_check(found[0])
        report = check_arrays(arr)
        by_name = {d["dof"]: d for d in report["dofs"]}
        names = list(arr.meta.get("dof_names") or [])
        for c in range(len(axes)):
            d = by_name.get(names[c]) if c < len(names) else None
            rows.append({"cell": cell, "robot": arr.meta.get("robot"), "channel": c,
                         "dof": names[c] if c < len(names) else None,
                         "left_out": bool(not np.abs(axes[c]).sum()),
                         "image_motion": None if d is None else d["image_motion"],
                         "chain_moved_px": None if d is None else d.get("chain_moved_px"),
                         "check_passed": None if d is None else d["passed"],
                         "check_noted": bool(d is not None and names[c] in
                                             report.get("faint_for_chain", []))})
    left = [r for r in rows if r["left_out"]]
    motion = np.array([r["image_motion"] or 0.0 for r in rows])
    out = np.array([r["left_out"] for r in rows])
    print(f"{args.split}: {len(left)} of {len(rows)} channels left out by the read, "
          f"{sum(bool(r['check_passed']) for r in left)} of them passed the check")
    if left and (~out).any():
        print(f"image motion, left out: median {np.median(motion[out]):.3f} (p90 "
              f"{np.percentile(motion[out], 90):.3f}); read: median {np.median(motion[~out]):.3f} "
              f"(p10 {np.percentile(motion[~out], 10):.3f})")
    moved = np.array([-1 if r["chain_moved_px"] is None else r["chain_moved_px"] for r in rows])
    under = (moved >= 0) & (moved < CHAIN_MIN_MOVED_PX)
    print(f"check's chain_moved_px under {CHAIN_MIN_MOVED_PX}: {int(under.sum())} channels, "
          f"{int((under & out).sum())} of them left out; {int((~under & out).sum())} left out "
          f"at or above it (of {int((~under).sum())}); the check noted "
          f"{sum(r['check_noted'] for r in left)} of the {len(left)} left out")
    for (robot, dof), n in collections.Counter((r["robot"], r["dof"]) for r in left).most_common(8):
        print(f"  {robot} {dof}: {n}")
    if args.eval:
        per = json.loads(Path(args.eval).read_text())["per_cell"]
        key = f"{args.prediction}/all_joints/8"
        if key not in per["retrieval"]:
            print(f"error: {args.eval} has no per-cell {key}", file=sys.stderr)
            return 2
        score = dict(zip(per["cells"], per["retrieval"][key], strict=True))
        count = collections.Counter(r["cell"] for r in left)
        groups: dict[int, list[float]] = {}
        for cell in score:
            groups.setdefault(count.get(cell, 0), []).append(score[cell])
        print("| channels left out | cells | retrieval@8 |\n|---|---|---|")
        for k in sorted(groups):
            print(f"| {k} | {len(groups[k])} | {np.mean(groups[k]):.3f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
