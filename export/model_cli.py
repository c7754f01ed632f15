"""``syncedge model ...``: train and evaluate the reference world model."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["register"]


def _run_train(args: argparse.Namespace) -> int:
    from export.train.latent import train_stage
    from export.train.options import options_from_args

    t0 = time.perf_counter()

    def progress(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:8.1f}s] {msg}", file=sys.stderr, flush=True)

    path = train_stage(options_from_args(args), progress=progress)
    print(f"checkpoint: {path}")
    return 0


def _split_names(requested: list[str] | None, splits: dict[str, str],
                 command: str) -> list[str] | None:
    """``--split`` values (table names or data folders) as table names; None (after
    printing the error) for an unknown one."""
    by_folder = {folder: name for name, folder in splits.items()}
    names = [by_folder.get(name, name) for name in requested or []]
    unknown = [name for name in names if name not in splits]
    if unknown:
        print(f"syncedge model {command}: error: unknown split {unknown[0]!r} for --split; "
              f"expected one of {', '.join(splits)} (or {', '.join(by_folder)})",
              file=sys.stderr)
        return None
    return names


def _run_eval(args: argparse.Namespace) -> int:
    from edge.fileio import write_json_atomic
    from edge.visual import write_png
    from export.evaluation.zero_shot import (
        SPLITS,
        EvalOptions,
        evaluate,
        format_table,
        plot_error_growth,
    )
    from export.variants.parity_gates import json_safe

    opts = EvalOptions(run=args.run, data=args.data, horizon=args.horizon,
                       max_cells=args.max_cells, seed=args.seed,
                       residual_decoding=args.residual_decoding)
    names = _split_names(args.split, SPLITS, "eval")
    if names is None:
        return 2
    splits = {name: SPLITS[name] for name in names} if names else None
    sheets: dict[str, Any] = {}
    result = evaluate(opts, splits=splits, sheets=sheets)
    table = format_table(result)
    print(table)
    out = Path(args.out)
    write_json_atomic(out / "eval.json", json_safe(result))
    (out / "eval.txt").write_text(table + "\n")
    plot_error_growth(result, out / "error_growth.png")
    written = [out / "eval.json", out / "eval.txt", out / "error_growth.png"]
    for name, sheet in sheets.items():
        written.append(write_png(out / f"rollouts_{name}.png", sheet))
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def _run_train_warp(args: argparse.Namespace) -> int:
    import json

    from export.errors import require_torch

    require_torch("syncedge model train-warp")
    from export.train.warp import options_from_args, train_warp

    print(json.dumps({"checkpoint": str(train_warp(options_from_args(args)))}))
    return 0


def _run_eval_frames(args: argparse.Namespace) -> int:
    from export.errors import require_torch

    require_torch("syncedge model eval-frames")
    from export.evaluation.frames import (
        SPLITS,
        FramesEvalOptions,
        evaluate_frames,
        write_frames_eval,
    )

    def refuse(message: str) -> int:
        print(f"syncedge model eval-frames: error: {message}", file=sys.stderr)
        return 2

    models: dict[str, tuple[str, str]] = {}
    for spec in args.model:
        label, _, rest = spec.partition("=")
        family, _, run = rest.partition(":")
        if not label or family not in ("latent", "warp", "calflow") or not run:
            return refuse(f"--model {spec!r}: expected LABEL=latent:RUN, LABEL=warp:RUN or "
                          "LABEL=calflow:- (the hand-made calibration flow, "
                          "export/models/calibration_flow.py)")
        if label in models:
            return refuse(f"--model {spec!r}: the label {label!r} is given twice; give each "
                          "model its own label")
        needs = {"latent": ("ae.pt", "dynamics.pt"), "warp": ("warp.pt",)}.get(family, ())
        missing = [f for f in needs if not (Path(run) / f).is_file()]
        if missing:
            return refuse(f"--model {spec!r}: expected a {family} run folder holding "
                          f"{' and '.join(needs)}; {run} has no {', '.join(missing)}")
        models[label] = (family, run)
    names = _split_names(args.split, SPLITS, "eval-frames")
    if names is None:
        return 2
    known = ("calibrated", "zeroed", "other_cell", "mislabelled", "no_calibration")
    for flag, spec in ([("--variants", args.variants)] if args.variants else []) + \
            [("--variants-of", v.partition("=")[2]) for v in args.variants_of or []]:
        bad = [v.strip() for v in spec.split(",") if v.strip() not in known]
        if bad:
            return refuse(f"{flag}: unknown variant(s) {', '.join(map(repr, bad))}; expected "
                          f"some of {', '.join(known)}")
    data = Path(args.data)
    wanted = {n: SPLITS[n] for n in names} if names else SPLITS
    present = [n for n, folder in wanted.items() if (data / folder).is_dir()]
    if not present:
        found = "nothing" if not data.exists() else "a file" if not data.is_dir() else \
            f"no {', '.join(sorted({wanted[n] for n in wanted}))} folder in it"
        return refuse(f"--data {data}: expected a folder of generated cells, found {found}; "
                      f"generate them first, e.g. 'syncedge cells generate --split "
                      f"{next(iter(wanted.values()))} --chunks 0-0 --out {data} --workers 2'")
    from edge.fileio import check_folder_target

    try:
        check_folder_target(args.out, "eval_frames.json")
    except FileExistsError as exc:
        return refuse(f"--out {args.out}: {exc.strerror}; choose another folder")
    opts = FramesEvalOptions(data=args.data, models=models, keypoint_run=args.keypoint_run,
                             max_cells=args.max_cells, seed=args.seed)
    if names:
        opts.splits = {n: SPLITS[n] for n in names}
    if args.variants:
        opts.variants = tuple(v.strip() for v in args.variants.split(","))
    for spec in args.variants_of or []:
        label, _, names = spec.partition("=")
        if label not in models or not names:
            print(f"syncedge model eval-frames: error: --variants-of {spec!r}: expected "
                  f"LABEL=v1,v2 with a LABEL given to --model", file=sys.stderr)
            return 2
        opts.model_variants[label] = tuple(v.strip() for v in names.split(","))
    paths = write_frames_eval(evaluate_frames(opts), Path(args.out))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _run_eval_precheck(args: argparse.Namespace) -> int:
    from edge.calibrate.plan import POSES_HALF_RANGE
    from export.errors import ExportError, require_mujoco
    from export.evaluation.precheck import (
        DEFAULT_SPLITS,
        SPLITS,
        PrecheckEvalOptions,
        check_options,
        evaluate_precheck,
        format_table,
        output_paths,
    )

    names = _split_names(args.split, SPLITS, "eval-precheck")
    if names is None:
        return 2
    import shlex

    command = shlex.join(
        ["syncedge", "model", "eval-precheck", "--model", str(args.model), "--history-model",
         str(args.history_model), "--cells", str(args.cells),
         *[a for n in names for a in ("--split", n)], "--threads", str(args.threads),
         *(["--chain", "--chain-size", str(args.chain_size)] if args.chain else []),
         *(["--chain-fits", str(args.chain_fits)] if args.chain_fits else []),
         *(["--chain-motion"] if args.chain_motion else []),
         *(["--chain-anchor"] if args.chain_anchor else []),
         *(["--chain-poses"] if args.chain_poses else []),
         *(["--chain-poses-half-range", f"{args.chain_poses_half_range:g}"]
           if args.chain_poses_half_range is not None else []),
         *[a for m in args.keep_out_margin or () for a in ("--keep-out-margin", f"{m:g}")],
         "--out", str(args.out)])
    opts = PrecheckEvalOptions(model=args.model, history_model=args.history_model,
                               cells=args.cells, splits=tuple(names or DEFAULT_SPLITS),
                               threads=args.threads, out=args.out, command=command,
                               chain=args.chain, chain_size=args.chain_size,
                               chain_fits=args.chain_fits, chain_motion=args.chain_motion,
                               chain_anchor=args.chain_anchor,
                               chain_poses=args.chain_poses,
                               chain_poses_half_range=(
                                   POSES_HALF_RANGE if args.chain_poses_half_range is None
                                   else args.chain_poses_half_range),
                               keep_out_margins=tuple(args.keep_out_margin or ()))
    try:
        check_options(opts)
    except ExportError as exc:
        print(f"syncedge model eval-precheck: error: {exc}", file=sys.stderr)
        return 2
    require_mujoco("syncedge model eval-precheck")
    result = evaluate_precheck(opts)
    print(format_table(result))
    print("wrote " + ", ".join(str(p) for p in output_paths(result, args.out)))
    return 0


PRECHECK_DESCRIPTION = """\
Measure the pre-check's verdicts against ground truth rendered by MuJoCo (the same
evaluation and figures as bench/bench_precheck.py). Per held-out cell (--split; each cell
drawn like the evaluation splits), 8 candidates of 16 steps from one start pose are drawn
from the split's own motion sampler and rendered with their robot masks. A candidate
truly enters the keep-out rectangle when at least 4 of its true robot-mask pixels lie
inside it at some step; the rectangle is drawn per cell so that 30-70% of the candidates
truly enter (and no robot pixel of the start frame is inside; cells where none fits are
left out and counted). One joint gets a limit that some candidates truly exceed. The goal
is the true last frame of one truly safe candidate (entering nothing, exceeding nothing);
the truly best candidate is the safe one whose true last frame is nearest the goal by the
pre-check's own distance (SSIM). The pre-check (keep-out on predicted motion:
motion_threshold 20, max_moved_pixels 4; the joint limits; the goal) then runs on the
predicted frames of the shipped model (--model, with each cell's calibration; also with
keep-out on its predicted robot mask when it has one), of the model trained without
calibration (--history-model, history mode) and of copy-last (the start frame repeated).

