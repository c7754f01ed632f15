"""Pre-check verdicts measured against ground truth rendered by MuJoCo.

    python bench/bench_precheck.py [--cells 64] [--split all_held_out ...] \
        [--out bench/results/precheck.json]

Per held-out cell (drawn like the evaluation splits: held-out conventions, the held-out
robot, both with the held-out camera band), from one start pose, M = 8 candidates of 16
steps are drawn from the split's own motion sampler (``all_joints``) and rendered by
MuJoCo with their robot masks (:func:`export.cells.futures.draw_futures`). Per cell:

- a keep-out rectangle is drawn so that 30-70% of the candidates truly *enter* it (at
  least 4 true robot-mask pixels inside at some step 1..16) and no robot pixel of the
  start frame lies inside (cells where no such rectangle is found in 400 draws are left
  out and counted);
- one DoF gets a joint limit between the candidates' excursions, so that some candidates
  truly exceed it;
- the goal is the true last frame of one truly safe candidate (entering nothing,
  exceeding nothing); the *truly best* candidate is the safe one whose true last frame is
  nearest the goal by the pre-check's own distance (SSIM).

The pre-check (:func:`edge.precheck.evaluate.evaluate`, the rules of the shipped kit:
``motion_threshold`` 20, ``max_moved_pixels`` 4) then runs on each model's predicted
frames. Reported per split and model (the shipped model with the cell's calibration, the
model trained without calibration in history mode, and copy-last: the start frame
repeated), with 95% bootstrap intervals over cells (1000 resamples):

- keep-out recall (truly entering candidates refused by the keep-out rule) and false
  refusals (candidates that truly stay out, refused by it); and the recall at the
  smallest ``max_moved_pixels`` whose false refusals are at most 10% (that threshold is
  chosen on the same cells, so this figure is optimistic);
- joint-limit verdict accuracy (the rule is computed from the actions, so it is exact by
  construction; printed as a check);
- chosen = truly best (cells with a truly safe candidate);
- the median over cells of the Spearman correlation between predicted and true goal
  distance (1 - SSIM to the goal, over the 8 candidates; a constant prediction such as
  copy-last's counts 0).

Needs MuJoCo (``pip install '.[train]'``). Prints a table and writes JSON. On 2 shared CPU
cores 64 cells per split took about 7 minutes (20 minutes for the three splits).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edge.precheck.evaluate import evaluate  # noqa: E402
from edge.precheck.rules import (  # noqa: E402
    GoalRule,
    JointLimits,
    KeepOutRegion,
    KeepOutRule,
    Rules,
    rasterise,
)

SPLITS = {"held_out_convention": "test_convention", "held_out_robot": "test_robot",
          "all_held_out": "test_all"}
M, STEPS, ENTER_PX = 8, 16, 4
MOTION_THRESHOLD, MAX_MOVED = 20, 4
TARGETS = {"keepout_recall": ">= 0.95", "keepout_false_refusals": "<= 0.10",
           "chosen_is_truly_best": ">= 0.70 (chance 1/8)", "spearman_median": ">= 0.8"}


def _seed(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8],
                          "little")


def _ssim(a: np.ndarray, b: np.ndarray) -> float:
    from edge.metrics import ssim

    return float(ssim(a, b))


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation of two 1-D arrays (average ranks for ties); 0.0 when
    either is constant."""
    from scipy.stats import rankdata

    rx, ry = rankdata(x), rankdata(y)
    if rx.std() == 0 or ry.std() == 0:
        return 0.0
    return float(np.corrcoef(rx, ry)[0, 1])


