"""Does carrying a warp model's own per-DoF motion forward (splatting) place the arm better?

    python scripts/splat_fields.py --data data/cells --split test_convention \
        --model models/experiments/warp-trueflow [--model RUN ...] [--cells 32] \
        [--json out.json] [--sheet out.png]

No training: for each warp model with a per-DoF flow network (``--joint-width``), on the
futures ``syncedge model eval-frames`` scores it on (cached under ``DATA/SPLIT/futures/``),
three predictions per candidate and step:

- ``model``: the model's own frames (its decoder's blend of the start frame warped by its
  arm flow and its fill);
- ``splat``: the start frame with the model's robot pixels (its start-mask head, above 0.5)
  moved *forward* by minus the step's per-DoF sum (``sum_c sin(theta_c) F_c + (1 -
  cos(theta_c)) G_c``, the fields the model lays on the start frame's grid as a backward
  flow, upsampled to 64x64) and splatted to where they land
  (``export.models.kinematics.splat_flow``, 2x finer samples, gaps closed), the start
  frame elsewhere (no fill);
- ``splat_over_model``: the model's frame with the splatted arm drawn over it where it
  landed.

Scored as eval-frames scores (whole-frame MSE futures retrieval, PSNR, motion PSNR). The
oracle of the same idea with perfect fields is ``additive_splatflow`` in
``scripts/oracle_retrieval.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = ("model", "splat", "splat_over_model")


def rollouts(model, cell, start: np.ndarray, actions: np.ndarray) -> dict[str, np.ndarray]:
    """The three predictions uint8 ``[M, T, H, W, 3]`` of candidates ``actions [M, T, A]``
    (controller channels, padded) from ``start [H, W, 3]``."""
    import torch
    import torch.nn.functional as F

    from export.evaluation.zero_shot import to_uint8
    from export.models.kinematics import close_gaps, splat_flow
    from export.models.warp import identity_grid, warp
    from export.train.warp import calibration_states

    m, t = actions.shape[:2]
    with torch.no_grad():
        fr = torch.from_numpy(cell.cal_frames).permute(0, 3, 1, 2)[None]
        ctx = model.calibration(calibration_states(model, fr)[0],
                                torch.from_numpy(cell.cal_actions),
                                torch.from_numpy(cell.dof_mask))
        s = torch.from_numpy(start[None]).permute(0, 3, 1, 2)
        z0 = model.encoder(s)
        z = model.rollout(z0.expand(m, -1, -1, -1), torch.from_numpy(actions), ctx)
        frames, _ = model.decoder(z.flatten(0, 1))
        own = to_uint8(frames).reshape(m, t, *start.shape)
        fields = model.step.joint_fields(z0, ctx)[0]  # (A, 4, h, w), backward convention
        direction = ctx[:, -1, 0, 0]  # (A,)
        theta = torch.cumsum(torch.from_numpy(actions), 1) * direction  # (M, T, A)
        robot = model.decoder.start_mask(z0)[0, 0] > 0.5  # (64, 64)
        size = start.shape[0]
        big = 2 * size
        rob = F.interpolate(robot[None, None].float(), size=(big, big), mode="nearest")[0, 0] > 0.5
        ys, xs = torch.nonzero(rob, as_tuple=True)
        src = torch.stack([(xs + 0.5) / 2, (ys + 0.5) / 2], -1).to(torch.float64)
        start_f = s.to(torch.float32) / 255.0
        base = identity_grid(size)
        splat, covers = [], []
        for th in theta.reshape(-1, theta.shape[-1]):  # (A,) per candidate and step
            coarse = (torch.sin(th)[:, None, None, None] * fields[:, 0:2]
                      + (1 - torch.cos(th))[:, None, None, None] * fields[:, 2:4]).sum(0)
            fwd = -F.interpolate(coarse[None], size=(big, big), mode="bilinear",
                                 align_corners=False)[0]  # (2, 2H, 2W) px at 64x64
            dst = src + fwd[:, ys, xs].T.to(torch.float64)
            flow, dens = splat_flow(src[None], dst[None], (size, size), samples_per_px=4)
            flow, cover = close_gaps(flow, dens)
            cover = cover.to(torch.float32)
            moved = warp(start_f, flow.to(torch.float32), base)
            splat.append(cover * moved + (1 - cover) * start_f)
            covers.append(cover)
        sp = to_uint8(torch.cat(splat)).reshape(m, t, *start.shape)
        landed = (torch.cat(covers) > 0).permute(0, 2, 3, 1).numpy().reshape(
            m, t, *start.shape[:2], 1)
    return {"model": own, "splat": sp, "splat_over_model": np.where(landed, sp, own)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="cells folder")
    p.add_argument("--split", required=True, help="split folder (e.g. test_convention)")
    p.add_argument("--model", action="append", required=True,
                   help="a warp run folder with warp.pt and a per-DoF flow network (repeat)")
    p.add_argument("--cells", type=int, default=32)
    p.add_argument("--candidates", type=int, default=8)
    p.add_argument("--horizon", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--sheet", help="contact sheet (PNG): the first 4 cells' first all-joints "
                                   "candidate at step 8, per model")
    args = p.parse_args(argv)
    os.environ.setdefault("MUJOCO_GL", "egl")
    import torch

    from edge.metrics import motion_mask
    from export.cells.futures import load_or_render_futures
    from export.cells.generate import CellGenerator, GenerateOptions
    from export.cells.sampling import CellParams
    from export.evaluation.frames import RETRIEVAL_STEPS, frame_psnr, retrieval_hits
    from export.variants.warp_export import load_warp_model

    torch.set_num_threads(2)
    models = {}
    for run in args.model:
        m = load_warp_model(run).eval()
        if not m.cfg.joint_width:
            raise SystemExit(f"{run}: no per-DoF flow network (--joint-width 0); nothing to splat")
        models[run] = m
    from export.train.data import load_cells

    cells = load_cells(args.data, [args.split], 7, 8, limit=args.cells)
    gen_holder: list = []

    def gen():
        if not gen_holder:
            gen_holder.append(CellGenerator(GenerateOptions()))
        return gen_holder[0]

    t0 = time.perf_counter()
    hits: dict[str, list[float]] = {}
    psnr: dict[str, list[list[float]]] = {}
    sheet_rows: list[np.ndarray] = []
    for i, cell in enumerate(cells):
        params = CellParams.from_json_dict(cell.params)
        q0 = cell.motions[0].joint_positions[0, :cell.num_dof]
        row: list[np.ndarray] = []
        for prof in ("all_joints", "two_joint"):
            f = load_or_render_futures(args.data, args.split, cell.cell_id, gen, params, q0,
                                       args.candidates, args.horizon, prof, args.seed)
            start, truth = f.frames[0, 0], f.frames[:, 1:]
            acts = np.zeros((*f.actions.shape[:2], 7), np.float32)
            acts[..., :f.actions.shape[-1]] = f.actions
            if prof == "all_joints" and i < 4:
                row += [start, truth[0, 7]]
            for run, model in models.items():
                preds = rollouts(model, cell, start, acts)
                for v, pr in preds.items():
                    key = f"{run}/{v}"
                    for s in RETRIEVAL_STEPS:
                        hits.setdefault(f"{key}/{prof}/{s}", []).append(
                            float(retrieval_hits(pr[:, s - 1], truth[:, s - 1]).mean()))
                    if prof == "all_joints":
                        if i < 4:
                            row.append(pr[0, 7])
                        mm = [motion_mask(truth[k], start) for k in range(len(truth))]
                        psnr.setdefault(f"{key}/psnr", []).append(float(np.mean(
                            [frame_psnr(pr[k, -1], truth[k, -1]) for k in range(len(truth))])))
                        psnr.setdefault(f"{key}/motion_psnr", []).append(float(np.nanmean(
                            [frame_psnr(pr[k, -1], truth[k, -1], mm[k][-1])
                             for k in range(len(truth))])))
        if row:
            sheet_rows.append(np.stack(row))
        if (i + 1) % 8 == 0 or i + 1 == len(cells):
            print(f"[{time.perf_counter() - t0:6.1f}s] cell {i + 1}/{len(cells)}",
                  file=sys.stderr, flush=True)
    for g in gen_holder:
        g.close()
    out = {"split": args.split, "cells": len(cells),
           "retrieval": {k: float(np.mean(v)) for k, v in hits.items()},
           "step16": {k: float(np.nanmean(v)) for k, v in psnr.items()}}
    print(f"{args.split}, {len(cells)} cells, M = {args.candidates}")
    print("| model | prediction | retrieval@4 | @8 | @16 | two-joint @8 | PSNR@16 | motion PSNR@16 |")
    print("|---|---|---|---|---|---|---|---|")
    r, ps = out["retrieval"], out["step16"]
    for run in models:
        for v in VARIANTS:
            k = f"{run}/{v}"
            print(f"| {run} | {v} | {r[f'{k}/all_joints/4']:.2f} | {r[f'{k}/all_joints/8']:.2f} | "
                  f"{r[f'{k}/all_joints/16']:.2f} | {r[f'{k}/two_joint/8']:.2f} | "
                  f"{ps[f'{k}/psnr']:.2f} | {ps[f'{k}/motion_psnr']:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    if args.sheet and sheet_rows:
        from edge.visual import contact_sheet, write_png

        names = ["start", "truth 8"] + [f"{Path(run).name} {v}" for run in models
                                        for v in VARIANTS]
        write_png(args.sheet, contact_sheet(
            sheet_rows, row_labels=[c.cell_id for c in cells[:len(sheet_rows)]],
            tile_labels=[names] + [[]] * (len(sheet_rows) - 1), scale=3,
            note=f"{args.split}: step 8 of each cell's first all-joints candidate"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
