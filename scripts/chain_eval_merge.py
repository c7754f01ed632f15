"""Merge futures evaluations of ``scripts/chain_fit_eval.py`` run on separate cell ranges.

Any runs of one split (``--combine``): each prediction's retrieval and per-step means
weighted by the runs' cell counts (every cell scores the same number of futures), so the
result is the mean over all their cells:

    python scripts/chain_eval_merge.py --combine A.json B.json --out OUT.json

Two predictions compared cell by cell (``--paired``; runs written with per-cell figures,
``per_cell``): the mean difference of B over A in a figure, its 95% bootstrap interval
over cells (10000 resamples, seed 0) and on how many cells B is better and worse:

    python scripts/chain_eval_merge.py --paired A.json:chain_dis_anchor \
        B.json:chain_dis_anchor [--figure all_joints/8]

The merge of the README's first 16-cell table (``OUT.json`` alone):

    python scripts/chain_eval_merge.py OUT.json

Reads ``runs/cut3/<split>.json`` (cells 0-7: the chain without the rim fill, copy-last),
``runs/warp8/<split>.json`` (cells 0-7: ``--tracks none --warp-model models/reference``)
and ``runs/half2/<split>.json`` (cells 8-15: every prediction, with SSIM), all written by
``scripts/chain_fit_eval.py`` (README, "The chain model"); prints per split and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

SPLITS = {"test_convention": "held_out_convention", "test_robot": "held_out_robot",
          "test_all": "all_held_out", "stress": "stress"}
STEPS = (4, 8, 16)
PROFILES = ("all_joints", "two_joint")


def _scores(d: dict, key: str, metrics: tuple[str, ...]) -> dict:
    """One prediction's retrieval and per-step metrics from a chain_fit_eval JSON."""
    r = {f"{p}@{s}": d["retrieval"][f"{key}/{p}/{s}"] for p in PROFILES for s in STEPS}
    for m in metrics:
        r[m] = list(d["psnr_at_step"][f"{key}/{m}"])
    return r


def _mean(a: dict, b: dict) -> dict:
    return {k: (list((np.asarray(a[k]) + np.asarray(b[k])) / 2) if isinstance(a[k], list)
                else (a[k] + b[k]) / 2) for k in a}


def _line(label: str, r: dict, base: dict) -> str:
    gain = [x - y for x, y in zip(r["psnr"], base["psnr"], strict=True)]
    text = (f"  {label:12s} ret@8 {r['all_joints@8']:.2f} @16 {r['all_joints@16']:.2f} "
            f"2j@8 {r['two_joint@8']:.2f} PSNR@16 {r['psnr'][-1]:.2f} ({gain[-1]:+.2f}) "
            f"worst {min(gain):+.2f} motion@16 {r['motion_psnr'][-1]:.2f} "
            f"({r['motion_psnr'][-1] - base['motion_psnr'][-1]:+.2f})")
    if "ssim" in r:
        s_gain = [x - y for x, y in zip(r["ssim"], base["ssim"], strict=True)]
        text += f" SSIM@16 {r['ssim'][-1]:.3f} worst {min(s_gain):+.3f}"
    return text


def combine(paths: list[str]) -> dict:
    """The runs at ``paths`` (one split, the same predictions) as one run over all their
    cells: ``{"split", "cells", "runs", "retrieval", "psnr_at_step"}`` with each key the
    cell-weighted mean of the runs that have it in all of them, and, where every run has
    it, ``"start_arm_precision"``: each row's per-cell list, the runs' lists joined in order
    (and ``"per_cell"`` likewise).

    Raises:
        ValueError: runs of different splits, or no prediction common to all.
    """
    runs = [json.loads(Path(p).read_text()) for p in paths]
    splits = {r["split"] for r in runs}
    if len(splits) != 1:
        raise ValueError(f"runs of several splits {sorted(splits)}: combine one split at a time")
    w = np.asarray([r["cells"] for r in runs], float)
    out: dict = {"split": splits.pop(), "cells": int(w.sum()), "runs": list(paths)}
    for field in ("retrieval", "psnr_at_step"):
        keys = set.intersection(*(set(r[field]) for r in runs))
        if not keys:
            raise ValueError(f"{field}: no prediction common to every run")
        out[field] = {k: (np.tensordot(w, np.asarray([r[field][k] for r in runs], float), 1)
                          / w.sum()).tolist() for k in sorted(keys)}
    if all("start_arm_precision" in r for r in runs):
        rows = set.intersection(*(set(r["start_arm_precision"]) for r in runs))
        out["start_arm_precision"] = {k: [x for r in runs for x in r["start_arm_precision"][k]]
                                      for k in sorted(rows)}
    if all("per_cell" in r for r in runs):
        per = [r["per_cell"] for r in runs]
        out["per_cell"] = {"cells": [c for q in per for c in q["cells"]]}
        for field in ("retrieval", "psnr_at_16"):
            keys = set.intersection(*(set(q[field]) for q in per))
            out["per_cell"][field] = {k: [x for q in per for x in q[field][k]]
                                      for k in sorted(keys)}
    return out


