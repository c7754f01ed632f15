"""Notes the calibration commands print about how a controller reports its joints:
readings that crossed a wrap point, readings that look like degrees."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["PLAUSIBLE_SLIDE_SPAN_M", "say_if_degrees", "say_if_millimetres", "say_turns_unwrapped"]


def say_turns_unwrapped(turns: list[dict[str, Any]] | None, where: str, field: str) -> None:
    """One note on stderr naming the DoFs whose readings crossed the controller's wrap."""
    if not turns:
        return
    at = ", ".join(f"{w['dof']} at {where} {w.get('sample', w.get('frame'))} "
                   f"({w['turns']:+d} turn{'s' if abs(w['turns']) != 1 else ''})" for w in turns)
    print(f"note: joint readings jumped by whole turns where the controller wraps a joint into "
          f"one turn ({at}); read as the joint turning on (episode {field})", file=sys.stderr)


def say_if_degrees(positions: Any, names: Any, units: Any, kind: str, where: str,
                   recorded: bool = False) -> None:
    """One note on stderr naming the channels whose readings look like degrees
    (:func:`edge.joints.look_like_degrees`), the exact fix and what each model does with
    them; nothing where none does. ``recorded``: the episode came from ``calibrate
    record`` (the fix is the controller's unit, not an import option)."""
    from edge.joints import look_like_degrees

    if positions is None:
        return
    q = np.asarray(positions, np.float64)
    cols = look_like_degrees(q, list(units), kind == "calibration")
    if not cols:
        return
    fix = ("set the controller's position unit to rad (framed firmware sends rad: "
           "docs/bridge-frame-protocol.md) and record again "
           "(exact, for every model)" if recorded else
           f"import the recording again with 'syncedge calibrate import ... --degrees "
           f"{','.join(names[c] for c in cols)}' (exact, for every model)")
    print(f"note: {where}: the readings of {_readings(q, names, cols)} look like degrees, not rad (a calibration "
          f"sweeps well under half a turn, a joint rarely reads beyond two turns): if they "
          f"are, {fix}; the chain model "
          f"reads a calibration sweep of at most 57.3 units as degrees by itself "
          f"(--joint-scale auto; deg says so), a wider one by a turn per unit fitted from "
          f"the frames (less exact); the ONNX models refuse them. A gripper or linear axis "
          f"read in mm is not in degrees: 'calibrate import ... --prismatic NAME "
          f"--millimetres NAME'; nor is a reading in another unit (a LeRobot gripper's "
          f"0..100, a joint's -100..100): 'calibrate import ... --scale NAME=RAD_PER_UNIT' "
          f"(its range of motion over the unit's span, from the arm's own calibration)",
          file=sys.stderr)


def _readings(q: np.ndarray, names: Any, cols: list[int], unit: str = "") -> str:
    """``NAME (reads LO to HI[ unit]), ...`` for the columns ``cols`` of readings ``q``."""
    return ", ".join(f"{names[c]} (reads {np.nanmin(q[:, c]):.1f} to "
                     f"{np.nanmax(q[:, c]):.1f}{unit})" for c in cols)


#: :func:`say_if_millimetres`: a sliding channel (m) whose readings span more than this
#: (grippers and the linear axes of a cell move well under it) reads as mm.
PLAUSIBLE_SLIDE_SPAN_M = 2.0


def say_if_millimetres(positions: Any, names: Any, units: Any, where: str) -> None:
    """One note on stderr naming the sliding channels (unit m) whose readings span more
    than :data:`PLAUSIBLE_SLIDE_SPAN_M` (mm read as m: a gripper's 25 mm opening read as a
    25 m slide), with the import's fix; nothing where none does."""
    if positions is None:
        return
    q = np.asarray(positions, np.float64)
    cols = [c for c, u in enumerate(units) if u == "m"
            and np.nanmax(q[:, c]) - np.nanmin(q[:, c]) > PLAUSIBLE_SLIDE_SPAN_M]
    if not cols:
        return
    print(f"note: {where}: the readings of {_readings(q, names, cols, ' m')} span more than any gripper or linear axis "
          f"slides ({PLAUSIBLE_SLIDE_SPAN_M:g} m): if they are in mm, import the recording "
          f"again with 'syncedge calibrate import ... --millimetres "
          f"{','.join(names[c] for c in cols)}'", file=sys.stderr)
