"""Pictures a person can look at: contact sheets (PNG) and videos (MP4).

Uses OpenCV for drawing and PNG encoding and PyAV (FFmpeg) for H.264 video. Writes are
atomic: a temporary file in the same directory, then rename.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from edge.errors import EdgeError
from edge.fileio import atomic_write

__all__ = ["VideoLayout", "contact_sheet", "label_tile", "row_label_height", "video_frames",
           "video_layout", "write_mp4", "write_png"]


def label_tile(tile: np.ndarray, text: str, size_for_px: int | None = None) -> np.ndarray:
    """Return a copy of an RGB uint8 ``[h, w, 3]`` tile with ``text`` in its top-left corner,
    its size set for a tile ``size_for_px`` wide (default: this tile's width)."""
    import cv2

    out = np.ascontiguousarray(tile).copy()
    scale = _text_scale(size_for_px or out.shape[1])
    x, y = 3, int(12 * scale / 0.35)
    # The outline is the same thin text stamped one pixel around, so outline and text share
    # one set of glyph advances (a thicker stroke has wider advances and drifts off the text).
    for dx, dy in _OUTLINE_OFFSETS:
        cv2.putText(out, text, (x + dx, y + dy), cv2.FONT_HERSHEY_SIMPLEX, scale, (0, 0, 0), 1,
                    cv2.LINE_AA)
    cv2.putText(out, text, (x, y), cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255), 1,
                cv2.LINE_AA)
    return out


_OUTLINE_OFFSETS = tuple((dx, dy) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dx or dy)


def _text_scale(width_px: int) -> float:
    return max(0.3, width_px / 420.0)


def row_label_height(tile_width_px: int) -> int:
    """Height in px of the band :func:`contact_sheet` draws a row label in, for tiles
    ``tile_width_px`` wide (after scaling)."""
    return int(12 * _text_scale(tile_width_px) / 0.35) + 6


def contact_sheet(rows: Sequence[np.ndarray], row_labels: Sequence[str] | None = None,
                  tile_labels: Sequence[Sequence[str]] | None = None, scale: int = 2,
                  gap_px: int = 2, note: str | None = None) -> np.ndarray:
    """Lay out rows of frames as one RGB image.

    Args:
        rows: each uint8 ``[T_i, H, W, 3]``; rows may have different T (shorter rows are
            padded with grey).
        row_labels: one label per row, drawn in a band above the row, across its whole
            width (:func:`row_label_height`), so long labels are not cut at a tile.
        tile_labels: optional per-tile labels (e.g. the step index).
        scale: integer upscaling (nearest neighbour), so small frames stay readable.
        gap_px: grey gap between tiles, px (before scaling).
        note: a line drawn in a band on top (e.g. that rows were left out), or None.

    Returns:
        uint8 ``[top + R*(band + (H+gap)*scale), maxT*(W+gap)*scale, 3]``, band being
        :func:`row_label_height` with row labels and 0 without, top the same height with a
        note and 0 without.
    Raises:
        EdgeError: if the rows differ in frame size or are not uint8 RGB.
    """
    import cv2

    if not rows:
        raise EdgeError("contact sheet: no rows given")
    h, w = rows[0].shape[1:3]
    for i, r in enumerate(rows):
        if r.dtype != np.uint8 or r.ndim != 4 or r.shape[1:] != (h, w, 3):
            raise EdgeError(f"contact sheet: row {i} has dtype {r.dtype} shape {r.shape}; "
                            f"expected uint8 (T, {h}, {w}, 3)")
    cols = max(len(r) for r in rows)
    band = row_label_height(w * scale) if row_labels is not None else 0
    th, tw = band + (h + gap_px) * scale, (w + gap_px) * scale
    sheet = np.full((len(rows) * th, cols * tw, 3), 64, np.uint8)
    for i, r in enumerate(rows):
        if band:
            sheet[i * th:i * th + band] = label_tile(sheet[i * th:i * th + band],
                                                     row_labels[i],  # type: ignore[index]
                                                     size_for_px=w * scale)
        for j, frame in enumerate(r):
            tile = cv2.resize(frame, (w * scale, h * scale), interpolation=cv2.INTER_NEAREST)
            if tile_labels is not None and j < len(tile_labels[i]) and tile_labels[i][j]:
                tile = label_tile(tile, tile_labels[i][j])
            y = i * th + band
            sheet[y:y + h * scale, j * tw:j * tw + w * scale] = tile
    if note:
        top = np.full((row_label_height(w * scale), sheet.shape[1], 3), 32, np.uint8)
        sheet = np.concatenate([label_tile(top, note, size_for_px=w * scale), sheet])
    return sheet


