"""Turning a calibration episode into the calibration graph's inputs.

The calibration graph takes ``K*L+1`` frames, ``[K*L+1, A]`` actions and a DoF mask
(docs/architecture.md, "Model contract"). An episode of a robot with n < A DoFs is padded:
its last frame repeated, zero actions added, and the mask 0 for the absent channels.
"""

from __future__ import annotations

import math

import numpy as np

from edge.episode import Episode
from edge.errors import EdgeError

__all__ = ["CalibrationInputError", "degrees_hint", "prepare_calibration"]


class CalibrationInputError(EdgeError, ValueError):
    """A calibration episode does not fit the model (DoFs, segments, resolution)."""


def degrees_hint(swept: dict[str, float], low: float, high: float) -> str:
    """What to say when sweeps outside the accepted range are sweeps in range read in degrees.

    Args:
        swept: the out-of-range revolute DoFs' swept amplitudes as read, ``{name: |amp|}``.
        low, high: the model's accepted sweep, rad.

    Returns:
        ``""`` unless every amplitude, taken as degrees, lies in ``[low, high]`` rad (1%
        slack); then a clause (starting ``"; "``) saying so and naming the conversion
        (``calibrate import --degrees``).
    """
    rad = [math.radians(a) for a in swept.values()]
    if not rad or not all(low * 0.99 <= r <= high * 1.01 for r in rad):
        return ""
    return (f"; read as degrees they would be {min(rad):.3f}-{max(rad):.3f} rad, in that "
            f"range: the joint readings look like degrees, not rad; convert them to rad (a "
            f"recording made elsewhere: syncedge calibrate import SOURCE --degrees "
            f"{','.join(swept)} ...)")


def prepare_calibration(ep: Episode, max_dof: int, segment_frames: int,
                        resolution: tuple[int, int] | None = None,
                        out_rows: tuple[int, int] = (0, 3), source: object = None,
                        amplitude_rad: tuple[float, float] | None = None,
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Check and pad a calibration episode for the calibration graph.

    Args:
        ep: the calibration episode (n DoFs, n*L+1 frames).
        max_dof: A (= K), the model's action width.
        segment_frames: L.
        resolution: the model's (H, W); ``None`` skips the check.
        out_rows: action rows of each segment's outward phase.
        source: file name for messages.
        amplitude_rad: the (low, high) sweep magnitude the model accepts
            (``contract.calibration_amplitude_rad``), rad; ``None`` skips the check.

    Returns:
        frames uint8 ``[K*L+1, H, W, 3]``, actions float32 ``[K*L+1, A]``, mask float32 ``[A]``.
    Raises:
        CalibrationInputError: not a calibration episode, more DoFs than A, a frame count
            that is not n*L+1 (a missing or extra DoF segment), a DoF without a segment of
            its own, another resolution, or a sweep magnitude outside ``amplitude_rad``
            (naming the DoF and the range).
    """
    who = f"{source}: " if source else ""
    if ep.metadata.kind != "calibration":
        raise CalibrationInputError(f"{who}a {ep.metadata.kind!r} episode; expected a "
                                    f"calibration episode (kind 'calibration', the sweep "
                                    f"recorded with 'syncedge calibrate record')")
    n = ep.num_dof
    if n > max_dof:
        raise CalibrationInputError(f"{who}calibration episode has action width {n}; the model "
                                    f"takes at most {max_dof} DoFs")
    if resolution is not None and ep.resolution != tuple(resolution):
        raise CalibrationInputError(
            f"{who}calibration frames are {ep.resolution[0]}x{ep.resolution[1]}; the model "
            f"takes {resolution[0]}x{resolution[1]} (resample the episode first)")
    if ep.num_frames != n * segment_frames + 1:
        raise CalibrationInputError(
            f"{who}calibration episode has {ep.num_frames} frames; expected {n} DoF segments of "
            f"{segment_frames} frames plus one ({n * segment_frames + 1}): a DoF segment is "
            f"missing or extra")
    seg = ep.actions[: n * segment_frames].reshape(n, segment_frames, n)
    energy = np.abs(seg[:, out_rows[0]:out_rows[1]]).sum(1)  # (segments, channels)
    owner = energy.argmax(0)
    names = ep.metadata.dof_names
    for c in range(n):
        if energy[owner[c], c] <= 0:
            raise CalibrationInputError(
                f"{who}DoF '{names[c]}' never moved in any sweep segment (a DoF segment is "
                f"missing, or the joint is frozen)")
    for c in range(n):
        shared = [names[o] for o in range(n) if owner[o] == owner[c]]
        if len(shared) > 1:
            raise CalibrationInputError(
                f"{who}DoFs {shared} moved most in the same segment {int(owner[c])}: each DoF "
                f"needs a sweep segment of its own")
    if amplitude_rad is not None:
        lo, hi = amplitude_rad
        bad: dict[str, float] = {}
        for c in range(n):
            amp = abs(float(seg[owner[c], out_rows[0]:out_rows[1], c].sum()))
            # 1% slack: a recorded sweep is resampled and rounded to float32
            if not lo * 0.99 <= amp <= hi * 1.01:
                bad[names[c]] = amp
        if bad:
            units = dict(zip(names, ep.metadata.dof_units, strict=True))
            hint = degrees_hint(bad, lo, hi) if all(units[k] == "rad" for k in bad) else ""
            swept = ", ".join(f"{k!r} swept {a:.3f} {units[k]}" for k, a in bad.items())
            todo = hint or ": record the sweep again with amplitudes in that range"
            raise CalibrationInputError(
                f"{who}DoF {swept}; this model accepts sweeps of {lo:g}-{hi:g} rad "
                f"(model.json contract.calibration_amplitude_rad){todo}")
    total = max_dof * segment_frames + 1
    frames = np.concatenate([ep.frames, np.repeat(ep.frames[-1:], total - ep.num_frames, 0)])
    actions = np.zeros((total, max_dof), np.float32)
    actions[: ep.num_frames, :n] = ep.actions
    mask = np.zeros(max_dof, np.float32)
    mask[:n] = 1.0
    return frames, actions, mask
