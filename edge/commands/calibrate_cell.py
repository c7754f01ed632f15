"""``syncedge calibrate store | verify | validate``: the steps that use the model and cache.

Registered by :func:`edge.commands.calibrate.register` (see that module and
docs/calibration.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from edge.calibrate.errors import CalibrateError
from edge.commands.common import (
    StagedOutput,
    active_bundle_dir,
    add_anchor_arg,
    add_model_args,
    check_out_dir,
    describe_model,
    open_model,
    positive_int,
    store_command,
)
from edge.fileio import write_json_atomic
from edge.runtime.chain import JOINT_SCALE_HELP, JOINT_SCALE_MODES, TRACK_MODES, TRACKS_HELP

__all__ = ["checked_episode", "commissioning_calibration", "register_steps", "run_store",
           "run_validate", "run_verify"]


def _cache(args: argparse.Namespace):
    from edge.cache.store import CalibrationCache, default_root

    return CalibrationCache(Path(args.cache_dir) if args.cache_dir else default_root())


def _key(cache: Any, args: argparse.Namespace, model_sha256: str | None):
    """The one cached entry of ``--cell`` (and ``--camera-id``/``--robot-id``) for the model
    (``None``: for any model, the cell's camera and robot still unique).

    Raises:
        CalibrateError: no entry, several cameras or robots, or entries for other models
            only (naming the model in use, the active bundle when ``--model`` was not
            given, and the exact command that encodes the context for it).
    """
    infos = cache.list(cell_id=args.cell, camera_id=args.camera_id, robot_id=args.robot_id,
                       model_prefix=model_sha256)
    pairs = {(i.key.camera_id, i.key.robot_id) for i in infos}
    if len(pairs) == 1 and (model_sha256 is None or len(infos) == 1):
        return infos[0].key
    where = (f"cell {args.cell!r} (camera {args.camera_id or 'any'}, robot "
             f"{args.robot_id or 'any'})")
    model = f" and {describe_model(args, model_sha256)}" if model_sha256 else ""
    if len(pairs) > 1:
        found = ", ".join(f"{c}/{r}" for c, r in sorted(pairs))
        raise CalibrateError(f"calibration cache: {where}{model} matches several cameras or "
                             f"robots ({found}); pass --camera-id and --robot-id")
    others = cache.list(cell_id=args.cell, camera_id=args.camera_id, robot_id=args.robot_id)
    if others:
        shas = ", ".join(sorted({i.key.model_sha256[:12] for i in others}))
        other_pairs = sorted({(i.key.camera_id, i.key.robot_id) for i in others})
        if len(other_pairs) > 1:
            found = ", ".join(f"{c}/{r}" for c, r in other_pairs)
            raise CalibrateError(f"calibration cache: no entry for {where}{model}; it is "
                                 f"cached for other models ({shas}) with several cameras or "
                                 f"robots ({found}); pass --camera-id and --robot-id")
        cmd = store_command(args, args.cell, *other_pairs[0])
        raise CalibrateError(f"calibration cache: no entry for {where}{model}; it is cached "
                             f"for other models ({shas}): encode it for this one with "
                             f"'{cmd}'")
    raise CalibrateError(f"calibration cache: no entry for {where}; store the calibration "
                         f"first ('syncedge calibrate store EPISODE')")


def _reference_key(cache: Any, args: argparse.Namespace, model_sha256: str | None):
    """The entry whose reference frame ``verify`` compares with: the model's own when it has
    one; without ``--model``, any entry of the cell (the reference frame is the cell's, not
    a model's), with a note on stderr when the active bundle has no context yet."""
    if args.model or model_sha256 is None:
        return _key(cache, args, model_sha256)
    try:
        return _key(cache, args, model_sha256)
    except CalibrateError:
        key = _key(cache, args, None)  # refuses as before when the cell has no entry
    import sys

    from edge.commands.common import chain_store_hint
    from edge.runtime.chain import CHAIN_MODEL_SHA256

    if model_sha256 == CHAIN_MODEL_SHA256:  # a chain bundle: its cache id is the format's
        print(f"note: the active bundle {active_bundle_dir()} is the chain model and the cache "
              f"holds no chain calibration of cell {key.cell_id!r} yet; the reference frame "
              f"comes from its entry for model {key.model_sha256[:12]}...; "
              f"{chain_store_hint(key.cell_id, args.cache_dir)}", file=sys.stderr)
        return key
    print(f"note: {describe_model(args, model_sha256)} has no context for cell "
          f"{key.cell_id!r} yet; the reference frame comes from its entry for model "
          f"{key.model_sha256[:12]}...; encode the context for the active bundle with "
          f"'{store_command(args, key.cell_id, key.camera_id, key.robot_id)}'",
          file=sys.stderr)
    return key


def _store_from_cache(args: argparse.Namespace) -> int:
    """Encode a cell's cached calibration episode for ``--model`` and cache the context:
    the episode of the model's own entry when it has one (its context was evicted or
    dropped, or is encoded again), else one another model's entry holds that this model
    accepts (:func:`edge.commands.calibrate_source.cached_source`), brought to the model's
    timing and resolution as ``calibrate store EPISODE`` does."""
    import dataclasses

    from edge.cache.values import CacheKey
    from edge.commands.calibrate_source import cached_source, episode_size
    from edge.errors import EdgeError
    from edge.runtime.context import encode_calibration, model_timing

    model = open_model(args)
    try:
        with _cache(args) as cache:
            cache.require_writable("storing a calibration")

            timed: dict[Any, tuple[Any, dict]] = {}  # each candidate's episode, timed once

            def accepts(entry: Any) -> str | None:
                try:
                    timed[entry.key] = model_timing(model, entry.episode,
                                                    where=f"cache:{entry.key.short}")
                except EdgeError as exc:
                    return str(exc)
                return None

            want = tuple(int(n) for n in model.contract.resolution)
            source = cached_source(cache, args, _key(cache, args, None), model.sha256,
                                   f"model {model.sha256[:12]}... ({model.model_dir})",
                                   accepts, lambda e: tuple(e.episode.resolution) == want)
            entry, src = source.entry, source.entry.key
            t0 = time.perf_counter()
            episode, ingest = timed[src] if src in timed else \
                model_timing(model, entry.episode, where=f"cache:{src.short}")
            ctx = encode_calibration(model, episode, where=f"cache:{src.short}")
            encode_s = time.perf_counter() - t0
            key = CacheKey(src.cell_id, src.camera_id, src.robot_id, model.sha256)
            report = {**entry.report, "stored": {
                "model": str(model.model_dir), "model_sha256": model.sha256,
                "encode_s": round(encode_s, 4), "forced": entry.info.forced,
                "forced_reason": entry.info.forced_reason,
                "from_cache_entry": dataclasses.asdict(src), "stored_at_s": round(time.time(), 3)}}
            if ingest.get("normalised"):
                report["ingest"] = ingest
            cache.put(key, episode, ctx.values, report, entry.reference_frame,
                      forced=entry.info.forced, forced_reason=entry.info.forced_reason)
    finally:
        model.deactivate()
    resized = (f", brought to the model's {episode_size(episode)}"
               if episode.resolution != entry.episode.resolution else "")
    print(f"stored {key.cell_id}/{key.camera_id}/{key.robot_id}/{key.model_sha256[:12]} from "
          f"{source.why}{resized} (context {list(ctx.values.shape)}, encoded in "
          f"{encode_s:.2f} s)")
    return 0


def checked_episode(args: argparse.Namespace, model_fps: float | None = None
                    ) -> tuple[Any, dict, np.ndarray, Path]:
    """``calibrate store EPISODE``'s episode, checked (refused on a failed check unless
    ``--force REASON``), with its coverage report and reference frame (``--reference``,
    else ``EPISODE.reference.png``, else the first frame). ``model_fps``: the model's frame
    rate the camera lag is judged in (None: ``--model``'s, else the check's default).

    Returns:
        ``(episode, report, reference uint8 [H, W, 3], reference path)``.

    Raises:
        CalibrateError: the check failed and ``--force`` was not given.
    """
    from edge.calibrate.check import CheckOptions, EpisodeArrays, check_arrays
    from edge.episode import load_episode, reference_path
    from edge.runtime.inputs import load_image

    ep = load_episode(args.episode)
    opts = CheckOptions()
    if model_fps is not None:
        opts = CheckOptions(model_fps=float(model_fps))
    elif getattr(args, "model", None):  # judged at the model's frame rate
        from edge.manifest import load_manifest

        opts = CheckOptions(model_fps=float(load_manifest(
            Path(args.model) / "model.json").contract.frame_rate_hz))
    report = check_arrays(EpisodeArrays.from_episode(ep), opts)
    report["episode"] = str(args.episode)
    if report.get("disturbed_sweeps"):  # the read takes those frames as they are
        print(f"note: {args.episode}: {report['disturbed_sweeps']['note']}", file=sys.stderr)
    moves = [r for r in report["reasons"] if r["code"] == "camera_moves"]
    if moves and args.force:  # a fixed camera whose only texture is a long arm can read so
        print(f"warning: {args.episode}: stored past camera_moves ({moves[0]['message']}); "
              f"if the camera does move with the arm, the chain read takes the whole view "
              f"as arm (minutes per channel) and predicts nothing real", file=sys.stderr)
    if report["verdict"] != "pass" and not args.force:
        codes = ", ".join(sorted({r["code"] for r in report["reasons"]}))
        raise CalibrateError(f"{args.episode}: the calibration failed its check ({codes}); "
                             f"record it again, or store it anyway with --force REASON")
    ref_path = Path(args.reference) if args.reference else \
        reference_path(args.episode)
    if ref_path.is_file() or args.reference:  # a --reference missing is named
        reference = load_image(ref_path)
    else:
        reference = ep.frames[0]
        fh, fw = reference.shape[:2]
        print(f"note: no {ref_path} beside the episode (the camera's first frame that "
              f"'calibrate record' writes): the episode's first frame, {fw}x{fh} px, is the "
              "reference 'calibrate verify' compares the camera with; that is right where "
              "the episode holds the camera's frames as taken (an import, frames of your "
              "own), and where it holds them resized, give the camera's own frame with "
              "--reference PNG", file=sys.stderr)
    return ep, report, reference, ref_path


def _forced_past_amplitude(model: Any, ep: Any, args: argparse.Namespace) -> str:
    """With ``--force``: the refusal the model's calibration amplitude range would have
    given the episode (``ep``, already in the model's timing), printed as a warning so a
    force given for another reason (a faint joint) does not pass it unseen; ``""`` when
    the sweeps are within the range."""
    from edge.runtime.calibration_input import CalibrationInputError
    from edge.runtime.context import pad_calibration

    try:
        pad_calibration(model, ep, where=str(args.episode), check_amplitude=True)
    except CalibrationInputError as exc:  # IngestError included
        print(f"warning: --force stores past the model's calibration amplitude range too: "
              f"{exc}. The model was not trained on such a sweep: its predictions from this "
              f"entry may be worse than copying the start frame ('syncedge calibrate "
              f"validate' measures it); record the sweep within the range, or give that "
              f"joint's readings in rad (calibrate import --joints to leave a channel out)",
              file=sys.stderr)
        return str(exc)
    return ""


def run_store(args: argparse.Namespace) -> int:
    """Check, encode and cache a calibration episode (refused on a failed check unless
    ``--force REASON``); with ``--cell`` instead of an episode, encode the cell's cached
    episode for the model (``--chain`` goes to :mod:`edge.commands.calibrate_chain`)."""
    if args.cell:
        if args.episode or args.force or args.reference:
            raise CalibrateError("store: pass an EPISODE file, or --cell to encode a cached "
                                 "episode, not both (--force and --reference go with EPISODE)")
        return _store_from_cache(args)
    if getattr(args, "from_model", None):
        raise CalibrateError("--from-model: only with --cell (it picks which cached episode "
                             "to encode)")
    if not args.episode:
        raise CalibrateError("store: pass an EPISODE file, or --cell ID to encode the cell's "
                             "cached episode for --model")
    from edge.cache.store import check_writable, default_root
    from edge.cache.values import CacheKey
    from edge.runtime.context import encode_calibration, model_timing

    check_writable(args.cache_dir or default_root(), "storing a calibration")  # before work
    model = open_model(args)  # first: the check judges the camera lag at its frame rate
    try:
        ep, report, reference, ref_path = checked_episode(
            args, model_fps=float(model.contract.frame_rate_hz))
        t0 = time.perf_counter()
        # a forced store keeps what the technician chose, a sweep outside the model's
        # amplitude range included (the report records that the range was not checked);
        # the entry keeps the episode in the model's timing, with what ingest did
        ep, report["ingest"] = model_timing(model, ep, where=str(args.episode),
                                            check_amplitude=not args.force)
        ctx = encode_calibration(model, ep, where=str(args.episode),
                                 check_amplitude=not args.force)
        encode_s = time.perf_counter() - t0
        outside = _forced_past_amplitude(model, ep, args) if args.force else ""
        key = CacheKey(ep.metadata.cell_id, ep.metadata.camera_id, ep.metadata.robot_id,
                       model.sha256)
        report["stored"] = {"model": str(model.model_dir), "model_sha256": model.sha256,
                            "encode_s": round(encode_s, 4), "forced": bool(args.force),
                            "forced_reason": args.force or "",
                            "amplitude_range_checked": not args.force,
                            "amplitude_outside_range": outside,
                            "reference": str(ref_path) if ref_path.is_file() else "frame 0",
                            "stored_at_s": round(time.time(), 3)}
        with _cache(args) as cache:
            replaced = cache.info(key) is not None
            cache.put(key, ep, ctx.values, report, reference, forced=bool(args.force),
                      forced_reason=args.force or "")
    finally:
        model.deactivate()
    print(f"stored {key.cell_id}/{key.camera_id}/{key.robot_id}/{key.model_sha256[:12]} "
          f"(context {list(ctx.values.shape)}, encoded in {encode_s:.2f} s"
          f"{', FORCED: ' + args.force if args.force else ''})"
          f"{'; replaced the entry stored before under this key' if replaced else ''}")
    return 0


def run_verify(args: argparse.Namespace) -> int:
    """Compare a live frame with the cached reference frame; exit 1 if the camera moved."""
    from edge.calibrate.camera import open_camera
    from edge.calibrate.errors import CameraDisconnectedError
    from edge.calibrate.verify import VerifyOptions, compare_frames
    from edge.manifest import cache_identity

    active = active_bundle_dir()
    # the reference frame is the cell's, whichever model encoded the context
    sha = cache_identity(args.model) if args.model else \
        (cache_identity(active) if (active / "model.json").is_file() else None)
    with _cache(args) as cache:
        key = _reference_key(cache, args, sha)
        entry = cache.get(key)
    cam = open_camera(args.camera)
    try:
        frame = None
        for i in range(max(1, args.warmup + 1)):
            try:
                frame, _ = cam.read()
            except CameraDisconnectedError:
                # a file (a still image, a short clip) that ends within the warm-up: its last
                # frame is the one to check; the warm-up is for a live camera's exposure
                if frame is None or getattr(cam, "kind", "") != "file":
                    raise
                print(f"note: --camera {args.camera}: the file ended after {i} frame(s), "
                      f"within --warmup {args.warmup}: checking its last frame",
                      file=sys.stderr)
                break
        describe = cam.describe()
    finally:
        cam.close()
    assert frame is not None  # the loop reads at least once
    result = compare_frames(entry.reference_frame, frame,
                            VerifyOptions(max_shift_frac=args.max_shift_frac,
                                          max_rotation_deg=args.max_rotation_deg))
    result.update({"cell_id": key.cell_id, "camera_id": key.camera_id,
                   "robot_id": key.robot_id, "model_sha256": key.model_sha256,
                   "camera": describe, "checked_at_s": round(time.time(), 3)})
    if args.out:
        write_json_atomic(args.out, result)
    state = "VALID" if result["valid"] else "STALE"
    measured = (f"shift {result['shift_px']} px ({result['shift_frac']:.2%} of the width), "
                f"rotation {result['rotation_deg']:+.2f} deg, scale {result['scale']:.4f} "
                f"[{result['method']}]")
    reasons = list(result["reasons"])
    if result["resolution_differs"]:
        # the one real reason first; the figures were measured after cropping and resizing
        print(f"{state}: {reasons.pop(0)}")
        print(f"  measured after cropping and resizing to the reference: {measured}")
    elif not result.get("matched", True):  # no shift to report: the scene is not there
        print(f"{state}: {reasons.pop(0)}")
    else:
        print(f"{state}: {measured}")
    for r in reasons:
        print(f"  {r}")
    rh, rw = entry.reference_frame.shape[:2]
    print(f"  reference: the {rw}x{rh} frame cached with cell {key.cell_id!r}'s entry for model "
          f"{key.model_sha256[:12]}... ({key.camera_id}, {key.robot_id})")
    return 0 if result["valid"] else 1


def run_validate(args: argparse.Namespace) -> int:
    """The commissioning report: fidelity with the calibration and zeroed, beside its
    collection time, coverage and equipment."""
    from edge.calibrate.validate import fidelity, keypoint_probe, load_keypoint, predict
    from edge.episode import load_episode
    from edge.runtime.context import CalibrationContext, context_from_source
    from edge.visual import contact_sheet, write_png

    check_out_dir(args.out, "syncedge calibrate validate")  # before recording anything
    model = open_model(args)
    try:
        if args.episode:
            ep = load_episode(args.episode)
        else:
            ep = _record_validation(args, model)
        with _cache(args) as cache:
            key = _key(cache, args, model.sha256)
            entry = cache.get(key)
            cached = context_from_source(cache, model, key.cell_id, key.camera_id,
                                         key.robot_id)
        where = str(args.episode or args.camera)
        _check_validation_episode(ep, where, key, entry.episode)
        frames, fitted = _validation_frames(ep, model, where)
        n = entry.episode.num_dof
        ctx = CalibrationContext(cached.values, model.sha256, n, f"cache:{key.cell_id}")
        zero = CalibrationContext(np.zeros_like(cached.values), model.sha256, n, "zeroed")
        start, acts = frames[0], ep.actions[:-1].astype(np.float32)
        truth = frames[1:]
        t0 = time.perf_counter()
        pred = {"calibrated": predict(model, ctx, start, acts),
                "zeroed": predict(model, zero, start, acts)}
        rollout_s = time.perf_counter() - t0
        fid = {k: fidelity(v, truth, start) for k, v in pred.items()}
        gain = {m: (None if fid["calibrated"][m] is None or fid["zeroed"][m] is None
                    else round(fid["calibrated"][m] - fid["zeroed"][m], 4))
                for m in ("psnr_db", "motion_psnr_db", "ssim")}
        session, why = load_keypoint(model)
        probe = keypoint_probe(model, {"calibrated": ctx, "zeroed": zero}, entry.episode,
                               session) if session is not None else \
            {"available": False, "reason": why}
        report = {
            "cell": {"cell_id": key.cell_id, "camera_id": key.camera_id,
                     "robot_id": key.robot_id, "robot": entry.episode.metadata.robot},
            "model": {"dir": str(model.model_dir), "sha256": model.sha256,
                      "backend": model.backend},
            "validation_episode": {"source": str(args.episode or args.camera),
                                   "frames": ep.num_frames, "kind": ep.metadata.kind,
                                   "fps": ep.metadata.fps, "fitted_from_hw": fitted},
            "fidelity": {**fid, "calibration_gain": gain},
            "control_probe": probe,
            **commissioning_calibration(entry, ep),
            "timings_s": {"rollouts": round(rollout_s, 4)},
        }
        cols = np.unique(np.linspace(0, len(truth) - 1, min(10, len(truth))).round().astype(int))
        sheet = contact_sheet([truth[cols], pred["calibrated"][cols], pred["zeroed"][cols]],
                              ["truth", "calibrated", "zeroed"],
                              [[f"t{c + 1}" for c in cols]] * 3,
                              scale=max(2, 128 // start.shape[0]))
        with StagedOutput(args.out, "syncedge calibrate validate") as out:
            write_json_atomic(out.path("report.json"), report)
            write_png(out.path("report.png"), sheet)
            paths = out.commit()
    finally:
        model.deactivate()
    c, z = fid["calibrated"], fid["zeroed"]
    print(f"calibrated: PSNR {c['psnr_db']} dB, motion PSNR {c['motion_psnr_db']} dB; zeroed: "
          f"PSNR {z['psnr_db']} dB, motion PSNR {z['motion_psnr_db']} dB over {c['steps']} steps")
    if probe["available"]:
        shares = ", ".join(f"{k} {v['right_direction']} ({v['cases']} cases)"
                           for k, v in probe.items() if isinstance(v, dict) and "right_direction" in v)
        print(f"control probe, share of per-DoF sweeps moving the end effector the true way: "
              f"{shares}")
    else:
        print(f"control probe: not available: {probe['reason']}")
    for p in paths:
        print(p)
    return 0


def commissioning_calibration(entry: Any, validation: Any) -> dict[str, Any]:
    """The commissioning report's ``calibration`` (collection time, coverage verdict and
    reasons, per-DoF figures, forced or not, how it was stored) and ``equipment`` (camera
    and joint stream of the calibration and of the validation) of a cache entry and the
    validation episode."""
    rep = entry.report
    rec = (entry.episode.metadata.extra or {}).get("recording", {})
    return {
        "calibration": {"collection_s": rec.get("duration_s"),
                        "recording_wall_s": rec.get("wall_s"),
                        "coverage_verdict": rep.get("verdict"),
                        "coverage_reasons": [r.get("code") for r in rep.get("reasons", [])],
                        "dofs": rep.get("dofs"), "forced": entry.info.forced,
                        "forced_reason": entry.info.forced_reason,
                        "stored": rep.get("stored")},
        "equipment": {"calibration": (entry.episode.metadata.extra or {}).get("equipment"),
                      "validation": (validation.metadata.extra or {}).get("equipment")},
    }


def _validation_frames(ep: Any, model: Any, where: str) -> tuple[np.ndarray, list[int] | None]:
    """The validation episode's frames at the model's resolution: centre-cropped and
    area-resized as a recording is (``edge.calibrate.camera.fit_frame``) where the episode
    keeps the camera's own size (an import). Returns ``(frames uint8 [T, h, w, 3], the
    episode's [H, W] where they were fitted, else None)``.

    Raises:
        CalibrateError: an episode recorded at another frame rate than the model steps at
            (its actions span another interval per step).
    """
    from edge.calibrate.camera import fit_frame

    fps, model_fps = float(ep.metadata.fps or 0.0), float(model.contract.frame_rate_hz)
    if fps and abs(fps - model_fps) > 0.01 * model_fps:
        raise CalibrateError(f"{where}: recorded at {fps:g} Hz, but the model steps at "
                             f"{model_fps:g} Hz (each action is one step's change): record the "
                             f"validation episode with 'syncedge calibrate record', which "
                             f"samples it at the model's rate, or import a dataset's episode "
                             f"at that rate ('syncedge calibrate import ... --kind validation "
                             f"--fps {model_fps:g}')")
    h, w = model.contract.resolution
    if ep.frames.shape[1:3] == (h, w):
        return ep.frames, None
    print(f"note: {where}: frames of {ep.frames.shape[2]}x{ep.frames.shape[1]} px "
          f"centre-cropped and resized to the model's {w}x{h}, as a recording is")
    return np.stack([fit_frame(f, (h, w)) for f in ep.frames]), list(ep.frames.shape[1:3])


def _check_validation_episode(ep: Any, where: str, key: Any, calibration: Any) -> None:
    """The validation episode must come from the cached cell, have its DoF count, and not
    be the calibration itself (an in-sample report would measure nothing the context has
    not seen).

    Raises:
        CalibrateError: naming the episode, what it is and what to record instead.
    """
    meta = ep.metadata
    record = ("record a validation episode of ordinary motion ('syncedge calibrate plan "
              "--motion' and 'calibrate record', or 'calibrate import --kind validation')")
    if ep.num_frames < 2:
        raise CalibrateError(f"{where}: {ep.num_frames} frame: a validation episode needs at "
                             f"least 2 (a start frame and a step to predict): {record}")
    if meta.kind == "calibration":
        raise CalibrateError(f"{where}: a calibration episode (kind 'calibration'); validating "
                             f"a cell with its calibration is in-sample and says nothing about "
                             f"motion the context has not seen: {record}")
    got = (meta.cell_id, meta.camera_id, meta.robot_id)
    want = (key.cell_id, key.camera_id, key.robot_id)
    if got != want:
        raise CalibrateError(f"{where}: a validation episode of cell/camera/robot "
                             f"{'/'.join(got)}, but the cached calibration is of "
                             f"{'/'.join(want)}; validate a cell with its own episode")
    if ep.num_dof != calibration.num_dof:
        raise CalibrateError(f"{where}: {ep.num_dof} action channels, but the cell's cached "
                             f"calibration has {calibration.num_dof} DoFs")
    if ep.frames.shape == calibration.frames.shape and \
            np.array_equal(ep.frames, calibration.frames):
        raise CalibrateError(f"{where}: its frames are the cached calibration's own frames "
                             f"(kind {meta.kind!r}), so the report would be in-sample: "
                             f"{record}")


def _record_validation(args: argparse.Namespace, model: Any):
    from edge.calibrate.assemble import AssembleOptions, assemble_episode
    from edge.calibrate.camera import open_camera
    from edge.calibrate.plan import load_program
    from edge.calibrate.record import RecordOptions, record
    from edge.calibrate.sources import open_joints

    if not (args.camera and args.joints and args.plan):
        raise CalibrateError("validate: pass --episode FILE, or --camera, --joints and --plan "
                             "to record the validation episode")
    prog = load_program(args.plan)
    if prog.kind != "motion":
        raise CalibrateError(f"{args.plan}: a {prog.kind} program; validate records ordinary "
                             f"motion: write one with 'syncedge calibrate plan --motion'")
    cam = open_camera(args.camera)
    try:
        joints = open_joints(args.joints)
        try:
            raw = record(cam, joints, prog, RecordOptions())
            jl = float(getattr(joints, "latency_s", 0.0))
        finally:
            joints.close()
    finally:
        cam.close()
    ep, complete = assemble_episode(raw, prog, AssembleOptions(
        tuple(model.contract.resolution), args.cell, args.camera_id or f"{args.cell}-cam",
        args.robot_id or f"{args.cell}-{prog.robot}", camera_latency_s=cam.latency_s,
        joint_latency_s=jl))
    if not complete:
        raise CalibrateError("validate: the validation recording ended early; record again")
    return ep


def register_steps(sub: argparse._SubParsersAction) -> dict[str, argparse.ArgumentParser]:
    """Add ``store``, ``verify`` and ``validate`` to the ``calibrate`` group; returns their
    parsers by name."""
    s = sub.add_parser("store", help="encode the context and write the cache entry",
                       description="Check a calibration episode, encode its context with "
                                   "--model and write the cache entry. With --cell instead of "
                                   "EPISODE: encode the episode the cache already holds for "
                                   "that cell for --model (a new model, or a context that was "
                                   "evicted or dropped as corrupt). With --chain: the chain "
                                   "model's calibration (read from the episode, or a chain "
                                   "file read from it elsewhere) instead of an ONNX model's "
                                   "context.")
    s.add_argument("episode", metavar="EPISODE", nargs="?", help="calibration episode (.npz)")
    s.add_argument("--cell", metavar="ID", help="encode this cell's cached episode instead")
    s.add_argument("--camera-id", help="with --cell, when the cell has several cameras")
    s.add_argument("--robot-id", help="with --cell, when the cell has several robots")
    s.add_argument("--from-model", metavar="SHA",
                   help="with --cell: encode the episode of the cell's entry for this model "
                        "(its sha256 or first hex digits; see 'syncedge cache list') "
                        "instead of the model's own entry's, or where the cell holds "
                        "several episodes")
    s.add_argument("--force", metavar="REASON", default="",
                   help="store although the check failed, recording REASON")
    s.add_argument("--reference", metavar="PNG",
                   help="reference frame (default EPISODE.reference.png, else frame 0)")
    s.add_argument("--cache-dir", metavar="DIR", help="calibration cache root (default: STATE_ROOT/calibration; see syncedge --help)")
    s.add_argument("--chain", metavar="FILE", nargs="?", const="@read",
                   help="store the chain model's calibration instead of an ONNX model's "
                        "context: read it from the episode now (torch, 1-3 minutes on 2 idle cores), or store "
                        "FILE, a chain read elsewhere by 'syncedge model read-chain' (checked "
                        "against the episode); then 'simulate --cell ID --chain' runs from "
                        "the cache; '--chain' alone is implied when the model in use is the "
                        "chain model")
    s.add_argument("--grid", type=positive_int, default=64, metavar="PX",
                   help="with --chain (read now): the model grid's side (default 64; the "
                        "episode's frames a whole multiple of it, 256x256 recommended)")
    s.add_argument("--fovy-deg", type=float, metavar="DEG",
                   help="with --chain (read now): the camera's vertical field of view "
                        "(default: the episode's metadata.camera.fovy_deg)")
    s.add_argument("--photometric", type=int, default=128, metavar="PX",
                   help="with --chain (read now): the side the fit is refined against the "
                        "frames at (0: no refinement; default 128), as model read-chain")
    s.add_argument("--joint-scale", choices=JOINT_SCALE_MODES, default="auto",
                   help="with --chain (read now): " + JOINT_SCALE_HELP)
    s.add_argument("--motion", action="append", metavar="FILE",
                   help="with --chain (read now): an episode of the joints turning together "
                        "on the cell (best the held poses of 'calibrate plan --poses'; same "
                        "camera and resolution, with joint readings) to refine the chain with "
                        "after the read, as model read-chain --motion (2-5 min more on 2 "
                        "cores); repeat for more. Validate the cell on another episode")
    s.add_argument("--twins", action=argparse.BooleanOptionalAction, default=None,
                   help="with --motion (on by default there): first choose each channel's "
                        "depth-mirrored twin by the motion's frames, as model read-chain "
                        "--twins; --no-twins keeps the sweep's choice")
    s.add_argument("--tracks", choices=TRACK_MODES, default="colour",
                   help="with --chain (read now): " + TRACKS_HELP)
    add_model_args(s)
    s.set_defaults(func=run_store)

    v = sub.add_parser("verify", help="has the camera moved since the calibration?",
                       description="Compare a live frame of --camera with the reference "
                                   "frame cached with the cell's calibration: VALID (exit 0) "
                                   "when it has not moved, turned or changed resolution "
                                   "beyond the limits, STALE (exit 1) otherwise (recalibrate "
                                   "the cell); bad input exits 2 (docs/calibration.md).")
    v.add_argument("--camera", required=True, metavar="SRC",
                   help="camera source (a device index, a video file, sim://...)")
    v.add_argument("--cell", required=True, metavar="ID", help="the cell's cache id")
    v.add_argument("--camera-id", help="cache key (default: the cell's one camera in the cache)")
    v.add_argument("--robot-id", help="cache key (default: the cell's one robot in the cache)")
    v.add_argument("--model", metavar="DIR", help="model folder (default: the active bundle)")
    v.add_argument("--cache-dir", metavar="DIR", help="calibration cache root (default: STATE_ROOT/calibration; see syncedge --help)")
    v.add_argument("--warmup", type=int, default=5, help="frames to skip first")
    v.add_argument("--max-shift-frac", type=float, default=0.01,
                   help="largest image shift accepted, as a share of the frame's width "
                        "(default 0.01)")
    v.add_argument("--max-rotation-deg", type=float, default=0.5,
                   help="largest image rotation accepted, degrees (default 0.5)")
    v.add_argument("--out", metavar="FILE", help="write the result (for precheck "
                   "--verification FILE)")
    v.set_defaults(func=run_verify)

    a = sub.add_parser("validate", help="commissioning report for the cell",
                       description="The commissioning report of the cell's cached "
                                   "calibration: a validation episode of ordinary motion "
                                   "(--episode, or recorded with --camera, --joints and "
                                   "--plan) predicted from its first frame with the cached "
                                   "context and with it zeroed (an ONNX model, --model), or "
                                   "with the cell's cached chain calibration beside copying "
                                   "the start frame (--chain); writes report.json and "
                                   "report.png into --out (docs/calibration.md, step 6).")
    a.add_argument("--cell", required=True, metavar="ID")
    a.add_argument("--camera-id")
    a.add_argument("--robot-id")
    a.add_argument("--episode", metavar="FILE", help="a recorded validation episode")
    a.add_argument("--camera", metavar="SRC", help="record the validation episode: camera")
    a.add_argument("--joints", metavar="URL", help="... joint stream")
    a.add_argument("--plan", metavar="FILE", help="... motion program ('plan --motion')")
    a.add_argument("--cache-dir", metavar="DIR", help="calibration cache root (default: STATE_ROOT/calibration; see syncedge --help)")
    a.add_argument("--chain", action="store_true",
                   help="validate the cell's cached chain calibration ('calibrate store "
                        "--chain') on --episode, beside copying the start frame (implied "
                        "when the model in use is the chain model)")
    add_anchor_arg(a)
    add_model_args(a)
    a.add_argument("--out", default="commissioning", metavar="DIR")
    a.set_defaults(func=run_validate)
    return {"store": s, "verify": v, "validate": a}
