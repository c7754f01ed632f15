"""Errors of the calibration procedure (all derive from :class:`edge.errors.EdgeError`)."""

from __future__ import annotations

from edge.errors import ConfigError, EdgeError

__all__ = ["CalibrateError", "CameraError", "CameraDisconnectedError", "PlanError",
           "RecordingError", "RecordingImportError", "StaleCalibrationError"]


class CalibrateError(EdgeError):
    """Base class of the calibration procedure's errors."""


class PlanError(CalibrateError, ConfigError):
    """A robot spec or a joint program is malformed (names the file and the key)."""


class CameraError(CalibrateError):
    """A camera source cannot be opened or read (names the source and the fix)."""


class CameraDisconnectedError(CameraError):
    """The camera stopped delivering frames in the middle of a recording."""


class RecordingError(CalibrateError):
    """A recording could not be completed; ``partial_path`` names what was kept, if any."""

    def __init__(self, message: str, partial_path: object = None):
        super().__init__(message)
        self.partial_path = partial_path


class RecordingImportError(CalibrateError, ValueError):
    """A recording made elsewhere (a rosbag2 bag, a LeRobot dataset) cannot be imported as an
    episode; the message names the file, the topic or field, what was expected and the fix."""


class StaleCalibrationError(CalibrateError):
    """The camera moved since the calibration was recorded; recalibrate the cell."""
