"""Write small rosbag2 recordings with rosbags' own writer, for the import tests.

A bag holds a ``sensor_msgs/msg/JointState`` topic whose joints move linearly in time
(``q_j(t) = SLOPES[j] * (t - T0)``, so linear interpolation is exact) and an image topic
whose frame ``k`` (in stamp order) is filled with the value ``frame_value(k)``, so the
tests can tell which frame landed where.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

T0 = 1_700_000_000.25  # header stamp of the first frame, s
SLOPES = (0.3, -0.2, 0.15, 0.4, -0.35, 0.1, 0.25)  # rad/s per joint, in NAMES order
NAMES = tuple(f"joint{i + 1}" for i in range(7))
H, W = 24, 32  # frame size, px (not square: rows and columns cannot be swapped unseen)


def frame_value(k: int) -> int:
    """The grey level of frame ``k``."""
    return (17 + 23 * k) % 256


def true_positions(t_s: np.ndarray, names: Sequence[str] = NAMES) -> np.ndarray:
    """Joint positions float64 ``[T, A]`` at stamps ``t_s`` (absolute, s)."""
    slope = np.asarray([SLOPES[NAMES.index(n)] for n in names])
    return (np.asarray(t_s, np.float64)[:, None] - T0) * slope[None, :]


def _stamp(ts, t: float):
    sec = int(np.floor(t))
    return ts.types["builtin_interfaces/msg/Time"](sec=sec, nanosec=int(round((t - sec) * 1e9)))


def _image(ts, kind: str, value: int, t: float, rows: int = H):
    header = ts.types["std_msgs/msg/Header"](stamp=_stamp(ts, t), frame_id="cam")
    H = rows  # noqa: N806 - the frame's height, the module's unless told
    rgb = np.zeros((H, W, 3), np.uint8)
    rgb[..., 0] = value
    rgb[..., 1] = 255 - value
    rgb[..., 2] = value // 2
    rgb[0, 0] = (255, 0, 0)  # a red corner: a channel swap shows
    if kind in ("png", "jpeg"):
        import cv2

        ok, buf = cv2.imencode(".png" if kind == "png" else ".jpg", rgb[..., ::-1])
        assert ok
        return ts.types["sensor_msgs/msg/CompressedImage"](
            header=header, format=kind, data=np.frombuffer(buf.tobytes(), np.uint8)), \
            "sensor_msgs/msg/CompressedImage"
    if kind == "mono8":
        arr, step = rgb[..., :1].copy(), W
    elif kind == "bgr8":
        arr, step = rgb[..., ::-1].copy(), 3 * W
    else:
        arr, step = rgb, 3 * W
    pad = 8 if kind == "rgb8" else 0  # a padded row stride for rgb8
    rows = np.zeros((H, step + pad), np.uint8)
    rows[:, :step] = arr.reshape(H, step)
    return ts.types["sensor_msgs/msg/Image"](
        header=header, height=H, width=W, encoding=kind, is_bigendian=0, step=step + pad,
        data=rows.reshape(-1)), "sensor_msgs/msg/Image"


def expected_rgb(value: int) -> np.ndarray:
    """The frame written for ``value``, as RGB uint8 ``[H, W, 3]``."""
    rgb = np.zeros((H, W, 3), np.uint8)
    rgb[..., 0] = value
    rgb[..., 1] = 255 - value
    rgb[..., 2] = value // 2
    rgb[0, 0] = (255, 0, 0)
    return rgb


def write_bag(path: Path, *, storage: str = "mcap", camera_hz: float = 30.0,
              joint_hz: float = 100.0, frames: int = 12, image: str = "rgb8",
              names: Sequence[str] = NAMES, shuffle_joint_order: bool = False,
              frames_out_of_order: bool = False, joint_lead_s: float = 0.05,
              image_topic: str | None = "/camera/image_raw",
              joint_topic: str | None = "/joint_states", zero_stamps: bool = False,
              joint_gap: tuple[float, float] | None = None,
              joints_out_of_order: bool = False, repeat_stamp_of: int | None = None,
              taller_frame: int | None = None,
              nan_samples: tuple[str, Sequence[int]] | None = None,
              no_position_joint: str | None = None) -> Path:
    """Write a bag at ``path`` (a folder that must not exist); returns ``path``.

    Args:
        storage: ``"mcap"`` or ``"sqlite3"``.
        camera_hz, joint_hz: message rates.
        frames: camera frames; the joint stream covers them with ``joint_lead_s`` to spare.
        image: ``rgb8``, ``bgr8``, ``mono8`` (Image) or ``png``, ``jpeg`` (CompressedImage).
        shuffle_joint_order: each JointState message lists the joints in another order.
        frames_out_of_order: frames are written in a scrambled order (the header stamps
            stay right): the bag's order is not stamp order.
        image_topic, joint_topic: ``None`` leaves that topic out.
        zero_stamps: header stamps left at zero (a driver that does not stamp).
        joint_gap: ``(start_s, stop_s)`` after ``T0`` with no joint message.
        joints_out_of_order: joint messages are written in a scrambled order (stamps right).
        repeat_stamp_of: frame ``k + 1`` carries frame ``k``'s stamp (a driver repeating
            a stamp).
        taller_frame: that frame is 2 rows taller (a camera switching mode).
        nan_samples: ``(joint, message indices)``: that joint's position is NaN there (no
            reading).
        no_position_joint: one more joint in every message, its position always NaN (a
            joint without position feedback).
    """
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.LATEST)
    plugin = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}[storage]
    rng = np.random.default_rng(0)
    msgs: list[tuple[int, str, bytes]] = []  # (bag time ns, topic, raw)
    types: dict[str, str] = {}
    if image_topic is not None:
        order = list(range(frames))
        if frames_out_of_order:
            order = [1, 0, 3, 2] + order[4:-2] + [order[-1], order[-2]]
        for rank, k in enumerate(order):
            t = T0 + (k - 1 if repeat_stamp_of is not None and k == repeat_stamp_of + 1
                      else k) / camera_hz
            msg, mtype = _image(ts, image, frame_value(k), 0.0 if zero_stamps else t,
                                H + 2 if k == taller_frame else H)
            types[image_topic] = mtype
            # the bag time is arrival order: rank, not the frame's stamp
            msgs.append((int((T0 + rank / camera_hz + 0.004) * 1e9), image_topic,
                         bytes(ts.serialize_cdr(msg, mtype))))
    if joint_topic is not None:
        n = int(np.ceil((frames / camera_hz + 2 * joint_lead_s) * joint_hz)) + 1
        for i in range(n):
            t = T0 - joint_lead_s + i / joint_hz
            if joint_gap and joint_gap[0] < t - T0 < joint_gap[1]:
                continue
            perm = list(rng.permutation(len(names))) if shuffle_joint_order \
                else list(range(len(names)))
            sel = [names[p] for p in perm]
            q = true_positions(np.asarray([t]), sel)[0]
            if nan_samples and i in nan_samples[1]:
                q[sel.index(nan_samples[0])] = np.nan
            if no_position_joint:
                sel, q = sel + [no_position_joint], np.append(q, np.nan)
            header = ts.types["std_msgs/msg/Header"](stamp=_stamp(ts, 0.0 if zero_stamps
                                                                  else t), frame_id="")
            msg = ts.types["sensor_msgs/msg/JointState"](
                header=header, name=sel, position=q.astype(np.float64),
                velocity=np.zeros(0, np.float64), effort=np.zeros(0, np.float64))
            types[joint_topic] = "sensor_msgs/msg/JointState"
            # arrival order: scrambled in blocks of 5 when asked (the stamps stay right)
            arrival = T0 - joint_lead_s + ((i // 5) * 5 + (4 - i % 5)) / joint_hz \
                if joints_out_of_order else t
            msgs.append((int((arrival + 0.001) * 1e9), joint_topic,
                         bytes(ts.serialize_cdr(msg, "sensor_msgs/msg/JointState"))))
    msgs.sort(key=lambda m: m[0])
    with Writer(path, version=9, storage_plugin=plugin) as w:
        conns = {topic: w.add_connection(topic, mtype, typestore=ts)
                 for topic, mtype in types.items()}
        for ns, topic, raw in msgs:
            w.write(conns[topic], ns, raw)
    return path


def write_episode_bag(ep, path: Path, *, storage: str = "mcap", image: str = "png",
                      joint_per_frame: int = 5, t0: float = T0, image_offset_s: float = 0.0,
                      drop_frames: tuple[int, int] | None = None,
                      camera_info_fy: float | None = None, prefix: str = "",
                      unstamped_gripper: bool = False, image_topic: str = "/cam/image",
                      own_topic: tuple[str, Sequence[str]] | None = None) -> Path:
    """Write an episode (frames, joint positions) as a bag: frames at the episode's own
    stamps, joint states ``joint_per_frame`` times per frame period (the positions between
    frames on the straight line between them, so pairing at the frame stamps is exact).

    Args:
        ep: an :class:`edge.episode.Episode` with ``joint_positions``.
        image: ``png`` (lossless CompressedImage) or ``rgb8`` (Image).
        image_offset_s: added to the image header stamps only (a camera stamping on a
            clock that far ahead of the joints'; the bag's arrival times stay true).
        drop_frames: ``(first, stop)``: those frames are not written (lost on the way).
        camera_info_fy: write ``/cam/camera_info`` (CameraInfo) with this focal length, px
            (0: a driver without a calibration, K all zero).
        image_topic: the image topic (``/cam/image``).
        own_topic: ``(topic, joints)``: those joints published on a topic of their own (a
            gripper's driver), the others on ``/joint_states``.
        prefix: put before every joint name (a launch file's ``ur5e_``).
        unstamped_gripper: a second publisher on ``/joint_states`` with two constant
            finger joints whose header stamps are zero.
    """
    import cv2
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.LATEST)
    plugin = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}[storage]
    q = np.asarray(ep.joint_positions, np.float64)
    stamps = t0 + np.asarray(ep.timestamps, np.float64)
    names = list(ep.metadata.dof_names)
    with Writer(path, version=9, storage_plugin=plugin) as w:
        img_type = "sensor_msgs/msg/CompressedImage" if image == "png" else \
            "sensor_msgs/msg/Image"
        ci = w.add_connection(image_topic, img_type, typestore=ts)
        cj = w.add_connection("/joint_states", "sensor_msgs/msg/JointState", typestore=ts)
        co = w.add_connection(own_topic[0], "sensor_msgs/msg/JointState", typestore=ts) \
            if own_topic else None
        h, wd = ep.frames.shape[1:3]
        if camera_info_fy is not None:
            cc = w.add_connection("/cam/camera_info", "sensor_msgs/msg/CameraInfo",
                                  typestore=ts)
            header = ts.types["std_msgs/msg/Header"](stamp=_stamp(ts, float(stamps[0])),
                                                     frame_id="cam")
            k9 = np.array([camera_info_fy, 0, wd / 2, 0, camera_info_fy, h / 2, 0, 0, 1],
                          np.float64) if camera_info_fy else np.zeros(9, np.float64)
            roi = ts.types["sensor_msgs/msg/RegionOfInterest"](
                x_offset=0, y_offset=0, height=0, width=0, do_rectify=False)
            info = ts.types["sensor_msgs/msg/CameraInfo"](
                header=header, height=h, width=wd, distortion_model="plumb_bob",
                d=np.zeros(5, np.float64), k=k9, r=np.eye(3).reshape(-1),
                p=np.zeros(12, np.float64), binning_x=0, binning_y=0, roi=roi)
            w.write(cc, int(stamps[0] * 1e9),
                    bytes(ts.serialize_cdr(info, "sensor_msgs/msg/CameraInfo")))
        for k, (t, frame) in enumerate(zip(stamps, ep.frames, strict=True)):
            if unstamped_gripper:
                hg = ts.types["std_msgs/msg/Header"](stamp=_stamp(ts, 0.0), frame_id="")
                js = ts.types["sensor_msgs/msg/JointState"](
                    header=hg, name=["finger_left", "finger_right"],
                    position=np.array([0.02, 0.02]), velocity=np.zeros(0, np.float64),
                    effort=np.zeros(0, np.float64))
                w.write(cj, int(t * 1e9) + 500_000,
                        bytes(ts.serialize_cdr(js, "sensor_msgs/msg/JointState")))
            header = ts.types["std_msgs/msg/Header"](stamp=_stamp(ts, float(t) + image_offset_s),
                                                     frame_id="cam")
            h, wd = frame.shape[:2]
            if image == "png":
                ok, buf = cv2.imencode(".png", np.ascontiguousarray(frame[..., ::-1]))
                assert ok
                msg = ts.types[img_type](header=header, format="png",
                                         data=np.frombuffer(buf.tobytes(), np.uint8))
            else:
                msg = ts.types[img_type](header=header, height=h, width=wd, encoding="rgb8",
                                         is_bigendian=0, step=3 * wd,
                                         data=np.ascontiguousarray(frame).reshape(-1))
            if not (drop_frames and drop_frames[0] <= k < drop_frames[1]):
                w.write(ci, int(t * 1e9) + 2_000_000, bytes(ts.serialize_cdr(msg, img_type)))
            subs = 1 if k == len(stamps) - 1 else joint_per_frame
            for s in range(subs):
                a = s / joint_per_frame
                tj = float(t + a * (stamps[k + 1] - t)) if s else float(t)
                qj = q[k] if s == 0 else (1 - a) * q[k] + a * q[k + 1]
                hj = ts.types["std_msgs/msg/Header"](stamp=_stamp(ts, tj), frame_id="")
                groups = [(cj, [c for c, n in enumerate(names) if not own_topic
                                or n not in own_topic[1]])]
                if own_topic:
                    groups.append((co, [c for c, n in enumerate(names) if n in own_topic[1]]))
                for conn, cols in groups:
                    js = ts.types["sensor_msgs/msg/JointState"](
                        header=hj, name=[prefix + names[c] for c in cols],
                        position=np.asarray(qj, np.float64)[cols],
                        velocity=np.zeros(0, np.float64), effort=np.zeros(0, np.float64))
                    w.write(conn, int(tj * 1e9) + 1_000_000,
                            bytes(ts.serialize_cdr(js, "sensor_msgs/msg/JointState")))
    return path