def paired(a: str, b: str, figure: str = "all_joints/8", resamples: int = 10000) -> dict:
    """B's ``figure`` over A's, paired over the cells both were scored on.

    Args:
        a, b: ``RUN.json:PREDICTION`` (a ``chain_fit_eval.py`` run with ``per_cell``).
        figure: ``PROFILE/STEP`` (retrieval), or ``psnr`` / ``motion_psnr`` / ``ssim`` at
            step 16.
        resamples: bootstrap resamples over cells.

    Returns:
        ``{"a", "b", "figure", "cells", "mean_a", "mean_b", "difference", "interval_95",
        "better", "worse"}``.

    Raises:
        ValueError: a run without per-cell figures, a prediction or figure it does not
            hold, or no cell in common.
    """
    def load(spec: str) -> dict[str, float]:
        path, _, name = spec.rpartition(":")
        run = json.loads(Path(path).read_text())
        per = run.get("per_cell")
        if not path or not name or per is None:
            raise ValueError(f"{spec}: expected RUN.json:PREDICTION of a run written with "
                             "per-cell figures (per_cell)")
        table = per["retrieval"] if "/" in figure else per["psnr_at_16"]
        key = f"{name}/{figure}"
        if key not in table:
            raise ValueError(f"{spec}: no {key}; it holds {sorted(table)[:8]}...")
        return dict(zip(per["cells"], table[key], strict=True))

    va, vb = load(a), load(b)
    cells = [c for c in va if c in vb]
    if not cells:
        raise ValueError(f"{a} and {b}: no cell in common")
    x = np.asarray([va[c] for c in cells])
    y = np.asarray([vb[c] for c in cells])
    d = y - x
    rng = np.random.default_rng(0)
    boot = d[rng.integers(0, len(d), (resamples, len(d)))].mean(1)
    return {"a": a, "b": b, "figure": figure, "cells": len(cells),
            "mean_a": float(x.mean()), "mean_b": float(y.mean()),
            "difference": float(d.mean()),
            "interval_95": [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))],
            "better": int((d > 0).sum()), "worse": int((d < 0).sum())}


def main(argv: list[str]) -> int:
    """``--combine`` (module docstring), else the README's 16-cell merge into ``argv[0]``
    (default runs/merged.json); returns 0."""
    if argv and argv[0].startswith("-"):
        p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
        p.add_argument("--combine", nargs="+", metavar="JSON",
                       help="chain_fit_eval.py JSON files of one split")
        p.add_argument("--out", metavar="JSON", help="the combined run")
        p.add_argument("--paired", nargs=2, metavar="RUN.json:PREDICTION",
                       help="compare two predictions cell by cell (B over A)")
        p.add_argument("--figure", default="all_joints/8",
                       help="with --paired: PROFILE/STEP retrieval, or psnr, motion_psnr, "
                            "ssim at step 16 (default all_joints/8)")
        args = p.parse_args(argv)
        if args.paired:
            try:
                r = paired(*args.paired, figure=args.figure)
            except ValueError as exc:
                p.error(str(exc))
            print(f"{args.figure}: {r['mean_a']:.3f} -> {r['mean_b']:.3f} over {r['cells']} "
                  f"cells, difference {r['difference']:+.3f} (95% {r['interval_95'][0]:+.3f} "
                  f"to {r['interval_95'][1]:+.3f}; better on {r['better']}, worse on "
                  f"{r['worse']})")
            if args.out:
                Path(args.out).write_text(json.dumps(r, indent=1) + "\n")
            return 0
        if not args.combine or not args.out:
            p.error("expected --combine JSON... --out JSON, or --paired A B")
        merged = combine(args.combine)
        Path(args.out).write_text(json.dumps(merged, indent=1))
        print(f"{merged['split']}: {merged['cells']} cells from {len(args.combine)} runs -> "
              f"{args.out}")
        return 0
    both = ("psnr", "motion_psnr")
    out = {}
    for split, name in SPLITS.items():
        a = json.loads(Path(f"runs/cut3/{split}.json").read_text())
        w = json.loads(Path(f"runs/warp8/{split}.json").read_text())
        b = json.loads(Path(f"runs/half2/{split}.json").read_text())
        row = {"chain_rim0": _mean(_scores(a, "fit_dis_fill", both),
                                   _scores(b, "fit_dis_fill_rim0", both)),
               "warp": _mean(_scores(w, "warp", both), _scores(b, "warp", both)),
               "copy_last": _mean(_scores(a, "copy_last", both), _scores(b, "copy_last", both))}
        for label, key in (("chain", "fit_dis_fill"), ("chain_rim0_8", "fit_dis_fill_rim0"),
                           ("warp_8", "warp"), ("copy_last_8", "copy_last")):
            row[label] = _scores(b, key, both + ("ssim",))
        out[name] = row
        print(f"\n{name} (16 cells: 0-15)")
        for label in ("chain_rim0", "warp", "copy_last"):
            print(_line(label, row[label], row["copy_last"]))
        print("  cells 8-15:")
        for label in ("chain", "chain_rim0_8", "warp_8", "copy_last_8"):
            print(_line(label, row[label], row["copy_last_8"]))
    Path(argv[0] if argv else "runs/merged.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
