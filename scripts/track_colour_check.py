"""Do colour-opponent flows track a calibration sweep better than grey alone?

For held-out cells, the cell's own 256x256 calibration sweep (``--calibration-data``,
the planner's timing, as ``chain_fit_eval.py`` reads it) is tracked from the home frame by
:func:`export.models.chain_fit.sweep_tracks` on grey frames and with ``colour=True``, and
each is scored against the true displacement of the robot's points (MuJoCo geometry,
model px) on the samples that truly move more than half a model pixel: median error,
median over the farthest quarter of them, share the forward-backward check trusts, and
per channel the arm pixels counted as moved at the sweep's far end (what decides whether
a channel is modelled) against the truly moved ones.

    python scripts/track_colour_check.py --data data/cells --calibration-data \\
        data/cells256 --split test_robot --cells 8 --json out/track_colour.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from chain_fit_eval import true_tracks  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="cells folder (64x64 cells)")
    p.add_argument("--calibration-data", required=True, help="the same cells at 256x256")
    p.add_argument("--split", required=True)
    p.add_argument("--skip", type=int, default=0)
    p.add_argument("--cells", type=int, default=8)
    p.add_argument("--json", required=True)
    args = p.parse_args(argv)

    from edge.episode import load_episode
    from export.cells.generate import CellGenerator, GenerateOptions
    from export.cells.sampling import CellParams
    from export.models.chain_fit import (
        calibration_sweeps,
        sweep_robot_mask,
        sweep_timing,
        sweep_tracks,
    )
    from export.train.data import load_cells

    cells = load_cells(args.data, [args.split], 7, 8, limit=args.skip + args.cells)[args.skip:]
    gen = CellGenerator(GenerateOptions())
    rows: list[dict] = []
    for cell in cells:
        params = CellParams.from_json_dict(cell.params)
        scene = gen.scene(params.robot)
        scene.apply_cell(params)
        rel = Path(cell.motions[0].path).parent.relative_to(Path(args.data))
        ep = load_episode(Path(args.calibration_data) / rel / "calibration.npz")
        ep, _ = sweep_timing(ep)
        k = ep.num_dof
        q = np.asarray(ep.joint_positions, np.float64)[:, :k]
        truth, _, on_robot = true_tracks(scene, params, q[0], q)
        robot = sweep_robot_mask(ep.frames, size=(64, 64))
        ys, xs = np.nonzero(robot)
        segments = calibration_sweeps(ep)
        moved = np.linalg.norm(truth, axis=-1)
        ways = {}
        for tag, colour in (("grey", False), ("colour", True)):
            t0 = time.perf_counter()
            ways[tag] = sweep_tracks(ep.frames, size=(64, 64), colour=colour)
            ways[tag + "_s"] = time.perf_counter() - t0
        for c, (a, b) in enumerate(segments):
            m = on_robot[None] & robot[None] & (moved[a:b] > 0.5)
            far_q = np.abs(q[a:b, c] - q[0, c])
            peak = far_q >= 0.75 * far_q.max() if far_q.max() > 0 else np.zeros(b - a, bool)
            row: dict = {"cell": cell.cell_id, "channel": c,
                         "amplitude_rad": float(far_q.max()), "samples": int(m.sum()),
                         "moved_px_true": int((moved[a:b][peak][:, ys, xs].mean(0) > 0.5).sum())
                         if peak.any() else 0}
            truly = (moved[a:b][peak][:, ys, xs].mean(0) > 0.5) if peak.any() else None
            for tag in ("grey", "colour"):
                tr, va = ways[tag]
                mag = np.linalg.norm(tr, axis=-1) * va
                if truly is None:
                    row[f"moved_px_{tag}"] = row[f"moved_tp_{tag}"] = row[f"moved_fp_{tag}"] = 0
                    row[f"trusted_tp_{tag}"] = row[f"trusted_fp_{tag}"] = 0
                else:
                    said = mag[a:b][peak][:, ys, xs].mean(0) > 0.5  # fit_chain's rule
                    row[f"moved_px_{tag}"] = int(said.sum())
                    row[f"moved_tp_{tag}"] = int((said & truly).sum())
                    row[f"moved_fp_{tag}"] = int((said & ~truly).sum())
                    # the mean over the trusted far-end frames only (an untrusted frame
                    # says nothing, rather than "did not move")
                    n_ok = va[a:b][peak][:, ys, xs].sum(0)
                    said2 = (mag[a:b][peak][:, ys, xs].sum(0) > 0.5 * n_ok) & (n_ok > 0)
                    row[f"trusted_tp_{tag}"] = int((said2 & truly).sum())
                    row[f"trusted_fp_{tag}"] = int((said2 & ~truly).sum())
                if m.any():
                    far = moved[a:b][m] >= np.quantile(moved[a:b][m], 0.75)
                    err = np.linalg.norm(tr[a:b] - truth[a:b], axis=-1)[m]
                    ok = va[a:b][m]
                    row[f"err_px_{tag}"] = float(np.median(err))
                    row[f"err_far_px_{tag}"] = float(np.median(err[far]))
                    row[f"trusted_{tag}"] = float(ok.mean())
                    row[f"trusted_err_px_{tag}"] = float(np.median(err[ok])) if ok.any() \
                        else None
            rows.append(row)
        print(f"{cell.cell_id}: grey {ways['grey_s']:.1f} s, colour {ways['colour_s']:.1f} s",
              file=sys.stderr, flush=True)

    def med(key: str) -> float | None:
        v = np.array([r[key] for r in rows if r.get(key) is not None], float)
        return float(np.median(v)) if len(v) else None

    summary = {}
    print(f"{'way':<7} {'err px':>7} {'far px':>7} {'trusted':>8} {'trusted err':>12} "
          f"{'moved px / true':>16}")
    for tag in ("grey", "colour"):
        s = {"err_px": med(f"err_px_{tag}"), "err_far_px": med(f"err_far_px_{tag}"),
             "trusted": med(f"trusted_{tag}"), "trusted_err_px": med(f"trusted_err_px_{tag}"),
             "moved_px_share": float(np.median([r[f"moved_px_{tag}"] / r["moved_px_true"]
                                                for r in rows if r["moved_px_true"]])),
             "moved_tp_fp": [sum(r[f"moved_tp_{tag}"] for r in rows),
                             sum(r[f"moved_fp_{tag}"] for r in rows)],
             "trusted_rule_tp_fp": [sum(r[f"trusted_tp_{tag}"] for r in rows),
                                    sum(r[f"trusted_fp_{tag}"] for r in rows)],
             "truly_moved": sum(r["moved_px_true"] for r in rows)}
        summary[tag] = s
        print(f"{tag:<7} {s['err_px']:7.2f} {s['err_far_px']:7.2f} {s['trusted']:8.2f} "
              f"{s['trusted_err_px']:12.2f} {s['moved_px_share']:16.2f}  moved tp/fp "
              f"{s['moved_tp_fp']}, over trusted frames {s['trusted_rule_tp_fp']}, of "
              f"{s['truly_moved']}")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": " ".join(sys.argv), "summary": summary,
                               "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
