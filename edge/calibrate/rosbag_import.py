"""A calibration or validation episode from a ROS 2 recording (rosbag2, MCAP or SQLite3).

Read with the ``rosbags`` package (pure Python, no ROS install; imported here only, at
first use; ``pip install 'syncedge[ros]'``). Messages (ROS 2 ``sensor_msgs``):

- ``sensor_msgs/msg/JointState``: ``name[]`` and ``position[]`` (rad, or m for a prismatic
  joint). Joints are matched by name in every message, so messages may list them in any
  order, and a message may carry only some of them (several publishers on one topic).
- ``sensor_msgs/msg/Image`` with encoding ``rgb8``, ``bgr8``, ``rgba8``, ``bgra8`` or
  ``mono8`` (row stride ``step`` honoured), or ``sensor_msgs/msg/CompressedImage`` (JPEG or
  PNG, decoded with OpenCV).

Time: each message's ``header.stamp`` (or, with ``stamps="bag"``, the time the bag
recorded it). Frames are sorted by stamp (bags store messages in arrival order, which is
not always stamp order); a frame whose stamp repeats an earlier one is dropped and counted
(``recording.camera_stamps_non_monotonic``, which ``calibrate check`` reports). Each joint's
position at a frame's stamp is interpolated linearly between that joint's two samples
around it; frames before the first or after the last joint sample are dropped at the ends
(counted), and a frame between two samples further apart than ``max_joint_gap_s`` is
refused. ``recording.pair_error_s`` holds, per frame, the distance to the nearest joint
sample (largest over the joints), which ``calibrate check`` compares with ``tolerance_s``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from edge.calibrate.check import GAP_PERIODS, frame_gaps
from edge.calibrate.errors import RecordingImportError
from edge.calibrate.recording_import import ImportOptions, episode_from_samples
from edge.episode import Episode
from edge.errors import MissingDependencyError
from edge.joints import TURNS, continuous_positions

__all__ = ["IMAGE_ENCODINGS", "IMAGE_TYPES", "JOINT_TYPE", "decode_image", "import_rosbag2",
           "pair_positions"]

JOINT_TYPE = "sensor_msgs/msg/JointState"
CAMERA_INFO_TYPE = "sensor_msgs/msg/CameraInfo"
IMAGE_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")
#: ``sensor_msgs/msg/Image`` encodings read (REP 104 names): channels and channel order.
IMAGE_ENCODINGS = {"rgb8": (3, "rgb"), "bgr8": (3, "bgr"), "rgba8": (4, "rgb"),
                   "bgra8": (4, "bgr"), "mono8": (1, "mono")}


def _rosbags() -> tuple[Any, Any]:
    """``(rosbags.rosbag2.Reader, typestore)``, imported here only.

    Raises:
        MissingDependencyError: ``rosbags`` is not installed.
    """
    try:
        from rosbags.rosbag2 import Reader
        from rosbags.typesys import Stores, get_typestore
    except ImportError:
        raise MissingDependencyError("rosbags", "ros", "reading a rosbag2 recording") \
            from None
    return Reader, get_typestore(Stores.LATEST)


def decode_image(msg: Any, msgtype: str, where: str) -> np.ndarray:
    """One image message as uint8 ``[H, W, 3]`` RGB.

    Raises:
        RecordingImportError: an unsupported encoding or format, or data of the wrong size
            (``where`` names the bag, topic and message).
    """
    import cv2

    if msgtype == "sensor_msgs/msg/CompressedImage":
        buf = np.frombuffer(bytes(msg.data), np.uint8)
        fmt = str(msg.format)
        if "compresseddepth" in fmt.lower().replace(" ", "") or "16uc1" in fmt.lower() \
                or "32fc1" in fmt.lower():
            raise RecordingImportError(f"{where}: CompressedImage format {fmt!r}: a depth "
                                       f"stream; expected the colour camera's frames (pass "
                                       f"--image-topic with its topic)")
        img = cv2.imdecode(buf, cv2.IMREAD_COLOR) if buf.size else None
        if img is None:
            raise RecordingImportError(f"{where}: CompressedImage format {fmt!r}: "
                                       f"expected JPEG or PNG data OpenCV can decode, found "
                                       f"{buf.size} bytes it cannot")
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    enc = str(msg.encoding).lower()
    if enc not in IMAGE_ENCODINGS:
        raise RecordingImportError(f"{where}: Image encoding {msg.encoding!r}: expected one of "
                                   f"{sorted(IMAGE_ENCODINGS)} (republish the camera as rgb8 "
                                   f"or bgr8, or record its CompressedImage topic)")
    ch, order = IMAGE_ENCODINGS[enc]
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    data = np.asarray(msg.data, np.uint8).reshape(-1)
    if h < 1 or w < 1 or step < w * ch or data.size < h * step:
        raise RecordingImportError(f"{where}: Image {w}x{h} {enc} with step {step}: expected "
                                   f"at least {h * max(step, w * ch)} data bytes and step >= "
                                   f"{w * ch}, found {data.size} bytes")
    img = data[:h * step].reshape(h, step)[:, :w * ch].reshape(h, w, ch)
    if order == "mono":
        return np.ascontiguousarray(np.repeat(img, 3, axis=2))
    img = img[:, :, :3]
    return np.ascontiguousarray(img[:, :, ::-1] if order == "bgr" else img)


def pair_positions(frame_s: np.ndarray, joints: dict[str, tuple[np.ndarray, np.ndarray]],
                   names: list[str], max_gap_s: float, where: str,
                   origin_s: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each joint's position at each frame's stamp, by linear interpolation in time.

    Args:
        frame_s: float64 ``[T]`` frame stamps, s, increasing.
        joints: per joint name, ``(stamps float64 [N] s increasing, positions float64 [N])``.
        names: the joints wanted, in channel order.
        max_gap_s: refuse a frame between two samples of a joint further apart than this.
        where: the recording, for messages.
        origin_s: the stamp messages count times from (default: the first frame's).

    Returns:
        ``(keep bool [T], positions float64 [T', A], pair_error_s float64 [T'])``: which
        frames lie within every joint's samples (a contiguous run), their positions, and per
        kept frame the distance to the nearest joint sample (largest over the joints).
    Raises:
        RecordingImportError: no frame within the joint samples, or a frame in a gap.
    """
    lo = max(float(joints[n][0][0]) for n in names)
    hi = min(float(joints[n][0][-1]) for n in names)
    keep = (frame_s >= lo) & (frame_s <= hi)
    if not keep.any():
        raise RecordingImportError(
            f"{where}: no frame lies within the joint samples (frames "
            f"{frame_s[0]:.3f}..{frame_s[-1]:.3f} s, joints {lo:.3f}..{hi:.3f} s): expected "
            f"both topics recorded over the same time (check the header stamps, or pass "
            f"--stamps bag)")
    t = frame_s[keep]
    q = np.empty((len(t), len(names)), np.float64)
    err = np.zeros(len(t), np.float64)
    for c, n in enumerate(names):
        s, v = joints[n]
        j = np.clip(np.searchsorted(s, t, side="right"), 1, len(s) - 1)
        s0, s1 = s[j - 1], s[j]
        gap = s1 - s0
        bad = np.flatnonzero(gap > max_gap_s)
        if bad.size:
            i = int(bad[0])
            # times from the first frame read better than epochs
            o = float(frame_s[0]) if origin_s is None else float(origin_s)
            raise RecordingImportError(
                f"{where}: joint {n!r}: the frame at {t[i] - o:+.3f} s (from the first frame) "
                f"falls between samples at {s0[i] - o:+.3f} and {s1[i] - o:+.3f} s "
                f"({gap[i] * 1e3:.0f} ms apart; expected at most {max_gap_s * 1e3:.0f} ms): "
                f"the joint stream has a gap there (record again, or raise "
                f"--max-joint-gap-s)")
        w = np.where(gap > 0, (t - s0) / np.where(gap > 0, gap, 1.0), 0.0)
        # a joint reported within one turn that turns through the wrap between two samples:
        # interpolated on its continuous readings (across the wrap the straight line gave a
        # made-up angle, 2.09 between 3.12 and -3.12), then reported within its turn again,
        # so the episode's own unwrap finds and records the wrap at its frame
        u, wraps = continuous_positions(v[:, None], ["rad"])
        u = u[:, 0]
        qc = u[j - 1] + w * (u[j] - u[j - 1])
        if wraps:
            turn = min(TURNS, key=lambda x: abs(x - wraps[0]["turn"]))  # exact, not rounded
            base = 0.0 if float(np.nanmin(v)) >= 0 else -turn / 2
            qc = np.mod(qc - base, turn) + base
        q[:, c] = qc
        err = np.maximum(err, np.minimum(np.abs(t - s0), np.abs(s1 - t)))
    return keep, q, err


