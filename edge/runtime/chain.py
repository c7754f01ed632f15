"""The chain model's rollout: a cell's kinematic chain, read from its calibration episode,
moves the arm's pixels; NumPy and OpenCV only (no torch, no ONNX).

A *chain calibration* (the encoded calibration of the chain model, written by ``syncedge
model read-chain``; the fit itself is ``export.models.chain_fit.read_chain``) holds, on the
model's pixel grid and in the calibration home frame's camera coordinates (x right, y down,
z forward; depth unit: the median arm depth):

- which home-frame pixels are arm, one depth per arm pixel, each controller channel's axis
  and pivot and which arm pixels it carries;
- the camera's pinhole (focal length and principal point, px);
- the home frame, the home pose's joint readings and the static scene behind the arm.

A rollout (:func:`chain_rollout`) moves the home points through the chain (the product of
exponentials: every point turned about each joint that carries it, distal joints first;
Lynch and Park, "Modern Robotics", ch. 4) to the start's joint readings and to each
step's (start plus the summed actions), projects them through the pinhole, splats them to
each step (softmax by depth: Niklaus and Liu 2020, "Softmax splatting for video frame
interpolation") and reads each covered pixel's colour from the start frame (where the
start shows the point) or the home frame (where the start hides it) by a backward warp;
what the arm uncovers is drawn from the calibration's background. Zero actions give the
start frame exactly, from any start pose, and relabelling the controller's channels with
the calibration changes nothing (the channels are read, not learned).

:func:`splat_values` and :func:`close_gaps` are the NumPy twins of
``export.models.kinematics.splat_values`` / ``close_gaps`` (float64, same results).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from edge.fileio import atomic_write
from edge.runtime.errors import RuntimeInputError

__all__ = ["CHAIN_FORMAT", "CHAIN_MODEL_SHA256", "HOME_FRAME_TOLERANCE",
           "HOME_JOINTS_TOLERANCE_RAD", "JOINT_SCALE_HELP", "JOINT_SCALE_MODES",
           "TRACKS_HELP", "TRACK_MODES",
           "CHAIN_SCHEMA_VERSION", "CHAIN_SCHEMA_VERSIONS",
           "ChainCalibration", "ChainFileError", "MotionEpisodeError", "frames_sha256",
           "home_differences", "unmodelled_channels", "unmodelled_note",
           "ARM_AT_EDGE_MIN_PX", "arm_at_frame_edge", "arm_at_edge_note",
           "ChainGeometry", "chain_bytes", "chain_from_bytes",
           "AUTO_ANCHOR_BELOW", "LOW_START_AGREEMENT", "START_AGREEMENT_CHANGE",
           "CAMERA_SHIFT_WARN_PX", "SCENE_MIN_RESPONSE", "SCENE_DIFFERS_SHARE", "camera_shift",
           "arm_cover", "checked_start", "chain_positions", "start_agreement", "sweep_check",
           "sweep_segments", "fit_sheet",
           "chain_rollout", "close_gaps", "compose_chain",
           "load_chain_calibration", "save_chain_calibration", "splat_values"]

#: The ``format`` field of a chain calibration file's header.
CHAIN_FORMAT = "syncedge.chain_calibration"
#: Its schema version: 1 (revolute channels only) or 2 (adds ``travel_per_unit``, the
#: prismatic channels). A chain without a prismatic channel is written as schema 1, byte for
#: byte as before schema 2 existed, so a runtime that reads schema 1 only still reads it;
#: one with a prismatic channel is written as schema 2, which such a runtime refuses by name
#: rather than rolling the sliding channel out as a turn. A file of another version is
#: refused by name.
CHAIN_SCHEMA_VERSION = 1
#: The schema versions this runtime reads.
CHAIN_SCHEMA_VERSIONS = (1, 2)
#: The chain model's identity in the calibration cache (the ``model_sha256`` of the cache
#: entries whose context is a chain calibration of this schema): the sha256 of
#: ``"syncedge.chain_calibration/1"``. Schema 2 only adds prismatic channels and keeps this
#: identity (its files are refused by a runtime that reads schema 1 only).
CHAIN_MODEL_SHA256 = hashlib.sha256(f"{CHAIN_FORMAT}/{CHAIN_SCHEMA_VERSION}".encode()).hexdigest()


#: How a chain read maps a revolute channel's joint readings to turns
#: (``export.models.chain_fit.read_chain_calibration(joint_scale=...)``, ``--joint-scale``):
#: ``auto`` (where a sweep is too wide to be rad: degrees if the widest is at most 1 rad as
#: degrees, else the turn per unit fitted; otherwise rad), ``rad`` (the readings are rad),
#: ``deg`` (they are degrees), ``fit`` (fit every revolute channel's turn per unit).
JOINT_SCALE_MODES = ("auto", "rad", "deg", "fit")
#: The ``--joint-scale`` option's help (``model read-chain``, ``calibrate store --chain``).
JOINT_SCALE_HELP = ("how the joint readings map to turns: auto (default: rad, unless a "
                    "revolute channel's sweep is more than a half turn in its readings, which "
                    "rad cannot be: then degrees where the widest sweep is at most 1 rad as "
                    "degrees, 57.3 units, else fitted), rad, deg (1 unit = pi/180 rad), or fit "
                    "(each revolute channel's turn per unit fitted from the frames: encoder "
                    "counts or a normalised range such as LeRobot's -100..100)")

#: How a chain read tracks the calibration sweep
#: (``export.models.chain_fit.read_chain_calibration(colour_tracks=...)``, ``--tracks``):
#: ``colour`` (grey and colour-opponent flows, the default) or ``grey`` (grey alone).
TRACK_MODES = ("colour", "grey")
#: The ``--tracks`` option's help (``model read-chain``, ``calibrate store --chain``).
TRACKS_HELP = ("how the sweep is tracked: on the grey frames and the colour-opponent channels "
               "CIELAB a*, b* with the best colour match kept per pixel (colour, the default: "
               "a saturated link before a background of its own brightness has no edge in "
               "grey), or on grey alone (grey: every chain read before colour, e.g. the "
               "shipped sample's)")

#: Mean absolute difference (uint8 levels) allowed between a chain calibration's home frame
#: and the first frame of the calibration episode it was read from, reduced to its grid.
HOME_FRAME_TOLERANCE = 2.0
#: Largest difference (rad) allowed between a chain calibration's home joint readings and
#: the first of its calibration episode at the sweep's poses: encoders read a held pose to
#: about 1e-5..1e-4 rad.
HOME_JOINTS_TOLERANCE_RAD = 1e-3


class ChainFileError(RuntimeInputError):
    """A chain calibration file is missing, unreadable or malformed; names the file and the
    field, what was expected and what to do."""


class MotionEpisodeError(ValueError):
    """An episode of ordinary motion given to refine a chain with
    (``export.models.chain_fit.refine_chain_with_motion``) that cannot serve; the message
    names the episode and the field."""


def frames_sha256(frames: np.ndarray) -> str:
    """sha256 (hex) of an episode's uint8 frames ``[T, H, W, 3]`` as C-ordered bytes: how a
    chain calibration names the motion episodes it was refined with
    (``info["motion"][i]["frames_sha256"]``), independent of the file they came in."""
    return hashlib.sha256(np.ascontiguousarray(frames).tobytes()).hexdigest()


def home_differences(chain: ChainCalibration, first_joints: np.ndarray | None,
                     first_frame: np.ndarray) -> tuple[bool, float]:
    """How a calibration episode's first pose differs from a chain's home: ``(joints
    match, frame difference)``. The joints match when every reading ``first_joints``
    (float ``[K]``, None: none recorded, no match) is within
    :data:`HOME_JOINTS_TOLERANCE_RAD` of ``chain.home_joint_positions``; the frame
    difference is the mean absolute difference (uint8 levels) of ``first_frame`` (uint8
    ``[H, W, 3]`` on the chain's grid) from ``chain.home_frame``, to compare with
    :data:`HOME_FRAME_TOLERANCE`. A chain read from the episode matches on both."""
    joints_ok = first_joints is not None and bool(np.allclose(
        np.asarray(first_joints, np.float64), chain.home_joint_positions, rtol=0.0,
        atol=HOME_JOINTS_TOLERANCE_RAD))
    diff = float(np.abs(np.asarray(first_frame, np.float64) - chain.home_frame).mean())
    return joints_ok, diff


@dataclass
class ChainCalibration:
    """A cell's chain as read from its calibration episode, with what a rollout draws from.

    Grid ``H x W`` (the model's), ``K`` controller channels, ``N`` arm pixels.

    Attributes:
        robot: bool ``[H, W]``, the home frame's arm pixels.
        depth: float64 ``[N]``, each arm pixel's depth (row-major order of ``robot``), in
            the median arm depth (a gauge: only ratios are observable).
        axes: float64 ``[K, 3]``, each channel's unit axis: a positive change of the
            channel's reading turns its points right-handed about it, or for a prismatic
            channel slides them along it (zero where the calibration showed no motion of
            the channel: it moves nothing).
        pivots: float64 ``[K, 3]``, a point on each axis (same unit as depth).
        carried: float64 ``[K, N]`` in [0, 1], how much each channel carries each point.
        rad_per_unit: float64 ``[K]``, the turn (rad) per unit of each channel's reading
            (0 for a prismatic channel).
        focal_px: the camera's focal length on the grid, px.
        centre_px: float64 ``[2]``, its principal point on the grid, px (pixel i's centre
            at i + 0.5).
        residual_px: float64 ``[K]``, each channel's RMS track residual of the fit, px.
        home_frame: uint8 ``[H, W, 3]``, the calibration's home frame on the grid.
        home_joint_positions: float64 ``[K]``, the home pose's joint readings
            (controller order and unit).
        background: float32 ``[H, W, 3]``, the static scene where some calibration frame
            shows it uncovered (0-255).
        background_seen: bool ``[H, W]``, where it does.
        dof_names: the ``K`` channel names, controller order.
        info: provenance (source calibration and its sha256, reading options, timings).
        travel_per_unit: float64 ``[K]``, >= 0, how far (depth unit) a prismatic channel
            slides its points along its axis per unit of its reading (a gripper's m); 0 for
            a revolute channel. None: every channel revolute (a schema-1 file).
    """

    robot: np.ndarray
    depth: np.ndarray
    axes: np.ndarray
    pivots: np.ndarray
    carried: np.ndarray
    rad_per_unit: np.ndarray
    focal_px: float
    centre_px: np.ndarray
    residual_px: np.ndarray
    home_frame: np.ndarray
    home_joint_positions: np.ndarray
    background: np.ndarray
    background_seen: np.ndarray
    dof_names: list[str]
    info: dict = field(default_factory=dict)
    travel_per_unit: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.travel_per_unit is None:
            self.travel_per_unit = np.zeros(len(self.dof_names))

    @property
    def prismatic(self) -> np.ndarray:
        """bool ``[K]``, the channels that slide (``travel_per_unit > 0``)."""
        return np.asarray(self.travel_per_unit) > 0

    @property
    def resolution(self) -> tuple[int, int]:
        """The grid ``(H, W)``."""
        h, w = self.robot.shape
        return int(h), int(w)

    @property
    def frame_rate_hz(self) -> float | None:
        """The calibration episode's frame rate (Hz, ``info.calibration.fps``), or None
        where the file does not record it."""
        fps = (self.info.get("calibration") or {}).get("fps")
        return float(fps) if fps else None

    @property
    def num_dof(self) -> int:
        """``K``, the controller channels."""
        return len(self.dof_names)

    def validate(self, who: str = "chain calibration") -> None:
        """Check shapes, dtypes and values; raises :class:`ChainFileError` naming ``who``
        and the field."""
        def bad(name: str, expected: str, found: str) -> ChainFileError:
            return ChainFileError(f"{who}: field '{name}': expected {expected}, found "
                                  f"{found}; read the calibration again with `syncedge "
                                  "model read-chain`")

        if self.robot.dtype != bool or self.robot.ndim != 2:
            raise bad("robot", "bool [H, W]", f"{self.robot.dtype} {list(self.robot.shape)}")
        h, w = self.robot.shape
        n, k = int(self.robot.sum()), len(self.dof_names)
        shapes = {"depth": (n,), "axes": (k, 3), "pivots": (k, 3), "carried": (k, n),
                  "rad_per_unit": (k,), "travel_per_unit": (k,), "centre_px": (2,),
                  "residual_px": (k,), "home_frame": (h, w, 3), "home_joint_positions": (k,),
                  "background": (h, w, 3), "background_seen": (h, w)}
        for name, shape in shapes.items():
            a = np.asarray(getattr(self, name))
            if a.shape != shape:
                raise bad(name, f"shape {list(shape)}", f"{list(a.shape)}")
            if a.dtype != bool and not np.all(np.isfinite(a.astype(np.float64))):
                raise bad(name, "finite values", "NaN or inf")
        if self.home_frame.dtype != np.uint8:
            raise bad("home_frame", "uint8", str(self.home_frame.dtype))
        if self.background_seen.dtype != bool:
            raise bad("background_seen", "bool", str(self.background_seen.dtype))
        if k < 1:
            raise bad("dof_names", "at least one channel", "none")
        if n and (self.depth <= 0).any():
            raise bad("depth", "positive depths", f"min {float(self.depth.min()):.3g}")
        norm = np.linalg.norm(self.axes, axis=1)
        if (np.minimum(np.abs(norm - 1.0), norm) > 1e-6).any():
            raise bad("axes", "unit vectors (zero for a channel the sweep showed no motion "
                      "of)", f"lengths {np.round(norm, 4).tolist()}")
        if ((self.carried < 0) | (self.carried > 1)).any():
            raise bad("carried", "values in [0, 1]", "others")
        travel = np.asarray(self.travel_per_unit, np.float64)
        if (travel < 0).any():
            raise bad("travel_per_unit", "values >= 0 (the direction is the axis')",
                      str(np.round(travel, 4).tolist()))
        both = (travel > 0) & (np.asarray(self.rad_per_unit) != 0)
        if both.any():
            raise bad("travel_per_unit", "0 where rad_per_unit is not (a channel turns or "
                      "slides)", f"both on channels {np.nonzero(both)[0].tolist()}")
        if not (np.isfinite(self.focal_px) and self.focal_px > 0):
            raise bad("focal_px", "a positive focal length (px)", str(self.focal_px))
        if len(set(self.dof_names)) != k:
            raise bad("dof_names", "distinct names", str(self.dof_names))

    @property
    def schema_version(self) -> int:
        """The file schema this chain needs: 2 with a prismatic channel, else 1."""
        return 2 if self.prismatic.any() else 1

    def arrays(self) -> dict[str, np.ndarray]:
        """The array fields by name (what the file stores besides its header;
        ``travel_per_unit`` only with a prismatic channel, so a revolute chain's file and
        digest are schema 1's)."""
        out = {"robot": self.robot, "depth": self.depth, "axes": self.axes,
               "pivots": self.pivots, "carried": self.carried,
               "rad_per_unit": self.rad_per_unit, "centre_px": self.centre_px,
               "residual_px": self.residual_px, "home_frame": self.home_frame,
               "home_joint_positions": self.home_joint_positions,
               "background": self.background, "background_seen": self.background_seen}
        if self.schema_version >= 2:
            out["travel_per_unit"] = np.asarray(self.travel_per_unit, np.float64)
        return out

    def sha256(self) -> str:
        """A digest of the arrays, focal length and channel names (not ``info``)."""
        h = hashlib.sha256()
        for name, a in sorted(self.arrays().items()):
            a = np.ascontiguousarray(a)
            h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
            h.update(a.tobytes())
        h.update(repr(float(self.focal_px)).encode())
        h.update(json.dumps(self.dof_names).encode())
        return h.hexdigest()


#: :func:`arm_at_frame_edge`: the arm is said to run out of the view where at least this
#: many of its grid pixels lie on the frame's border at home. On the kept reads of the 128
#: held-out robot and convention cells none had 1-2; the 9 convention cells with 3 or
#: more reach anchored retrieval@8 / @16 0.64 / 0.53 against 0.76 / 0.74 for the other 55
#: (docs/eval/experiments.md, "Channels the read leaves out").
ARM_AT_EDGE_MIN_PX = 3


def arm_at_frame_edge(robot: np.ndarray) -> dict[str, int]:
    """Where the arm runs out of the view at home: its pixels on each border row and column
    of the grid. ``robot``: bool ``[H, W]`` (a chain calibration's ``robot``). Returns
    ``{"top", "bottom", "left", "right"}`` counts (a corner pixel counts on both of its
    sides)."""
    r = np.asarray(robot, bool)
    return {"top": int(r[0].sum()), "bottom": int(r[-1].sum()),
            "left": int(r[:, 0].sum()), "right": int(r[:, -1].sum())}


def arm_at_edge_note(robot: np.ndarray, where: str) -> str | None:
    """The warning for a chain whose arm runs out of the view at home (at least
    :data:`ARM_AT_EDGE_MIN_PX` border pixels, :func:`arm_at_frame_edge`), or None: the
    links beyond the frame are not in the chain (it draws only what the home frame shows),
    so poses that bring them into view are predicted without them. ``where``: the chain's
    name for the message."""
    sides = arm_at_frame_edge(robot)
    if sum(sides.values()) < ARM_AT_EDGE_MIN_PX:
        return None
    h, w = np.shape(robot)
    named = ", ".join(f"{k} ({v} of {w if k in ('top', 'bottom') else h} px)"
                      for k, v in sides.items() if v)
    return (f"{where}: the arm runs out of the view at home along the frame's {named}: the "
            f"links beyond it are not in the chain, which draws only what the home frame "
            f"shows, so a motion that brings them into view is predicted without them "
            f"(on held-out cells so framed, retrieval at step 16 fell from 0.74 to 0.53); "
            f"frame the whole arm with some margin if the cell allows, then record the "
            f"calibration again")


def unmodelled_channels(chain: ChainCalibration, why: dict[int, str] | None = None
                        ) -> list[dict[str, Any]]:
    """The channels the chain does not model: no axis (or no slide) and no arm pixel
    carried, so turning them alone predicts no change.

    Args:
        chain: the chain calibration.
        why: ``{channel index: reason}`` from the read (``ChainFit.left_out``); None: the
            reasons recorded in ``chain.info["unmodelled_channels"]``, else a general one.

    Returns:
        ``[{"channel": name, "index": k, "why": text}]`` in channel order; empty when every
        channel is modelled.
    """
    recorded = {int(r["index"]): str(r["why"])
                for r in chain.info.get("unmodelled_channels") or ()
                if isinstance(r, dict) and "index" in r and "why" in r}
    reasons = recorded if why is None else {int(c): str(w) for c, w in why.items()}
    axes = np.asarray(chain.axes, np.float64)
    carried = np.asarray(chain.carried)
    out = []
    for c, name in enumerate(chain.dof_names):
        if np.any(axes[c]) and np.any(carried[c] > 0):
            continue
        out.append({"channel": name, "index": c,
                    "why": reasons.get(c, "the calibration showed no motion of it: no axis, "
                                          "no arm pixel carried")})
    return out


def unmodelled_note(rows: list[dict[str, Any]], where: str) -> str:
    """One line naming the channels of :func:`unmodelled_channels` (``rows``) and why, for
    ``where`` (the chain's name): what ``model read-chain`` and ``calibrate store --chain``
    warn about."""
    named = ", ".join(f"{r['channel']} [{r['index']}]" for r in rows)
    whys = "; ".join(f"{r['channel']}: {r['why']}" for r in rows)
    one = len(rows) == 1
    return (f"{where}: {named} {'is' if one else 'are'} not modelled ({whys}): the chain "
            f"predicts no motion of {'it' if one else 'them'}, so keep-out rules never fire "
            f"for {'it' if one else 'them'}; sweep {'it' if one else 'each'} over a range that "
            "moves the arm in view, then read the chain again")


def chain_bytes(chain: ChainCalibration, where: str = "chain calibration") -> bytes:
    """The bytes of a chain calibration file (what :func:`save_chain_calibration` writes and
    the calibration cache stores as a chain entry's context): a compressed ``.npz`` of the
    arrays and a JSON header with the format, schema version, grid, channel names, focal
    length, content sha256 and ``info``.

    Raises:
        ChainFileError: ``chain`` does not validate (``where`` names it).
    """
    chain.validate(where)
    header = {"format": CHAIN_FORMAT, "schema_version": chain.schema_version,
              "resolution": list(chain.resolution), "dof_names": list(chain.dof_names),
              "focal_px": float(chain.focal_px), "sha256": chain.sha256(), "info": chain.info}
    arrays: dict[str, Any] = {k: np.ascontiguousarray(v) for k, v in chain.arrays().items()}
    arrays["header_json"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def save_chain_calibration(path: str | os.PathLike[str], chain: ChainCalibration) -> Path:
    """Write ``chain`` to ``path`` (:func:`chain_bytes`), atomically: the file is complete
    or absent.

    Raises:
        ChainFileError: ``chain`` does not validate.
    """
    data = chain_bytes(chain, str(path))
    atomic_write(path, lambda f: f.write(data))
    return Path(path)


def load_chain_calibration(path: str | os.PathLike[str]) -> ChainCalibration:
    """Read a chain calibration written by :func:`save_chain_calibration`.

    Raises:
        ChainFileError: a missing or unreadable file, another format or schema version, a
            missing or malformed field, or content whose sha256 is not the header's
            (each names the file and the field).
    """
    p = Path(path)
    if p.is_dir():
        raise ChainFileError(f"{p}: is a folder; expected a chain calibration .npz (written "
                             "by `syncedge model read-chain`)")
    if not p.is_file():
        raise ChainFileError(f"{p}: no such file; write it with `syncedge model read-chain "
                             f"--calibration CALIBRATION.npz --out {p}`")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ChainFileError(f"{p}: cannot read it ({exc.strerror})") from None
    return chain_from_bytes(data, str(p))


def chain_from_bytes(raw: bytes, where: str) -> ChainCalibration:
    """Decode and check the bytes of a chain calibration file (:func:`chain_bytes`).

    Args:
        raw: the file's bytes.
        where: what they are, for messages (a path, or a cache entry).

    Raises:
        ChainFileError: not a chain calibration (not an ``.npz``), damaged or truncated,
            another format or schema version, a missing or malformed field, or content
            whose sha256 is not the header's (each names ``where`` and the field).
    """
    p = where
    head = raw[:4]
    if head != b"PK\x03\x04":
        raise ChainFileError(f"{p}: not a chain calibration: expected a NumPy .npz archive (a "
                             f"zip file, as `syncedge model read-chain` writes), found a file "
                             f"starting with {head!r}")
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        raise ChainFileError(f"{p}: cannot read it as a chain calibration .npz (damaged or "
                             f"truncated: {exc}); read the calibration again") from None
    if "header_json" not in data:
        raise ChainFileError(f"{p}: field 'header_json' missing: not a chain calibration "
                             "(write one with `syncedge model read-chain`)")
    try:
        header = json.loads(bytes(data["header_json"]).decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ChainFileError(f"{p}: field 'header_json': not JSON ({exc})") from None
    if not isinstance(header, dict) or header.get("format") != CHAIN_FORMAT:
        raise ChainFileError(f"{p}: header field 'format': expected '{CHAIN_FORMAT}', found "
                             f"{header.get('format') if isinstance(header, dict) else header!r}")
    version = header.get("schema_version")
    if version not in CHAIN_SCHEMA_VERSIONS or isinstance(version, bool):
        raise ChainFileError(f"{p}: header field 'schema_version': expected one of "
                             f"{', '.join(map(str, CHAIN_SCHEMA_VERSIONS))}, found "
                             f"{version!r}; read the calibration again with this version's "
                             "`syncedge model read-chain`")
    again = "; read the calibration again (`syncedge model read-chain`)"
    for name in ("dof_names", "focal_px", "sha256"):
        if name not in header:
            raise ChainFileError(f"{p}: header field '{name}' missing{again}")
    names = ("robot", "depth", "axes", "pivots", "carried", "rad_per_unit", "centre_px",
             "residual_px", "home_frame", "home_joint_positions", "background",
             "background_seen") + (("travel_per_unit",) if version >= 2 else ())
    for name in names:
        if name not in data:
            raise ChainFileError(f"{p}: field '{name}' missing{again}")
    f64 = {n: data[n].astype(np.float64) for n in names
           if n not in ("robot", "home_frame", "background", "background_seen")}
    dof = header["dof_names"]
    if not isinstance(dof, list) or not all(isinstance(x, str) for x in dof):
        raise ChainFileError(f"{p}: header field 'dof_names': expected a list of strings, "
                             f"found {dof!r}")
    try:
        focal = float(header["focal_px"])
    except (TypeError, ValueError):
        raise ChainFileError(f"{p}: header field 'focal_px': expected a number, found "
                             f"{header['focal_px']!r}") from None
    chain = ChainCalibration(
        robot=data["robot"], depth=f64["depth"], axes=f64["axes"], pivots=f64["pivots"],
        carried=f64["carried"], rad_per_unit=f64["rad_per_unit"], focal_px=focal,
        centre_px=f64["centre_px"], residual_px=f64["residual_px"],
        home_frame=data["home_frame"], home_joint_positions=f64["home_joint_positions"],
        background=data["background"].astype(np.float32),
        background_seen=data["background_seen"], dof_names=list(dof),
        info=header.get("info") or {}, travel_per_unit=f64.get("travel_per_unit"))
    chain.validate(p)
    if chain.schema_version != version:
        raise ChainFileError(f"{p}: header field 'schema_version': {version}, but the file "
                             f"{'has' if chain.prismatic.any() else 'has no'} prismatic "
                             f"channel (schema {chain.schema_version}); read the calibration "
                             "again")
    if chain.sha256() != header["sha256"]:
        raise ChainFileError(f"{p}: content sha256 {chain.sha256()[:12]}... is not the "
                             f"header's {str(header['sha256'])[:12]}...: the file was altered "
                             "or damaged; read the calibration again")
    return chain


# -- geometry ------------------------------------------------------------------------------


class ChainGeometry(Protocol):
    """What the geometry functions read: :class:`ChainCalibration`'s (or the fit's)
    ``robot``, ``depth``, ``axes``, ``pivots``, ``carried``, ``rad_per_unit``,
    ``travel_per_unit`` (None: every channel revolute), ``focal_px`` and ``centre_px``."""

    robot: np.ndarray
    depth: np.ndarray
    axes: np.ndarray
    pivots: np.ndarray
    carried: np.ndarray
    rad_per_unit: np.ndarray
    travel_per_unit: np.ndarray | None
    focal_px: float
    centre_px: np.ndarray


def compose_chain(points: np.ndarray, axes: np.ndarray, pivots: np.ndarray,
                  angles: np.ndarray, carried: np.ndarray,
                  travel: np.ndarray | None = None) -> np.ndarray:
    """The product of exponentials: every point moved by each joint that carries it.

    Args:
        points: float64 ``[N, 3]`` at the reference pose.
        axes, pivots: float64 ``[K, 3]``, unit axes and a point on each.
        angles: float64 ``[S, K]``, each joint's turn from the reference pose, rad.
        carried: float64 ``[K, N]`` in [0, 1] (a soft value blends the moved and unmoved
            point).
        travel: float64 ``[S, K]``, each joint's slide along its axis from the reference
            pose (the points' unit; a prismatic joint's), or None: none.

    Returns:
        float64 ``[S, N, 3]``. The joints are applied distal first, the order following
        from the memberships (a proximal joint carries more points), as
        ``export.models.kinematics.compose_chain`` does; each joint's motion is the screw
        ``x -> R (x - o) + o + d w``: Rodrigues' rotation matrix
        ``R = I + sin t [w]x + (1 - cos t) [w]x^2`` about the line through the pivot ``o``
        and the slide ``d`` along the axis ``w`` (Murray, Li and Sastry, *A Mathematical
        Introduction to Robotic Manipulation*, 1994, ch. 2: a revolute joint has ``d = 0``,
        a prismatic one ``t = 0``).
    """
    order = np.argsort(-carried.sum(1), kind="stable")
    points = np.asarray(points, np.float64)
    s = len(angles)
    # points carried by the same joints (a serial chain: one group per link) move by one
    # affine map per step, the product of their joints' maps; a soft membership c blends
    # a joint's map with the identity, x -> ((1 - c) I + c R) x + c (o - R o + d w), which
    # is affine too. Composing the maps per group and step, then applying each group's
    # once, gives the same points as moving them joint by joint, at a fraction of the work.
    groups, member = np.unique(carried.T, axis=0, return_inverse=True)
    member = member.reshape(-1)
    if len(groups) > MAX_COMPOSE_GROUPS:
        return _compose_by_joint(points, axes, pivots, angles, carried, travel, order)
    eye = np.eye(3)
    rots, shifts = {}, {}
    for j in order[::-1]:
        if not groups[:, j].any():
            continue
        w, o = axes[j], pivots[j]
        rot = _rodrigues(w, angles[:, j])
        shift = o - rot @ o
        if travel is not None:
            shift = shift + travel[:, j, None] * w
        rots[j], shifts[j] = rot, shift
    out = np.empty((s,) + points.shape)
    for g, col in enumerate(groups):
        lin = np.broadcast_to(eye, (s, 3, 3))
        off = np.zeros((s, 3))
        for j in order[::-1]:  # distal first
            c = col[j]
            if c == 0:
                continue
            lj = rots[j] if c == 1 else (1.0 - c) * eye + c * rots[j]
            lin = lj @ lin
            off = (lj @ off[..., None])[..., 0] + c * shifts[j]
        idx = member == g
        out[:, idx] = np.matmul(points[idx], lin.transpose(0, 2, 1)) + off[:, None]
    return out


def _rodrigues(axis: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """float64 ``[S, 3, 3]``: the rotations by ``angles`` ``[S]`` (rad) about the unit
    ``axis`` ``[3]``, ``R = I + sin t [w]x + (1 - cos t) [w]x^2``."""
    w = axis
    wx = np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])
    return (np.eye(3) + np.sin(angles)[:, None, None] * wx
            + (1.0 - np.cos(angles))[:, None, None] * (wx @ wx))


#: :func:`compose_chain` composes one affine map per group of points carried by the same
#: joints (a serial chain has one group per link); with more groups than this (soft
#: memberships that differ point by point) it moves the points joint by joint instead.
MAX_COMPOSE_GROUPS = 64


def _compose_by_joint(points: np.ndarray, axes: np.ndarray, pivots: np.ndarray,
                      angles: np.ndarray, carried: np.ndarray, travel: np.ndarray | None,
                      order: np.ndarray) -> np.ndarray:
    """:func:`compose_chain` joint by joint (every point moved by each joint in turn)."""
    s = len(angles)
    p = np.broadcast_to(points, (s,) + points.shape).copy()
    for j in order[::-1]:  # distal first
        w, o = axes[j], pivots[j]
        rot = _rodrigues(w, angles[:, j])
        c = carried[j]
        moving = c > 0
        if not moving.any():
            continue
        v = p[:, moving] - o
        turned = np.matmul(v, rot.transpose(0, 2, 1)) + o
        if travel is not None:
            turned = turned + travel[:, j, None, None] * w
        cm = c[moving][None, :, None]
        p[:, moving] += cm * (turned - p[:, moving])
    return p


def _samples(chain: ChainGeometry, upsample: int) -> tuple[np.ndarray, np.ndarray]:
    """Each arm pixel as ``upsample**2`` 3-D samples at sub-pixel centres:
    ``(points [M, 3], carried [K, M])``."""
    ys, xs = np.nonzero(chain.robot)
    off = (np.arange(upsample) + 0.5) / upsample
    oy, ox = np.meshgrid(off, off, indexing="ij")
    u = (xs[:, None] + ox.reshape(1, -1)).reshape(-1)
    v = (ys[:, None] + oy.reshape(1, -1)).reshape(-1)
    z = np.repeat(chain.depth, upsample ** 2)
    pts = np.stack([(u - chain.centre_px[0]) * z / chain.focal_px,
                    (v - chain.centre_px[1]) * z / chain.focal_px, z], -1)
    return pts, np.repeat(chain.carried, upsample ** 2, axis=1)


def chain_positions(chain: ChainGeometry, offsets: np.ndarray, upsample: int = 1
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Where the home points land under joint offsets from the home pose.

    Args:
        chain: :class:`ChainCalibration` (or any object with its geometry fields).
        offsets: float ``[S, K]``, joint readings minus the home pose's (controller unit).
        upsample: each arm pixel as ``upsample**2`` samples.

    Returns:
        ``(uv [S, M, 2] px, z [S, M])`` float64, ``M = N * upsample**2``; depths clamped at
        1e-3.
    """
    off = np.asarray(offsets, np.float64)
    pts, car = _samples(chain, upsample)
    slide = getattr(chain, "travel_per_unit", None)
    moved = compose_chain(pts, chain.axes, chain.pivots, off * chain.rad_per_unit[None], car,
                          None if slide is None or not np.any(slide)
                          else off * np.asarray(slide, np.float64)[None])
    z = np.maximum(moved[..., 2], 1e-3)
    uv = moved[..., :2] / z[..., None] * chain.focal_px + chain.centre_px
    return uv, z


def splat_values(target_px: np.ndarray, values: np.ndarray, size: tuple[int, int],
                 weight: np.ndarray | None = None, depth: np.ndarray | None = None,
                 depth_scale: float = 0.01, samples_per_px: float = 1.0
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample values splatted bilinearly to where the samples land, softmax-weighted
    by depth where given (the nearest surface decides; Niklaus and Liu 2020).

    Args:
        target_px: float ``[B, N, 2]`` (u, v), px, pixel i's centre at i + 0.5; a sample
            at a non-finite position lands nowhere.
        values: float ``[B, N, C]``.
        size: ``(H, W)``.
        weight: float ``[B, N]`` in [0, 1], or None (all 1).
        depth: float ``[B, N]``, or None.
        depth_scale: the depth difference that divides a sample's weight by e.
        samples_per_px: samples per source pixel (density 1 where a pixel's worth landed).

    Returns:
        ``(value float64 [B, H, W, C], density float64 [B, H, W])``; value zero where
        nothing landed.

    Raises:
        ValueError: shapes that do not match.
    """
    target_px = np.asarray(target_px, np.float64)
    values = np.asarray(values, np.float64)
    b, n, _ = target_px.shape
    if target_px.shape[-1] != 2 or values.shape[:2] != (b, n):
        raise ValueError(f"splat_values: target {list(target_px.shape)} and values "
                         f"{list(values.shape)}: expected [B, N, 2] and [B, N, C]")
    h, w = size
    ch = values.shape[-1]
    wt = np.ones((b, n)) if weight is None else np.broadcast_to(
        np.asarray(weight, np.float64), (b, n))
    finite = np.isfinite(target_px).all(-1)
    if not finite.all():
        target_px = np.where(finite[..., None], target_px, -10.0)
        values = np.where(finite[..., None], values, 0.0)
        if depth is not None:
            depth = np.where(finite, depth, 1.0)
    x = target_px[..., 0] - 0.5
    y = target_px[..., 1] - 0.5
    x0, y0 = np.floor(x), np.floor(y)
    base = (np.arange(b) * h * w)[:, None]
    corners = []
    for dy in (0.0, 1.0):
        for dx in (0.0, 1.0):
            xi, yi = x0 + dx, y0 + dy
            bil = np.clip(1.0 - np.abs(x - xi), 0, None) * np.clip(1.0 - np.abs(y - yi), 0,
                                                                    None)
            inside = (xi >= 0) & (xi < w) & (yi >= 0) & (yi < h)
            idx = (np.clip(yi, 0, h - 1) * w + np.clip(xi, 0, w - 1)).astype(np.int64) + base
            corners.append((bil * inside, idx))
    imp = [wt] * 4
    if depth is not None:
        z = np.asarray(depth, np.float64)
        zmin = np.full(b * h * w, np.inf)
        for bil, idx in corners:
            hit = bil > 0
            np.minimum.at(zmin, idx[hit], z[hit])
        imp = []
        for _bil, idx in corners:
            near = zmin[idx]
            imp.append(wt * np.exp(-(z - np.where(np.isfinite(near), near, z)) / depth_scale))
    # all four corners in one pass per channel
    fi = np.concatenate([idx.ravel() for _bil, idx in corners])
    bil_all = np.concatenate([bil.ravel() for bil, _idx in corners])
    a = bil_all * np.concatenate([im.ravel() for im in imp])
    nb = b * h * w
    acc = np.empty((ch + 1, nb))
    a4 = a.reshape(4, -1)
    per_channel = np.ascontiguousarray(values.reshape(-1, ch).T)  # [C, B * N]
    for c in range(ch):
        acc[c] = np.bincount(fi, (a4 * per_channel[c]).ravel(), nb)
    acc[ch] = np.bincount(fi, a, nb)
    dens = np.bincount(fi, (bil_all.reshape(4, -1) * wt.reshape(1, -1)).ravel(), nb)
    # where nothing landed every sum is 0 (the weights are >= 0), so 0 / 1 leaves 0
    acc[:ch] /= np.where(acc[ch] > 0, acc[ch], 1.0)
    dens /= samples_per_px
    return acc[:ch].T.reshape(b, h, w, ch), dens.reshape(b, h, w)


def _box3(a: np.ndarray) -> np.ndarray:
    """3x3 sum over axes 1 and 2 with zero padding (separable: rows, then columns)."""
    pad = [(0, 0)] * a.ndim
    pad[1] = (1, 1)
    p = np.pad(a, pad)
    r = p[:, :-2] + p[:, 1:-1] + p[:, 2:]
    pad[1], pad[2] = (0, 0), (1, 1)
    p = np.pad(r, pad)
    return p[:, :, :-2] + p[:, :, 1:-1] + p[:, :, 2:]


def close_gaps(values: np.ndarray, density: np.ndarray, threshold: float = 0.5
               ) -> tuple[np.ndarray, np.ndarray]:
    """Where less than ``threshold`` landed but at least that much landed on average over
    the 3x3 neighbourhood (a gap between stretched samples), the neighbourhood's
    density-weighted mean; elsewhere the value where ``threshold`` landed and zero where it
    did not (the silhouette does not grow). As ``avg_pool2d(..., 3, 1, 1,
    count_include_pad=True)`` in ``export.models.kinematics.close_gaps``.

    Args:
        values: float ``[B, H, W, C]``; density: float ``[B, H, W]`` (:func:`splat_values`).

    Returns:
        ``(values [B, H, W, C], cover bool [B, H, W])``.
    """
    direct = density >= threshold
    d3 = _box3(density) / 9.0
    gap = ~direct & (d3 >= threshold)
    out = np.where(direct[..., None], values, 0.0)
    if gap.any():
        # the neighbourhood means only where they are used: gaps are few
        b, y, x = np.nonzero(gap)
        h, w = density.shape[1:]
        acc = np.zeros((len(b), values.shape[-1]))
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                yy, xx = y + dy, x + dx
                ok = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
                yc, xc = np.clip(yy, 0, h - 1), np.clip(xx, 0, w - 1)
                acc += (values[b, yc, xc] * density[b, yc, xc][:, None]) * ok[:, None]
        out[b, y, x] = acc / 9.0 / np.maximum(d3[b, y, x], 1e-12)[:, None]
    return out, direct | gap


def arm_cover(chain: ChainGeometry, offsets: np.ndarray, upsample: int = 2, depth_scale: float = 0.01
              ) -> np.ndarray:
    """Where the arm lies under joint offsets from the home pose.

    Args:
        chain: :class:`ChainCalibration` (or any object with its geometry fields).
        offsets: float ``[S, K]``, joint readings minus the home pose's.
        upsample, depth_scale: as :func:`chain_rollout`.

    Returns:
        bool ``[S, H, W]``: pixels the arm's samples land on (gaps closed).
    """
    h, w = chain.robot.shape
    uv, z = chain_positions(chain, offsets, upsample)
    val, dens = splat_values(uv, np.zeros(uv.shape[:2] + (1,)), (h, w), depth=z,
                             depth_scale=depth_scale, samples_per_px=upsample ** 2)
    return close_gaps(val, dens)[1]


def checked_start(chain: ChainCalibration, start: np.ndarray,
                  start_joint_positions: np.ndarray,
                  error: type[Exception] = RuntimeInputError) -> tuple[np.ndarray, np.ndarray]:
    """``(start, q0)``: a rollout's start frame (uint8 ``[H, W, 3]`` on the chain's grid)
    and the controller's readings there (float64 ``[K]``, finite), as arrays.

    Raises:
        error (RuntimeInputError by default): a start of another size or dtype, readings
            of another width or not finite; the message names which and what was expected.
    """
    h, w = chain.resolution
    start = np.asarray(start)
    if start.shape != (h, w, 3) or start.dtype != np.uint8:
        raise error(f"start frame: expected uint8 [{h}, {w}, 3] (the chain calibration's "
                    f"grid), found {start.dtype} {list(start.shape)}")
    q0 = np.asarray(start_joint_positions, np.float64)
    if q0.shape != (chain.num_dof,) or not np.isfinite(q0).all():
        raise error(f"start joint readings: expected {chain.num_dof} finite values "
                    f"({', '.join(chain.dof_names)}), found {list(q0.shape)}")
    return start, q0


#: Sum over RGB (0-255 levels) by which a start-frame pixel must differ from the
#: calibration's background to count as showing something in front of it.
START_AGREEMENT_CHANGE = 30.0
#: A chain putting less of the arm it draws at the start on the arm the start frame shows
#: is anchored there first when it can be (``edge.commands.common.anchor_chain``). On 64
#: held-out robot cells (the start agreement read from the background alone, r = 0.96
#: with the share on the true robot mask) anchoring below 0.8 (58 of 64 cells) gave what
#: anchoring every cell did (retrieval@8 0.77 from 0.69; README, "Anchored when the start
#: shows it is needed").
AUTO_ANCHOR_BELOW = 0.8
#: Below this start agreement, even anchored, the prediction is warned about: on those 64
#: cells the 6 anchored starts below 0.5 gained 0.57 dB over copy-last at step 16
#: (retrieval@8 0.48), the others 3.75 dB (0.80).
LOW_START_AGREEMENT = 0.5


#: :func:`match_light` changes nothing unless its mapping lowers the median background
#: mismatch between the start frame and the calibration's background by at least this many
#: uint8 levels (rendered frames under unchanged light, and camera noise alone, stay as
#: they are, bit for bit).
LIGHT_MATCH_MIN_GAIN = 2.0
#: Side (px on the chain's grid) of the blocks over which :func:`match_light` measures
#: what light changed unevenly (a lamp on one side, daylight through a window).
LIGHT_FIELD_BLOCK_PX = 8
#: Fewest background pixels a block needs for its own measurement (else it takes its
#: neighbours', smoothed).
LIGHT_FIELD_MIN_PX = 16


@dataclass(frozen=True)
class LightMatch:
    """How the light changed between the cell's calibration and a start frame, as a
    mapping of the calibration's colours to the start's: ``field * (gain * c + offset)``
    per RGB channel.

    Attributes:
        gain: float64 ``[3]``; offset: float64 ``[3]`` (uint8 levels): the whole frame's
            per-channel affine change.
        field: float32 ``[H, W, 3]``, the uneven part (a smooth multiplicative correction,
            1 where the light changed evenly), or None.
        before: median over the judged pixels of the mean absolute RGB difference between
            the start frame and the calibration's background (levels); after: the same
            with the mapping.
        judged_px: how many background pixels the mapping was measured on.
        applied: whether a rollout uses it (``before - after >= LIGHT_MATCH_MIN_GAIN``).
    """

    gain: np.ndarray
    offset: np.ndarray
    field: np.ndarray | None
    before: float
    after: float
    judged_px: int
    applied: bool

    @classmethod
    def unchanged(cls, judged_px: int = 0, before: float = 0.0) -> LightMatch:
        """The identity (not applied)."""
        return cls(np.ones(3), np.zeros(3), None, before, before, judged_px, False)

    def apply(self, image: np.ndarray) -> np.ndarray:
        """float32 ``[H, W, 3]``: ``image`` (the calibration's light, 0-255) in the start's
        light, clipped to 0-255; ``image`` itself (as float32) where not applied."""
        img = np.asarray(image, np.float32)
        if not self.applied:
            return img
        out = img * self.gain.astype(np.float32) + self.offset.astype(np.float32)
        if self.field is not None:
            out = out * self.field
        return np.clip(out, 0.0, 255.0)

    def invert(self, image: np.ndarray) -> np.ndarray:
        """uint8 ``[H, W, 3]``: ``image`` (the start's light) in the calibration's light
        (the inverse of :meth:`apply`, clipped); ``image`` itself where not applied."""
        img = np.asarray(image)
        if not self.applied:
            return img
        out = img.astype(np.float32)
        if self.field is not None:
            out = out / self.field
        out = (out - self.offset.astype(np.float32)) / self.gain.astype(np.float32)
        return np.clip(np.rint(out), 0, 255).astype(np.uint8)

    def summary(self) -> dict[str, Any]:
        """JSON-ready: applied, gain, offset, the uneven part's range, before/after."""
        f = self.field
        return {"applied": self.applied,
                "gain": [round(float(x), 4) for x in self.gain],
                "offset": [round(float(x), 2) for x in self.offset],
                "field_range": ([round(float(f.min()), 3), round(float(f.max()), 3)]
                                if f is not None else None),
                "background_difference_levels": {"before": round(self.before, 2),
                                                 "after": round(self.after, 2)},
                "judged_px": self.judged_px}


def match_light(chain: ChainCalibration, start: np.ndarray, start_joint_positions: np.ndarray,
                cover: np.ndarray | None = None) -> LightMatch:
    """Measure how the cell's light changed since its calibration, from the start frame.

    A rollout draws the calibration's background where the arm leaves and the home
    frame's arm where the start frame hides it; after a lamp was dimmed, daylight changed
    or the camera's exposure moved, those pixels come out in the old light (a patch of
    another brightness where the arm was), and the start agreement sees every background
    pixel as something in front of the background. The mapping is fitted on the pixels
    where the calibration saw the background and the chain does not put the arm at the
    start (2 px margin), unsaturated in both: per channel an affine change by least
    squares, trimmed three times at 3 MADs (so arm the chain misplaces, or a new object,
    does not pull it), then a smooth multiplicative field from the blocks' medians
    (:data:`LIGHT_FIELD_BLOCK_PX`; blocks with fewer than :data:`LIGHT_FIELD_MIN_PX` such
    pixels take their neighbours'). It is applied only where it lowers the median
    mismatch by :data:`LIGHT_MATCH_MIN_GAIN` levels or more.

    Args:
        chain: :class:`ChainCalibration`.
        start: uint8 ``[H, W, 3]`` on the chain's grid.
        start_joint_positions: float ``[K]``, the readings at the start (controller unit).
        cover: bool ``[H, W]``, where the chain puts the arm at the start (None: computed).

    Returns:
        :class:`LightMatch` (:meth:`LightMatch.unchanged` where fewer than 64 pixels, or
        2% of the frame, can be judged).

    Raises:
        RuntimeInputError: a start of another size, readings of another width.
    """
    import cv2

    start, q0 = checked_start(chain, start, start_joint_positions)
    if cover is None:
        cover = arm_cover(chain, (q0 - chain.home_joint_positions)[None])[0]
    h, w = chain.resolution
    bg = np.asarray(chain.background, np.float64)
    img = start.astype(np.float64)
    near_arm = cv2.dilate(np.asarray(cover, np.uint8), np.ones((5, 5), np.uint8)) > 0
    ok = (np.asarray(chain.background_seen, bool) & ~near_arm
          & (img.max(-1) < 250) & (bg.max(-1) < 250))
    n = int(ok.sum())
    if n < max(64, int(0.02 * h * w)):
        return LightMatch.unchanged(n)
    x, y = bg[ok], img[ok]
    before = float(np.median(np.abs(y - x).mean(-1)))
    if before < LIGHT_MATCH_MIN_GAIN:  # no mapping can lower it by that much
        return LightMatch.unchanged(n, before)
    keep = np.ones(n, bool)
    gain, offset = np.ones(3), np.zeros(3)
    for _ in range(4):
        for c in range(3):
            xc, yc = x[keep, c], y[keep, c]
            var = xc.var()
            if var < 1.0:  # a flat background: a gain cannot be told from an offset
                gain[c], offset[c] = 1.0, float(np.median(yc - xc))
            else:
                gain[c] = float(np.clip(((xc - xc.mean()) * (yc - yc.mean())).mean() / var,
                                        0.2, 5.0))
                offset[c] = float(yc.mean() - gain[c] * xc.mean())
        res = np.abs(y - (x * gain + offset)).mean(-1)
        mad = float(np.median(np.abs(res[keep] - np.median(res[keep])))) * 1.4826
        new_keep = res <= max(3.0 * mad + np.median(res[keep]), 3.0)
        if new_keep.sum() < 32 or (new_keep == keep).all():
            break
        keep = new_keep
    # the uneven part: per block, the median ratio of the start to the mapped background
    bs = LIGHT_FIELD_BLOCK_PX
    gh, gw = -(-h // bs), -(-w // bs)
    mapped = bg * gain + offset
    ratio = np.ones((gh, gw, 3))
    weight = np.zeros((gh, gw))
    inl = np.zeros((h, w), bool)
    inl[ok] = keep
    for by in range(gh):
        for bx in range(gw):
            sl = (slice(by * bs, (by + 1) * bs), slice(bx * bs, (bx + 1) * bs))
            m = inl[sl]
            if m.sum() >= LIGHT_FIELD_MIN_PX:
                # the mapped background can fall below 0 (a negative offset): its level
                # is at least 0, so the ratio (and its log) stays positive
                ratio[by, bx] = ((np.median(img[sl][m], 0) + 1.0)
                                 / (np.maximum(np.median(mapped[sl][m], 0), 0.0) + 1.0))
                weight[by, bx] = 1.0
    uneven = None
    if weight.any():
        # blocks without their own measurement take their neighbours' (weighted blur)
        k = (3, 3)
        num = cv2.blur((np.log(ratio) * weight[..., None]).astype(np.float32), k,
                       borderType=cv2.BORDER_REPLICATE)
        den = cv2.blur(weight.astype(np.float32), k, borderType=cv2.BORDER_REPLICATE)
        smooth = np.where(den[..., None] > 1e-6, num / np.maximum(den, 1e-6)[..., None], 0.0)
        for _ in range(max(gh, gw)):  # blocks with no measured neighbour either
            if (den > 1e-6).all():
                break
            known = (den > 1e-6).astype(np.float32)
            num2 = cv2.blur(smooth * known[..., None], k, borderType=cv2.BORDER_REPLICATE)
            den2 = cv2.blur(known, k, borderType=cv2.BORDER_REPLICATE)
            fillv = np.where(den2[..., None] > 1e-6, num2 / np.maximum(den2, 1e-6)[..., None],
                             0.0)
            smooth = np.where(known[..., None] > 0, smooth, fillv)
            den = np.maximum(den, den2)
        uneven = np.exp(cv2.resize(smooth.astype(np.float32), (w, h),
                                  interpolation=cv2.INTER_LINEAR)).astype(np.float32)
        uneven = np.clip(uneven, 0.5, 2.0)
    lm = LightMatch(gain, offset, uneven, before, before, n, True)
    after = float(np.median(np.abs(y - lm.apply(bg)[ok]).mean(-1)))
    applied = before - after >= LIGHT_MATCH_MIN_GAIN
    return LightMatch(gain, offset, uneven, before, after, n, applied)


#: :func:`camera_shift` says the camera moved where the start frame's background is
#: shifted from the calibration's home frame by at least this many px on the chain's grid.
#: Measured through :func:`start_agreement` with the kept chain reads of 256 held-out cells
#: (64 each of held-out robot, conventions, all held out and stress; 64x64; 3 starts per
#: cell, the arm anywhere): an unmoved camera read 1.0 px or more on 1 of 768 starts
#: (99th percentile 0.30 px); a start shifted by 1.8 px read it on 99.2% (also dimmed to
#: 0.6: 98.4%), by 1 px on 31%.
CAMERA_SHIFT_WARN_PX = 1.0
#: ``precheck`` refuses a start (``--mismatch refuse``, its default) whose scene is shifted
#: by at least this many px on the chain's grid: twice the warning's, so that the 1 in 768
#: unmoved starts read at 1 px above is warned of, not refused.
CAMERA_SHIFT_REFUSE_PX = 2.0


#: :func:`camera_shift` judges a shift only where at least this share of the frame is
#: known static scene left after the arm and what differs from the background are masked.
CAMERA_SHIFT_MIN_SHARE = 0.1

#: :func:`start_agreement`: the start frame does not show the calibration's scene (another
#: camera, as a wrist camera's frame given for a fixed camera's chain; a camera pointed
#: elsewhere; another cell) where the static scene's gradients correlate with the home
#: frame's below this (:func:`camera_shift`'s ``response``)...
SCENE_MIN_RESPONSE = 0.5
#: ...and at least this share of the frame differs from the calibration's background. On
#: 256 starts of 128 held-out robot and convention cells the response was 0.53 at least
#: (0.81 at the 1st percentile; 0.49 under camera noise of 6 levels and JPEG at 70) and at
#: most 7% of the frame differed (99th percentile); a conveyor running through the view
#: differed on up to 39% at a response of 0.74 or more; a wrist camera's frame against a
#: fixed camera's chain read 0.36 with 56% differing, another cell's start 0.24 (median).
SCENE_DIFFERS_SHARE = 0.25


def camera_shift(chain: ChainCalibration, start: np.ndarray,
                 light: LightMatch | None = None,
                 cover: np.ndarray | None = None) -> dict[str, Any]:
    """Has the camera moved since the calibration? The shift of the start frame's static
    scene from the calibration's home frame.

    Phase correlation of the two frames' gradient magnitudes
    (:func:`edge.calibrate.verify.gradient_phase_shift`, ``calibrate verify``'s fallback
    measure), with the arm
    left out of both (one mask, grown by 3 px): the home frame's arm, where the chain puts
    it at the start (``cover``), and whatever in the start frame lies outside the range
    the calibration's background (in the start's light, ``light``) takes over 5x5 px (so
    a scene shifted by 1-2 px is not taken for arm) in blobs wider than a thin line (a
    morphological opening). A light change leaves the gradients' phase as it is. A
    rollout from a moved camera draws the calibration's background and home arm off by
    the shift: such starts are said (:data:`CAMERA_SHIFT_WARN_PX`), and ``calibrate
    verify`` measures it properly. Where the arm and a dense texture leave little of a
    small frame, the common mask pulls the peak towards no shift (a 32x32 test scene
    shifted by 2 px read 0.2-0.5 px): a moved camera may then go unsaid.

    Args:
        chain: :class:`ChainCalibration`.
        start: uint8 ``[H, W, 3]`` on the chain's grid.
        light: the start's :class:`LightMatch` (None: unchanged).
        cover: bool ``[H, W]``, where the chain puts the arm at the start (None: only the
            home frame's arm and the differences are left out).

    Returns:
        ``{"shift_px": [dx, dy], "shift": float (px), "response": float (the
        correlation's peak, about 1 for the same scene), "moved": bool (shift >=
        CAMERA_SHIFT_WARN_PX), "judged_px": int (the static pixels compared)}``; with
        fewer than :data:`CAMERA_SHIFT_MIN_SHARE` of the frame left to compare, no shift
        and ``moved`` False (nothing is known to have moved).
    """
    import cv2

    from edge.calibrate.verify import gradient_phase_shift

    img = np.asarray(start)
    bg = (light or LightMatch.unchanged()).apply(chain.background)
    # outside the background's range over 5x5 px: the arm, not a scene shifted by 1-2 px
    box = np.ones((5, 5), np.uint8)
    above = img.astype(np.float32) - cv2.dilate(bg, box)
    below = cv2.erode(bg, box) - img.astype(np.float32)
    outside = (np.maximum(above, 0) + np.maximum(below, 0)).sum(-1)
    differs = ((outside > START_AGREEMENT_CHANGE)
               | ~np.asarray(chain.background_seen, bool)).astype(np.uint8)
    differs = cv2.morphologyEx(differs, cv2.MORPH_OPEN, np.ones((3, 3), np.uint8))
    arm = (differs > 0) | np.asarray(chain.robot, bool)
    if cover is not None:
        arm |= np.asarray(cover, bool)
    keep = cv2.dilate(arm.astype(np.uint8), np.ones((7, 7), np.uint8)) == 0
    judged = int(keep.sum())
    if judged < CAMERA_SHIFT_MIN_SHARE * keep.size:
        # too little known, static scene left to compare (a calibration that saw no
        # background, an arm filling the view): nothing is said rather than a shift of
        # noise (a chain without a background read half the frame's shift)
        return {"shift_px": [0.0, 0.0], "shift": 0.0, "response": 0.0, "moved": False,
                "judged_px": judged}

    def grey(rgb: np.ndarray) -> np.ndarray:
        return cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2GRAY)

    phase = gradient_phase_shift(grey(chain.home_frame), grey(img), keep)
    dx, dy = phase["shift_px"]
    shift = float(np.hypot(dx, dy))
    return {"shift_px": [round(dx, 3), round(dy, 3)], "shift": round(shift, 3),
            "response": round(phase["response"], 3), "moved": shift >= CAMERA_SHIFT_WARN_PX,
            "judged_px": judged}


def start_agreement(chain: ChainCalibration, start: np.ndarray,
                    start_joint_positions: np.ndarray,
                    change: float = START_AGREEMENT_CHANGE,
                    match_lighting: bool = True) -> dict[str, Any]:
    """How well the chain puts the arm where the start frame shows it, read from the start
    frame and the calibration's background alone (no ground truth).

    The chain carries the home frame's arm to the start pose through every channel at
    once, so a channel's axis read a little off misplaces links before the first action;
    a rollout then moves background and leaves the real arm standing, and can fall below
    copying the start frame. Where the calibration saw the background, a pixel the chain
    puts the arm on should differ from it in the start frame. ``arm_on_arm`` is the share
    of those pixels that do (the chain's precision at the start, as far as the background
    tells); ``arm_drawn`` the share of the pixels that differ from the background which
    the chain covers (low where it leaves links out: thin or distal parts). On 64 held-out
    robot cells the precision measured against the true robot mask predicted where
    anchoring (:func:`export.models.chain_fit.anchor_chain_to_start`) helps, and the
    share read this way follows it (r = 0.96): README, "Anchored when the start shows it
    is needed".

    Args:
        chain: :class:`ChainCalibration`.
        start: uint8 ``[H, W, 3]`` on the chain's grid.
        start_joint_positions: float ``[K]``, the readings at the start (controller unit).
        change: see :data:`START_AGREEMENT_CHANGE`.
        match_lighting: compare with the background in the start's light
            (:func:`match_light`), so that a light changed since the calibration does not
            read as arm everywhere.

    Returns:
        ``{"arm_on_arm": float or None, "arm_drawn": float or None, "judged_px": int,
        "differs_px": int, "light": LightMatch.summary(), "camera": camera_shift(...)}``
        (:func:`camera_shift`: has the camera moved; with ``scene_matched``: False where
        the start frame does not show the calibration's scene, :data:`SCENE_MIN_RESPONSE`
        and :data:`SCENE_DIFFERS_SHARE`); a share is None where no pixel decides it (the
        chain's arm lies wholly where the background was never seen, or nothing differs).

    Raises:
        RuntimeInputError: a start of another size, readings of another width.
    """
    start, q0 = checked_start(chain, start, start_joint_positions)
    cover = arm_cover(chain, (q0 - chain.home_joint_positions)[None])[0]
    light = (match_light(chain, start, q0, cover) if match_lighting
             else LightMatch.unchanged())
    seen = np.asarray(chain.background_seen, bool)
    differs = seen & (np.abs(start.astype(np.float32) - light.apply(chain.background)).sum(-1)
                      > change)
    judged = cover & seen
    n_judged, n_differs = int(judged.sum()), int(differs.sum())
    camera = camera_shift(chain, start, light, cover)
    size = differs.size
    camera["scene_matched"] = not (camera["judged_px"] >= CAMERA_SHIFT_MIN_SHARE * size
                                   and camera["response"] < SCENE_MIN_RESPONSE
                                   and n_differs >= SCENE_DIFFERS_SHARE * size)
    return {"arm_on_arm": round(float((judged & differs).sum() / n_judged), 4)
            if n_judged else None,
            "arm_drawn": round(float((cover & differs).sum() / n_differs), 4)
            if n_differs else None,
            "judged_px": n_judged, "differs_px": n_differs, "light": light.summary(),
            "camera": camera}


# -- the rollout ---------------------------------------------------------------------------


def chain_rollout(chain: ChainCalibration, start: np.ndarray, start_joint_positions: np.ndarray,
                  actions: np.ndarray, fill: bool = True, upsample: int = 2,
                  depth_scale: float = 0.01, visible_tol: float = 0.02,
                  with_cover: bool = False, edge_px: int = 2, edge_change: float = 30.0,
                  carry_rim: bool = False, match_lighting: bool = True):
    """Predict frames: the arm's points moved by the chain and drawn over the start frame.

    Every arm sample of the home frame is moved to the start pose and to each step's pose
    (:func:`chain_positions`) and splatted to each step (softmax by depth, gaps closed),
    carrying where it is at the start and at home. A pixel the arm covers at the step reads
    the start frame where the start shows its sample (the nearest at its start pixel,
    within ``visible_tol`` of depth) or where no sample there has moved from the start,
    else the home frame (a backward warp, so an arm that does not move reads exactly its
    own pixels, from any start pose); where the arm was at the start and is not at the
    step, the calibration's background is drawn (``fill``); everything else is the start
    frame.

    Args:
        chain: :class:`ChainCalibration` of the cell.
        start: uint8 ``[H, W, 3]`` on the chain's grid.
        start_joint_positions: float ``[K]``, the controller's joint readings at the start
            frame (controller order and unit, as in the calibration).
        actions: float ``[S, K]`` or ``[N, S, K]``, joint-position deltas; step s shows the
            pose after actions ``0..s``.
        fill: draw the calibration's background where the arm leaves.
        upsample: each arm pixel moved as ``upsample**2`` samples (no holes where a link
            stretches).
        depth_scale: softmax splatting's depth scale (the chain's depth unit).
        visible_tol: depth margin of the start's visibility test (the chain's depth unit).

        with_cover: also return where the arm lies at each step.
        edge_px: with ``fill``, start-frame pixels up to this far outside where the chain
            puts the arm at the start (arm the cut left out: its rim, thin parts), whose
            colour differs from the background by more than ``edge_change`` (sum over RGB),
            are drawn as background too once the arm beside them has left (0: only the
            chain's own pixels; a start-frame pixel beside an arm that stays is never
            touched, so zero actions still give the start frame). On the sample cell the
            left-out rim stayed behind as scattered dots: whole-frame PSNR over its 39
            steps 28.1 dB with 0, 30.0 dB with 2.
        edge_change: see ``edge_px``.
        carry_rim: with ``fill`` and ``edge_px``, those rim pixels also move with the arm:
            each is drawn at each step where the 4 arm samples nearest it at the start
            (visible ones) have moved on average, where the arm does not cover it (thin
            parts the cut left out, such as gripper fingers, go with the link they hang
            on instead of vanishing) and counts in the cover. An arm that does not move
            carries them nowhere, so zero actions still give the start frame. Off by
            default: on 64 held-out robot cells it cost 0.52 dB whole-frame PSNR at step
            16 (worse on 63 cells) for +0.15 dB in the moving region (docs/eval/
            experiments.md, "Carrying the arm's rim").
        match_lighting: draw the calibration's background and home frame in the start
            frame's light where the light changed since the calibration
            (:func:`match_light`; unchanged light changes nothing).

    Returns:
        uint8 ``[S, H, W, 3]`` or ``[N, S, H, W, 3]`` (as ``actions``); with ``with_cover``
        ``(frames, cover)``, cover bool ``[S, H, W]`` or ``[N, S, H, W]``: the pixels the
        arm's samples land on at each step (the predicted robot mask, of the arm the
        calibration saw move).

    Raises:
        RuntimeInputError: a start frame of another size, joint readings or actions of
            another width than the chain's channels, non-finite values.
    """
    import cv2

    h, w = chain.resolution
    k = chain.num_dof
    start, q0 = checked_start(chain, start, start_joint_positions)
    acts = np.asarray(actions, np.float64)
    single = acts.ndim == 2
    if single:
        acts = acts[None]
    if acts.ndim != 3 or acts.shape[2] != k or acts.shape[1] < 1:
        raise RuntimeInputError(f"actions: expected [S, {k}] or [N, S, {k}] with S >= 1, "
                                f"found {list(np.asarray(actions).shape)}")
    if not np.isfinite(acts).all():
        raise RuntimeInputError("actions: NaN or inf")
    nc, ns = acts.shape[:2]
    off0 = q0 - chain.home_joint_positions
    offs = (off0[None, None] + np.cumsum(acts, 1)).reshape(nc * ns, k)
    uv, z = chain_positions(chain, np.concatenate([np.zeros((1, k)), off0[None], offs]),
                            upsample)
    uh, us, zs = uv[0], uv[1], z[1]
    uv, z = uv[1:], z[1:]  # the start, then each step
    # visibility at the start: the nearest depth landing on each start pixel
    ix = np.clip(np.floor(us[:, 0]).astype(int), 0, w - 1)
    iy = np.clip(np.floor(us[:, 1]).astype(int), 0, h - 1)
    zbuf = np.full(h * w, np.inf)
    np.minimum.at(zbuf, iy * w + ix, zs)
    visible = (zs <= zbuf[iy * w + ix] + visible_tol).astype(np.float64)
    sample_w = np.ones(len(uh))

    def splatted(sl: slice) -> tuple[np.ndarray, np.ndarray]:
        # each frame's backward flows to the start and home frames and the start's
        # visibility, splatted where its samples land (gaps closed)
        at = uv[sl]
        vals = np.concatenate([us[None] - at, uh[None] - at,
                               np.broadcast_to(visible[None, :, None], at.shape[:2] + (1,))],
                              -1)
        spl, dens = splat_values(at, vals, (h, w), weight=sample_w, depth=z[sl],
                                 depth_scale=depth_scale, samples_per_px=upsample ** 2)
        spl, cov = close_gaps(spl, dens)
        return spl.astype(np.float32), cov

    cover = np.empty((1 + nc * ns, h, w), bool)
    cover[:1] = splatted(slice(0, 1))[1]
    gx, gy = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
    img = start.astype(np.float32)
    light = (match_light(chain, start, q0, cover[0]) if match_lighting
             else LightMatch.unchanged())
    hom = light.apply(chain.home_frame)
    bg, seen = light.apply(chain.background), chain.background_seen
    kernel = np.ones((2 * edge_px + 1, 2 * edge_px + 1), np.uint8) if edge_px > 0 else None
    rim = (~cover[0] & seen & (np.abs(img - bg).sum(-1) > edge_change)
           if kernel is not None else None)
    carried = None
    if carry_rim and fill and rim is not None:
        carried = _rim_motion(rim & (cv2.dilate(cover[0].astype(np.uint8), kernel) > 0),
                              us, uv, visible > 0.5, start)
    out = np.empty((nc * ns, h, w, 3), np.uint8)
    # the steps a chunk at a time: every frame is independent of the others, and chunks
    # keep the splat's arrays small (batches of many candidates spent most of their time
    # allocating them)
    for c0 in range(0, nc * ns, ROLLOUT_CHUNK_FRAMES):
        c1 = min(c0 + ROLLOUT_CHUNK_FRAMES, nc * ns)
        spl, cover[c0 + 1:c1 + 1] = splatted(slice(c0 + 1, c1 + 1))
        for s in range(c0, c1):
            f = spl[s - c0]
            from_start = cv2.remap(img, gx + f[..., 0], gy + f[..., 1], cv2.INTER_LINEAR,
                                   borderMode=cv2.BORDER_REPLICATE)
            from_home = cv2.remap(hom, gx + f[..., 2], gy + f[..., 3], cv2.INTER_LINEAR,
                                  borderMode=cv2.BORDER_REPLICATE)
            # where the arm has not moved from the start, the start frame shows it as it
            # is (a sample hidden there is hidden still)
            still = np.hypot(f[..., 0], f[..., 1])[..., None] < 1e-3
            arm = np.where((f[..., 4:5] >= 0.5) | still, from_start, from_home)
            frame = np.where(cover[s + 1][..., None], arm, img)
            if fill:
                left = cover[0] & ~cover[s + 1]
                hole = left & seen
                if kernel is not None and rim is not None and left.any():
                    near = cv2.dilate(left.astype(np.uint8), kernel) > 0
                    hole |= near & rim & ~cover[s + 1]
                frame[hole] = bg[hole]
            if carried is not None:
                ty, tx, colour = _rim_at(carried, s + 1, h, w)
                free = ~cover[s + 1][ty, tx]
                frame[ty[free], tx[free]] = colour[free]
                cover[s + 1][ty, tx] = True
            out[s] = np.clip(np.rint(frame), 0, 255).astype(np.uint8)
    out = out.reshape(nc, ns, h, w, 3)
    cov = cover[1:].reshape(nc, ns, h, w)
    if single:
        out, cov = out[0], cov[0]
    return (out, cov) if with_cover else out


#: :func:`chain_rollout` splats and draws the steps of all candidates this many frames at
#: a time (the same frames as all at once; bounded memory, and 16 candidates of 16 steps
#: ran 1.5-2x faster than in one splat).
ROLLOUT_CHUNK_FRAMES = 16

#: How many of the nearest arm samples a carried rim pixel moves with (their mean motion).
RIM_NEIGHBOURS = 4


def _rim_motion(rim: np.ndarray, start_uv: np.ndarray, uv: np.ndarray, visible: np.ndarray,
                start: np.ndarray):
    """``(ys, xs, motion [S + 1, R, 2] px, colours [R, 3])`` of the rim pixels ``rim`` (bool
    ``[H, W]``): each moves as the mean of its :data:`RIM_NEIGHBOURS` nearest arm samples
    at the start (``start_uv [M, 2]``, the visible ones where any are), whose positions at
    the start and each step are ``uv [S + 1, M, 2]``; None where no pixel or sample."""
    ys, xs = np.nonzero(rim)
    pool = np.flatnonzero(visible) if visible.any() else np.arange(len(start_uv))
    if len(ys) == 0 or len(pool) == 0:
        return None
    k = min(RIM_NEIGHBOURS, len(pool))
    p = np.stack([xs + 0.5, ys + 0.5], -1)
    near = np.empty((len(ys), k), np.int64)
    for a in range(0, len(ys), 256):  # bounded memory: 256 pixels x M samples at a time
        d2 = ((p[a:a + 256, None, :] - start_uv[pool][None]) ** 2).sum(-1)
        near[a:a + 256] = pool[np.argpartition(d2, k - 1, axis=1)[:, :k]]
    motion = uv[:, near, :].mean(2) - start_uv[near].mean(1)[None]
    return ys, xs, motion, start[ys, xs].astype(np.float32)


#: Each carried rim pixel lands as this many sub-pixel samples (its quarters' centres), so
#: a band turned with its link stays whole instead of breaking into dots.
_RIM_QUARTERS = np.array([[0.25, 0.25], [0.75, 0.25], [0.25, 0.75], [0.75, 0.75]])


def _rim_at(carried, step: int, h: int, w: int):
    """The carried rim pixels' ``(ys, xs, colours)`` at ``step`` (0: the start): each
    pixel's four quarter centres moved by its motion, those that land on the grid (a pixel
    reached twice takes the last colour)."""
    ys, xs, motion, colour = carried
    fx = xs[:, None] + _RIM_QUARTERS[None, :, 0] + motion[step, :, None, 0]
    fy = ys[:, None] + _RIM_QUARTERS[None, :, 1] + motion[step, :, None, 1]
    tx, ty = np.floor(fx).astype(np.int64).ravel(), np.floor(fy).astype(np.int64).ravel()
    on = (tx >= 0) & (tx < w) & (ty >= 0) & (ty < h)
    return ty[on], tx[on], np.repeat(colour, 4, axis=0)[on]


def sweep_segments(episode: Any) -> list[tuple[int, int]]:
    """Each channel's sweep in a calibration episode (``metadata.segments``), controller
    order: ``(start, stop)``, the segment and the frame that closes it (back at home), stop
    exclusive.

    Raises:
        ValueError: a channel without a sweep segment.
    """
    names = list(episode.metadata.dof_names)
    segments: list[tuple[int, int] | None] = [None] * len(names)
    for s in episode.metadata.segments:
        segments[names.index(s.dof)] = (s.start, min(s.stop + 1, episode.num_frames))
    missing = [n for n, s in zip(names, segments, strict=True) if s is None]
    if missing:
        raise ValueError(f"channels {missing} have no sweep segment in the calibration: "
                         "record every channel's sweep (`syncedge calibrate record`)")
    return [s for s in segments if s is not None]


def fit_sheet(chain: ChainCalibration, episode: Any, note: str
              ) -> tuple[np.ndarray, list[dict]]:
    """The chain's fit to the calibration it was read from, to look at: the recorded home
    frame and each channel's sweep peak above the chain's redrawing of them
    (:func:`sweep_check`), at the sweep's poses as the chain was read
    (:func:`edge.calibrate.ingest.at_sweep_poses`: any recorded timing) and on its grid.

    Args:
        chain: the chain calibration read from ``episode``.
        episode: the calibration episode (``edge.episode.Episode``), frames a whole multiple
            of the chain's grid.
        note: a line drawn under the sheet (e.g. the file and the fit residual).

    Returns:
        ``(sheet uint8 [H, W, 3], rows)``: rows as :func:`sweep_check` gives them.

    Raises:
        ValueError: the sweeps cannot be found in the episode's joint readings.
    """
    import cv2

    from edge.calibrate.ingest import IngestError, at_sweep_poses
    from edge.visual import contact_sheet

    try:
        at_poses, _ = at_sweep_poses(episode)
    except IngestError as exc:
        raise ValueError(f"the calibration's sweeps: {exc}") from None
    h, w = chain.resolution
    grid = at_poses.frames if at_poses.frames.shape[1:3] == (h, w) else np.stack(
        [cv2.resize(f, (w, h), interpolation=cv2.INTER_AREA) for f in at_poses.frames])
    q = np.asarray(at_poses.joint_positions, np.float64)[:, :chain.num_dof]
    rows, tiles = sweep_check(chain, grid, q, sweep_segments(at_poses))
    cut = grid[0].copy()
    cut[~chain.robot] = (cut[~chain.robot] * 0.35).astype(np.uint8)
    sheet = contact_sheet(
        [np.concatenate([grid[:1], tiles[0]]), np.concatenate([cut[None], tiles[1]])],
        ["recorded: home, then each channel's sweep peak",
         "the chain: the arm cut from home, then the home frame moved to each peak"],
        [["home"] + [r["dof"] for r in rows], ["arm cut"] + [
            f"{r['psnr_db']:.1f} dB" for r in rows]], scale=3, note=note)
    return sheet, rows


def sweep_check(chain: ChainCalibration, frames: np.ndarray, joint_positions: np.ndarray,
                segments: list[tuple[int, int]]) -> tuple[list[dict], np.ndarray]:
    """How well the chain redraws its own calibration: for each channel, the recorded frame
    where its sweep is farthest from home against the chain's rollout from the home frame
    to that frame's joint readings (PSNR on the whole frame and on the pixels the recording
    changed from home), beside the home frame itself as the baseline.

    Args:
        chain: :class:`ChainCalibration` read from this calibration.
        frames: uint8 ``[T, H, W, 3]``, the calibration frames on the chain's grid.
        joint_positions: float ``[T, K]``.
        segments: ``[(start, stop)]`` per channel, stop exclusive.

    Returns:
        ``(rows, tiles)``: one dict per channel (``dof``, ``frame``, ``swept`` in the
        channel's unit, ``psnr_db``, ``home_psnr_db``, ``changed_psnr_db``,
        ``home_changed_psnr_db``; None where nothing changed) and uint8 ``[2, K, H, W, 3]``
        (recorded peaks, redrawn peaks).
    """
    q = np.asarray(joint_positions, np.float64)
    home = chain.home_frame
    peaks = []
    for c, (a, b) in enumerate(segments):
        peaks.append(a + int(np.argmax(np.abs(q[a:b, c] - q[0, c]))))
    pred = chain_rollout(chain, home, chain.home_joint_positions,
                         (q[peaks] - chain.home_joint_positions)[:, None])[:, 0]

    def psnr(x: np.ndarray, y: np.ndarray, m: np.ndarray | None = None) -> float | None:
        d = (x.astype(np.float64) - y) ** 2
        if m is not None:
            if not m.any():
                return None
            d = d[m]
        mse = float(d.mean())
        return 100.0 if mse == 0 else round(10 * np.log10(255.0 ** 2 / mse), 3)

    rows = []
    for c, f in enumerate(peaks):
        rec = frames[f]
        changed = (np.abs(rec.astype(np.int32) - home).sum(-1) > 24)
        rows.append({"dof": chain.dof_names[c], "frame": int(f),
                     "swept": round(float(q[f, c] - q[0, c]), 5),
                     "psnr_db": psnr(pred[c], rec), "home_psnr_db": psnr(home, rec),
                     "changed_psnr_db": psnr(pred[c], rec, changed),
                     "home_changed_psnr_db": psnr(home, rec, changed)})
    return rows, np.stack([frames[peaks], pred])
