"""Where does the warp model's arm flow stand against the exact flow of the robot's pixels?

    python scripts/flow_diagnostics.py --data data/cells --split test_convention \
        --model models/reference-checkpoints/warp.pt [--model RUN/warp.pt ...] \
        [--cells 32] [--json out.json]

Needs the split's geometry (``syncedge cells geometry --data DATA --split SPLIT``).

1. **Flow error on the robot** (end-point error, px, mean over the robot pixels of the
   target): each model's 64x64 arm flow, zero flow and OpenCV DIS (the flow target of the
   DIS loss), against the exact backward flow, on the same (start, target) pairs 1-16 frames
   apart (``PairSet.batch``, seeded).
2. **Each channel's own fields** (where the split's geometry carries the per-DoF poses,
   geometry version 2): the end-point error (px per unit of ``sin``/``1 - cos``) of each
   model's per-DoF flow fields of the step against the true fields at the start frame
   (``export.train.warp.dof_field_loss``), beside zero fields; the reading of the
   calibration, channel by channel.
3. **The additive form's bound**: for each cell's first motion episode, from frame 0 to
   frames 4, 8 and 16, the forward displacement of every start-frame robot pixel under the
   true move, against the sum over joints of its displacement when that joint alone makes
   its own move (the form of the warp model's step: a sum of per-DoF fields) - the error a
   perfect per-DoF reading at the start pose would still make.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from export.cells.geometry import true_backward_flow  # noqa: E402


def flow_errors(models: list[str], data: str, split: str, cells: int, batches: int,
                seed: int) -> tuple[dict[str, float], dict[str, float]]:
    """Mean end-point error (px) on the target's robot pixels, per model, zero and DIS; and
    (where the geometry has per-DoF poses) the per-DoF field error per model with a per-DoF
    flow network, and of zero fields."""
    import cv2
    import torch

    from export.models.warp import WarpConfig, WarpModel
    from export.train.data import load_cells
    from export.train.warp import PairSet, batch_forward, dof_field_loss

    loaded = []
    for path in models:
        ck = torch.load(path, map_location="cpu", weights_only=False)
        m = WarpModel(WarpConfig.from_dict(ck["config"]))
        m.load_state_dict(ck["model"])
        loaded.append((path, m.eval()))
    pairs = PairSet(load_cells(data, [split], 7, 8, limit=cells, with_geometry=True), "cpu")
    rng = np.random.default_rng(seed)
    dis = cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_MEDIUM)  # type: ignore[attr-defined]
    sums: dict[str, float] = {}
    dof_sums: dict[str, float] = {}
    count = 0
    with_dof = all(g is not None and "dof_poses" in g for c in pairs.geometry for g in c)
    with torch.no_grad():
        for _ in range(batches):
            b = pairs.batch(rng, min(6, pairs.n), 6, 16, flow_target="true",
                            dof_fields=with_dof)
            robot = (b["mask"][:, 0] > 0) & (b["true_flow_valid"][:, 0] > 0)
            truth = b["true_flow"]
            n = int(robot.sum())
            flows = {"zero": torch.zeros_like(truth)}
            d = []
            for i in range(len(truth)):
                g0 = cv2.cvtColor(b["start"][i].permute(1, 2, 0).numpy(), cv2.COLOR_RGB2GRAY)
                g1 = cv2.cvtColor(b["target"][i].permute(1, 2, 0).numpy(), cv2.COLOR_RGB2GRAY)
                d.append(torch.from_numpy(dis.calc(g1, g0, None)).permute(2, 0, 1))
            flows["dis"] = torch.stack(d)
            keep: dict = {}
            for path, m in loaded:
                flows[path] = batch_forward(m, b, keep=keep)[1]["flow"]
                if with_dof and "fields" in keep:
                    dof_sums[path] = dof_sums.get(path, 0.0) + float(
                        dof_field_loss(keep["fields"], keep["context"], b)[1])
            if with_dof and "fields" in keep:  # zero fields, on the channels swept
                dof_sums["zero"] = dof_sums.get("zero", 0.0) + float(
                    dof_field_loss(torch.zeros_like(keep["fields"]), keep["context"], b)[1])
            for k, f in flows.items():
                sums[k] = sums.get(k, 0.0) + float(torch.linalg.norm(f - truth, dim=1)[robot].sum())
            count += n
    return ({k: v / max(count, 1) for k, v in sums.items()},
            {k: v / batches for k, v in dof_sums.items()})


def additive_bound(data: str, split: str, cells: int,
                   steps: tuple[int, ...] = (4, 8, 16)) -> dict[str, dict[str, float]]:
    """Per step: the true displacement and the error of the sum of single-joint moves (px)."""
    from edge.episode import load_episode
    from export.cells.generate import CellGenerator, GenerateOptions
    from export.cells.sampling import CellParams

    gen = CellGenerator(GenerateOptions())
    rows: dict[int, dict[str, list[float]]] = {t: {"true": [], "sum": []} for t in steps}
    done = 0
    for man_path in sorted((Path(data) / split).glob("chunk-*/manifest.json")):
        man = json.loads(man_path.read_text())
        for cj in man["cells"]:
            if done >= cells:
                break
            params = CellParams.from_json_dict(cj)
            scene = gen.scene(params.robot)
            scene.apply_cell(params)
            ep = load_episode(man_path.parent / cj["cell_id"] / "motion-00.npz")
            q = params.convention.to_canonical(ep.joint_positions)
            depth, link, poses0, cam = scene.render_geometry(q[0])

            def moved(qq: np.ndarray, depth=depth, link=link, poses0=poses0,
                      cam=cam, scene=scene) -> tuple[np.ndarray, np.ndarray]:
                # the "backward" flow from the start frame to pose qq is the forward
                # displacement of the start frame's robot pixels under that pose
                return true_backward_flow(depth, link, poses0, scene.link_poses(qq), cam)

            for t in steps:
                true, on = moved(q[t])
                total = np.zeros_like(true)
                for j in range(q.shape[1]):
                    qj = q[0].copy()
                    qj[j] = q[t][j]
                    total += moved(qj)[0]
                rows[t]["true"].append(float(np.linalg.norm(true[:, on], axis=0).mean()))
                rows[t]["sum"].append(float(np.linalg.norm((total - true)[:, on],
                                                           axis=0).mean()))
            done += 1
    gen.close()
    return {str(t): {"true_displacement_px": float(np.mean(r["true"])),
                     "sum_of_single_joint_error_px": float(np.mean(r["sum"])),
                     "cells": len(r["true"])} for t, r in rows.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="cells folder")
    p.add_argument("--split", required=True, help="split folder with rendered geometry")
    p.add_argument("--model", action="append", default=[], help="a warp.pt (repeat)")
    p.add_argument("--cells", type=int, default=32, help="cells (default 32)")
    p.add_argument("--batches", type=int, default=6, help="pair batches of 36 (default 6)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    os.environ.setdefault("MUJOCO_GL", "egl")
    flow, dof = flow_errors(args.model, args.data, args.split, args.cells, args.batches,
                            args.seed)
    out = {"flow_error_on_robot_px": flow, "dof_field_error_px": dof,
           "additive_form_bound": additive_bound(args.data, args.split, args.cells)}
    for k, v in flow.items():
        print(f"flow end-point error on the robot, {k}: {v:.2f} px")
    for k, v in dof.items():
        print(f"per-DoF field end-point error at the start frame, {k}: {v:.2f} px")
    for t, r in out["additive_form_bound"].items():
        print(f"step {t}: true displacement {r['true_displacement_px']:.2f} px, sum of "
              f"single-joint moves off by {r['sum_of_single_joint_error_px']:.2f} px "
              f"({r['cells']} cells)")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