def _bag_dir(source: Path) -> Path:
    return source.parent if source.is_file() else source


def _stamp_s(msg: Any, bag_ns: int, stamps: str) -> float:
    if stamps == "bag":
        return bag_ns / 1e9
    st = msg.header.stamp
    return int(st.sec) + int(st.nanosec) / 1e9


def _topics(reader: Any) -> dict[str, str]:
    return {c.topic: c.msgtype for c in reader.connections}


def _pick(topics: dict[str, str], wanted: str | None, types: tuple[str, ...], what: str,
          flag: str, where: str) -> str:
    listing = ", ".join(f"{t} ({m})" for t, m in sorted(topics.items())) or "none"
    if wanted is not None:
        if wanted not in topics:
            raise RecordingImportError(f"{where}: no topic {wanted!r}; expected a {what} "
                                       f"topic, found {listing} (pass {flag} with one of them)")
        if topics[wanted] not in types:
            raise RecordingImportError(f"{where}: topic {wanted!r} is {topics[wanted]}; "
                                       f"expected {' or '.join(types)}")
        return wanted
    found = sorted(t for t, m in topics.items() if m in types)
    if len(found) != 1:
        have = "none" if not found else f"{len(found)} ({', '.join(found)})"
        merge = (f" (or {flag} {','.join(found)} to read the joints of all of them: an arm "
                 f"and its gripper on topics of their own)"
                 if found and flag == "--joint-topic" else "")
        raise RecordingImportError(f"{where}: expected one {what} topic ({' or '.join(types)}), "
                                   f"found {have} among {listing}; pass {flag} TOPIC{merge}")
    return found[0]


