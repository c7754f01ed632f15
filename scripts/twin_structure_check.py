"""Can a serial arm's joint structure choose between a read axis and its depth-mirrored twin?

    python scripts/twin_structure_check.py --data data/cells --split test_robot \\
        --fits bench/chain_fits/futures/test_robot [--cells 64] [--json out.json]

Serial arms are built with neighbouring joint axes parallel or perpendicular (the
Denavit-Hartenberg twist of consecutive joints is 0 or 90 deg on every robot the cells
use). A channel read on the depth-mirrored twin of its axis (``export.models.chain_fit.
twin_candidates``) might break that, and the twin restore it. For every kept sweep read
(``<cell>_dis.npz``) and every channel whose kinematic parent (the previous joint of the
robot's canonical order, from the cell's ground truth) is read, this prints and writes: the
true angle between the two axis lines, the read's, the angle with the channel's axis on its
twin ``(-x, -y, z)``, and how often "take the twin where it sits nearer 0 or 90 deg by a
margin" agrees with the twin being nearer the truth. A diagnostic on the ground truth of
the project's own cells; it changes no read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def line_angle(a: np.ndarray, b: np.ndarray) -> float:
    """Acute angle (deg) between the lines along unit vectors ``a`` and ``b``."""
    return float(np.degrees(np.arccos(np.clip(abs(float(a @ b)), 0.0, 1.0))))


def off_structure(angle_deg: float) -> float:
    """How far (deg) a line angle in [0, 90] is from parallel or perpendicular."""
    return min(angle_deg, 90.0 - angle_deg)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="rendered cells (syncedge cells generate)")
    p.add_argument("--split", required=True, help="data split folder, e.g. test_robot")
    p.add_argument("--fits", required=True, help="folder of kept reads (<cell>_dis.npz)")
    p.add_argument("--cells", type=int, default=64, help="first N cells of the split")
    p.add_argument("--json", help="write the per-channel rows and the counts here")
    args = p.parse_args(argv)

    import torch

    from edge.episode import load_episode
    from edge.runtime.chain import load_chain_calibration
    from export.cells.generate import CellGenerator, GenerateOptions
    from export.cells.geometry import dof_link_poses, true_joint_axes
    from export.cells.sampling import CellParams
    from export.models.kinematics import camera_frame
    from export.train.data import load_cells

    cells = load_cells(args.data, [args.split], 7, 8, limit=args.cells)
    gen = CellGenerator(GenerateOptions())
    rows: list[dict] = []
    for cell in cells:
        path = Path(args.fits) / f"{cell.cell_id}_dis.npz"
        if not path.is_file():
            continue
        params = CellParams.from_json_dict(cell.params)
        scene = gen.scene(params.robot)
        scene.apply_cell(params)
        cal = load_episode(Path(cell.motions[0].path).parent / "calibration.npz")
        n = cal.num_dof
        conv = params.convention
        qh = conv.to_canonical(np.asarray(cal.joint_positions, np.float64)[:1, :n])[0]
        _, _, _, cam = scene.render_geometry(qh)
        axes_w, _, _ = true_joint_axes(scene.link_poses(qh),
                                       dof_link_poses(scene.link_poses, qh))
        rot = camera_frame(torch.from_numpy(cam), 64, 64)[0].numpy()
        chain = load_chain_calibration(path)
        carried = np.asarray(chain.carried) > 0.5
        slide = np.asarray(chain.travel_per_unit) > 0
        true = np.zeros((n, 3))
        for c, (j, s) in enumerate(zip(conv.perm, conv.signs, strict=True)):
            if axes_w[j].any():
                true[c] = s * (rot @ axes_w[j])
        read = [c for c in range(n) if carried[c].sum() >= 3 and not slide[c] and true[c].any()]
        for c in read:
            parent = [d for d in read if conv.perm[d] == conv.perm[c] - 1]
            if not parent:
                continue
            d = parent[0]
            axis, twin = chain.axes[c], chain.axes[c] * np.array([-1.0, -1.0, 1.0])
            rows.append({
                "cell": cell.cell_id, "robot": params.robot, "channel": c, "parent": d,
                "true_angle_deg": line_angle(true[c], true[d]),
                "read_angle_deg": line_angle(axis, chain.axes[d]),
                "twin_angle_deg": line_angle(twin, chain.axes[d]),
                "axis_error_deg": float(np.degrees(np.arccos(np.clip(true[c] @ axis, -1, 1)))),
                "twin_error_deg": float(np.degrees(np.arccos(np.clip(true[c] @ twin, -1, 1)))),
                "parent_error_deg": float(np.degrees(np.arccos(np.clip(true[d] @ chain.axes[d],
                                                                       -1, 1))))})
    true_off = np.array([off_structure(r["true_angle_deg"]) for r in rows])
    print(f"{args.split}: {len(rows)} channel/parent pairs in {len(cells)} cells; true angle "
          f"within 1 deg of 0 or 90 on {int((true_off < 1).sum())}")
    far = [r for r in rows if r["axis_error_deg"] > 90]
    print(f"channels read more than 90 deg off: {len(far)}; their read angle's distance from "
          f"0/90 median {np.median([off_structure(r['read_angle_deg']) for r in far]):.1f} "
          f"deg, the twin's {np.median([off_structure(r['twin_angle_deg']) for r in far]):.1f}")
    counts = {}
    print("margin | twin taken, nearer truth | taken, not nearer | missed | kept right")
    for margin in (0, 10, 20):
        tp = fp = fn = tn = 0
        for r in rows:
            if r["parent_error_deg"] > 60:  # the parent itself is off: nothing to compare with
                continue
            should = r["axis_error_deg"] > 90 and r["twin_error_deg"] < r["axis_error_deg"]
            take = (off_structure(r["twin_angle_deg"]) + margin
                    < off_structure(r["read_angle_deg"]))
            tp += should and take
            fp += take and not should
            fn += should and not take
            tn += not (should or take)
        counts[str(margin)] = {"taken_right": tp, "taken_wrong": fp, "missed": fn,
                               "kept_right": tn}
        print(f"{margin:6d} | {tp:24d} | {fp:17d} | {fn:6d} | {tn:10d}")
    if args.json:
        Path(args.json).write_text(json.dumps({"split": args.split, "rows": rows,
                                               "by_margin_deg": counts}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