def draw_cell(gen: object, split: str, index: int) -> dict | None:
    """One benchmark cell: calibration episode, candidates, truth, rules. None if no
    keep-out rectangle with 30-70% truly entering candidates was found."""
    from export.cells.futures import draw_futures
    from export.cells.robots import robot_spec
    from export.cells.sampling import sample_cell
    from export.cells.trajectories import motion_trajectory

    cell_id = f"bench-precheck-{split}-{index:03d}"
    rng = np.random.default_rng(_seed("precheck", split, index))
    cell = sample_cell(rng, split, cell_id)
    cal = gen.cell_episodes(cell)["calibration"]  # type: ignore[attr-defined]
    spec = robot_spec(cell.robot)
    q0 = cell.convention.to_controller(motion_trajectory(rng, spec, 2, "all_joints")[0])
    fut = draw_futures(gen, cell, q0, M, STEPS, "all_joints", seed=index)
    masks = fut.robot_mask  # (M, T+1, H, W)
    h, w = masks.shape[-2:]
    region = None
    for _ in range(400):
        rw, rh = rng.uniform(0.15, 0.45, 2)
        x0, y0 = rng.uniform(0, 1 - rw), rng.uniform(0, 1 - rh)
        poly = ((x0, y0), (x0 + rw, y0), (x0 + rw, y0 + rh), (x0, y0 + rh))
        m = rasterise((KeepOutRegion("keep-out", poly),), h, w).astype(bool)
        if (masks[0, 0] & m).any():
            continue
        enters = ((masks[:, 1:] & m).sum((2, 3)) >= ENTER_PX).any(1)  # (M,)
        if 0.3 <= enters.mean() <= 0.7:
            region = poly, enters
            break
    if region is None:
        return None
    q = q0 + np.cumsum(fut.actions.astype(np.float64), 1)  # (M, T, A) after each step
    j = int(rng.integers(q.shape[-1]))
    exc = q[:, :, j] - q0[j]  # (M, T)
    hi_side = rng.random() < 0.5
    reach = exc.max(1) if hi_side else -exc.min(1)  # (M,) furthest excursion that way
    limit = float(np.quantile(reach, rng.uniform(0.3, 0.7)))
    lower = np.full(len(q0), -10.0)
    upper = np.full(len(q0), 10.0)
    if hi_side:
        upper[j] = q0[j] + limit
    else:
        lower[j] = q0[j] - limit
    exceeds = ((q < lower) | (q > upper)).any((1, 2))
    safe = ~region[1] & ~exceeds
    goal_idx = int(rng.choice(np.flatnonzero(safe))) if safe.any() else None
    goal = fut.frames[goal_idx, -1] if goal_idx is not None else None
    true_dist = (np.array([1 - _ssim(fut.frames[i, -1], goal) for i in range(M)])
                 if goal is not None else None)
    best = None
    if goal is not None:
        best = int(np.flatnonzero(safe)[np.argmin(true_dist[safe])])  # type: ignore[index]
    return {"cell": cell, "calibration": cal, "q0": q0, "futures": fut, "region": region[0],
            "enters": region[1], "lower": lower, "upper": upper, "exceeds": exceeds,
            "goal": goal, "true_dist": true_dist, "best": best}


