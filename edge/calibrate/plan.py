"""Joint programs a controller executes: the calibration sweep, a validation motion and
held poses for refining the chain.

A program is a list of joint-position knots, one per frame at the model's frame rate
(``t_k = k / frame_rate_hz`` s from the program's start), in the controller's channel order
and sign; the controller moves linearly between knots. It starts and ends with holds at
the home pose (``lead_in_frames``, ``lead_out_frames``) so the recorder can find it.

Calibration sweep (the generator's profile, so the model sees what it was trained on): for
each DoF in a random order, 8 frames: out over three frames (0.25, 0.5, 0.25 of the signed
amplitude), a pause, back over three frames, a pause, while the others hold. Sign and
magnitude are random (magnitude in ``[sweep_min, sweep_max]``); where the drawn direction
would leave the limits (less a margin) the sweep goes the other way. The episode recorded
from it has ``8 n + 1`` frames; segment k covers action rows ``[8k, 8k + 8)``.

A slower sweep (``phase_s``, ``pause_s``: a drive with acceleration limits, a camera at
another rate) eases out over ``phase_s``, holds ``pause_s``, eases back and holds again;
its episode has ``L n + 1`` frames and is brought into the model's timing on use
(``edge.calibrate.ingest``).

Files: JSON (everything, :func:`save_program` / :func:`load_program`) and CSV (``time_s``
then one column per DoF, one row per knot) for controllers that take a table.
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge.calibrate.errors import PlanError
from edge.calibrate.spec import LIMIT_MARGIN, RobotSpec
from edge.fileio import atomic_write

__all__ = ["MIN_PHASE_FRAMES", "PROGRAM_FORMAT", "SEGMENT_FRAMES", "SWEEP_PROFILE", "JointProgram",
           "PlannedSweep", "load_program", "plan_motion", "plan_poses", "plan_sweep",
           "save_program", "sweep_profile"]

PROGRAM_FORMAT = "syncedge-joint-program"
PROGRAM_SCHEMA_VERSION = 1
#: Frames per DoF segment (out 3, pause 1, back 3, pause 1), as export/cells/trajectories.py.
SEGMENT_FRAMES = 8
#: Fraction of the amplitude moved by each action of a segment (sums to 0); the generator's.
SWEEP_PROFILE = (0.25, 0.5, 0.25, 0.0, -0.25, -0.5, -0.25, 0.0)
#: Share of the planned amplitude a recorded sweep must reach in each direction.
DEFAULT_MIN_FRACTION = 0.8


@dataclass(frozen=True)
class PlannedSweep:
    """One DoF's sweep: episode action rows ``[start, stop)``; ``amplitude`` signed, rad|m."""

    dof: str
    start: int
    stop: int
    amplitude: float


@dataclass(frozen=True)
class JointProgram:
    """A joint program (see the module docstring).

    Attributes:
        kind: ``"calibration"`` or ``"motion"``.
        robot: robot model name; dof_names / dof_units: controller channels.
        frame_rate_hz: knot rate, Hz (the model's frame rate).
        positions: float64 ``[N, n]`` knots, rad|m; knot k at ``k / frame_rate_hz`` s.
        lead_in_frames, lead_out_frames: holds at the start and the end.
        sweeps: the DoF sweeps (calibration), rows relative to the episode's first frame.
        min_fraction: share of each amplitude the check requires in both directions.
        lower, upper: joint limits per channel, rad|m.
        seed: the random seed the program was drawn with.
    """

    kind: str
    robot: str
    dof_names: tuple[str, ...]
    dof_units: tuple[str, ...]
    frame_rate_hz: float
    positions: np.ndarray
    lead_in_frames: int
    lead_out_frames: int
    sweeps: tuple[PlannedSweep, ...]
    min_fraction: float
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    seed: int

    @property
    def episode_frames(self) -> int:
        """Frames of the episode recorded from this program (the knots between the holds)."""
        return int(len(self.positions) - self.lead_in_frames - self.lead_out_frames)

    @property
    def duration_s(self) -> float:
        """Expected duration of the whole program, s."""
        return (len(self.positions) - 1) / self.frame_rate_hz

    @property
    def times_s(self) -> np.ndarray:
        """float64 ``[N]`` knot times, s from the program's start."""
        return np.arange(len(self.positions)) / self.frame_rate_hz

    def episode_positions(self) -> np.ndarray:
        """float64 ``[episode_frames, n]``: the knots the episode's frames should sit at."""
        return self.positions[self.lead_in_frames:self.lead_in_frames + self.episode_frames]


