"""Merge two 8-cell halves of each split's futures into one 16-cell table (equal cell
counts, so the means of the halves are the 16-cell means).

    python scripts/chain_eval_merge.py OUT.json

Reads ``runs/cut3/<split>.json`` (cells 0-7: the chain without the rim fill, copy-last),
``runs/warp8/<split>.json`` (cells 0-7: ``--tracks none --warp-model models/reference``)
and ``runs/half2/<split>.json`` (cells 8-15: every prediction, with SSIM), all written by
``scripts/chain_fit_eval.py`` (README, "The chain model"); prints per split and writes JSON.
"""

from __future__ import annotations

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


def main(argv: list[str]) -> int:
    """Merge, print, write ``argv[0]`` (default runs/merged.json); returns 0."""
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
