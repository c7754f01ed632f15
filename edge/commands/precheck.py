"""``syncedge precheck``: simulate candidate actions (or a policy) and check them against rules.

Writes into ``--out`` (all or nothing) ``report.json`` (per-candidate verdicts, first
failing step and rule, scores, ranking, the chosen candidate), ``report.png`` (one row
per candidate in rank order, up to 16, keep-out regions tinted red, the verdict on each
row) and ``prediction.npz`` (every candidate's predicted frames, lossless). At most 256
candidates, 256 steps and 8192 predicted frames per call.
Exit code 0 only if a candidate passes; 1 if none does; 2 on an input error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from edge.calibrate.gate import add_stale_args, stale_gate
from edge.commands.common import (
    CHAIN_FROM_CACHE,
    StagedOutput,
    add_anchor_arg,
    add_chain_arg,
    add_context_args,
    add_model_args,
    agreement_warnings,
    anchor_chain,
    cached_chain_key,
    chain_input_warnings,
    chain_mode,
    chain_model_identity,
    chain_rollout_rate,
    chain_start_mismatch,
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
from edge.commands.limits import check_horizon, check_rollout_size
from edge.commands.simulate import MAX_SHEET_ROWS, sheet_columns, write_prediction_npz
from edge.fileio import write_json_atomic
from edge.precheck.evaluate import PrecheckResult, evaluate
from edge.precheck.policy import OnnxPolicy, rollout_chain_policy, rollout_policy
from edge.precheck.rules import keep_out_mask, load_rules, regions_past_the_frame
from edge.runtime.chain import CHAIN_MODEL_SHA256
from edge.runtime.errors import RuntimeInputError
from edge.runtime.inputs import (
    action_speed_warnings,
    episode_sliding,
    fit_image,
    grey_image_note,
    load_actions,
    load_image,
    load_joint_state,
    load_start,
    start_resize_warnings,
)
from edge.runtime.rollout import Rollout
from edge.visual import contact_sheet, write_png

__all__ = ["fail_columns", "keep_out_at_start", "main", "refuse_mismatch", "register",
           "report_image", "run", "start_outside_limits"]


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``precheck`` subcommand."""
    p = subparsers.add_parser("precheck", help="check candidate actions or a policy against "
                              "rules in the world model", description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_context_args(p)
    p.add_argument("--start", required=True, metavar="FRAME|EPISODE",
                   help="start frame (PNG/JPEG/.npy) or an episode .npz (its first frame)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--actions", metavar="FILE",
                     help="candidate action sequences (.npy/.csv/.json), rad|m per step")
    src.add_argument("--policy", metavar="ONNX", help="a policy to roll out in the model")
    p.add_argument("--horizon", type=int, default=None,
                   help="steps with --policy (with --actions: the file's step count)")
    p.add_argument("--joint-state", "--start-joints", metavar="Q",
                   help="start joint positions: 'q0,q1,...' or a .npy/.json/.csv file "
                        "(default: the start episode's first row; required with --chain or "
                        "--policy when --start is a frame); a first value may be negative: "
                        "--joint-state -0.1,0.2,...")
    p.add_argument("--rules", required=True, metavar="YAML", help="rules file")
    add_model_args(p)
    add_chain_arg(p, " (with --actions, or --policy and --horizon); keep-out basis "
                     "robot_mask or auto is decided on where the chain puts the arm")
    add_anchor_arg(p)
    add_stale_args(p)
    p.add_argument("--mismatch", choices=("refuse", "warn"), default="refuse",
                   help="when the start was recorded in another cell, camera or robot than "
                        "the calibration (their ids differ), or, with the chain model, the "
                        "start frame's scene is shifted from the calibration's (the camera "
                        "moved): refuse before rolling out (default: exit 2, the verdicts "
                        "would be about another cell), or warn and decide anyway")
    p.add_argument("--out", default="precheck-out", metavar="DIR",
                   help="output folder, written all at once (default: %(default)s in the "
                        "current folder)")
    p.set_defaults(func=run)
    return p


def _tint(frames: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    if mask is None or not mask.any():
        return frames
    out = frames.astype(np.float32)
    m = mask.astype(bool)
    out[..., m, 0] = 0.6 * out[..., m, 0] + 0.4 * 255
    out[..., m, 1:] *= 0.6
    return out.round().astype(np.uint8)


def report_image(result: PrecheckResult, start: np.ndarray, frames: np.ndarray
                 ) -> tuple[np.ndarray, dict]:
    """The report picture and what it shows.

    Args:
        result: the verdicts.
        start: uint8 ``[H, W, 3]`` start frame.
        frames: uint8 ``[N, T, H, W, 3]`` predicted frames.

    Returns:
        ``(image uint8 [H', W', 3], shown)``: the start frame then each candidate's steps,
        in rank order, the first :data:`MAX_SHEET_ROWS` ranks; ``shown`` says how many
        candidates it shows of how many (``candidates_shown``, ``candidates``, ``note``: the
        line drawn on top when some are left out, else None).
    """
    t = frames.shape[1]
    cols = sheet_columns(t, 8)
    rows, labels, tiles = [], [], []
    ranked = result.ranking[:MAX_SHEET_ROWS]
    for i in ranked:
        v = result.verdicts[i]
        fail = v.first_fail_step
        row_cols = fail_columns(cols, fail)
        row = np.concatenate([start[None], frames[i, row_cols]])
        rows.append(_tint(row, result.keepout_mask))
        # frame t(k+1) is the one after step k (0-based): the tiles' names
        verdict = "PASS" if v.passed else f"FAIL {v.first_fail_rule} from t{fail + 1}"
        chosen = " CHOSEN" if i == result.chosen else ""
        labels.append(f"#{v.rank} {v.name} {verdict}{chosen}")
        tiles.append(["start"] + [f"t{c + 1}" + (" fail" if c == fail else "")
                                  for c in row_cols])
    n = len(result.ranking)
    note = None if len(ranked) == n else (f"{len(ranked)} of {n} candidates shown (ranks "
                                          f"1-{len(ranked)}); every verdict is in report.json")
    image = contact_sheet(rows, labels, tiles, scale=max(2, 256 // start.shape[0]), note=note)
    return image, {"candidates_shown": len(ranked), "candidates": n, "note": note}


def fail_columns(cols: np.ndarray, fail: int | None) -> np.ndarray:
    """The sheet's step columns ``cols`` (sorted, 0-based) for one candidate, with the step
    where its first rule failed (``fail``) shown in place of the nearest other column
    (never the last); ``cols`` as they are when ``fail`` is None or already shown."""
    if fail is None or fail in cols or not len(cols):
        return cols
    inner = cols[:-1] if len(cols) > 1 else cols
    out = cols.copy()
    out[int(np.argmin(np.abs(inner - fail)))] = fail
    return np.sort(out)


def run(args: argparse.Namespace, context_source=None) -> int:
    """Run ``precheck`` for parsed arguments; returns 0 if a candidate passes, else 1."""
    rules = load_rules(args.rules)
    check_out_dir(args.out, "syncedge precheck")  # before any work
    if use_chain_model(args, CHAIN_FROM_CACHE):
        return _run_chain(args, rules)
    for flag in ("anchor", "no_anchor"):
        if getattr(args, flag, None):
            raise RuntimeInputError(f"--{flag.replace('_', '-')}: only with --chain (it "
                                    "concerns the chain model's calibration at the start "
                                    "frame)")
    if args.policy and args.horizon is not None:
        check_horizon(args.horizon)
    model = open_model(args)
    try:
        start_notes: list[str] = []
        start, episode = load_start(args.start, model.contract.resolution, start_notes)
        goal = _load_goal(rules, start, start_notes)
        q0 = (load_joint_state(args.joint_state, "--joint-state") if args.joint_state
              else None)
        if q0 is None and episode is not None and episode.joint_positions is not None:
            q0 = episode.joint_positions[0]
        ctx = get_context(args, model, episode, context_source)
        if args.calibration or args.cell:  # the only warnings a context carries
            refuse_mismatch(args, list(ctx.warnings))
        meta = episode.metadata if episode is not None else None
        dof_names = list(meta.dof_names) if meta is not None else []
        # (an EpisodeMetadata is always true, so this is what ``meta and meta.camera_id`` was)
        stale = stale_gate(args, model.sha256,
                           args.camera_id or (meta.camera_id if meta is not None else None),
                           args.robot_id or (meta.robot_id if meta is not None else None))
        if stale:
            print(f"warning: {stale}", file=sys.stderr)
        names: list[str] | None
        ko = rules.keep_out
        on_mask = bool(ko is not None and ko.basis != "motion" and model.has_robot_mask)
        if ko is not None and ko.basis == "robot_mask" and not on_mask:
            raise RuntimeInputError(
                f"{rules.path}:keep_out.basis: robot_mask, but {model.model_dir} predicts no "
                f"robot mask (model.json contract.decoder_outputs); use basis: motion")
        # on the robot mask the rollout counts its pixels inside the keep-out regions each
        # step (on the GPU on the device path, from the NumPy twin on the host path): the
        # verdict needs the counts, never the masks
        keepout = (keep_out_mask(ko, *model.contract.resolution)
                   if ko is not None and on_mask else None)
        if args.policy:
            if not args.horizon or args.horizon < 1:
                raise RuntimeInputError("--horizon: required (>= 1) with --policy")
            if q0 is None:
                raise RuntimeInputError("--joint-state: required with --policy (the policy "
                                        "reads the joint state)")
            rollout = Rollout(model, ctx, max_horizon=args.horizon, max_candidates=1,
                              keepout=keepout)
            with OnnxPolicy(args.policy) as policy:
                actions, frames = rollout_policy(rollout, policy, start, q0, args.horizon)
            names = ["policy"]
        else:
            actions, names = _file_actions(args)
            n, horizon = actions.shape[:2]
            rollout = Rollout(model, ctx, max_horizon=horizon, max_candidates=n,
                              keepout=keepout)
            rollout.check_actions(actions, str(args.actions))
            frames = rollout.run(start, actions)
        warnings = say_warnings([*start_resize_warnings(episode, str(args.start)), *start_notes,
                                 *ctx.warnings, *action_speed_warnings(
            actions, model.contract.frame_rate_hz, dof_names,
            f"{args.policy}'s actions" if args.policy else str(args.actions),
            sliding=episode_sliding(episode, actions.shape[-1]))])
        robot_counts = rollout.robot_keepout_counts() if on_mask else None
        reference = None
        if rules.keep_out is not None and not on_mask:
            # motion is measured against the model's own zero-action rollout, so that
            # what the model changes when nothing moves is not taken for the robot
            zero = Rollout(model, ctx, max_horizon=int(frames.shape[1]), max_candidates=1)
            reference = zero.run(start, np.zeros((1, int(frames.shape[1]),
                                                  model.contract.max_dof), np.float32))[0]
        # the rules speak of the cell's DoFs: drop the channels the DoF mask switches off
        ctrl = rollout.mask != 0
        if actions.shape[-1] == len(ctrl) and not ctrl.all():
            actions = actions[..., ctrl]
            if q0 is not None and len(q0) == len(ctrl):
                q0 = np.asarray(q0)[ctrl]
            if len(dof_names) == len(ctrl):
                dof_names = [d for d, on in zip(dof_names, ctrl, strict=True) if on]
        ident = model_identity(model)
        result, paths = _evaluate_and_write(
            args, rules, start, goal, q0, actions, frames, names, reference, robot_counts,
            ident, ctx.source, stale, model.contract.frame_rate_hz, warnings,
            dof_names=dof_names or None)
    finally:
        model.deactivate()
    return _print_result(ident, result, paths)


def _file_actions(args: argparse.Namespace) -> tuple[np.ndarray, list[str] | None]:
    """The candidates of ``--actions`` (float32 ``[N, T, A]`` and their names), within the
    rollout limits; ``--horizon`` (which goes with ``--policy``) refused.

    Raises:
        RuntimeInputError: ``--horizon`` given, an unreadable file, past the limits.
    """
    if args.horizon is not None:
        raise RuntimeInputError("--horizon goes with --policy; with --actions the horizon "
                                "is the file's step count")
    actions, names = load_actions(args.actions)
    check_rollout_size(actions.shape[0], actions.shape[1], str(args.actions))
    return actions, names


def _load_goal(rules, start: np.ndarray, notes: list[str]) -> np.ndarray | None:
    """The rules' goal image on the start frame's grid (uint8; a camera frame at a whole
    multiple reduced by area, another larger one centre-cropped and resized, as the start
    frame is: :func:`edge.runtime.inputs.fit_image`), or None without a goal rule. What was
    done to it, and a greyscale goal against a colour start, are appended to ``notes``.

    Raises:
        RuntimeInputError: the image is unreadable or smaller than the start frame.
    """
    if rules.goal is None:
        return None
    goal = fit_image(load_image(rules.goal.image), start.shape[:2], rules.goal.image, notes,
                     "a goal image")
    grey = grey_image_note(goal, start, rules.goal.image, "the goal image", "the start frame")
    if grey:
        notes.append(grey)
    return goal


def _evaluate_and_write(args: argparse.Namespace, rules, start: np.ndarray,
                        goal: np.ndarray | None, q0: np.ndarray | None, actions: np.ndarray,
                        frames: np.ndarray, names: list[str] | None,
                        reference: np.ndarray | None, robot_counts: np.ndarray | None,
                        ident: dict, context: str, stale: str | None, fps: float,
                        warnings: list[str], start_agreement: dict | None = None,
                        extra: dict | None = None, dof_names: list[str] | None = None,
                        start_keepout: str | None = None):
    """The verdicts (:func:`edge.precheck.evaluate.evaluate`) and the output folder
    (``report.json``, ``report.png``, ``prediction.npz``, all at once); returns
    ``(result, paths)``. ``start_agreement``: the chain model's (:func:`edge.commands.
    common.anchor_chain`), recorded as it is; ``extra``: more keys of ``report.json`` (the
    chain model's ``frame_rate_hz`` and ``frame_rate_from``); ``dof_names``: the actions'
    channels, named in the verdicts' details; ``start_keepout``: the warning that the arm
    at the start already lies in a keep-out region (said unless every candidate fails
    there at step 0, which :func:`keep_out_at_start` says)."""
    result = evaluate(rules, start, q0, actions, frames, names, goal,
                      reference_frames=reference, robot_counts=robot_counts,
                      dof_names=dof_names)
    everyone = keep_out_at_start(result, str(args.rules))
    warnings = [*warnings, *say_warnings([
        *regions_past_the_frame(rules, *start.shape[:2]),
        *start_outside_limits(rules, q0, dof_names, str(args.rules)),
        *(everyone or ([start_keepout] if start_keepout else []))])]
    report = {
        "rules": str(args.rules), "model": ident["folder"],
        "model_sha256": ident["sha256"], "model_id": ident, "context": context,
        "start": str(args.start),
        "candidates_from": str(args.policy or args.actions),
        "horizon": int(actions.shape[1]), "calibration_warning": stale,
        "warnings": [*getattr(args, "setup_warnings", []), *warnings],
        **({"start_agreement": start_agreement} if start_agreement is not None else {}),
        **(extra or {}),
        "chosen": None if result.chosen is None else result.verdicts[result.chosen].name,
        "chosen_index": result.chosen,
        "keepout_basis": result.keepout_basis,
        "keepout_margin_px": result.keepout_margin_px,
        "ranking": [result.verdicts[i].name for i in result.ranking],
        "verdicts": [{"index": v.index, "name": v.name, "passed": v.passed,
                      "rank": v.rank, "first_fail_step": v.first_fail_step,
                      "first_fail_rule": v.first_fail_rule, "detail": v.detail,
                      "scores": v.scores} for v in result.verdicts],
    }
    image, report["report_png"] = report_image(result, start, frames)
    with StagedOutput(args.out, "syncedge precheck") as out:
        write_json_atomic(out.path("report.json"), report)
        write_png(out.path("report.png"), image)
        write_prediction_npz(out.path("prediction.npz"), frames, fps,
                             [v.name for v in result.verdicts])
        paths = out.commit()
    return result, paths


def start_outside_limits(rules, q0, dof_names: list[str] | None, rules_path: str
                         ) -> list[str]:
    """The warning when the start joint readings ``q0`` (float ``[K]``, or None) already lie
    outside the rules' ``joint_limits``: every candidate that does not bring them back is
    refused "after step 0", which reads as the candidates' fault when the limits' channel
    order, signs or units are what is wrong; ``[]`` otherwise."""
    lim = rules.joint_limits
    if lim is None or q0 is None:
        return []
    q = np.asarray(q0, np.float64).reshape(-1)
    if len(q) != len(lim.lower):
        return []  # the verdicts name the width mismatch
    names = dof_names if dof_names and len(dof_names) == len(q) else None
    out = [f"{names[c] if names else f'channel {c}'} "
           + (f"{q[c]:.4g}" if np.isfinite(q[c]) else "is not a number,")
           + f" not in [{lim.lower[c]:g}, {lim.upper[c]:g}]" for c in range(len(q))
           if not lim.lower[c] <= q[c] <= lim.upper[c]]
    if not out:
        return []
    return [f"{rules_path}: the start joint readings already lie outside joint_limits "
            f"({'; '.join(out)}): every candidate that does not bring them back is refused; "
            "check the limits' channel order, signs and units (the controller's, as the "
            "actions and --joint-state)"]


def keep_out_at_start(result, rules_path: str) -> list[str]:
    """The warning when every candidate (two or more) fails ``keep_out`` at step 0 (the
    first predicted frame; whether or not another rule refused it first): the arm stands in a keep-out region before anything moves,
    which the regions were surely not meant to say; ``[]`` otherwise. ``result`` is
    :func:`edge.precheck.evaluate.evaluate`'s."""
    v = result.verdicts
    # keep-out's own first failing step: a candidate refused first by another rule (too
    # fast at step 0) still stands in the region with the rest
    if len(v) < 2 or not all(x.scores.get("keep_out_first_step") == 0 for x in v):
        return []
    return [f"{rules_path}: every candidate fails keep_out at step 0, before the arm has "
            "moved far: the arm stands inside a keep-out region at the start (report.png "
            "draws the regions over the start frame); draw the regions clear of the arm's "
            "start pose (coordinates are of the model's frame, 0..1), or allow a few "
            "pixels with keep_out.max_robot_pixels / max_moved_pixels"]


def _print_result(ident: dict, result, paths) -> int:
    print(describe_identity(ident))
    if result.keepout_basis:
        grown = (f" (regions grown by {result.keepout_margin_px:g} px)"
                 if result.keepout_margin_px else "")
        print(f"keep-out decided on: {result.keepout_basis}{grown}")
    width = max([16] + [len(v.name) for v in result.verdicts])
    for i in result.ranking:
        v = result.verdicts[i]
        mark = "*" if i == result.chosen else " "
        print(f"{mark} #{v.rank:<3} {v.name:<{width}} {'PASS' if v.passed else 'FAIL'}  "
              f"{v.detail}")
    for p in paths:
        print(p)
    if result.chosen is None:
        print("no candidate passes", file=sys.stderr)
        return 1
    return 0


def refuse_mismatch(args: argparse.Namespace, reasons: list[str]) -> None:
    """With ``--mismatch refuse`` (the default), refuse a start that does not belong to the
    calibration (``reasons``: the warnings saying so, already printed), before any rollout:
    a verdict about another cell's camera or robot is not one to move an arm on.

    Raises:
        RuntimeInputError: ``reasons`` is not empty and ``--mismatch`` is ``refuse``.
    """
    if reasons and getattr(args, "mismatch", "refuse") == "refuse":
        raise RuntimeInputError(
            f"{reasons[0]}; precheck refuses a start that does not match its calibration "
            "(its verdicts would be about another cell); --mismatch warn decides anyway")


def _run_chain(args: argparse.Namespace, rules) -> int:
    """``precheck --chain``: the chain model (:mod:`edge.runtime.chain`); keep-out on where
    the chain puts the arm."""
    from edge.runtime.chain import chain_rollout

    for flag, given in (("--model", args.model), ("--calibration", args.calibration)):
        if given:
            raise RuntimeInputError(f"{flag}: not with {chain_mode(args)} (the chain model "
                                    "takes --actions or --policy and its chain calibration)")
    if args.policy and args.horizon is not None:
        check_horizon(args.horizon)
    chain, start, episode, q0, source = open_chain(args, "--joint-state", args.joint_state)
    k = chain.num_dof
    mismatch = chain_start_mismatch(args, chain, episode)
    refuse_mismatch(args, [mismatch] if mismatch else [])
    # the stale-calibration gate: the cell's chain entry holds the reference frame
    camera = robot = None
    if args.verify_camera and args.chain == CHAIN_FROM_CACHE:
        key = cached_chain_key(args)
        camera, robot = key.camera_id, key.robot_id
    elif args.verify_camera:
        raise RuntimeInputError(f"--verify-camera: needs --chain with --cell (the reference "
                                f"frame is in the calibration cache), not --chain "
                                f"{args.chain}; or give --verification FILE from 'syncedge "
                                "calibrate verify --out FILE'")
    stale = stale_gate(args, CHAIN_MODEL_SHA256, camera, robot)
    if stale:
        print(f"warning: {stale}", file=sys.stderr)
    goal = _load_goal(rules, start, args.start_notes)
    names: list[str] | None
    if args.policy:
        if not args.horizon or args.horizon < 1:
            raise RuntimeInputError("--horizon: required (>= 1) with --policy")
        chain, source, agreement = anchor_chain(
            args, chain, source, start, q0,
            refuse_moved=lambda reasons: refuse_mismatch(args, reasons))
        with OnnxPolicy(args.policy) as policy:
            actions, frames, cover = rollout_chain_policy(chain, policy, start, q0,
                                                          args.horizon)
        names = ["policy"]
        warnings = chain_input_warnings(args, chain, episode, q0, actions,
                                        f"{args.policy}'s actions", "--joint-state",
                                        args.joint_state)
        horizon = args.horizon
    else:
        actions, names = _file_actions(args)
        horizon = actions.shape[1]
        if actions.shape[2] != k:
            raise RuntimeInputError(f"{args.actions}: expected actions [N, T, {k}] (one per "
                                    f"channel: {', '.join(chain.dof_names)}), found "
                                    f"{list(actions.shape)}")
        warnings = chain_input_warnings(args, chain, episode, q0, actions, str(args.actions),
                                        "--joint-state", args.joint_state)
        chain, source, agreement = anchor_chain(
            args, chain, source, start, q0,
            refuse_moved=lambda reasons: refuse_mismatch(args, reasons))
        frames, cover = chain_rollout(chain, start, q0, actions, with_cover=True)
    warnings += agreement_warnings(agreement)
    ko = rules.keep_out
    robot_counts = reference = start_keepout = None
    if ko is not None and ko.basis == "motion":
        # the chain's own zero-action rollout (the start frame itself)
        reference = chain_rollout(chain, start, q0, np.zeros((horizon, k)))
    elif ko is not None:
        inside = keep_out_mask(ko, *chain.resolution) > 0
        robot_counts = (cover & inside).sum((-1, -2)).astype(np.int32)
        _, cover0 = chain_rollout(chain, start, q0, np.zeros((1, k)), with_cover=True)
        at_start = int((cover0[0] & inside).sum())
        if at_start > ko.max_robot_pixels:
            start_keepout = (
                f"{args.rules}: the arm at the start already has {at_start} px inside the "
                f"keep-out regions (allowed {ko.max_robot_pixels}): a candidate that holds "
                "still fails, one that leaves at its first step passes; draw the regions "
                "clear of the arm's start pose (report.png draws them over the start frame)")
    ident = chain_model_identity(args, chain, source)
    fps, fps_from = chain_rollout_rate(chain, episode, str(args.start))
    result, paths = _evaluate_and_write(
        args, rules, start, goal, q0, actions, frames, names, reference, robot_counts, ident,
        f"chain calibration {source}", stale, fps, warnings, agreement,
        {"frame_rate_hz": fps, "frame_rate_from": fps_from}, list(chain.dof_names),
        start_keepout)
    return _print_result(ident, result, paths)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``precheck`` alone (``python -m edge.commands.precheck``)."""
    return run_command("precheck", register, argv)


if __name__ == "__main__":
    sys.exit(main())
