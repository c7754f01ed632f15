"""CellParams.with_light: a cell's lights changed as after its calibration."""

from __future__ import annotations

import numpy as np
import pytest

from export.cells.sampling import sample_cell


def test_with_light_scales_every_light_or_one_and_clips_at_one() -> None:
    cell = sample_cell(np.random.default_rng(3), "test_robot", "c-000")
    dim = cell.with_light(0.5)
    assert np.allclose(dim.ambient_rgb, np.asarray(cell.ambient_rgb) * 0.5)
    for a, b in zip(dim.lights, cell.lights, strict=True):
        assert np.allclose(a["diffuse"], np.asarray(b["diffuse"]) * 0.5)
        assert a["pos"] == b["pos"]
    bright = cell.with_light(10.0)
    assert max(bright.ambient_rgb) == 1.0 and all(max(li["diffuse"]) == 1.0
                                                  for li in bright.lights)
    off = cell.with_light(0.0, only=1)  # one lamp off: the other and the ambient stay
    assert off.ambient_rgb == cell.ambient_rgb and off.lights[0] == cell.lights[0]
    assert off.lights[1]["diffuse"] == [0.0, 0.0, 0.0]
    assert cell.with_light(1.0) == cell  # unchanged light is the same cell
    with pytest.raises(ValueError, match="light scale: expected a finite value >= 0"):
        cell.with_light(float("nan"))
    with pytest.raises(ValueError, match="light index: expected 0-1, found 2"):
        cell.with_light(0.5, only=2)
