"""Joint trajectories for generated episodes: smooth random motion and calibration sweeps.

All positions are in the robot's canonical joint order, rad, one row per frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edge.calibrate.spec import RobotSpec
from export.errors import CellError

__all__ = [
    "MOTION_PROFILES",
    "SEGMENT_FRAMES",
    "SWEEP_PROFILE",
    "SweepSegment",
    "calibration_sweep",
    "motion_range",
    "motion_trajectory",
    "random_trajectory",
    "two_joint_trajectory",
]

#: Frames per DoF segment of a calibration episode (out 3, pause 1, back 3, pause 1).
SEGMENT_FRAMES = 8
#: Fraction of the sweep amplitude moved by each action of a segment (sums to 0).
SWEEP_PROFILE = np.array([0.25, 0.5, 0.25, 0.0, -0.25, -0.5, -0.25, 0.0])
#: Calibration sweep amplitude range, rad (sign and magnitude drawn per DoF).
SWEEP_AMPLITUDE_RAD = (0.30, 0.50)
#: Half-width of the motion range around the home pose, rad.
MOTION_HALF_RANGE_RAD = 0.7
#: Frames between random waypoints of an all-joints motion trajectory.
WAYPOINT_SPACING = 6
#: Frames between waypoints of a two-joint motion trajectory.
TWO_JOINT_SPACING = 4
#: Range of one joint's move between two waypoints of a two-joint trajectory, rad.
TWO_JOINT_STEP_RAD = (0.25, 0.45)
#: Half-width of a two-joint trajectory's start pose around the home pose, rad.
TWO_JOINT_START_RAD = 0.3
#: Motion profiles of generated motion episodes (see :func:`motion_trajectory`).
MOTION_PROFILES = ("two_joint", "all_joints")


@dataclass(frozen=True)
class SweepSegment:
    """One DoF sweep: canonical joint ``joint`` moves during action rows ``[start, stop)``."""

    joint: int
    start: int
    stop: int
    amplitude_rad: float


def motion_range(spec: RobotSpec) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) float64 ``[n]`` rad: home +- the motion half-range, inside joint limits."""
    home = np.asarray(spec.home_rad)
    lim = np.asarray(spec.limits_rad)
    margin = 0.05
    lo = np.maximum(home - MOTION_HALF_RANGE_RAD, lim[:, 0] + margin)
    hi = np.minimum(home + MOTION_HALF_RANGE_RAD, lim[:, 1] - margin)
    return lo, hi


def random_trajectory(rng: np.random.Generator, spec: RobotSpec, num_frames: int,
                      start_rad: np.ndarray | None = None) -> np.ndarray:
    """A smooth random joint trajectory within the motion range.

    Waypoints drawn uniformly in :func:`motion_range` every :data:`WAYPOINT_SPACING`
    frames are joined by a Catmull-Rom spline (C1-continuous), then clipped to the range.

    Args:
        rng: random generator (consumed).
        spec: the robot.
        num_frames: T >= 2.
        start_rad: optional first pose ``[n]`` rad (default: a random waypoint).

    Returns:
        float64 ``[T, n]`` joint positions, rad.
    """
    if num_frames < 2:
        raise CellError(f"a trajectory needs at least 2 frames, found {num_frames}")
    lo, hi = motion_range(spec)
    k = num_frames // WAYPOINT_SPACING + 3
    way = rng.uniform(lo, hi, size=(k + 1, spec.num_dof))
    if start_rad is not None:
        way[1] = np.clip(start_rad, lo, hi)
    way[0] = way[1] - (way[2] - way[1])  # phantom point: start with the first segment's slope
    return np.clip(_catmull_rom(way, num_frames, WAYPOINT_SPACING), lo, hi)


def _catmull_rom(way: np.ndarray, num_frames: int, spacing: int) -> np.ndarray:
    """Sample a C1 Catmull-Rom spline through waypoints ``way[1:]`` (``way[0]`` is the
    phantom point before the first), ``spacing`` frames apart: float64 ``[T, n]``."""
    t = np.arange(num_frames) / spacing
    i = np.floor(t).astype(int) + 1
    u = (t - np.floor(t))[:, None]
    p0, p1, p2, p3 = way[i - 1], way[i], way[i + 1], way[np.minimum(i + 2, len(way) - 1)]
    return 0.5 * ((2 * p1) + (-p0 + p2) * u + (2 * p0 - 5 * p1 + 4 * p2 - p3) * u**2
                  + (-p0 + 3 * p1 - 3 * p2 + p3) * u**3)


