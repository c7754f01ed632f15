"""The pre-check benchmark's contact sheet: per cell the start frame with the keep-out
rectangle, the goal, and per candidate its true and predicted last frames, labelled with
what truly happens and what the pre-check decided (``precheck_<split>.png``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edge.errors import EdgeError

__all__ = ["SCALE", "SheetCell", "precheck_sheet", "sheet_size"]

SCALE = 3  # frames upscaled by this (nearest neighbour) before labels are drawn
GAP_PX = 4
KEEP_OUT_RGB = (255, 60, 60)
CHOSEN_RGB = (255, 210, 0)
BEST_RGB = (40, 220, 60)
MARK_PX = 3  # width of the chosen / truly best frame


@dataclass(frozen=True)
class SheetCell:
    """One cell's row of the sheet.

    Attributes:
        label: the row's title (e.g. ``"all_held_out cell 0"``).
        start: uint8 ``[H, W, 3]`` start frame.
        goal: uint8 ``[H, W, 3]`` goal frame, or None (no truly safe candidate).
        goal_index: the candidate whose true last frame is the goal, or None.
        region: the keep-out polygon, normalised ``(x, y)`` corners (x right, y down).
        truth_last: uint8 ``[M, H, W, 3]`` each candidate's true last frame (MuJoCo).
        pred_last: uint8 ``[M, H, W, 3]`` each candidate's predicted last frame.
        enters: bool ``[M]`` the candidate truly enters the region.
        refused: bool ``[M]`` the keep-out rule refused it on the prediction.
        exceeds: bool ``[M]`` the candidate truly exceeds the joint limit.
        chosen: the pre-check's chosen candidate, or None.
        best: the truly best candidate, or None.
    """

    label: str
    start: np.ndarray
    goal: np.ndarray | None
    goal_index: int | None
    region: tuple[tuple[float, float], ...]
    truth_last: np.ndarray
    pred_last: np.ndarray
    enters: np.ndarray
    refused: np.ndarray
    exceeds: np.ndarray
    chosen: int | None
    best: int | None

    @classmethod
    def from_cell(cls, label: str, cell: dict, frames: np.ndarray, row: dict) -> SheetCell:
        """From a :func:`export.evaluation.precheck.draw_cell` cell, one model's predicted
        frames uint8 ``[M, T, H, W, 3]`` and their :func:`export.evaluation.precheck.score_cell`
        row."""
        fut = cell["futures"]
        return cls(label=label, start=fut.frames[0, 0], goal=cell["goal"],
                   goal_index=cell["goal_index"],
                   region=tuple(tuple(p) for p in cell["region"]),
                   truth_last=fut.frames[:, -1], pred_last=frames[:, -1],
                   enters=np.asarray(cell["enters"], bool),
                   refused=np.asarray(row["keepout_refused"], bool),
                   exceeds=np.asarray(cell["exceeds"], bool), chosen=row["chosen"],
                   best=cell["best"])


def _line_px(tile_w: int) -> int:
    from edge.visual import row_label_height

    return row_label_height(tile_w)


def sheet_size(rows: int, candidates: int, frame_hw: tuple[int, int], scale: int = SCALE,
               note: bool = False) -> tuple[int, int]:
    """``(height, width)`` in px of :func:`precheck_sheet` for ``rows`` cells of
    ``candidates`` candidates with frames of ``frame_hw`` ``(H, W)``.

    Each row is a title band, then ``2 + 2 * candidates`` tiles (start, goal, truth and
    prediction per candidate), each two label lines above a frame upscaled ``scale``
    times; ``note`` adds one band on top.
    """
    fh, fw = frame_hw[0] * scale, frame_hw[1] * scale
    line = _line_px(fw)
    row = line + 2 * line + fh + GAP_PX
    return (line if note else 0) + rows * row, (2 + 2 * candidates) * (fw + GAP_PX)


def _tile(frame: np.ndarray | None, lines: tuple[str, str], scale: int,
          outline: np.ndarray | None, mark: tuple[int, int, int] | None,
          hw: tuple[int, int]) -> np.ndarray:
    """Two label lines above the frame upscaled ``scale`` times (grey when None), the
    keep-out outline (bool ``[H*s, W*s]``) and a coloured frame for a mark."""
    import cv2

    from edge.visual import label_tile

    fh, fw = hw[0] * scale, hw[1] * scale
    line = _line_px(fw)
    img: np.ndarray = (np.full((fh, fw, 3), 96, np.uint8) if frame is None else
                       cv2.resize(frame, (fw, fh), interpolation=cv2.INTER_NEAREST))
    if outline is not None:
        img[outline] = KEEP_OUT_RGB
    if mark is not None:
        img[:MARK_PX], img[-MARK_PX:] = mark, mark
        img[:, :MARK_PX], img[:, -MARK_PX:] = mark, mark
    bands = [label_tile(np.full((line, fw, 3), 48, np.uint8), text) if text
             else np.full((line, fw, 3), 48, np.uint8) for text in lines]
    return np.concatenate([*bands, img])


def _outline(region: tuple[tuple[float, float], ...], hw: tuple[int, int],
             scale: int) -> np.ndarray:
    """bool ``[H*s, W*s]``: the edge of the pixels the keep-out rule counts as inside."""
    import cv2

    from edge.precheck.rules import KeepOutRegion, rasterise

    m = rasterise((KeepOutRegion("keep-out", region),), *hw)
    up = cv2.resize(m, (hw[1] * scale, hw[0] * scale), interpolation=cv2.INTER_NEAREST)
    inner = cv2.erode(up, np.ones((3, 3), np.uint8), borderValue=0)
    return (up > 0) & (inner == 0)


def _row_title(c: SheetCell) -> str:
    m, e = len(c.enters), int(c.enters.sum())
    caught, false = int((c.refused & c.enters).sum()), int((c.refused & ~c.enters).sum())
    chosen = f"c{c.chosen}" if c.chosen is not None else "none"
    best = f"c{c.best}" if c.best is not None else "none (no truly safe candidate)"
    return (f"{c.label}: {e} of {m} truly enter; keep-out refuses {caught} of them and "
            f"{false} of the {m - e} that stay out; chosen {chosen}, truly best {best}")


def precheck_sheet(cells: Sequence[SheetCell], note: str | None = None,
                   scale: int = SCALE) -> np.ndarray:
    """The contact sheet of the first cells of a split.

    Per cell a row titled with its counts: the start frame and the goal, then per
    candidate its true last frame (labelled ``truth: enters`` or ``truth: stays out``;
    ``TRULY BEST`` and a green frame on the truly best one; ``over joint limit``) and its
    predicted last frame (``pred: refused`` or ``pred: passed`` by the keep-out rule;
    ``CHOSEN`` and a yellow frame on the pre-check's choice). The keep-out rectangle is
    outlined in red on every frame (the edge of the pixels the rule counts as inside).

    Args:
        cells: one :class:`SheetCell` per row (same frame size and candidate count).
        note: a line on top (e.g. how many of the split's cells are shown), or None.
        scale: integer upscaling of the frames.

    Returns:
        uint8 ``[*sheet_size(len(cells), M, (H, W), scale, note is not None), 3]``.

    Raises:
        EdgeError: no cells, or cells whose frame size or candidate count differ.
    """
    from edge.visual import contact_sheet

    if not cells:
        raise EdgeError("pre-check sheet: no cells given")
    hw = cells[0].start.shape[:2]
    m = len(cells[0].enters)
    rows = []
    for c in cells:
        if c.start.shape[:2] != hw or c.truth_last.shape != (m, *hw, 3) \
                or c.pred_last.shape != (m, *hw, 3):
            raise EdgeError(f"pre-check sheet: {c.label} has frames {c.truth_last.shape} and "
                            f"{c.pred_last.shape}; expected ({m}, {hw[0]}, {hw[1]}, 3)")
        edge = _outline(c.region, hw, scale)
        tiles = [_tile(c.start, ("start", "keep-out in red"), scale, edge, None, hw),
                 _tile(c.goal, ("goal", f"c{c.goal_index}'s true end") if c.goal is not None
                       else ("no goal", "no safe candidate"), scale, edge, None, hw)]
        for i in range(m):
            marks = ["TRULY BEST"] if i == c.best else []
            marks += ["over joint limit"] if c.exceeds[i] else []
            tiles.append(_tile(c.truth_last[i],
                               (f"c{i} truth: " + ("enters" if c.enters[i] else "stays out"),
                                ", ".join(marks)), scale, edge,
                               BEST_RGB if i == c.best else None, hw))
            tiles.append(_tile(c.pred_last[i],
                               (f"c{i} pred: " + ("refused" if c.refused[i] else "passed"),
                                "CHOSEN" if i == c.chosen else ""), scale, edge,
                               CHOSEN_RGB if i == c.chosen else None, hw))
        rows.append(np.stack(tiles))
    return contact_sheet(rows, row_labels=[_row_title(c) for c in cells], scale=1,
                         gap_px=GAP_PX, note=note)
