"""Camera sources for recording and verification, and the resize to the model's frames.

``open_camera(src)`` understands:

============================  ==============================================================
``SRC``                       source
============================  ==============================================================
``0``, ``1``, ...             a local camera by device index (``cv2.VideoCapture(index)``)
``/path/video.mp4``           a video file (frames stamped as they are read)
``rtsp://...``, ``http://``   a network stream through OpenCV's FFmpeg backend
``... ! appsink``             a GStreamer pipeline string (only where OpenCV was built with
                              GStreamer; otherwise a :class:`CameraError` says so)
``sim://cell?...``            the virtual cell's camera (``export/cells/virtual.py``; needs
                              ``pip install 'syncedge[train]'``)
============================  ==============================================================

A URL whose scheme is an entry of the ``syncedge.cameras`` plug-in group (``edge/plugins.py``;
the project's own: ``sim``) opens through that entry; every other source is OpenCV's.

Every source yields RGB frames uint8 ``[H, W, 3]`` with a receipt stamp from
``time.monotonic_ns()`` (the virtual cell uses its own simulated host clock) and exposes
``latency_s`` (the delay from exposure to stamp, s; 0 when unknown).
"""

from __future__ import annotations

import time
from typing import Any, Protocol, runtime_checkable

import numpy as np

from edge.calibrate.errors import CameraDisconnectedError, CameraError
from edge.plugins import entries, load

__all__ = ["CAMERAS", "CHAIN_READ_MULTIPLE", "FrameSource", "OpenCVCamera", "fit_for_chain",
           "fit_frame", "gstreamer_supported", "open_camera"]

#: The plug-in group of camera sources by URL scheme: scheme -> ``open(src) -> FrameSource``.
CAMERAS = "syncedge.cameras"


@runtime_checkable
class FrameSource(Protocol):
    """What the recorder and ``verify`` read frames from."""

    latency_s: float

    def read(self) -> tuple[np.ndarray, int]:
        """The next frame, RGB uint8 ``[H, W, 3]``, and its receipt stamp, ns.

        Raises:
            CameraDisconnectedError: the source stopped delivering frames.
        """

    def describe(self) -> dict[str, Any]:
        """The equipment, for reports (JSON-ready)."""

    def close(self) -> None:
        """Release the source."""


def gstreamer_supported() -> bool:
    """True when the installed OpenCV was built with GStreamer."""
    import cv2

    for line in cv2.getBuildInformation().splitlines():
        if line.strip().startswith("GStreamer:"):
            return "YES" in line.split(":", 1)[1]
    return False


class OpenCVCamera:
    """A ``cv2.VideoCapture`` source (device index, file, network URL, GStreamer pipeline).

    Args:
        src: see the module docstring.
        latency_s: exposure-to-stamp delay of this camera, s (measured once per camera).
        read_failures: consecutive failed reads that count as a disconnection.

    Raises:
        CameraError: the source cannot be opened (names the source and the backend).
    """

    def __init__(self, src: str, latency_s: float = 0.0, read_failures: int = 5):
        import cv2

        self.src, self.latency_s, self.read_failures = src, float(latency_s), read_failures
        self.frames_read = 0
        if src.isdigit():
            self.kind, self._cap = "device", cv2.VideoCapture(int(src))
        elif "!" in src:
            if not gstreamer_supported():
                raise CameraError(f"camera {src!r}: this is a GStreamer pipeline, but the "
                                  f"installed OpenCV {cv2.__version__} was built without "
                                  f"GStreamer; use a device index, a file or an RTSP URL, or "
                                  f"install an OpenCV build with GStreamer")
            self.kind, self._cap = "gstreamer", cv2.VideoCapture(src, cv2.CAP_GSTREAMER)
        elif "://" in src:
            self.kind, self._cap = "stream", cv2.VideoCapture(src, cv2.CAP_FFMPEG)
        else:
            self.kind, self._cap = "file", cv2.VideoCapture(src)
        if not self._cap.isOpened():
            raise CameraError(f"camera {src!r} ({self.kind}): expected an open video source, "
                              f"found OpenCV could not open it (check the index, path or URL)")

    def read(self) -> tuple[np.ndarray, int]:
        """See :meth:`FrameSource.read`."""
        for _ in range(self.read_failures):
            ok, bgr = self._cap.read()
            stamp = time.monotonic_ns()
            if ok and bgr is not None:
                self.frames_read += 1
                return np.ascontiguousarray(bgr[..., ::-1]), stamp
            if self.kind == "file":
                break
        raise CameraDisconnectedError(f"camera {self.src!r} ({self.kind}): no frame after "
                                      f"{self.frames_read} frames (disconnected or ended)")

    def describe(self) -> dict[str, Any]:
        """Source, backend, size and nominal rate."""
        import cv2

        return {"source": self.src, "kind": self.kind, "backend": self._cap.getBackendName(),
                "width": int(self._cap.get(cv2.CAP_PROP_FRAME_WIDTH)),
                "height": int(self._cap.get(cv2.CAP_PROP_FRAME_HEIGHT)),
                "fps": float(self._cap.get(cv2.CAP_PROP_FPS)), "latency_s": self.latency_s}

    def close(self) -> None:
        """Release the capture."""
        self._cap.release()


