"""Pictures a person can look at: contact sheets (PNG) and videos (MP4).

Uses OpenCV for drawing and PNG encoding and PyAV (FFmpeg) for H.264 video. Writes are
atomic: a temporary file in the same directory, then rename.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import numpy as np

from edge.errors import EdgeError
from edge.fileio import atomic_write

__all__ = ["contact_sheet", "write_png", "write_mp4", "label_tile", "row_label_height"]


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
                  gap_px: int = 2) -> np.ndarray:
    """Lay out rows of frames as one RGB image.

    Args:
        rows: each uint8 ``[T_i, H, W, 3]``; rows may have different T (shorter rows are
            padded with grey).
        row_labels: one label per row, drawn in a band above the row, across its whole
            width (:func:`row_label_height`), so long labels are not cut at a tile.
        tile_labels: optional per-tile labels (e.g. the step index).
        scale: integer upscaling (nearest neighbour), so small frames stay readable.
        gap_px: grey gap between tiles, px (before scaling).

    Returns:
        uint8 ``[R*(band + (H+gap)*scale), maxT*(W+gap)*scale, 3]``, band being
        :func:`row_label_height` with row labels and 0 without.
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
    return sheet


def write_png(path: str | os.PathLike[str], image: np.ndarray) -> Path:
    """Write an RGB uint8 ``[H, W, 3]`` image as PNG, atomically."""
    import cv2

    path = Path(path)
    ok, buf = cv2.imencode(".png", np.ascontiguousarray(image[..., ::-1]))
    if not ok:
        raise EdgeError(f"{path}: PNG encoding failed for an image of shape {image.shape}")
    return atomic_write(path, lambda f: f.write(buf.tobytes()))


def write_mp4(path: str | os.PathLike[str], frames: np.ndarray, fps: float,
              scale: int = 4) -> Path:
    """Write RGB uint8 ``[T, H, W, 3]`` frames as an H.264 MP4 (yuv420p), atomically.

    Frames are upscaled by ``scale`` (nearest neighbour) so 64x64 output is watchable.
    """
    import av
    import cv2

    path = Path(path)
    t, h, w, _ = frames.shape
    oh, ow = h * scale, w * scale
    oh, ow = oh + oh % 2, ow + ow % 2

    def encode(f: IO[bytes]) -> None:
        with av.open(f, mode="w", format="mp4") as container:
            from fractions import Fraction

            stream = container.add_stream("libx264", rate=Fraction(fps).limit_denominator(1000))
            stream.width, stream.height, stream.pix_fmt = ow, oh, "yuv420p"
            stream.options = {"crf": "18"}
            for frame in frames:
                big = cv2.resize(frame, (ow, oh), interpolation=cv2.INTER_NEAREST)
                for packet in stream.encode(av.VideoFrame.from_ndarray(big, format="rgb24")):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)

    return atomic_write(path, encode)
