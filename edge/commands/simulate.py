"""``syncedge simulate``: predict what candidate actions will do in a cell.

Writes into ``--out`` (all or nothing): ``prediction.mp4`` (the ground truth, when the
start is an episode whose own actions are simulated, beside each candidate, in a labelled
grid with a step counter), ``prediction.npz`` (the predicted frames, lossless),
``contact_sheet.png`` (one row per candidate, up to 16, the ground truth below) and
``metrics.json`` (per-step PSNR, SSIM and motion-region PSNR against the ground truth,
timings, provenance). At most 256 candidates, 256 steps and 8192 predicted frames per call.

Two model families run here. ``--model`` (default: the active bundle) runs an exported
ONNX model with ``--calibration``/``--cell`` (or none: history mode). ``--chain FILE``
runs the chain model instead: the cell's kinematic chain read from its calibration
episode by ``syncedge model read-chain`` (or, with ``--chain`` alone and ``--cell``, the one the
calibration cache holds: ``syncedge calibrate store EPISODE --chain``) moves the start
frame's arm pixels (NumPy and OpenCV, no model file); it needs the controller's joint readings at the start frame (the
start episode's first ``joint_positions``, or ``--start-joints``).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from edge.commands.common import (
    CHAIN_FROM_CACHE,
    StagedOutput,
    add_anchor_arg,
    add_chain_arg,
    add_context_args,
    add_model_args,
    agreement_warnings,
    anchor_chain,
    chain_input_warnings,
    chain_mode,
    chain_model_identity,
    chain_rollout_rate,
    check_out_dir,
    describe_identity,
    get_context,
    model_identity,
    open_chain,
    open_model,
    run_command,
    say_warnings,
    use_chain_model,
)
from edge.commands.helptext import plain
from edge.commands.limits import check_rollout_size
from edge.fileio import write_json_atomic
from edge.metrics import masked_psnr, motion_mask, psnr, ssim
from edge.runtime.device_copies import copy_counts
from edge.runtime.errors import RuntimeInputError
from edge.runtime.inputs import (
    action_speed_warnings,
    check_episode_rate,
    episode_sliding,
    load_actions,
    load_start,
    start_resize_warnings,
)
from edge.runtime.rollout import Rollout
from edge.visual import contact_sheet, video_frames, video_layout, write_mp4, write_png

__all__ = ["MAX_SHEET_ROWS", "MAX_SHEET_TILES", "main", "register", "run", "sheet_columns",
           "step_metrics", "write_prediction_npz"]

MAX_SHEET_TILES = 10
MAX_SHEET_ROWS = 16  # candidates drawn on a contact sheet; the sheet says when it shows fewer
MOTION_THRESHOLD = 8  # uint8 units: a ground-truth pixel moved if it changed by more


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``simulate`` subcommand."""
    p = subparsers.add_parser("simulate", help="predict frames for candidate actions",
                              description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_context_args(p)
    p.add_argument("--start", required=True, metavar="FRAME|EPISODE",
                   help="start frame (PNG/JPEG/.npy) or an episode .npz (its first frame)")
    p.add_argument("--actions", metavar="FILE", help="candidate actions (.npy/.csv/.json); "
                   "default: the start episode's own actions")
    add_model_args(p)
    add_chain_arg(p)
    add_anchor_arg(p)
    p.add_argument("--start-joints", metavar="Q|FILE",
                   help="with --chain: the controller's joint readings at the start frame "
                        "(comma-separated, a first value may be negative: --start-joints "
                        "-0.1,0.2,...; or .npy/.json/.csv; default: the start episode's "
                        "first joint_positions)")
    p.add_argument("--out", default="simulate-out", metavar="DIR",
                   help="output folder, written all at once (default: %(default)s in the "
                        "current folder)")
    p.set_defaults(func=run)
    return p


def _clean(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 4)


def step_metrics(pred: np.ndarray, truth: np.ndarray, start: np.ndarray) -> list[dict]:
    """Per-step metrics of ``pred`` vs ``truth`` (uint8 ``[T, H, W, 3]``).

    PSNR in dB (null when identical), SSIM, and PSNR over the motion region (pixels where
    the ground truth differs from ``start`` by more than 8; null when empty). ``step``
    counts predicted steps from 0; ``frame`` is the start episode's frame it is compared
    with (``step + 1``, as the contact sheet labels it ``t1`` ...).
    """
    out = []
    for t in range(len(pred)):
        m = motion_mask(truth[t], start, MOTION_THRESHOLD)
        out.append({"step": t, "frame": t + 1, "psnr_db": _clean(psnr(pred[t], truth[t])),
                    "ssim": _clean(ssim(pred[t], truth[t])),
                    "motion_psnr_db": _clean(masked_psnr(pred[t], truth[t], m)),
                    "motion_pixels": int(m.sum())})
    return out


def sheet_columns(t: int, n: int = MAX_SHEET_TILES) -> np.ndarray:
    """At most ``n`` step indices spread over ``t`` steps (always the last)."""
    return np.unique(np.linspace(0, t - 1, min(n, t)).round().astype(int))


def run(args: argparse.Namespace, context_source=None) -> int:
    """Run ``simulate`` for parsed arguments; returns the exit code (0)."""
    t_start = time.perf_counter()
    check_out_dir(args.out, "syncedge simulate")  # before any work
    if use_chain_model(args, CHAIN_FROM_CACHE):
        return _run_chain(args, t_start)
    for flag, given in (("--start-joints", getattr(args, "start_joints", None)),
                        ("--anchor", getattr(args, "anchor", None)),
                        ("--no-anchor", getattr(args, "no_anchor", False))):
        if given:
            raise RuntimeInputError(f"{flag}: only with --chain (an ONNX model reads the "
                                    "start frame alone)")
    model = open_model(args)
    try:
        start_notes: list[str] = []
        start, episode = load_start(args.start, model.contract.resolution, start_notes)
        actions, names = _candidate_actions(args, episode)
        n, horizon = actions.shape[:2]
        check_rollout_size(n, horizon, str(args.actions or args.start))
        names = names or [f"candidate-{i}" for i in range(n)]
        truth_given = episode is not None and not args.actions
        if truth_given:
            check_episode_rate(episode, model.contract.frame_rate_hz, str(args.start))
        layout = video_layout(names, model.contract.resolution, truth_given)  # before work
        ctx = get_context(args, model, episode, context_source)
        rollout = Rollout(model, ctx, max_horizon=horizon, max_candidates=n)
        rollout.check_actions(actions, str(args.actions or args.start))
        warnings = say_warnings([*start_resize_warnings(episode, str(args.start)), *start_notes,
                                 *ctx.warnings, *action_speed_warnings(
            actions, model.contract.frame_rate_hz,
            list(episode.metadata.dof_names) if episode is not None else [],
            str(args.actions or args.start),
            sliding=episode_sliding(episode, actions.shape[-1]))])
        t0 = time.perf_counter()
        rollout.reset(start, actions)
        rollout.step()  # the first step (cold: allocation, graph capture) timed apart
        first_frame_s = time.perf_counter() - t0
        copies0 = copy_counts()
        t1 = time.perf_counter()
        for _ in range(horizon - 1):
            rollout.step(fetch=False)
        pred = rollout.frames()  # (N, T, H, W, 3)
        steady_s = time.perf_counter() - t1
        rollout_s = time.perf_counter() - t0
        steady_copies = copy_counts() - copies0
        truth = episode.frames[1:1 + horizon] if truth_given and episode is not None else None
        report = {
            "model": str(model.model_dir), "model_sha256": model.sha256,
            "model_id": model_identity(model),
            "backend": model.backend, "backend_requested": args.backend,
            "context": ctx.source, "start": str(args.start),
            "actions": str(args.actions) if args.actions else "start episode",
            "candidates": n, "horizon": horizon, "names": names,
            "batch_size": rollout.batch, "chunks": rollout.chunks,
            "candidate_groups": model.shard_plan(rollout.batch) if not model.on_device
            else None,
            "timings_s": {"first_frame": round(first_frame_s, 6),
                          "rollout": round(rollout_s, 6),
                          "frames_per_s": round(n * (horizon - 1) / steady_s, 2)
                          if horizon > 1 and steady_s > 0 else None,
                          "frames_per_s_note": "steps 2..T (the first step is first_frame)",
                          "total": None},
            "rollout_path": rollout.path, "device_graph": rollout.device_graph,
            "engines": model.engine_report(),
            "host_copies_steps_2_to_T": steady_copies.to_json(),
            "ground_truth": None, "per_step": None, "summary": None, "copy_last": None,
            "warnings": [*getattr(args, "setup_warnings", []), *warnings],
        }
        paths = _write_outputs(args, report, pred, truth, start, model.contract.frame_rate_hz,
                               layout, t_start)
    finally:
        model.deactivate()
    _print_summary(report, paths)
    return 0


def _candidate_actions(args: argparse.Namespace, episode, width: int | None = None
                       ) -> tuple[np.ndarray, list[str] | None]:
    """``--actions`` (``(actions, names)``), else the start episode's own actions as one
    candidate (its first ``width`` channels when given), else a refusal."""
    if args.actions:
        return load_actions(args.actions)
    if episode is None:
        raise RuntimeInputError("--actions: required when --start is a frame, not an episode")
    if episode.num_frames < 2:
        raise RuntimeInputError(f"{args.start}: expected an episode of at least 2 frames to "
                                "take its actions, found 1")
    return episode.actions[None, :-1, :width].astype(np.float32), ["episode"]


def _write_outputs(args: argparse.Namespace, report: dict, pred: np.ndarray,
                   truth: np.ndarray | None, start: np.ndarray, fps: float, layout,
                   t_start: float) -> list[Path]:
    """Per-step metrics against ``truth`` (when given) into ``report``, then the contact
    sheet, video, ``prediction.npz`` and ``metrics.json`` written into ``--out`` at once;
    returns the paths written."""
    n, horizon = pred.shape[:2]
    if truth is not None:
        per = step_metrics(pred[0], truth, start)
        report["ground_truth"] = f"{args.start} frames 1..{horizon}"
        report["per_step"] = per
        report["summary"] = _mean_metrics(per)
        # the baseline every prediction is measured against: the start frame held
        held = step_metrics(np.repeat(start[None], horizon, 0), truth, start)
        report["copy_last"] = {"summary": _mean_metrics(held),
                               "per_step_psnr_db": [p["psnr_db"] for p in held]}
        below = _below_copy_last([p["psnr_db"] for p in per], [p["psnr_db"] for p in held],
                                 bool(getattr(args, "chain", None)))
        if below:
            print(f"warning: {below}", file=sys.stderr, flush=True)
            report["warnings"].append(below)
    cols = sheet_columns(horizon)
    shown = min(n, MAX_SHEET_ROWS)
    rows = [pred[i, cols] for i in range(shown)]
    labels = [f"pred {i} {report['names'][i]}" for i in range(shown)]
    if truth is not None:
        rows.append(truth[cols])
        labels.append("truth")
    note = None if shown == n else (f"{shown} of {n} candidates shown (the first {shown}); "
                                    f"every candidate is in prediction.npz")
    report["contact_sheet"] = {"candidates_shown": shown, "candidates": n, "note": note}
    sheet = contact_sheet(rows, labels, [[f"t{c + 1}" for c in cols]] * len(rows), note=note)
    report["video"] = layout.to_json()
    with StagedOutput(args.out, "syncedge simulate") as out:
        write_mp4(out.path("prediction.mp4"), video_frames(layout, pred, truth, fps), fps,
                  scale=1)
        write_prediction_npz(out.path("prediction.npz"), pred, fps, report["names"])
        write_png(out.path("contact_sheet.png"), sheet)
        report["timings_s"]["total"] = round(time.perf_counter() - t_start, 6)
        write_json_atomic(out.path("metrics.json"), report)
        return out.commit()


def _below_copy_last(pred: list, held: list, chain: bool) -> str | None:
    """The warning when the prediction's whole-frame PSNR against the start episode's own
    frames, averaged over the steps where both it and the start frame held have a finite
    one (``pred``, ``held``: per-step dB or None; a step whose truth equals the start frame
    has none for the start frame), is below copying the start frame: the model does not
    predict this cell's motion, whatever else it draws. None where it is not (or nothing
    is known)."""
    both = [(p, h) for p, h in zip(pred, held, strict=True) if p is not None and h is not None]
    if not both:
        return None
    p_mean = float(np.mean([p for p, _ in both]))
    h_mean = float(np.mean([h for _, h in both]))
    if p_mean >= h_mean:
        return None
    look = ("the chain's sweep sheet (chain.png, written at store) for channels read wrong "
            "or not at all" if chain else "the calibration's coverage check")
    return (f"the prediction scores below copying the start frame: whole-frame PSNR "
            f"{p_mean:.2f} against {h_mean:.2f} dB over {len(both)} steps: it does not "
            f"predict this cell's motion; look at contact_sheet.png and {look} "
            f"(`syncedge calibrate validate` gives the same comparison as a verdict)")


def _mean_metrics(per: list[dict]) -> dict:
    """Means over the steps of ``psnr_db``, ``ssim`` and ``motion_psnr_db`` (None where no
    step has one)."""
    return {k: _clean(float(np.mean([p[k] for p in per if p[k] is not None])))
            if any(p[k] is not None for p in per) else None
            for k in ("psnr_db", "ssim", "motion_psnr_db")}


def _print_summary(report: dict, paths: list[Path]) -> None:
    print(describe_identity(report["model_id"]))
    for p in paths:
        print(p)
    if report.get("frame_rate_from"):  # the chain model's: which rate the outputs are at
        print(f"frames at {report['frame_rate_hz']:g} Hz ({report['frame_rate_from']})")
    if report["summary"]:
        s = report["summary"]
        print(f"mean PSNR {s['psnr_db']} dB, SSIM {s['ssim']}, motion PSNR "
              f"{s['motion_psnr_db']} dB over {len(report['per_step'])} steps")
        c = report["copy_last"]["summary"]
        print(f"copy-last (the start frame held): PSNR {c['psnr_db']} dB, SSIM {c['ssim']}, "
              f"motion PSNR {c['motion_psnr_db']} dB")


def _run_chain(args: argparse.Namespace, t_start: float) -> int:
    """``simulate --chain``: the chain model (:mod:`edge.runtime.chain`)."""
    from edge.runtime.chain import chain_rollout

    for flag, given in (("--model", args.model), ("--calibration", args.calibration)):
        if given:
            raise RuntimeInputError(f"{flag}: not with {chain_mode(args)} (the chain "
                                    "calibration is the cell's encoded calibration and the "
                                    "model)")
    chain, start, episode, q0, source = open_chain(args, "--start-joints", args.start_joints)
    k = chain.num_dof
    actions, names = _candidate_actions(args, episode, k)
    src = str(args.actions or args.start)
    if actions.ndim != 3 or actions.shape[2] != k:
        raise RuntimeInputError(f"{src}: expected actions [N, T, {k}] (one per channel: "
                                f"{', '.join(chain.dof_names)}), found {list(actions.shape)}")
    n, horizon = actions.shape[:2]
    check_rollout_size(n, horizon, src)
    names = names or [f"candidate-{i}" for i in range(n)]
    truth_given = episode is not None and not args.actions
    layout = video_layout(names, chain.resolution, truth_given)  # before work
    warnings = chain_input_warnings(args, chain, episode, q0, actions, src, "--start-joints",
                                    args.start_joints)
    chain, source, agreement = anchor_chain(args, chain, source, start, q0)
    warnings += agreement_warnings(agreement)
    t0 = time.perf_counter()
    pred = chain_rollout(chain, start, q0, actions)
    rollout_s = time.perf_counter() - t0
    truth = episode.frames[1:1 + horizon] if truth_given and episode is not None else None
    fps, fps_from = chain_rollout_rate(chain, episode, str(args.start))
    report = {
        "model": "chain", "model_sha256": chain.sha256(),
        "model_id": chain_model_identity(args, chain, source),
        "backend": "numpy", "backend_requested": args.backend,
        "context": f"chain calibration {source}", "chain": chain.info,
        "start_agreement": agreement,
        "start": str(args.start), "start_joint_positions": [round(float(x), 6) for x in q0],
        "actions": str(args.actions) if args.actions else "start episode",
        "candidates": n, "horizon": horizon, "names": names,
        "frame_rate_hz": fps, "frame_rate_from": fps_from,
        "timings_s": {"rollout": round(rollout_s, 6),
                      "frames_per_s": round(n * horizon / rollout_s, 2) if rollout_s > 0
                      else None, "total": None},
        "ground_truth": None, "per_step": None, "summary": None, "copy_last": None,
        "warnings": [*getattr(args, "setup_warnings", []), *warnings],
    }
    paths = _write_outputs(args, report, pred, truth, start, fps, layout, t_start)
    _print_summary(report, paths)
    return 0


def write_prediction_npz(path: Path, frames: np.ndarray, fps: float, names: list[str]) -> None:
    """Write the predicted frames losslessly for other tools (``simulate`` and ``precheck``).

    Args:
        path: the ``.npz`` file to write.
        frames: uint8 ``[N, T, H, W, 3]``, stored as ``frames``.
        fps: the model's frame rate, Hz: ``step_times_s`` float64 ``[T]`` holds step k's
            time after the start frame, k / fps (k = 1..T).
        names: N candidate names, stored as ``candidate_names`` (unicode strings).

    ``np.load(path, allow_pickle=False)`` reads it.
    """
    import io

    buf = io.BytesIO()
    t = frames.shape[1]
    np.savez_compressed(buf, frames=np.ascontiguousarray(frames, np.uint8),
                        step_times_s=np.arange(1, t + 1, dtype=np.float64) / fps,
                        candidate_names=np.asarray(names, dtype=str))
    path.write_bytes(buf.getvalue())


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``simulate`` alone (``python -m edge.commands.simulate``)."""
    return run_command("simulate", register, argv)


if __name__ == "__main__":
    sys.exit(main())
