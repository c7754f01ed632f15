"""Import a calibration or validation episode from a recording made elsewhere.

Two sources, told apart by their layout (never by guessing at names):

- a **rosbag2** recording (ROS 2; a folder with ``metadata.yaml`` and its ``.mcap`` or
  ``.db3`` storage file, or that file itself) with a ``sensor_msgs/msg/JointState`` topic
  and a ``sensor_msgs/msg/Image`` or ``sensor_msgs/msg/CompressedImage`` topic, read with
  the ``rosbags`` package (:mod:`edge.calibrate.rosbag_import`);
- a **LeRobot** dataset (layout v3.0: a folder with ``meta/info.json``), read with
  :func:`edge.lerobot.read_lerobot`.

Either way the result is an ordinary :class:`~edge.episode.Episode` of kind
``calibration`` or ``validation``: frames at the camera's own size and rate, joint
positions paired to each frame by time, ``actions[t] = q[t+1] - q[t]``, and what the import
did in ``metadata.extra["import"]`` (plus the pairing figures ``calibrate check`` reads in
``metadata.extra["recording"]``). It is written with :func:`edge.episode.save_episode` and
goes through ``calibrate check`` / ``store`` / ``validate`` like a recorded episode.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge.calibrate.errors import RecordingImportError
from edge.episode import (
    DOF_UNITS,
    Episode,
    EpisodeMetadata,
    actions_from_positions,
    continuous_joints,
)

__all__ = ["IMPORT_FORMATS", "IMPORT_KINDS", "ImportOptions", "detect_format",
           "episode_from_samples", "import_lerobot", "import_recording"]

#: The recording formats :func:`import_recording` reads.
IMPORT_FORMATS = ("rosbag2", "lerobot")
#: The episode kinds an import may produce.
IMPORT_KINDS = ("calibration", "validation")


@dataclass(frozen=True)
class ImportOptions:
    """What the imported episode is and how to read the recording.

    Attributes:
        cell_id: the cell's id (the calibration cache key's first part).
        camera_id: the camera's id (default ``CELL-cam``).
        robot_id: the robot unit's id (default ``CELL-ROBOT``).
        robot: the robot model's name (default: the dataset's ``robot_type``, else
            ``"robot"``).
        kind: ``"calibration"`` (a sweep of every DoF) or ``"validation"`` (ordinary
            motion for ``calibrate validate``).
        joint_names: the joints to keep, in the controller's channel order (default: every
            joint of the recording, in the order it first names them).
        prismatic: joints whose unit is m (the others are rad).
        degrees: revolute joints whose readings are in degrees (converted to rad, e.g. a
            LeRobot SO-100 dataset's ``observation.state``); ``("all",)``: every revolute
            joint.
        millimetres: prismatic joints (``prismatic``) whose readings are in mm (converted
            to m, e.g. a gripper's opening).
        tolerance_s: largest distance from a frame to its nearest joint sample that
            ``calibrate check`` accepts, s (recorded as ``recording.tolerance_s``).
        max_joint_gap_s: rosbag2 only: frames between two joint samples further apart than
            this are refused (no position to pair them with), s.
        stamps: rosbag2 only: ``"header"`` (the messages' ``header.stamp``, the default) or
            ``"bag"`` (when the messages were written), for drivers that leave the header
            stamp at zero.
        fps: resample to this rate, Hz (None: the recording's own): on a grid of this
            period from the first frame, the frame nearest each tick is kept with its joint
            positions (a validation episode for a model that steps at 10 Hz from a 30 Hz
            dataset). Only a lower rate than the recording's; ticks without a frame within
            half the recording's period are refused.
        image_offset_s: rosbag2 only: seconds added to every image stamp before pairing
            (a camera whose clock runs behind the joints' by that much; negative: ahead, or
            the camera's transport delay with ``stamps="bag"``).
        rename: ``(name in the recording, name in the episode)`` pairs: joints named
            otherwise by the recording than by the controller (after ``strip_prefix``).
        strip_prefix: removed from the start of every joint name that has it (a
            ``ur5e_`` prefix a launch file adds), before ``rename``.
        strip_suffix: removed from the end of every joint name that has it (LeRobot's
            ``.pos``), with ``strip_prefix``, before ``rename``.
        scale: ``(joint, factor)`` pairs: that joint's readings times ``factor`` are rad
            (m for a prismatic joint), after ``degrees`` and ``millimetres``: a reading in
            another unit, e.g. a LeRobot gripper's 0..100 (its range of motion over 100).
        from_s, to_s: rosbag2 only: the window imported, s from the camera's first frame
            (None: from the start, to the end): the sweep out of a longer recording, whose
            other frames are then never decoded.
    """

    cell_id: str
    camera_id: str | None = None
    robot_id: str | None = None
    robot: str | None = None
    kind: str = "calibration"
    joint_names: tuple[str, ...] | None = None
    prismatic: tuple[str, ...] = ()
    degrees: tuple[str, ...] = ()
    millimetres: tuple[str, ...] = ()
    tolerance_s: float = 0.02
    max_joint_gap_s: float = 0.25
    stamps: str = "header"
    fps: float | None = None
    image_offset_s: float = 0.0
    rename: tuple[tuple[str, str], ...] = ()
    strip_prefix: str = ""
    strip_suffix: str = ""
    scale: tuple[tuple[str, float], ...] = ()
    from_s: float | None = None
    to_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.cell_id, str) or not self.cell_id:
            raise RecordingImportError(f"import: expected a cell id, found {self.cell_id!r}")
        if self.kind not in IMPORT_KINDS:
            raise RecordingImportError(f"import: kind: expected one of {list(IMPORT_KINDS)}, "
                                       f"found {self.kind!r}")
        if self.stamps not in ("header", "bag"):
            raise RecordingImportError(f"import: stamps: expected 'header' or 'bag', found "
                                       f"{self.stamps!r}")
        if self.joint_names is not None:
            dup = sorted({n for n in self.joint_names if self.joint_names.count(n) > 1})
            if not self.joint_names or dup:
                raise RecordingImportError(f"import: joint names: expected distinct names, "
                                           f"found {list(self.joint_names)}")
        if self.fps is not None and not (math.isfinite(self.fps) and self.fps > 0):
            raise RecordingImportError(f"import: fps: expected a rate > 0 Hz, found "
                                       f"{self.fps!r}")
        if not math.isfinite(self.image_offset_s):
            raise RecordingImportError(f"import: image offset: expected seconds, found "
                                       f"{self.image_offset_s!r}")
        for name, v in (("from_s", self.from_s), ("to_s", self.to_s)):
            if v is not None and not (math.isfinite(v) and v >= 0):
                raise RecordingImportError(f"import: {name}: expected seconds >= 0 from the "
                                           f"first frame, found {v!r}")
        if self.from_s is not None and self.to_s is not None and self.to_s <= self.from_s:
            raise RecordingImportError(f"import: expected --from-s below --to-s, found "
                                       f"{self.from_s} and {self.to_s}")
        bad = [(n, f) for n, f in self.scale if not (math.isfinite(f) and f != 0)]
        if bad or len({n for n, _ in self.scale}) != len(self.scale):
            raise RecordingImportError(f"import: scale: expected one finite, non-zero factor "
                                       f"per joint, found "
                                       f"{', '.join(f'{n}={f}' for n, f in self.scale)}")
        olds = [a for a, _ in self.rename]
        news = [b for _, b in self.rename]
        if not all(olds) or not all(news) or len(set(olds)) != len(olds) \
                or len(set(news)) != len(news):
            raise RecordingImportError(f"import: rename: expected distinct OLD=NEW pairs of "
                                       f"non-empty names, found "
                                       f"{', '.join(f'{a}={b}' for a, b in self.rename)}")
        if not (self.tolerance_s > 0 and self.max_joint_gap_s > 0):
            raise RecordingImportError(f"import: expected positive tolerance_s and "
                                       f"max_joint_gap_s, found {self.tolerance_s}, "
                                       f"{self.max_joint_gap_s}")


    def joint_name(self, recorded: str) -> str:
        """The episode's name for a joint the recording calls ``recorded``: the prefix
        stripped, then renamed."""
        return dict(self.rename).get(self._stripped(recorded), self._stripped(recorded))

    def _stripped(self, name: str) -> str:
        """``name`` without ``strip_prefix`` and ``strip_suffix`` (a name that is only
        them is kept)."""
        if self.strip_prefix and name.startswith(self.strip_prefix) \
                and len(name) > len(self.strip_prefix):
            name = name[len(self.strip_prefix):]
        if self.strip_suffix and name.endswith(self.strip_suffix) \
                and len(name) > len(self.strip_suffix):
            name = name[:-len(self.strip_suffix)]
        return name

    def renamed(self, recorded: Sequence[str], where: str) -> list[str]:
        """The episode's names of the recording's joints ``recorded``, in order.

        Raises:
            RecordingImportError: a ``rename`` source not among them (after the prefix),
                or two joints given one name.
        """
        stripped = [self._stripped(n) for n in recorded]
        unknown = [a for a, _ in self.rename if a not in stripped]
        if unknown:
            raise RecordingImportError(f"{where}: --rename {unknown}: not among the "
                                       f"recording's joints {stripped}"
                                       + (" (after --strip-prefix/--strip-suffix)"
                                          if self.strip_prefix or self.strip_suffix else ""))
        out = [self.joint_name(n) for n in recorded]
        dup = sorted({n for n in out if out.count(n) > 1})
        if dup:
            raise RecordingImportError(f"{where}: after renaming, joint name(s) {dup} stand "
                                       f"for more than one of the recording's joints "
                                       f"{list(recorded)}; expected one name per joint")
        return out


def detect_format(source: str | os.PathLike[str]) -> str:
    """Which format ``source`` is in, from its layout: ``"rosbag2"`` or ``"lerobot"``.

    Raises:
        RecordingImportError: ``source`` is missing or neither layout.
    """
    p = Path(source)
    if p.is_dir() and (p / "meta" / "info.json").is_file():
        return "lerobot"
    if p.is_dir() and (p / "metadata.yaml").is_file():
        return "rosbag2"
    if p.is_file() and p.suffix in (".mcap", ".db3"):
        return "rosbag2"
    if p.is_dir() and (any(p.glob("*.mcap")) or any(p.glob("*.db3"))):
        return "rosbag2"  # its metadata.yaml missing: the reader says how to write it
    what = "no such file or folder" if not p.exists() else "neither layout"
    raise RecordingImportError(
        f"{p}: {what}; expected a rosbag2 recording (a folder with metadata.yaml and its "
        f".mcap or .db3 file, or that file) or a LeRobot v3.0 dataset (a folder with "
        f"meta/info.json)")


def import_recording(source: str | os.PathLike[str], options: ImportOptions, *,
                     image_topic: str | None = None, joint_topic: str | None = None,
                     episode_index: int | None = None, camera_key: str | None = None,
                     camera_info_topic: str | None = None) -> Episode:
    """Import one episode from a rosbag2 recording or a LeRobot dataset (see the module
    docstring).

    Args:
        source: the bag (folder or storage file) or the dataset folder.
        options: ids, kind, joints and pairing options.
        image_topic, joint_topic: rosbag2: the topics (default: the bag's only Image or
            CompressedImage topic, its only JointState topic).
        camera_info_topic: rosbag2: the CameraInfo topic (default: the one beside the
            image topic, else the bag's only one).
        episode_index, camera_key: LeRobot: which episode (default: the only one) and
            which video feature (default: the first).

    Returns:
        A validated episode: frames uint8 ``[T, H, W, 3]`` at the camera's size,
        timestamps float64 ``[T]`` s from the first frame, joint positions float64
        ``[T, A]`` (rad or m), actions float32 ``[T, A]``.
    Raises:
        RecordingImportError: a missing topic or feature, an unreadable message, frames
            that cannot be paired (the file, topic or field named, and the fix).
        MissingDependencyError: rosbag2 without the ``rosbags`` package.
    """
    fmt = detect_format(source)
    if fmt == "lerobot":
        if image_topic or joint_topic or camera_info_topic:
            raise RecordingImportError(f"{source}: a LeRobot dataset has no topics; drop "
                                       f"--image-topic/--joint-topic/--camera-info-topic "
                                       f"(use --camera-key)")
        if options.image_offset_s or options.stamps != "header" \
                or options.from_s is not None or options.to_s is not None:
            raise RecordingImportError(f"{source}: a LeRobot dataset pairs its frames and "
                                       f"states by row; --image-offset-s, --stamps, --from-s "
                                       f"and --to-s are for "
                                       f"rosbag2 recordings (a late camera in a dataset: "
                                       f"syncedge calibrate retime)")
        return import_lerobot(source, options, episode_index=episode_index,
                              camera_key=camera_key)
    if episode_index is not None or camera_key is not None:
        raise RecordingImportError(f"{source}: a rosbag2 recording; --episode-index and "
                                   f"--camera-key are for LeRobot datasets (use "
                                   f"--image-topic/--joint-topic)")
    from edge.calibrate.rosbag_import import import_rosbag2

    return import_rosbag2(source, options, image_topic=image_topic, joint_topic=joint_topic,
                          camera_info_topic=camera_info_topic)


def _units(names: Sequence[str], options: ImportOptions, where: str) -> tuple[str, ...]:
    unknown = [n for n in options.prismatic if n not in names]
    if unknown:
        raise RecordingImportError(f"{where}: prismatic joint(s) {unknown} are not among the "
                                   f"imported joints {list(names)}")
    units = tuple("m" if n in options.prismatic else "rad" for n in names)
    assert all(u in DOF_UNITS for u in units)
    return units


def episode_from_samples(frames: np.ndarray, stamps_s: np.ndarray, positions: np.ndarray,
                         names: Sequence[str], options: ImportOptions, *, source: str,
                         robot: str | None, camera: dict[str, Any], extra: dict[str, Any],
                         where: str) -> Episode:
    """Build and validate the imported episode.

    Args:
        frames: uint8 ``[T, H, W, 3]`` RGB at the camera's own size.
        stamps_s: float64 ``[T]`` seconds, strictly increasing (any origin: the episode's
            timestamps start at 0).
        positions: float64 ``[T, A]`` joint positions paired to the frames (rad or m).
        names: the ``A`` joint names, in channel order.
        options: ids and kind.
        source, robot, camera, extra: metadata fields (``extra`` gets the import's record).
        where: the recording, for messages.

    Raises:
        RecordingImportError: fewer than two frames, or a rate that cannot be estimated.
    """
    t = len(frames)
    if t < 2:
        raise RecordingImportError(f"{where}: expected at least 2 frames paired with joint "
                                   f"positions, found {t}")
    ts = np.asarray(stamps_s, np.float64)
    fps = float(1.0 / np.median(np.diff(ts)))
    if options.fps is not None:
        keep = _resample_rows(ts, fps, options.fps, where)
        frames, ts, positions = frames[keep], ts[keep], np.asarray(positions)[keep]
        extra = {**extra, "import": {**dict(extra.get("import") or {}),
                                     "resampled_from_hz": round(fps, 6),
                                     "resampled_rows": len(keep)}}
        fps = float(options.fps)
    robot_name = options.robot or robot or "robot"
    meta = EpisodeMetadata(
        cell_id=options.cell_id, camera_id=options.camera_id or f"{options.cell_id}-cam",
        robot_id=options.robot_id or f"{options.cell_id}-{robot_name}", robot=robot_name,
        dof_names=tuple(names), dof_units=_units(names, options, where), fps=round(fps, 6),
        kind=options.kind, source=source, camera=camera, extra=extra)
    q = np.array(positions, np.float64)
    deg = _degrees(names, meta.dof_units, options, where)
    q[:, deg] = np.radians(q[:, deg])
    mm = _millimetres(names, meta.dof_units, options, where)
    q[:, mm] = q[:, mm] / 1000.0
    if mm:
        meta = dataclasses.replace(meta, extra={**dict(meta.extra), "import": {
            **dict(meta.extra.get("import") or {}),
            "converted_from_mm": [names[c] for c in mm]}})
    if deg:
        meta = dataclasses.replace(meta, extra={**dict(meta.extra), "import": {
            **dict(meta.extra.get("import") or {}),
            "converted_from_degrees": [names[c] for c in deg]}})
    if options.scale:
        unknown = [n for n, _ in options.scale if n not in names]
        if unknown:
            raise RecordingImportError(f"{where}: --scale joint(s) {unknown} are not among the "
                                       f"imported joints {list(names)}")
        for n, f in options.scale:
            q[:, list(names).index(n)] *= f
        meta = dataclasses.replace(meta, extra={**dict(meta.extra), "import": {
            **dict(meta.extra.get("import") or {}), "scaled": dict(options.scale)}})
    ep = Episode(frames=np.ascontiguousarray(frames, np.uint8),
                 actions=actions_from_positions(q), timestamps=ts - ts[0], metadata=meta,
                 joint_positions=q)
    return continuous_joints(ep.validate(where))


def _resample_rows(ts: np.ndarray, have_hz: float, want_hz: float, where: str) -> np.ndarray:
    """Rows of a recording stamped ``ts`` (s, increasing, ``have_hz``) nearest each tick of
    a ``want_hz`` grid from the first stamp, int64 ``[N]``.

    Raises:
        RecordingImportError: ``want_hz`` above the recording's rate (more than 1% over), a
            tick without a frame within half the recording's period, fewer than 2 ticks.
    """
    if want_hz > have_hz * 1.01:
        raise RecordingImportError(f"{where}: --fps {want_hz:g}: the recording runs at "
                                   f"{have_hz:.3g} Hz; resampling only lowers the rate (a "
                                   f"higher one would repeat frames)")
    ticks = ts[0] + np.arange(int(np.floor((ts[-1] - ts[0]) * want_hz + 1e-6)) + 1) / want_hz
    if len(ticks) < 2:
        raise RecordingImportError(f"{where}: --fps {want_hz:g}: the recording's "
                                   f"{ts[-1] - ts[0]:.3f} s hold fewer than 2 frames at "
                                   f"that rate")
    i = np.clip(np.searchsorted(ts, ticks), 1, len(ts) - 1)
    rows = np.where(np.abs(ts[i - 1] - ticks) <= np.abs(ts[i] - ticks), i - 1, i)
    off = np.abs(ts[rows] - ticks)
    if off.max() > 0.5 / have_hz + 1e-9:
        k = int(np.argmax(off))
        raise RecordingImportError(f"{where}: --fps {want_hz:g}: no frame within half a "
                                   f"frame of {ticks[k] - ts[0]:.3f} s (nearest "
                                   f"{off[k] * 1e3:.0f} ms off): the recording has a gap "
                                   f"there; import the parts either side of it apart")
    return rows.astype(np.int64)


def _degrees(names: Sequence[str], units: Sequence[str], options: ImportOptions,
             where: str) -> list[int]:
    """Columns whose readings ``options.degrees`` says are in degrees."""
    if options.degrees == ("all",):
        return [c for c, u in enumerate(units) if u == "rad"]
    return _unit_columns(names, units, options.degrees, "--degrees", "rad", where,
                         " (or give 'all')", "are prismatic (m); only a revolute joint's "
                                             "readings can be in degrees")


def _millimetres(names: Sequence[str], units: Sequence[str], options: ImportOptions,
                 where: str) -> list[int]:
    """Columns whose readings ``options.millimetres`` says are in mm (prismatic only)."""
    return _unit_columns(names, units, options.millimetres, "--millimetres", "m", where, "",
                         "are revolute (rad); name them in --prismatic too (a gripper's "
                         "opening or a linear axis)")


def _unit_columns(names: Sequence[str], units: Sequence[str], chosen: Sequence[str],
                  flag: str, unit: str, where: str, also: str, wrong: str) -> list[int]:
    """Indices of the ``chosen`` joints in ``names``, each of ``unit``; a name not imported
    or of another unit is refused naming ``flag`` (``also`` and ``wrong`` end those two
    messages)."""
    names = list(names)
    unknown = [n for n in chosen if n not in names]
    if unknown:
        raise RecordingImportError(f"{where}: {flag} joint(s) {unknown} are not among the "
                                   f"imported joints {names}{also}")
    other = [n for n in chosen if units[names.index(n)] != unit]
    if other:
        raise RecordingImportError(f"{where}: {flag} joint(s) {other} {wrong}")
    return [names.index(n) for n in chosen]


def _select(names: list[str], options: ImportOptions, where: str) -> list[int]:
    """Column indices of ``options.joint_names`` in ``names`` (all when not given)."""
    if options.joint_names is None:
        return list(range(len(names)))
    missing = [n for n in options.joint_names if n not in names]
    if missing:
        raise RecordingImportError(f"{where}: joint(s) {missing} are not in the recording; "
                                   f"found {names} (pass --joints with names from that list)")
    return [names.index(n) for n in options.joint_names]


def import_lerobot(root: str | os.PathLike[str], options: ImportOptions, *,
                   episode_index: int | None = None, camera_key: str | None = None) -> Episode:
    """One episode of a LeRobot dataset (v3.0, v2.1 or v2.0) as a calibration or validation
    episode (only that episode is read and decoded).

    Frames keep the dataset's size and rate; ``observation.state`` gives the joint
    positions (one row per frame, so pairing is the dataset's own); ``action`` (LeRobot's
    absolute targets) is not used. syncedge metadata written with the dataset
    (``meta/syncedge_episodes.json``) is kept where ``options`` leaves it open.

    Raises:
        RecordingImportError: no such episode, several episodes and no index, an unknown
            joint.
        EpisodeError: the dataset is malformed (from :func:`edge.lerobot.read_lerobot`).
    """
    from edge.lerobot import lerobot_episode_indices, lerobot_video_keys, read_lerobot

    where = str(root)
    have = lerobot_episode_indices(root)  # from the metadata: nothing decoded
    if episode_index is None:
        if len(have) != 1:
            raise RecordingImportError(f"{where}: {len(have)} episodes; pass "
                                       f"--episode-index N ({have[0]}..{have[-1]})")
        episode_index = have[0]
    if episode_index not in have:
        raise RecordingImportError(f"{where}: episode index {episode_index}: expected "
                                   f"{have[0]}..{have[-1]}")
    (ep,) = read_lerobot(root, camera_key=camera_key, episodes=[episode_index])
    cameras = lerobot_video_keys(root)
    assert ep.joint_positions is not None  # read_lerobot pairs observation.state
    m = ep.metadata
    names = options.renamed(list(m.dof_names), where)
    ren = dict(zip(m.dof_names, names, strict=True))  # the dataset's name -> the episode's
    cols = _select(names, options, where)
    kept = [names[c] for c in cols]
    defaults = m.source.startswith("lerobot:")  # no syncedge metadata in the dataset
    if not defaults and m.kind in IMPORT_KINDS and m.kind != options.kind:
        raise RecordingImportError(f"{where}: episode {episode_index} is a {m.kind!r} episode "
                                   f"in the dataset, expected {options.kind!r}: pass --kind "
                                   f"{m.kind} to import it as one, or another --episode-index")
    # a dataset of several cameras: each key its own camera id, so that storing one
    # camera's calibration does not replace another's entry
    key_id = f"{options.cell_id}-{m.camera_id.rsplit('.', 1)[-1]}"  # the reader's key
    opts = dataclasses.replace(
        options,
        camera_id=options.camera_id or (key_id if defaults else m.camera_id),
        robot_id=options.robot_id or (None if defaults else m.robot_id),
        prismatic=options.prismatic or tuple(ren[n] for n, u in zip(m.dof_names, m.dof_units,
                                                                     strict=True)
                                             if u == "m" and ren[n] in kept))
    extra = {**dict(m.extra), "import": {
        "format": "lerobot", "source": where, "episode_index": episode_index,
        "camera_key": camera_key or "first video feature", "frames": ep.num_frames,
        "joints": kept,
        **({"renamed": {a: b for a, b in ren.items() if a != b}}
           if any(a != b for a, b in ren.items()) else {}),
        # a dataset without syncedge's sidecar names no kind (the reader's "motion" is its
        # placeholder, not the dataset's word)
        "kind_in_dataset": None if defaults else m.kind,
        "notes": ([f"the dataset names no joints (meta/info.json "
                   f"features.observation.state.names): its channels are called "
                   f"{', '.join(m.dof_names)}; give them the controller's names with "
                   f"--rename {m.dof_names[0]}=NAME,..."]
                  if defaults and list(m.dof_names) == [f"dof{i}" for i in
                                                        range(len(m.dof_names))] else [])
                 + ([f"the dataset holds {len(cameras)} cameras ({', '.join(cameras)}): "
                     f"imported {cameras[0]}, the first; the chain model simulates a camera "
                     f"fixed in the cell watching the arm (not one on the arm, such as a "
                     f"wrist camera): choose that one with --camera-key KEY"]
                    if camera_key is None and len(cameras) > 1 else [])}}
    out = episode_from_samples(ep.frames, ep.timestamps, ep.joint_positions[:, cols], kept,
                               opts, source=f"lerobot:{where}#episode={episode_index}",
                               robot=m.robot if m.robot != "unknown" else None,
                               camera=dict(m.camera), extra=extra, where=where)
    segs = tuple(dataclasses.replace(s, dof=ren[s.dof]) for s in m.segments
                 if ren.get(s.dof) in kept) if options.kind == "calibration" else ()
    return dataclasses.replace(out, metadata=dataclasses.replace(out.metadata, segments=segs)
                               ).validate(where)