#: Largest offset of a joint from home in :func:`plan_motion` by default, rad.
MOTION_HALF_RANGE = 0.3


def _holds(spec: RobotSpec, lead_in_s: float, lead_out_s: float) -> tuple[int, int]:
    if lead_in_s < 0 or lead_out_s < 0:
        raise PlanError(f"lead-in/lead-out: expected >= 0 s, found {lead_in_s}, {lead_out_s}")
    return (max(1, int(round(lead_in_s * spec.frame_rate_hz))),
            max(1, int(round(lead_out_s * spec.frame_rate_hz))))


#: Fewest frames per phase of a timed sweep (``--sweep-seconds``): with fewer the camera
#: cannot see the poses ingest picks (``edge.calibrate.ingest``, ``unseen``).
MIN_PHASE_FRAMES = 3


def sweep_profile(frame_rate_hz: float, phase_s: float | None = None,
                  pause_s: float | None = None) -> np.ndarray:
    """Per-frame position change of one DoF's sweep, as a share of its amplitude.

    Args:
        frame_rate_hz: knot rate, Hz.
        phase_s: duration of the out and of the back phase, s; None (and ``pause_s``
            None): the generator's profile :data:`SWEEP_PROFILE` (8 frames).
        pause_s: hold at the peak and at home after each phase, s (None: one frame).

    Returns:
        float64 ``[L]`` (sums to 0): out over ``round(phase_s * rate)`` frames eased in and
        out (``0.5 - 0.5 cos``, as a drive with acceleration limits moves), the pause, back
        the same way, the pause.
    Raises:
        PlanError: a phase of fewer than :data:`MIN_PHASE_FRAMES` frames, or a negative pause.
    """
    if phase_s is None and pause_s is None:
        return np.asarray(SWEEP_PROFILE, np.float64)
    phase_s = 3.0 / frame_rate_hz if phase_s is None else float(phase_s)
    move = int(round(phase_s * frame_rate_hz))
    if move < MIN_PHASE_FRAMES:
        raise PlanError(f"--sweep-seconds {phase_s:g}: expected at least {MIN_PHASE_FRAMES} "
                        f"frames per phase at {frame_rate_hz:g} Hz (>= "
                        f"{MIN_PHASE_FRAMES / frame_rate_hz:g} s): a faster sweep is not seen "
                        f"by the camera at the poses the model reads")
    hold = 1 if pause_s is None else int(round(float(pause_s) * frame_rate_hz))
    if hold < 0:
        raise PlanError(f"--pause-seconds {pause_s:g}: expected >= 0 s")
    u = 0.5 - 0.5 * np.cos(np.pi * np.arange(move + 1) / move)
    out = np.diff(u)
    z = np.zeros(hold)
    return np.concatenate([out, z, -out, z])


