"""From a raw recording to an episode: clocks, pairing, program alignment, resampling.

1. Joint stamps: ``edge.timebase.capture_stamps``: by round trip where every
   sample carries its request stamp, else, where every sample carries a device stamp, on
   the device clock through the stream's pings (the answer with the smallest round trip)
   or without them through its lower envelope (offset and drift through the fastest
   deliveries, so bursty delivery adds no bias), otherwise their receipt stamps.
2. Pairing: ``edge.timebase.pair_frames`` interpolates joint positions at each
   frame's latency-corrected stamp (tolerance ``tolerance_s``), never by arrival order.
3. Alignment: the program's start time on the host clock is fitted to the joint samples
   (least squares of the change from the first sample against the program's knots,
   coarse then fine search), so knot k is at ``t0 + k / fps``.
4. Resampling to the model's rate: for each episode knot the nearest paired frame; a knot
   with no frame within ``0.4 / fps`` is a dropped frame (listed in ``extra.recording``).
   Frames are centre-cropped and area-resized to the model's resolution; actions are the
   measured (paired) joint position change per frame.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from edge.calibrate.camera import fit_frame
from edge.calibrate.errors import RecordingError
from edge.calibrate.plan import JointProgram
from edge.calibrate.record import RawRecording
from edge.episode import CalibrationSegment, Episode, EpisodeMetadata, actions_from_positions
from edge.joints import JointSample, Status, continuous_positions, names_are_positional
from edge.timebase import capture_stamps, pair_frames

__all__ = ["DEFAULT_TOLERANCE_S", "AssembleOptions", "assemble_episode", "check_channels",
           "fit_program_start", "pairing_tolerance", "start_unit_warning"]

#: A knot whose nearest frame is further than this share of a frame period is a gap.
GAP_FRACTION = 0.4


@dataclass(frozen=True)
class AssembleOptions:
    """Pairing and output options.

    Attributes:
        size_hw: the model's resolution (H, W), px.
        tolerance_s: pairing tolerance (a joint sample on each side within it), s; None:
            :func:`pairing_tolerance` of the joint stream's own sample interval.
        camera_latency_s, joint_latency_s: per-stream latency offsets, s.
        cell_id, camera_id, robot_id: the episode's ids.
    """

    size_hw: tuple[int, int]
    cell_id: str
    camera_id: str
    robot_id: str
    tolerance_s: float | None = 0.02
    camera_latency_s: float = 0.0
    joint_latency_s: float = 0.0


def _channels(program: JointProgram, names: list[str]) -> tuple[list[int], list[int], str]:
    """(program channel, stream channel) pairs: by position when the stream only numbers
    its channels (it reports no names), else by name.

    Raises:
        RecordingError: unnamed channels of another count, or named channels sharing no
            name with the program (a plan for another robot).
    """
    want = list(program.dof_names)
    if names_are_positional(names):
        if len(names) != len(want):
            raise RecordingError(f"joint stream: {len(names)} unnamed channels ({names[0]} ..."
                                 f" {names[-1]}), expected the program's {len(want)} DoFs "
                                 f"{want} in the controller's channel order")
        return list(range(len(names))), list(range(len(names))), "by position"
    if set(want) & set(names):
        pc = [i for i, n in enumerate(want) if n in names]
        return pc, [names.index(want[i]) for i in pc], "by name"
    raise RecordingError(f"joint stream channels {names} share no name with the program's "
                         f"DoFs {want} (a program for robot {program.robot!r}): plan for the "
                         f"robot on this stream")


def start_unit_warning(program: JointProgram, names: list[str], position: np.ndarray
                       ) -> str | None:
    """A warning when a joint stream's first readings look like degrees where ``program``
    plans rad: a revolute channel reading more than two turns, or about 57.3 times the
    program's home pose (where that is at least 0.05 rad from zero); None otherwise.

    Args:
        program: the joint program (its first row is the home pose, rad|m).
        names: the stream's channel names (``JointStream.joint_names``).
        position: float ``[J]``, the stream's first readings in its channel order.
    """
    try:
        pc, sc, _ = _channels(program, list(names))
    except RecordingError:
        return None  # check_channels refuses it before the sweep
    home = np.asarray(program.positions[0], np.float64)
    q = np.asarray(position, np.float64)
    deg = math.degrees(1.0)
    said = []
    for i, j in zip(pc, sc, strict=True):
        if program.dof_units[i] != "rad" or j >= len(q) or not np.isfinite(q[j]):
            continue
        if abs(q[j]) > 4 * math.pi or (abs(home[i]) >= 0.05
                                       and abs(q[j] / home[i] / deg - 1.0) < 0.05):
            said.append(f"{program.dof_names[i]} reads {q[j]:.4g} where the plan's home is "
                        f"{home[i]:+.3f} rad")
    if not said:
        return None
    return (f"the joint readings at the start look like degrees, not rad ({'; '.join(said)}): "
            "the program and the models take rad; stop now (Ctrl-C) and set the "
            "controller's position unit to rad (framed firmware sends rad: "
            "docs/bridge-frame-protocol.md), then record again "
            "('calibrate check' fails a sweep in degrees as sweep_overshoot)")



#: The pairing tolerance of a joint stream of 50 Hz or faster, s.
DEFAULT_TOLERANCE_S = 0.02


def pairing_tolerance(stamps_ns: np.ndarray) -> float:
    """The pairing tolerance for joint samples at ``stamps_ns`` (int64 ``(N,)``, ns,
    increasing): :data:`DEFAULT_TOLERANCE_S`, or 1.1 of the median sample interval where
    that is longer (a frame is paired only with a sample within the tolerance on each side,
    so a 30 Hz controller needs about 37 ms, a 20 Hz one 55 ms)."""
    d = np.diff(np.asarray(stamps_ns, np.int64))
    d = d[d > 0]
    period = float(np.median(d)) / 1e9 if d.size else 0.0
    return max(DEFAULT_TOLERANCE_S, round(1.1 * period, 4))


def check_channels(program: JointProgram, names: list[str]) -> str:
    """Check, before recording, that a joint stream's channels can serve ``program``
    (the pairing :func:`assemble_episode` will make): ``"by position"`` or ``"by name"``.

    Args:
        program: the sweep program; names: the stream's channel names
            (``JointStream.joint_names``).

    Raises:
        RecordingError: unnamed channels of another count than the program's DoFs, named
            channels sharing no name with them, or named channels that lack some of them
            (the episode would miss that DoF, which ``calibrate check`` refuses as
            ``dof_missing``: said before the sweep rather than after it).
    """
    how = _channels(program, list(names))[2]
    missing = [n for n in program.dof_names if n not in names]
    if how == "by name" and missing:
        need = ("the calibration needs every DoF the program sweeps ('calibrate check' would "
                "refuse the episode, dof_missing)" if program.kind == "calibration" else
                "the recording needs every DoF the program moves (its joint readings and "
                "actions are the model's input)")
        raise RecordingError(
            f"joint stream channels {list(names)} lack the program's DoF(s) {missing}: "
            f"{need}; check that the controller reports every joint, or plan for the DoFs "
            "this stream has ('calibrate plan --robot SPEC' with only them)")
    return how


def _joint_host_stamps(samples: list[JointSample]
                       ) -> tuple[np.ndarray, str, float | None, list[dict[str, float]], int]:
    """Joint sample stamps on the host clock: ``(stamps ns, how, drift ppm or None, the
    device clock's jumps as ``{"sample", "device_step_ms"}``, how many samples arrived
    after a later one: out of order, or sent twice without the stale flag)``. The stamps
    are in the samples' order, so they step back where a sample arrived late.

    ``edge.timebase.capture_stamps``: by round trip where every sample carries
    its request stamp (the servo buses, EtherCAT: the capture time itself), by the device
    clock where every sample carries an increasing device stamp: through the stream's
    pings (``"ping round trip"``: the link's delay, bursts included, is measured) or,
    without an answered ping, through the stamps' lower envelope (``"device clock"``,
    ``"device clock (no pong)"``: a bursty serial link's delivery delay is not absorbed as
    a bias, as a least-squares clock fit would, but the link's minimum delay is); a
    constant delay inside the device before it stamps is still ``joint_latency_s``; else
    receipt stamps. A device clock that jumps (a reset, a step) is placed stretch by
    stretch between its jumps (``edge.timebase.ClockJump``).
    """
    if len(samples) >= 10:
        est = capture_stamps(samples)
        jumps = [{"sample": j.sample, "device_step_ms": round(j.device_step_ns / 1e6, 3)}
                 for j in est.jumps]
        if est.method in ("ping round trip", "device clock", "device clock (no pong)"):
            return (est.stamps_ns, est.method, est.detail.get("drift ppm"), jumps,
                    len(est.out_of_sequence))
        if est.method == "round trip":
            return est.stamps_ns, "round trip", None, [], 0
    return np.array([s.receipt_ns for s in samples], np.int64), "receipt", None, [], 0


def fit_program_start(ts_s: np.ndarray, dq: np.ndarray, knots_s: np.ndarray,
                      dplan: np.ndarray, guess_s: float, span_s: float = 0.6) -> tuple[float, float]:
    """Fit the program's start time to joint samples.

    Args:
        ts_s: float64 ``[N]`` sample times, s; dq: float64 ``[N, m]`` change from the first
            sample; knots_s: float64 ``[K]`` knot times from the program start, s;
            dplan: float64 ``[K, m]`` knot change from the first knot; guess_s: start guess, s.
        span_s: search half-width around the guess, s.

    Returns:
        (start time, s; RMS residual, rad|m).
    """
    def cost(t0s: np.ndarray) -> np.ndarray:
        out = np.empty(len(t0s))
        for i, t0 in enumerate(t0s):
            pred = np.stack([np.interp(ts_s - t0, knots_s, dplan[:, c])
                             for c in range(dplan.shape[1])], 1)
            out[i] = np.mean((pred - dq) ** 2)
        return out

    grid = guess_s + np.arange(-span_s, span_s + 1e-9, 0.005)
    best = grid[int(np.argmin(cost(grid)))]
    fine = best + np.arange(-0.005, 0.005 + 1e-9, 0.0002)
    c = cost(fine)
    return float(fine[int(np.argmin(c))]), float(np.sqrt(c.min()))


def assemble_episode(raw: RawRecording, program: JointProgram, opts: AssembleOptions
                     ) -> tuple[Episode, bool]:
    """Pair, align and resample a raw recording into an episode.

    Returns:
        ``(episode, complete)``; ``complete`` is False when the recording ended before the
        program's last knot (the episode then holds the knots that were recorded).
    Raises:
        RecordingError: no frames, too few joint samples, or no program DoF in the stream.
    """
    if not raw.frames:
        raise RecordingError("recording: expected at least one camera frame, found none")
    samples = [s for s in raw.samples if not s.status & Status.STALE]
    if len(samples) < 2:
        raise RecordingError(f"recording: expected joint samples, found {len(samples)}")
    pc, sc, matched = _channels(program, raw.joint_names)
    fs = np.array(raw.frame_stamps_ns, np.int64)
    order_ok = np.concatenate([[True], np.diff(fs) > 0])
    non_monotonic = int((~order_ok).sum())
    keep = np.flatnonzero(order_ok)
    js, clock, drift, clock_jumps, late = _joint_host_stamps(samples)
    # a round-trip stamp is already the capture time: no latency is subtracted again
    joint_latency_s = 0.0 if clock == "round trip" else opts.joint_latency_s
    q = np.stack([s.position_rad for s in samples])[:, sc]  # (N, m)
    order = np.argsort(js, kind="stable")  # a sample that arrived late goes to its capture
    js, q = js[order], q[order]
    inc = np.concatenate([[True], np.diff(js) > 0])
    js, q = js[inc], q[inc]
    # a joint reported within one turn reads on through the controller's wrap
    q, turns = continuous_positions(q, [program.dof_units[i] for i in pc])
    tol = opts.tolerance_s if opts.tolerance_s is not None else pairing_tolerance(js)
    pairing = pair_frames(fs[keep], js, q, tolerance_s=tol,
                          frame_latency_s=opts.camera_latency_s,
                          joint_latency_s=joint_latency_s)
    base = int(js[0])
    fcorr = (pairing.frame_stamps_ns - base) / 1e9  # corrected frame times, s
    tj = (js - base - int(round(joint_latency_s * 1e9))) / 1e9
    fps = program.frame_rate_hz
    plan = program.positions[:, pc]
    moved = np.abs(q - q[0]).max(1) > 0.01
    aligned = bool(moved.any())
    if aligned:
        guess = tj[int(np.argmax(moved))] - program.lead_in_frames / fps
        t0, resid = fit_program_start(tj, q - q[0], program.times_s, plan - plan[0], guess)
    else:
        t0, resid = float(fcorr[0]) - program.lead_in_frames / fps, float("nan")
    n_ep = program.episode_frames
    ticks = t0 + (program.lead_in_frames + np.arange(n_ep)) / fps
    paired_idx = np.flatnonzero(pairing.paired)
    if not len(paired_idx):
        gap = np.diff(js)
        every = f"{float(np.median(gap)) / 1e6:.1f} ms" if gap.size else "never"
        raise RecordingError(f"recording: no frame paired with a joint sample within "
                             f"{tol:g} s on each side (the joint samples came every {every}, "
                             f"median; a tolerance below that pairs nothing: raise "
                             f"--tolerance-s, or check the latency offsets and clocks)")
    covered = ticks <= fcorr[paired_idx[-1]] + GAP_FRACTION / fps
    n_rec = int(covered.sum()) if not covered.all() else n_ep
    complete = n_rec == n_ep
    if n_rec < 1:
        raise RecordingError("recording: ended before the program's first knot")
    ticks = ticks[:n_rec]
    pos = np.searchsorted(fcorr[paired_idx], ticks)
    lo = paired_idx[np.clip(pos - 1, 0, len(paired_idx) - 1)]
    hi = paired_idx[np.clip(pos, 0, len(paired_idx) - 1)]
    pick = np.where(np.abs(fcorr[lo] - ticks) <= np.abs(fcorr[hi] - ticks), lo, hi)
    offset = fcorr[pick] - ticks
    gaps = np.flatnonzero((np.abs(offset) > GAP_FRACTION / fps)
                          | np.concatenate([[False], pick[1:] == pick[:-1]]))
    nearest = np.abs(tj[np.clip(np.searchsorted(tj, fcorr[pick]), 0, len(tj) - 1)]
                     - fcorr[pick])
    nearest = np.minimum(nearest, np.abs(tj[np.clip(np.searchsorted(tj, fcorr[pick]) - 1, 0,
                                                    len(tj) - 1)] - fcorr[pick]))
    frames = np.stack([fit_frame(raw.frames[keep[i]], opts.size_hw) for i in pick])
    qpos = pairing.positions[pick].astype(np.float64)
    names = tuple(program.dof_names[i] for i in pc)
    units = tuple(program.dof_units[i] for i in pc)
    segments = tuple(CalibrationSegment(s.dof, s.start, min(s.stop, n_rec), s.amplitude)
                     for s in program.sweeps if s.dof in names and s.start < n_rec)
    missing = [n for n in program.dof_names if n not in names]
    extra = {
        "program": {"kind": program.kind, "seed": program.seed, "robot": program.robot,
                    "dof_names": list(program.dof_names), "min_fraction": program.min_fraction,
                    "duration_s": round(program.duration_s, 4),
                    "sweeps": [{"dof": s.dof, "start": s.start, "stop": s.stop,
                                "amplitude": s.amplitude} for s in program.sweeps],
                    "lower": list(program.lower), "upper": list(program.upper)},
        "recording": {
            "complete": complete, "frames_expected": n_ep, "camera_frames": len(raw.frames),
            "joint_samples": len(raw.samples), "channels_matched": matched,
            "missing_dofs": missing, "joint_clock": clock,
            "joint_drift_ppm": None if drift is None else round(drift, 3),
            "joint_clock_jumps": clock_jumps, "joint_samples_out_of_sequence": late,
            "joint_turns_unwrapped": [{"dof": program.dof_names[pc[w["channel"]]],
                                       "sample": w["sample"], "turns": w["turns"]}
                                      for w in turns],
            "aligned": aligned, "fit_rms": None if not np.isfinite(resid) else round(resid, 6),
            "camera_stamps_non_monotonic": non_monotonic,
            "unpaired_camera_frames": int(len(pairing.unpaired)),
            "gaps": [int(g) for g in gaps],
            "tick_offset_s": [round(float(o), 5) for o in offset],
            "pair_error_s": [round(float(e), 5) for e in nearest],
            "tolerance_s": tol, "camera_latency_s": opts.camera_latency_s,
            "joint_latency_s": joint_latency_s, "wall_s": round(raw.wall_s, 3),
            "duration_s": round((fs[-1] - fs[0]) / 1e9, 4),
            "disconnected": raw.disconnected, "joint_error": raw.joint_error},
        "equipment": raw.equipment,
    }
    kind = "calibration" if program.kind == "calibration" else "validation"
    meta = EpisodeMetadata(
        cell_id=opts.cell_id, camera_id=opts.camera_id, robot_id=opts.robot_id,
        robot=program.robot, dof_names=names, dof_units=units, fps=fps, kind=kind,
        source=f"recorded:{raw.equipment.get('camera', {}).get('source', 'camera')}",
        camera=raw.equipment.get("camera", {}), segments=segments, extra=extra)
    ep = Episode(frames=frames, actions=actions_from_positions(qpos),
                 timestamps=(ticks - ticks[0]).astype(np.float64), metadata=meta,
                 joint_positions=qpos)
    return ep.validate(), complete
