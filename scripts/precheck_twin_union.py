"""Would refusing on the depth-mirrored twins of a chain read catch the pre-check's misses?

    python scripts/precheck_twin_union.py --split held_out_robot --cells 28 \\
        --fits bench/chain_fits/precheck --suffix -poses32-half1rad [--json out.json]

A chain read can sit on the depth-mirrored twin of a channel's axis
(``export.models.chain_fit.twin_candidates``): the sweep moves one channel at a time and
cannot tell the two apart, and the composition then misplaces whole links. A safety-first
pre-check could refuse a candidate when the read *or any twin of it* puts the arm in the
keep-out. For each cell of the pre-check benchmark (``export.evaluation.precheck.draw_cell``,
the same cells, candidates and keep-out rectangles as ``syncedge model eval-precheck``)
this rolls out the kept read ``<fits>/bench-precheck-<split>-<index>-<digest><suffix>.npz``
and each of its twins with the chain model, scores every one with the benchmark's own
keep-out verdict (``score_cell``: at least 4 arm pixels inside refuses) and prints recall
and false refusals of the read alone, of the read or any twin, of the read or any
``alone`` / ``distal`` twin, and of the read or any *plausible* twin: one that the read's
own twin choice refined and found within ``--plausible-gain`` of the read's loss in its
last round (``info["twins"]["refined"]``, written by ``choose_twins(refine_steps > 0)``,
as the held poses' refinement runs it). Then every miss of the read, with the twins that
would have refused it. A diagnostic on the project's own cells; it changes no read.
Needs MuJoCo; about 3-4 s per cell on 2 cores from the kept reads.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def plausible_twins(info: dict, min_gain: float) -> set[tuple[str, int]]:
    """``{(kind, channel)}`` of the twins a read's refined twin choice scored, in its last
    round, at a gain of at least ``min_gain`` (a negative share: the twin's refined loss
    at most ``-min_gain`` above the read's); empty where the read chose no twins refined."""
    refined = (info.get("twins") or {}).get("refined") or []
    if not refined:
        return set()
    last = max(r["round"] for r in refined)
    return {(r["kind"], int(r["channel"])) for r in refined
            if r["round"] == last and r["gain"] >= min_gain}


def rates(refused: np.ndarray, enters: np.ndarray) -> tuple[float, float]:
    """``(recall, false_refusals)``: the share of truly entering candidates refused and
    of truly staying-out ones refused."""
    return float(refused[enters].mean()), float(refused[~enters].mean())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--split", required=True,
                   help="benchmark split: held_out_robot, held_out_convention, all_held_out")
    p.add_argument("--cells", type=int, required=True, help="the first N cells of the split")
    p.add_argument("--fits", type=Path, default=ROOT / "bench/chain_fits/precheck",
                   help="folder of kept reads (eval-precheck --chain-fits)")
    p.add_argument("--suffix", default="-poses32-half1rad",
                   help="the kept read's suffix: '' (the sweep's read), -poses32, "
                        "-poses32-half1rad, -anchor, ...")
    p.add_argument("--plausible-gain", type=float, default=-0.02,
                   help="a twin is plausible when its refined gain in the last round of the "
                        "read's twin choice is at least this share (default -0.02)")
    p.add_argument("--json", type=Path, help="write the per-cell verdicts here")
    args = p.parse_args(argv)

    from edge.runtime.chain import chain_rollout, load_chain_calibration
    from export.cells.generate import CellGenerator, GenerateOptions
    from export.evaluation.precheck import SPLITS, draw_cell, score_cell
    from export.models.chain_fit import fit_of_calibration, twin_candidates

    if args.split not in SPLITS:
        p.error(f"--split {args.split}: expected one of {', '.join(SPLITS)}")
    data_split = SPLITS[args.split]
    records: list[dict] = []
    with CellGenerator(GenerateOptions(motion_episodes=0)) as gen:
        for i in range(args.cells):
            c = draw_cell(gen, data_split, i)
            if c is None:
                continue
            name = re.compile(rf"bench-precheck-{data_split}-{i:03d}-[0-9a-f]{{12}}"
                              rf"{re.escape(args.suffix)}\.npz")
            found = [f for f in sorted(args.fits.glob(f"bench-precheck-{data_split}-{i:03d}-*"))
                     if name.fullmatch(f.name)]
            if len(found) != 1:
                print(f"precheck_twin_union: {args.fits}: expected one kept read of cell {i} "
                      f"with suffix {args.suffix!r}, found {len(found)}; run 'syncedge model "
                      "eval-precheck ... --chain-fits' with the same options first",
                      file=sys.stderr)
                return 2
            chain = load_chain_calibration(found[0])
            start, acts = c["futures"].frames[0, 0], c["futures"].actions
            frames, cover = chain_rollout(chain, start, c["q0"], acts, with_cover=True)
            base = score_cell(c, frames, cover.astype(np.float32))
            plausible = plausible_twins(chain.info, args.plausible_gain)
            twins = []
            for kind, ch, fit in twin_candidates(fit_of_calibration(chain)):
                twin = dataclasses.replace(chain, axes=fit.axes, pivots=fit.pivots,
                                           depth=fit.depth)
                fr, cv = chain_rollout(twin, start, c["q0"], acts, with_cover=True)
                s = score_cell(c, fr, cv.astype(np.float32))
                twins.append({"kind": kind, "channel": ch,
                              "plausible": (kind, ch) in plausible,
                              "refused": s["keepout_refused"],
                              "score": s["keepout_moved_max"]})
            records.append({"index": i, "enters": c["enters"].tolist(),
                            "true_inside_max": [int(v) for v in c["inside_max"]],
                            "refused": base["keepout_refused"],
                            "score": base["keepout_moved_max"], "twins": twins})
            print(f"cell {i + 1}/{args.cells}", file=sys.stderr, flush=True)
    if not records:
        print("precheck_twin_union: no cell had a fitting keep-out", file=sys.stderr)
        return 2
    enters = np.concatenate([r["enters"] for r in records])
    base = np.concatenate([r["refused"] for r in records])

    def union(keep) -> np.ndarray:
        return np.concatenate([np.array(r["refused"]) | np.array(
            [any(t["refused"][m] for t in r["twins"] if keep(t)) for m in range(len(r["enters"]))])
            for r in records])

    table = {"read": base, "read or any twin": union(lambda t: True),
             "read or an 'alone' twin": union(lambda t: t["kind"] == "alone"),
             "read or a 'distal' twin": union(lambda t: t["kind"] == "distal"),
             f"read or a plausible twin (gain >= {args.plausible_gain:g})":
                 union(lambda t: t["plausible"])}
    print(f"{args.split}, {len(records)} cells, suffix {args.suffix!r}: "
          f"{int(enters.sum())} candidates truly enter, {int((~enters).sum())} stay out")
    print("| refuse when | keep-out recall | false refusals |\n|---|---|---|")
    summary = {}
    for name, refused in table.items():
        rec, fr = rates(refused, enters)
        summary[name] = {"recall": round(rec, 3), "false_refusals": round(fr, 3)}
        print(f"| {name} | {rec:.3f} | {fr:.3f} |")
    for r in records:
        for m, (e, ref) in enumerate(zip(r["enters"], r["refused"], strict=True)):
            if e and not ref:
                by = [f"{t['kind']} {t['channel']}{' (plausible)' if t['plausible'] else ''}"
                      for t in r["twins"] if t["refused"][m]]
                print(f"  cell {r['index']:3d} candidate {m}: missed (true "
                      f"{r['true_inside_max'][m]}, pred {r['score'][m]}); refused by twins: "
                      f"{', '.join(by) or 'none'}")
    if args.json is not None:
        args.json.write_text(json.dumps({"split": args.split, "suffix": args.suffix,
                                         "summary": summary, "cells": records},
                                        separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
