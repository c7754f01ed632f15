"""Coverage check of a calibration episode: a verdict with reasons, per-DoF figures.

Checks (each failure is a reason with a stable ``code``):

================================  =========================================================
code                              failure
================================  =========================================================
``dof_duplicated``                two channels share a name
``dof_missing``                   a DoF of the program is not in the episode
``frame_count``                   not ``8 n + 1`` frames for n DoFs (an episode that
                                  cannot be validated; a valid one of another timing is
                                  normalised first, see :func:`check_arrays`)
``never_swept``, ``simultaneous``, ingest's refusals of an episode of another timing
``no_return``, ``unseen``         (``edge.calibrate.ingest``)
``partial_recording``             the recording ended before the program did (only the DoFs
                                  whose whole sweep was recorded are checked; the others are
                                  named in it)
``program_not_followed``          the joint readings did not keep the program's timing
                                  (paused, lagged, another program): the frames, taken at
                                  the program's times, miss the sweeps
``dof_not_moving``                a DoF did not move in its segment (stuck, not executing)
``sweep_reversed``                a DoF swept its amplitude the other way from the plan (the
                                  controller's sign for it differs from the robot spec's)
``sweep_clipped``                 a DoF stopped while commanded to move (a joint limit or an
                                  obstacle) before the required share of its amplitude
``sweep_short``                   a DoF moved less than the required share in a direction
``sweep_overshoot``               a DoF's readings swept more than twice its planned
                                  amplitude: readings in another unit or scale than the
                                  plan's (degrees: 57.3 times)
``no_image_motion``               a DoF moved but the picture did not change (camera pointed
                                  elsewhere, joint occluded)
``image_motion_not_distinct``     a DoF's picture change looks like another DoF's
``dropped_frames``                frames missing at knots, or uneven timestamps
``stamps_not_monotonic``          camera or episode stamps went backwards or repeated
``pairing_error``                 a frame's nearest joint sample is beyond the tolerance
``camera_lag``                    the frames show the joints' poses of another time than
                                  their readings' (a camera latency not corrected, or the
                                  joint stream's): at least ``max_lag_frames`` apart, as
                                  measured from the episode itself (:func:`estimate_camera_lag`)
``camera_moves``                  a DoF's sweep moved the whole view, its edges included
                                  (a camera mounted on the arm, e.g. a wrist camera, or one
                                  not rigidly fixed): the chain model simulates a fixed
                                  camera watching the arm (:func:`view_motion`)
================================  =========================================================

Image motion of a segment: mean absolute frame difference (0..255, averaged over pixels and
channels, each pixel's less the camera's noise level, :func:`noise_level`) over its six
moving transitions; it must exceed ``motion_energy_min`` and ``motion_noise_ratio`` times
the noise floor: the median of the pause transitions less the DoFs' motion there at the
camera's lag (:func:`pause_noise_floor`).

Camera lag: the image motion of each transition is fitted as a non-negative sum of the
DoFs' speeds at a time shifted by the lag (one weight per DoF: each moves its own share of
the picture, plus a constant for the noise); the lag with the best fit (coefficient of
determination R^2) over +-``LAG_SEARCH_FRAMES`` is the camera's lag against the joint
readings. Within one DoF's sweep the speed repeats every 4 frames, so a single DoF alone
cannot tell a lag of L from L +- 4; the hand-over from one DoF's sweep to the next can.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge.calibrate.plan import DEFAULT_MIN_FRACTION, SEGMENT_FRAMES, SWEEP_PROFILE
from edge.episode import Episode, EpisodeMetadata, check_npz_signature, load_episode
from edge.errors import EpisodeError

__all__ = ["DEFAULT_MODEL_FPS", "CheckOptions", "EpisodeArrays", "FPS_MISMATCH", "GAP_PERIODS",
           "LAG_SEARCH_FRAMES", "check_arrays", "check_episode", "coverage_sheets",
           "estimate_camera_lag", "frame_gaps", "frame_rate_note", "lag_search_frames",
           "load_for_check",
           "motion_between_sweeps", "held_transitions", "scene_motion", "view_motion",
           "positions_seen_late", "tile_names", "FOREIGN_MIN_SHARE", "FOREIGN_TOLERANCE",
           "sweep_foreign_motion", "foreign_motion_of_sweep", "chain_grid_moved_px",
           "CHAIN_MIN_MOVED_PX"]

#: Camera lags searched by :func:`estimate_camera_lag`, +- frames of the episode.
LAG_SEARCH_FRAMES = 4.0
#: An episode of another timing (an import, a recording at the camera's rate) is searched
#: over +- this many seconds (at most a third of the episode; further where an import's
#: stamp delays point further): a camera stamped on another clock than the joints' is
#: seconds off.
LAG_WIDE_SEARCH_S = 2.0
#: A second peak of the lag fit this close in R^2 to the best leaves the lag in doubt
#: (sweeps alike in length fit again one leg or one sweep later).
LAG_AMBIGUOUS_R2 = 0.02
#: The model's frame rate the check judges the camera lag in, Hz, unless told (the shipped
#: models' ``contract.frame_rate_hz``; ``calibrate check --model`` reads it).
DEFAULT_MODEL_FPS = 10.0


def _widest_lag(frames: int, fps: float, hint_s: float | None) -> float:
    """The widest lag searched in an episode of another timing, frames: over
    :data:`LAG_WIDE_SEARCH_S` (or the import's own hint plus 0.5 s), at most a third of
    the episode."""
    wide = LAG_WIDE_SEARCH_S if hint_s is None else max(LAG_WIDE_SEARCH_S, abs(hint_s) + 0.5)
    return float(min(wide * fps, max(frames - 1, 0) / 3.0))


_MOVE_ROWS = (0, 1, 2, 4, 5, 6)
_PAUSE_ROWS = (3, 7)


@dataclass(frozen=True)
class CheckOptions:
    """Thresholds of the check.

    Attributes:
        min_fraction: share of the planned amplitude required each way (None: the
            program's, recorded in the episode, else 0.8).
        motion_energy_min: smallest mean frame difference of a moving segment, 0..255.
        motion_noise_ratio: moving energy over the pause noise floor, at least.
        distinct_max_corr: largest allowed correlation of two DoFs' motion maps.
        tolerance_s: largest allowed distance from a frame to its nearest joint sample, s.
        max_lag_frames: largest camera lag against the joint readings the check lets pass,
            frames (0.5: each frame within half a knot of the pose its readings give).
        lag_min_r2: the lag is judged only when the image motion fits the DoFs' speeds at
            least this well (R^2 at the measured lag), and better than at no lag.
        model_fps: the model's frame rate, Hz: an episode of another timing is brought
            into it (``edge.calibrate.ingest``) and its camera lag judged in its frames.
        scene_motion: bool ``[H, W]``, pixels left out of every image motion (what moves
            on its own, :func:`scene_motion`); None: measured from an episode of another
            timing's holds, else none.
        sweep_disturbance: look for what else changed during each sweep
            (:func:`foreign_motion_of_sweep`; a DoF's ``foreign_motion_share``, None where
            not looked for): not where the camera lag is beyond ``max_lag_frames`` (the
            frames then show other moments than the sweeps').
    """

    min_fraction: float | None = None
    motion_energy_min: float = 0.02
    motion_noise_ratio: float = 3.0
    distinct_max_corr: float = 0.97
    tolerance_s: float = 0.02
    max_lag_frames: float = 0.5
    lag_min_r2: float = 0.6
    model_fps: float = DEFAULT_MODEL_FPS
    scene_motion: np.ndarray | None = None
    sweep_disturbance: bool = True


@dataclass
class EpisodeArrays:
    """An episode's arrays and metadata as read, without the episode validation (so that
    an episode with duplicated names or bad stamps can still be reported on)."""

    frames: np.ndarray  # (T, H, W, 3) uint8
    actions: np.ndarray  # (T, A) float32
    timestamps: np.ndarray  # (T,) float64 s
    meta: dict[str, Any]
    joint_positions: np.ndarray | None = None  # (T, A) float64
    validation_error: str | None = None

    @classmethod
    def from_episode(cls, ep: Episode) -> EpisodeArrays:
        """Wrap a validated in-memory episode."""
        return cls(ep.frames, ep.actions, ep.timestamps, ep.metadata.to_json_dict(),
                   ep.joint_positions)


def load_for_check(path: str | os.PathLike[str]) -> EpisodeArrays:
    """Read an episode file for the check; validation failures are kept, not raised.

    Raises:
        EpisodeError: the file is not an episode at all (missing, corrupt, no arrays).
    """
    path = Path(path)
    if path.is_file():
        check_npz_signature(path)  # not an archive at all: say so once
    try:
        return EpisodeArrays.from_episode(load_episode(path))
    except EpisodeError as exc:
        error, first = str(exc), exc
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(z["metadata_json"].tobytes().decode("utf-8"))
            arr = EpisodeArrays(z["frames"], z["actions"], z["timestamps"], meta,
                                z["joint_positions"] if "joint_positions" in z.files else None,
                                error)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        # not readable even as raw arrays: the episode reader's own message says why
        raise first from None
    if arr.frames.ndim != 4 or arr.actions.ndim != 2 or len(arr.actions) != len(arr.frames):
        raise EpisodeError(f"cannot check it: {error}", path=path)
    why = _unreadable_arrays(arr)
    if why:
        raise EpisodeError(f"cannot check it: {why}", path=path)
    return arr


def _unreadable_arrays(arr: EpisodeArrays) -> str:
    """Why the check cannot read these arrays at all (``""`` if it can): what it reports on
    (names, stamps, timing, sweeps) needs uint8 RGB frames, finite actions and joint
    readings of one row per frame and one column per channel."""
    f, a, q = arr.frames, arr.actions, arr.joint_positions
    names = arr.meta.get("dof_names") if isinstance(arr.meta, dict) else None
    if not isinstance(names, list) or len(names) != a.shape[1]:
        found = len(names) if isinstance(names, list) else type(names).__name__
        return (f"field 'metadata.dof_names': expected {a.shape[1]} names (one per column of "
                f"'actions'), found {found}")
    if f.dtype != np.uint8 or f.shape[-1] != 3:
        return (f"field 'frames': expected uint8 [T, H, W, 3] (RGB 0-255), found {f.dtype} "
                f"{list(f.shape)}: write the camera's frames as uint8")
    if not np.issubdtype(a.dtype, np.number) or not np.isfinite(a).all():
        return _non_finite("actions", a)
    if q is None:
        return ""
    if q.shape != a.shape:
        return (f"field 'joint_positions': expected shape {list(a.shape)} (one row per frame, "
                f"one column per channel, as 'actions'), found {list(q.shape)}")
    if not np.issubdtype(q.dtype, np.number) or not np.isfinite(q).all():
        return _non_finite("joint_positions", q)
    return ""


def _non_finite(name: str, a: np.ndarray) -> str:
    if not np.issubdtype(a.dtype, np.number):
        return f"field '{name}': expected numbers, found dtype {a.dtype}"
    r, c = np.argwhere(~np.isfinite(a))[0]
    return (f"field '{name}': non-finite value {a[r, c]} at row {r}, channel {c}: every "
            "reading must be a number (re-record, or drop the frames without readings)")


def _reason(code: str, message: str, dof: str | None = None) -> dict[str, Any]:
    return {"code": code, "dof": dof, "message": message}


def _stamp_reasons(ts: np.ndarray, rec: dict[str, Any]) -> list[dict[str, Any]]:
    """``stamps_not_monotonic`` when the episode's stamps ``ts`` float64 ``[T]`` s or the
    recording's camera stamps went back or repeated."""
    d = np.diff(ts)
    if (d <= 0).any() or int(rec.get("camera_stamps_non_monotonic", 0)):
        return [_reason("stamps_not_monotonic", f"expected strictly increasing stamps, found "
                        f"{int((d <= 0).sum())} in the episode and "
                        f"{rec.get('camera_stamps_non_monotonic', 0)} camera stamps going "
                        f"back or repeating")]
    return []


#: :func:`_energy`: the camera's noise level is the 95th percentile of a transition's
#: per-pixel differences...
NOISE_PIXEL_PERCENTILE = 95.0
#: ...in the quietest transitions: this percentile over the episode's transitions (a
#: sweep pauses in a quarter of them, and a moving link changes few of a frame's pixels).
NOISE_TRANSITION_PERCENTILE = 20.0
#: ...or this many times a transition's median pixel difference, where that is more.
NOISE_MEDIAN_GAIN = 3.0


#: :func:`_energy`: frames whose noise level (:func:`noise_level`, levels 0..255) averages
#: this much or more over the transitions come from a camera with noise...
NOISY_CAMERA_LEVEL = 0.5
#: ...and are differenced after a Gaussian blur of this sigma, px.
ENERGY_BLUR_PX = 1.0


def _channel_sums(frames: np.ndarray, step: int, blur_px: float) -> np.ndarray:
    """Absolute differences of consecutive frames ``frames`` uint8 ``[T, H, W, 3]``,
    summed over the channels: uint16 ``[T-1, H, W]`` (0..765), ``step`` transitions at a
    time, each frame blurred first by a Gaussian of ``blur_px`` (0: as they are)."""
    import cv2

    t = len(frames)
    sums = np.empty((t - 1, *frames.shape[1:3]), np.uint16)
    for i in range(0, t - 1, step):
        chunk = frames[i:min(i + step, t - 1) + 1]
        if blur_px > 0:
            chunk = np.stack([cv2.GaussianBlur(np.ascontiguousarray(f), (0, 0), blur_px)
                              for f in chunk])
        a = chunk.astype(np.int16)
        sums[i:i + len(a) - 1] = np.abs(np.diff(a, axis=0)).sum(axis=3, dtype=np.int16)
    return sums


#: Bytes of frame differences :func:`_energy` takes at a time (int16, a few such buffers
#: at once): its working memory beside the uint16 sums, whatever the episode's length.
ENERGY_CHUNK_BYTES = 64 << 20


def _energy(frames: np.ndarray, maps: bool = True, exclude: np.ndarray | None = None,
            exclude_during: list[tuple[int, int, np.ndarray]] | None = None
            ) -> tuple[np.ndarray, np.ndarray | None]:
    """Image motion of each transition: the mean absolute difference (0..255, averaged
    over the colour channels) of consecutive frames, each pixel's difference less the
    camera's noise level (:func:`noise_level`). A camera's noise and a video codec's
    flicker (a few levels on every pixel, keyframes) would otherwise add a floor that a
    small link's motion cannot rise above three times (a LeRobot H.264 episode with noise
    of 1.5 levels: floor 0.89, a shoulder's sweep 2.10, every joint failed); rendered frames
    (no noise: level 0) are measured as before. Frames whose noise level averages
    :data:`NOISY_CAMERA_LEVEL` or more are differenced after a Gaussian blur of
    :data:`ENERGY_BLUR_PX`: a camera's noise is independent from pixel to pixel and a
    moving link's change is not, so the blur takes most of the noise and little of the
    motion. Without it, camera noise of 3 levels and JPEG quality 70 on the 128 held-out
    robot and convention calibrations at 256 px raised the median floor to 0.09 and failed
    every one of them (345 DoFs failed no_image_motion; clean, 74 pass and 59 DoFs fail);
    with it the floor is 0.006 and 55 pass (96 DoFs fail); noise of 2 levels and quality
    85: 0 -> 47 pass (306 -> 102 DoFs). Rendered frames' figures are unchanged.

    The differences are taken a few frames at a time and kept as uint16 channel sums (2
    bytes a pixel): a 20 s 640x480 recording at 30 Hz took 7.4 GB differenced whole in
    float32; so its check peaks at 1.24 GB, its frames (0.57 GB), the sums (0.37 GB) and
    the chunks'.

    ``exclude``: bool ``[H, W]``, pixels left out of the noise level and the mean (what
    moves on its own while the arm holds still, :func:`scene_motion`); their maps are 0.
    ``exclude_during``: ``(first, stop, mask)`` triples, bool ``[H, W]`` pixels left out of
    the mean (and the maps) of transitions ``first .. stop - 1`` only (what else changed
    during one sweep, :func:`sweep_foreign_motion`); the noise level stays the episode's.

    Returns:
        ``(energy, per_pixel)``: float32 ``[T-1]`` and, with ``maps``, ``[T-1, H, W]``
        (else None).
    """
    t = len(frames)
    if t < 2:
        return np.zeros(0, np.float32), (np.zeros((0, *frames.shape[1:3]), np.float32)
                                         if maps else None)
    step = max(1, int(ENERGY_CHUNK_BYTES // max(1, frames[0].size * 2)))
    sums = _channel_sums(frames, step, 0.0)
    keep = None
    if exclude is not None and np.asarray(exclude).shape == frames.shape[1:3] \
            and np.asarray(exclude).any():
        keep = ~np.asarray(exclude, bool)
        if keep.mean() < 0.1:  # too little left to tell motion from noise: all of it
            keep = None
    noise = noise_level(sums if keep is None else sums[:, keep], scale=1.0 / 3.0)
    if float(np.mean(noise)) >= NOISY_CAMERA_LEVEL:  # a camera's noise: smoothed first
        del sums  # freed before the blurred differences are taken: one array at a time
        sums = _channel_sums(frames, step, ENERGY_BLUR_PX)
        noise = noise_level(sums if keep is None else sums[:, keep], scale=1.0 / 3.0)
    energy = np.empty(t - 1, np.float32)
    out = np.empty(sums.shape, np.float32) if maps else None
    kept_during = [(first, stop, ~np.asarray(mask, bool) if keep is None
                    else keep & ~np.asarray(mask, bool))
                   for first, stop, mask in exclude_during or ()]
    for i in range(0, t - 1, step):
        d = np.maximum(sums[i:i + step] * np.float32(1.0 / 3.0)
                       - noise[i:i + step, None, None], 0.0)
        if keep is not None:
            d[:, ~keep] = 0.0
            energy[i:i + step] = d[:, keep].mean(axis=1)
        else:
            energy[i:i + step] = d.mean(axis=(1, 2))
        for first, stop, kept in kept_during:
            for j in range(max(first, i), min(stop, i + len(d))):
                d[j - i, ~kept] = 0.0
                energy[j] = d[j - i][kept].mean() if kept.any() else 0.0
        if out is not None:
            out[i:i + step] = d
    return energy, out


#: :func:`scene_motion`: a pixel changes in a transition where its grey level moves by more
#: than this (levels, 0..255), or three times the transition's median change where that is
#: more (a camera's noise)...
SCENE_MOTION_LEVELS = 8.0
#: ...between the two ends of a run of at least this many transitions in which the arm
#: holds still (each end the median of up to 3 frames, changed pixels opened by 3x3 px)...
SCENE_MOTION_RUN = 3
#: ...where at least this share of the frame moved (less is said to be nothing).
SCENE_MOTION_MIN_SHARE = 0.002
#: :func:`held_transitions` takes a transition as held where every joint is still in it and
#: for this many frames either side (a camera lag of up to that many frames does not show
#: the arm's own motion there).
HELD_MARGIN_FRAMES = 3
HELD_MARGIN_S = 0.3


def held_transitions(q: np.ndarray, fps: float | None = None) -> list[int]:
    """Transitions ``i`` (frame i to i + 1) of a recording in which every joint holds still,
    with still frames either side (:data:`HELD_MARGIN_FRAMES`, or :data:`HELD_MARGIN_S` at
    ``fps`` where that is more: a camera late by up to that much does not show the arm's
    own motion there): a recording's lead-in, lead-out and long pauses. ``q`` float64
    ``[T, n]``, the joint readings per frame."""
    if len(q) < 2:
        return []
    span = np.maximum(np.ptp(q, axis=0), 1e-9)
    still = (np.abs(np.diff(q, axis=0)) <= 1e-3 * span).all(axis=1)  # [T-1]
    m = max(HELD_MARGIN_FRAMES, math.ceil(HELD_MARGIN_S * fps) if fps else 0)
    return [i for i in range(m, len(still) - m) if still[i - m:i + m + 1].all()]


def scene_motion(frames: np.ndarray, still: list[int]) -> np.ndarray | None:
    """The pixels that move on their own: those that differ between the first and the last
    frame of a run of the transitions ``still`` (frame i to i + 1) in which the arm holds
    still (:func:`held_transitions`: a recording's lead-in and lead-out), by more than
    :data:`SCENE_MOTION_LEVELS` grey levels (three times the pair's median difference where
    that is more: a camera's noise), in any such run. A conveyor running through the view,
    a screen, a fan, a person walking by: their motion is no DoF's, and left in it raised
    the check's noise floor past a small joint's image motion (a user's belt cell failed
    its flange with "the picture did not change", motion 0.48 against a floor of 0.20 x 3).
    An episode in the model's timing has no such holds (every transition lies next to a
    sweep's motion, where a late camera still shows the arm moving): it is judged as it is.

    Args:
        frames: uint8 ``[T, H, W, 3]``.
        still: transition indices (``i`` for frames ``i``, ``i + 1``) with every joint still.

    Returns:
        bool ``[H, W]``, or None where no run of at least :data:`SCENE_MOTION_RUN`
        transitions is given (or nothing moved).
    """
    import cv2

    still = sorted(i for i in set(still) if 0 <= i < len(frames) - 1)
    runs: list[tuple[int, int]] = []  # (first frame, last frame) of each run
    for i in still:
        if runs and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    runs = [r for r in runs if r[1] - r[0] >= SCENE_MOTION_RUN]
    if not runs:
        return None

    def grey(idx: range) -> np.ndarray:  # the median of a few frames: the camera's noise
        return np.median(np.stack([cv2.cvtColor(np.ascontiguousarray(frames[i]),
                                                cv2.COLOR_RGB2GRAY) for i in idx]),
                         axis=0).astype(np.float32)

    box = np.ones((3, 3), np.uint8)
    moving = np.zeros(frames.shape[1:3], bool)
    for a, b in runs:
        k = min(3, (b - a + 1) // 2)
        d = np.abs(grey(range(b - k + 1, b + 1)) - grey(range(a, a + k)))
        changed = (d > max(SCENE_MOTION_LEVELS, 3.0 * float(np.median(d)))).astype(np.uint8)
        # what moves is a thing, not scattered pixels of noise
        moving |= cv2.morphologyEx(changed, cv2.MORPH_OPEN, box) > 0
    return moving if moving.mean() >= SCENE_MOTION_MIN_SHARE else None


#: :func:`sweep_foreign_motion`: what changes on only one leg of a sweep may lie this share
#: of the frame's long side from a change on the other leg and still be the arm's (a camera
#: up to a frame late samples the two legs at other poses: a large link near the camera
#: left 0.1% of the frame beyond this at 0.3 frames late, nothing at 0.6 or 0.9)...
FOREIGN_TOLERANCE = 0.03
#: ...and a sweep is said to be disturbed where at least this share of the frame changed so.
FOREIGN_MIN_SHARE = 0.005


def sweep_foreign_motion(frames: np.ndarray, exclude: np.ndarray | None = None
                         ) -> np.ndarray:
    """The pixels that something other than the arm changed during one DoF's sweep: a
    person or an object passing, something put down or taken away, a light switched.

    A sweep of the model's timing goes out and comes back through the same poses
    (``SWEEP_PROFILE``: frames 1-4 out to the far end, 4-8 back home), so what the arm
    changes against the sweep's first frame is the same region on both legs, and its two
    home frames (0 and 8) show the same picture. Changed pixels (the grey level, blurred
    by 1 px against a camera's noise, moving by more than :data:`SCENE_MOTION_LEVELS` or
    three times the frame's median change) seen on one leg and nowhere within
    :data:`FOREIGN_TOLERANCE` of the frame's long side on the other, and pixels that
    differ between the two home frames, opened by 3x3 px: a camera late by up to a frame
    samples the two legs at other poses of the same path, which the tolerance absorbs. An
    object that passes through the view during the sweep is found where it was at other
    moments of the two legs; one standing still all through the sweep is not motion.

    Args:
        frames: uint8 ``[SEGMENT_FRAMES + 1, H, W, 3]``, one sweep's frames in the model's
            timing (its first and last frame at home).
        exclude: bool ``[H, W]``, pixels already known to move on their own
            (:func:`scene_motion`): left out of the answer.

    Returns:
        bool ``[H, W]``.

    Raises:
        ValueError: ``frames`` is not one sweep of ``SEGMENT_FRAMES + 1`` RGB frames.
    """
    import cv2

    frames = np.asarray(frames)
    if frames.ndim != 4 or len(frames) != SEGMENT_FRAMES + 1 or frames.shape[3] != 3:
        raise ValueError(f"expected one sweep's {SEGMENT_FRAMES + 1} RGB frames [9, H, W, 3], "
                         f"found {frames.shape}")
    grey = [cv2.GaussianBlur(cv2.cvtColor(np.ascontiguousarray(f, np.uint8),
                                          cv2.COLOR_RGB2GRAY).astype(np.float32),
                             (5, 5), 1.0) for f in frames]

    def changed(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        d = np.abs(a - b)
        return d > max(SCENE_MOTION_LEVELS, 3.0 * float(np.median(d)))

    against_home = [changed(g, grey[0]) for g in grey]
    out = np.any(against_home[1:5], axis=0)  # frames 1-4: out to the far end
    back = np.any(against_home[4:], axis=0)  # frames 4-8: from the far end back home
    h, w = frames.shape[1:3]
    r = max(1, int(round(FOREIGN_TOLERANCE * max(h, w))))
    near = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * r + 1, 2 * r + 1))
    grown_out = cv2.dilate(out.astype(np.uint8), near) > 0
    grown_back = cv2.dilate(back.astype(np.uint8), near) > 0
    foreign = (out & ~grown_back) | (back & ~grown_out) | changed(grey[-1], grey[0])
    foreign = cv2.morphologyEx(foreign.astype(np.uint8), cv2.MORPH_OPEN,
                               np.ones((3, 3), np.uint8)) > 0
    if exclude is not None and np.shape(exclude) == foreign.shape:
        foreign &= ~np.asarray(exclude, bool)
    return foreign


def foreign_motion_of_sweep(frames: np.ndarray, start: int,
                            exclude: np.ndarray | None = None) -> np.ndarray:
    """:func:`sweep_foreign_motion` of the sweep whose frames are ``frames[start : start +
    SEGMENT_FRAMES + 1]`` in an episode of the model's timing (uint8 ``[T, H, W, 3]``),
    read also one frame earlier (``start - 1``; for the first sweep its frame 7, at home
    too, in front of frames 0-7), and the smaller answer kept: a camera early against the
    joint readings shows a sweep's home at frames -1 and 7, the next sweep already moving
    in frame 8, as a late one shows it at 0 and 8; within a frame either way one of the two
    readings sees home at both ends. Returns bool ``[H, W]``.

    Raises:
        ValueError: the sweep's frames are not all in ``frames``.
    """
    frames = np.asarray(frames)
    if start < 0 or start + SEGMENT_FRAMES >= len(frames):
        raise ValueError(f"expected a sweep's {SEGMENT_FRAMES + 1} frames from frame {start} "
                         f"in an episode of {len(frames)} frames")
    late = sweep_foreign_motion(frames[start:start + SEGMENT_FRAMES + 1], exclude)
    first = frames[start - 1:start] if start else frames[SEGMENT_FRAMES - 1:SEGMENT_FRAMES]
    early = sweep_foreign_motion(np.concatenate([first, frames[start:start + SEGMENT_FRAMES]]),
                                 exclude)
    return late if late.sum() <= early.sum() else early


def noise_level(diffs: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """The camera's noise in per-pixel frame differences ``diffs`` ``[T-1, H, W]`` (levels
    0..255 once times ``scale``: float32 levels, or :func:`_energy`'s uint16 channel sums
    with ``scale`` 1/3), per transition float32 ``[T-1]``, in levels:
    :data:`NOISE_PIXEL_PERCENTILE` of each transition's pixels at
    :data:`NOISE_TRANSITION_PERCENTILE` over the transitions (the episode's steady noise),
    or :data:`NOISE_MEDIAN_GAIN` times the transition's own median pixel where that is more
    (a codec's frames alternate: every other transition of a 30 Hz H.264 episode carried
    noise of 1 level at its median, the others none; a moving link changes far fewer than
    half a frame's pixels). 0 for noiseless frames. Read one transition at a time."""
    if len(diffs) < 2:
        return np.zeros(len(diffs), np.float32)
    high = np.empty(len(diffs), np.float64)
    mid = np.empty(len(diffs), np.float64)
    for k in range(len(diffs)):
        flat = diffs[k].reshape(-1)
        high[k], mid[k] = np.percentile(flat, [NOISE_PIXEL_PERCENTILE, 50.0])
    steady = np.percentile(high * scale, NOISE_TRANSITION_PERCENTILE)
    return np.maximum(steady, NOISE_MEDIAN_GAIN * mid * scale).astype(np.float32)


def positions_seen_late(q: np.ndarray, lag: float) -> np.ndarray:
    """``q`` float64 ``[T, n]`` as a camera late by ``lag`` frames shows it: row t is the
    pose at t - lag (linear between knots; held at the first and last row)."""
    t = np.clip(np.arange(len(q)) - lag, 0, len(q) - 1)
    i0 = np.minimum(np.floor(t).astype(int), len(q) - 1)
    i1 = np.minimum(i0 + 1, len(q) - 1)
    w = (t - i0)[:, None]
    return q[i0] * (1 - w) + q[i1] * w


def _speed_fit(energy: np.ndarray, q: np.ndarray, lag: float) -> tuple[float, np.ndarray]:
    """``energy`` ``[T-1]`` fitted as a constant plus a non-negative weight per DoF times
    that DoF's speed ``|q[t] - q[t-1]|`` of ``q`` shifted by ``lag`` frames: the fit's R^2
    and the image motion the DoFs do not explain (``energy`` less the fitted motion,
    ``[T-1]``: the noise, wherever the joints' motion falls)."""
    speed = np.abs(np.diff(positions_seen_late(q, lag), axis=0))  # (T-1, n)
    x = np.hstack([speed, np.ones((len(speed), 1))])
    w, *_ = np.linalg.lstsq(x, energy, rcond=None)
    w[:-1] = np.maximum(w[:-1], 0.0)  # a DoF's motion never makes the picture stiller
    still = energy - speed @ w[:-1]
    w[-1] = float(np.mean(still))
    ss = float(((energy - energy.mean()) ** 2).sum())
    return (1.0 - float(((still - w[-1]) ** 2).sum()) / ss if ss > 0 else 0.0), still


#: :func:`pause_noise_floor` reads the pauses of this share of the sweeps, those that move
#: the picture least (at least two).
FLOOR_SWEEP_SHARE = 1.0 / 3.0


def pause_noise_floor(energy: np.ndarray, q: np.ndarray, lag: float,
                      sweeps: list[tuple[int, int]]) -> float | None:
    """The check's noise floor: what the pause transitions of the sweeps show beyond the
    arm's own motion, where a camera late (or early) by ``lag`` frames shows it.

    A camera a third of a frame late shows a third of each sweep's last step in the pause
    after it, and an early one the next sweep's first step in the pause before it. Each
    DoF's image motion per unit of its speed is fitted on its own sweep alone (through the
    origin, on the sweep's transitions where the camera shows them), and every DoF's fitted
    motion at its lag-shifted speed is taken off each transition. A fit of all DoFs at once
    with one shared constant (:func:`_speed_fit`, right for the lag's R^2) does not do it:
    the large links' motion, not linear in their speed, raises the constant and drives the
    faint DoFs' weights below zero, so a rendered arm 0.3 frames late read a floor of 0.19
    against 0.00 on time and failed its flange (motion 0.25) with "the picture did not
    change". The pauses kept are those of the sweeps that move the picture least (a third
    of them, at least two, :data:`FLOOR_SWEEP_SHARE`): a link's image motion is not a
    function of its speed alone (the pose, what it passes over), so the larger the sweep's
    motion the more a speed fit leaves in its pauses, while a camera's noise, a flicker or
    a scene moving in view shows in every pause alike. On 40 rendered cells of the
    held-out and stress splits (``bench/bench_camera_lag.py``), the DoFs that pass on time
    but fail at a lag of 0.2 / 0.35 frames: 2 / 7 with the shared-constant fit, 2 / 3
    reading the lower half of the sweeps, 0 / 1 the lower third; with camera noise of 3
    levels and JPEG 70 on 128 held-out calibrations 55 pass with a third, 54 with half, 50
    with the two faintest sweeps alone (a floor from four pauses swings with the noise). The weights are
    fitted to the motion beyond the floor and the floor read again (three rounds), so that
    a constant on every transition is the floor, not part of the weights.

    Args:
        energy: float ``[T-1]``, image motion per transition (:func:`_energy`).
        q: float64 ``[T, n]``, joint readings paired with the frames.
        lag: the camera's lag, frames (:func:`estimate_camera_lag`; > 0: late).
        sweeps: ``(column of q, first transition)`` of each DoF's sweep of
            ``SEGMENT_FRAMES`` transitions (pauses at rows ``_PAUSE_ROWS``).

    Returns:
        The floor (>= 0, image motion units, 0..255), or None where no sweep's pause lies
        inside the episode.
    """
    late = int(round(lag))
    speed = np.abs(np.diff(positions_seen_late(np.asarray(q, np.float64), lag), axis=0))
    speed = speed[:len(energy)]
    inside = [(c, start, [start + r + late for r in range(SEGMENT_FRAMES)
                          if 0 <= start + r + late < len(energy)]) for c, start in sweeps]
    moving = [(float(np.mean([energy[start + r + late] for r in _MOVE_ROWS
                              if 0 <= start + r + late < len(energy)] or [np.nan])), start)
              for _, start, _ in inside]
    order = sorted((m, start) for m, start in moving if np.isfinite(m))
    kept = {start for _, start in order[:max(2, math.ceil(FLOOR_SWEEP_SHARE * len(order)))]}
    floor = None
    for _ in range(3):  # the weights fitted to the motion beyond the floor, then again
        weight = np.zeros(speed.shape[1])
        for c, _, rows in inside:
            x = speed[rows, c]
            den = float(x @ x)
            if den > 0:
                weight[c] = max(0.0, float(x @ (energy[rows] - (floor or 0.0))) / den)
        left = energy - speed @ weight
        pauses = [float(left[start + r + late]) for _, start, _ in inside if start in kept
                  for r in _PAUSE_ROWS if 0 <= start + r + late < len(energy)]
        if not pauses:
            return None
        floor = max(0.0, float(np.median(pauses)))
    return floor


def estimate_camera_lag(frames: np.ndarray, q: np.ndarray, fps: float,
                        search_frames: float = LAG_SEARCH_FRAMES,
                        exclude: np.ndarray | None = None,
                        exclude_during: list[tuple[int, int, np.ndarray]] | None = None,
                        energy: np.ndarray | None = None) -> dict[str, Any] | None:
    """How late the frames show the joints against their readings, from the episode itself.

    The image motion of each transition (mean absolute frame difference less the camera's
    noise, :func:`_energy`) is fitted as a
    constant plus a non-negative weight per DoF times that DoF's speed at ``t - lag``; the
    lag with the best fit (R^2) is searched on a 0.05-frame grid over ``+-search_frames``
    (a range over 8 frames first in half-frame steps, then on the fine grid around the
    best), then refined by a parabola through the best point and its neighbours. A
    calibration sweep moves one DoF at a time, so the hand-over between DoFs fixes the lag
    even where one sweep's speed repeats (every 4 frames); sweeps that all last alike fit
    nearly as well again one leg or one sweep away, which ``next_best`` reports.

    Args:
        frames: uint8 ``[T, H, W, 3]``.
        q: float64 ``[T, n]``, the joint readings paired with the frames (rad or m; each
            DoF's unit only scales its own weight).
        fps: the episode's frame rate, Hz.
        search_frames: largest lag searched, frames.
        exclude: bool ``[H, W]``, pixels left out of the image motion (:func:`scene_motion`).
        exclude_during: ``(first, stop, mask)``: pixels left out of transitions ``first``
            to ``stop - 1`` only (what else changed during a sweep,
            :func:`sweep_foreign_motion`).
        energy: float ``[T-1]``, the image motion :func:`_energy` gives for ``frames`` with
            ``exclude`` and ``exclude_during``, where the caller has it already (else
            measured here).

    Returns:
        ``{"frames", "s", "r2", "r2_at_zero", "search_frames", "at_search_end",
        "next_best"}``: the lag (> 0: the frames are late, each showing the pose read
        ``frames`` knots earlier), in frames and seconds, the fit at that lag and at none,
        the range searched, whether the best fit lies at its end (the lag may be larger
        still), and over a range of more than 8 frames the best other peak at least 0.3 s
        away (``{"frames", "s", "r2"}`` on the half-frame grid, or None): one nearly as
        good leaves the lag in doubt.
    """
    q = np.asarray(q, np.float64)
    if len(frames) < 9 or q.ndim != 2 or len(q) != len(frames) or not np.ptp(q, axis=0).any():
        return None
    if energy is None:
        energy = _energy(frames, maps=False, exclude=exclude, exclude_during=exclude_during)[0]

    def fits(grid: np.ndarray) -> np.ndarray:
        return np.array([_speed_fit(energy, q, float(g))[0] for g in grid])

    r2_zero = fits(np.zeros(1))[0]
    lo, hi = -search_frames, search_frames
    second = None
    if search_frames > 8.0:  # half-frame steps first: the fit is smooth at that scale
        coarse = np.round(np.arange(lo, hi + 1e-9, 0.5), 4)
        cr2 = fits(coarse)
        b = int(np.argmax(cr2))
        c = float(coarse[b])
        apart = max(0.3 * fps, 2.0)  # another lag, not the same peak's shoulder
        peaks = [i for i in range(1, len(coarse) - 1) if cr2[i] >= cr2[i - 1]
                 and cr2[i] >= cr2[i + 1] and abs(coarse[i] - c) >= apart]
        if peaks:
            i = max(peaks, key=lambda x: cr2[x])
            second = {"frames": float(coarse[i]), "s": round(float(coarse[i]) / fps, 4),
                      "r2": round(float(cr2[i]), 4)}
        lo, hi = max(c - 1.0, lo), min(c + 1.0, hi)
    grid = np.round(np.arange(lo, hi + 1e-9, 0.05), 4)
    r2 = fits(grid)
    k = int(np.argmax(r2))
    lag = float(grid[k])
    if 0 < k < len(grid) - 1:
        den = r2[k - 1] - 2 * r2[k] + r2[k + 1]
        if den < 0:
            lag += float(0.05 * 0.5 * (r2[k - 1] - r2[k + 1]) / den)
    return {"frames": round(lag, 3), "s": round(lag / fps, 4), "r2": round(float(r2[k]), 4),
            "r2_at_zero": round(float(r2_zero), 4), "search_frames": search_frames,
            "at_search_end": bool(abs(lag) >= search_frames - 0.05), "next_best": second}


#: Tallest tile of a coverage sheet, px: frames taller (an import at the camera's size)
#: are reduced to it, so a sheet of 640x480 frames stays viewable.
SHEET_TILE_PX = 192

#: A DoF's readings sweeping more than this times its planned amplitude are in another
#: unit or scale than the plan's (a robot executing a program does not overshoot it 2x).
OVERSHOOT_RATIO = 2.0

#: A DoF's own reasons that frames missing from its sweep make meaningless (its knots then
#: show other moments of the recording): ``dropped_frames`` names the DoF instead.
_SWEEP_CODES = ("dof_not_moving", "sweep_reversed", "sweep_clipped", "sweep_short",
                "no_image_motion")


def _why_no_frame(rec: dict[str, Any], fps: float) -> str:
    """Why knots of a recording got no frame, from what the recorder kept: frames left
    unpaired (the joint stream had no sample on each side of them), a camera too slow for
    the plan's knot rate (its frames fall up to half a period from a knot), or else the
    camera's own drops or stalls."""
    near = f"no paired frame within {0.4 / fps * 1e3:.0f} ms of them"
    unpaired = int(rec.get("unpaired_camera_frames") or 0)
    frames, span = rec.get("camera_frames"), rec.get("duration_s")
    cam_fps = (frames - 1) / span if frames and span and frames > 1 and span > 0 else None
    if unpaired:
        return (f"{near}; {unpaired} of {frames} camera frames had no joint sample within the "
                f"pairing tolerance ({float(rec.get('tolerance_s') or 0) * 1e3:.0f} ms) on "
                f"each side: the joint stream dropped or delayed samples (check its rate and "
                f"link: syncedge bridge probe URL), or the tolerance is below its interval")
    if cam_fps is not None and cam_fps < 2.0 * fps:
        return (f"{near}; the camera ran at {cam_fps:.1f} fps against the plan's {fps:g} "
                f"knots per second, so its frames fall up to half a frame period from the "
                f"knots: use a camera at least twice the plan's rate, or plan at a lower "
                f"rate (calibrate plan --frame-rate-hz / --sweep-seconds)")
    return f"{near}: the camera dropped or stalled frames there"


def _lag_reason(lag: dict[str, Any] | None, rec: dict[str, Any], fps: float,
                opts: CheckOptions, imported: dict[str, Any] | None = None
                ) -> list[dict[str, Any]]:
    """``camera_lag`` when the measured lag is trustworthy and beyond the limit, or when the
    best fit lies at the end of the widest search (the lag may be larger still); the advice
    names what removes it: the recorder's latency option, or for an import the importer's
    image stamp offset (rosbag2) or ``calibrate retime``."""
    if lag is None:
        return []
    if lag["r2"] < opts.lag_min_r2 or lag["r2"] <= lag["r2_at_zero"] \
            or abs(lag["frames"]) < opts.max_lag_frames:
        return []
    edge = bool(lag.get("at_search_end"))
    late = lag["frames"] > 0
    ms = abs(lag["s"]) * 1e3
    if imported:
        how = _lag_fix_of_an_import(lag, imported)
    else:
        cam = float(rec.get("camera_latency_s") or 0.0)
        joint = float(rec.get("joint_latency_s") or 0.0)
        fixed = cam + lag["s"]
        # below 0: the joint readings are the late ones (the recorder subtracts the
        # camera's latency from the frame stamps, so a negative one moves them later)
        # a round-trip joint stamp is the capture time itself: the recorder ignores
        # --joint-latency-s there, so only the camera's latency can say the joints are late
        same = ("" if rec.get("joint_clock") == "round trip" else
                f"; the same as --joint-latency-s {joint - lag['s']:.3f} with "
                f"--camera-latency-s {cam:g}, as only their difference pairs")
        fix = (f"--camera-latency-s {fixed:.3f}" if fixed >= 0 else
               f"--camera-latency-s={fixed:.3f} (negative: the joint readings are the late "
               f"ones{same})")
        how = (f"record it again with {fix}" + (f" (recorded with --camera-latency-s {cam:g}, "
                                               f"--joint-latency-s {joint:g})" if rec else "")
               + "; an episode that cannot be recorded again: syncedge calibrate retime")
    size = (f"at least {ms:.0f} ms (the end of the {lag['search_frames'] / fps:.1f} s searched, "
            f"where the fit is still best: the frames' and the joints' stamps are on "
            f"different clocks, or a latency is seconds off)" if edge else f"{ms:.0f} ms")
    doubt = ""
    other = lag.get("next_best")
    if other and other["r2"] >= lag["r2"] - LAG_AMBIGUOUS_R2:
        doubt = (f"; the fit is nearly as good at {other['s'] * 1e3:+.0f} ms (R^2 "
                 f"{other['r2']:.2f}): sweeps alike in length fit again one leg or one sweep "
                 f"later, so the lag may be that one; after the fix, check again")
    return [_reason("camera_lag", f"the frames are {size} ({abs(lag['frames']):.2f} "
                    f"frames) {'late' if late else 'early'} against the joint readings: each "
                    f"shows the pose read {ms:.0f} ms {'earlier' if late else 'later'} (the "
                    f"image motion fits the joints' speeds with R^2 {lag['r2']:.2f} at that "
                    f"lag, {lag['r2_at_zero']:.2f} at none; expected within "
                    f"{opts.max_lag_frames:g} frames){doubt}; {how}")]


def _lag_fix_of_an_import(lag: dict[str, Any], imported: dict[str, Any]) -> str:
    """What removes a camera lag measured on an imported episode (``imported``:
    ``metadata.extra["import"]``)."""
    if imported.get("format") == "rosbag2":
        moved = float(imported.get("image_offset_s") or 0.0)
        offset = moved - lag["s"]
        delays = imported.get("receive_delay_s") or {}
        hint = _stamp_hint_s({"import": imported})  # the lag the delays point to, s
        seen = ""
        if hint is not None:
            seen = (f" (in the bag the camera's header stamps lag its messages' arrival by "
                    f"{delays['image'] * 1e3:.0f} ms, the joints' by "
                    f"{delays['joints'] * 1e3:.0f} ms"
                    + (f": they point to --image-offset-s={moved - hint:.3f}, not this; "
                       f"unless the camera's own latency is that long, take theirs"
                       if abs(lag["s"] - hint) > 0.2 else "") + ")")
        return (f"import the bag again with --image-offset-s={offset:.3f}, which moves "
                f"every image stamp by that much before pairing{seen}; or syncedge "
                f"calibrate retime on this episode")
    return ("its frames and joint readings were paired by the dataset; syncedge calibrate "
            "retime moves the frames by the lag")


def _segment_of(arr: EpisodeArrays, c: int, name: str) -> tuple[int, float | None]:
    for s in arr.meta.get("segments") or ():
        if s.get("dof") == name:
            return int(s["start"]), float(s["amplitude"])
    n = len(arr.actions) // SEGMENT_FRAMES
    if n < 1:
        return 0, None
    seg = np.abs(arr.actions[:n * SEGMENT_FRAMES, c]).reshape(n, SEGMENT_FRAMES)[:, :3].sum(1)
    return int(np.argmax(seg)) * SEGMENT_FRAMES, None


def _dof_report(arr: EpisodeArrays, c: int, name: str, frac: float, q: np.ndarray,
                energy: np.ndarray, noise: float, opts: CheckOptions,
                limits: tuple[list, list] | None) -> tuple[dict[str, Any], list[dict]]:
    start, planned = _segment_of(arr, c, name)
    rows = q[start:start + SEGMENT_FRAMES + 1, c] - q[start, c]  # (9,)
    reasons: list[dict] = []
    # the segment's amplitude is the plan's only for an episode recorded from the plan in the
    # model's timing; ingest (another timing, an import) writes the measured one
    extra = arr.meta.get("extra") or {}
    from_plan = planned is not None and "ingest" not in extra and name in {
        sw.get("dof") for sw in (extra.get("program") or {}).get("sweeps") or ()}
    if planned is None:  # no segments: the readings' own first swing
        planned = float(rows[np.argmax(np.abs(rows[:4]))]) if len(rows) else 0.0
    sign = 1.0 if planned >= 0 else -1.0
    amp = abs(planned)
    out = float(np.max(sign * rows)) if len(rows) else 0.0
    back = float(out - sign * rows[-1]) if len(rows) else 0.0
    moves = energy[start:start + SEGMENT_FRAMES]
    far_frames = [start + r for r in (3, 4) if start + r < len(arr.frames)]
    grid_moved = max((chain_grid_moved_px(arr.frames[start], arr.frames[f]) for f in far_frames),
                     default=None) if start < len(arr.frames) else None
    move_e = float(np.mean([moves[r] for r in _MOVE_ROWS if r < len(moves)])) if len(moves) \
        else 0.0
    rep = {"dof": name, "segment_start": start, "planned_amplitude": round(planned, 5),
           "amplitude_from": "plan" if from_plan else "readings",
           "swept_out": round(out, 5), "swept_back": round(back, 5),
           "fraction_out": round(out / amp, 4) if amp else None,
           "fraction_back": round(back / amp, 4) if amp else None,
           "image_motion": round(move_e, 4), "noise_floor": round(noise, 4),
           "chain_moved_px": grid_moved}
    need = frac * amp
    away = float(np.max(-sign * rows)) if len(rows) else 0.0  # against the plan's direction
    if amp and max(out, back) < 0.1 * amp and away >= frac * amp:
        reasons.append(_reason("sweep_reversed", f"DoF {name!r}: expected a sweep of "
                               f"{planned:+.3f} in frames {start}..{start + 8}, found it "
                               f"swept {-sign * away:+.3f}, the other way: the controller "
                               f"turns this joint opposite to the robot spec's direction (a "
                               f"sign convention); give the spec the controller's direction "
                               f"(or limits) and plan again, so that the program's sweep "
                               f"stays inside the joint's limits", name))
    elif amp and max(out, back) < 0.1 * amp:
        reasons.append(_reason("dof_not_moving", f"DoF {name!r}: expected a sweep of "
                               f"{planned:+.3f} in frames {start}..{start + 8}, found "
                               f"{out:.3f} (stuck, disabled, or not executing the program)",
                               name))
    elif amp and (out < need or back < need):
        step = np.diff(sign * rows[:4])  # measured steps of the outward phase
        plan_step = np.asarray(SWEEP_PROFILE[:3]) * amp
        stalled = bool(np.any((plan_step > 0.1 * amp) & (step < 0.2 * plan_step)))
        near = False
        if limits is not None:
            lo, hi = limits
            peak = q[start, c] + sign * out
            near = bool(min(abs(peak - lo[c]), abs(hi[c] - peak)) < 0.05)
        if stalled or near:
            reasons.append(_reason("sweep_clipped", f"DoF {name!r}: expected {frac:.0%} of "
                                   f"{planned:+.3f} each way, found it stopped at "
                                   f"{sign * out:+.3f} while commanded to move on (clipped "
                                   f"at a joint limit or an obstacle)", name))
        else:
            reasons.append(_reason("sweep_short", f"DoF {name!r}: expected at least "
                                   f"{need:.3f} each way, found out {out:.3f}, back "
                                   f"{back:.3f}: the joint falls short of its commands; "
                                   f"check the controller's tracking (gains, speed or "
                                   f"acceleration limits) or a scale on its readings (every "
                                   f"DoF short by the same share points to a scale), then "
                                   f"record again", name))
    if amp and out > OVERSHOOT_RATIO * amp:
        ratio = out / amp
        why = ("the joint readings are in degrees, not rad (the plan's unit): convert them "
               "to rad" if abs(ratio / math.degrees(1.0) - 1.0) < 0.05 else
               "the joint readings are in another unit or scale than the plan's")
        reasons.append(_reason("sweep_overshoot", f"DoF {name!r}: swept out {out:.3f} against "
                               f"{amp:.3f} planned, {ratio:.1f} times: {why}; check the "
                               f"controller's position unit (and the bridge's scaling, e.g. "
                               f"encoder_increments) and record again", name))
    if out >= 0.1 * amp and amp and (move_e < opts.motion_energy_min
                                     or move_e < opts.motion_noise_ratio * noise):
        reasons.append(_reason("no_image_motion", f"DoF {name!r} moved {out:.3f} but the "
                               f"picture did not change (motion {move_e:.3f}, expected > "
                               f"{max(opts.motion_energy_min, opts.motion_noise_ratio * noise):.3f}"
                               f"): camera pointed elsewhere, the joint occluded, or a "
                               f"joint that moves few pixels from this view (a wrist roll "
                               f"seen end-on, a small or distant link): aim the camera or "
                               f"bring it closer, or sweep wider (calibrate plan "
                               f"--amplitude); a joint that truly shows little matters little "
                               f"to the predictions: calibrate store --force \"REASON\"",
                               name))
    rep["passed"] = not reasons
    return rep, reasons


def _check_normalised(arr: EpisodeArrays, opts: CheckOptions
                      ) -> tuple[dict[str, Any], EpisodeArrays]:
    """Check a calibration episode of another timing through its normalised episode
    (``edge.calibrate.ingest``); an episode ingest refuses gets that one reason. Returns
    the report and the arrays it speaks of (the normalised episode's)."""
    from edge.calibrate.ingest import IngestError, normalise_calibration

    try:
        ep, ingest = normalise_calibration(Episode(
            arr.frames, arr.actions, arr.timestamps, EpisodeMetadata.from_json_dict(arr.meta),
            arr.joint_positions), None, fps=opts.model_fps)
    except IngestError as exc:
        # what the recording itself says is wrong stays beside ingest's one reason
        extra = arr.meta.get("extra") or {}
        rec = extra.get("recording") or {}
        ts = np.asarray(arr.timestamps, np.float64)
        pre = _stamp_reasons(ts, rec)
        message = str(exc)
        gaps = [g for g in frame_gaps(ts) if exc.frames and exc.frames[0] < g[0] <= exc.frames[1]]
        if gaps:
            i, d = max(gaps, key=lambda g: g[1])
            message += (f"; but the camera sent no frame for {d:.3f} s before frame {i} "
                        f"({ts[i] - ts[0]:.2f} s in), within those frames: frames were lost "
                        f"on the way (camera link, recorder falling behind), not too few "
                        f"taken; record again")
        hint = _stamp_hint_s(extra)
        if hint is not None and abs(hint) > 0.1:
            offset = float((extra.get("import") or {}).get("image_offset_s") or 0.0) - hint
            message += (f"; the import found the camera's header stamps {abs(hint):.3f} s "
                        f"off the joints' (their delays to arrival in the bag): unless the "
                        f"camera's own latency is that long, frames paired with the poses of "
                        f"another moment may be the whole cause: import the bag again with "
                        f"--image-offset-s={offset:.3f} first")
        if exc.code == "never_swept" and extra.get("import") and exc.dofs:
            names = list(arr.meta.get("dof_names") or [])
            moving = [n for n in names if n not in exc.dofs]
            if moving:
                message += (f"; if {', '.join(map(repr, exc.dofs))} are not joints this "
                            f"calibration drives (gripper fingers, a passive joint), import "
                            f"the recording again without them: --joints {','.join(moving)}")
        return {"verdict": "fail", "reasons": [*pre, _reason(exc.code, message, exc.dof)],
                "dofs": [], "frames": len(arr.frames),
                "dof_names": list(arr.meta.get("dof_names") or []),
                "fps": arr.meta.get("fps"), "validation_error": None,
                "ingest": {"normalised": False, "refused": exc.code,
                           "frames": list(exc.frames) if exc.frames else None}}, arr
    checked = EpisodeArrays.from_episode(ep)
    if opts.scene_motion is None and arr.joint_positions is not None:
        opts = dataclasses.replace(opts, scene_motion=scene_motion(
            arr.frames, held_transitions(np.asarray(arr.joint_positions, np.float64),
                                         float(arr.meta.get("fps") or 0) or None)))
    report = _report_of_normalised(arr, checked, ingest, opts)
    if opts.sweep_disturbance and any(r["code"] == "camera_lag" for r in report["reasons"]) \
            and _disturbed_recorded(report, checked, None, masks=False):
        # the recording's frames show other moments than its readings: its sweeps' two
        # legs cannot be compared; the lag is the one thing to fix, checked without them
        report = _report_of_normalised(arr, checked, ingest,
                                       dataclasses.replace(opts, sweep_disturbance=False))
    return report, checked


def _report_of_normalised(arr: EpisodeArrays, checked: EpisodeArrays, ingest: dict[str, Any],
                          opts: CheckOptions) -> dict[str, Any]:
    """The report of :func:`_check_normalised` once the recording is normalised into
    ``checked`` (``ingest``: what normalising it found)."""
    report, _ = _check_episode(checked, opts)
    report["ingest"] = ingest
    still = motion_between_sweeps(arr.frames, [tuple(sw["frames"]) for sw in ingest["sweeps"]],
                                  np.asarray(arr.timestamps, np.float64))
    if still and report.get("scene_motion_share"):
        still += ("; what moves on its own while the arm holds still is left out of the "
                  "image motion (a conveyor that cannot be stopped is fine)")
    report["notes"] = [*([still] if still else []), *report.get("notes", [])]
    ts = np.asarray(arr.timestamps, np.float64)
    lost = [(i, d, sw["dof"]) for i, d in frame_gaps(ts) for sw in ingest["sweeps"]
            if sw["frames"][0] < i <= sw["frames"][1]]
    if lost:
        report["notes"].append(
            "the camera sent no frame for " + ", ".join(
                f"{d:.3f} s before frame {i} (in the sweep of {dof})" for i, d, dof in lost[:5])
            + ": those sweeps are seen only either side of the gap; record again if a "
              "DoF's figures look short")
    _lag_of_the_recording(report, arr, opts.model_fps, opts,
                          _disturbed_recorded(report, checked, opts.scene_motion))
    if still and any(r["code"] == "camera_lag" for r in report["reasons"]):
        report["notes"][0] = still + ("; the camera lag above shows the same (frames that "
                                      "move while the readings stand still): correct it first")
    return report


def lag_search_frames(meta: dict[str, Any], frames: int, fps: float,
                      model_fps: float = DEFAULT_MODEL_FPS) -> float:
    """How far (+- frames of the episode, at ``fps`` Hz) :func:`estimate_camera_lag`
    searches an episode of ``frames`` frames with metadata ``meta`` (a JSON dict): a
    calibration in the model's timing (``8 n + 1`` frames, or a partial recording, which
    the check reads so too) +- :data:`LAG_SEARCH_FRAMES`;
    any other +- the same span in seconds and up to :data:`LAG_WIDE_SEARCH_S` (further where
    an import's stamp delays point further; at most a third of the episode)."""
    per = fps / model_fps if model_fps > 0 else 1.0
    n = len(meta.get("dof_names") or ())
    partial = not ((meta.get("extra") or {}).get("recording") or {}).get("complete", True)
    if meta.get("kind") == "calibration" and n and (frames == n * SEGMENT_FRAMES + 1
                                                    or partial):
        return LAG_SEARCH_FRAMES  # as check_episode reads them: in the model's timing
    return max(LAG_SEARCH_FRAMES * per,
               _widest_lag(frames, fps, _stamp_hint_s(meta.get("extra") or {})))


def _stamp_hint_s(extra: dict[str, Any]) -> float | None:
    """The lag an imported bag's stamp delays point to, s (``-(camera - joints)``: camera
    header stamps lagging their arrival by more than the joints' read early), or None."""
    delays = (extra.get("import") or {}).get("receive_delay_s") or {}
    if delays.get("image") is None or delays.get("joints") is None:
        return None
    return -(float(delays["image"]) - float(delays["joints"]))


def _disturbed_recorded(report: dict[str, Any], checked: EpisodeArrays,
                        scene: np.ndarray | None, masks: bool = True
                        ) -> list[tuple[int, int, np.ndarray | None]]:
    """What else changed during each disturbed sweep of a normalised episode
    (``foreign_motion_share`` at least :data:`FOREIGN_MIN_SHARE`), as ``(first, stop,
    mask)`` over the recording's own transitions (``report["ingest"]["source_frames"]``
    maps the checked frames to the recorded ones), for :func:`_energy`; without ``masks``
    their places only (mask None)."""
    src = (report.get("ingest") or {}).get("source_frames")
    if src is None or len(src) != len(checked.frames):
        return []
    out = []
    for d in report.get("dofs") or ():
        s = int(d["segment_start"])
        if (d.get("foreign_motion_share") or 0.0) >= FOREIGN_MIN_SHARE \
                and s + SEGMENT_FRAMES < len(src):
            mask = foreign_motion_of_sweep(checked.frames, s, exclude=scene) if masks else None
            out.append((int(src[max(s - 1, 0)]), int(src[s + SEGMENT_FRAMES]), mask))
    return out


def _lag_of_the_recording(report: dict[str, Any], arr: EpisodeArrays, model_fps: float,
                          opts: CheckOptions,
                          exclude_during: list[tuple[int, int, np.ndarray]] | None = None
                          ) -> None:
    """Measure the camera lag of an episode of another timing on its own frames at its own
    rate and put it in ``report`` (``camera_lag`` and its reason, the verdict with them).

    The normalised episode keeps one recorded frame per knot of the model's timing, so its
    frames are not evenly spaced in time and a lag read from them comes out short (about
    half of it for sweeps slower than the model's). The lag is searched over
    :func:`lag_search_frames` (at least the span in seconds searched in an episode of the
    model's timing, up to :data:`LAG_WIDE_SEARCH_S` or further where an import's stamp
    delays point: a camera stamped on another clock) and judged in the model's frames.
    ``exclude_during``: what else changed during the disturbed sweeps, over the
    recording's transitions (:func:`_disturbed_recorded`), left out of the image motion.
    """
    fps = float(arr.meta.get("fps") or 0.0)
    if frame_rate_note(fps, arr.timestamps):  # the rate the frames were taken at
        fps = _stamp_rate(arr.timestamps) or fps
    q = arr.joint_positions
    if q is None or fps <= 0 or model_fps <= 0:
        return
    per = fps / model_fps  # recorded frames per model frame
    extra = arr.meta.get("extra") or {}
    raw = estimate_camera_lag(arr.frames, np.asarray(q, np.float64), fps,
                              search_frames=lag_search_frames(
                                  arr.meta, len(arr.frames), fps, model_fps),
                              exclude=opts.scene_motion, exclude_during=exclude_during)
    if raw is None:
        return
    lag = {**raw, "frames": raw["s"] * model_fps, "search_frames": raw["search_frames"] / per,
           "measured_at_hz": fps}
    rec = extra.get("recording") or {}
    shifted = (report.get("camera_lag") or {}).get("image_motion_shifted_frames", 0)
    report["reasons"] = [r for r in report["reasons"] if r["code"] != "camera_lag"] + \
        _lag_reason(lag, rec, model_fps, opts, extra.get("import"))
    report["camera_lag"] = {**lag, "image_motion_shifted_frames": shifted}
    report["verdict"] = "fail" if report["reasons"] else "pass"


#: :func:`motion_between_sweeps`: a grey level change above this (levels, 0..255) is a
#: changed pixel...
STILL_CHANGE_LEVELS = 25
#: ...and this share of the frame's pixels changed is motion no channel's reading explains.
STILL_CHANGED_SHARE = 0.002


def motion_between_sweeps(frames: np.ndarray, sweeps: list[tuple[int, int]],
                          timestamps: np.ndarray) -> str | None:
    """The note when the picture changes between the sweeps of a calibration recorded at
    another timing, where every channel's reading stands at home: a channel missing from
    the joint stream (swept by the program but not reported), or something else moving
    in view. Each frame outside the sweeps' recorded spans is compared with the home frame
    (the first sweep's first frame) in grey; None when none changes more than
    :data:`STILL_CHANGED_SHARE` of its pixels by :data:`STILL_CHANGE_LEVELS`.

    Args:
        frames: uint8 ``[T, H, W, 3]`` as recorded.
        sweeps: each channel's ``(start, stop)`` recorded frames (ingest's).
        timestamps: float ``[T]`` s.
    """
    import cv2

    if not sweeps or len(frames) < 2:
        return None
    inside = np.zeros(len(frames), bool)
    for a, b in sweeps:
        inside[max(a, 0):b + 1] = True
    outside = np.flatnonzero(~inside)
    if not len(outside):
        return None
    home = cv2.cvtColor(frames[sweeps[0][0]], cv2.COLOR_RGB2GRAY).astype(np.int16)
    share = np.array([float((np.abs(cv2.cvtColor(frames[i], cv2.COLOR_RGB2GRAY)
                                    .astype(np.int16) - home) > STILL_CHANGE_LEVELS).mean())
                      for i in outside])
    moved = outside[share > STILL_CHANGED_SHARE]
    if not len(moved):
        return None
    worst = int(outside[np.argmax(share)])
    t0 = float(timestamps[0])
    return (f"the picture changed in {len(moved)} recorded frame(s) between the sweeps, "
            f"where every channel's reading stands at home (frames {int(moved[0])}.."
            f"{int(moved[-1])}, {timestamps[moved[0]] - t0:.2f}-{timestamps[moved[-1]] - t0:.2f}"
            f" s; most at frame {worst}, {share.max():.1%} of the pixels): a channel the "
            f"program sweeps but the joint stream does not report, or something moving in "
            f"view; record with every channel in the stream and the view clear")


#: :func:`view_motion` measures the flow with the frame's long side resized to this (px)...
VIEW_FLOW_SIDE = 128
#: ...takes a pixel as textured where the home frame's grey gradient is at least this
#: (levels per px at that size)...
VIEW_TEXTURE_LEVELS = 8.0
#: ...and as moved where its flow is more than this (px at that size) and its grey level
#: changed by more than this beyond the whole frame's median change (exposure): a straight
#: static edge picks up flow along itself from a link moving beside it (the aperture
#: problem) without changing, and a light's flicker changes levels without flow.
VIEW_MOVED_PX = 1.0
VIEW_CHANGE_LEVELS = 6.0
#: Frames whose short side is below this (px) are not judged (the flow needs room).
VIEW_MIN_SIDE = 32
#: ``camera_moves``: the view moved where at least this share of the textured pixels moved,
#: in the whole frame and in every edge strip that shows texture...
VIEW_MOVED_SHARE = 0.8
#: ...each strip this share of the frame's side wide...
VIEW_EDGE_SHARE = 0.15
#: ...at least this many of the four strips showing texture (this many textured pixels).
VIEW_EDGES_NEEDED = 3
VIEW_EDGE_MIN_PX = 12


def view_motion(home: np.ndarray, far: np.ndarray) -> dict[str, Any]:
    """How much of the view moved between two frames: the test of a camera that moves with
    the robot (``camera_moves``).

    A fixed camera watching an arm sees the arm move over a still scene: at a sweep's far
    end most of the picture, and above all the frame's edges, stands where it stood at
    home. A camera mounted on the arm (a wrist camera) or not rigidly fixed sees the whole
    picture move, edges included, with the joints that carry it. A textured pixel moved
    where dense flow (OpenCV DIS) from ``home`` to ``far`` at :data:`VIEW_FLOW_SIDE` moves
    it and its grey level changed beyond the frame's median change (a flat wall shows no
    motion either way; frames with a side under :data:`VIEW_MIN_SIDE` px are not judged).

    Args:
        home, far: uint8 ``[H, W, 3]``, the same camera's frames at a sweep's start and at
            its far end.

    Returns:
        ``{"moved": share of the textured pixels that moved (None: no texture), "edges":
        [share per edge strip: top, bottom, left, right; None where the strip shows too
        little texture], "view_moved": bool}``: ``view_moved`` where ``moved`` and every
        textured strip are at least :data:`VIEW_MOVED_SHARE`, with at least
        :data:`VIEW_EDGES_NEEDED` strips textured.
    """
    import cv2

    h, w = home.shape[:2]
    if min(h, w) < VIEW_MIN_SIDE:
        return {"moved": None, "edges": [None] * 4, "view_moved": False}
    scale = VIEW_FLOW_SIDE / max(h, w)  # a smaller frame enlarged: the flow needs room
    size = (max(VIEW_MIN_SIDE, round(w * scale)), max(VIEW_MIN_SIDE, round(h * scale)))

    def grey(img: np.ndarray) -> np.ndarray:
        g = cv2.cvtColor(np.ascontiguousarray(img), cv2.COLOR_RGB2GRAY)
        if size == (w, h):
            return g
        return cv2.resize(g, size, interpolation=cv2.INTER_AREA if scale < 1
                          else cv2.INTER_LINEAR)

    a, b = grey(home), grey(far)
    smooth = cv2.GaussianBlur(a.astype(np.float32), (0, 0), 1.0)
    grad = np.hypot(cv2.Sobel(smooth, cv2.CV_32F, 1, 0, ksize=3) / 8.0,
                    cv2.Sobel(smooth, cv2.CV_32F, 0, 1, ksize=3) / 8.0)
    textured = grad >= VIEW_TEXTURE_LEVELS
    flow = cv2.DISOpticalFlow_create(  # type: ignore[attr-defined]
        cv2.DISOPTICAL_FLOW_PRESET_MEDIUM).calc(a, b, None)
    # moved where the flow moves it and the picture there changed beyond a change of
    # exposure: flow alone slides along a straight static edge beside a moving link, a
    # change alone is a light's flicker
    diff = cv2.GaussianBlur(b.astype(np.float32), (0, 0), 1.0) - smooth
    moved = (np.linalg.norm(flow, axis=-1) > VIEW_MOVED_PX) & (
        np.abs(diff - float(np.median(diff))) > VIEW_CHANGE_LEVELS)
    sh, sw = max(1, round(size[1] * VIEW_EDGE_SHARE)), max(1, round(size[0] * VIEW_EDGE_SHARE))
    strips = [(slice(0, sh), slice(None)), (slice(size[1] - sh, None), slice(None)),
              (slice(None), slice(0, sw)), (slice(None), slice(size[0] - sw, None))]
    edges: list[float | None] = []
    for rows, cols in strips:
        t = textured[rows, cols]
        edges.append(float(moved[rows, cols][t].mean()) if t.sum() >= VIEW_EDGE_MIN_PX
                     else None)
    share = float(moved[textured].mean()) if textured.any() else None
    seen = [e for e in edges if e is not None]
    return {"moved": share, "edges": edges,
            "view_moved": bool(share is not None and share >= VIEW_MOVED_SHARE
                               and len(seen) >= VIEW_EDGES_NEEDED
                               and min(seen) >= VIEW_MOVED_SHARE)}


def _camera_moves(arr: EpisodeArrays, dofs: list[dict], q: np.ndarray, names: list[str],
                  imported: bool) -> list[dict]:
    """The ``camera_moves`` reason (none or one) of the DoFs whose sweep moved the whole
    view (:func:`view_motion` of each sweep's first and farthest frame, recorded in each
    DoF's report as ``view_moved``)."""
    hit, shares = [], []
    for rep in dofs:
        c = names.index(rep["dof"])
        a = int(rep["segment_start"])
        rows = np.abs(q[a:a + SEGMENT_FRAMES + 1, c] - q[a, c])
        rep["view_moved"] = None
        if not len(rows) or rows.max() <= 0 or a + int(np.argmax(rows)) >= len(arr.frames):
            continue
        vm = view_motion(arr.frames[a], arr.frames[a + int(np.argmax(rows))])
        rep["view_moved"] = None if vm["moved"] is None else round(vm["moved"], 3)
        if vm["view_moved"]:
            hit.append(rep["dof"])
            shares.append(vm["moved"])
    if not hit:
        return []
    lo, hi = f"{min(shares):.0%}", f"{max(shares):.0%}"
    span = lo if lo == hi else f"{lo}-{hi}"
    choose = ("choose a fixed camera's stream at import (--camera-key, --image-topic)"
              if imported else "record again with a camera fixed in the cell, aimed at the arm")
    return [_reason("camera_moves", f"the whole view moved with DoF(s) "
                    f"{', '.join(map(repr, hit))} (at each sweep's far end {span} of the "
                    f"picture's textured pixels "
                    f"moved, the frame's edges too): the camera moves with the robot "
                    f"(mounted on the arm, e.g. a wrist camera) or is not rigidly fixed. The "
                    f"chain model simulates a fixed camera watching the arm: {choose}",
                    hit[0] if len(hit) == 1 else None)]


#: :func:`frame_rate_note`: the timestamps' rate and ``metadata.fps`` disagree when they
#: differ by more than this share.
FPS_MISMATCH = 0.1


#: A step between frame stamps over this many median steps is a gap in the camera's frames.
GAP_PERIODS = 2.5


def frame_gaps(timestamps: np.ndarray) -> list[tuple[int, float]]:
    """``(frame index, seconds since the frame before)`` of each gap in the frames'
    stamps (s, ``[T]``, increasing): a step over :data:`GAP_PERIODS` median steps."""
    ts = np.asarray(timestamps, np.float64)
    if ts.ndim != 1 or len(ts) < 3:
        return []
    d = np.diff(ts)
    med = float(np.median(d))
    return [(int(i) + 1, float(d[i])) for i in np.flatnonzero(d > GAP_PERIODS * med)]


def _stamp_rate(timestamps: np.ndarray) -> float | None:
    """The rate (Hz) timestamps (s, ``[T]``) step at: one over their median step; None for
    fewer than 3 or a step that is not positive."""
    ts = np.asarray(timestamps, np.float64)
    if ts.ndim != 1 or len(ts) < 3:
        return None
    step = float(np.median(np.diff(ts)))
    return 1.0 / step if np.isfinite(step) and step > 0 else None


def frame_rate_note(fps: float | None, timestamps: np.ndarray) -> str | None:
    """The note ``calibrate check`` prints when an episode's ``metadata.fps`` (Hz) is not
    the rate its timestamps (s, ``[T]``) were taken at (median step, more than
    :data:`FPS_MISMATCH` apart): the timestamps are what the check reads the timing from,
    and a wrong ``fps`` misleads every tool that trusts it. None when they agree, or
    either is missing."""
    measured = _stamp_rate(timestamps)
    if not fps or fps <= 0 or measured is None \
            or abs(measured / float(fps) - 1.0) <= FPS_MISMATCH:
        return None
    step = 1.0 / measured
    return (f"metadata.fps is {float(fps):g} Hz but the timestamps step {step * 1e3:.1f} ms "
            f"({measured:.3g} Hz, median): the check reads the timing from the timestamps; "
            f"correct metadata.fps where it was written (the recorder or the import)")


def check_episode(arr: EpisodeArrays, opts: CheckOptions | None = None
                  ) -> tuple[dict[str, Any], EpisodeArrays]:
    """:func:`check_arrays`, also returning the arrays the report's frame indices refer to
    (the normalised episode where one was made; draw the coverage sheets from those).
    ``notes`` in the report: :func:`frame_rate_note` of the episode as given, the
    sweeps something other than the arm disturbed (also ``report["disturbed_sweeps"]``:
    ``{"dofs", "note"}``, or None), and the DoFs that pass but change the picture so
    little that a chain read likely leaves them out (also ``report["faint_for_chain"]``,
    their names: :func:`chain_grid_moved_px`)."""
    report, checked = _check_episode(arr, opts)
    note = frame_rate_note(arr.meta.get("fps"), arr.timestamps)
    hit = [d for d in report.get("dofs") or ()
           if (d.get("foreign_motion_share") or 0.0) >= FOREIGN_MIN_SHARE]
    disturbed = [_disturbed_sweeps_note(checked, report, hit)] if hit else []
    faint = [d for d in report.get("dofs") or ()
             if d.get("passed") and d.get("chain_moved_px") is not None
             and d["chain_moved_px"] < CHAIN_MIN_MOVED_PX]
    report["faint_for_chain"] = [d["dof"] for d in faint]
    report["notes"] = [*([note] if note else []), *report.get("notes", []), *disturbed,
                       *([_faint_note(faint)] if faint else [])]
    report["disturbed_sweeps"] = {"dofs": [d["dof"] for d in hit],
                                  "note": disturbed[0]} if hit else None
    return report, checked


#: :func:`chain_grid_moved_px`: the chain read's grid (the chain model's 64x64), the
#: frames' centre square tracked at this many times its side...
CHAIN_GRID = 64
CHAIN_TRACK_OVERSAMPLE = 3
#: ...a grid pixel moved where its flow exceeds this (grid px; the read's ``moving_px``)...
CHAIN_MOVING_PX = 0.5
#: ...and a channel whose sweep moves fewer grid pixels than this gets no axis (the read's
#: ``export.models.chain_fit.MIN_CARRIED_PX``).
CHAIN_MIN_MOVED_PX = 3


def chain_grid_moved_px(home: np.ndarray, far: np.ndarray) -> int:
    """How many pixels of a chain read's grid a sweep moves at its far end, as the read
    would see them: both frames' centre square (the read's crop) at
    :data:`CHAIN_TRACK_OVERSAMPLE` times :data:`CHAIN_GRID`, dense flow (OpenCV DIS) from
    ``home`` to ``far``, a pixel moved where the flow exceeds :data:`CHAIN_MOVING_PX` grid
    px and its grey level (blurred 1 px) changed by more than 6 levels (a flat region's
    flow is not motion); a grid pixel counts where most of its pixels moved. A channel
    under :data:`CHAIN_MIN_MOVED_PX` is one the read leaves out (on the kept reads of the
    128 held-out robot and convention cells: 85% of the 172 channels under it were left
    out, 0.7% of the 712 at or above it; 147 of the 152 left out lie under it;
    ``scripts/chain_left_out.py``, docs/eval/experiments.md, "Channels the read leaves
    out"). A wrist roll seen end-on changes shading (image motion) without moving pixels.

    Args:
        home, far: uint8 ``[H, W, 3]``, a sweep's first frame and one at its far end.

    Returns:
        The count of grid pixels moved (0 .. ``CHAIN_GRID ** 2``).
    """
    import cv2

    side = CHAIN_GRID * CHAIN_TRACK_OVERSAMPLE

    def grey(img: np.ndarray) -> np.ndarray:
        h, w = img.shape[:2]
        s = min(h, w)
        y, x = (h - s) // 2, (w - s) // 2
        g = cv2.cvtColor(np.ascontiguousarray(img[y:y + s, x:x + s]), cv2.COLOR_RGB2GRAY)
        return cv2.resize(g, (side, side), interpolation=cv2.INTER_AREA if s > side
                          else cv2.INTER_LINEAR)

    a, b = grey(home), grey(far)
    flow = cv2.DISOpticalFlow_create(  # type: ignore[attr-defined]
        cv2.DISOPTICAL_FLOW_PRESET_MEDIUM).calc(a, b, None)
    change = cv2.GaussianBlur(b.astype(np.float32), (0, 0), 1.0) - cv2.GaussianBlur(
        a.astype(np.float32), (0, 0), 1.0)
    moved = (np.linalg.norm(flow, axis=-1) / CHAIN_TRACK_OVERSAMPLE > CHAIN_MOVING_PX) \
        & (np.abs(change) > 6.0)
    grid = cv2.resize(moved.astype(np.float32), (CHAIN_GRID, CHAIN_GRID),
                      interpolation=cv2.INTER_AREA)
    return int((grid > 0.5).sum())


def _faint_note(faint: list[dict[str, Any]]) -> str:
    """The note naming DoFs that pass the check but that a chain read likely leaves out
    (:func:`chain_grid_moved_px` under :data:`CHAIN_MIN_MOVED_PX`)."""
    named = ", ".join(f"{d['dof']} ({d['chain_moved_px']} px)" for d in faint)
    return (f"{named}: the sweep moves fewer than {CHAIN_MIN_MOVED_PX} pixels of a chain "
            f"read's {CHAIN_GRID}x{CHAIN_GRID} grid at its far end, though the picture "
            f"changes: a chain read (calibrate store --chain) likely leaves "
            f"{'it' if len(faint) == 1 else 'them'} out and says so (a wrist roll seen "
            f"end-on, a small or distant link; it matters little to the predictions); to "
            f"have one read, sweep it wider within the model's range (calibrate plan "
            f"--amplitude) or bring the camera closer")


def _disturbed_sweeps_note(arr: EpisodeArrays, report: dict[str, Any],
                           hit: list[dict[str, Any]]) -> str:
    """The note naming the sweeps ``hit`` (DoF reports whose ``foreign_motion_share`` is
    at least :data:`FOREIGN_MIN_SHARE`) during which something other than the arm changed
    the picture, with the recorded frames they span."""
    parts = []
    for d in hit:
        tiles = tile_names(arr, report, d["segment_start"], SEGMENT_FRAMES + 1)
        parts.append(f"{d['dof']} ({d['foreign_motion_share']:.1%} of the picture, "
                     f"{tiles[0].split()[0]}-{tiles[-1].split()[0]})")
    sheets = ", ".join(f"dof-{d['dof']}.png" for d in hit)
    also = (", besides what moves on its own while the arm holds still,"
            if report.get("scene_motion_share") else "")
    return (f"during the sweep of {', '.join(parts)} something other than the arm{also} "
            f"changed the picture: a person or an object passing, something put down or taken "
            f"away, a light switched. Left out of the image motion and the camera lag, but "
            f"the cell calibration reads those sweeps' frames as they are: where the sheets "
            f"({sheets}, the change outlined in magenta) show it over the arm, record again "
            f"with the cell clear")


def _check_episode(arr: EpisodeArrays, opts: CheckOptions | None = None
                   ) -> tuple[dict[str, Any], EpisodeArrays]:
    """:func:`check_episode` without its notes."""
    opts = opts or CheckOptions()
    t0, n0 = len(arr.frames), arr.actions.shape[1]
    partial = not ((arr.meta.get("extra") or {}).get("recording") or {}).get("complete", True)
    if arr.meta.get("kind") == "calibration" and t0 != n0 * SEGMENT_FRAMES + 1 \
            and arr.validation_error is None and not partial:
        return _check_normalised(arr, opts)
    return _check_model_timing(arr, opts), arr


def check_arrays(arr: EpisodeArrays, opts: CheckOptions | None = None) -> dict[str, Any]:
    """Check a calibration episode's coverage.

    A calibration episode of another timing than ``8 n + 1`` frames is first normalised
    (``edge.calibrate.ingest``, recorded under ``report["ingest"]``) and the normalised
    episode is checked; one that ingest refuses fails with that one reason (its code:
    ``never_swept``, ``simultaneous``, ``no_return``, ``unseen``).

    Returns:
        The report: ``verdict`` (``"pass"``/``"fail"``), ``reasons`` (code, dof, message),
        ``dofs`` (per DoF: planned and swept amplitude, image motion), ``frames``,
        ``recording`` figures and the thresholds used.
    """
    return check_episode(arr, opts)[0]


#: ``program_not_followed``: the joint readings' RMS distance from the program, after its
#: start is aligned (``extra.recording.fit_rms``), above this share of the median planned
#: sweep amplitude. A recording that kept the program is at 1e-4 rad on the virtual cell; one
#: whose arm paused 1.5 s in its third sweep at 0.1 rad.
PROGRAM_FIT_FRACTION = 0.1


def _program_not_followed(rec: dict, program: dict) -> dict | None:
    """The ``program_not_followed`` reason of a recording whose joints did not keep the
    program's timing (paused, lagged, or ran another program), or None. Its frames are
    taken at the program's times, so every sweep is then read at the wrong moments."""
    rms = rec.get("fit_rms")
    amps = [abs(float(s.get("amplitude", 0.0))) for s in program.get("sweeps") or ()]
    amps = [a for a in amps if a > 0]
    limit = PROGRAM_FIT_FRACTION * float(np.median(amps)) if amps else 0.0
    if rms is None or not amps or rms <= limit:
        return None
    return _reason("program_not_followed", f"the joint readings are {rms:.3g} RMS from the "
                   f"program once its start is aligned (expected under {limit:.3g}, a "
                   f"tenth of the "
                   f"median sweep): the arm paused, lagged behind or ran another program, so "
                   f"the episode's frames, taken at the program's times, miss its sweeps; "
                   f"check that the controller runs the program without pauses or speed "
                   f"limits below it, and record again")


def _check_model_timing(arr: EpisodeArrays, opts: CheckOptions) -> dict[str, Any]:
    """The check of an episode in the model's timing (or one that cannot be normalised)."""
    meta = arr.meta
    names = list(meta.get("dof_names") or [])
    extra = meta.get("extra") or {}
    program = extra.get("program") or {}
    rec = extra.get("recording") or {}
    frac = opts.min_fraction if opts.min_fraction is not None else \
        float(program.get("min_fraction", DEFAULT_MIN_FRACTION))
    reasons: list[dict] = []
    kind = meta.get("kind")
    if kind is not None and kind != "calibration":
        # the one real reason: per-DoF sweep figures of an episode that sweeps nothing
        # would only contradict it
        reasons.append(_reason("not_calibration", f"the episode's kind is {kind!r}, expected "
                               f"'calibration': check the episode recorded with the sweep "
                               f"plan ('calibrate plan' without --motion)"))
        return _report(arr, reasons, [], names, frac, rec, np.zeros(0), opts.tolerance_s,
                       opts)
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        reasons.append(_reason("dof_duplicated", f"DoF name(s) {dup} appear more than once in "
                               f"{names}: expected one channel per name (check the "
                               f"controller's channel list)"))
    planned_names = list(program.get("dof_names") or [])
    for n in [n for n in planned_names if n not in names]:
        reasons.append(_reason("dof_missing", f"DoF {n!r} of the program is missing from the "
                               f"episode (found {names}): the joint stream did not report it",
                               n))
    t = len(arr.frames)
    n = arr.actions.shape[1]
    if meta.get("kind") == "calibration" and t != n * SEGMENT_FRAMES + 1:
        reasons.append(_reason("frame_count", f"expected {n * SEGMENT_FRAMES + 1} frames "
                               f"({n} DoF segments of {SEGMENT_FRAMES} plus one), found {t}"))
    partial = bool(rec) and not rec.get("complete", True)
    recorded = names  # the DoFs whose whole segment the episode holds
    starts = {sg.get("dof"): int(sg["start"]) for sg in meta.get("segments") or ()}
    if partial:
        why = rec.get("disconnected") or rec.get("joint_error") or "unknown"
        of = f" of {rec['frames_expected']}" if rec.get("frames_expected") else ""
        if rec.get("unpaired"):
            recorded = []
            more = ("; its frames could not be paired with joint samples, so no DoF is "
                    "checked: record again")
        else:
            # the plan's order, not the channels': a DoF without a segment was to be
            # swept after the recording ended (the channel order is only a guess without
            # any segment)
            recorded = [x for c, x in enumerate(names)
                        if (starts[x] if x in starts else
                            t if starts else c * SEGMENT_FRAMES) + SEGMENT_FRAMES < t]
            left = [x for x in names if x not in recorded]
            more = (f"; DoF(s) {left} not (wholly) recorded and not checked: record again"
                    if left else "")
        reasons.append(_reason("partial_recording", f"the recording ended early ({why}): "
                               f"{t}{of} frames{more}"))
    ts = np.asarray(arr.timestamps, np.float64)
    d = np.diff(ts)
    reasons.extend(_stamp_reasons(ts, rec))
    fps = float(meta.get("fps") or 0) or 1.0
    gaps = sorted(set(int(g) for g in rec.get("gaps", []))
                  | set(int(i) + 1 for i in np.flatnonzero(d > 1.5 / fps)))
    hit: list[str] = []  # DoFs whose sweep lost frames: dropped_frames is their reason
    if gaps:
        hit = [dof for dof, start in starts.items() if any(start < g <= start + SEGMENT_FRAMES
                                                           for g in gaps)]
        during = f" (during the sweep of {', '.join(map(str, hit))})" if hit else ""
        reasons.append(_reason("dropped_frames", f"frames missing at {len(gaps)} knot(s) "
                               f"{gaps[:10]}{during}: {_why_no_frame(rec, fps)}",
                               hit[0] if len(hit) == 1 else None))
    pe = np.asarray(rec.get("pair_error_s", []), np.float64)
    tol = float(rec.get("tolerance_s", opts.tolerance_s))
    if pe.size and pe.max() > tol:
        reasons.append(_reason("pairing_error", f"expected every frame within {tol * 1e3:.0f} "
                               f"ms of a joint sample, found {int((pe > tol).sum())} beyond "
                               f"(max {pe.max() * 1e3:.1f} ms)"))
    # what moves on its own while the arm holds still (a conveyor): not any DoF's motion;
    # known from a recording's holds (given by the check of an episode of another timing)
    moving_scene = opts.scene_motion
    energy, _ = _energy(arr.frames, maps=False, exclude=moving_scene) if t > 1 else \
        (np.zeros(0), None)
    q = arr.joint_positions if arr.joint_positions is not None else \
        np.vstack([np.zeros((1, n)), np.cumsum(arr.actions[:-1], 0)])
    limits = (program["lower"], program["upper"]) if "lower" in program and \
        planned_names == names else None
    cols = [c for c, x in enumerate(names) if x not in dup and x in recorded]
    upto = max((starts.get(names[c], c * SEGMENT_FRAMES) + SEGMENT_FRAMES + 1 for c in cols),
               default=0) if partial else t
    # the image motion measured above is the lag's where it covers the same frames
    lag = estimate_camera_lag(arr.frames[:upto], q[:upto, cols], fps, exclude=moving_scene,
                              energy=energy if upto == t else None) if cols else None
    lag_reasons = _lag_reason(lag, rec, fps, opts, extra.get("import"))
    # what else changed during a sweep (a person passing, an object moved): left out of its
    # image motion and of the camera lag like the scene's own motion, and said; only where
    # the frames show the sweeps' moments (a camera late beyond the limit is fixed first)
    foreign = {}
    for c, name in enumerate(names):
        start = _segment_of(arr, c, name)[0]
        if opts.sweep_disturbance and not lag_reasons and name not in dup \
                and name in recorded and start + SEGMENT_FRAMES < t:
            mask = foreign_motion_of_sweep(arr.frames, start, exclude=moving_scene)
            foreign[name] = (start, float(mask.mean()), mask)
    during = [(start, start + SEGMENT_FRAMES, mask) for start, share, mask in foreign.values()
              if share >= FOREIGN_MIN_SHARE]
    if during:
        energy, _ = _energy(arr.frames, maps=False, exclude=moving_scene,
                            exclude_during=during)
        lag = estimate_camera_lag(arr.frames[:upto], q[:upto, cols], fps, exclude=moving_scene,
                                  exclude_during=during,
                                  energy=energy if upto == t else None) if cols else None
        lag_reasons = _lag_reason(lag, rec, fps, opts, extra.get("import"))
    pauses = [energy[k * SEGMENT_FRAMES + r] for k in range(n) for r in _PAUSE_ROWS
              if k * SEGMENT_FRAMES + r < len(energy)]
    noise = float(np.median(pauses)) if pauses else 0.0
    shift = int(round(lag["frames"])) if lag_reasons and lag is not None else 0
    if lag is not None and lag["r2"] >= opts.lag_min_r2:
        # the noise floor: what the pause transitions show beyond the joints' motion at
        # the measured lag (a late camera shows a sweep's last moves in its pauses)
        floor = pause_noise_floor(energy[:upto - 1], q[:upto, cols], lag["frames"],
                                  [(k, _segment_of(arr, c, names[c])[0])
                                   for k, c in enumerate(cols)])
        noise = floor if floor is not None else noise
    if shift:  # judge each DoF's image motion where the late (early) camera shows it
        energy = energy[np.clip(np.arange(len(energy)) + shift, 0, len(energy) - 1)]
    dofs = []
    for c, name in enumerate(names):
        if name in dup or name not in recorded:
            continue
        rep, rs = _dof_report(arr, c, name, frac, q, energy, noise, opts, limits)
        rep["foreign_motion_share"] = round(foreign[name][1], 4) if name in foreign else None
        if name in hit:  # its knots show other moments: judged by what was not dropped
            rep["judged"] = False
            rs = [r for r in rs if r["code"] not in _SWEEP_CODES]
        dofs.append(rep)
        reasons.extend(rs)
    blind = [r for r in reasons if r["code"] == "no_image_motion"]
    if len(dofs) >= 2 and len(blind) == len(dofs):
        # not one sweep changed the picture: one cause, said once
        reasons = [r for r in reasons if r["code"] != "no_image_motion"]
        reasons.append(_reason("no_image_motion", f"none of the {len(dofs)} DoFs' sweeps "
                               "changed the picture, though the joints moved: the camera "
                               "does not see the arm (pointed elsewhere, covered, or a "
                               "frozen image); aim it at the arm and record again"))
    reasons.extend(_distinct(arr, dofs, opts))
    # the one cause of every other figure of the DoFs it names: said before them
    reasons[:0] = _camera_moves(arr, dofs, q, names, bool(extra.get("import")))
    followed = _program_not_followed(rec, program)
    if followed is not None and any(r["code"] in ("sweep_reversed", "sweep_overshoot")
                                    for r in reasons):
        followed = None  # a joint the other way or in another unit explains the distance
    if followed is not None:  # the sweeps' figures are read at the wrong moments
        for r in reasons:
            if r["code"] in _SWEEP_CODES:
                r["message"] += "; read at the program's times, which the joints did not keep"
        reasons.insert(0, followed)
    if lag_reasons:  # the lag may be the whole story of a faint DoF: fix it first
        for r in reasons:
            if r["code"] == "no_image_motion":
                r["message"] += ("; judged through the camera lag below, which may explain "
                                 "it: correct the lag first (the camera_lag line says how)")
    elif lag is not None and lag["r2"] >= opts.lag_min_r2 and abs(lag["frames"]) >= 0.25:
        for r in reasons:  # under the limit, but enough to blur a faint DoF's motion
            if r["code"] == "no_image_motion":
                r["message"] += (f"; the frames are {abs(lag['frames']):.2f} frames "
                                 f"{'late' if lag['frames'] > 0 else 'early'} against the "
                                 f"joints (camera_lag; under the {opts.max_lag_frames:g}-frame "
                                 f"limit), which may explain part of it: record again with "
                                 f"the latency corrected by {lag['s'] * 1e3:+.0f} ms")
    reasons.extend(lag_reasons)
    report = _report(arr, reasons, dofs, names, frac, rec, pe, tol, opts)
    report["camera_lag"] = None if lag is None else {**lag, "image_motion_shifted_frames": shift}
    share = 0.0 if moving_scene is None else float(moving_scene.mean())
    report["scene_motion_share"] = round(share, 4)
    if share:
        for r in report["reasons"]:
            if r["code"] == "no_image_motion":
                r["message"] += (f"; but {share:.1%} of the picture moves on its own while "
                                 f"the arm holds still (a conveyor, a person in view): left "
                                 f"out of the image motion where the holds showed it, it "
                                 f"still raises the noise floor elsewhere: record with it "
                                 f"stopped, or, if the sweep sheet dof-{r['dof']}.png shows "
                                 f"the joint moving, store with --force")
        report["notes"] = [f"{share:.1%} of the picture moves on its own while the arm holds "
                           f"still (a conveyor, a screen, a person in view): left out of "
                           f"every DoF's image motion and the camera lag"]
    return report


def _report(arr: EpisodeArrays, reasons: list[dict], dofs: list[dict], names: list[str],
            frac: float, rec: dict, pe: np.ndarray, tol: float,
            opts: CheckOptions) -> dict[str, Any]:
    fps = float(arr.meta.get("fps") or 0) or 1.0
    return {"verdict": "fail" if reasons else "pass", "reasons": reasons, "dofs": dofs,
            "frames": len(arr.frames), "dof_names": names, "fps": fps, "min_fraction": frac,
            "validation_error": arr.validation_error,
            "recording": {k: rec.get(k) for k in ("duration_s", "wall_s", "camera_frames",
                                                  "joint_samples", "joint_drift_ppm",
                                                  "fit_rms", "complete")} if rec else None,
            "pair_error_max_s": float(pe.max()) if pe.size else None,
            "thresholds": {"motion_energy_min": opts.motion_energy_min,
                           "motion_noise_ratio": opts.motion_noise_ratio,
                           "distinct_max_corr": opts.distinct_max_corr,
                           "tolerance_s": tol, "max_lag_frames": opts.max_lag_frames,
                           "lag_min_r2": opts.lag_min_r2}}


def _distinct(arr: EpisodeArrays, dofs: list[dict], opts: CheckOptions) -> list[dict]:
    moving = [d for d in dofs if d["passed"]]
    if len(moving) < 2:
        return []
    _, maps = _energy(arr.frames)
    vecs = []
    for d in moving:
        s = d["segment_start"]
        m = sum(maps[s + r] for r in _MOVE_ROWS if s + r < len(maps)).ravel()
        m = m - m.mean()
        vecs.append(m / (np.linalg.norm(m) + 1e-9))
    corr = np.stack(vecs) @ np.stack(vecs).T
    np.fill_diagonal(corr, -1.0)
    out = []
    for i, d in enumerate(moving):
        j = int(np.argmax(corr[i]))
        d["max_motion_corr"] = round(float(corr[i, j]), 4)
        if corr[i, j] > opts.distinct_max_corr:
            d["passed"] = False
            out.append(_reason("image_motion_not_distinct", f"DoF {d['dof']!r}: its picture "
                               f"change matches DoF {moving[j]['dof']!r} (correlation "
                               f"{corr[i, j]:.3f} > {opts.distinct_max_corr}): expected each "
                               f"DoF to move a different part of the picture", d["dof"]))
    return out


def amplitude_word(dof: dict[str, Any]) -> str:
    """How a DoF report's ``planned_amplitude`` was found, for a printed line or a label:
    ``"planned"`` (the episode carries the plan's segments) or ``"measured"`` (no plan: the
    readings' own first swing, so the fractions say only how far it came back)."""
    return "measured" if dof.get("amplitude_from") == "readings" else "planned"


def tile_names(arr: EpisodeArrays, report: dict[str, Any], start: int, count: int
               ) -> list[str]:
    """Names of the coverage sheet's tiles for frames ``start .. start + count - 1`` of the
    checked episode: ``f<index> <time>s``, the index and time (s from the first frame) of
    the recorded frame each came from where the episode was normalised
    (``report["ingest"]["source_frames"]`` / ``["source_times_s"]``), else its own."""
    ingest = report.get("ingest") or {}
    src, src_t = ingest.get("source_frames"), ingest.get("source_times_s")
    if ingest.get("normalised") and src is not None and src_t is not None \
            and len(src) == len(src_t) == len(arr.frames):
        index, times = [int(i) for i in src], np.asarray(src_t, np.float64)
    else:
        t = np.asarray(arr.timestamps, np.float64)
        index, times = list(range(len(t))), t - (t[0] if len(t) else 0.0)
    return [f"f{index[r]} {times[r]:.1f}s" if r < len(times) else f"f{r}"
            for r in range(start, start + count)]


def coverage_sheets(arr: EpisodeArrays, report: dict[str, Any]) -> dict[str, np.ndarray]:
    """Contact sheets: ``{"coverage": all DoFs, <dof>: one DoF}``, RGB uint8 images.

    Each DoF's row shows the 9 frames of its segment, each tile named by its frame index
    (``f12``) and time from the episode's start (``1.2s``), the row labelled with the
    verdict and how far the joint swept out against the plan (the reading's unit); what
    something other than the arm changed during a sweep (:func:`foreign_motion_of_sweep`,
    where the report says so) is outlined in magenta on its row. For an
    episode normalised from a recording of another timing (``report["ingest"]``), a tile
    names the recorded frame it came from and that frame's time in the recording.
    """
    import cv2

    from edge.visual import contact_sheet

    rows, labels, tiles, sheets = [], [], [], {}
    h, w = arr.frames.shape[1:3]
    # a camera-size import: tiles reduced to a viewable size, else small frames enlarged
    shrink = None if h <= SHEET_TILE_PX else (max(1, round(w * SHEET_TILE_PX / h)), SHEET_TILE_PX)
    scale = 1 if shrink is not None else max(2, SHEET_TILE_PX // max(1, h))
    for d in report["dofs"]:
        s = d["segment_start"]
        row = arr.frames[s:s + SEGMENT_FRAMES + 1]
        if (d.get("foreign_motion_share") or 0.0) >= FOREIGN_MIN_SHARE \
                and len(row) == SEGMENT_FRAMES + 1:  # what else changed: outlined
            found = foreign_motion_of_sweep(arr.frames, s).astype(np.uint8)
            outline, _ = cv2.findContours(found, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
            row = np.stack([cv2.drawContours(np.ascontiguousarray(f).copy(), outline, -1,
                                             (255, 0, 255), max(1, h // 120)) for f in row])
        if shrink is not None:
            row = np.stack([cv2.resize(f, shrink, interpolation=cv2.INTER_AREA) for f in row])
        label = (f"{d['dof']} {'ok' if d['passed'] else 'FAIL'}: swept out "
                 f"{d['swept_out']:.2f} of {abs(d['planned_amplitude']):.2f} "
                 f"{amplitude_word(d)}")
        if (d.get("foreign_motion_share") or 0.0) >= FOREIGN_MIN_SHARE:
            label += f"; {d['foreign_motion_share']:.1%} changed by something else (outlined)"
        names = tile_names(arr, report, s, len(row))
        sheets[d["dof"]] = contact_sheet([row], [label], [names], scale=scale)
        rows.append(row)
        labels.append(label)
        tiles.append(names)
    if rows:
        sheets["coverage"] = contact_sheet(rows, labels, tiles, scale=scale)
    return sheets