def plan_sweep(spec: RobotSpec, seed: int, lead_in_s: float = 1.0, lead_out_s: float = 1.0,
               min_fraction: float = DEFAULT_MIN_FRACTION, phase_s: float | None = None,
               pause_s: float | None = None,
               amplitude: tuple[float, float] | None = None) -> JointProgram:
    """Draw the calibration sweep program of a robot.

    Args:
        spec: the robot spec.
        seed: random seed (order, signs, magnitudes).
        lead_in_s, lead_out_s: holds at the home pose before and after the sweep, s.
        min_fraction: share of each amplitude the check will require.
        phase_s, pause_s: a slower sweep (:func:`sweep_profile`); None for both: the
            model's own timing (8 frames per DoF).
        amplitude: (low, high) magnitude drawn for each revolute DoF, rad (None: the
            spec's smallest sweep, :meth:`RobotSpec.dof_sweep_min`, to each DoF's
            ``sweep_max``); keep it within the model's ``contract.calibration_amplitude_rad``.
            A prismatic DoF always sweeps between its own smallest sweep and ``sweep_max``.

    Returns:
        :class:`JointProgram` of ``lead_in + L n + 1 + lead_out`` knots (L = 8 in the
        model's timing, else the length of :func:`sweep_profile`).
    Raises:
        PlanError: a DoF that cannot sweep the smallest amplitude within its limits either
            way, a bad amplitude range, or a phase too short for the camera.
    """
    rng = np.random.default_rng(seed)
    n = len(spec.dofs)
    home = np.array([d.home for d in spec.dofs])
    profile = sweep_profile(spec.frame_rate_hz, phase_s, pause_s)
    seg_len = len(profile)
    if amplitude is not None:
        lo_amp, hi_amp = float(amplitude[0]), float(amplitude[1])
        if not 0 < lo_amp <= hi_amp:
            raise PlanError(f"--amplitude {lo_amp:g}-{hi_amp:g}: expected 0 < LOW <= HIGH")
    order = rng.permutation(n)
    deltas = np.zeros((n * seg_len, n))
    sweeps = []
    for k, j in enumerate(order):
        d = spec.dofs[j]
        least = spec.dof_sweep_min(d)
        low, high = (lo_amp, hi_amp) if amplitude is not None and d.unit == "rad" else \
            (least, max(least, d.sweep_max))
        mag = float(rng.uniform(low, high))
        sign = float(rng.choice([-1.0, 1.0]))
        room = {1.0: d.upper - LIMIT_MARGIN - d.home, -1.0: d.home - d.lower - LIMIT_MARGIN}
        if room[sign] < mag:
            sign = -sign if room[-sign] >= room[sign] else sign
            mag = min(mag, room[sign])
        if mag < low:
            raise PlanError(f"DoF {d.name}: cannot sweep {low} {d.unit} from home "
                            f"{d.home} within [{d.lower}, {d.upper}]")
        rows = slice(k * seg_len, (k + 1) * seg_len)
        deltas[rows, j] = profile * sign * mag
        sweeps.append(PlannedSweep(d.name, rows.start, rows.stop, round(sign * mag, 6)))
    sweep_q = np.vstack([home, home + np.cumsum(deltas, axis=0)])
    sweep_q[-1] = home  # exactly back where it started
    lead_in, lead_out = _holds(spec, lead_in_s, lead_out_s)
    q = np.vstack([np.repeat(home[None], lead_in, 0), sweep_q, np.repeat(home[None], lead_out, 0)])
    return JointProgram("calibration", spec.robot, spec.dof_names,
                        tuple(d.unit for d in spec.dofs), spec.frame_rate_hz, q, lead_in,
                        lead_out, tuple(sweeps), float(min_fraction),
                        tuple(d.lower for d in spec.dofs), tuple(d.upper for d in spec.dofs),
                        int(seed))