def _messages(reader: Any, typestore: Any, topic: str | list[str], where: str
              ) -> Iterator[tuple[int, int, Any, str]]:
    """``(index on the topic, bag time ns, message, type)`` of each message on ``topic``;
    over several topics (a list), in the bag's order, ``(index, bag time ns, message,
    its topic)``.

    Raises:
        RecordingImportError: a message that cannot be decoded, or a storage file that
            breaks off while read (the repair named).
    """
    names = {topic} if isinstance(topic, str) else set(topic)
    conns = [c for c in reader.connections if c.topic in names]
    stream = iter(reader.messages(connections=conns))
    k = 0
    while True:
        try:
            conn, bag_ns, raw = next(stream)
        except StopIteration:
            return
        except Exception as exc:  # the storage libraries raise their own types
            raise RecordingImportError(
                f"{where}: topic {', '.join(sorted(names))!r}: reading stopped after {k} "
                f"message(s) "
                f"({type(exc).__name__}: {exc}); {_open_hint(_bag_dir(Path(where)))}") \
                from None
        try:
            msg = typestore.deserialize_cdr(raw, conn.msgtype)
        except Exception as exc:  # rosbags raises several types for a bad message
            raise RecordingImportError(f"{where}: topic {conn.topic!r} message {k}: cannot "
                                       f"decode it as {conn.msgtype} ({type(exc).__name__}: "
                                       f"{exc})") from None
        yield k, int(bag_ns), msg, conn.topic if len(names) > 1 else conn.msgtype
        k += 1


def _decode_frames(reader: Any, typestore: Any, topic: str, picks: np.ndarray,
                   where: str) -> np.ndarray:
    """The frames of messages ``picks`` (indices on ``topic``, in the order wanted) decoded
    into one uint8 ``[len(picks), H, W, 3]`` array: only those, one at a time, so an import
    holds the episode's frames and one message, not every frame of the bag (a 550 MB rgb8
    bag peaked at 1.2 GB decoded whole, 0.65 GB so).

    Raises:
        RecordingImportError: a picked frame of another size than the first picked one
            (in the bag's order), or as :func:`decode_image`.
    """
    slot = {int(k): j for j, k in enumerate(picks)}
    out: np.ndarray | None = None
    last = max(slot)
    filled = 0
    for k, _, msg, msgtype in _messages(reader, typestore, topic, where):
        if k > last:
            break  # every frame kept is read: the rest of the bag is not
        j = slot.get(k)
        if j is None:
            continue
        img = decode_image(msg, msgtype, f"{where}: topic {topic!r} message {k}")
        if out is None:
            out = np.empty((len(picks), *img.shape), np.uint8)
        elif img.shape != out.shape[1:]:
            raise RecordingImportError(
                f"{where}: topic {topic!r} message {k}: a {img.shape[1]}x{img.shape[0]} "
                f"frame after {out.shape[2]}x{out.shape[1]} ones; expected one camera mode "
                f"for the whole recording")
        out[j] = img
        filled += 1
    if out is None or filled != len(picks):
        raise RecordingImportError(f"{where}: topic {topic!r}: {len(picks) - filled} of the "
                                   f"{len(picks)} frames kept were not found on a second "
                                   f"read; expected the bag unchanged while it is imported")
    return out