def score_cell(c: dict, frames: np.ndarray, masks: np.ndarray | None = None) -> dict:
    """Verdicts for one model's predicted frames uint8 ``[M, T, H, W, 3]`` against truth;
    with ``masks`` (float32 ``[M, T, H, W]``, the predicted robot mask) keep-out is
    decided on the mask (``basis: robot_mask``), else on motion."""
    start = c["futures"].frames[0, 0]
    acts = c["futures"].actions
    ko = KeepOutRule((KeepOutRegion("keep-out", tuple(c["region"])),), MOTION_THRESHOLD,
                     MAX_MOVED, "motion" if masks is None else "robot_mask", ENTER_PX - 1)
    path = Path("bench-precheck")
    keep = evaluate(Rules(path, keep_out=ko), start, None, acts, frames, robot_masks=masks)
    refused = np.array([not v.passed for v in keep.verdicts])
    score = "keepout_moved_max" if masks is None else "keepout_robot_max"
    limits = evaluate(Rules(path, joint_limits=JointLimits(tuple(c["lower"]),
                                                           tuple(c["upper"]))),
                      start, c["q0"], acts, frames)
    jl_refused = np.array([not v.passed for v in limits.verdicts])
    out = {"enters": c["enters"].tolist(), "keepout_refused": refused.tolist(),
           "keepout_moved_max": [int(v.scores[score]) for v in keep.verdicts],
           "jl_correct": (jl_refused == c["exceeds"]).tolist(),
           "chosen_is_best": None, "spearman": None}
    if c["goal"] is not None:
        goal_path = Path("goal.png")
        rules = Rules(path, keep_out=ko, joint_limits=JointLimits(tuple(c["lower"]),
                                                                   tuple(c["upper"])),
                      goal=GoalRule(goal_path, -1.0))
        full = evaluate(rules, start, c["q0"], acts, frames, goal=c["goal"], robot_masks=masks)
        out["chosen_is_best"] = bool(full.chosen == c["best"])
        pred_dist = np.array([1 - _ssim(frames[i, -1], c["goal"]) for i in range(M)])
        out["spearman"] = spearman(pred_dist, c["true_dist"])
    return out


def _metrics(rows: list[dict]) -> dict:
    enters = np.concatenate([r["enters"] for r in rows]).astype(bool)
    ref = np.concatenate([r["keepout_refused"] for r in rows]).astype(bool)
    jl = np.concatenate([r["jl_correct"] for r in rows]).astype(bool)
    chosen = [r["chosen_is_best"] for r in rows if r["chosen_is_best"] is not None]
    rho = [r["spearman"] for r in rows if r["spearman"] is not None]
    tau, recall_at = operating_point(
        np.concatenate([r["keepout_moved_max"] for r in rows]), enters)
    return {"keepout_recall": float(ref[enters].mean()) if enters.any() else None,
            "keepout_false_refusals": float(ref[~enters].mean()) if (~enters).any() else None,
            "joint_limit_accuracy": float(jl.mean()),
            "chosen_is_truly_best": float(np.mean(chosen)) if chosen else None,
            "spearman_median": float(np.median(rho)) if rho else None,
            "keepout_recall_at_10pct_false_refusals": recall_at,
            "max_moved_pixels_for_10pct_false_refusals": tau}


def operating_point(moved_max: np.ndarray, enters: np.ndarray, false_rate: float = 0.10
                    ) -> tuple[float | None, float | None]:
    """The smallest ``max_moved_pixels`` whose false refusals (candidates that truly stay
    out but move more pixels than that inside the region) are at most ``false_rate``, and
    the keep-out recall there. Chosen on the same cells it is reported on (optimistic).

    Args:
        moved_max: int ``[n]`` per candidate, the most predicted moved pixels inside the
            region at any step.
        enters: bool ``[n]`` whether the candidate truly enters.
    """
    enters = enters.astype(bool)
    if not enters.any() or enters.all():
        return None, None
    for tau in range(int(moved_max.max()) + 1):
        if (moved_max[~enters] > tau).mean() <= false_rate:
            return float(tau), float((moved_max[enters] > tau).mean())
    return None, None