def write_png(path: str | os.PathLike[str], image: np.ndarray) -> Path:
    """Write an RGB uint8 ``[H, W, 3]`` image as PNG, atomically."""
    import cv2

    path = Path(path)
    ok, buf = cv2.imencode(".png", np.ascontiguousarray(image[..., ::-1]))
    if not ok:
        raise EdgeError(f"{path}: PNG encoding failed for an image of shape {image.shape}")
    return atomic_write(path, lambda f: f.write(buf.tobytes()))


def write_mp4(path: str | os.PathLike[str], frames: np.ndarray | Iterable[np.ndarray],
              fps: float, scale: int = 4) -> Path:
    """Write RGB uint8 frames (``[T, H, W, 3]`` or an iterable of ``[H, W, 3]``) as an H.264
    MP4 (yuv420p), atomically.

    Frames are upscaled by ``scale`` (nearest neighbour) so 64x64 output is watchable; an odd
    size is padded by one grey row or column (yuv420p needs even sizes).

    Raises:
        EdgeError: no frames, or frames larger than H.264 allows (16384 px a side).
    """
    import av
    import cv2

    path = Path(path)
    it = iter(frames)
    first = next(it, None)
    if first is None:
        raise EdgeError(f"{path}: no frames to write")
    h, w = first.shape[:2]
    oh, ow = h * scale, w * scale
    if max(oh, ow) > MAX_VIDEO_SIDE_PX:
        raise EdgeError(f"{path}: a video of {ow}x{oh} px; H.264 takes at most "
                        f"{MAX_VIDEO_SIDE_PX} px a side (lay the frames out smaller)")
    ph, pw = oh % 2, ow % 2

    def encode(f: IO[bytes]) -> None:
        with av.open(f, mode="w", format="mp4") as container:
            from fractions import Fraction

            stream = container.add_stream("libx264", rate=Fraction(fps).limit_denominator(1000))
            stream.width, stream.height, stream.pix_fmt = ow + pw, oh + ph, "yuv420p"
            stream.options = {"crf": "18"}
            for frame in (first, *it):
                big = frame if scale == 1 else cv2.resize(frame, (ow, oh),
                                                          interpolation=cv2.INTER_NEAREST)
                if ph or pw:
                    big = np.pad(big, ((0, ph), (0, pw), (0, 0)), constant_values=64)
                for packet in stream.encode(av.VideoFrame.from_ndarray(
                        np.ascontiguousarray(big), format="rgb24")):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)

    return atomic_write(path, encode)


MAX_VIDEO_SIDE_PX = 16384
VIDEO_MAX_WIDTH_PX = 2048  # a rollout video's grid is laid out to fit this width


@dataclass(frozen=True)
class VideoLayout:
    """Where each tile of a rollout video goes.

    Attributes:
        tiles: tile names, in order (``"truth"`` first when there is a ground truth).
        grid: ``(rows, cols)``.
        scale: integer upscaling of each frame (nearest neighbour).
        header_px: height of the band on top that holds the step counter.
        label_px: height of the band above each tile that holds its name.
        size_px: ``(height, width)`` of a video frame.
        boxes_px: per tile, ``(y, x, h, w)`` of the frame inside the video frame.
    """

    tiles: tuple[str, ...]
    grid: tuple[int, int]
    scale: int
    header_px: int
    label_px: int
    size_px: tuple[int, int]
    boxes_px: tuple[tuple[int, int, int, int], ...]

    def to_json(self) -> dict:
        """The layout as plain JSON values (for ``metrics.json``)."""
        return {"tiles": list(self.tiles), "grid": list(self.grid), "scale": self.scale,
                "size_px": list(self.size_px), "boxes_px": [list(b) for b in self.boxes_px]}