def plan_motion(spec: RobotSpec, seed: int, frames: int = 24,
                half_range: float = MOTION_HALF_RANGE,
                lead_in_s: float = 1.0, lead_out_s: float = 1.0) -> JointProgram:
    """An ordinary-motion program for validation: smooth random motion around home.

    Waypoints every 6 frames, uniform within ``home +- half_range`` (and the limits less a
    margin), joined by cosine easing; starts at home.

    Returns:
        :class:`JointProgram` of kind ``"motion"`` with ``frames`` episode frames.
    """
    if frames < 2:
        raise PlanError(f"validation motion: expected at least 2 frames, found {frames}")
    rng = np.random.default_rng(seed)
    home = np.array([d.home for d in spec.dofs])
    lo = np.maximum(home - half_range, [d.lower + LIMIT_MARGIN for d in spec.dofs])
    hi = np.minimum(home + half_range, [d.upper - LIMIT_MARGIN for d in spec.dofs])
    k = -(-(frames - 1) // 6) + 1
    way = rng.uniform(lo, hi, size=(k, len(home)))
    way[0] = home
    t = np.arange(frames) / 6.0
    i = np.minimum(np.floor(t).astype(int), k - 2)
    u = (0.5 - 0.5 * np.cos(np.pi * (t - i)))[:, None]
    motion = way[i] * (1 - u) + way[i + 1] * u
    lead_in, lead_out = _holds(spec, lead_in_s, lead_out_s)
    q = np.vstack([np.repeat(home[None], lead_in, 0), motion,
                   np.repeat(motion[-1:], lead_out, 0)])
    return JointProgram("motion", spec.robot, spec.dof_names, tuple(d.unit for d in spec.dofs),
                        spec.frame_rate_hz, q, lead_in, lead_out, (), DEFAULT_MIN_FRACTION,
                        tuple(d.lower for d in spec.dofs), tuple(d.upper for d in spec.dofs),
                        int(seed))


#: Poses of :func:`plan_poses` by default: on held-out robot cells 32 poses told the
#: depth-mirrored twins apart as well as any motion measured (docs/eval/experiments.md).
POSES_COUNT = 32
#: Largest offset of a joint from home in :func:`plan_poses`, rad (a tenth of it in m).
POSES_HALF_RANGE = 0.5


def plan_poses(spec: RobotSpec, seed: int, count: int = POSES_COUNT,
               half_range: float = POSES_HALF_RANGE, move_s: float = 0.8,
               hold_s: float = 0.4, lead_in_s: float = 1.0,
               lead_out_s: float = 1.0) -> JointProgram:
    """A program of held poses with the joints turned together, for refining a cell
    calibration's chain (``calibrate store CAL --chain --motion EPISODE``).

    A calibration sweep turns one DoF at a time, so it cannot show how the channels
    compose; frames of the joints turned together can
    (:func:`export.models.chain_fit.refine_chain_with_motion`). Each pose draws every
    joint independently, uniform within ``home +- half_range`` (rad; ``half_range / 10``
    for a DoF in m) and the limits less :data:`~edge.calibrate.spec.LIMIT_MARGIN`; the
    controller eases from one pose to the next over ``move_s`` (``0.5 - 0.5 cos``, as a
    drive with acceleration limits moves) and holds it ``hold_s``. The refinement reads the
    middle frame of each hold, where the picture is settled whatever the camera's exposure
    and a residual latency against the joint readings of up to half the hold.

    Args:
        spec: the robot spec.
        seed: random seed of the poses.
        count: poses (at least 2).
        half_range: largest offset from home, rad (> 0).
        move_s: time to move between poses, s (at least one frame).
        hold_s: time each pose is held, s (at least two frames; the pose is reached at the
            first, so the hold spans ``hold + 1`` frames at it).
        lead_in_s, lead_out_s: holds at the home pose before and at the last pose after.

    Returns:
        :class:`JointProgram` of kind ``"motion"``; its episode starts at home and has
        ``count * (move + hold)`` more frames (``move``, ``hold`` in frames).
    Raises:
        PlanError: fewer than 2 poses, a half range <= 0, a move under one frame or a hold
            under two.
    """
    if count < 2:
        raise PlanError(f"--poses {count}: expected at least 2 poses")
    if not half_range > 0:
        raise PlanError(f"--half-range {half_range:g}: expected > 0 rad")
    rate = spec.frame_rate_hz
    move, hold = int(round(move_s * rate)), int(round(hold_s * rate))
    if move < 1 or hold < 2:
        raise PlanError(f"poses: a move of {move_s:g} s and a hold of {hold_s:g} s at "
                        f"{rate:g} Hz are {move} and {hold} frames; expected a move of at "
                        f"least 1 frame and a hold of at least 2 (the refinement reads the "
                        f"middle frame of each hold)")
    rng = np.random.default_rng(seed)
    home = np.array([d.home for d in spec.dofs])
    reach = np.array([half_range / 10 if d.unit == "m" else half_range for d in spec.dofs])
    lo = np.maximum(home - reach, [d.lower + LIMIT_MARGIN for d in spec.dofs])
    hi = np.minimum(home + reach, [d.upper - LIMIT_MARGIN for d in spec.dofs])
    poses = rng.uniform(lo, hi, size=(count, len(home)))
    u = (0.5 - 0.5 * np.cos(np.pi * np.arange(1, move + 1) / move))[:, None]
    rows, last = [home[None]], home
    for pose in poses:
        rows += [last + (pose - last) * u, np.repeat(pose[None], hold, 0)]
        last = pose
    episode = np.vstack(rows)
    lead_in, lead_out = _holds(spec, lead_in_s, lead_out_s)
    q = np.vstack([np.repeat(home[None], lead_in, 0), episode,
                   np.repeat(episode[-1:], lead_out, 0)])
    return JointProgram("motion", spec.robot, spec.dof_names, tuple(d.unit for d in spec.dofs),
                        rate, q, lead_in, lead_out, (), DEFAULT_MIN_FRACTION,
                        tuple(d.lower for d in spec.dofs), tuple(d.upper for d in spec.dofs),
                        int(seed))


def _to_json(p: JointProgram) -> dict[str, Any]:
    seg = p.sweeps[0].stop - p.sweeps[0].start if p.sweeps else SEGMENT_FRAMES
    return {"format": PROGRAM_FORMAT, "schema_version": PROGRAM_SCHEMA_VERSION,
            "kind": p.kind, "robot": p.robot, "dof_names": list(p.dof_names),
            "dof_units": list(p.dof_units), "frame_rate_hz": p.frame_rate_hz,
            "segment_frames": seg,
            "model_timing": seg == SEGMENT_FRAMES,
            "sweep_profile": list(SWEEP_PROFILE) if seg == SEGMENT_FRAMES else None,
            "lead_in_frames": p.lead_in_frames, "lead_out_frames": p.lead_out_frames,
            "episode_frames": p.episode_frames, "duration_s": round(p.duration_s, 6),
            "min_fraction": p.min_fraction, "seed": p.seed, "lower": list(p.lower),
            "upper": list(p.upper), "sweeps": [asdict(s) for s in p.sweeps],
            "times_s": [round(float(t), 6) for t in p.times_s],
            "positions": [[round(float(v), 9) for v in row] for row in p.positions]}


def save_program(p: JointProgram, json_path: str | os.PathLike[str],
                 csv_path: str | os.PathLike[str] | None = None) -> list[Path]:
    """Write the program as JSON (and CSV when ``csv_path`` is given), atomically."""
    text = json.dumps(_to_json(p), indent=1, allow_nan=False) + "\n"
    out = [atomic_write(json_path, lambda f: f.write(text.encode("utf-8")))]
    if csv_path is not None:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["time_s", *p.dof_names])
        for t, row in zip(p.times_s, p.positions, strict=True):
            w.writerow([f"{t:.6f}", *(f"{v:.9f}" for v in row)])
        data = buf.getvalue().encode("utf-8")
        out.append(atomic_write(csv_path, lambda f: f.write(data)))
    return out