def _read_joints(reader: Any, typestore: Any, topics: list[str], options: ImportOptions,
                 where: str) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], list[str], int,
                            dict[str, list[float]], dict[str, str], dict[str, int]]:
    """The joint stream: per joint (the episode's name) its stamps and positions (samples
    without a finite position left out), the names in first-seen order, the message
    count, per joint its ``receipt - header`` delays (s; ``stamps="header"`` only), the
    episode's name -> the recording's, and per joint the samples left out as NaN."""
    series: dict[str, list[tuple[float, float]]] = {}
    delays: dict[str, list[float]] = {}
    nan_samples: dict[str, int] = {}
    order: list[str] = []
    recorded: dict[str, str] = {}
    count = 0
    source: dict[str, str] = {}  # the recording's joint name -> its topic
    shared: dict[str, tuple[str, str]] = {}  # a joint on two topics -> the two
    # one pass over all the topics, in the bag's order: the joints in the order it names them
    for k, bag_ns, msg, tag in _messages(reader, typestore, topics, where):
        topic = tag if len(topics) > 1 else topics[0]
        names = list(msg.name)
        pos = np.asarray(msg.position, np.float64).reshape(-1)
        if len(pos) == 0:
            continue  # velocity- or effort-only message
        if len(pos) != len(names):
            raise RecordingImportError(f"{where}: topic {topic!r} message {k}: {len(names)} "
                                       f"names but {len(pos)} positions; expected one "
                                       f"position per name")
        t = _stamp_s(msg, bag_ns, options.stamps)
        count += 1
        for n, v in zip(names, pos, strict=True):
            if n not in series:
                series[n] = []
                delays[n] = []
                order.append(n)
                source[n] = topic
            elif source[n] != topic:
                shared.setdefault(n, (source[n], topic))
                continue
            series[n].append((t, float(v)))
            if options.stamps == "header":
                delays[n].append(bag_ns / 1e9 - t)
    topic = ", ".join(topics)
    if not count:
        raise RecordingImportError(f"{where}: topic {topic!r} has no JointState message with "
                                   f"positions; expected the controller's joint states")
    episode_names = options.renamed(order, where)
    wanted = set(episode_names if options.joint_names is None else options.joint_names)
    both = [n for n in shared if options.joint_name(n) in wanted]
    if both:
        n = both[0]
        raise RecordingImportError(f"{where}: joint {n!r} is on topics {shared[n][0]!r} and "
                                   f"{shared[n][1]!r}; expected each joint on one of the "
                                   f"--joint-topic topics (name one of them, or leave the "
                                   f"joint out with --joints)")
    out = {}
    unstamped = []
    blind = []  # joints with no finite position at all
    for n, name in zip(order, episode_names, strict=True):
        recorded[name] = n
        a = np.asarray(series[n], np.float64)  # (N, 2): stamp s, position
        a = a[np.argsort(a[:, 0], kind="stable")]
        if options.stamps == "header" and a[-1, 0] == 0.0:
            if name in wanted:
                unstamped.append(n)
            continue
        finite = np.isfinite(a[:, 1])  # NaN: a driver's "no reading"
        nan_samples[name] = int((~finite).sum())
        a = a[finite]
        if not len(a):
            if name in wanted:
                blind.append(name)
            continue
        keep = np.concatenate([np.diff(a[:, 0]) > 0, [True]])  # equal stamps: last wins
        a = a[keep]
        if len(a) < 2 and name in wanted:
            raise RecordingImportError(f"{where}: topic {topic!r}: joint {n!r} has "
                                       f"{len(a)} sample(s); expected at least 2 to pair "
                                       f"frames with")
        out[name] = (a[:, 0], a[:, 1])
    if blind:
        others = [x for x in (options.joint_names or episode_names)
                  if x not in blind and x in out]
        leave = (f": leave them out with --joints {','.join(others)}" if others else "")
        raise RecordingImportError(f"{where}: topic {topic!r}: joint(s) {blind} report no "
                                   f"position (NaN in every message: joints without position "
                                   f"feedback){leave}")
    if unstamped:
        others = [x for x, n in zip(episode_names, order, strict=True)
                  if n not in unstamped and x in out]
        unstamped = [options.joint_name(n) for n in unstamped]
        leave = (f", or leave them out with --joints {','.join(others)}" if others and
                 options.joint_names is None else "")
        raise RecordingImportError(f"{where}: topic {topic!r}: joint(s) {unstamped}: "
                                   f"header stamps are zero (their driver does not stamp its "
                                   f"messages): pass --stamps bag to pair by the recording "
                                   f"times{leave}")
    return out, episode_names, count, \
        {name: delays[recorded[name]] for name in out}, recorded, nan_samples


