"""Episodes: frames paired with joint actions, and their versioned on-disk format.

An episode is what a camera and a controller record together on one cell (see
docs/architecture.md, "Terms"):

- ``frames``: uint8 ``[T, H, W, 3]`` RGB.
- ``actions``: float32 ``[T, A]``; ``actions[t] = q[t+1] - q[t]``, the measured joint
  position change from frame t to frame t+1 in the controller's own channel order and sign
  convention (rad, or m for a prismatic joint); the last row is zero.
- ``timestamps``: float64 ``[T]`` seconds, strictly increasing.
- ``metadata``: :class:`EpisodeMetadata` (ids, robot, DoF names and units, camera, rate).
- Optional evaluation-only arrays (never model inputs): ``joint_positions`` float64
  ``[T, A]`` (rad or m), ``ee_px`` float32 ``[T, 2]`` (end-effector pixel x, y; NaN where
  it is outside the image), ``robot_mask`` bool ``[T, H, W]``.

On disk an episode is one compressed NumPy archive (``.npz``, no pickled objects) holding
the arrays and the metadata as UTF-8 JSON. :func:`save_episode` writes to a temporary file
in the same directory, fsyncs and renames, so a reader never sees a half-written file under
the final name. :func:`load_episode` validates everything and raises
:class:`~edge.errors.EpisodeError` naming the file and the field.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from edge.config_reader import Where, read_config
from edge.errors import EpisodeError
from edge.fileio import atomic_write

__all__ = [
    "check_npz_signature",
    "EPISODE_SCHEMA_VERSION",
    "EPISODE_KINDS",
    "DOF_UNITS",
    "DofUnit",
    "EpisodeKind",
    "CalibrationSegment",
    "Episode",
    "EpisodeMetadata",
    "actions_from_positions",
    "continuous_joints",
    "load_episode",
    "reference_path",
    "save_episode",
]

#: Version of the episode file layout. Readers refuse files from a newer version.
EPISODE_SCHEMA_VERSION = 1
#: What an episode was recorded for.
EpisodeKind = Literal["calibration", "motion", "validation"]
EPISODE_KINDS = get_args(EpisodeKind)
#: Units a degree of freedom may have (revolute: rad; prismatic: m).
DofUnit = Literal["rad", "m"]
DOF_UNITS = get_args(DofUnit)
#: The only action space this project uses: measured joint position change per frame.
ActionSpace = Literal["joint_position_delta"]
ACTION_SPACE: ActionSpace = "joint_position_delta"

_ARRAY_KEYS = ("frames", "actions", "timestamps")
_OPTIONAL_KEYS = ("joint_positions", "ee_px", "robot_mask")
_META_KEY = "metadata_json"


@dataclass(frozen=True)
class CalibrationSegment:
    """One DoF's sweep inside a calibration episode: frames ``[start, stop)`` move ``dof``.

    Within the segment the DoF goes out, pauses, comes back and pauses while the others
    hold (SyncWorld, Yang et al., arXiv 2609.09155: one segment per controllable DoF).
    ``amplitude`` is the signed sweep magnitude (rad or m) as commanded.
    """

    dof: str
    start: int
    stop: int
    amplitude: float


@dataclass(frozen=True)
class EpisodeMetadata:
    """Description of an episode; every field is validated on load.

    Attributes:
        cell_id, camera_id, robot_id: identifiers of the cell, camera and robot unit; the
            calibration cache key uses them.
        robot: robot model name (e.g. ``"panda"``).
        dof_names: one name per action channel, in the controller's order (length A).
        dof_units: ``"rad"`` or ``"m"`` per channel (length A).
        fps: nominal frame rate in Hz.
        kind: one of :data:`EPISODE_KINDS`.
        source: where the episode came from (``"mujoco"``, ``"lerobot:<path>"``, ...).
        camera: free-form camera description (intrinsics, pose), JSON-serialisable.
        split: data split name for generated data, or ``None``.
        segments: the DoF sweeps of a calibration episode (empty otherwise).
        extra: free-form JSON-serialisable details (cell parameters, seeds, ...).
        action_space: always :data:`ACTION_SPACE`.
    """

    cell_id: str
    camera_id: str
    robot_id: str
    robot: str
    dof_names: tuple[str, ...]
    dof_units: tuple[str, ...]
    fps: float
    kind: str = "motion"
    source: str = "unknown"
    camera: Mapping[str, Any] = field(default_factory=dict)
    split: str | None = None
    segments: tuple[CalibrationSegment, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    action_space: str = ACTION_SPACE

    def to_json_dict(self) -> dict[str, Any]:
        """Return a strict-JSON dictionary of every field."""
        d = dataclasses.asdict(self)
        d["dof_names"] = list(self.dof_names)
        d["dof_units"] = list(self.dof_units)
        d["segments"] = [dataclasses.asdict(s) for s in self.segments]
        d["camera"] = dict(self.camera)
        d["extra"] = dict(self.extra)
        return d

    @classmethod
    def from_json_dict(cls, d: Mapping[str, Any], *, path: object = None) -> EpisodeMetadata:
        """Build metadata from a parsed JSON dictionary, checked by the strict config reader
        (:mod:`edge.config_reader`): keys, value types and allowed values (``kind``,
        ``dof_units``, ``action_space``). The values the types do not say (lengths, DoF
        names, segment bounds) are checked by :meth:`Episode.validate`.

        Args:
            d: the metadata without ``schema_version``.
            path: the episode file, for messages (``None``: not from a file).
        Raises:
            EpisodeError: at field ``metadata.<key path>``: unknown or missing keys (all
                listed at ``metadata``), a value of the wrong type or outside the allowed
                ones.
        """
        m = read_config(_MetadataFile, d, Where(path, "metadata", error=EpisodeError))
        return cls(**{f.name: getattr(m, f.name) for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class _MetadataFile(EpisodeMetadata):
    """The metadata as stored: :class:`EpisodeMetadata` with the allowed values of ``kind``,
    ``dof_units`` and ``action_space`` as ``Literal`` types for the strict reader (the
    in-memory class keeps ``str``; :meth:`Episode.validate` checks it)."""

    dof_units: tuple[DofUnit, ...]
    kind: EpisodeKind = "motion"
    action_space: ActionSpace = ACTION_SPACE


@dataclass(frozen=True)
class Episode:
    """Frames paired with actions and timestamps; see the module docstring for layouts.

    Construction does not validate; call :meth:`validate` (``load_episode`` and
    ``save_episode`` always do).
    """

    frames: np.ndarray  # (T, H, W, 3) uint8
    actions: np.ndarray  # (T, A) float32
    timestamps: np.ndarray  # (T,) float64 s
    metadata: EpisodeMetadata
    joint_positions: np.ndarray | None = None  # (T, A) float64 rad|m
    ee_px: np.ndarray | None = None  # (T, 2) float32 px
    robot_mask: np.ndarray | None = None  # (T, H, W) bool

    @property
    def num_frames(self) -> int:
        """T, the number of frames."""
        return int(self.frames.shape[0])

    @property
    def num_dof(self) -> int:
        """A, the number of action channels."""
        return int(self.actions.shape[1])

    @property
    def resolution(self) -> tuple[int, int]:
        """(H, W) in pixels."""
        return int(self.frames.shape[1]), int(self.frames.shape[2])

    def validate(self, path: object = None) -> Episode:
        """Check dtypes, shapes, values and metadata; return ``self``.

        Raises:
            EpisodeError: naming ``path`` (if given) and the offending field.
        """
        _validate(self, path)
        return self


def actions_from_positions(q: np.ndarray) -> np.ndarray:
    """Turn joint positions ``q`` float ``[T, A]`` into actions float32 ``[T, A]``.

    ``actions[t] = q[t+1] - q[t]`` and the last row is zero (docs/architecture.md).
    """
    q = np.asarray(q, dtype=np.float64)
    if q.ndim != 2:
        raise EpisodeError(f"expected joint positions of shape (T, A), found {q.shape}",
                           field="joint_positions")
    a = np.zeros_like(q, dtype=np.float32)
    a[:-1] = (q[1:] - q[:-1]).astype(np.float32)
    return a


def _fail(path: object, fld: str, msg: str) -> None:
    raise EpisodeError(msg, path=path, field=fld)


def _check_array(path: object, name: str, arr: object, dtype: np.dtype | type,
                 ndim: int) -> np.ndarray:
    if not isinstance(arr, np.ndarray):
        _fail(path, name, f"expected a NumPy array, found {type(arr).__name__}")
    assert isinstance(arr, np.ndarray)
    if arr.dtype != np.dtype(dtype):
        _fail(path, name, f"expected dtype {np.dtype(dtype)}, found {arr.dtype}")
    if arr.ndim != ndim:
        _fail(path, name, f"expected {ndim} dimensions, found shape {arr.shape}")
    return arr


def _validate(ep: Episode, path: object) -> None:
    frames = _check_array(path, "frames", ep.frames, np.uint8, 4)
    t, h, w, c = frames.shape
    if c != 3:
        _fail(path, "frames", f"expected shape (T, H, W, 3) RGB, found {frames.shape}")
    if t < 1 or h < 1 or w < 1:
        _fail(path, "frames", f"expected at least one non-empty frame, found shape {frames.shape}")
    actions = _check_array(path, "actions", ep.actions, np.float32, 2)
    if actions.shape[0] != t:
        _fail(path, "actions", f"expected {t} rows (one per frame), found {actions.shape[0]}")
    bad = ~np.isfinite(actions)
    if bad.any():
        r, col = np.argwhere(bad)[0]
        _fail(path, "actions", f"non-finite value {actions[r, col]} at row {r}, channel {col}")
    ts = _check_array(path, "timestamps", ep.timestamps, np.float64, 1)
    if ts.shape[0] != t:
        _fail(path, "timestamps", f"expected {t} values (one per frame), found {ts.shape[0]}")
    if not np.isfinite(ts).all():
        _fail(path, "timestamps", f"non-finite value at index {int(np.argmin(np.isfinite(ts)))}")
    if t > 1:
        d = np.diff(ts)
        if (d <= 0).any():
            i = int(np.argmax(d <= 0))
            _fail(path, "timestamps",
                  f"expected strictly increasing seconds, found {float(ts[i])!r} then {float(ts[i + 1])!r} "
                  f"at index {i + 1}")
    a = actions.shape[1]
    m = ep.metadata
    if not isinstance(m, EpisodeMetadata):
        _fail(path, "metadata", f"expected EpisodeMetadata, found {type(m).__name__}")
    for key in ("cell_id", "camera_id", "robot_id", "robot", "source"):
        v = getattr(m, key)
        if not isinstance(v, str) or not v:
            _fail(path, f"metadata.{key}", f"expected a non-empty string, found {v!r}")
    if len(m.dof_names) != a:
        _fail(path, "metadata.dof_names",
              f"expected {a} names (the action width), found {len(m.dof_names)}: {list(m.dof_names)}")
    if not all(isinstance(n, str) and n for n in m.dof_names):
        _fail(path, "metadata.dof_names", f"expected non-empty strings, found {list(m.dof_names)}")
    dup = sorted({n for n in m.dof_names if list(m.dof_names).count(n) > 1})
    if dup:
        _fail(path, "metadata.dof_names", f"duplicated DoF name(s) {dup}")
    if len(m.dof_units) != a or any(u not in DOF_UNITS for u in m.dof_units):
        _fail(path, "metadata.dof_units",
              f"expected {a} units each one of {list(DOF_UNITS)}, found {list(m.dof_units)}")
    if not isinstance(m.fps, (int, float)) or not math.isfinite(m.fps) or m.fps <= 0:
        _fail(path, "metadata.fps", f"expected a positive frame rate in Hz, found {m.fps!r}")
    if m.kind not in EPISODE_KINDS:
        _fail(path, "metadata.kind", f"expected one of {list(EPISODE_KINDS)}, found {m.kind!r}")
    if m.action_space != ACTION_SPACE:
        _fail(path, "metadata.action_space", f"expected {ACTION_SPACE!r}, found {m.action_space!r}")
    for i, s in enumerate(m.segments):
        if s.dof not in m.dof_names:
            _fail(path, f"metadata.segments[{i}].dof",
                  f"expected one of {list(m.dof_names)}, found {s.dof!r}")
        if not (0 <= s.start < s.stop <= t):
            _fail(path, f"metadata.segments[{i}]",
                  f"expected 0 <= start < stop <= {t}, found start={s.start}, stop={s.stop}")
    if ep.joint_positions is not None:
        q = _check_array(path, "joint_positions", ep.joint_positions, np.float64, 2)
        if q.shape != (t, a):
            _fail(path, "joint_positions", f"expected shape {(t, a)}, found {q.shape}")
        if not np.isfinite(q).all():
            _fail(path, "joint_positions", "non-finite value")
    if ep.ee_px is not None:
        e = _check_array(path, "ee_px", ep.ee_px, np.float32, 2)
        if e.shape != (t, 2):
            _fail(path, "ee_px", f"expected shape {(t, 2)}, found {e.shape}")
    if ep.robot_mask is not None:
        rm = _check_array(path, "robot_mask", ep.robot_mask, np.bool_, 3)
        if rm.shape != (t, h, w):
            _fail(path, "robot_mask", f"expected shape {(t, h, w)}, found {rm.shape}")


def reference_path(episode_path: str | os.PathLike[str]) -> Path:
    """Where a recorded episode's reference frame lies beside it: ``NAME.npz`` ->
    ``NAME.reference.png`` (the camera's first frame at its own resolution, which
    ``calibrate verify`` compares the camera with)."""
    p = Path(episode_path)
    return p.with_name(p.name.removesuffix(".npz") + ".reference.png")


def save_episode(episode: Episode, path: str | os.PathLike[str]) -> Path:
    """Validate ``episode`` and write it atomically to ``path`` (conventionally ``*.npz``).

    The data goes to a temporary file in the same directory, is fsynced, then renamed over
    ``path``; on any error the temporary file is removed and ``path`` is untouched.

    Returns:
        The final path.
    Raises:
        EpisodeError: if the episode does not validate.
        OSError: if the file cannot be written.
    """
    path = Path(path)
    episode.validate(path)
    arrays: dict[str, np.ndarray] = {
        "frames": episode.frames,
        "actions": episode.actions,
        "timestamps": episode.timestamps,
    }
    for key in _OPTIONAL_KEYS:
        v = getattr(episode, key)
        if v is not None:
            arrays[key] = v
    meta = {"schema_version": EPISODE_SCHEMA_VERSION, **episode.metadata.to_json_dict()}
    try:
        blob = json.dumps(meta, allow_nan=False, sort_keys=True).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise EpisodeError(f"metadata is not strict JSON: {exc}", path=path,
                           field="metadata") from None
    arrays[_META_KEY] = np.frombuffer(blob, dtype=np.uint8)
    # mypy matches **arrays against savez_compressed's keyword `allow_pickle: bool` too;
    # the keys are array names only (numpy>=1.24 has no such keyword for savez at all).
    return atomic_write(
        path, lambda f: np.savez_compressed(f, **arrays)  # type: ignore[arg-type]
    )


def check_npz_signature(path: Path) -> None:
    """Refuse a file that is not a zip archive (an ``.npz``) before NumPy reads it.

    Raises:
        EpisodeError: naming the file and what it starts with.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as exc:
        raise EpisodeError(f"cannot read it ({exc.strerror})", path=path) from None
    if head != b"PK\x03\x04":
        raise EpisodeError(f"not an episode file: expected a NumPy .npz archive (a zip file, "
                           f"as 'syncedge calibrate record' writes), found a file starting "
                           f"with {head!r}", path=path)


