"""OpenCV camera sources: a video file, the end of a stream, GStreamer where unsupported."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge.calibrate.camera import OpenCVCamera, fit_frame, gstreamer_supported, open_camera
from edge.calibrate.errors import CameraDisconnectedError, CameraError
from edge.visual import write_mp4


def test_file_source_frames_stamps_and_end(tmp_path: Path) -> None:
    frames = np.zeros((5, 48, 64, 3), np.uint8)
    frames[:, :, :32, 0] = 255  # left half red
    write_mp4(tmp_path / "v.mp4", frames, 10.0, scale=1)
    cam = open_camera(str(tmp_path / "v.mp4"))
    try:
        got = [cam.read() for _ in range(5)]
        with pytest.raises(CameraDisconnectedError, match="no frame after 5 frames"):
            cam.read()
        assert cam.describe()["kind"] == "file"
    finally:
        cam.close()
    img, stamps = got[0][0], [s for _, s in got]
    assert img.shape == (48, 64, 3) and img[:, :16, 0].mean() > 200 and img[:, 48:, 0].mean() < 50
    assert all(b > a for a, b in zip(stamps, stamps[1:], strict=False))


def test_missing_source_and_gstreamer_are_reported(tmp_path: Path) -> None:
    with pytest.raises(CameraError, match="could not open"):
        OpenCVCamera(str(tmp_path / "none.mp4"))
    if not gstreamer_supported():
        with pytest.raises(CameraError, match="built without GStreamer"):
            open_camera("videotestsrc ! videoconvert ! appsink")


def test_fit_frame_centre_crops_then_area_resizes() -> None:
    img = np.zeros((96, 128, 3), np.uint8)
    img[:, :16] = 255  # cropped away: 128 wide -> 96 wide centre
    out = fit_frame(img, (64, 64))
    assert out.shape == (64, 64, 3) and out.max() == 0
