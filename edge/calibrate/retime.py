"""Re-time an episode whose camera was late (or early) against its joint readings.

``calibrate check`` measures the lag from a calibration episode's own frames
(:func:`edge.calibrate.check.estimate_camera_lag`) and fails one of half a frame or more
(``camera_lag``). Where the cell is at hand, recording again with the right
``--camera-latency-s`` is the fix. An episode that cannot be recorded again (an imported
dataset, a cell no longer available) is re-timed instead: its frames move by the lag,
rounded to whole frames, so that each frame again shows the pose its joint readings give;
the residual is under half a frame. Frames past the recording's end (or before its start)
repeat the last (first) one, and the episode says which in ``metadata.extra.retime``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from edge.episode import Episode

__all__ = ["retime_episode"]


def retime_episode(ep: Episode, shift_frames: int, measured: dict[str, Any] | None = None
                   ) -> Episode:
    """The episode with frame ``t`` replaced by frame ``t + shift_frames``.

    Args:
        ep: the episode; its joint readings, actions and stamps stay as they are.
        shift_frames: the camera's lag in whole frames (> 0: the camera was late, each
            frame showed the pose read ``shift_frames`` knots earlier; < 0: early).
        measured: the lag measurement the shift came from (``estimate_camera_lag``'s
            dictionary), recorded beside it.

    Returns:
        A new :class:`Episode`: frames, and the robot masks and end-effector pixels where
        the episode has them (they are what the camera saw), moved; ``metadata.extra``
        gains ``retime``: ``shift_frames``, ``held_frames`` (the indices that repeat the
        first or last recorded frame) and ``measured``.

    Raises:
        ValueError: ``shift_frames`` is 0 or not shorter than the episode.
    """
    t = ep.num_frames
    if shift_frames == 0 or abs(shift_frames) >= t:
        raise ValueError(f"shift_frames {shift_frames}: expected a non-zero whole number of "
                         f"frames shorter than the episode ({t} frames)")
    src = np.arange(t) + shift_frames
    held = np.flatnonzero((src < 0) | (src >= t))
    idx = np.clip(src, 0, t - 1)
    extra = dict(ep.metadata.extra or {})
    extra["retime"] = {"shift_frames": int(shift_frames), "held_frames": held.tolist(),
                       "measured": measured}
    meta = dataclasses.replace(ep.metadata, extra=extra)
    return dataclasses.replace(
        ep, frames=np.ascontiguousarray(ep.frames[idx]), metadata=meta,
        robot_mask=None if ep.robot_mask is None else np.ascontiguousarray(ep.robot_mask[idx]),
        ee_px=None if ep.ee_px is None else np.ascontiguousarray(ep.ee_px[idx]))
