"""Labels drawn on contact sheets are legible: the dark outline sits around the light text,
drawn with the same glyph advances (no drifting shadow such as "CHOSENN")."""

from __future__ import annotations

import numpy as np
import pytest

from edge.visual import label_tile

GREY = 120


def _masks(text: str, size_for_px: int) -> tuple[np.ndarray, np.ndarray]:
    tile = np.full((48, 520, 3), GREY, np.uint8)
    out = label_tile(tile, text, size_for_px=size_for_px).astype(int).max(-1)
    # light: the text's ink (a thin stroke blended over the outline can be a little darker
    # than the background, e.g. an underscore); dark: the outline
    return (out > 90) & (out != GREY), out < 40


@pytest.mark.parametrize("size_for_px", [128, 256, 512])
@pytest.mark.parametrize("text", ["#1 CHOSEN 0123456789", "FAIL keep_out@3 CHOSEN",
                                  "pred 0 t39"])
def test_outline_hugs_the_text_at_every_glyph(text: str, size_for_px: int) -> None:
    import cv2

    light, dark = _masks(text, size_for_px)
    assert light.any() and dark.any()
    # every dark outline pixel lies within 3 px of a light text pixel: an outline drawn
    # with wider advances than the text drifts right of it, glyph by glyph
    near = cv2.dilate(light.astype(np.uint8), np.ones((7, 7), np.uint8)) > 0
    stray = dark & ~near
    assert stray.sum() == 0, f"{int(stray.sum())} outline pixels away from the text"
    # and the two end where each other ends
    lx, dx = np.flatnonzero(light.any(0)), np.flatnonzero(dark.any(0))
    assert abs(int(dx.max()) - int(lx.max())) <= 2 and abs(int(dx.min()) - int(lx.min())) <= 2
