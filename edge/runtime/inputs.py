"""Reading the command-line inputs: start frames, candidate actions, joint states, images.

Every reader raises :class:`~edge.runtime.errors.RuntimeInputError` naming the file and
what was expected and found.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from edge.episode import Episode, load_episode
from edge.fileio import not_utf8
from edge.runtime.errors import RuntimeInputError

__all__ = ["PLAUSIBLE_SLIDE_M_S", "PLAUSIBLE_START_TURN_RAD", "PLAUSIBLE_TURN_RAD_S",
           "action_speed_warnings", "check_episode_rate", "episode_mismatch_warning",
           "episode_sliding",
           "fit_image", "grey_image_note", "load_actions", "load_image",
           "load_joint_state", "load_start", "start_joint_warnings", "whole_multiple"]

#: A joint speed (rad/s) above every serial arm's rating (the fastest common arms turn a
#: joint at about pi rad/s): a step faster than this reads as actions in another unit.
PLAUSIBLE_TURN_RAD_S = 2.0 * math.pi
#: The same for a sliding channel (m/s; grippers and linear axes move well under it).
PLAUSIBLE_SLIDE_M_S = 1.0
#: A start reading more than this (rad) from the calibration's home pose: another unit.
PLAUSIBLE_START_TURN_RAD = 2.0 * math.pi

_IMAGE_EXT = (".png", ".jpg", ".jpeg", ".bmp")


def load_image(path: str | os.PathLike[str]) -> np.ndarray:
    """An RGB image uint8 ``[H, W, 3]`` from PNG/JPEG/BMP or ``.npy``."""
    path = Path(path)
    if path.is_dir():
        raise RuntimeInputError(f"{path}: is a folder; expected an image file (.png, .jpg, "
                                f".bmp, .npy) or an episode .npz")
    if path.suffix.lower() == ".npy":
        if path.is_file() and path.stat().st_size == 0:
            raise RuntimeInputError(f"{path}: an empty file; expected a uint8 [H, W, 3] RGB "
                                    "image saved with numpy.save")
        try:
            img = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise RuntimeInputError(f"{path}: cannot read the image: {exc}") from None
    elif path.suffix.lower() in _IMAGE_EXT:
        import cv2

        if not path.is_file():  # before OpenCV, which would print its own warning
            raise RuntimeInputError(f"{path}: no such image file")
        bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if bgr is None:
            raise RuntimeInputError(f"{path}: cannot read the image (missing or not an image)")
        img = np.ascontiguousarray(bgr[..., ::-1])
    else:
        raise RuntimeInputError(f"{path}: expected an image (.png, .jpg, .bmp, .npy), found "
                                f"'{path.suffix}'")
    if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
        raise RuntimeInputError(f"{path}: expected uint8 [H, W, 3] RGB, found {img.dtype} "
                                f"{list(img.shape)}")
    return img


#: ``metadata.extra`` key :func:`load_start` sets on an episode it resized: ``[W, H]`` as
#: recorded.
RESIZED_FROM = "start_resized_from_wh"


def whole_multiple(size_hw: tuple[int, ...], resolution: tuple[int, ...]) -> bool:
    """True when a frame of ``size_hw`` ``(H, W)`` px is the model's ``resolution``
    ``(h, w)`` times one whole factor >= 2 in both directions (reduced by area, nothing
    cropped)."""
    (h0, w0), (h, w) = size_hw[:2], resolution[:2]
    return h0 % h == 0 and w0 % w == 0 and h0 // h == w0 // w >= 2


def start_resize_warnings(episode: Episode | None, where: str) -> list[str]:
    """The line ``simulate`` and ``precheck`` warn with (stderr and the report's
    ``warnings``) when :func:`load_start` resized the start episode ``episode`` (read from
    ``where``) to the model's resolution: the prediction and every figure are at that
    resolution, not the recording's. ``[]`` otherwise, and for a recording at a whole
    multiple of the model's grid (the 256x256 the chain model is recorded at for a 64x64
    grid: reduced by area, nothing cropped; the documented input is no warning)."""
    if episode is None or RESIZED_FROM not in episode.metadata.extra:
        return []
    (w0, h0), (h, w) = episode.metadata.extra[RESIZED_FROM], episode.frames.shape[1:3]
    if whole_multiple((h0, w0), (h, w)):
        return []
    return [f"{where}: frames of {w0}x{h0} px centre-cropped and resized to the model's "
            f"{w}x{h}, as a recording is: the prediction and its figures (PSNR, SSIM) are "
            f"at {w}x{h}, not at the recorded size"]


def episode_sliding(episode: Episode | None, channels: int) -> np.ndarray | None:
    """bool ``[channels]``: which channels slide (unit m) by the episode's
    ``metadata.dof_units`` (:func:`action_speed_warnings`' ``sliding``); None without an
    episode or when its channel count is another."""
    if episode is None or len(episode.metadata.dof_units) != channels:
        return None
    return np.array([u == "m" for u in episode.metadata.dof_units], bool)


def check_episode_rate(episode: Episode, model_hz: float, where: str) -> None:
    """An episode whose own actions are rolled out must be at the model's frame rate: each
    action is one step's change, so a 30 Hz episode's actions run at 10 Hz would be a third
    of the motion per step and its frames would be compared with the wrong steps.

    Raises:
        RuntimeInputError: ``metadata.fps`` more than 1% from ``model_hz``, naming the field
            and the import that resamples it.
    """
    fps = float(episode.metadata.fps or 0.0)
    if fps and abs(fps - model_hz) > 0.01 * model_hz:
        raise RuntimeInputError(
            f"{where}: metadata.fps {fps:g} Hz, but the model steps at {model_hz:g} Hz: the "
            f"episode's own actions (each one step's change) cannot be rolled out at another "
            f"rate. Resample it: 'syncedge calibrate import DATASET --kind validation --fps "
            f"{model_hz:g} ...' (a dataset), or record at the model's rate; or give --actions "
            f"at {model_hz:g} Hz with this start")


def load_start(path: str | os.PathLike[str], resolution: tuple[int, int],
               notes: list[str] | None = None) -> tuple[np.ndarray, Episode | None]:
    """The start frame uint8 ``[H, W, 3]`` from an image or an episode (its first frame).

    An episode recorded at another frame size (an import keeps the camera's) has its
    frames centre-cropped and area-resized to ``resolution`` as a recording is
    (:func:`edge.calibrate.camera.fit_frame`; recorded in its ``metadata.extra`` under
    :data:`RESIZED_FROM`, warned of by :func:`start_resize_warnings`), so its frames after
    the first stay the ground truth; its evaluation-only ``robot_mask`` and ``ee_px``, drawn at
    the recorded size, are dropped.

    An image at a whole multiple of ``resolution`` (:func:`whole_multiple`) is reduced by
    area as a recording is; any other image at least as large in both directions (a
    camera's 424x240 frame) is centre-cropped and area-resized as a recording is, with a
    line appended to ``notes`` saying so (the episode's frames are, too).

    Returns:
        ``(frame, episode)``; ``episode`` is None for an image.

    Raises:
        RuntimeInputError: unreadable, or an image smaller than ``resolution`` in either
            direction (enlarging invents detail the camera did not see).
        EpisodeError: a malformed episode file.
    """
    path = Path(path)
    episode = load_episode(path) if path.suffix.lower() == ".npz" else None
    if episode is not None and episode.frames.shape[1:3] != tuple(resolution):
        from edge.calibrate.camera import fit_frame

        h, w = resolution
        meta = dataclasses.replace(episode.metadata, extra={
            **episode.metadata.extra,
            RESIZED_FROM: [int(episode.frames.shape[2]), int(episode.frames.shape[1])]})
        episode = dataclasses.replace(
            episode, frames=np.stack([fit_frame(f, (h, w)) for f in episode.frames]),
            robot_mask=None, ee_px=None, metadata=meta).validate(path)
    frame = (episode.frames[0] if episode is not None
             else fit_image(load_image(path), resolution, path, notes, "a start frame"))
    return frame, episode


def fit_image(image: np.ndarray, resolution: tuple[int, int], path: str | os.PathLike[str],
              notes: list[str] | None = None, role: str = "an image") -> np.ndarray:
    """An image (a start frame, a goal) brought to the model's ``resolution`` as a recording
    is: at a whole multiple (:func:`whole_multiple`) reduced by area; any other size at least
    as large in both directions (a camera's 424x240 frame) centre-cropped and area-resized
    (:func:`edge.calibrate.camera.fit_frame`), with a line appended to ``notes`` saying so.

    Args:
        image: uint8 ``[h, w, 3]``.
        resolution: ``(H, W)``.
        path: where it came from (named in notes and errors).
        notes: where the crop is said, or None.
        role: what the image is, for the error (``"a start frame"``, ``"a goal image"``).

    Returns:
        uint8 ``[H, W, 3]``.

    Raises:
        RuntimeInputError: an image smaller than ``resolution`` in either direction
            (enlarging invents detail the camera did not see).
    """
    fh, fw = image.shape[:2]
    h, w = resolution
    if (fh, fw) == (h, w):
        return image
    if fh >= h and fw >= w:
        # the camera's own frame: at a whole multiple (a chain read from a 256x256
        # recording runs at 64x64) reduced by area, nothing cropped; another shape is
        # centre-cropped first, as a recording is, and said
        from edge.calibrate.camera import fit_frame

        if notes is not None and not whole_multiple((fh, fw), resolution):
            notes.append(f"{path}: an image of {fw}x{fh} px centre-cropped and resized to "
                         f"the model's {w}x{h}, as a recording is (what lies outside the "
                         "centre square is not seen)")
        return fit_frame(image, (h, w))
    raise RuntimeInputError(
        f"{path}: expected {role} {w} px wide and {h} high (the model's resolution) or a "
        f"camera frame at least that large, found an image {fw} wide and {fh} high; an image "
        "smaller than the model's frame is not enlarged (that invents detail the camera did "
        "not see): give the camera's own frame")


def grey_image_note(image: np.ndarray, reference: np.ndarray, path: str | os.PathLike[str],
                    role: str, against: str) -> str | None:
    """A line saying that ``image`` (uint8 ``[H, W, 3]``) is greyscale (every pixel's R, G and
    B equal, as a grey image read as RGB is) while ``reference`` is in colour, or None. A
    grey start or goal against colour frames reads as a change of light or scene
    everywhere: the prediction and the goal distance then compare colours they cannot
    match."""
    def grey(a: np.ndarray) -> bool:
        return bool((a[..., 0] == a[..., 1]).all() and (a[..., 1] == a[..., 2]).all())

    if not grey(image) or grey(reference):
        return None
    return (f"{path}: {role} is greyscale (R = G = B at every pixel) while {against} is in "
            "colour: every pixel differs in colour, so the comparison says little; give the "
            "camera's colour frame")


def _from_json(path: Path) -> tuple[np.ndarray, list[str] | None]:
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RuntimeInputError(f"{path}: expected JSON actions, found an error: {exc}") from None
    names = None
    if isinstance(d, dict):
        unknown = sorted(set(d) - {"candidates", "names"})
        if unknown or "candidates" not in d:
            raise RuntimeInputError(f"{path}: expected keys 'candidates' (and optional "
                                    f"'names'), found {sorted(d)}")
        names, d = d.get("names"), d["candidates"]
    _check_json_actions(path, d)
    arr = np.asarray(d, dtype=np.float64)
    return arr, names


def _check_json_actions(path: Path, d: Any) -> None:
    """Refuse JSON actions that are not a ``[T][A]`` or ``[N][T][A]`` list of numbers,
    naming the first candidate and step that is not (a string is not a number; every step
    of every candidate has as many channels as the first step of the first)."""
    form = "expected a [T][A] or [N][T][A] list of numbers"
    if not isinstance(d, list) or not d:
        raise RuntimeInputError(f"{path}: {form}, found {type(d).__name__} "
                                f"{'(empty)' if isinstance(d, list) else ''}".rstrip())
    three = isinstance(d[0], list) and bool(d[0]) and isinstance(d[0][0], list)
    cands = d if three else [d]
    width = None
    for n, cand in enumerate(cands):
        where = f"candidate {n}, " if three else ""
        if not isinstance(cand, list) or not cand:
            raise RuntimeInputError(f"{path}: {form}: {where.rstrip(', ') or 'the actions'} is "
                                    f"{cand!r:.60}, expected a list of steps")
        if len(cand) != len(cands[0]):
            raise RuntimeInputError(f"{path}: {form}: candidate {n} has {len(cand)} steps, "
                                    f"candidate 0 has {len(cands[0])}: every candidate gives "
                                    "as many steps (pad with zero actions)")
        for t, step in enumerate(cand):
            if not isinstance(step, list):
                raise RuntimeInputError(f"{path}: {form}: {where}step {t} is {step!r:.60}, "
                                        "expected a list of one number per channel")
            width = len(step) if width is None else width
            if len(step) != width:
                raise RuntimeInputError(
                    f"{path}: {form}: {where}step {t} has {len(step)} channels, the first "
                    f"step has {width}: every step gives one number per channel")
            for a, x in enumerate(step):
                if isinstance(x, bool) or not isinstance(x, (int, float)):
                    raise RuntimeInputError(
                        f"{path}: {form}: {where}step {t}, channel {a} is {x!r:.40}, "
                        "expected a number (write numbers without quotes)")


def _from_csv(path: Path) -> np.ndarray:
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = [r for r in csv.reader(f) if r and not r[0].lstrip().startswith("#")]
    except UnicodeDecodeError as exc:
        raise RuntimeInputError(not_utf8(path, exc, "CSV rows of numbers")) from None
    except (OSError, csv.Error) as exc:
        raise RuntimeInputError(f"{path}: cannot read the CSV file: {exc}") from None
    for sep, name in ((";", "semicolons"), ("\t", "tabs"), (" ", "spaces")):
        if rows and all(len(r) == 1 for r in rows) and sep in rows[-1][0].strip():
            raise RuntimeInputError(
                f"{path}: the values are separated by {name}; expected comma-separated "
                "values (one row per step, one column per channel, e.g. 0.01,0,0.02)")
    if rows and not _is_number(rows[0][0]):
        rows = rows[1:]  # header
    if not rows:
        raise RuntimeInputError(f"{path}: expected rows of actions, found none")
    widths = {len(r) for r in rows}
    if len(widths) != 1:
        raise RuntimeInputError(f"{path}: expected the same number of columns on every row, "
                                f"found {sorted(widths)}")
    try:
        return np.asarray([[float(x) for x in r] for r in rows], np.float64)
    except ValueError as exc:
        raise RuntimeInputError(f"{path}: expected numbers, found {exc}") from None


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _from_npz(path: Path) -> tuple[np.ndarray, list[str] | None]:
    """Actions and names of an ``.npz``: an episode's actions, or the arrays ``actions``
    and optional ``names`` (see :func:`load_actions`)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files if k != "metadata_json"} \
                if "metadata_json" not in z.files else None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise RuntimeInputError(f"{path}: cannot read: {exc}") from None
    if arrays is None:
        return load_episode(path).actions, None
    if "actions" not in arrays:
        raise RuntimeInputError(f"{path}: expected an episode or the arrays 'actions' [N, T, A] "
                                f"(and optionally 'names' [N]), found the arrays "
                                f"{sorted(arrays)}; write it with numpy.savez(path, "
                                f"actions=..., names=...)")
    unknown = sorted(set(arrays) - {"actions", "names"})
    if unknown:
        raise RuntimeInputError(f"{path}: unknown arrays {unknown}; expected 'actions' and "
                                "optionally 'names'")
    names = None
    if "names" in arrays:
        raw = arrays["names"]
        if raw.dtype.kind not in "US" or raw.ndim != 1:
            raise RuntimeInputError(f"{path}: names: expected a 1-D array of strings, found "
                                    f"dtype {raw.dtype} shape {list(raw.shape)}")
        names = [x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x)
                 for x in raw.tolist()]
    return arrays["actions"], names


def load_actions(path: str | os.PathLike[str]) -> tuple[np.ndarray, list[str] | None]:
    """Candidate actions float32 ``[N, T, A']`` (rad|m per step) and optional names.

    Formats: ``.npy`` (``[T, A']`` or ``[N, T, A']``), ``.csv`` (one candidate, one row per
    step, optional header), ``.json`` (a ``[T][A]`` / ``[N][T][A]`` list, or
    ``{"candidates": ..., "names": [...]}``), ``.npz`` (an episode: its actions; or the
    arrays ``actions`` ``[N, T, A']`` / ``[T, A']`` and optional ``names`` ``[N]`` strings,
    as ``numpy.savez(path, actions=..., names=...)`` writes them).

    Raises:
        RuntimeInputError: unreadable, wrong rank, empty, or non-finite values (the first
            bad index is named).
    """
    path = Path(path)
    ext = path.suffix.lower()
    names = None
    if path.is_dir():
        raise RuntimeInputError(f"{path}: is a folder; expected an actions file (.npy, .csv, "
                                ".json or an episode .npz)")
    if not path.is_file():
        raise RuntimeInputError(f"{path}: no such actions file")
    if ext == ".npy":
        if path.stat().st_size == 0:
            raise RuntimeInputError(f"{path}: an empty file; expected a NumPy .npy array of "
                                    f"actions [T, A] or [N, T, A]")
        try:
            arr = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise RuntimeInputError(f"{path}: cannot read: {exc}") from None
    elif ext == ".csv":
        arr = _from_csv(path)
    elif ext == ".json":
        arr, names = _from_json(path)
    elif ext == ".npz":
        arr, names = _from_npz(path)
    else:
        raise RuntimeInputError(f"{path}: expected .npy, .csv, .json or an episode .npz, "
                                f"found '{ext}'")
    if arr.dtype.kind not in "fiu":
        raise RuntimeInputError(f"{path}: expected numeric actions, found dtype {arr.dtype}")
    if arr.ndim < 2:
        raise RuntimeInputError(f"{path}: a {arr.ndim}-D array of shape {list(arr.shape)}; "
                                "expected actions [T, A] (one row per step, one column per "
                                "channel) or [N, T, A] (N candidates)")
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3:
        raise RuntimeInputError(f"{path}: expected actions [T, A] or [N, T, A], found shape "
                                f"{list(arr.shape)}")
    if 0 in arr.shape:
        what = ("candidates" if arr.shape[0] == 0 else "steps" if arr.shape[1] == 0
                else "channels")
        raise RuntimeInputError(f"{path}: no {what} (shape {list(arr.shape)} as [N, T, A]); "
                                "expected at least one candidate of at least one step")
    bad = ~np.isfinite(arr)
    if bad.any():
        idx = [int(i) for i in np.argwhere(bad)[0]]
        raise RuntimeInputError(f"{path}: expected finite actions, found {arr[tuple(idx)]} at "
                                f"[candidate, step, channel] = {idx}")
    if names is not None and (not isinstance(names, list) or len(names) != arr.shape[0]
                              or not all(isinstance(x, str) and x for x in names)):
        raise RuntimeInputError(f"{path}: names: expected {arr.shape[0]} names (non-empty "
                                f"strings, one per candidate), found {names!r:.200}")
    if names is not None and len(set(names)) != len(names):
        seen: set[str] = set()
        dup = next(x for x in names if x in seen or seen.add(x))
        raise RuntimeInputError(f"{path}: names: expected one name per candidate, each once, "
                                f"found {dup!r} {names.count(dup)} times: name them apart")
    return arr.astype(np.float32), names


def load_joint_state(value: str, flag: str = "joint state") -> np.ndarray:
    """Start joint positions float64 ``[A']`` from ``"0.1,0.2,..."`` or a .npy/.json/.csv file.

    Args:
        value: the option's text.
        flag: the option's name for messages (``--start-joints``, ``--joint-state``).

    Raises:
        RuntimeInputError: no such file, not numbers, empty or non-finite values.
    """
    p = Path(value)
    if p.suffix.lower() in (".npy", ".json", ".csv") and not p.is_file():
        raise RuntimeInputError(f"{flag} {value!r}: no such file (expected comma-separated "
                                "numbers or a .npy/.json/.csv file)")
    try:
        if p.suffix.lower() in (".npy", ".json", ".csv") and p.is_file():
            if p.suffix.lower() == ".npy":
                q = np.load(p, allow_pickle=False)
            elif p.suffix.lower() == ".json":
                q = np.asarray(json.loads(p.read_text(encoding="utf-8")), np.float64)
            else:
                q = _from_csv(p)
        else:
            q = np.asarray([float(x) for x in value.split(",")], np.float64)
    except (OSError, ValueError, TypeError) as exc:
        raise RuntimeInputError(f"{flag} {value!r}: expected comma-separated numbers or a "
                                f".npy/.json/.csv file ({exc})") from None
    q = np.asarray(q, np.float64).reshape(-1)
    if not q.size or not np.isfinite(q).all():
        bad = [i for i, x in enumerate(q) if not np.isfinite(x)]
        where = f" at position {bad[0]}" if bad else ""
        raise RuntimeInputError(f"{flag} {value!r}: expected finite numbers, found "
                                f"{q.tolist()}{where}")
    return q


def action_speed_warnings(actions: np.ndarray, fps: float | None, names: list[str],
                          what: str, turn_per_unit: np.ndarray | None = None,
                          sliding: np.ndarray | None = None) -> list[str]:
    """Warnings for channels that some candidate moves faster than any arm joint moves:
    actions given in another unit (degrees, encoder counts) or as absolute positions.

    Args:
        actions: ``[N, T, A]`` joint changes per frame (controller units).
        fps: the frame rate (Hz) the actions are per frame of; None: 10 Hz.
        names: the A channel names.
        what: the file the actions came from, for the message.
        turn_per_unit: float ``[A]``, rad per controller unit of each revolute channel (a
            chain calibration's ``rad_per_unit``; 0 for a sliding one); None: the actions
            are rad (m for a sliding channel).
        sliding: bool ``[A]``, the channels that slide (m) instead of turning; None: none.

    Returns:
        One line per channel past :data:`PLAUSIBLE_TURN_RAD_S` (rad/s) or
        :data:`PLAUSIBLE_SLIDE_M_S` (m/s), naming the candidate and step of its fastest
        step; empty when every step is plausible.
    """
    a = np.asarray(actions)
    if a.ndim != 3 or not a.size:
        return []
    rate = float(fps) if fps and fps > 0 else 10.0
    per = None if turn_per_unit is None else np.asarray(turn_per_unit, np.float64)
    slide = (np.zeros(a.shape[2], bool) if sliding is None
             else np.asarray(sliding, bool).reshape(-1))
    step = np.abs(a.astype(np.float64))  # (N, T, A) rad or m per step
    if per is not None:
        step *= np.where(per > 0, per, 1.0)
    out = []
    for c in range(a.shape[2]):
        bound = (PLAUSIBLE_SLIDE_M_S if slide[c] else PLAUSIBLE_TURN_RAD_S) / rate
        i, t = np.unravel_index(int(np.argmax(step[..., c])), step.shape[:2])
        v = float(step[i, t, c])
        if v <= bound:
            continue
        unit = "m" if slide[c] else "rad"
        name = names[c] if c < len(names) else f"channel {c}"
        conv = ("" if per is None or per[c] in (0.0, 1.0)
                else f" ({float(a[i, t, c]):.4g} units at the calibration's {per[c]:.4g} rad "
                     f"per unit)")
        out.append(f"{what}: {name} changes by {v:.3g} {unit} in one step{conv} (candidate "
                   f"{i}, step {t}), {v * rate:.3g} {unit}/s at {rate:g} Hz, faster than any "
                   f"arm moves a joint ({bound * rate:.3g} {unit}/s); actions are changes per "
                   f"frame in the calibration's units: check for degrees, encoder counts or "
                   f"absolute positions")
    return out


def start_joint_warnings(q0: np.ndarray, home: np.ndarray, names: list[str], flag: str,
                         turn_per_unit: np.ndarray | None = None) -> list[str]:
    """Warnings for start readings more than a full turn from the calibration's home pose
    (:data:`PLAUSIBLE_START_TURN_RAD`): readings in another unit than the calibration's.

    Args:
        q0: float ``[K]``, the start's joint readings; home: float ``[K]``, the calibration's
            home readings (same units); names: the K channel names; flag: the option or
            file the readings came from.
        turn_per_unit: float ``[K]``, rad per unit of each revolute channel (0: a sliding
            channel, not checked); None: rad.

    Returns:
        One line per such channel; empty when none.
    """
    q = np.asarray(q0, np.float64).reshape(-1)
    h = np.asarray(home, np.float64).reshape(-1)
    if q.shape != h.shape:
        return []
    per = np.ones_like(q) if turn_per_unit is None else np.asarray(turn_per_unit, np.float64)
    out = []
    for c in np.nonzero((per > 0) & (np.abs(q - h) * per > PLAUSIBLE_START_TURN_RAD))[0]:
        name = names[c] if c < len(names) else f"channel {c}"
        out.append(f"{flag}: {name} reads {q[c]:.6g}, {abs(q[c] - h[c]) * per[c]:.3g} rad from "
                   f"the calibration's home pose ({h[c]:.6g}), more than a full turn: the "
                   f"readings must be in the calibration's units (check for degrees or counts)")
    return out


def episode_mismatch_warning(start_meta, calibration_ids: dict, start: str,
                             calibration: str) -> str | None:
    """A warning when the start episode was recorded in another cell, camera or robot unit
    than the calibration (both carry ids); None when they agree or either lacks them.

    Args:
        start_meta: the start episode's :class:`~edge.episode.EpisodeMetadata`, or None.
        calibration_ids: the calibration's ``cell_id``, ``camera_id``, ``robot_id``.
        start, calibration: the two files, for the message.
    """
    if start_meta is None:
        return None
    ours, theirs = [], []
    for key in ("cell_id", "camera_id", "robot_id"):
        a, b = getattr(start_meta, key, None), calibration_ids.get(key)
        if a and b and a != b:
            ours.append(f"{key} {a!r}")
            theirs.append(f"{b!r}")
    if not ours:
        return None
    return (f"{start}: recorded with {', '.join(ours)}, but the calibration {calibration} "
            f"has {', '.join(theirs)}; the prediction assumes the calibration's camera and "
            f"robot: use the calibration recorded in this cell")