def summarise(rows: list[dict], seed: int = 0, resamples: int = 1000) -> dict:
    """The metrics over cells and their 95% bootstrap intervals (cells resampled)."""
    point = _metrics(rows)
    rng = np.random.default_rng(seed)
    boots: dict[str, list[float]] = {k: [] for k in point}
    for _ in range(resamples):
        sample = [rows[i] for i in rng.integers(len(rows), size=len(rows))]
        for k, v in _metrics(sample).items():
            if v is not None:
                boots[k].append(v)
    return {k: {"value": v, "ci95": ([float(np.percentile(boots[k], 2.5)),
                                      float(np.percentile(boots[k], 97.5))]
                                     if boots[k] else None)} for k, v in point.items()}


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cells", type=int, default=64, help="cells per split (default 64)")
    p.add_argument("--split", action="append", choices=sorted(SPLITS),
                   help="split(s) to run (default: all three held-out splits)")
    p.add_argument("--model", default=str(ROOT / "models" / "reference"))
    p.add_argument("--history-model", default=str(ROOT / "models" / "reference-history"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "precheck.json"))
    args = p.parse_args(argv)
    from edge.commands.common import history_context
    from edge.runtime.context import encode_calibration
    from edge.runtime.model import load_model
    from edge.runtime.rollout import Rollout
    from export.cells.generate import CellGenerator, GenerateOptions

    t0 = time.perf_counter()
    models = {"shipped": load_model(args.model, intra_op_num_threads=args.threads),
              "no_calibration": load_model(args.history_model,
                                           intra_op_num_threads=args.threads)}
    result: dict = {"command": "python bench/bench_precheck.py " + " ".join(argv or sys.argv[1:]),
                    "options": {"cells": args.cells, "candidates": M, "steps": STEPS,
                                "enter_px": ENTER_PX, "motion_threshold": MOTION_THRESHOLD,
                                "max_moved_pixels": MAX_MOVED, "profile": "all_joints"},
                    "targets": TARGETS, "splits": {}}
    try:
        with CellGenerator(GenerateOptions(motion_episodes=0)) as gen:
            for name in args.split or list(SPLITS):
                rows: dict[str, list[dict]] = {"shipped": [], "shipped_robot_mask": [],
                                               "no_calibration": [], "copy_last": []}
                skipped = 0
                for i in range(args.cells):
                    c = draw_cell(gen, SPLITS[name], i)
                    if c is None:
                        skipped += 1
                        continue
                    acts = c["futures"].actions
                    start = c["futures"].frames[0, 0]
                    for label, m in models.items():
                        if label == "shipped":
                            ctx = encode_calibration(m, c["calibration"])
                        else:
                            with contextlib.redirect_stderr(io.StringIO()):
                                ctx = history_context(m, acts.shape[-1])
                        with_mask = label == "shipped" and m.has_robot_mask
                        ro = Rollout(m, ctx, max_horizon=STEPS, max_candidates=M,
                                     robot_mask=with_mask)
                        frames = ro.run(start, acts)
                        rows[label].append(score_cell(c, frames))
                        if with_mask:
                            rows["shipped_robot_mask"].append(
                                score_cell(c, frames, ro.robot_masks()))
                    rows["copy_last"].append(score_cell(
                        c, np.repeat(start[None, None], M, 0).repeat(STEPS, 1)))
                    print(f"[{time.perf_counter() - t0:7.1f} s] {name} cell {i + 1}/"
                          f"{args.cells}", file=sys.stderr, flush=True)
                result["splits"][name] = {
                    "data_split": SPLITS[name], "cells": len(rows["shipped"]),
                    "cells_without_a_fitting_keep_out": skipped,
                    "models": {k: summarise(v) for k, v in rows.items()}}
    finally:
        for m in models.values():
            m.deactivate()
    result["seconds"] = round(time.perf_counter() - t0, 1)
    print_table(result)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(out)
    return 0


def print_table(result: dict) -> None:
    """One row per split and model."""
    def f(m: dict) -> str:
        if m["value"] is None:
            return "n/a"
        lo, hi = m["ci95"] or (m["value"], m["value"])
        return f"{m['value']:.2f} [{lo:.2f}, {hi:.2f}]"

    cols = ("keepout_recall", "keepout_false_refusals",
            "keepout_recall_at_10pct_false_refusals", "joint_limit_accuracy",
            "chosen_is_truly_best", "spearman_median")
    print("| split (cells) | model | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for name, s in result["splits"].items():
        for label, m in s["models"].items():
            print(f"| {name} ({s['cells']}) | {label} | " + " | ".join(f(m[c]) for c in cols)
                  + " |")


if __name__ == "__main__":
    sys.exit(main())