def load_program(path: str | os.PathLike[str]) -> JointProgram:
    """Read a program written by :func:`save_program` (the JSON file).

    Raises:
        PlanError: unreadable, another format or version, or inconsistent shapes.
    """
    path = Path(path)
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PlanError(f"{path}: expected a joint program (JSON), found an error: {exc}") \
            from None
    if not isinstance(d, dict) or d.get("format") != PROGRAM_FORMAT:
        raise PlanError(f"{path}: expected format {PROGRAM_FORMAT!r}, found "
                        f"{d.get('format') if isinstance(d, dict) else type(d).__name__!r}")
    if d.get("schema_version") != PROGRAM_SCHEMA_VERSION:
        raise PlanError(f"{path}: expected schema_version {PROGRAM_SCHEMA_VERSION}, found "
                        f"{d.get('schema_version')!r}")
    try:
        q = np.asarray(d["positions"], dtype=np.float64)
        n = len(d["dof_names"])
        if q.ndim != 2 or q.shape[1] != n or not np.isfinite(q).all():
            raise PlanError(f"{path}:positions: expected finite [N, {n}] knots, found shape "
                            f"{q.shape}")
        if d["kind"] not in ("calibration", "motion"):
            raise PlanError(f"{path}:kind: expected 'calibration' or 'motion', found "
                            f"{d['kind']!r}")
        return JointProgram(d["kind"], d["robot"], tuple(d["dof_names"]), tuple(d["dof_units"]),
                            float(d["frame_rate_hz"]), q, int(d["lead_in_frames"]),
                            int(d["lead_out_frames"]),
                            tuple(PlannedSweep(**s) for s in d["sweeps"]),
                            float(d["min_fraction"]), tuple(d["lower"]), tuple(d["upper"]),
                            int(d["seed"]))
    except (KeyError, TypeError) as exc:
        raise PlanError(f"{path}: malformed joint program ({type(exc).__name__}: {exc})") \
            from None