Reported per split and model, with 95% bootstrap intervals over cells: keep-out recall
(truly entering candidates refused) and false refusals (candidates that truly stay out,
refused), the recall at the smallest max_moved_pixels with at most 10% false refusals
(chosen on the same cells: optimistic), joint-limit verdict accuracy (exact by
construction: a check), chosen = truly best (cells with a truly safe candidate), and the
median over cells of the Spearman correlation between predicted and true goal distance
(copy-last counts 0). Targets: keep-out recall >= 0.95 at false refusals <= 0.10, chosen
= truly best >= 0.70 (chance 1/8), Spearman >= 0.8.

Writes into --out: precheck.json (the figures, as bench/results/precheck.json),
precheck.txt (the table printed) and precheck_<split>.png per split (the first 4 cells:
start frame with the keep-out rectangle, goal, then per candidate its true and predicted
last frames, labelled enters / stays out and refused / passed, the chosen and the truly
best candidate marked). Needs MuJoCo (pip install 'syncedge[train]'); the three splits of
64 cells took 8-20 minutes on 2 shared CPU cores."""


READ_CHAIN_DESCRIPTION = """\
Read a cell's calibration episode into the chain model's encoded calibration (a .npz that
`syncedge simulate --chain FILE` rolls out with NumPy alone, offline).