def load_episode(path: str | os.PathLike[str]) -> Episode:
    """Read and validate an episode file written by :func:`save_episode`.

    Raises:
        EpisodeError: naming the file and field for a missing, corrupt, truncated or
            wrong-version file, and for every validation failure.
    """
    path = Path(path)
    if path.is_dir():
        raise EpisodeError("is a folder; expected an episode file (.npz)", path=path)
    if not path.is_file():
        raise EpisodeError("no such episode file", path=path)
    check_npz_signature(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            keys = set(npz.files)
            if _META_KEY not in keys:
                hint = ("; this is a chain calibration (from `syncedge model read-chain`): "
                        "give it as --chain" if "header_json" in keys and "axes" in keys
                        else "; write episodes with syncedge (e.g. `syncedge calibrate "
                        "record`) or import them (`syncedge calibrate import`)")
                raise EpisodeError(f"not a syncedge episode file (no '{_META_KEY}' array; "
                                   f"found {sorted(keys)}){hint}", path=path, field=_META_KEY)
            raw = npz[_META_KEY]
            # as written here: uint8 bytes; a 0-d string array (np.array(json_text)) as a
            # writer of its own may store it is read too
            meta_bytes = (str(raw.item()).encode("utf-8") if raw.dtype.kind == "U"
                          else raw.tobytes())
            missing = [k for k in _ARRAY_KEYS if k not in keys]
            if missing:
                extra = sorted(keys - set(_ARRAY_KEYS) - set(_OPTIONAL_KEYS) - {_META_KEY})
                near = {m: difflib.get_close_matches(m, extra, n=1) for m in missing}
                hint = "".join(f"; found '{c[0]}': rename it '{m}'" for m, c in near.items()
                               if c)
                raise EpisodeError(f"missing array(s) {missing}{hint}", path=path,
                                   field=missing[0])
            unknown = sorted(keys - set(_ARRAY_KEYS) - set(_OPTIONAL_KEYS) - {_META_KEY})
            if unknown:
                raise EpisodeError(f"unknown array(s) {unknown}", path=path, field=unknown[0])
            arrays = {k: npz[k] for k in keys if k != _META_KEY}
    except EpisodeError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError, KeyError) as exc:
        raise EpisodeError(f"corrupt or truncated episode file ({type(exc).__name__}: {exc})",
                           path=path) from None
    try:
        meta = json.loads(meta_bytes.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EpisodeError(f"metadata is not valid JSON: {exc}", path=path,
                           field="metadata") from None
    if not isinstance(meta, dict):
        raise EpisodeError("metadata is not a JSON object", path=path, field="metadata")
    version = meta.pop("schema_version", None)
    if not isinstance(version, int):
        raise EpisodeError(f"expected an integer schema version, found {version!r}", path=path,
                           field="metadata.schema_version")
    if version > EPISODE_SCHEMA_VERSION:
        raise EpisodeError(
            f"schema version {version} is newer than this syncedge reads "
            f"({EPISODE_SCHEMA_VERSION}); upgrade syncedge", path=path,
            field="metadata.schema_version")
    if version < 1:
        raise EpisodeError(f"unsupported schema version {version}", path=path,
                           field="metadata.schema_version")
    metadata = EpisodeMetadata.from_json_dict(meta, path=path)
    episode = Episode(metadata=metadata, **arrays)
    return continuous_joints(episode.validate(path))


def continuous_joints(ep: Episode) -> Episode:
    """``ep`` with its revolute joints' readings continuous across the controller's wrap.

    A controller that reports a joint within one turn makes a joint turning through the
    wrap point jump by about 2 pi between two frames (:func:`edge.joints.continuous_positions`
    says why such a jump cannot be motion). Where ``joint_positions`` show such a jump, the
    positions are moved by whole turns to continue, and each action that is the wrapped
    positions' change (``actions[t-1] = q[t] - q[t-1]``, within 1e-3) becomes the true
    change; actions that are not (commands of their own) are left as they are. Each wrap
    undone is listed in ``metadata.extra["joint_turns_unwrapped"]`` (``dof``, ``frame``,
    ``turns``). An episode without ``joint_positions`` or without a wrap is returned as is.

    Raises:
        EpisodeError: the result does not validate (cannot happen for a valid ``ep``).
    """
    from edge.joints import continuous_positions

    if ep.joint_positions is None:
        return ep
    q, wraps = continuous_positions(ep.joint_positions, ep.metadata.dof_units)
    if not wraps:
        return ep
    actions = np.array(ep.actions, dtype=np.float32, copy=True)
    raw = ep.joint_positions
    for w in wraps:
        c, t = w["channel"], w["sample"]
        if abs(float(actions[t - 1, c]) - float(raw[t, c] - raw[t - 1, c])) <= 1e-3:
            actions[t - 1, c] = np.float32(q[t, c] - q[t - 1, c])
    names = ep.metadata.dof_names
    extra = dict(ep.metadata.extra)
    extra["joint_turns_unwrapped"] = [
        *extra.get("joint_turns_unwrapped", []),
        *({"dof": names[w["channel"]], "frame": w["sample"], "turns": w["turns"]}
          for w in wraps)]
    return dataclasses.replace(ep, actions=actions, joint_positions=q,
                               metadata=dataclasses.replace(ep.metadata, extra=extra)
                               ).validate()
