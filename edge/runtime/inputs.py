"""Reading the command-line inputs: start frames, candidate actions, joint states, images.

Every reader raises :class:`~edge.runtime.errors.RuntimeInputError` naming the file and
what was expected and found.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np

from edge.episode import Episode, load_episode
from edge.runtime.errors import RuntimeInputError

__all__ = ["load_actions", "load_image", "load_joint_state", "load_start"]

_IMAGE_EXT = (".png", ".jpg", ".jpeg", ".bmp")


def load_image(path: str | os.PathLike[str]) -> np.ndarray:
    """An RGB image uint8 ``[H, W, 3]`` from PNG/JPEG/BMP or ``.npy``."""
    path = Path(path)
    if path.is_dir():
        raise RuntimeInputError(f"{path}: is a folder; expected an image file (.png, .jpg, "
                                f".bmp, .npy) or an episode .npz")
    if path.suffix.lower() == ".npy":
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


def load_start(path: str | os.PathLike[str], resolution: tuple[int, int]
               ) -> tuple[np.ndarray, Episode | None]:
    """The start frame uint8 ``[H, W, 3]`` from an image or an episode (its first frame).

    Returns:
        ``(frame, episode)``; ``episode`` is None for an image.

    Raises:
        RuntimeInputError: unreadable, or the frame is not the model's ``resolution``.
        EpisodeError: a malformed episode file.
    """
    path = Path(path)
    episode = load_episode(path) if path.suffix.lower() == ".npz" else None
    frame = episode.frames[0] if episode is not None else load_image(path)
    if frame.shape[:2] != tuple(resolution):
        raise RuntimeInputError(f"{path}: expected a start frame of {tuple(resolution)} px (the "
                                f"model's resolution), found {frame.shape[:2]}; resize it "
                                f"(centre crop, area interpolation) first")
    return frame, episode


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
    try:
        arr = np.asarray(d, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise RuntimeInputError(f"{path}: expected a [T][A] or [N][T][A] list of numbers "
                                f"({exc})") from None
    return arr, names


def _from_csv(path: Path) -> np.ndarray:
    with open(path, newline="", encoding="utf-8") as f:
        rows = [r for r in csv.reader(f) if r and not r[0].lstrip().startswith("#")]
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


def load_actions(path: str | os.PathLike[str]) -> tuple[np.ndarray, list[str] | None]:
    """Candidate actions float32 ``[N, T, A']`` (rad|m per step) and optional names.

    Formats: ``.npy`` (``[T, A']`` or ``[N, T, A']``), ``.csv`` (one candidate, one row per
    step, optional header), ``.json`` (a ``[T][A]`` / ``[N][T][A]`` list, or
    ``{"candidates": ..., "names": [...]}``), ``.npz`` (an episode: its actions).

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
        arr = load_episode(path).actions
    else:
        raise RuntimeInputError(f"{path}: expected .npy, .csv, .json or an episode .npz, "
                                f"found '{ext}'")
    if arr.dtype.kind not in "fiu":
        raise RuntimeInputError(f"{path}: expected numeric actions, found dtype {arr.dtype}")
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3 or 0 in arr.shape:
        raise RuntimeInputError(f"{path}: expected actions [T, A] or [N, T, A], found shape "
                                f"{list(arr.shape)}")
    bad = ~np.isfinite(arr)
    if bad.any():
        idx = [int(i) for i in np.argwhere(bad)[0]]
        raise RuntimeInputError(f"{path}: expected finite actions, found {arr[tuple(idx)]} at "
                                f"[candidate, step, channel] = {idx}")
    if names is not None and (not isinstance(names, list) or len(names) != arr.shape[0]):
        raise RuntimeInputError(f"{path}: names: expected {arr.shape[0]} names, found {names!r}")
    return arr.astype(np.float32), names


def load_joint_state(value: str) -> np.ndarray:
    """Start joint positions float64 ``[A']`` from ``"0.1,0.2,..."`` or a .npy/.json/.csv file."""
    p = Path(value)
    if p.suffix.lower() in (".npy", ".json", ".csv") and not p.is_file():
        raise RuntimeInputError(f"joint state {value!r}: no such file (expected comma-separated "
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
        raise RuntimeInputError(f"joint state {value!r}: expected comma-separated numbers or a "
                                f".npy/.json/.csv file ({exc})") from None
    q = np.asarray(q, np.float64).reshape(-1)
    if not q.size or not np.isfinite(q).all():
        raise RuntimeInputError(f"joint state {value!r}: expected finite numbers, found {q}")
    return q
