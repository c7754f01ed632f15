"""``syncedge calibrate import``: a calibration or validation episode from a ROS 2 bag or a
LeRobot dataset.

SOURCE is a rosbag2 recording (a folder with metadata.yaml and its .mcap or .db3 file, or
that file; needs pip install 'syncedge[ros]') with a sensor_msgs/JointState topic and a
sensor_msgs/Image or CompressedImage topic, or a LeRobot dataset folder (v3.0, v2.1, v2.0)
(meta/info.json). Frames keep the camera's own size and rate; each frame gets the joint
positions at its header stamp (interpolated between the joint samples around it); frames
are put in stamp order. Writes EPISODE (.npz, the episode format 'calibrate record'
writes) and EPISODE.reference.png (the first frame, the reference for 'calibrate verify'),
which then go through 'calibrate check', 'store' and 'validate' like a recorded episode.

The camera and the joints must be stamped on one clock. Import prints how far each
topic's header stamps lag their arrival in the bag and notes a camera more than 0.1 s
apart from the joints (another computer's or the camera's own clock), with the
--image-offset-s that would move it; 'calibrate check' measures the lag from the frames.
It also notes gaps in the camera's frames and, for a calibration, joints that never move
(gripper fingers: leave them out with --joints). A sensor_msgs/CameraInfo topic gives the
camera's field of view (metadata.camera.fovy_deg, which 'calibrate store --chain' reads).

Examples:
  syncedge calibrate import cal_bag/ --out cal.npz --cell cell-7 \\
      --joint-topic /joint_states --image-topic /camera/color/image_raw
  syncedge calibrate import val_bag/ --out val.npz --cell cell-7 --kind validation
  syncedge calibrate import ~/lerobot/cell7 --episode-index 2 --out cal.npz --cell cell-7
  syncedge calibrate import cal_bag/ --out cal.npz --cell cell-7 --strip-prefix ur5e_ \
      --image-offset-s=1.002
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edge.calibrate.errors import RecordingImportError
from edge.commands.helptext import plain

__all__ = ["register_import", "run_import"]


def _names(text: str | None, flag: str) -> tuple[str, ...] | None:
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(","))
    if not all(names):
        raise RecordingImportError(f"{flag}: expected comma-separated joint names like "
                                   f"joint1,joint2, found {text!r}")
    return names


def _pairs(text: str | None, flag: str, form: str, example: str,
           value: Callable[[str], Any] = str) -> tuple[tuple[str, Any], ...]:
    """``NAME=VALUE,...`` of ``flag`` as ``(name, value(VALUE))`` pairs (``()`` for None).

    Raises:
        RecordingImportError: an item without ``=``, a name or a value, or a value that
            ``value`` cannot read (``form`` and ``example`` say what was expected).
    """
    if text is None:
        return ()
    out = []
    for item in text.split(","):
        name, sep, raw = (x.strip() for x in item.partition("="))
        try:
            got = value(raw) if sep and name and raw else None
        except ValueError:
            got = None
        if got is None:
            raise RecordingImportError(f"{flag}: expected comma-separated {form} pairs like "
                                       f"{example}, found {item!r} in {text!r}")
        out.append((name, got))
    return tuple(out)


def run_import(args: argparse.Namespace) -> int:
    """Import the recording, write the episode and its reference frame, print a summary."""
    from edge.calibrate.recording_import import ImportOptions, import_recording
    from edge.episode import reference_path, save_episode
    from edge.visual import write_png

    out = Path(args.out)
    if out.suffix != ".npz":
        raise RecordingImportError(f"--out {out}: expected an episode file name ending in "
                                   f".npz (e.g. cal.npz)")
    if out.is_dir():
        raise RecordingImportError(f"--out {out}: a folder; expected an episode file name "
                                   f"ending in .npz")
    opts = ImportOptions(cell_id=args.cell, camera_id=args.camera_id, robot_id=args.robot_id,
                         robot=args.robot, kind=args.kind,
                         joint_names=_names(args.joints, "--joints"),
                         prismatic=_names(args.prismatic, "--prismatic") or (),
                         degrees=_names(args.degrees, "--degrees") or (),
                         millimetres=_names(args.millimetres, "--millimetres") or (),
                         tolerance_s=args.tolerance_s, max_joint_gap_s=args.max_joint_gap_s,
                         stamps=args.stamps, fps=args.fps,
                         image_offset_s=args.image_offset_s, rename=_pairs(
                             args.rename, "--rename", "OLD=NEW",
                             "ur5e_shoulder_pan_joint=shoulder_pan_joint"),
                         from_s=args.from_s, to_s=args.to_s,
                         strip_suffix=args.strip_suffix or "", scale=_pairs(
                             args.scale, "--scale", "NAME=FACTOR",
                             "gripper=0.0123 (rad per unit)", float),
                         strip_prefix=args.strip_prefix or "")
    ep = import_recording(args.source, opts, image_topic=args.image_topic,
                          joint_topic=args.joint_topic, episode_index=args.episode_index,
                          camera_key=args.camera_key, camera_info_topic=args.camera_info_topic)
    ref = reference_path(out)
    # both or neither: the reference frame is staged, the episode written, then the frame
    # moved under its name (an earlier pair is replaced, never half of it)
    staged = write_png(ref.with_name(f".{ref.name}.staged"), ep.frames[0])
    try:
        save_episode(ep, out)
        os.replace(staged, ref)
    finally:
        staged.unlink(missing_ok=True)
    imp = ep.metadata.extra["import"]
    h, w = ep.resolution
    print(f"{ep.metadata.kind} episode: {ep.num_frames} frames of {w}x{h} px at "
          f"{ep.metadata.fps:.3g} Hz, {ep.num_dof} joints ({', '.join(ep.metadata.dof_names)})"
          f" from {imp['format']} {args.source}; camera id {ep.metadata.camera_id}"
          + (f" ({imp['camera_key']})" if imp.get("camera_key") else ""))
    rec = ep.metadata.extra.get("recording") or {}
    if imp["format"] == "rosbag2":
        dropped = imp["frames_before_joints"] + imp["frames_after_joints"]
        print(f"topics {imp['image_topic']} ({imp['image_type']}, {imp['encoding']}) and "
              f"{imp['joint_topic']}; {imp['frames_reordered']} frame(s) out of stamp order "
              f"in the bag (sorted), {imp['frames_duplicate_stamp']} with a repeated stamp "
              f"(dropped), {dropped} outside the joint samples (dropped); max distance to a "
              f"joint sample {max(rec['pair_error_s']) * 1e3:.1f} ms")
        delays = imp.get("receive_delay_s")
        if delays and max(abs(delays["image"]), abs(delays["joints"])) > 1000.0:
            print(f"header stamp to arrival in the bag: {delays['image']:+.0f} s (camera), "
                  f"{delays['joints']:+.0f} s (joints), medians: the header stamps run on "
                  f"another time base than the recorder's clock (simulation time, or a "
                  f"clock never set); only their agreement with each other matters")
        elif delays:
            print(f"header stamp to arrival in the bag: {delays['image'] * 1e3:+.0f} ms "
                  f"(camera" + (f", its stamps moved by {imp['image_offset_s']:+.3f} s"
                                if imp.get("image_offset_s") else "")
                  + f"), {delays['joints'] * 1e3:+.0f} ms (joints), medians")
        fovy = ep.metadata.camera.get("fovy_deg")
        if fovy is not None:
            print(f"camera field of view {fovy:.2f} deg (vertical) from "
                  f"{imp['camera_info_topic']} (metadata.camera.fovy_deg)")
    if imp.get("window"):
        win = imp["window"]
        end = "end" if win["to_s"] is None else format(win["to_s"], "g")
        print(f"window {win['from_s'] or 0:g}..{end} s: {win['frames_outside']} frame(s) "
              f"outside it left out")
    if imp.get("renamed"):
        print("joints renamed: " + ", ".join(f"{a} -> {b}" for a, b in imp["renamed"].items()))
    for note in imp.get("notes") or ():
        print(f"note: {out}: {note}", file=sys.stderr)
    if imp.get("converted_from_degrees"):
        print(f"readings converted from degrees to rad: "
              f"{', '.join(imp['converted_from_degrees'])}")
    if imp.get("scaled"):
        print("readings scaled: " + ", ".join(f"{n} x {f:g}" for n, f in imp["scaled"].items()))
    if imp.get("converted_from_mm"):
        print(f"readings converted from mm to m: {', '.join(imp['converted_from_mm'])}")
    from edge.commands.joint_notes import (
        say_if_degrees,
        say_if_millimetres,
        say_turns_unwrapped,
    )

    say_if_degrees(ep.joint_positions, ep.metadata.dof_names, ep.metadata.dof_units,
                   ep.metadata.kind, str(out))
    say_if_millimetres(ep.joint_positions, ep.metadata.dof_names, ep.metadata.dof_units,
                       str(out))
    say_turns_unwrapped(ep.metadata.extra.get("joint_turns_unwrapped"), "frame",
                        "extra.joint_turns_unwrapped")
    print(out)
    print(ref)
    return 0


def register_import(sub: argparse._SubParsersAction) -> None:
    """Add ``import`` to the ``calibrate`` group."""
    from edge.calibrate.recording_import import IMPORT_KINDS

    p = sub.add_parser("import", help="a calibration or validation episode from a ROS 2 bag "
                       "or a LeRobot dataset", description=plain(__doc__),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", metavar="SOURCE",
                   help="rosbag2 folder (or its .mcap/.db3 file), or LeRobot dataset folder")
    p.add_argument("--out", required=True, metavar="EPISODE",
                   help="episode file to write (.npz); EPISODE.reference.png beside it")
    p.add_argument("--cell", required=True, metavar="ID", help="cell id")
    p.add_argument("--camera-id", help="camera id (default: the one a dataset written by "
                                       "syncedge records; else CELL-KEY for a LeRobot "
                                       "--camera-key such as observation.images.front "
                                       "(CELL-front), else CELL-cam)")
    p.add_argument("--robot-id", help="robot unit id (default: the one a dataset written by "
                                      "syncedge records, else CELL-ROBOT)")
    p.add_argument("--robot", metavar="NAME",
                   help="robot model name (default: the dataset's robot_type, else 'robot')")
    p.add_argument("--kind", choices=IMPORT_KINDS, default="calibration",
                   help="calibration (every DoF swept; default) or validation (ordinary "
                        "motion for 'calibrate validate')")
    p.add_argument("--joints", metavar="NAMES",
                   help="comma-separated joints to keep, in the controller's channel order "
                        "(default: every joint, in the order the recording first names them)")
    p.add_argument("--prismatic", metavar="NAMES",
                   help="comma-separated joints measured in m (default: all in rad)")
    p.add_argument("--millimetres", metavar="NAMES",
                   help="comma-separated --prismatic joints whose readings are in mm "
                        "(converted to m; e.g. a gripper's opening; default: all in m)")
    p.add_argument("--fps", type=float, metavar="HZ",
                   help="resample to this rate (the frame nearest each tick of a grid from "
                        "the first frame, with its joint positions; only lower than the "
                        "recording's): a validation episode for a model that steps at 10 Hz "
                        "(simulate, calibrate validate) from a 30 Hz dataset. A calibration "
                        "episode needs none (check and store bring any rate into the model's "
                        "timing)")
    p.add_argument("--degrees", metavar="NAMES",
                   help="comma-separated revolute joints whose readings are in degrees, or "
                        "'all' (converted to rad; e.g. a LeRobot SO-100 dataset; default: "
                        "all in rad)")
    p.add_argument("--strip-prefix", metavar="PREFIX",
                   help="remove PREFIX from the start of every joint name that has it (a "
                        "ur5e_ a launch file adds), so the episode's names are the "
                        "controller's; --rename, --joints, --prismatic, --degrees and "
                        "--millimetres then use the names without it")
    p.add_argument("--strip-suffix", metavar="SUFFIX",
                   help="remove SUFFIX from the end of every joint name that has it (a "
                        "LeRobot dataset's .pos), as --strip-prefix")
    p.add_argument("--scale", metavar="NAME=FACTOR,...",
                   help="multiply a joint's readings by FACTOR to get rad (m for --prismatic), "
                        "after --degrees/--millimetres: a reading in another unit, e.g. a "
                        "LeRobot gripper's 0..100 (its range of motion in rad over 100, from "
                        "the arm's own calibration)")
    p.add_argument("--rename", metavar="OLD=NEW,...",
                   help="comma-separated renames of the recording's joints (after "
                        "--strip-prefix); --joints, --prismatic, --degrees and --millimetres "
                        "use the new names")
    g = p.add_argument_group("rosbag2")
    g.add_argument("--joint-topic", metavar="TOPIC[,TOPIC]",
                   help="sensor_msgs/JointState topic (default: the bag's only one); several, "
                        "comma-separated, are read together (an arm and its gripper on "
                        "topics of their own)")
    g.add_argument("--image-topic", metavar="TOPIC",
                   help="sensor_msgs/Image or CompressedImage topic (default: the bag's only "
                        "one)")
    g.add_argument("--camera-info-topic", metavar="TOPIC",
                   help="sensor_msgs/CameraInfo topic whose intrinsics go to "
                        "metadata.camera (fovy_deg, which 'calibrate store --chain' reads; "
                        "default: the camera_info beside the image topic, else the bag's "
                        "only one, else none)")
    g.add_argument("--stamps", choices=("header", "bag"), default="header",
                   help="pair by the messages' header stamps (default) or by the times the "
                        "bag recorded them (drivers that leave header stamps at zero); "
                        "applies to both topics")
    g.add_argument("--image-offset-s", type=float, default=0.0, metavar="S",
                   help="add S seconds to every image stamp before pairing: a camera "
                        "stamping on a clock S seconds behind the joints' (import prints "
                        "both topics' stamp-to-arrival delays; 'calibrate check' measures "
                        "the lag and names the value), or with --stamps bag minus the "
                        "camera's transport delay (default 0)")
    g.add_argument("--from-s", type=float, metavar="S",
                   help="import from S seconds after the camera's first frame (the sweep "
                        "out of a longer recording; frames outside are never decoded)")
    g.add_argument("--to-s", type=float, metavar="S",
                   help="import up to S seconds after the camera's first frame")
    g.add_argument("--tolerance-s", type=float, default=0.02,
                   help="largest distance from a frame to its nearest joint sample that "
                        "'calibrate check' accepts (s, default 0.02)")
    g.add_argument("--max-joint-gap-s", type=float, default=0.25,
                   help="refuse frames between joint samples further apart than this (s, "
                        "default 0.25)")
    g = p.add_argument_group("LeRobot")
    g.add_argument("--episode-index", type=int, metavar="N",
                   help="which episode of the dataset (default: its only one)")
    g.add_argument("--camera-key", metavar="KEY",
                   help="video feature, e.g. observation.images.main (default: the first)")
    p.set_defaults(func=run_import)
