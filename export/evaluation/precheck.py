"""Pre-check verdicts measured against ground truth rendered by MuJoCo.

Run by ``syncedge model eval-precheck`` and ``python bench/bench_precheck.py`` (the same
figures). Per held-out cell (drawn like the evaluation splits: held-out conventions, the
held-out robot, both with the held-out camera band), from one start pose, M = 8
candidates of 16 steps are drawn from the split's own motion sampler (``all_joints``) and
rendered by MuJoCo with their robot masks (:func:`export.cells.futures.draw_futures`). Per
cell:

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
repeated; with ``chain`` also the chain model, :mod:`edge.runtime.chain`, read from the
same cell's calibration sweep rendered at 256x256 by
:func:`export.models.chain_fit.read_chain_calibration`, its keep-out decided on where it
puts the arm, ``chain``, and on its motion, ``chain_motion``), with 95% bootstrap
intervals over cells (1000 resamples):

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

Needs MuJoCo (``pip install '.[train]'``). On 2 shared CPU cores 64 cells per split took
about 7 minutes (20 minutes for the three splits); the chain model adds about 80 s per
cell (reading its calibration; the reads are kept in ``chain_fits`` and reused).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge.calibrate.plan import POSES_COUNT, POSES_HALF_RANGE
from edge.precheck.evaluate import evaluate
from edge.precheck.rules import (
    MAX_MARGIN_PX,
    GoalRule,
    JointLimits,
    KeepOutRegion,
    KeepOutRule,
    Rules,
    rasterise,
)
from export.errors import ExportError, require_mujoco
from export.evaluation.precheck_metrics import format_table, operating_point, spearman, summarise

__all__ = ["DEFAULT_SPLITS", "ENTER_PX", "KEPT_POSES_HALF_RANGE", "M", "MAX_MOVED",
           "MOTION_THRESHOLD", "SPLITS", "STEPS", "TARGETS", "PrecheckEvalOptions",
           "check_options", "draw_cell", "dump_json", "evaluate_precheck", "format_table",
           "margin_label", "operating_point", "output_paths", "poses_suffix", "print_table",
           "score_cell", "spearman", "summarise"]

SPLITS = {"held_out_convention": "test_convention", "held_out_robot": "test_robot",
          "all_held_out": "test_all", "in_distribution": "val"}
#: The splits run when none is named: the held-out ones (``in_distribution``, the training
#: cameras and robots, is where settings such as the keep-out margin are chosen).
DEFAULT_SPLITS = ("held_out_convention", "held_out_robot", "all_held_out")
M, STEPS, ENTER_PX = 8, 16, 4
MOTION_THRESHOLD, MAX_MOVED = 20, 4
#: The held poses' half range (rad) of the refinements kept without a range in their name
#: (``<read>-poses<N>.npz``): the planner's default when they were made; fixed, so that they
#: keep their meaning if that default changes.
KEPT_POSES_HALF_RANGE = 0.5
TARGETS = {"keepout_recall": ">= 0.95", "keepout_false_refusals": "<= 0.10",
           "chosen_is_truly_best": ">= 0.70 (chance 1/8)", "spearman_median": ">= 0.8"}


@dataclass(frozen=True)
class PrecheckEvalOptions:
    """What :func:`evaluate_precheck` runs; each field is the command-line option of the
    same name (``--model``, ``--history-model``, ``--cells``, ``--split``, ``--threads``,
    ``--out``).

    Attributes:
        model: the shipped model's folder (with ``model.json``), run with each cell's
            calibration.
        history_model: a model trained without calibration, run in history mode.
        cells: cells drawn per split (>= 1; cells without a fitting keep-out rectangle
            are left out and counted).
        splits: table names of the splits to run (keys of :data:`SPLITS`), in order.
        threads: ONNX Runtime intra-op threads per model (>= 1).
        out: a folder for ``precheck.json``, ``precheck.txt`` and
            ``precheck_<split>.png`` (see :func:`output_paths`), or None to write nothing.
        sheet_cells: cells per split drawn on the contact sheet (the first ones).
        command: the command line recorded in the result (``command``).
        chain: also run the chain model (``--chain``; needs torch to read each cell's
            calibration).
        chain_size: the side of the calibration rendered for the chain model, px (a whole
            multiple of the model's 64).
        chain_fits: a folder keeping each cell's chain calibration
            (``<cell id>-<calibration sha256 prefix>.npz``), read again instead of refitted
            (``--chain-fits``), or None.
        keep_out_margins: with ``chain``, the chain's keep-out verdict (on where it puts
            the arm) also with the region grown by each of these margins (px,
            ``keep_out.margin_px``), each reported as its own model row
            ``chain_margin_<m>px`` (``--keep-out-margin``, repeatable).
        chain_motion: with ``chain``, also the chain refined with an episode of ordinary
            motion on the cell (the generator's first motion episode, rendered at
            ``chain_size``; :func:`export.models.chain_fit.refine_chain_with_motion`), its
            keep-out on where it puts the arm, row ``chain_refined`` (and
            ``chain_refined_margin_<m>px`` per margin; ``--chain-motion``).
        chain_anchor: with ``chain``, also the chain anchored at the cell's start frame
            (:func:`export.models.chain_fit.anchor_chain_to_start`, as ``precheck --chain
            --anchor`` runs it; kept beside the read as ``<read>-anchor.npz``), its keep-out
            on where it puts the arm, row ``chain_anchored`` (and
            ``chain_anchored_margin_<m>px`` per margin; ``--chain-anchor``); and row
            ``chain_auto``, what ``simulate``/``precheck`` do by default with a cached
            chain: the anchored chain where the read's start agreement
            (:func:`edge.runtime.chain.start_agreement`) is below
            :data:`edge.runtime.chain.AUTO_ANCHOR_BELOW`, else the read.
        chain_poses: with ``chain``, also the chain refined with the planner's held poses
            (``calibrate plan --poses``: :data:`edge.calibrate.plan.POSES_COUNT` poses
            within :data:`edge.calibrate.plan.POSES_HALF_RANGE` of the calibration's home,
            seeded by the cell, rendered at ``chain_size``;
            :func:`export.evaluation.motion_programs.composition_episode`), the flow the
            technician's docs recommend; row ``chain_poses``, and with ``chain_anchor`` also
            that refined chain anchored at the start frame, row ``chain_poses_anchored``
            (each with ``_margin_<m>px`` rows per margin; kept beside the read as
            ``<read>-poses<N>.npz`` and ``<read>-poses<N>-anchor.npz``; ``--chain-poses``).
        chain_poses_half_range: with ``chain_poses``, the held poses' largest joint offset
            from home, rad (``calibrate plan --poses --half-range``; > 0, default
            :data:`edge.calibrate.plan.POSES_HALF_RANGE`); another than
            :data:`KEPT_POSES_HALF_RANGE` is kept as ``<read>-poses<N>-half<R>rad.npz``
            (``--chain-poses-half-range``).
    """

    model: str | Path = "models/reference"
    history_model: str | Path = "models/reference-history"
    cells: int = 64
    splits: tuple[str, ...] = DEFAULT_SPLITS
    threads: int = 2
    out: str | Path | None = None
    sheet_cells: int = 4
    command: str = ""
    chain: bool = False
    chain_size: int = 256
    chain_fits: str | Path | None = None
    keep_out_margins: tuple[float, ...] = ()
    chain_motion: bool = False
    chain_anchor: bool = False
    chain_poses: bool = False
    chain_poses_half_range: float = POSES_HALF_RANGE


def check_options(opts: PrecheckEvalOptions) -> None:
    """Refuse options that cannot run, before any work.

    Raises:
        ExportError: an unknown split, a count below 1, a model folder without
            ``model.json``, or an ``out`` that exists and is not a folder; the message
            names the option (``--split``, ``--cells``, ``--threads``, ``--model``,
            ``--history-model``, ``--out``).
    """
    for name in opts.splits:
        if name not in SPLITS:
            raise ExportError(f"--split {name!r}: unknown split; expected one of "
                              f"{', '.join(SPLITS)}")
    if not opts.splits:
        raise ExportError(f"--split: no split given; expected one or more of "
                          f"{', '.join(SPLITS)}")
    if opts.cells < 1:
        raise ExportError(f"--cells {opts.cells}: expected at least 1 cell per split")
    if opts.threads < 1:
        raise ExportError(f"--threads {opts.threads}: expected at least 1 thread")
    for option, folder, example in (("--model", opts.model, "models/reference"),
                                    ("--history-model", opts.history_model,
                                     "models/reference-history")):
        if not (Path(folder) / "model.json").is_file():
            raise ExportError(f"{option} {folder}: no model.json in this folder; expected "
                              f"an exported model folder such as {example}")
    if opts.sheet_cells < 1:
        raise ExportError(f"sheet_cells {opts.sheet_cells}: expected at least 1 cell per "
                          "contact sheet")
    if opts.chain_size < 64 or opts.chain_size % 64:
        raise ExportError(f"--chain-size {opts.chain_size}: expected a whole multiple of the "
                          "model's 64 px, such as 256")
    for margin in opts.keep_out_margins:
        if not 0 <= margin <= MAX_MARGIN_PX:
            raise ExportError(f"--keep-out-margin {margin:g}: expected 0..{MAX_MARGIN_PX:g} "
                              "px")
    if opts.chain_motion and not opts.chain:
        raise ExportError("--chain-motion: needs --chain (it refines the chain model's "
                          "calibration)")
    if opts.chain_anchor and not opts.chain:
        raise ExportError("--chain-anchor: needs --chain (it anchors the chain model's "
                          "calibration at the start frame)")
    if opts.chain_poses and not opts.chain:
        raise ExportError("--chain-poses: needs --chain (it refines the chain model's "
                          "calibration with the planner's held poses)")
    if opts.chain_poses_half_range != POSES_HALF_RANGE and not opts.chain_poses:
        raise ExportError("--chain-poses-half-range: needs --chain-poses (it is the held "
                          "poses' range)")
    if not 0 < opts.chain_poses_half_range <= 1.5:
        raise ExportError(f"--chain-poses-half-range {opts.chain_poses_half_range:g}: "
                          "expected more than 0 and at most 1.5 rad")
    if opts.keep_out_margins and not opts.chain:
        raise ExportError("--keep-out-margin: needs --chain (the margins are measured on the "
                          "chain model's keep-out verdict)")
    if opts.chain_fits is not None and Path(opts.chain_fits).exists() \
            and not Path(opts.chain_fits).is_dir():
        raise ExportError(f"--chain-fits {opts.chain_fits}: is a file; expected a folder")
    if opts.out is not None and Path(opts.out).exists() and not Path(opts.out).is_dir():
        raise ExportError(f"--out {opts.out}: is a file; expected a folder (precheck.json, "
                          "precheck.txt and precheck_<split>.png are written into it)")


def _seed(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8],
                          "little")


def _ssim(a: np.ndarray, b: np.ndarray) -> float:
    from edge.metrics import ssim

    return float(ssim(a, b))


def draw_cell(gen: object, split: str, index: int) -> dict | None:
    """One benchmark cell: calibration episode, candidates, truth, rules.

    Args:
        gen: a :class:`export.cells.generate.CellGenerator` (with segmentation).
        split: a data split (a value of :data:`SPLITS`, e.g. ``"test_all"``).
        index: the cell's index in the split (the draw is seeded by split and index).

    Returns:
        None if no keep-out rectangle with 30-70% truly entering candidates was found,
        else a dict: ``cell`` (CellParams), ``calibration`` (Episode), ``q0`` float64
        ``[A]``, ``futures`` (frames uint8 ``[M, T+1, H, W, 3]``, actions float32
        ``[M, T, A]``, robot_mask bool ``[M, T+1, H, W]``), ``region`` (normalised
        rectangle, 4 corners), ``enters`` bool ``[M]``, ``lower``/``upper`` float64 ``[A]``
        joint limits, ``inside_max`` int ``[M]`` (the most true robot-mask pixels inside
        the rectangle at one step), ``exceeds`` bool ``[M]``, ``goal`` uint8
        ``[H, W, 3]`` or None, ``goal_index``, ``true_dist`` float64 ``[M]`` or None,
        ``best`` int or None.
    """
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
        inside = (masks[:, 1:] & m).sum((2, 3)).max(1)  # (M,) most true pixels inside
        enters = inside >= ENTER_PX
        if 0.3 <= enters.mean() <= 0.7:
            region = poly, enters, inside
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
            "enters": region[1], "inside_max": region[2], "lower": lower, "upper": upper,
            "exceeds": exceeds, "goal": goal, "goal_index": goal_idx, "true_dist": true_dist,
            "best": best}


def score_cell(c: dict, frames: np.ndarray, masks: np.ndarray | None = None,
               margin_px: float = 0.0) -> dict:
    """Verdicts for one model's predicted frames against a cell's truth.

    Args:
        c: a cell from :func:`draw_cell`.
        frames: uint8 ``[M, T, H, W, 3]`` predicted frames (steps 1..T).
        masks: float32 ``[M, T, H, W]``, the predicted robot mask; with it keep-out is
            decided on the mask (``basis: robot_mask``), else on motion.
        margin_px: the keep-out rule's ``margin_px`` (the region grown by this many
            pixels for the verdict; the truth is always counted in the region itself).

    Returns:
        Per candidate (lists of M): ``enters``, ``keepout_refused``,
        ``keepout_moved_max`` (the keep-out score), ``jl_correct``; per cell
        ``chosen_is_best`` and ``spearman`` (None without a goal) and ``chosen`` (the
        full pre-check's chosen candidate, None without a goal or when none passes).
    """
    start = c["futures"].frames[0, 0]
    acts = c["futures"].actions
    ko = KeepOutRule((KeepOutRegion("keep-out", tuple(c["region"])),), MOTION_THRESHOLD,
                     MAX_MOVED, "motion" if masks is None else "robot_mask", ENTER_PX - 1,
                     margin_px)
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
           "chosen_is_best": None, "spearman": None, "chosen": None}
    if c["goal"] is not None:
        goal_path = Path("goal.png")
        rules = Rules(path, keep_out=ko, joint_limits=JointLimits(tuple(c["lower"]),
                                                                   tuple(c["upper"])),
                      goal=GoalRule(goal_path, -1.0))
        full = evaluate(rules, start, c["q0"], acts, frames, goal=c["goal"], robot_masks=masks)
        out["chosen"] = full.chosen
        out["chosen_is_best"] = bool(full.chosen == c["best"])
        pred_dist = np.array([1 - _ssim(frames[i, -1], c["goal"]) for i in range(M)])
        out["spearman"] = spearman(pred_dist, c["true_dist"])
    return out


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def evaluate_precheck(opts: PrecheckEvalOptions,
                      progress: Callable[[str], None] = _stderr) -> dict[str, Any]:
    """Run the pre-check benchmark (see the module docstring).

    Args:
        opts: what to run; with ``opts.out`` the files of :func:`output_paths` are written
            there at the end (nothing is written when the run fails).
        progress: called with one line per cell (``[  5.1 s] all_held_out cell 1/64``);
            default: printed on stderr.

    Returns:
        The JSON-ready result: ``command``, ``options``, ``targets``, ``splits`` (per
        split table name: ``data_split``, ``cells``, ``cells_without_a_fitting_keep_out``,
        ``models``: per model label the :func:`summarise` metrics) and ``seconds``. The
        per-cell verdicts (one :func:`_cell_record` per kept cell, per split) are written
        to ``precheck_cells.json`` beside it, not returned.

    Raises:
        ExportError: from :func:`check_options`.
        MissingDependencyError: MuJoCo is not installed.
    """
    check_options(opts)
    require_mujoco("the pre-check benchmark")
    from edge.commands.common import history_context
    from edge.runtime.chain import AUTO_ANCHOR_BELOW, chain_rollout, start_agreement
    from edge.runtime.context import encode_calibration
    from edge.runtime.model import load_model
    from edge.runtime.rollout import Rollout
    from export.cells.generate import CellGenerator, GenerateOptions
    from export.evaluation.precheck_sheet import SheetCell, precheck_sheet

    t0 = time.perf_counter()
    models = {"shipped": load_model(opts.model, intra_op_num_threads=opts.threads),
              "no_calibration": load_model(opts.history_model,
                                           intra_op_num_threads=opts.threads)}
    result: dict[str, Any] = {
        "command": opts.command,
        "options": {"cells": opts.cells, "candidates": M, "steps": STEPS,
                    "enter_px": ENTER_PX, "motion_threshold": MOTION_THRESHOLD,
                    "max_moved_pixels": MAX_MOVED, "profile": "all_joints"},
        "targets": TARGETS, "splits": {}}
    if opts.chain:
        result["options"].update(chain_size=opts.chain_size,
                                 keep_out_margins_px=list(opts.keep_out_margins),
                                 chain_motion=opts.chain_motion,
                                 chain_anchor=opts.chain_anchor,
                                 chain_poses=opts.chain_poses,
                                 chain_poses_half_range_rad=opts.chain_poses_half_range)
    sheets: dict[str, np.ndarray] = {}
    cell_records: dict[str, list[dict[str, Any]]] = {}
    try:
        with contextlib.ExitStack() as stack:
            gen = stack.enter_context(CellGenerator(GenerateOptions(motion_episodes=0)))
            gen_chain = stack.enter_context(CellGenerator(GenerateOptions(  # the calibration
                # comes first from the cell's seed: the same with a motion episode after it
                motion_episodes=int(opts.chain_motion), width=opts.chain_size,
                height=opts.chain_size,
                segmentation=False))) if opts.chain else None
            for name in opts.splits:
                rows: dict[str, list[dict]] = {"shipped": [], "shipped_robot_mask": [],
                                               "no_calibration": [], "copy_last": []}
                if opts.chain:
                    rows.update(chain=[], chain_motion=[])
                    rows.update({margin_label(x): [] for x in opts.keep_out_margins})
                    for flag, row in ((opts.chain_motion, "chain_refined"),
                                      (opts.chain_anchor, "chain_anchored"),
                                      (opts.chain_anchor, "chain_auto"),
                                      (opts.chain_poses, "chain_poses"),
                                      (opts.chain_poses and opts.chain_anchor,
                                       "chain_poses_anchored")):
                        if flag:
                            rows[row] = []
                            rows.update({margin_label(x, row): []
                                         for x in opts.keep_out_margins})
                shown: list[SheetCell] = []
                shown_chain: list[SheetCell] = []
                shown_poses: list[SheetCell] = []
                skipped = 0
                per_cell: list[dict[str, Any]] = []
                for i in range(opts.cells):
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
                        if label == "shipped" and opts.out is not None \
                                and len(shown) < opts.sheet_cells:
                            shown.append(SheetCell.from_cell(
                                f"{name} cell {i}", c, frames, rows[label][-1]))
                    rows["copy_last"].append(score_cell(
                        c, np.repeat(start[None, None], M, 0).repeat(STEPS, 1)))
                    if gen_chain is not None:
                        episodes = gen_chain.cell_episodes(c["cell"])
                        chain, refined = _chain_for(episodes, c, opts.chain_fits, progress,
                                                    opts.chain_motion)
                        anchored = (_anchored_for(episodes, c, chain, opts.chain_fits,
                                                  progress) if opts.chain_anchor else None)
                        posed = posed_anchored = None
                        if opts.chain_poses:
                            posed, posed_anchored = _posed_for(
                                gen_chain, episodes, c, chain, opts.chain_fits, progress,
                                opts.chain_anchor, opts.chain_poses_half_range)
                        # what simulate/precheck do by default with a cached chain:
                        # anchored only where its start agreement is low
                        auto = None
                        if anchored is not None:
                            share = start_agreement(chain, start, c["q0"])["arm_on_arm"]
                            auto = (anchored if share is not None
                                    and share < AUTO_ANCHOR_BELOW else chain)
                        for row, other in (("chain_refined", refined),
                                           ("chain_anchored", anchored),
                                           ("chain_auto", auto),
                                           ("chain_poses", posed),
                                           ("chain_poses_anchored", posed_anchored)):
                            if other is None:
                                continue
                            fr, cv = chain_rollout(other, start, c["q0"], acts,
                                                   with_cover=True)
                            rows[row].append(score_cell(c, fr, cv.astype(np.float32)))
                            if row == "chain_poses" and opts.out is not None \
                                    and len(shown_poses) < opts.sheet_cells:
                                shown_poses.append(SheetCell.from_cell(
                                    f"{name} cell {i}", c, fr, rows[row][-1]))
                            for margin in opts.keep_out_margins:
                                rows[margin_label(margin, row)].append(score_cell(
                                    c, fr, cv.astype(np.float32), margin_px=margin))
                        frames, cover = chain_rollout(chain, start, c["q0"], acts,
                                                      with_cover=True)
                        rows["chain"].append(score_cell(c, frames, cover.astype(np.float32)))
                        rows["chain_motion"].append(score_cell(c, frames))
                        for margin in opts.keep_out_margins:
                            rows[margin_label(margin)].append(score_cell(
                                c, frames, cover.astype(np.float32), margin_px=margin))
                        if opts.out is not None and len(shown_chain) < opts.sheet_cells:
                            shown_chain.append(SheetCell.from_cell(
                                f"{name} cell {i}", c, frames, rows["chain"][-1]))
                    per_cell.append(_cell_record(i, c, rows))
                    progress(f"[{time.perf_counter() - t0:7.1f} s] {name} cell {i + 1}/"
                             f"{opts.cells}")
                kept = len(rows["shipped"])
                result["splits"][name] = {
                    "data_split": SPLITS[name], "cells": kept,
                    "cells_without_a_fitting_keep_out": skipped,
                    "models": {k: summarise(v) for k, v in rows.items() if v}}
                cell_records[name] = per_cell
                if shown:
                    sheets[name] = precheck_sheet(shown, note=(
                        f"{name}: the first {len(shown)} of {kept} cells. Predictions of the "
                        f"shipped model; keep-out verdict on predicted motion (more than "
                        f"{MAX_MOVED} px inside that changed by more than {MOTION_THRESHOLD} "
                        f"refuses). Truly enters: at least {ENTER_PX} true robot-mask pixels "
                        f"inside at some step 1..{STEPS}; the tiles show the last step"))
                for suffix, chain_shown, what in (
                        ("_chain", shown_chain, "the chain model"),
                        ("_chain_poses", shown_poses,
                         f"the chain refined with the planner's held poses within "
                         f"{opts.chain_poses_half_range:g} rad (not anchored)")):
                    if chain_shown:
                        sheets[f"{name}{suffix}"] = precheck_sheet(chain_shown, note=(
                            f"{name}: the first {len(chain_shown)} of {kept} cells. "
                            f"Predictions of {what}; keep-out verdict on where it puts the "
                            f"arm (at least {ENTER_PX} arm pixels inside refuses). Truly "
                            f"enters: at least {ENTER_PX} true robot-mask pixels inside at "
                            f"some step 1..{STEPS}; the tiles show the last step"))
    finally:
        for m in models.values():
            m.deactivate()
    result["seconds"] = round(time.perf_counter() - t0, 1)
    if opts.out is not None:
        _write(result, sheets, cell_records, Path(opts.out))
    return result


def _cell_record(index: int, c: dict, rows: dict[str, list[dict]]) -> dict[str, Any]:
    """One cell's truth and each model row's verdicts, for examining misses one by one
    (``precheck_cells.json``; ``scripts/precheck_misses.py`` lists them): ``index``,
    ``true_inside_max`` (per candidate, the most true robot-mask pixels inside the keep-out
    at one step; it truly enters at >= :data:`ENTER_PX`), ``exceeds``, ``best``, and per
    row ``refused`` (keep-out), ``score`` (the keep-out score: pixels inside) and
    ``chosen``."""
    kept = len(rows["shipped"])
    return {"index": index, "true_inside_max": [int(v) for v in c["inside_max"]],
            "exceeds": c["exceeds"].tolist(), "best": c["best"],
            "rows": {k: {"refused": v[-1]["keepout_refused"],
                         "score": v[-1]["keepout_moved_max"], "chosen": v[-1]["chosen"]}
                     for k, v in rows.items() if len(v) == kept}}


def margin_label(margin_px: float, row: str = "chain") -> str:
    """The model row of ``row``'s keep-out verdict with the region grown by
    ``margin_px``: ``chain_margin_2px``, ``chain_margin_1.5px``,
    ``chain_refined_margin_1px``."""
    return f"{row}_margin_{margin_px:g}px"


def _kept_path(cal: Any, c: dict, fits: str | Path | None) -> Path | None:
    """Where the read of a benchmark cell's calibration episode ``cal`` is kept in ``fits``
    (None: not kept): named by the cell and the sha256 of the calibration's frames and
    joint readings."""
    digest = hashlib.sha256(np.ascontiguousarray(cal.frames).tobytes()
                            + np.ascontiguousarray(cal.joint_positions).tobytes()).hexdigest()
    return Path(fits) / f"{c['cell'].cell_id}-{digest[:12]}.npz" if fits is not None else None


def _kept_or_made(path: Path | None, make: Callable[[], Any]) -> Any:
    """The chain calibration kept at ``path`` if that file exists, else ``make()``, saved
    there (``path`` None: made and not kept)."""
    from edge.runtime.chain import load_chain_calibration, save_chain_calibration

    if path is not None and path.is_file():
        return load_chain_calibration(path)
    chain = make()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_chain_calibration(path, chain)
    return chain


def _beside(path: Path | None, suffix: str) -> Path | None:
    """``<read>{suffix}.npz`` beside the kept read ``path`` (None stays None)."""
    return path.with_name(f"{path.stem}{suffix}.npz") if path is not None else None


def poses_suffix(half_range: float) -> str:
    """The suffix of a read's kept refinement with the held poses within ``half_range``
    rad: ``-poses32`` at :data:`KEPT_POSES_HALF_RANGE`, else ``-poses32-half<R>rad``."""
    ranged = "" if half_range == KEPT_POSES_HALF_RANGE else f"-half{half_range:g}rad"
    return f"-poses{POSES_COUNT}{ranged}"


def _posed_for(gen: Any, episodes: dict[str, Any], c: dict, chain: Any,
               fits: str | Path | None, progress: Callable[[str], None],
               anchor: bool, half_range: float = POSES_HALF_RANGE) -> tuple[Any, Any]:
    """``chain`` refined with the planner's held poses (``calibrate plan --poses``, about
    the calibration's first joint readings, seeded by the cell, rendered by ``gen`` at the
    chain's resolution; :func:`export.models.chain_fit.refine_chain_with_motion` as
    ``calibrate store --chain --motion`` runs it) and, with ``anchor``, that refined chain
    anchored at the cell's start frame as ``precheck --chain --anchor`` runs it; the poses
    within ``half_range`` rad of home. Kept in and reused from ``fits`` as
    ``<read>-poses<N>.npz`` and ``<read>-poses<N>-anchor.npz`` (``-poses<N>-half<R>rad``
    for another half range than :data:`KEPT_POSES_HALF_RANGE`). Returns ``(refined,
    anchored or None)``."""
    from export.evaluation.motion_programs import composition_episode
    from export.models.chain_fit import anchor_chain_to_start, refine_chain_with_motion

    cal = episodes["calibration"]
    cell_id = c["cell"].cell_id
    path = _beside(_kept_path(cal, c, fits), poses_suffix(half_range))

    def refine() -> Any:
        t0 = time.perf_counter()
        poses = composition_episode(gen, c["cell"], cal.joint_positions[0], POSES_COUNT,
                                    half_range, _seed("poses", cell_id), poses=True)
        refined = refine_chain_with_motion(chain, cal, [(poses, f"held poses of {cell_id}")])
        progress(f"  refined {cell_id}'s chain with {POSES_COUNT} held poses within "
                 f"{half_range:g} rad ({poses.num_frames} frames rendered) in "
                 f"{time.perf_counter() - t0:.0f} s")
        return refined

    def anchor_it() -> Any:
        anchored = anchor_chain_to_start(refined, cal, c["futures"].frames[0, 0], c["q0"])
        progress(f"  anchored {cell_id}'s posed chain at the start in "
                 f"{anchored.info['anchor']['seconds']:.0f} s")
        return anchored

    refined = _kept_or_made(path, refine)
    return refined, (_kept_or_made(_beside(path, "-anchor"), anchor_it) if anchor else None)


def _anchored_for(episodes: dict[str, Any], c: dict, chain: Any, fits: str | Path | None,
                  progress: Callable[[str], None]) -> Any:
    """``chain`` anchored at the cell's start frame
    (:func:`export.models.chain_fit.anchor_chain_to_start` with the cell's rendered
    calibration episode, ``episodes["calibration"]``), kept in and reused from ``fits``
    as ``<read>-anchor.npz``."""
    from export.models.chain_fit import anchor_chain_to_start

    cal = episodes["calibration"]

    def anchor_it() -> Any:
        anchored = anchor_chain_to_start(chain, cal, c["futures"].frames[0, 0], c["q0"])
        progress(f"  anchored {c['cell'].cell_id}'s chain at the start in "
                 f"{anchored.info['anchor']['seconds']:.0f} s")
        return anchored

    return _kept_or_made(_beside(_kept_path(cal, c, fits), "-anchor"), anchor_it)


def _chain_for(episodes: dict[str, Any], c: dict, fits: str | Path | None,
               progress: Callable[[str], None], motion: bool = False) -> tuple[Any, Any]:
    """The chain model's calibration of a benchmark cell: its calibration sweep
    (``episodes`` of ``CellGenerator.cell_episodes``, rendered at the chain's resolution)
    read by
    :func:`export.models.chain_fit.read_chain_calibration` onto the 64x64 grid; with
    ``motion`` also that read refined with the cell's first motion episode
    (:func:`export.models.chain_fit.refine_chain_with_motion`; ``episodes["motion-00"]``). Both
    kept in and reused from the folder ``fits`` (None: not kept). Returns ``(chain,
    refined or None)``."""
    from export.models.chain_fit import read_chain_calibration, refine_chain_with_motion

    cal = episodes["calibration"]
    path = _kept_path(cal, c, fits)

    def read() -> Any:
        t0 = time.perf_counter()
        chain = read_chain_calibration(cal, size=c["futures"].frames.shape[-3:-1])
        progress(f"  read {c['cell'].cell_id}'s chain in {time.perf_counter() - t0:.0f} s")
        return chain

    def refine() -> Any:
        t0 = time.perf_counter()
        refined = refine_chain_with_motion(chain, cal, [(episodes["motion-00"], "motion-00")])
        progress(f"  refined {c['cell'].cell_id}'s chain with a motion episode in "
                 f"{time.perf_counter() - t0:.0f} s")
        return refined

    chain = _kept_or_made(path, read)
    return chain, (_kept_or_made(_beside(path, "-motion"), refine) if motion else None)


def output_paths(result: dict[str, Any], out: str | Path) -> list[Path]:
    """The files :func:`evaluate_precheck` writes into ``out``: ``precheck.json``,
    ``precheck.txt`` (the table), ``precheck_cells.json`` (each cell's truth and verdicts
    per model row, ``{split: [record, ...]}``) and ``precheck_<split>.png`` per split with
    cells (and ``precheck_<split>_chain.png`` where the chain model ran,
    ``precheck_<split>_chain_poses.png`` where the chain refined with held poses did)."""
    out = Path(out)
    return [out / "precheck.json", out / "precheck.txt", out / "precheck_cells.json"] + [
        out / f"precheck_{name}{suffix}.png" for name, s in result["splits"].items()
        if s["cells"] for suffix, row in (("", ""), ("_chain", "chain"),
                                          ("_chain_poses", "chain_poses"))
        if not suffix or row in s["models"]]


def dump_json(result: dict[str, Any]) -> str:
    """The result as the benchmark writes it (``bench/results/precheck.json``)."""
    return json.dumps(result, indent=1) + "\n"


def _write(result: dict[str, Any], sheets: dict[str, np.ndarray],
           cell_records: dict[str, list[dict[str, Any]]], out: Path) -> None:
    from edge.fileio import atomic_write
    from edge.visual import write_png

    json_path, table_path, cells_path, *sheet_paths = output_paths(result, out)
    for path, text in ((json_path, dump_json(result)),
                       (table_path, format_table(result) + "\n"),
                       (cells_path, json.dumps(cell_records) + "\n")):
        data = text.encode("utf-8")
        atomic_write(path, lambda f: f.write(data))  # noqa: B023  (called at once)
    for path in sheet_paths:
        write_png(path, sheets[path.stem.removeprefix("precheck_")])


def print_table(result: dict[str, Any]) -> None:
    """Print :func:`format_table` on stdout."""
    print(format_table(result))
