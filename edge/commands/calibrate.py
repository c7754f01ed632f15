"""``syncedge calibrate``: plan, record, import, ingest, check, retime, store, verify and
validate a cell's calibration.

Subcommands (the technician's procedure is docs/calibration.md):

- ``plan``: the sweep program for a robot spec, as JSON and CSV, with its duration;
- ``record``: camera (OpenCV) and joints (firmware_bridge URL) into a calibration episode;
- ``import``: a calibration or validation episode from a ROS 2 bag or a LeRobot dataset;
- ``ingest``: a calibration episode of any timing or frame size in the model's timing;
- ``check``: the coverage report (JSON, contact sheets); exit 1 on failure;
- ``retime``: move the frames of an episode whose camera was late (or early);
- ``store``: encode the context and write the calibration cache entry;
- ``verify``: compare a live frame with the reference frame (moved camera?); exit 1 if stale;
- ``validate``: the commissioning report.

Joint streams and ``sim://`` sources (the virtual cell in ``export/cells/virtual.py``) are
plug-ins (:mod:`edge.calibrate.sources`, :func:`edge.calibrate.camera.open_camera`), imported
only when a subcommand uses them.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

import numpy as np

from edge.calibrate.errors import CalibrateError, RecordingError
from edge.commands.helptext import plain
from edge.commands.joint_notes import say_if_degrees, say_turns_unwrapped
from edge.errors import EdgeError
from edge.fileio import write_json_atomic

__all__ = ["default_check_dir", "register", "run_check", "run_plan", "run_record"]


def _resolution(args: argparse.Namespace) -> tuple[int, int]:
    """The episode's (H, W): ``--model``'s, else ``--size``, else the active bundle's, else
    64x64 (a chain model's: the size its calibration episodes are recorded at)."""
    from edge.commands.common import active_bundle_dir
    from edge.manifest import load_any_model_dir

    def of(model_dir: Path) -> tuple[int, int]:
        m = load_any_model_dir(model_dir, verify=False)
        return tuple(getattr(m, "recording_resolution", None) or m.contract.resolution)

    if getattr(args, "model", None):
        if getattr(args, "size", None) is not None:
            raise CalibrateError(f"--size {args.size} with --model {args.model}: the episode is "
                                 f"recorded at the model's own resolution; give one of the two")
        return of(Path(args.model))
    if args.size is None:
        active = active_bundle_dir()
        return of(active) if (active / "model.json").is_file() else (64, 64)
    try:  # width first, as cameras and the camera URL's size= give it
        w, h = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        raise EdgeError(f"--size: expected WIDTHxHEIGHT like 64x64 or 320x240, found "
                        f"{args.size!r}") from None
    if h < 1 or w < 1:
        raise EdgeError(f"--size: expected a positive WIDTHxHEIGHT, found {args.size!r}")
    return h, w


def _amplitude_range(text: str) -> tuple[float, float]:
    """``LOW-HIGH`` in rad|m, e.g. ``0.25-0.6``."""
    try:
        lo, hi = (float(v) for v in text.split("-"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW-HIGH in rad (e.g. 0.25-0.6), found "
                                         f"{text!r}") from None
    if not 0 < lo <= hi:
        raise argparse.ArgumentTypeError(f"expected 0 < LOW <= HIGH, found {text!r}")
    return lo, hi


def run_plan(args: argparse.Namespace) -> int:
    """``calibrate plan``: write PREFIX.json and PREFIX.csv."""
    from edge.calibrate.plan import (
        MOTION_HALF_RANGE,
        POSES_HALF_RANGE,
        plan_motion,
        plan_poses,
        plan_sweep,
        save_program,
    )
    from edge.calibrate.sources import robot_spec_for

    for flag, value, low, strict in (("--frame-rate-hz", args.frame_rate_hz, 0.0, True),
                                     ("--lead-in-s", args.lead_in_s, 0.0, False),
                                     ("--lead-out-s", args.lead_out_s, 0.0, False),
                                     ("--sweep-seconds", args.sweep_seconds, 0.0, True),
                                     ("--pause-seconds", args.pause_seconds, 0.0, False),
                                     ("--half-range", args.half_range, 0.0, True),
                                     ("--min-fraction", args.min_fraction, 0.0, True)):
        if value is not None and not (math.isfinite(value)
                                      and (value > low if strict else value >= low)):
            raise CalibrateError(f"calibrate plan: {flag} {value:g}: expected a number "
                                 f"{'>' if strict else '>='} {low:g}")
    if not args.min_fraction <= 1.0:
        raise CalibrateError(f"calibrate plan: --min-fraction {args.min_fraction:g}: expected "
                             "a share of the amplitude, at most 1")
    if args.frames < 2:
        raise CalibrateError(f"calibrate plan: --frames {args.frames}: expected at least 2")
    if args.poses is not None and args.poses < 1:
        raise CalibrateError(f"calibrate plan: --poses {args.poses}: expected at least 1")
    if args.motion and args.poses:
        raise CalibrateError("calibrate plan: --motion and --poses: expected one of them "
                             "(--motion for 'validate', --poses to refine the chain with)")
    if args.half_range is not None and not (args.motion or args.poses):
        raise CalibrateError(f"calibrate plan: --half-range {args.half_range:g}: only with "
                             f"--poses or --motion (the sweep's magnitudes: --amplitude)")
    spec = robot_spec_for(args.robot, args.frame_rate_hz)
    seed = args.seed if args.seed is not None else int(np.random.default_rng().integers(0, 2**31))
    poses_half = POSES_HALF_RANGE if args.half_range is None else args.half_range
    if args.poses:
        prog = plan_poses(spec, seed, args.poses, poses_half,
                          lead_in_s=args.lead_in_s, lead_out_s=args.lead_out_s)
    elif args.motion:
        prog = plan_motion(spec, seed, args.frames,
                           MOTION_HALF_RANGE if args.half_range is None else args.half_range,
                           lead_in_s=args.lead_in_s, lead_out_s=args.lead_out_s)
    else:
        prog = plan_sweep(spec, seed, args.lead_in_s, args.lead_out_s, args.min_fraction,
                          phase_s=args.sweep_seconds, pause_s=args.pause_seconds,
                          amplitude=args.amplitude)
    if args.amplitude is not None and not (args.poses or args.motion):
        over = [d.name for d in spec.dofs if d.unit == "rad" and args.amplitude[1] > d.sweep_max]
        if over:
            print(f"warning: --amplitude {args.amplitude[0]:g}-{args.amplitude[1]:g}: sweeps of "
                  f"up to {args.amplitude[1]:g} rad, beyond the robot spec's sweep_max for "
                  f"{', '.join(over)}; the model takes calibration sweeps within its "
                  f"contract.calibration_amplitude_rad (model.json; the shipped models "
                  f"0.2-0.8 rad) and 'calibrate store' refuses others", file=sys.stderr)
    out = Path(args.out)
    paths = save_program(prog, out.with_suffix(".json"), out.with_suffix(".csv"))
    for s in prog.sweeps:
        print(f"{s.dof:<24} {s.amplitude:+.3f}  frames {s.start}..{s.stop}")
    if args.poses:
        print(f"{args.poses} held poses within {poses_half:g} rad of home, every joint turning at "
              f"once (joint limits checked, collisions not: check the cell has room): record "
              f"them after the sweep and refine the chain with them ('calibrate store CAL "
              f"--chain --motion EPISODE')")
    print(f"{prog.kind} program: {len(prog.dof_names)} DoFs, {len(prog.positions)} knots at "
          f"{prog.frame_rate_hz:g} Hz, expected duration {prog.duration_s:.1f} s (seed {seed})")
    for p in paths:
        print(p)
    return 0


def _partial_path(out: Path) -> Path:
    return out.with_name(out.name[:-4] + ".partial.npz" if out.name.endswith(".npz")
                         else out.name + ".partial.npz")


def _earlier(out: Path) -> str:
    """A note for a failed recording's message when ``out`` holds an earlier recording,
    which the failure leaves as it was."""
    return (f"; {out} is an earlier recording, not this one (it was left as it was)"
            if out.exists() else "")


def _keep_partial(raw, prog, aopts, out: Path) -> Path:
    """Save whatever was recorded under the partial name; never lose a recording."""
    from edge.calibrate.assemble import assemble_episode
    from edge.calibrate.camera import fit_frame
    from edge.episode import Episode, EpisodeMetadata, save_episode

    path = _partial_path(out)
    try:
        ep, _ = assemble_episode(raw, prog, aopts)
    except Exception:  # noqa: BLE001 (not enough to pair, or any failure of the pairing: the
        # frames are kept at the camera's rate all the same; a recording is never lost)
        fs = np.asarray(raw.frame_stamps_ns, np.int64)
        keep = np.concatenate([[True], np.diff(fs) > 0])
        frames = np.stack([fit_frame(f, aopts.size_hw) for f, k in zip(raw.frames, keep,
                                                                       strict=True) if k])
        n = len(prog.dof_names)
        meta = EpisodeMetadata(aopts.cell_id, aopts.camera_id, aopts.robot_id, prog.robot,
                               prog.dof_names, prog.dof_units, prog.frame_rate_hz,
                               "calibration", "recorded:partial", dict(raw.equipment.get(
                                   "camera", {})),
                               extra={"recording": {"complete": False, "unpaired": True,
                                                    "frames_expected": prog.episode_frames,
                                                    "disconnected": raw.disconnected}})
        ep = Episode(frames, np.zeros((len(frames), n), np.float32),
                     (fs[keep] - fs[0]) / 1e9, meta)
    return save_episode(ep, path)


def _keep_interrupted(raw, prog, aopts, out: Path, done: dict) -> None:
    """Keep a recording whose assembly or writing was interrupted (Ctrl-C, SIGTERM) after
    the sweep ended: the episode written to ``out`` gets its reference frame; one not yet
    written is kept under the partial name (assembled again where it was not yet). Says
    where on stderr; a second interrupt while it is kept abandons it."""
    from edge.episode import reference_path, save_episode
    from edge.visual import write_png

    print("interrupted after the sweep: keeping the recording (Ctrl-C again abandons it)",
          file=sys.stderr, flush=True)
    if done.get("saved"):
        write_png(reference_path(out), raw.frames[0])
        print(f"the recording was written to {out}", file=sys.stderr)
        return
    ep = done.get("episode")
    kept = save_episode(ep, _partial_path(out)) if ep is not None else \
        _keep_partial(raw, prog, aopts, out)
    print(f"the {len(raw.frames)} frames recorded are kept at {kept} (a partial recording: "
          "'calibrate check' names what it holds)", file=sys.stderr)


def run_record(args: argparse.Namespace) -> int:
    """``calibrate record``: write the episode (or the partial recording) and its reference."""
    from edge.calibrate.assemble import assemble_episode, check_channels, start_unit_warning
    from edge.calibrate.camera import open_camera
    from edge.calibrate.plan import load_program
    from edge.calibrate.record import RecordingInterrupted, RecordOptions, record
    from edge.calibrate.sources import open_joints
    from edge.episode import reference_path, save_episode
    from edge.visual import write_png

    prog = load_program(args.plan)
    size = _resolution(args)
    out = _record_target(args, prog)  # before the sweep: a refusal after it loses it
    cam = open_camera(args.camera, args.camera_latency_s)
    try:
        joints = open_joints(args.joints)
        try:
            check_channels(prog, list(joints.joint_names))  # before the sweep, not after
            names = list(joints.joint_names)

            def first_readings(q: np.ndarray) -> None:
                said = start_unit_warning(prog, names, q)  # degrees, said before the sweep
                if said:
                    print(f"warning: {said}", file=sys.stderr, flush=True)

            opts = RecordOptions(start_timeout_s=args.start_timeout_s,
                                 progress=lambda line: print(line, flush=True),
                                 first_readings=first_readings)
            try:
                raw = record(cam, joints, prog, opts)
            except RecordingInterrupted as stop:  # Ctrl-C: keep the sweeps already made
                got = stop.recording
                if got is not None and got.frames:
                    kept = _keep_partial(got, prog, _aopts(args, prog, size, cam, joints),
                                         out)
                    print(f"interrupted: the {len(got.frames)} frames recorded so far are "
                          f"kept at {kept} (a partial recording: 'calibrate check' names what "
                          f"it holds; record again for a calibration)", file=sys.stderr)
                raise
            except RecordingError as exc:
                partial = getattr(exc, "recording", None)
                if partial is None or not partial.frames:
                    raise
                kept = _keep_partial(partial, prog, _aopts(args, prog, size, cam, joints), out)
                raise RecordingError(f"{exc}; partial recording kept at {kept}"
                                     f"{_earlier(out)}", kept) from None
        finally:
            joints.close()
        aopts = _aopts(args, prog, size, cam, joints)
    finally:
        cam.close()
    done: dict = {}  # what of the recording is already on disk, should Ctrl-C come now
    try:
        if raw.disconnected or raw.joint_error:
            kept = _keep_partial(raw, prog, aopts, out)
            raise RecordingError(f"recording stopped early ({raw.disconnected or raw.joint_error}); "
                                 f"partial recording kept at {kept} (record again)"
                                 f"{_earlier(out)}", kept)
        ep, complete = assemble_episode(raw, prog, aopts)
        done["episode"] = ep
        if not complete:
            kept = save_episode(ep, _partial_path(out))
            raise RecordingError(f"recording ended before the program did; partial recording "
                                 f"kept at {kept} (record again){_earlier(out)}", kept)
        try:
            save_episode(ep, out)
            done["saved"] = True
        except OSError as exc:  # the folder went away or filled up during the sweep
            kept = _keep_elsewhere(ep, out, raw.frames[0])
            ref = reference_path(kept)
            raise RecordingError(f"{out}: cannot write the recording ({exc.strerror or exc}); "
                                 f"the recording was kept at {kept}"
                                 + (f" with its reference frame {ref}" if ref.is_file() else
                                    " (its reference frame could not be kept: calibrate store "
                                    "will take the episode's first frame)"), kept) from None
        stale = _partial_path(out)
        if stale.exists():  # an earlier failed try of this recording: this one replaces it
            stale.unlink()
            print(f"note: removed {stale}, the partial recording of an earlier try",
                  file=sys.stderr)
        ref = reference_path(out)
        write_png(ref, raw.frames[0])
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM while assembling or writing: keep it
        _keep_interrupted(raw, prog, aopts, out, done)
        raise
    rec = ep.metadata.extra["recording"]
    print(f"{ep.num_frames} frames x {ep.num_dof} DoFs at {ep.metadata.fps:g} Hz; "
          f"{len(rec['gaps'])} gap(s); joint clock {rec['joint_clock']} "
          f"(drift {rec['joint_drift_ppm']} ppm); farthest joint sample from a frame "
          f"{max(rec['pair_error_s']) * 1e3:.1f} ms (interpolated across; not a timing "
          f"error)")
    fh, fw = raw.frames[0].shape[:2]
    th, tw = aopts.size_hw
    enlarged = 1.0 / min(fh / th, fw / tw)  # fit_frame's centre crop, resized to --size
    if enlarged > 1.05:
        print(f"warning: the camera delivers {fw}x{fh} px; --size {tw}x{th} enlarges its "
              f"centre crop {enlarged:.1f}x, which adds no detail (a chain is read best from "
              "a camera that has the pixels): record at most at the crop's size, or with a "
              "camera of higher resolution", file=sys.stderr)
    if rec.get("joint_clock_jumps"):
        big = max(rec["joint_clock_jumps"], key=lambda j: abs(j["device_step_ms"]))
        print(f"note: the controller's clock jumped {len(rec['joint_clock_jumps'])} time(s) "
              f"during the recording (largest {big['device_step_ms']:+.3f} ms at joint sample "
              f"{big['sample']}); each stretch between jumps was placed on the host clock on "
              f"its own (episode extra.recording.joint_clock_jumps)", file=sys.stderr)
    if rec.get("joint_samples_out_of_sequence"):
        print(f"note: {rec['joint_samples_out_of_sequence']} joint sample(s) arrived after a "
              "later one (the link reordered them, or the controller sent a frame twice "
              "without flagging it); each was placed at its own device stamp "
              "(episode extra.recording.joint_samples_out_of_sequence)", file=sys.stderr)
    say_turns_unwrapped(rec.get("joint_turns_unwrapped"), "joint sample",
                         "extra.recording.joint_turns_unwrapped")
    if ep.metadata.kind == "calibration":  # a validation recording is not a sweep to check
        _say_check(ep, out)
    print(out)
    print(ref)
    return 0


def _say_check(ep, out: Path) -> None:
    """Run ``calibrate check`` on a recording just written and, when it fails, say its
    first reason on stderr (a pause, a joint the other way, degrees), while the technician
    is still at the cell."""
    from edge.calibrate.check import EpisodeArrays, check_arrays

    report = check_arrays(EpisodeArrays.from_episode(ep))
    if report["verdict"] == "pass":
        return
    first, more = report["reasons"][0], len(report["reasons"]) - 1
    print(f"warning: this recording fails its check: {first['code']}: {first['message']}"
          + (f" (and {more} more: 'syncedge calibrate check {out}' lists them)" if more
             else ""), file=sys.stderr)


def _record_target(args, prog) -> Path:
    """``--out`` and the ids checked before anything is recorded: ``--out`` is a file path
    (an earlier recording there is replaced) in a folder this process can write (made if
    missing), and the cell, camera and robot ids are ones the calibration cache accepts.

    Raises:
        CalibrateError: an id the cache would refuse (naming the option).
        OSError: ``--out`` is a folder, or its folder cannot be made or written
            (``filename``: the path).
    """
    import tempfile

    from edge.cache.values import ID_MAX_CHARS, CacheKeyError, check_id
    from edge.fileio import check_file_target

    cell, camera, robot = _record_ids(args, prog)
    for flag, value in (("--cell", cell), ("--camera-id", camera), ("--robot-id", robot)):
        try:
            check_id(flag.lstrip("-").replace("-", "_"), value)
        except CacheKeyError:
            raise CalibrateError(f"{flag} {value!r}: expected at most {ID_MAX_CHARS} printable "
                                 "characters without '/' (the calibration cache's key; "
                                 "'calibrate store' would refuse the recording)") from None
    out = check_file_target(args.out, overwrite=True)
    for up in out.parents:  # a file where a folder of the path should be
        if up.exists():
            if not up.is_dir():
                raise CalibrateError(f"--out {out}: {up} is a file, not a folder; give a "
                                     "path in a folder")
            break
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryFile(dir=out.parent):
            pass
    except PermissionError as exc:
        raise OSError(exc.errno, exc.strerror, str(out.parent)) from None
    except OSError as exc:  # /proc, a full or read-only file system: say it is the folder
        raise CalibrateError(f"--out {out}: cannot write files in the folder {out.parent} "
                             f"({exc.strerror or exc}); give a path in a folder this process "
                             "can write") from None
    return out


def _keep_elsewhere(ep, out: Path, reference: np.ndarray | None = None) -> Path:
    """Save a recording that could not be written at ``out``: beside it under the partial
    name, else in the system's temporary folder; with its ``reference`` frame (the camera's
    first frame, uint8 ``[H, W, 3]``) beside it as ``*.reference.png`` where that can be
    written."""
    import tempfile

    from edge.episode import reference_path, save_episode
    from edge.visual import write_png

    try:
        kept = save_episode(ep, _partial_path(out))
    except OSError:
        kept = save_episode(ep, Path(tempfile.mkdtemp(prefix="syncedge-recording-"))
                            / out.name)
    if reference is not None:  # calibrate verify compares the camera with it later
        try:
            write_png(reference_path(kept), reference)
        except OSError:
            pass  # the episode is what must survive; store falls back to its frame 0, said
    return kept


def _record_ids(args, prog) -> tuple[str, str, str]:
    """A recording's cell, camera and robot ids: ``--cell``, ``--camera-id`` (default
    ``CELL-cam``), ``--robot-id`` (default ``CELL-ROBOT``, the program's robot)."""
    cell = args.cell
    return (cell, args.camera_id or f"{cell}-cam", args.robot_id or f"{cell}-{prog.robot}")


def _aopts(args, prog, size, cam, joints):
    from edge.calibrate.assemble import AssembleOptions

    cell, camera, robot = _record_ids(args, prog)
    return AssembleOptions(
        size_hw=size, cell_id=cell, camera_id=camera, robot_id=robot,
        tolerance_s=args.tolerance_s,
        camera_latency_s=cam.latency_s,
        joint_latency_s=args.joint_latency_s if args.joint_latency_s is not None
        else float(getattr(joints, "latency_s", 0.0)))


def default_check_dir(episode: str | Path) -> Path:
    """Where ``check`` writes without ``--out`` (:func:`edge.state.check_dir`)."""
    from edge.state import check_dir

    return check_dir(episode)


def run_check(args: argparse.Namespace) -> int:
    """``calibrate check``: report.json, coverage.png and one sheet per DoF; exit 1 on fail."""
    from edge.calibrate.check import (
        CheckOptions,
        amplitude_word,
        check_episode,
        coverage_sheets,
        load_for_check,
    )
    from edge.commands.common import StagedOutput
    from edge.state import claim_check_dir
    from edge.visual import write_png

    arr = load_for_check(args.episode)
    opts = CheckOptions(min_fraction=args.min_fraction)
    if args.model:
        from edge.manifest import load_manifest

        opts = dataclasses.replace(opts, model_fps=float(
            load_manifest(Path(args.model) / "model.json").contract.frame_rate_hz))
    report, arr = check_episode(arr, opts)
    report["episode"] = str(args.episode)
    out_dir = Path(args.out) if args.out else default_check_dir(args.episode)
    with StagedOutput(out_dir, "syncedge calibrate check") as out:
        write_json_atomic(out.path("report.json"), report)
        for name, img in coverage_sheets(arr, report).items():
            write_png(out.path("coverage.png" if name == "coverage" else f"dof-{name}.png"), img)
        paths = out.commit()
    if not args.out:
        claim_check_dir(out_dir, args.episode)
    for d in report["dofs"]:
        print(f"{d['dof']:<24} {amplitude_word(d)} {d['planned_amplitude']:+.3f} "
              f"out {d['swept_out']:.3f} "
              f"back {d['swept_back']:.3f} motion {d['image_motion']:.3f}  "
              f"{'ok' if d['passed'] else 'FAIL'}")
    for r in report["reasons"]:
        print(f"FAIL {r['code']}: {r['message']}", file=sys.stderr)
    for note in report.get("notes") or ():
        print(f"note: {args.episode}: {note}", file=sys.stderr)
    say_turns_unwrapped((arr.meta.get("extra") or {}).get("joint_turns_unwrapped"), "frame",
                         "extra.joint_turns_unwrapped")
    say_if_degrees(arr.joint_positions, list(arr.meta.get("dof_names") or []),
                   list(arr.meta.get("dof_units") or []), str(arr.meta.get("kind")),
                   str(args.episode),
                   recorded=str(arr.meta.get("source") or "").startswith("recorded:"))
    lag = report.get("camera_lag")
    if lag is not None:
        model = (f" of the model ({lag['frames'] / lag['s']:.3g} Hz; measured on the "
                 f"recording's frames at {lag['measured_at_hz']:.3g} Hz)"
                 if lag.get("measured_at_hz") and lag["s"] else "")
        print(f"camera lag against the joint readings: {lag['frames']:+.2f} frames{model} "
              f"({lag['s'] * 1e3:+.0f} ms; image motion fits the joints' speeds with R^2 "
              f"{lag['r2']:.2f}, {lag['r2_at_zero']:.2f} at no lag)")
    ing = report.get("ingest") or {}
    if ing.get("normalised"):
        print(f"normalised to the model's timing: {ing['recorded_frames']} recorded frames "
              f"({ing.get('recorded_frame_rate_hz')} Hz) -> {report['frames']} at their poses "
              f"(report.json ingest)")
    codes = list(dict.fromkeys(r["code"] for r in report["reasons"]))
    print(f"verdict: {report['verdict']}" + (f" ({', '.join(codes)}: the FAIL lines say "
                                             f"what to do)" if codes else ""))
    for p in paths:
        print(p)
    return 0 if report["verdict"] == "pass" else 1


def run_ingest(args: argparse.Namespace) -> int:
    """``calibrate ingest``: write the episode in the model's timing and resolution."""
    from edge.calibrate.ingest import IngestOptions, ingest_calibration, normalise_calibration
    from edge.episode import load_episode, save_episode
    from edge.manifest import load_manifest

    out = Path(args.out)
    if out.exists():
        raise EdgeError(f"{out}: exists; expected a new episode path (nothing was written)")
    ep = load_episode(args.episode)
    c = load_manifest(Path(args.model) / "model.json").contract
    opts = IngestOptions(amplitude_rad=None if args.no_amplitude_check
                         else c.calibration_amplitude_rad)
    size = (int(c.resolution[0]), int(c.resolution[1]))
    if args.always:
        norm, report = normalise_calibration(ep, size, opts, fps=c.frame_rate_hz)
    else:
        norm, report = ingest_calibration(ep, size, c.segment_frames, opts,
                                          fps=c.frame_rate_hz)
    for s in report.get("sweeps", []):
        print(f"{s['dof']:<24} {s['amplitude']:+.3f}  frames {s['frames'][0]}..{s['frames'][1]}"
              f"  out {s['out_s']:.2f} s  pause {s['pause_s']:.2f} s  back {s['back_s']:.2f} s"
              f"  worst pose error {max(s['pose_error']):.2f}")
    print(f"{report['recorded_frames']} recorded frames -> {norm.num_frames} at "
          f"{norm.resolution[0]}x{norm.resolution[1]}"
          + ("" if report["normalised"] else f" (unchanged: {report['reason']})"))
    print(save_episode(norm, out))
    return 0


def run_retime(args: argparse.Namespace) -> int:
    """``calibrate retime``: move the frames of an episode recorded with a late (early)
    camera by its lag, measured from the episode or given."""
    from edge.calibrate.check import CheckOptions, estimate_camera_lag, lag_search_frames
    from edge.calibrate.retime import retime_episode
    from edge.episode import load_episode, save_episode
    from edge.fileio import check_file_target

    check_file_target(args.out)  # a new episode path, before any work
    ep = load_episode(args.episode)
    measured = None
    if args.shift_frames is None:
        if ep.joint_positions is None:
            raise EdgeError(f"{args.episode}: no joint readings to measure the camera's lag "
                            "against; give --shift-frames N")
        fps = float(ep.metadata.fps)
        measured = estimate_camera_lag(ep.frames, ep.joint_positions, fps, lag_search_frames(
            ep.metadata.to_json_dict(), ep.num_frames, fps))
        need = CheckOptions().lag_min_r2
        if measured is None or measured["r2"] < need:
            fit = "no motion" if measured is None else (
                f"R^2 {measured['r2']:.2f} at {measured['frames']:+.2f} frames, "
                f"{measured['r2_at_zero']:.2f} at none")
            raise EdgeError(f"{args.episode}: the camera's lag cannot be measured from this "
                            f"episode ({fit}; a lag is read where the image motion fits the "
                            f"joints' speeds with R^2 >= {need:g}); "
                            f"give --shift-frames N, in this episode's frames ({fps:g} Hz: "
                            f"the lag in ms 'calibrate check' measured on the calibration "
                            f"recorded with the same camera, times {fps / 1000:g})")
        shift = int(round(measured["frames"]))
        print(f"measured camera lag: {measured['frames']:+.2f} frames "
              f"({measured['s'] * 1e3:+.0f} ms; R^2 {measured['r2']:.2f}, "
              f"{measured['r2_at_zero']:.2f} at no lag)")
        if shift == 0:
            print(f"within half a frame: nothing to re-time; {args.out} not written")
            return 0
    else:
        shift = args.shift_frames
        if shift == 0:
            print(f"--shift-frames 0: nothing to re-time; {args.out} not written")
            return 0
    try:
        out = retime_episode(ep, shift, measured)
    except ValueError as exc:
        raise EdgeError(f"{args.episode}: --shift-frames {shift}: {exc}") from None
    held = out.metadata.extra["retime"]["held_frames"]
    print(f"frames moved {abs(shift)} {'earlier' if shift > 0 else 'later'}; "
          f"{'frame' if len(held) == 1 else 'frames'} {held} "
          f"{'repeats' if len(held) == 1 else 'repeat'} the recording's "
          f"{'last' if shift > 0 else 'first'} frame")
    print(save_episode(out, args.out))
    return 0


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``calibrate`` group."""
    from edge.commands import calibrate_cell, calibrate_chain, calibrate_import

    p = subparsers.add_parser("calibrate", help="plan, record, check, store, verify and "
                              "validate a cell's calibration", description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="calibrate_command", metavar="STEP", required=True)

    q = sub.add_parser("plan", help="write the sweep program for a robot spec")
    q.add_argument("--robot", required=True, metavar="SPEC",
                   help="robot spec (.yaml/.json) or a virtual cell sim://cell?split=..&seed=..")
    q.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    q.add_argument("--out", default="calibration-plan", metavar="PREFIX",
                   help="writes PREFIX.json and PREFIX.csv")
    q.add_argument("--frame-rate-hz", type=float, default=None, help="override the spec's rate")
    q.add_argument("--lead-in-s", type=float, default=1.0)
    q.add_argument("--lead-out-s", type=float, default=1.0)
    q.add_argument("--min-fraction", type=float, default=0.8,
                   help="share of each amplitude the check requires (default 0.8)")
    q.add_argument("--sweep-seconds", type=float, default=None, metavar="S",
                   help="a slower sweep: each DoF eases out over S seconds and back over S "
                        "(at least 3 frames; default: the model's own timing, 3 frames out, "
                        "1 pause, 3 back, 1 pause)")
    q.add_argument("--pause-seconds", type=float, default=None, metavar="S",
                   help="hold at the peak and at home after each phase, s (default one frame)")
    q.add_argument("--amplitude", type=_amplitude_range, default=None, metavar="LOW-HIGH",
                   help="sweep magnitude range of the revolute DoFs, rad (default: the "
                        "spec's sweep_min to each DoF's sweep_max; a prismatic DoF sweeps "
                        "between its sweep_min, else the spec's sweep_min_m, and its "
                        "sweep_max); keep it inside the model's "
                        "contract.calibration_amplitude_rad (model.json)")
    q.add_argument("--motion", action="store_true",
                   help="an ordinary-motion program for 'validate' instead of the sweep")
    q.add_argument("--frames", type=int, default=24, help="episode frames with --motion")
    q.add_argument("--poses", type=int, nargs="?", const=32, default=None, metavar="N",
                   help="a program of N held poses (default 32) with the joints turned "
                        "together, each within --half-range of home, to refine the chain with "
                        "('calibrate store CAL --chain --motion EPISODE'): it tells the channels' "
                        "depth-mirrored twins apart (docs/calibration.md step 5)")
    q.add_argument("--half-range", type=float, default=None, metavar="RAD",
                   help="largest joint offset from home with --poses (default 0.5) or "
                        "--motion (default 0.3), rad (a tenth of it for a DoF in m); for "
                        "--poses as wide as the cell has room for (1 rad refined the chain "
                        "better in the pre-check benchmark; docs/calibration.md step 5)")
    q.set_defaults(func=run_plan)

    r = sub.add_parser("record", help="record a program into an episode")
    r.add_argument("--camera", required=True, metavar="SRC",
                   help="device index, file, rtsp:// URL, GStreamer pipeline, or sim://")
    r.add_argument("--joints", required=True, metavar="URL", help="firmware_bridge URL")
    r.add_argument("--plan", required=True, metavar="FILE", help="program JSON from 'plan'")
    r.add_argument("--out", required=True, metavar="EPISODE", help="episode file (.npz)")
    r.add_argument("--cell", required=True, metavar="ID", help="cell id")
    r.add_argument("--camera-id", help="camera id (default CELL-cam)")
    r.add_argument("--robot-id", help="robot unit id (default CELL-ROBOT)")
    r.add_argument("--model", metavar="DIR", help="take the resolution from this model")
    r.add_argument("--size", default=None, metavar="WxH",
                   help="WIDTHxHEIGHT in px without --model, as the camera URL's size= "
                        "(default: the active bundle's resolution, else 64x64)")
    r.add_argument("--tolerance-s", type=float, default=None,
                   help="pairing tolerance: a frame is paired with the joint readings when "
                        "a sample lies within it on each side, s (default 0.02, or 1.1 of the "
                        "joint stream's median sample interval where that is longer: 37 ms "
                        "for a 30 Hz controller)")
    r.add_argument("--camera-latency-s", type=float, default=None,
                   help="exposure-to-stamp delay of the camera, s, subtracted from each "
                        "frame's stamp (default: the source's own, else 0); 'calibrate "
                        "check' measures a wrong one from the frames and names the right "
                        "one (written --camera-latency-s=-0.05 when negative: the joint "
                        "readings are the late ones)")
    r.add_argument("--joint-latency-s", type=float, default=None,
                   help="sample-to-stamp delay of the joint stream, s")
    r.add_argument("--start-timeout-s", type=float, default=30.0,
                   help="how long to wait for the robot to start moving")
    r.set_defaults(func=run_record)

    g = sub.add_parser(
        "ingest", help="a calibration episode of any timing in the model's timing",
        description=plain("""Write a calibration episode recorded at any camera rate, sweep
        speed, pause, DoF order or sign, or frame size in the model's timing (8 frames per
        DoF at its poses, the model's resolution), with what was done in
        metadata.extra.ingest. check, store, validate, simulate and precheck do the same on
        their own; this writes it for inspection or for other tools. Refusals
        (never_swept, simultaneous, no_return, unseen, amplitude) name the DoF and the
        frames; see docs/calibration.md."""))
    g.add_argument("episode", metavar="EPISODE", help="the recorded calibration episode (.npz)")
    g.add_argument("--model", required=True, metavar="DIR",
                   help="the model whose timing, resolution and amplitude range apply")
    g.add_argument("--out", required=True, metavar="EPISODE", help="new episode file (.npz)")
    g.add_argument("--always", action="store_true",
                   help="segment and pick frames even when it is already in the model's timing")
    g.add_argument("--no-amplitude-check", action="store_true",
                   help="accept sweeps outside contract.calibration_amplitude_rad")
    g.set_defaults(func=run_ingest)

    c = sub.add_parser("check", help="coverage report of a calibration episode",
                       description="Check that a calibration episode sweeps every DoF as "
                                   "planned and that each moves its own part of the picture, "
                                   "and measure from the frames how late the camera shows "
                                   "the joints against their readings (fails beyond half a "
                                   "model frame, naming the --camera-latency-s to record "
                                   "with, or for an imported bag the --image-offset-s to "
                                   "import with); notes a sweep during which something "
                                   "other than the arm changed the picture (a person "
                                   "passing: outlined on its sheet, left out of its image "
                                   "motion); "
                                   "writes report.json, coverage.png and a sheet per DoF. "
                                   "Exit 0: pass; 1: fail (the reasons name the DoF and what "
                                   "to do); 2: bad input.")
    c.add_argument("episode", metavar="EPISODE")
    c.add_argument("--out", metavar="DIR", help="report folder (default "
                   "STATE_ROOT/checks/EPISODE_NAME; see syncedge --help)")
    c.add_argument("--min-fraction", type=float, default=None,
                   help="override the program's required share of each amplitude")
    c.add_argument("--model", metavar="DIR",
                   help="the model the calibration is for: an episode of another timing "
                        "is brought into its frame rate and the camera lag judged in its "
                        "frames (default: 10 Hz, the shipped models')")
    c.set_defaults(func=run_check)

    rt = sub.add_parser(
        "retime", help="move the frames of an episode whose camera was late (or early)",
        description=plain("""Move an episode's frames by the camera's lag against its joint
        readings, in whole frames, so that each frame shows the pose its readings give
        (edge/calibrate/retime.py). Without --shift-frames the lag is measured from the
        episode itself, as 'calibrate check' does (camera_lag). For an episode that cannot
        be recorded again (an imported dataset); with the cell at hand, recording again with
        the --camera-latency-s that check names is better. Frames past the end (start)
        repeat the last (first) one; metadata.extra.retime records the shift."""))
    rt.add_argument("episode", metavar="EPISODE", help="the episode (.npz)")
    rt.add_argument("--out", required=True, metavar="EPISODE", help="new episode file (.npz)")
    rt.add_argument("--shift-frames", type=int, default=None, metavar="N",
                    help="the lag in whole frames (> 0: the camera was late); default: "
                         "measured from the episode and rounded")
    rt.set_defaults(func=run_retime)

    steps = calibrate_cell.register_steps(sub)
    # store and validate with --chain: the chain model's (edge/commands/calibrate_chain.py)
    steps["store"].set_defaults(func=calibrate_chain.run_store)
    steps["validate"].set_defaults(func=calibrate_chain.run_validate)
    calibrate_import.register_import(sub)
    return p
