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

__all__ = ["contact_sheet", "write_png", "write_mp4", "label_tile"]


def label_tile(tile: np.ndarray, text: str) -> np.ndarray:
    """Return a copy of an RGB uint8 ``[h, w, 3]`` tile with ``text`` in its top-left corner."""
    import cv2

    out = np.ascontiguousarray(tile).copy()
    scale = max(0.3, out.shape[1] / 420.0)
    for color, thick in (((0, 0, 0), 3), ((255, 255, 255), 1)):
        cv2.putText(out, text, (3, int(12 * scale / 0.35)), cv2.FONT_HERSHEY_SIMPLEX, scale,
                    color, thick, cv2.LINE_AA)
    return out


def contact_sheet(rows: Sequence[np.ndarray], row_labels: Sequence[str] | None = None,
                  tile_labels: Sequence[Sequence[str]] | None = None, scale: int = 2,
                  gap_px: int = 2) -> np.ndarray:
    """Lay out rows of frames as one RGB image.

    Args:
        rows: each uint8 ``[T_i, H, W, 3]``; rows may have different T (shorter rows are
            padded with grey).
        row_labels: one label per row, drawn on its first tile.
        tile_labels: optional per-tile labels (e.g. the step index).
        scale: integer upscaling (nearest neighbour), so small frames stay readable.
        gap_px: grey gap between tiles, px (before scaling).

    Returns:
        uint8 ``[R*(H+gap)*scale, maxT*(W+gap)*scale, 3]``.
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
    th, tw = (h + gap_px) * scale, (w + gap_px) * scale
    sheet = np.full((len(rows) * th, cols * tw, 3), 64, np.uint8)
    for i, r in enumerate(rows):
        for j, frame in enumerate(r):
            tile = cv2.resize(frame, (w * scale, h * scale), interpolation=cv2.INTER_NEAREST)
            parts = [row_labels[i]] if j == 0 and row_labels is not None else []
            if tile_labels is not None and j < len(tile_labels[i]) and tile_labels[i][j]:
                parts.append(tile_labels[i][j])
            if parts:  # one label per tile: the row's label first, so they never overlap
                tile = label_tile(tile, " ".join(parts))
            sheet[i * th:i * th + h * scale, j * tw:j * tw + w * scale] = tile
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