def open_camera(src: str, latency_s: float | None = None) -> FrameSource:
    """Open a camera source by its string (see the module docstring).

    Raises:
        CameraError: unknown or unopenable source.
        MissingDependencyError: a plug-in source whose library is absent (``sim://``
            without MuJoCo: the ``train`` extra).
    """
    scheme = src.split("://", 1)[0].lower() if "://" in src else ""
    if scheme and scheme in entries(CAMERAS):
        cam: FrameSource = load(CAMERAS, scheme, f"the camera {src!r}")(src)
        if latency_s is not None:
            cam.latency_s = float(latency_s)
        return cam
    return OpenCVCamera(src, latency_s or 0.0)


def fit_frame(frame: np.ndarray, size_hw: tuple[int, int]) -> np.ndarray:
    """Centre-crop ``frame`` uint8 ``[H, W, 3]`` to the aspect of ``size_hw`` and resize it
    with area interpolation; returns uint8 ``[h, w, 3]``."""
    import cv2

    h, w = frame.shape[:2]
    th, tw = size_hw
    if (h, w) == (th, tw):
        return frame
    if w * th > h * tw:  # too wide: crop columns
        cw = max(1, int(round(h * tw / th)))
        x0 = (w - cw) // 2
        frame = frame[:, x0:x0 + cw]
    else:
        ch = max(1, int(round(w * th / tw)))
        y0 = (h - ch) // 2
        frame = frame[y0:y0 + ch]
    return cv2.resize(np.ascontiguousarray(frame), (tw, th), interpolation=cv2.INTER_AREA)


#: The side a chain reads a calibration at, in model grids: 4x (256 px for a 64 px grid).
CHAIN_READ_MULTIPLE = 4


def fit_for_chain(episode: Any, grid: int) -> tuple[Any, dict[str, Any] | None]:
    """A calibration episode at a square whole multiple of the chain's ``grid``.

    The chain is read from frames of ``m * grid`` px square (a whole number of frame
    pixels per grid pixel). An episode at the camera's own size (an import, a recording
    with ``--size`` of another aspect) is centre-cropped to a square and area-resized (as
    :func:`fit_frame` does for a recording) to the largest multiple of ``grid`` that its
    short side covers, at most :data:`CHAIN_READ_MULTIPLE` times the grid. Where the crop
    cuts rows (a portrait frame), ``metadata.camera.fovy_deg`` is narrowed to the rows
    kept, so the pinhole stays the camera's. The evaluation-only ``robot_mask`` and
    ``ee_px`` (at the recorded size) are dropped.

    Args:
        episode: ``edge.episode.Episode``, frames uint8 ``[T, H, W, 3]``.
        grid: the chain's grid side, px.

    Returns:
        ``(episode, fitted)``: the episode unchanged and None where its frames are already
        a square whole multiple of ``grid``; else the fitted episode and ``{"from_hw":
        [H, W], "to_hw": [S, S]}`` (also in ``metadata.extra["fitted_for_chain"]``).

    Raises:
        ValueError: frames smaller than one grid on their short side.
    """
    import dataclasses
    import math

    fh, fw = (int(v) for v in episode.frames.shape[1:3])
    if fh == fw and fh % grid == 0:
        return episode, None
    side = min(fh, fw)
    if side < grid:
        raise ValueError(f"frames of {fw}x{fh} px are smaller than the chain's {grid}x{grid} "
                         f"grid: record the calibration at {CHAIN_READ_MULTIPLE * grid}x"
                         f"{CHAIN_READ_MULTIPLE * grid} or more")
    target = min(side // grid, CHAIN_READ_MULTIPLE) * grid
    fitted = {"from_hw": [fh, fw], "to_hw": [target, target]}
    camera = dict(episode.metadata.camera or {})
    fovy = camera.get("fovy_deg")
    if fh > fw and isinstance(fovy, (int, float)):  # the crop keeps fw of the fh rows
        camera["fovy_deg"] = math.degrees(2 * math.atan(math.tan(math.radians(fovy) / 2)
                                                        * fw / fh))
    meta = dataclasses.replace(episode.metadata, camera=camera,
                               extra={**dict(episode.metadata.extra),
                                      "fitted_for_chain": fitted})
    frames = np.stack([fit_frame(f, (target, target)) for f in episode.frames])
    return dataclasses.replace(episode, frames=frames, robot_mask=None, ee_px=None,
                               metadata=meta).validate(), fitted