#: A camera whose header stamps lag their arrival in the bag by this much more (or less)
#: than the joints' is named at import (s): beyond a camera's own latency, its clock is
#: likely not the joints' (another computer, a camera clock, a time zone).
CLOCK_NOTE_S = 0.1
def _receive_delay_note(image_s: float, joints_s: float, offset_s: float) -> str | None:
    """The note when the camera's header stamps (plus ``offset_s``) lag their arrival by
    another amount than the joints' (medians, s), or None. The arrival delays cannot tell
    a clock offset from the camera's own latency: the lag ``calibrate check`` measures
    from the frames is the finer figure."""
    diff = image_s - joints_s
    if abs(diff) <= CLOCK_NOTE_S:
        return None
    moved = f" (moved by --image-offset-s {offset_s:+.3f})" if offset_s else ""
    return (f"the camera's header stamps{moved} {_lag_words(image_s)}, the joints' "
            f"{_lag_words(joints_s, short=True)} (medians): {abs(diff):.3f} s apart, more "
            f"than most cameras' latency, so the two are likely stamped on different clocks "
            f"and every frame is paired with the pose of another moment. If so, import "
            f"again with --image-offset-s={offset_s + diff:.3f} (moves every image stamp by "
            f"that much), or --stamps bag; a camera whose own latency is that long (over a "
            f"network) is paired right as it is. 'syncedge calibrate check' measures the lag "
            f"from the frames themselves")


def _lag_words(delay_s: float, short: bool = False) -> str:
    """``lag their arrival in the bag by N ms`` or, for a stamp later than the arrival
    (another clock ahead), ``are N ms ahead of their arrival``."""
    ms = abs(delay_s) * 1e3
    if delay_s >= 0:
        return f"by {ms:.0f} ms" if short else f"lag their arrival in the bag by {ms:.0f} ms"
    return f"{ms:.0f} ms ahead" if short else \
        f"are {ms:.0f} ms ahead of their arrival in the bag (a clock ahead)"


#: Image transport suffixes dropped from an image topic to find the camera's namespace.
_TRANSPORTS = ("compressed", "compressedDepth", "theora", "zstd")


def _camera_info(reader: Any, typestore: Any, topic: str | None, image_topic: str,
                 topics: dict[str, str], where: str) -> tuple[dict[str, Any] | None, str | None]:
    """The camera's intrinsics from a ``sensor_msgs/msg/CameraInfo`` topic: ``topic``, else
    the ``camera_info`` beside the image topic (``/cam/image_raw/compressed`` ->
    ``/cam/camera_info``), else the bag's only one. The first message with a calibration
    (K not zero) counts. ``fovy_deg``: the vertical field of view,
    ``2 atan(height / (2 fy))`` in degrees.

    Returns:
        ``(intrinsics or None, note or None)``: a topic found without a calibration, or
        the bag's only one taken though not beside the image topic, is said in the note.
    Raises:
        RecordingImportError: ``topic`` named but missing, or without a calibration.
    """
    found = sorted(t for t, m in topics.items() if m == CAMERA_INFO_TYPE)
    named = topic is not None
    if topic is None:
        parts = image_topic.rstrip("/").split("/")
        if parts and parts[-1] in _TRANSPORTS:
            parts = parts[:-1]
        beside = "/".join(parts[:-1]) + "/camera_info"
        topic = beside if beside in found else found[0] if len(found) == 1 else None
        if topic is None:
            return None, None
    else:
        _pick(topics, topic, (CAMERA_INFO_TYPE,), "camera info", "--camera-info-topic", where)
    for _, _, msg, _ in _messages(reader, typestore, topic, where):
        kmat = np.asarray(msg.k, np.float64).reshape(-1)
        h, w = int(msg.height), int(msg.width)
        if kmat.size != 9 or kmat[4] <= 0 or kmat[0] <= 0 or h < 1:
            continue  # a driver publishing before its calibration is loaded
        far = (None if named or topic == beside else
            f"the field of view comes from {topic}, the bag's only CameraInfo, which is not "
            f"beside the image topic {image_topic}: if it is another camera's, import again "
            f"with --camera-info-topic naming the right one")
        return {"topic": topic, "width": w, "height": h, "fx": float(kmat[0]),
                "fy": float(kmat[4]), "cx": float(kmat[2]), "cy": float(kmat[5]),
                "distortion_model": str(msg.distortion_model),
                "d": [float(x) for x in np.asarray(msg.d, np.float64).reshape(-1)],
                "fovy_deg": float(np.degrees(2 * np.arctan(h / (2 * float(kmat[4])))))}, far
    if named:
        raise RecordingImportError(f"{where}: topic {topic!r}: no CameraInfo message holds a "
                                   f"calibration (K zero or height 0 in every one); expected "
                                   f"the camera's intrinsics (calibrate the camera), or leave "
                                   f"--camera-info-topic out and give 'calibrate store --chain' "
                                   f"--fovy-deg")
    return None, (f"CameraInfo {topic} holds no calibration (K zero in every message): no "
                  f"field of view taken from it ('calibrate store --chain' then needs "
                  f"--fovy-deg)")


