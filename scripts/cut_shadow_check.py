"""Does the calibration sweep's arm cut take the arm's shadow for arm?

For held-out cells, each cell's calibration sweep is rendered twice at ``--size`` px: lit
(both lamps, no shadows, plain surfaces) and shadowed (the same lamps casting shadows on a
grain-textured table and floor, :data:`export.cells.sampling.LIGHTINGS`), and
:func:`export.models.chain_fit.sweep_robot_mask` cuts the home frame of each. Against
MuJoCo's true arm mask of the home frame: IoU, the share of the cut that is not arm
(mostly shadow and the scene it falls on) and the share of the arm the cut finds, at the
frames' size and at the model's 64 px. ``--grey`` makes the scene grey (a grey arm's
hardest case), ``--camera-noise``/``--camera-jpeg`` degrade the frames as a camera would.
Prints a table, writes JSON, and with ``--sheet`` a contact sheet, a row per cell (home
frame lit, then shadowed: cut in green, false cut in magenta, missed arm in cyan).

    python scripts/cut_shadow_check.py --split test_robot --cells 16 \\
        --json out/cut_shadow_robot.json --sheet out/cut_shadow_robot.png
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _scores(cut: np.ndarray, arm: np.ndarray) -> dict[str, float]:
    inter = float((cut & arm).sum())
    union = float((cut | arm).sum())
    return {"iou": inter / max(union, 1.0),
            "false_share": float((cut & ~arm).sum()) / max(float(cut.sum()), 1.0),
            "recall": inter / max(float(arm.sum()), 1.0)}


def _overlay(frame: np.ndarray, cut: np.ndarray, arm: np.ndarray) -> np.ndarray:
    out = frame.copy()
    out[cut & arm] = out[cut & arm] // 2 + np.array([0, 120, 0], np.uint8)
    out[cut & ~arm] = (255, 0, 255)
    out[~cut & arm] = (0, 255, 255)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--split", required=True, help="a split of export.cells.sampling")
    p.add_argument("--chunk", type=int, default=0, help="the chunk whose cells are drawn")
    p.add_argument("--skip", type=int, default=0, help="cells of the chunk skipped first")
    p.add_argument("--cells", type=int, default=8)
    p.add_argument("--size", type=int, default=256, help="frame width = height, px")
    p.add_argument("--grey", action="store_true",
                   help="the cells' floor, table, walls and objects in greys (a grey arm's "
                        "hardest case: its shadow and its links share the hue)")
    p.add_argument("--camera-noise", type=float, default=0.0, metavar="LEVELS",
                   help="sensor noise added to the frames, grey levels (default 0)")
    p.add_argument("--camera-jpeg", type=int, default=None, metavar="QUALITY",
                   help="then JPEG at this quality (default: none)")
    p.add_argument("--json", required=True)
    p.add_argument("--sheet", help="PNG: each cell's cuts, lit then shadowed")
    args = p.parse_args(argv)

    import cv2

    from edge.fileio import write_json_atomic
    from edge.visual import contact_sheet, write_png
    from export.cells.generate import CellGenerator, GenerateOptions
    from export.cells.sampling import chunk_seed, sample_cell
    from export.evaluation.frames import camera_degrade
    from export.models.chain_fit import sweep_robot_mask

    rng = np.random.default_rng(chunk_seed(args.split, args.chunk))
    cells = [sample_cell(rng, args.split, f"{args.split}-{args.chunk:04d}-{i:03d}")
             for i in range(args.skip + args.cells)][args.skip:]
    rows, tiles, t0 = [], [], time.perf_counter()
    gens = {lighting: CellGenerator(GenerateOptions(width=args.size, height=args.size,
                                                    motion_episodes=0, lighting=lighting))
            for lighting in ("lit", "shadowed")}
    try:
        for cell in cells:
            if args.grey:
                cell = replace(cell, floor_rgb=(0.5, 0.5, 0.5), table_rgb=(0.6, 0.6, 0.6),
                               wall_rgb=(0.55, 0.55, 0.55),
                               objects=tuple({**o, "rgb": [0.5, 0.5, 0.5]}
                                             for o in cell.objects))
            row: dict[str, object] = {"cell": cell.cell_id, "robot": cell.robot}
            pair = []
            for lighting, gen in gens.items():
                ep = gen.cell_episodes(replace(cell, lighting=lighting))["calibration"]
                arm = ep.robot_mask[0]
                frames = ep.frames
                if args.camera_noise or args.camera_jpeg:
                    frames = camera_degrade(frames, args.camera_noise, args.camera_jpeg, 0)
                cut = sweep_robot_mask(frames, size=None)
                small = sweep_robot_mask(frames, size=(64, 64))
                arm64 = cv2.resize(arm.astype(np.float32), (64, 64),
                                   interpolation=cv2.INTER_AREA) >= 0.5
                row[lighting] = {**_scores(cut, arm),
                                 "at_64px": _scores(small, arm64)}
                pair.append(_overlay(frames[0], cut, arm))
            tiles.append(np.stack(pair))
            rows.append(row)
            s, sh = row["lit"], row["shadowed"]
            print(f"[{time.perf_counter() - t0:6.0f}s] {cell.cell_id} {cell.robot:10s} "
                  f"IoU lit {s['iou']:.2f} shadowed {sh['iou']:.2f}  false share lit "
                  f"{s['false_share']:.2f} shadowed {sh['false_share']:.2f}  recall lit "
                  f"{s['recall']:.2f} shadowed {sh['recall']:.2f}", flush=True)
    finally:
        for gen in gens.values():
            gen.close()

    summary = {}
    for lighting in ("lit", "shadowed"):
        for res in ("", "at_64px"):
            vals = [r[lighting][res] if res else r[lighting] for r in rows]
            summary[f"{lighting}{'_' + res if res else ''}"] = {
                **{k: float(np.median([v[k] for v in vals]))
                   for k in ("iou", "false_share", "recall")},
                "iou_mean": float(np.mean([v["iou"] for v in vals])),
                "iou_min": float(np.min([v["iou"] for v in vals]))}
    print(f"\n{'median over ' + str(len(rows)) + ' cells':28s} {'IoU':>6s} {'false':>6s} "
          f"{'recall':>6s} {'IoU mean':>8s} {'min':>6s}")
    for name, v in summary.items():
        print(f"{name:28s} {v['iou']:6.3f} {v['false_share']:6.3f} {v['recall']:6.3f} "
              f"{v['iou_mean']:8.3f} {v['iou_min']:6.3f}")
    out = write_json_atomic(args.json, {
        "split": args.split, "chunk": args.chunk, "skip": args.skip, "size": args.size,
        "grey": args.grey, "camera_noise": args.camera_noise, "camera_jpeg": args.camera_jpeg,
        "summary": summary, "cells": rows})
    if args.sheet:
        write_png(args.sheet, contact_sheet(
            tiles, row_labels=[f"{r['cell']} ({r['robot']}): IoU lit {r['lit']['iou']:.2f}, "
                               f"shadowed {r['shadowed']['iou']:.2f}" for r in rows],
            tile_labels=[["lit", "shadowed"]] * len(rows), scale=1))
    print(f"wrote {out}" + (f" and {args.sheet}" if args.sheet else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