The episode's sweeps are tracked (optical flow), the arm is cut from the home frame, and
a kinematic chain (a depth per arm pixel, each channel's axis and pivot) is fitted so that
the recorded joint readings move the home pixels along their tracks, then refined against
the frames themselves. Writes OUT (the chain calibration), OUT with .png (the recorded
sweep peaks above the chain's redrawing of them from the home frame) and OUT with .json
(fit residuals, the redrawing's PSNR per channel, provenance). Record the calibration at
a whole multiple of the model's grid (e.g. 256x256 for the 64x64 grid): tracks are then
read to a fraction of a model pixel.
The camera's vertical field of view comes from the episode's metadata.camera.fovy_deg or
--fovy-deg. Needs torch (pip install 'syncedge[train]'); 1-3 minutes per cell on 2 idle
CPU cores (several times that with other work running). Prints a line per stage and per
channel fitted; the file is written whole or not at all.

--motion FILE adds an episode of ordinary motion on the same cell (the joints moving
together, same camera and resolution, with joint readings): the sweep moves one channel
at a time, so a channel can be read as its depth-mirrored twin, which explains its own
sweep as well but composes wrongly with the others; the chain is then refined against
the motion's frames beside the sweep's, after choosing each channel's twin by those
frames where, refined, they say so (2-5 min more on 2 cores; --no-twins: keep the
sweep's choice, about 30 s more). Commission the cell
(`calibrate validate`) on another episode than the ones given here."""


def _run_read_chain(args: argparse.Namespace) -> int:
    import numpy as np
    import torch

    from edge.commands.common import motion_twins
    from edge.episode import load_episode
    from edge.fileio import sha256_file, write_json_atomic
    from edge.runtime.chain import (
        arm_at_edge_note,
        fit_sheet,
        save_chain_calibration,
        unmodelled_channels,
        unmodelled_note,
    )
    from edge.visual import write_png
    from export.errors import ExportError
    from export.models.chain_fit import (
        MotionEpisodeError,
        read_chain_calibration,
    )

    out = Path(args.out)
    if out.suffix != ".npz":
        raise ExportError(f"--out {out}: expected a .npz file name")
    for p in (out, out.with_suffix(".png"), out.with_suffix(".json")):
        if p.exists():
            raise ExportError(f"--out: {p} exists; remove it or choose another --out")
    if args.grid < 8:
        raise ExportError(f"--grid {args.grid}: expected the model grid's side, >= 8 px "
                          "(64 for the shipped models)")
    if args.photometric is None:
        args.photometric = 2 * args.grid
    if args.photometric and (args.photometric < args.grid or args.photometric % args.grid):
        raise ExportError(f"--photometric {args.photometric}: expected 0 (no refinement) or a "
                          f"whole multiple of --grid {args.grid}")
    ep = load_episode(args.calibration)
    if ep.metadata.kind != "calibration":
        raise ExportError(f"{args.calibration}: metadata.kind '{ep.metadata.kind}': expected a "
                          "calibration episode (each channel swept in its own segment; "
                          "`syncedge calibrate record`)")
    fh, fw = ep.frames.shape[1:3]
    if fh != fw:  # the camera's own aspect (an import): cropped and resized as a recording is
        from edge.commands.calibrate_chain import fitted_for_chain

        try:
            ep = fitted_for_chain(ep, args.grid, str(args.calibration))
        except ValueError as exc:
            raise ExportError(f"{args.calibration}: {exc}") from None
        fh, fw = ep.frames.shape[1:3]
    if fh % args.grid or fw % args.grid or fh // args.grid != fw // args.grid:
        raise ExportError(f"--grid {args.grid}: {args.calibration}'s frames are {fw}x{fh}, not a "
                          f"whole multiple of {args.grid}x{args.grid}")
    motions = []
    for path in args.motion or ():
        if not Path(path).is_file():
            raise ExportError(f"--motion {path}: no such file; expected an episode (.npz) of "
                              "ordinary motion recorded on this cell")
        motions.append((load_episode(path), path))
    try:
        twins = motion_twins(args.twins, bool(motions))
    except ValueError as exc:
        raise ExportError(str(exc)) from None
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()

    def say(line: str) -> None:
        print(f"[{time.perf_counter() - t0:6.1f}s] {line}", flush=True)

    say(f"{args.calibration}: {ep.num_frames} frames at {fw}x{fh}, {ep.num_dof} channels")
    if fh < 2 * args.grid:
        print(f"warning: {args.calibration}: frames {fw}x{fh} for a {args.grid}x{args.grid} "
              "grid: the sweep is tracked to whole pixels only (on the sample cell, a chain "
              "read from its 64x64 calibration predicted its 39 steps at 23.6 dB, from the "
              "same sweep at 256x256 at 30.0 dB); record the calibration at 4x the grid",
              file=sys.stderr)
    try:
        chain = read_chain_calibration(ep, (args.grid, args.grid), args.fovy_deg,
                                       args.photometric or None, log=say, motions=motions,
                                       joint_scale=args.joint_scale,
                                       motion_twins=twins,
                                       colour_tracks=args.tracks == "colour")
    except MotionEpisodeError as exc:
        raise ExportError(f"--motion {exc}") from None
    except ValueError as exc:
        raise ExportError(f"{args.calibration}: {exc}") from None
    chain.info["calibration"]["file"] = str(args.calibration)
    chain.info["calibration"]["sha256"] = sha256_file(args.calibration)
    unmodelled = unmodelled_channels(chain)
    if unmodelled:
        print(f"warning: {unmodelled_note(unmodelled, str(out))}", file=sys.stderr,
              flush=True)
    at_edge = arm_at_edge_note(chain.robot, str(out))
    if at_edge:
        print(f"warning: {at_edge}", file=sys.stderr, flush=True)
    # the fit redrawn at each channel's sweep peak, beside the recording (at the sweep's
    # poses, as it was read: a recording of another timing names no segments of its own)
    sheet, rows = fit_sheet(chain, ep, f"{args.calibration}: fit residual "
                                       f"{np.median(chain.residual_px):.2f} px median")
    report = {"chain": str(out), "sha256": chain.sha256(), "command": "syncedge " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
              "info": chain.info, "residual_px": dict(zip(chain.dof_names,
                                                          np.round(chain.residual_px, 4).tolist(),
                                                          strict=True)),
              "sweep_peaks": rows, "unmodelled_channels": unmodelled}
    sheet_path, json_path = out.with_suffix(".png"), out.with_suffix(".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        write_png(sheet_path, sheet)
        write_json_atomic(json_path, report)
        save_chain_calibration(out, chain)  # last: the chain file's presence means complete
    except BaseException:
        for p in (sheet_path, json_path, out):  # all three or none
            p.unlink(missing_ok=True)
        raise
    for r in rows:
        say(f"{r['dof']}: sweep peak (frame {r['frame']}, {r['swept']:+.3f}) redrawn at "
            f"{r['psnr_db']} dB (the home frame: {r['home_psnr_db']} dB); changed pixels "
            f"{r['changed_psnr_db']} dB (home: {r['home_changed_psnr_db']} dB)")
    res = ", ".join(f"{n} {r:.2f}" for n, r in zip(chain.dof_names, chain.residual_px,
                                                   strict=True))
    say(f"track residual per channel (px): {res}")
    for p in (out, sheet_path, json_path):
        print(p)
    return 0


def register(subparsers: Any) -> None:
    """Add ``model`` and its subcommands to the ``syncedge`` parser."""
    from edge.commands.common import positive_int
    from edge.runtime.chain import JOINT_SCALE_HELP, JOINT_SCALE_MODES, TRACK_MODES, TRACKS_HELP
    from export.train.options import add_train_arguments

    p = subparsers.add_parser("model", help="train and evaluate the reference world model",
                              description="Train the reference world model in stages "
                                          "(ae, keypoint, dynamics) and evaluate it zero-shot.")
    sub = p.add_subparsers(dest="model_command", metavar="SUBCOMMAND", required=True)
    t = sub.add_parser("train", help="run one training stage (progress, checkpoints, resume)",
                       description="Run one training stage. Checkpoints go to OUT/<stage>.pt; "
                                   "--resume continues. For several processes on one host: torchrun "
                                   "--standalone --nproc_per_node N -m export.train.latent ... "
                                   "(same options).")
    add_train_arguments(t)
    t.set_defaults(func=_run_train)
    e = sub.add_parser("eval", help="zero-shot evaluation on every split and variant",
                       description="16-step open-loop rollouts on every split with every "
                                   "variant; prints a table, writes eval.json, eval.txt, "
                                   "error_growth.png and a contact sheet of rollouts per "
                                   "split (rollouts_<split>.png: start, ground truth and "
                                   "calibrated prediction at 4 steps, zeroed at the last).")
    e.add_argument("--run", default="runs/reference",
                   help="checkpoint folder of the latent model (the baseline family) with "
                        "ae.pt, keypoint.pt, dynamics.pt and dynamics_nocal.pt (default "
                        "runs/reference; the shipped latent baseline's: "
                        "models/latent-checkpoints; the warp model, shipped as "
                        "models/reference: 'syncedge model eval-frames')")
    e.add_argument("--data", default="data/cells",
                   help="generated cells, one folder per split (default data/cells)")
    e.add_argument("--out", default="runs/reference/eval",
                   help="output folder (default runs/reference/eval)")
    e.add_argument("--horizon", type=positive_int, default=16,
                   help="open-loop rollout steps from the start frame (default 16)")
    e.add_argument("--max-cells", type=positive_int, default=None,
                   help="cells per split (default all)")
    e.add_argument("--seed", type=int, default=0,
                   help="seed of the other cell and mislabelling draws (default 0)")
    e.add_argument("--split", action="append", metavar="NAME",
                   help="evaluate only this split, named as in the table (in_distribution, "
                        "held_out_camera, held_out_robot, held_out_convention, all_held_out) "
                        "or by its data folder (val, test_camera, test_robot, "
                        "test_convention, test_all); repeatable; default all five. The "
                        "held-out camera and robot targets need in_distribution too")
    e.add_argument("--residual-decoding", action="store_true",
                   help="decode as start + dec(z_t) - dec(z_0) (default: plain decoding)")
    e.set_defaults(func=_run_eval)
    from export.train.warp import DESCRIPTION
    from export.train.warp import add_arguments as add_warp_arguments

    tw = sub.add_parser("train-warp", help="train the warp world model (progress, checkpoints, "
                                           "resume)", description=DESCRIPTION,
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_warp_arguments(tw)
    tw.set_defaults(func=_run_train_warp)
    ef = sub.add_parser(
        "eval-frames", help="evaluation that blur cannot fool: futures retrieval, zero-action "
                            "fidelity, whole-frame PSNR/SSIM per step against copy-last, "
                            "oracle-flow warp",
        description="Evaluate one or more models on the same cells and the same rendered "
                    "candidate futures (cached under DATA/<split>/futures/); prints a table, "
                    "writes eval_frames.json, eval_frames.txt and rollouts_<split>.png.")
    ef.add_argument("--model", action="append", required=True, metavar="LABEL=FAMILY:RUN",
                    help="a model to evaluate: latent:RUN (ae.pt, dynamics.pt, ...), "
                         "warp:RUN (warp.pt, optional warp_nocal.pt) or calflow:- (the "
                         "hand-made per-DoF calibration flow, no model file); repeatable")
    ef.add_argument("--data", default="data/cells", help="generated cells (default data/cells)")
    ef.add_argument("--out", required=True, help="output folder")
    ef.add_argument("--keypoint-run", default="models/latent-checkpoints",
                    help="folder with keypoint.pt, the end-effector reader")
    ef.add_argument("--max-cells", type=positive_int, default=64,
                    help="cells per split (default 64)")
    ef.add_argument("--seed", type=int, default=0)
    ef.add_argument("--variants", help="comma list of variants to roll out (default all: "
                                       "calibrated, zeroed, other_cell, mislabelled, "
                                       "no_calibration); copy_last always")
    ef.add_argument("--variants-of", action="append", metavar="LABEL=V1,V2",
                    help="variants of one model (replaces --variants for it); repeatable")
    ef.add_argument("--split", action="append", metavar="NAME",
                    help="only this split (table name or data folder); repeatable")
    ef.set_defaults(func=_run_eval_frames)
    ep = sub.add_parser(
        "eval-precheck", help="pre-check verdicts against MuJoCo ground truth: keep-out "
                              "recall and false refusals, chosen = truly best, goal-distance "
                              "Spearman, beside no calibration and copy-last",
        description=PRECHECK_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    ep.add_argument("--model", default="models/reference", metavar="DIR",
                    help="the shipped model's folder, run with each cell's calibration "
                         "(default models/reference)")
    ep.add_argument("--history-model", default="models/reference-history", metavar="DIR",
                    help="a model trained without calibration, run in history mode "
                         "(default models/reference-history)")
    ep.add_argument("--cells", type=int, default=64, metavar="N",
                    help="cells per split (default 64)")
    ep.add_argument("--split", action="append", metavar="NAME",
                    help="only this split, named as in the table (held_out_convention, "
                         "held_out_robot, all_held_out, in_distribution) or by its data "
                         "folder (test_convention, test_robot, test_all, val); repeatable; "
                         "default the three held-out splits (in_distribution, the "
                         "training cameras and robots, is where the keep-out margin is "
                         "chosen)")
    ep.add_argument("--threads", type=int, default=2, metavar="N",
                    help="ONNX Runtime threads per model (default 2)")
    ep.add_argument("--chain", action="store_true",
                    help="also run the chain model, read from each cell's calibration sweep "
                         "rendered at --chain-size (torch; about 80 s per cell); keep-out on "
                         "where it puts the arm (chain) and on its motion (chain_motion)")
    ep.add_argument("--chain-size", type=int, default=256, metavar="PX",
                    help="side of the calibration rendered for the chain model (default 256)")
    ep.add_argument("--chain-fits", metavar="DIR",
                    help="keep each cell's chain calibration in DIR and reuse it")
    ep.add_argument("--chain-motion", action="store_true",
                    help="with --chain, also the chain refined with an episode of ordinary "
                         "motion on each cell (read-chain --motion; 2-5 min per cell), "
                         "row chain_refined")
    ep.add_argument("--chain-anchor", action="store_true",
                    help="with --chain, also the chain anchored at each cell's start frame "
                         "(precheck --anchor; about 30 s per cell), row chain_anchored")
    ep.add_argument("--chain-poses", action="store_true",
                    help="with --chain, also the chain refined with the planner's held "
                         "poses (calibrate plan --poses, rendered for each cell; calibrate "
                         "store --chain --motion; 2-4 min per cell), row chain_poses; with "
                         "--chain-anchor also that chain anchored at the start, row "
                         "chain_poses_anchored")
    ep.add_argument("--chain-poses-half-range", type=float, default=None, metavar="RAD",
                    help="with --chain-poses, the held poses' largest joint offset from "
                         "home (calibrate plan --poses --half-range; default 0.5 rad)")
    ep.add_argument("--keep-out-margin", type=float, action="append", metavar="PX",
                    help="with --chain, also decide the chain's keep-out with the region "
                         "grown by PX pixels (rules keep_out.margin_px), reported as the "
                         "row chain_margin_<PX>px; repeatable")
    ep.add_argument("--out", required=True, metavar="FOLDER",
                    help="output folder: precheck.json, precheck.txt, precheck_<split>.png "
                         "(and precheck_<split>_chain.png with --chain)")
    ep.set_defaults(func=_run_eval_precheck)
    rc = sub.add_parser(
        "read-chain", help="read a calibration episode into the chain model's encoded "
                           "calibration (for simulate --chain)",
        description=READ_CHAIN_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    rc.add_argument("--calibration", required=True, metavar="FILE",
                    help="the cell's calibration episode (.npz), e.g. "
                         "samples/cell_sample/calibration_256.npz")
    rc.add_argument("--out", required=True, metavar="FILE",
                    help="the .npz to write (must not exist; its folder is made if missing)")
    rc.add_argument("--grid", type=int, default=64, metavar="PX",
                    help="the model's grid side, px; the calibration must be a whole multiple "
                         "(default 64)")
    rc.add_argument("--fovy-deg", type=float, default=None, metavar="DEG",
                    help="the camera's vertical field of view (default: the calibration's "
                         "metadata.camera.fovy_deg)")
    rc.add_argument("--photometric", type=int, default=None, metavar="PX",
                    help="side the frames are resized to for refining the fit against them, "
                         "a whole multiple of --grid; 0: no refinement (default twice "
                         "--grid: 128 for the shipped 64)")
    rc.add_argument("--motion", action="append", metavar="FILE",
                    help="an episode of the joints turning together on the same cell (best "
                         "the held poses of 'calibrate plan --poses'; same camera and "
                         "resolution, with joint readings), "
                         "to refine the chain with after the read: the sweep moves one "
                         "channel at a time and cannot show how the channels compose "
                         "(refine_chain_with_motion; 2-5 min more on 2 cores); repeat for "
                         "more. Commission the cell on another episode")
    rc.add_argument("--twins", action=argparse.BooleanOptionalAction, default=None,
                    help="with --motion (on by default there): first choose each channel's "
                         "depth-mirrored twin by the motion's frames: each twin that is not "
                         "far worse as drawn is refined 60 steps beside the chain and kept "
                         "where it then lowers the photometric loss by 1%% at 4 px blur and "
                         "at 2 and 1 px (choose_twins; most of the 2-5 min); "
                         "--no-twins keeps the sweep's choice")
    rc.add_argument("--tracks", choices=TRACK_MODES, default="colour", help=TRACKS_HELP)
    rc.add_argument("--joint-scale", choices=JOINT_SCALE_MODES, default="auto",
                    help=JOINT_SCALE_HELP)
    rc.add_argument("--threads", type=positive_int, default=2, metavar="N",
                    help="torch threads (default 2)")
    rc.set_defaults(func=_run_read_chain)