#: The magic bytes an MCAP file starts and, once finished, ends with (the MCAP
#: specification, "Magic").
MCAP_MAGIC = b"\x89MCAP0\r\n"


def _mcap_finished(path: Path) -> bool:
    """Whether an MCAP file ends with its magic bytes (a writer that closed it)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() < 2 * len(MCAP_MAGIC):
                return False
            f.seek(-len(MCAP_MAGIC), os.SEEK_END)
            return f.read() == MCAP_MAGIC
    except OSError:
        return False


def _open_hint(bag: Path) -> str:
    """What to do about a bag the reader cannot open or read through."""
    mcap, db3 = any(bag.glob("*.mcap")), any(bag.glob("*.db3"))
    how = " or ".join((["recover the MCAP file with 'mcap recover FILE -o FIXED.mcap'"]
                       if mcap or not db3 else [])
                      + (["recover the SQLite3 file with 'sqlite3 FILE .recover | sqlite3 "
                          "FIXED.db3'"] if db3 or not mcap else []))
    return (f"the storage file may be cut short or damaged (a recording not stopped "
            f"cleanly, an incomplete copy): {how}, put it alone in a folder and write its "
            f"metadata with 'ros2 bag reindex FOLDER'")


def import_rosbag2(source: str | os.PathLike[str], options: ImportOptions, *,
                   image_topic: str | None = None, joint_topic: str | None = None,
                   camera_info_topic: str | None = None) -> Episode:
    """Read a rosbag2 recording into an episode (see the module docstring).

    Args:
        source: the bag folder (``metadata.yaml``) or its ``.mcap``/``.db3`` file.
        options: ids, kind, joints, pairing options, stamp source, image stamp offset.
        image_topic, joint_topic: the topics (default: the bag's only image topic, its only
            JointState topic).
        camera_info_topic: the ``sensor_msgs/msg/CameraInfo`` topic whose intrinsics go to
            ``metadata.camera`` (``fovy_deg`` and the pinhole; default: the ``camera_info``
            beside the image topic, else the bag's only one, else none).

    Returns:
        A validated episode: frames uint8 ``[T, H, W, 3]`` at the camera's size and rate,
        timestamps float64 ``[T]`` s from the first paired frame, joint positions float64
        ``[T, A]``, actions float32 ``[T, A]``. ``metadata.extra["import"]`` holds what the
        import did, with ``notes`` (the camera's and the joints' stamps on other clocks,
        gaps in the camera's frames, joints that never move in a calibration).
    Raises:
        MissingDependencyError: ``rosbags`` is not installed.
        RecordingImportError: the bag cannot be opened (no metadata.yaml, a damaged or cut
            storage file: the fix named), a topic is missing or ambiguous, a message cannot
            be decoded, the frame size changes, or frames cannot be paired.
    """
    Reader, typestore = _rosbags()
    src = Path(source)
    bag = _bag_dir(src)
    where = str(src)
    if not (bag / "metadata.yaml").is_file():
        cut = [p.name for p in sorted(bag.glob("*.mcap")) if not _mcap_finished(p)]
        first = (f"{', '.join(cut)} does not end as a finished MCAP file (a recording still "
                 f"being written, or stopped without closing): recover it first with 'mcap "
                 f"recover FILE -o FIXED.mcap' (the mcap command-line tool), put FIXED.mcap "
                 f"alone in a folder, then " if cut else "")
        raise RecordingImportError(
            f"{where}: no metadata.yaml in {bag} beside the storage file (a recording that "
            f"did not finish, or a file copied alone): {first}write it with 'ros2 bag "
            f"reindex FOLDER' (on any machine with ROS 2), then import the folder")
    try:
        reader = Reader(bag)
        reader.open()
    except Exception as exc:  # rosbags' ReaderError and the storage libraries' errors
        raise RecordingImportError(f"{where}: cannot open it as a rosbag2 recording "
                                   f"({type(exc).__name__}: {exc}); {_open_hint(bag)}") \
            from None
    try:
        return _import_open_bag(reader, typestore, bag, where, options, image_topic,
                                joint_topic, camera_info_topic)
    finally:
        reader.close()


def _import_open_bag(reader: Any, typestore: Any, bag: Path, where: str,
                     options: ImportOptions, image_topic: str | None,
                     joint_topic: str | None, camera_info_topic: str | None) -> Episode:
    """:func:`import_rosbag2` on an opened reader: the stamps first, then only the frames
    kept decoded."""
    topics = _topics(reader)
    wanted_topics = list(dict.fromkeys(t.strip() for t in joint_topic.split(","))) \
        if joint_topic else [None]
    jts = [_pick(topics, t, (JOINT_TYPE,), "joint state", "--joint-topic", where)
           for t in wanted_topics]
    jt = ",".join(jts)
    it = _pick(topics, image_topic, IMAGE_TYPES, "image", "--image-topic", where)
    joints, order, n_joint_msgs, joint_delays, recorded, nan_samples = _read_joints(
        reader, typestore, jts, options, where)
    stamps: list[float] = []
    image_delays: list[float] = []
    frame_id = ""
    encoding = ""
    for _, bag_ns, msg, _ in _messages(reader, typestore, it, where):
        # stamps only: the frames kept are decoded after pairing
        t = _stamp_s(msg, bag_ns, options.stamps)
        stamps.append(t + options.image_offset_s)
        if options.stamps == "header":
            image_delays.append(bag_ns / 1e9 - (t + options.image_offset_s))
        frame_id = frame_id or str(msg.header.frame_id)
        encoding = encoding or str(getattr(msg, "encoding", "") or
                                   getattr(msg, "format", ""))
    info, info_note = _camera_info(reader, typestore, camera_info_topic, it, topics, where)
    if not stamps:
        raise RecordingImportError(f"{where}: topic {it!r} has no messages; expected the "
                                   f"camera's frames")
    names = order if options.joint_names is None else list(options.joint_names)
    missing = [n for n in names if n not in joints]
    if missing:
        raise RecordingImportError(f"{where}: topic {jt!r}: joint(s) {missing} never appear; "
                                   f"found {order} (pass --joints with names from that list)")
    st = np.asarray(stamps, np.float64)
    if options.stamps == "header" and st.max() == options.image_offset_s:
        raise RecordingImportError(f"{where}: topic {it!r}: header stamps are zero; the "
                                   f"driver does not stamp its frames: pass --stamps bag")
    notes: list[str] = []
    delays = None
    if image_delays:
        jd = np.concatenate([np.asarray(joint_delays[n], np.float64) for n in names])
        delays = {"image": round(float(np.median(image_delays)), 6),
                  "joints": round(float(np.median(jd)), 6)}
        note = _receive_delay_note(delays["image"], delays["joints"], options.image_offset_s)
        if note:
            notes.append(note)
    origin = float(st.min())  # the camera's first frame: what --from-s/--to-s count from
    pos = np.arange(len(st))  # message indices on the image topic
    window = None
    if options.from_s is not None or options.to_s is not None:
        lo = origin + (options.from_s or 0.0)
        hi = origin + options.to_s if options.to_s is not None else np.inf
        inside = (st >= lo) & (st <= hi)
        if inside.sum() < 2:
            raise RecordingImportError(
                f"{where}: --from-s/--to-s {options.from_s}..{options.to_s} s hold "
                f"{int(inside.sum())} frame(s) of the camera's {st.max() - origin:.2f} s; "
                f"expected a window within it (seconds from the first frame)")
        window = {"from_s": options.from_s, "to_s": options.to_s,
                  "frames_outside": int((~inside).sum())}
        pos, st = pos[inside], st[inside]
    considered = len(st)  # the frames the episode is made from (the window's)
    reordered = int((np.diff(st) < 0).sum())
    order_ = np.argsort(st, kind="stable")
    idx, st = pos[order_], st[order_]
    first = np.concatenate([[True], np.diff(st) > 0])  # a repeated stamp: keep the first
    duplicates = int((~first).sum())
    idx, st = idx[first], st[first]
    nans = {n: nan_samples[n] for n in names if nan_samples.get(n)}
    try:
        keep, q, err = pair_positions(st, joints, names, options.max_joint_gap_s, where,
                                      origin_s=origin)
    except RecordingImportError as exc:
        nan_said = (f"; samples without a position (NaN) were left out, which leaves gaps: "
                    f"{', '.join(f'{n} {c}' for n, c in nans.items())}" if nans else "")
        raise RecordingImportError(f"{exc}{nan_said}" + (f"; {notes[0]}" if notes else "")) \
            from None
    before = int(np.argmax(keep))
    after = int(len(keep) - 1 - np.flatnonzero(keep)[-1])
    if before + after and notes:
        notes[0] += (f" ({before + after} frame(s) outside the joint samples were left out; "
                     f"with the stamps right they may pair)")
    sel = idx[keep]
    if nans:
        notes.append(f"joint samples without a position (NaN) left out: "
                     f"{', '.join(f'{n} {c}' for n, c in nans.items())}; frames between are "
                     f"paired across them (at most --max-joint-gap-s apart)")
    gaps = frame_gaps(st[keep])
    if gaps:
        t0 = float(st[keep][0])
        longest = max(gaps, key=lambda g: g[1])
        notes.append(f"the camera's frames stop for {longest[1]:.3f} s before frame "
                     f"{longest[0]} ({float(st[keep][longest[0]]) - t0:.2f} s in)"
                     + (f", {len(gaps)} gaps in all (over {GAP_PERIODS:g} frame periods; "
                        f"frames {[g[0] for g in gaps][:10]})" if len(gaps) > 1 else "")
                     + ": frames were lost on the way (camera link, bag recorder falling "
                       "behind); a sweep across the gap is not seen there")
    storage = "mcap" if any(bag.glob("*.mcap")) else "sqlite3" if any(bag.glob("*.db3")) \
        else "unknown"
    frames_arr = _decode_frames(reader, typestore, it, sel, where)
    h, w = frames_arr.shape[1:3]
    n_samples = {n: int(len(joints[n][0])) for n in names}
    camera = {"topic": it, "frame_id": frame_id, "width": int(w), "height": int(h)}
    if info_note:
        notes.append(info_note)
    if info is not None:
        camera["fovy_deg"] = round(info["fovy_deg"], 6)
        camera["intrinsics"] = {k: v for k, v in info.items() if k not in ("fovy_deg",)}
        if (info["width"], info["height"]) != (int(w), int(h)):
            notes.append(f"CameraInfo {info['topic']} is for {info['width']}x{info['height']} "
                         f"px, the frames are {w}x{h}: the field of view is kept, the "
                         f"pinhole in metadata.camera.intrinsics is the CameraInfo's")
    renamed = {recorded[n]: n for n in names if recorded[n] != n}
    extra = {
        "import": {"format": "rosbag2", "source": where, "storage": storage,
                   "image_topic": it, "image_type": topics[it], "encoding": encoding,
                   "joint_topic": jt, "joints_in_bag": [recorded[n] for n in order],
                   "joints": names, **({"renamed": renamed} if renamed else {}),
                   "stamps": options.stamps, "image_offset_s": options.image_offset_s,
                   "receive_delay_s": delays, "camera_info_topic":
                       info["topic"] if info else None,
                   "frames_in_bag": len(stamps),
                   "frames_reordered": reordered, "frames_duplicate_stamp": duplicates,
                   "frames_before_joints": before, "frames_after_joints": after,
                   **({"window": window} if window else {}),
                   "frame_gaps": [{"frame": i, "missing_s": round(d, 6)} for i, d in gaps],
                   "joint_messages": n_joint_msgs, "joint_samples": n_samples,
                   "joint_samples_nan": nans,
                   "pairing": "linear interpolation per joint at the frame stamp",
                   "max_joint_gap_s": options.max_joint_gap_s, "notes": notes},
        "recording": {"complete": True, "duration_s": round(float(st[keep][-1] -
                                                                  st[keep][0]), 6),
                      "camera_frames": considered, "joint_samples": min(n_samples.values()),
                      "camera_stamps_non_monotonic": duplicates,
                      "gaps": [i for i, _ in gaps],
                      "pair_error_s": [round(float(e), 6) for e in err],
                      "tolerance_s": options.tolerance_s},
        "equipment": {"camera": {"source": "rosbag2", "topic": it, "type": topics[it],
                                 "frame_id": frame_id, "size": [int(w), int(h)]},
                      "joints": {"source": "rosbag2", "topic": jt}},
    }
    ep = episode_from_samples(frames_arr, st[keep], q, names, options,
                              source=f"rosbag2:{where}", robot=None, camera=camera,
                              extra=extra, where=where)
    still = _joints_not_moving(ep) if options.kind == "calibration" else []
    if not still or len(still) == len(names):
        return ep
    moving = [n for n in names if n not in still]
    imp = dict(ep.metadata.extra["import"])
    imp["notes"] = [*imp["notes"], (
        f"joint(s) {still} hardly move in this recording (a calibration sweeps each of its "
        f"joints; check will say 'never_swept'): if they are not joints this calibration "
        f"drives (gripper fingers, a passive joint), import again with --joints "
        f"{','.join(moving)}")]
    return dataclasses.replace(ep, metadata=dataclasses.replace(
        ep.metadata, extra={**dict(ep.metadata.extra), "import": imp}))


def _joints_not_moving(ep: Episode) -> list[str]:
    """The joints of ``ep`` whose positions (rad|m, units converted) span less than
    ingest's smallest sweep (:meth:`edge.calibrate.ingest.IngestOptions.floor`)."""
    from edge.calibrate.ingest import IngestOptions

    q = np.asarray(ep.joint_positions, np.float64)
    floors = IngestOptions()
    return [n for c, (n, u) in enumerate(zip(ep.metadata.dof_names, ep.metadata.dof_units,
                                             strict=True))
            if float(np.ptp(q[:, c])) < floors.floor(u)]