def video_layout(names: Sequence[str], frame_hw: tuple[int, int], truth: bool,
                 max_width_px: int = VIDEO_MAX_WIDTH_PX, gap_px: int = 4) -> VideoLayout:
    """A grid for ``len(names)`` candidates (and the truth first) that fits ``max_width_px``.

    Args:
        names: candidate names, one tile each.
        frame_hw: ``(H, W)`` of a frame, px.
        truth: whether a ground-truth tile comes first.
        max_width_px: the widest the grid may be (frames are not shrunk below 1x).
        gap_px: grey gap between tiles, px.

    Returns:
        ``ceil(sqrt(k))`` columns for k tiles, frames upscaled by up to 4 while the grid
        fits, even sizes (yuv420p).

    Raises:
        EdgeError: the grid is larger than H.264 allows (16384 px a side) even at 1x.
    """
    tiles = (("truth",) if truth else ()) + tuple(names)
    h, w = frame_hw
    k = len(tiles)
    cols = max(1, math.ceil(math.sqrt(k)))
    rows = math.ceil(k / cols)
    scale = max(1, min(4, (max_width_px - (cols - 1) * gap_px) // (cols * w)))
    th, tw = h * scale, w * scale
    label = row_label_height(max(tw, 128))
    header = row_label_height(_header_text_px(tw))
    boxes = []
    for i in range(k):
        r, c = divmod(i, cols)
        boxes.append((header + r * (label + th + gap_px) + label, c * (tw + gap_px), th, tw))
    size = (header + rows * (label + th + gap_px) - gap_px, cols * (tw + gap_px) - gap_px)
    size = (size[0] + size[0] % 2, size[1] + size[1] % 2)  # even: yuv420p
    if max(size) > MAX_VIDEO_SIDE_PX:
        raise EdgeError(f"video: {k} tiles of {w}x{h} px make a {size[1]}x{size[0]} px grid; "
                        f"H.264 takes at most {MAX_VIDEO_SIDE_PX} px a side: run fewer "
                        f"candidates per call")
    return VideoLayout(tiles, (rows, cols), scale, header, label, size, tuple(boxes))


def _header_text_px(tile_w: int) -> int:
    """The step counter's text size: a little larger than a tile's name."""
    return max(tile_w, 128) * 3 // 2


def video_frames(layout: VideoLayout, pred: np.ndarray, truth: np.ndarray | None,
                 fps: float) -> Iterator[np.ndarray]:
    """The video frames of a rollout, one per step, laid out by ``layout``.

    Args:
        layout: from :func:`video_layout` (truth first when ``truth`` is given).
        pred: uint8 ``[N, T, H, W, 3]`` predicted frames.
        truth: uint8 ``[T, H, W, 3]`` ground truth, or None.
        fps: frame rate, Hz (the step counter shows the time after the start frame).

    Yields:
        uint8 ``[*layout.size_px, 3]`` per step: a header with ``step t/T  (s)``, each tile's
        name above it, the truth and the candidates.
    """
    import cv2

    n, t = pred.shape[:2]
    sources = ([truth] if truth is not None else []) + [pred[i] for i in range(n)]
    base = np.full((*layout.size_px, 3), 64, np.uint8)
    for i, (name, (y, x, _, w)) in enumerate(zip(layout.tiles, layout.boxes_px, strict=True)):
        y0 = y - layout.label_px
        text = "truth" if i == 0 and truth is not None else f"pred {name}"
        base[y0:y, x:x + w] = label_tile(base[y0:y, x:x + w], text, size_for_px=max(w, 128))
    for s in range(t):
        frame = base.copy()
        frame[:layout.header_px] = label_tile(
            frame[:layout.header_px], f"step {s + 1}/{t}  {(s + 1) / fps:.1f} s after the start",
            size_for_px=_header_text_px(layout.boxes_px[0][3]))
        for src, (y, x, h, w) in zip(sources, layout.boxes_px, strict=True):
            frame[y:y + h, x:x + w] = cv2.resize(src[s], (w, h), interpolation=cv2.INTER_NEAREST)
        yield frame
