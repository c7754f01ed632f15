"""Are a wide sweep's tracks the reason its read is worse?

For held-out cells, the calibration sweep is re-rendered at 256x256 at a timing of
``export.evaluation.calibration_timing.ONE_CHANGE_VARIANTS`` (as ``chain_fit_eval.py
--calibration-timing`` does, same seeds), brought to the 8 poses per channel the chain is
read from (``sweep_timing``), and the home frame's pixels are tracked two ways:

- ``A``: chained DIS over the 8 poses only (what ``read_chain`` does);
- ``B``: chained DIS through the recorded frames between them, a frame kept wherever some
  channel moved ``--step`` rad since the last kept one, scored at the same 8 poses.

Each is scored against the true displacement of the robot's points (MuJoCo geometry, model
px): median error, median over the farthest quarter of the moving samples, share of the
samples the forward-backward check trusts and share of trusted samples more than 3 px off.
With ``--fit`` the chain is also fitted to each (``fit_chain``, about 80 s per cell and
way on 2 cores) and its axes compared with the true ones and their depth-mirrored twins.

    python scripts/sweep_track_check.py --data data/cells --split test_robot --skip 8 \
        --cells 8 --timing 30Hz-2s-amp --fit --json out/track_check.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from chain_fit_eval import axis_errors, true_tracks  # noqa: E402


def tracking_path(q: np.ndarray, picks: list[int], step: float) -> tuple[list[int], list[int]]:
    """Recorded frames to track through (``picks`` plus, between consecutive picks, a frame
    wherever some channel of ``q`` ``[T, K]`` moved ``step`` since the last kept frame)
    and the position of each pick in that path."""
    path = [picks[0]]
    where = [0]
    for a, b in zip(picks[:-1], picks[1:], strict=True):
        last = a
        for j in range(a + 1, b):
            if np.abs(q[j] - q[last]).max() >= step:
                path.append(j)
                last = j
        if b != path[-1]:
            path.append(b)
        where.append(len(path) - 1)
    return path, where


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="cells folder (64x64 cells)")
    p.add_argument("--split", required=True)
    p.add_argument("--skip", type=int, default=0)
    p.add_argument("--cells", type=int, default=8)
    p.add_argument("--timing", required=True, help="a ONE_CHANGE_VARIANTS name")
    p.add_argument("--step", type=float, default=0.08,
                   help="rad a channel may move between tracked frames in way B")
    p.add_argument("--fit", action="store_true", help="also fit the chain to both")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", required=True)
    args = p.parse_args(argv)

    from edge.episode import load_episode
    from export.cells.generate import CellGenerator, GenerateOptions
    from export.cells.robots import robot_spec
    from export.cells.sampling import CellParams
    from export.evaluation.calibration_timing import (
        ONE_CHANGE_VARIANTS,
        _variant_sweeps,
        retimed_positions,
    )
    from export.models.chain_fit import (
        calibration_sweeps,
        camera_pinhole,
        fit_chain,
        on_grid,
        sweep_robot_mask,
        sweep_timing,
        sweep_tracks,
    )
    from export.train.data import load_cells

    variants = {v.name: v for v in ONE_CHANGE_VARIANTS}
    if args.timing not in variants:
        p.error(f"--timing {args.timing!r}: expected one of {sorted(variants)}")
    variant = variants[args.timing]
    cells = load_cells(args.data, [args.split], 7, 8, limit=args.skip + args.cells)[args.skip:]
    gen = CellGenerator(GenerateOptions())
    gen256 = CellGenerator(GenerateOptions(width=256, height=256, segmentation=False))
    rows: list[dict] = []
    for i, cell in enumerate(cells):
        params = CellParams.from_json_dict(cell.params)
        scene = gen.scene(params.robot)
        scene.apply_cell(params)
        cal = load_episode(Path(cell.motions[0].path).parent / "calibration.npz")
        conv = params.convention
        limits = np.asarray(robot_spec(params.robot).limits_rad, np.float64)
        rng = np.random.default_rng(args.seed + 7919 * i)  # chain_fit_eval's draw
        q = retimed_positions(np.asarray(cal.joint_positions[0], np.float64),
                              _variant_sweeps(cal, conv, limits, variant, rng), variant)
        ep = gen256.render_episode(params, conv.to_canonical(q), "calibration")
        ep = replace(ep, timestamps=np.arange(len(q), dtype=np.float64) / variant.rate_hz,
                     ee_px=None, robot_mask=None,
                     metadata=replace(ep.metadata, fps=float(variant.rate_hz), segments=()))
        ep8, report = sweep_timing(ep)
        k = ep8.num_dof
        q8 = np.asarray(ep8.joint_positions, np.float64)[:, :k]
        path, where = tracking_path(np.asarray(ep.joint_positions, np.float64)[:, :k],
                                    report["source_frames"], args.step)
        truth, _, on_robot = true_tracks(scene, params, q8[0], q8)
        ways = {"A": sweep_tracks(ep8.frames, size=(64, 64))}
        tb, vb = sweep_tracks(ep.frames[path], size=(64, 64))
        ways["B"] = (tb[where], vb[where])
        segments = calibration_sweeps(ep8)
        robot = sweep_robot_mask(ep8.frames, size=(64, 64))
        moved = np.linalg.norm(truth, axis=-1)
        cell_rows = []
        for c, (a, b) in enumerate(segments):
            m = on_robot[None] & robot[None] & (moved[a:b] > 0.5)
            row: dict = {"cell": cell.cell_id, "channel": c,
                         "amplitude_rad": float(np.abs(q8[a:b, c] - q8[0, c]).max()),
                         "samples": int(m.sum())}
            if m.any():
                far = moved[a:b][m] >= np.quantile(moved[a:b][m], 0.75)
                for tag, (tr, va) in ways.items():
                    err = np.linalg.norm(tr[a:b] - truth[a:b], axis=-1)[m]
                    ok = va[a:b][m]
                    row[f"err_px_{tag}"] = float(np.median(err))
                    row[f"err_far_px_{tag}"] = float(np.median(err[far]))
                    row[f"trusted_{tag}"] = float(ok.mean())
                    row[f"trusted_off_3px_{tag}"] = float((err[ok] > 3).mean()) if ok.any() \
                        else None
            cell_rows.append(row)
        if args.fit:
            focal, centre, _ = camera_pinhole(ep8, (64, 64))
            for tag, (tr, va) in ways.items():
                t0 = time.perf_counter()
                fit = fit_chain(tr, va, q8, segments, focal, centre, robot=robot,
                                home=on_grid(ep8.frames[:1], (64, 64))[0])
                err, twin = axis_errors(fit, scene, params, q8[0])
                for row in cell_rows:
                    row[f"axis_deg_{tag}"] = float(err[row["channel"]])
                    row[f"axis_or_twin_deg_{tag}"] = float(twin[row["channel"]])
                print(f"  fit {tag}: {time.perf_counter() - t0:.0f} s, axis error (deg) "
                      f"{np.round(err).tolist()}", file=sys.stderr, flush=True)
        rows += cell_rows
        print(f"{cell.cell_id}: tracked {len(where)} poses through {len(path)} recorded "
              f"frames", file=sys.stderr, flush=True)

    def med(key: str, sel) -> float | None:
        v = np.array([r[key] for r in rows if sel(r) and r.get(key) is not None], float)
        v = v[np.isfinite(v)]
        return float(np.median(v)) if len(v) else None

    def count(key: str, over: float, sel) -> list[int]:
        v = np.array([r[key] for r in rows if sel(r) and r.get(key) is not None], float)
        v = v[np.isfinite(v)]
        return [int((v > over).sum()), len(v)]

    bands = {"all": lambda r: True, "under 0.3 rad": lambda r: r["amplitude_rad"] < 0.3,
             "0.3-0.5 rad": lambda r: 0.3 <= r["amplitude_rad"] < 0.5,
             "0.5 rad and over": lambda r: r["amplitude_rad"] >= 0.5}
    summary = {}
    print(f"{'channels swept':<18} {'way':<4} {'err px':>7} {'far px':>7} {'axis > 90':>10} "
          f"{'twin > 30':>10}")
    for band, sel in bands.items():
        summary[band] = {}
        for tag in ("A", "B"):
            s = {"err_px": med(f"err_px_{tag}", sel), "err_far_px": med(f"err_far_px_{tag}", sel)}
            if args.fit:
                s["axis_over_90"] = count(f"axis_deg_{tag}", 90, sel)
                s["axis_and_twin_over_30"] = count(f"axis_or_twin_deg_{tag}", 30, sel)
            summary[band][tag] = s
            axis = "/".join(map(str, s.get("axis_over_90", ["-"])))
            twin = "/".join(map(str, s.get("axis_and_twin_over_30", ["-"])))
            print(f"{band:<18} {tag:<4} {s['err_px'] or float('nan'):7.2f} "
                  f"{s['err_far_px'] or float('nan'):7.2f} {axis:>10} {twin:>10}")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": " ".join(sys.argv), "timing": variant.name,
                               "step_rad": args.step, "summary": summary, "rows": rows},
                              indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