def two_joint_trajectory(rng: np.random.Generator, spec: RobotSpec,
                         num_frames: int, start_rad: np.ndarray | None = None) -> np.ndarray:
    """A smooth random joint trajectory in which two joints move at a time.

    Starts within :data:`TWO_JOINT_START_RAD` of the home pose; at every waypoint
    (:data:`TWO_JOINT_SPACING` frames apart) two random joints move by
    :data:`TWO_JOINT_STEP_RAD` in a random direction (reversed where it would leave
    :func:`motion_range`) while the others hold; a Catmull-Rom spline joins the waypoints.
    At 10 Hz and 64x64 px the end effector moves about 1.6 px per frame (10 px over 16
    frames), so each frame's change stays close to what one calibration segment shows,
    unlike :func:`random_trajectory`, which moves every joint at once. ``start_rad``, if
    given, replaces the random start pose (clipped to the motion range).

    Returns:
        float64 ``[T, n]`` joint positions, rad.

    Raises:
        CellError: ``num_frames < 2``.
    """
    if num_frames < 2:
        raise CellError(f"a trajectory needs at least 2 frames, found {num_frames}")
    lo, hi = motion_range(spec)
    n = spec.num_dof
    home = np.asarray(spec.home_rad)
    cur = np.clip(home + rng.uniform(-TWO_JOINT_START_RAD, TWO_JOINT_START_RAD, n), lo, hi)
    if start_rad is not None:
        cur = np.clip(np.asarray(start_rad, dtype=np.float64), lo, hi)
    way = [cur.copy()]
    for _ in range(num_frames // TWO_JOINT_SPACING + 3):
        cur = cur.copy()
        for j in rng.choice(n, size=2, replace=False):
            step = rng.uniform(*TWO_JOINT_STEP_RAD) * rng.choice([-1, 1])
            if not lo[j] <= cur[j] + step <= hi[j]:
                step = -step
            cur[j] = np.clip(cur[j] + step, lo[j], hi[j])
        way.append(cur)
    q = _catmull_rom(np.array([way[0], *way]), num_frames, TWO_JOINT_SPACING)
    return np.clip(q, lo, hi)


def motion_trajectory(rng: np.random.Generator, spec: RobotSpec, num_frames: int,
                      profile: str = "all_joints",
                      start_rad: np.ndarray | None = None) -> np.ndarray:
    """A motion episode's joint trajectory, float64 ``[T, n]`` rad, of the named profile:
    ``two_joint`` (:func:`two_joint_trajectory`) or ``all_joints`` (:func:`random_trajectory`),
    from ``start_rad`` (canonical order, rad) if given.

    Raises:
        CellError: an unknown profile, or ``num_frames < 2``.
    """
    if profile == "two_joint":
        return two_joint_trajectory(rng, spec, num_frames, start_rad)
    if profile == "all_joints":
        return random_trajectory(rng, spec, num_frames, start_rad)
    raise CellError(f"unknown motion profile {profile!r}; expected one of {list(MOTION_PROFILES)}")


def calibration_sweep(rng: np.random.Generator, spec: RobotSpec, start_rad: np.ndarray,
                      amplitude_rad: tuple[float, float] = SWEEP_AMPLITUDE_RAD,
                      ) -> tuple[np.ndarray, list[SweepSegment]]:
    """The joint trajectory of a calibration episode and its segments.

    Every DoF is swept once, in a random order, while the others hold: out over three
    frames, pause, back over three frames, pause (:data:`SWEEP_PROFILE`), with a random
    sign and magnitude (uniform in ``amplitude_rad``, by default
    :data:`SWEEP_AMPLITUDE_RAD`). Where the drawn direction would leave
    the joint limits, the sweep goes the other way. After the sweep every joint is back at
    its start pose. This follows SyncWorld's calibration generator (Yang et al., arXiv
    2609.09155): one clip per camera view, K segments of a few frames each.

    Returns:
        ``(q, segments)``: float64 ``[n * SEGMENT_FRAMES + 1, n]`` rad, and one
        :class:`SweepSegment` per DoF in sweep order; segment k covers action rows
        ``[k * SEGMENT_FRAMES, (k + 1) * SEGMENT_FRAMES)``.
    """
    n = spec.num_dof
    lim = np.asarray(spec.limits_rad)
    start = np.asarray(start_rad, dtype=np.float64)
    order = rng.permutation(n)
    deltas = np.zeros((n * SEGMENT_FRAMES, n))
    segments = []
    for k, j in enumerate(order):
        amp = float(rng.uniform(*amplitude_rad)) * float(rng.choice([-1.0, 1.0]))
        if not lim[j, 0] <= start[j] + amp <= lim[j, 1]:
            amp = -amp
        if not lim[j, 0] <= start[j] + amp <= lim[j, 1]:
            raise CellError(f"{spec.robot} joint {spec.dof_names[j]} at {start[j]:.3f} rad cannot "
                            f"sweep {abs(amp):.3f} rad within {tuple(lim[j])}")
        rows = slice(k * SEGMENT_FRAMES, (k + 1) * SEGMENT_FRAMES)
        deltas[rows, j] = SWEEP_PROFILE * amp
        segments.append(SweepSegment(int(j), rows.start, rows.stop, amp))
    q = np.vstack([start, start + np.cumsum(deltas, axis=0)])
    return q, segments
