"""Calibration ingest: a calibration episode recorded at any timing, in the model's timing.

The model reads its calibration as ``n`` DoF segments of 8 frames (SyncWorld, Yang et al.,
arXiv 2609.09155; the generator's profile, ``edge.calibrate.plan.SWEEP_PROFILE``): one DoF
goes out to its amplitude ``A`` through the poses ``0.25 A``, ``0.75 A``, ``A``, pauses,
comes back through ``0.75 A``, ``0.25 A`` to home and pauses, while the others hold. What
the context encodes is the sequence of *poses* and the pictures at those poses, not their
timing, so a sweep recorded slower, faster, at another camera rate, in another order or
sign, with pauses of any length (or none) carries the same information. Ingest recovers it:

1. Joint positions at the camera frames: the episode's ``joint_positions`` (or its
   accumulated actions); a separate joint stream is interpolated to the frame stamps
   (:func:`positions_at_frames`).
2. Segmentation from the positions alone (:func:`segment_sweeps`): a channel is *away*
   where it is further from its home (the first frame's position) than its threshold
   (``max(floor, 0.15 * its peak excursion)``); each maximal run of away frames is an
   excursion. A DoF's sweep is its largest excursion: out from the last frame at home
   before it (within 0.2% of the amplitude of its nearest approach to home) to its peak (the
   frame furthest from home), back from the peak to the first frame at home after it.
3. Frame picking: for each of the poses ``0.25 A, 0.75 A`` out and ``0.75 A, 0.25 A``
   back, the frame of that phase nearest the pose in position; the peak frame for ``A``
   and, for the pause, the last frame still within 0.2% of the peak (the peak frame again
   where the sweep did not pause); the first home frame after the sweep and the last home
   frame before the next one for the two home poses. Frames are
   centre-cropped and area-resized to the model's resolution
   (``edge.calibrate.camera.fit_frame``, as the recorder does). Actions are the measured
   position change between the picked frames, so the amplitude the model reads is the one
   the robot made.
4. Refusals (:class:`IngestError` with a ``code``), each naming the DoF and the frames:

   ==================  =======================================================
   ``never_swept``     a DoF never left home (its peak below the floor)
   ``simultaneous``    two DoFs away from home in the same frames
   ``no_return``       a DoF went out and was still away at the last frame
   ``unseen``          no frame within ``pose_tolerance`` of a pose (the sweep was
                       faster than the camera, or frames were dropped there)
   ``amplitude``       a sweep magnitude outside the model's range
                       (``contract.calibration_amplitude_rad``)
   ``too_few_frames``  fewer than 2 frames, or stamps that are not increasing
   ==================  =======================================================

   A recording that ended early (``extra.recording.complete`` false) is refused as
   ``partial_recording`` before any of these: it is not normalised, it is recorded again.

An episode already in the model's timing (``8 n + 1`` frames at the model's resolution)
passes through unchanged (:func:`ingest_calibration` reports ``"normalised": false``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from edge.calibrate.plan import SEGMENT_FRAMES
from edge.episode import CalibrationSegment, Episode, actions_from_positions
from edge.runtime.calibration_input import CalibrationInputError

__all__ = ["IngestError", "IngestOptions", "Sweep", "at_sweep_poses", "ingest_calibration",
           "is_model_timing", "normalise_calibration", "positions_at_frames",
           "segment_sweeps"]

#: Fractions of the amplitude at the 9 poses of one segment (frame 8k .. 8k+8).
SEGMENT_POSES = (0.0, 0.25, 0.75, 1.0, 1.0, 0.75, 0.25, 0.0, 0.0)
#: A frame within this share of the amplitude from the peak is still at the peak (pause).
HOLD_FRACTION = 0.002
#: A frame within this share of the amplitude of the channel's nearest approach to home is
#: at home (the start and end of a sweep).
HOME_FRACTION = 0.002


class IngestError(CalibrationInputError):
    """A calibration episode that cannot be brought into the model's timing.

    Attributes:
        code: the reason code (module docstring table).
        dof: the DoF concerned, or None.
        frames: the recorded frame indices concerned (first, last), or None.
        dofs: every DoF concerned where there are several (``never_swept``), else empty.
    """

    def __init__(self, code: str, message: str, dof: str | None = None,
                 frames: tuple[int, int] | None = None, dofs: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.dof = dof
        self.frames = frames
        self.dofs = dofs


@dataclass(frozen=True)
class IngestOptions:
    """Thresholds of the segmentation.

    Attributes:
        amplitude_rad: the (low, high) sweep magnitude the model accepts, rad|m, or None
            (no range check). 1% slack either side (resampling and float32 rounding).
        away_floor: smallest excursion from home that counts as moving, rad|m (None:
            ``0.25 * low`` of ``amplitude_rad``, else 0.02 rad for a channel in rad and
            0.002 m for one in m: a gripper's fingers travel a few cm).
        away_fraction: a channel is away where ``|q - home| > away_fraction * peak``
            (and above ``away_floor``).
        hold_noise: a channel not being swept may wander this far from home without
            counting as moving, as a share of the swept DoF's amplitude.
        pose_tolerance: largest allowed distance of a picked frame from its pose, as a
            share of the amplitude.
    """

    amplitude_rad: tuple[float, float] | None = None
    away_floor: float | None = None
    away_fraction: float = 0.15
    hold_noise: float = 0.15
    pose_tolerance: float = 0.2

    def floor(self, unit: str = "rad") -> float:
        """The away floor of a channel in ``unit`` (``"rad"`` or ``"m"``), rad|m."""
        if self.away_floor is not None:
            return float(self.away_floor)
        if self.amplitude_rad is not None:
            return 0.25 * float(self.amplitude_rad[0])
        return 0.002 if unit == "m" else 0.02


@dataclass(frozen=True)
class Sweep:
    """One DoF's sweep found in a recording (indices into the recorded frames).

    Attributes:
        dof: channel name; channel: its index.
        start: last frame at home before the sweep; stop: first frame at home after it.
        peak: the frame furthest from home; amplitude: signed excursion there, rad|m.
        picks: the 9 recorded frame indices of the segment's poses (:data:`SEGMENT_POSES`);
            the last is the end of the stretch at home after the sweep (normalisation uses
            the next sweep's start instead, where there is one).
        pose_error: for each pick, ``|q - pose * A| / |A|`` (0 = exactly at the pose).
        ignored: other excursions of the same channel, ``(first, last)`` frames.
    """

    dof: str
    channel: int
    start: int
    stop: int
    peak: int
    amplitude: float
    picks: tuple[int, ...]
    pose_error: tuple[float, ...]
    ignored: tuple[tuple[int, int], ...] = ()


def positions_at_frames(frame_times_s: np.ndarray, joint_times_s: np.ndarray,
                        joint_positions: np.ndarray) -> np.ndarray:
    """Joint positions at the camera frames' stamps, by linear interpolation in time.

    Args:
        frame_times_s: float64 ``[T]`` frame stamps, s.
        joint_times_s: float64 ``[N]`` joint sample stamps (same clock), s, increasing.
        joint_positions: float64 ``[N, n]`` joint positions, rad|m.

    Returns:
        float64 ``[T, n]``; frames outside the joint samples' span take the nearest sample.
    Raises:
        IngestError (``too_few_frames``): fewer than 2 joint samples or stamps that do not
            increase.
    """
    jt = np.asarray(joint_times_s, np.float64)
    q = np.asarray(joint_positions, np.float64)
    if jt.ndim != 1 or q.ndim != 2 or len(jt) != len(q) or len(jt) < 2:
        raise IngestError("too_few_frames", f"joint stream: expected [N] stamps and [N, n] "
                          f"positions with N >= 2, found {jt.shape} and {q.shape}")
    if (np.diff(jt) <= 0).any():
        i = int(np.argmax(np.diff(jt) <= 0))
        raise IngestError("too_few_frames", f"joint stream: stamps must increase; sample "
                          f"{i + 1} ({jt[i + 1]:.6f} s) is not after sample {i} ({jt[i]:.6f} s)")
    ft = np.asarray(frame_times_s, np.float64)
    return np.stack([np.interp(ft, jt, q[:, c]) for c in range(q.shape[1])], 1)


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Maximal runs of True in a bool ``[T]`` array, as (first, last) inclusive."""
    d = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(d == 1).tolist(), (np.flatnonzero(d == -1) - 1).tolist(),
                    strict=True))


def _nearest(frac: np.ndarray, lo: int, hi: int, pose: float) -> tuple[int, float]:
    """Index in ``[lo, hi]`` whose ``frac`` is nearest ``pose``, and that distance."""
    seg = frac[lo:hi + 1]
    i = int(np.argmin(np.abs(seg - pose)))
    return lo + i, float(abs(seg[i] - pose))


def segment_sweeps(positions: np.ndarray, dof_names: tuple[str, ...] | list[str],
                   opts: IngestOptions | None = None,
                   dof_units: tuple[str, ...] | list[str] | None = None) -> list[Sweep]:
    """Find each DoF's sweep in joint positions sampled at the camera frames.

    Args:
        positions: float64 ``[T, n]`` joint positions at the frames, rad|m; the first frame
            is the home pose.
        dof_names: the n channel names (for messages and the result).
        opts: thresholds (:class:`IngestOptions`).
        dof_units: ``"rad"`` or ``"m"`` per channel (the away floor's unit); None: rad.

    Returns:
        the sweeps in the order they were made (by start frame).
    Raises:
        IngestError: ``too_few_frames``, ``never_swept``, ``simultaneous``, ``no_return``,
            ``unseen`` or ``amplitude`` (module docstring), naming the DoF and frames.
    """
    opts = opts or IngestOptions()
    q = np.asarray(positions, np.float64)
    names = list(dof_names)
    if q.ndim != 2 or q.shape[0] < 2 or q.shape[1] != len(names):
        raise IngestError("too_few_frames", f"expected positions [T >= 2, {len(names)}], "
                          f"found {q.shape}")
    units = list(dof_units) if dof_units is not None else ["rad"] * len(names)
    if len(units) != len(names):
        raise ValueError(f"segment_sweeps: {len(units)} dof_units for {len(names)} channels")
    d = q - q[0]  # (T, n) excursion from home
    peak = np.abs(d).max(0)  # (n,)
    floor = np.array([opts.floor(u) for u in units])  # (n,)
    never = [c for c in range(len(names)) if peak[c] <= floor[c]]
    if never:
        floors = sorted({f"{floor[c]:g} {units[c]}" for c in never})
        if len(never) == len(names):  # nothing moved at all: one line, not one per DoF
            largest = max(float(peak[c]) for c in never)
            raise IngestError(
                "never_swept", f"no DoF left home by more than {' / '.join(floors)} (largest "
                f"excursion of any {largest:.4f}): the episode holds no sweep; record it "
                f"again with the joints moving (is the controller executing the plan?)",
                dof=names[never[0]])
        raise IngestError(
            "never_swept", f"DoF {', '.join(repr(names[c]) for c in never)} never left home "
            f"by more than {' / '.join(floors)} (largest excursion "
            f"{', '.join(f'{peak[c]:.4f}' for c in never)}): every DoF needs a sweep of its "
            f"own; record the episode again sweeping it", dof=names[never[0]],
            dofs=tuple(names[c] for c in never))
    thr = np.maximum(floor, opts.away_fraction * peak)  # (n,)
    away = np.abs(d) > thr  # (T, n)
    sweeps: list[Sweep] = []
    for c, name in enumerate(names):
        runs = _runs(away[:, c])
        best = max(runs, key=lambda r: float(np.abs(d[r[0]:r[1] + 1, c]).max()))
        first, last = best
        if last == len(q) - 1:
            raise IngestError(
                "no_return", f"DoF {name!r} went out at frame {first} and was still "
                f"{abs(d[-1, c]):.4f} from home at the last frame {last}: a sweep must come "
                f"back to where it started; record it again", dof=name, frames=(first, last))
        # home ends where the channel last sits at its nearest to home before the run and
        # starts where it first does after it (a drive easing in and out creeps below the
        # away threshold for a few frames)
        a = np.abs(d[:, c])
        before, after = a[:first], a[last + 1:]
        eps = HOME_FRACTION * float(a[first:last + 1].max())
        start = int(np.flatnonzero(before <= before.min() + eps)[-1])
        stop = last + 1 + int(np.flatnonzero(after <= after.min() + eps)[0])
        p = first + int(np.argmax(np.abs(d[first:last + 1, c])))
        amp = float(d[p, c])
        frac = d[:, c] / amp  # (T,) 1 at the peak
        picks = [start]
        errs = [abs(float(frac[start]))]
        for pose in (0.25, 0.75):  # from the frames between home and the peak
            i, e = _nearest(frac, start, max(start, p - 1), pose)
            picks.append(i)
            errs.append(e)
        # the pause: the last frame still at the peak (a real frame, so the check sees
        # the camera's noise), the peak frame again where the sweep did not pause
        held = np.flatnonzero(frac[p:stop] >= 1.0 - HOLD_FRACTION)
        hold = p + int(held[-1])
        picks += [p, hold]
        errs += [0.0, abs(1.0 - float(frac[hold]))]
        for pose in (0.75, 0.25):  # from the frames between the pause and home
            i, e = _nearest(frac, min(hold + 1, stop), stop - 1 if stop - 1 > hold else stop,
                            pose)
            picks.append(i)
            errs.append(e)
        # the home pause: the end of the stretch at home after the sweep (the caller
        # replaces it with the next sweep's start)
        home = np.flatnonzero(after > after.min() + eps)
        rest = last + 1 + (int(home[0]) - 1 if len(home) else len(after) - 1)
        picks += [stop, max(stop, rest)]
        errs += [abs(float(frac[stop])), abs(float(frac[max(stop, rest)]))]
        ignored = tuple(r for r in runs if r != best)
        sweeps.append(Sweep(name, c, start, stop, p, amp, tuple(picks), tuple(errs), ignored))
    sweeps.sort(key=lambda s: s.start)
    _check_overlap(d, sweeps, names, opts, floor, units)
    for s in sweeps:
        bad = [k for k, e in enumerate(s.pose_error) if e > opts.pose_tolerance]
        if bad:
            k = bad[0]
            raise IngestError(
                "unseen", f"DoF {s.dof!r}: no frame near {SEGMENT_POSES[k]:g} of its "
                f"{s.amplitude:+.3f} sweep (frames {s.start}-{s.stop}; the nearest, frame "
                f"{s.picks[k]}, is {s.pose_error[k]:.2f} of the amplitude away, tolerance "
                f"{opts.pose_tolerance:g}): the sweep was faster than the camera or frames were "
                f"dropped there; sweep slower (syncedge calibrate plan --sweep-seconds)",
                dof=s.dof, frames=(s.start, s.stop))
    if opts.amplitude_rad is not None:
        lo, hi = opts.amplitude_rad
        bad_amp = [s for s in sweeps if not lo * 0.99 <= abs(s.amplitude) <= hi * 1.01]
        if bad_amp:
            s = bad_amp[0]
            from edge.runtime.calibration_input import degrees_hint

            hint = degrees_hint({b.dof: abs(b.amplitude) for b in bad_amp}, lo, hi) \
                if all(units[b.channel] == "rad" for b in bad_amp) else ""
            raise IngestError(
                "amplitude", "DoF " + ", ".join(
                    f"{b.dof!r} swept {abs(b.amplitude):.3f} (frames {b.start}-{b.stop})"
                    for b in bad_amp) + f"; this model accepts sweeps of {lo:g}-{hi:g} rad|m "
                f"(model.json contract.calibration_amplitude_rad)"
                + (hint or ": record the sweep again with amplitudes in that range"),
                dof=s.dof, frames=(s.start, s.stop))
    return sweeps


def _check_overlap(d: np.ndarray, sweeps: list[Sweep], names: list[str],
                   opts: IngestOptions, floor: np.ndarray, units: list[str]) -> None:
    """Refuse two channels away from home in the same frames (``simultaneous``);
    ``floor`` ``[n]``: each channel's away floor, in its unit ``units[c]``."""
    for s in sweeps:
        others = [c for c in range(d.shape[1]) if c != s.channel]
        if not others:
            continue
        span = np.abs(d[s.start + 1:s.stop, others])  # (frames, n-1)
        # a held channel may wander by its own floor, or by a share of the sweep in the
        # same unit (a turn's rad say nothing about a slide's m)
        same = np.array([opts.hold_noise * abs(s.amplitude) if units[c] == units[s.channel]
                         else 0.0 for c in others])
        lim = np.maximum(floor[others], same)
        hit = np.argwhere(span > lim)
        if len(hit):
            f, k = hit[0]
            other = names[others[int(k)]]
            rows = np.flatnonzero(span[:, k] > lim[k]) + s.start + 1
            raise IngestError(
                "simultaneous", f"DoFs {s.dof!r} and {other!r} moved at the same time (frames "
                f"{int(rows[0])}-{int(rows[-1])}: {other!r} was {float(span[f, k]):.4f} from home "
                f"while {s.dof!r} swept): sweep one DoF at a time, the others holding",
                dof=other, frames=(int(rows[0]), int(rows[-1])))


def is_model_timing(ep: Episode, segment_frames: int,
                    resolution: tuple[int, int] | None) -> bool:
    """True when ``ep`` already has ``n * segment_frames + 1`` frames (at ``resolution``,
    unless None)."""
    return (ep.num_frames == ep.num_dof * segment_frames + 1
            and (resolution is None or tuple(ep.resolution) == tuple(resolution)))


#: Per-frame lists of ``extra["recording"]`` (indexed by recorded frame), remapped to the
#: output frames by normalisation; its knot gaps are cleared (the frames are picked by
#: pose, and a pose no frame shows is refused as ``unseen``).
_PER_FRAME = ("tick_offset_s", "pair_error_s")


def _remap_recording(rec: dict[str, Any], picks: list[int]) -> dict[str, Any]:
    """``extra["recording"]`` with its per-frame figures at the picked frames."""
    out = dict(rec)
    for k in _PER_FRAME:
        v = rec.get(k)
        if isinstance(v, list) and len(v) > max(picks):
            out[k] = [v[i] for i in picks]
    if isinstance(rec.get("gaps"), list):
        # a knot without a frame near its time does not matter once frames are picked by
        # their measured pose (a missing pose is ingest's 'unseen'): kept as a count
        out["gaps_before_ingest"] = len(rec["gaps"])
        out["gaps"] = []
    return out


def normalise_calibration(ep: Episode, resolution: tuple[int, int] | None = None,
                          opts: IngestOptions | None = None, fps: float = 10.0,
                          joint_times_s: np.ndarray | None = None,
                          joint_positions: np.ndarray | None = None,
                          ) -> tuple[Episode, dict[str, Any]]:
    """Bring a calibration episode of any timing into the model's (module docstring).

    Args:
        ep: the recorded calibration episode (T frames at any size, stamps in s).
        resolution: the model's (H, W), px; None keeps the recorded size.
        opts: segmentation thresholds.
        fps: the model's frame rate, Hz (the output's nominal stamps ``k / fps``).
        joint_times_s, joint_positions: a joint stream sampled apart from the frames
            (float64 ``[N]`` s on the frames' clock, ``[N, n]`` rad|m); None: the
            episode's ``joint_positions``, else its accumulated actions.

    Returns:
        ``(episode, report)``: the episode of ``8 n + 1`` frames uint8 ``[8n+1, H, W, 3]``
        with its segments (the planned amplitude where the episode names one, else the
        measured) and ``metadata.extra["ingest"]`` = ``report`` (the recorded frame each
        output frame came from, each sweep's span, amplitude, durations, pose errors,
        ignored excursions); per-frame recording figures are remapped to the output.
    Raises:
        IngestError: as :func:`segment_sweeps`, or a non-calibration episode.
    """
    from edge.calibrate.camera import fit_frame

    if ep.metadata.kind != "calibration":
        raise IngestError("not_calibration", f"a {ep.metadata.kind!r} episode; expected a "
                          f"calibration episode (kind 'calibration')")
    rec = (ep.metadata.extra or {}).get("recording") or {}
    if rec and not rec.get("complete", True):
        raise IngestError("partial_recording", "a partial recording (the recording ended "
                          f"early: {rec.get('disconnected') or rec.get('joint_error') or 'unknown'}"
                          "), not normalised: record the calibration again")
    if joint_positions is not None:
        if joint_times_s is None:
            raise IngestError("too_few_frames", "joint_positions given without joint_times_s")
        q = positions_at_frames(ep.timestamps, joint_times_s, joint_positions)
        q_source = "joint stream interpolated to the frame stamps"
    elif ep.joint_positions is not None:
        q = np.asarray(ep.joint_positions, np.float64)
        q_source = "joint_positions"
    else:
        q = np.vstack([np.zeros((1, ep.num_dof)),
                       np.cumsum(ep.actions[:-1].astype(np.float64), 0)])
        q_source = "accumulated actions"
    names = tuple(ep.metadata.dof_names)
    sweeps = segment_sweeps(q, names, opts, tuple(ep.metadata.dof_units))
    picks: list[int] = [sweeps[0].start]
    for k, s in enumerate(sweeps):
        nxt = sweeps[k + 1].start if k + 1 < len(sweeps) else s.picks[8]
        picks += list(s.picks[1:8]) + [max(nxt, s.stop)]
    size = (int(resolution[0]), int(resolution[1])) if resolution is not None \
        else ep.resolution
    frames = np.stack([fit_frame(ep.frames[i], size) for i in picks])  # (8n+1, H, W, 3)
    qp = q[picks]  # (8n+1, n)
    planned = {g.dof: g.amplitude for g in ep.metadata.segments}
    segments = tuple(
        CalibrationSegment(s.dof, SEGMENT_FRAMES * k, SEGMENT_FRAMES * (k + 1),
                           planned.get(s.dof, round(float(qp[SEGMENT_FRAMES * k + 3, s.channel]
                                                          - qp[SEGMENT_FRAMES * k, s.channel]),
                                                    6)))
        for k, s in enumerate(sweeps))
    ts = np.asarray(ep.timestamps, np.float64)
    report: dict[str, Any] = {
        "normalised": True, "positions_from": q_source,
        "recorded_frames": int(ep.num_frames),
        "recorded_resolution": list(ep.resolution), "resolution": list(size),
        "recorded_frame_rate_hz": (round(float((len(ts) - 1) / (ts[-1] - ts[0])), 3)
                                   if len(ts) > 1 and ts[-1] > ts[0] else None),
        "source_frames": [int(i) for i in picks],
        "source_times_s": [round(float(ts[i] - ts[0]), 4) for i in picks],
        "sweeps": [{"dof": s.dof, "order": k, "frames": [s.start, s.stop], "peak": s.peak,
                    "amplitude": round(s.amplitude, 6),
                    "out_s": round(float(ts[s.peak] - ts[s.start]), 4),
                    "back_s": round(float(ts[s.stop] - ts[s.picks[4]]), 4),
                    "pause_s": round(float(ts[s.picks[4]] - ts[s.peak]), 4),
                    "pose_error": [round(e, 4) for e in s.pose_error[:8]],
                    "ignored_excursions": [list(r) for r in s.ignored]}
                   for k, s in enumerate(sweeps)],
    }
    extra = dict(ep.metadata.extra)
    if isinstance(extra.get("recording"), dict):
        extra["recording"] = _remap_recording(extra["recording"], picks)
    extra["ingest"] = report
    meta = replace(ep.metadata, segments=segments, extra=extra, fps=float(fps))
    out = Episode(frames=np.ascontiguousarray(frames, np.uint8),
                  actions=actions_from_positions(qp),
                  timestamps=np.arange(len(picks), dtype=np.float64) / float(fps),
                  metadata=meta, joint_positions=qp)
    return out.validate(), report


def _resized(ep: Episode, size: tuple[int, int]) -> tuple[Episode, dict[str, Any]]:
    """An episode in the model's timing at another frame size, centre-cropped and
    area-resized to ``size`` (H, W) as the recorder does."""
    from edge.calibrate.camera import fit_frame

    frames = np.stack([fit_frame(f, size) for f in ep.frames])
    report = {"normalised": True, "recorded_frames": int(ep.num_frames),
              "recorded_resolution": list(ep.resolution), "resolution": list(size),
              "source_frames": list(range(ep.num_frames)),
              "source_times_s": [round(float(t - ep.timestamps[0]), 4) for t in ep.timestamps],
              "reason": "in the model's timing; frames centre-cropped and area-resized"}
    extra = dict(ep.metadata.extra)
    extra["ingest"] = report
    # pixel coordinates and masks belong to the recorded size: dropped, not rescaled
    return replace(ep, frames=np.ascontiguousarray(frames, np.uint8), ee_px=None,
                   robot_mask=None, metadata=replace(ep.metadata, extra=extra)).validate(), \
        report


def ingest_calibration(ep: Episode, resolution: tuple[int, int] | None, segment_frames: int,
                       opts: IngestOptions | None = None, fps: float = 10.0
                       ) -> tuple[Episode, dict[str, Any]]:
    """The episode in the model's timing: unchanged if it already is, else normalised.

    Args:
        ep: a calibration episode; resolution: the model's (H, W) (None: any size);
        segment_frames: L (8); opts: thresholds; fps: the model's frame rate, Hz.

    Returns:
        ``(episode, report)``; ``report["normalised"]`` says whether anything was done
        (never for a model whose segments are not of 8 frames).
    Raises:
        IngestError: as :func:`normalise_calibration`.
    """
    if segment_frames != SEGMENT_FRAMES:
        # a model with another segment length takes its own timing only (the input check
        # refuses anything else)
        return ep, {"normalised": False, "recorded_frames": int(ep.num_frames),
                    "reason": f"the model's segments are of {segment_frames} frames: taken "
                              f"as recorded"}
    if is_model_timing(ep, segment_frames, resolution):
        return ep, {"normalised": False, "recorded_frames": int(ep.num_frames),
                    "reason": f"already {ep.num_dof} segments of {segment_frames} frames"
                              + (f" at {resolution[0]}x{resolution[1]}" if resolution else "")}
    if resolution is not None and is_model_timing(ep, segment_frames, None):
        return _resized(ep, (int(resolution[0]), int(resolution[1])))
    return normalise_calibration(ep, resolution, opts, fps)


def at_sweep_poses(ep: Episode) -> tuple[Episode, dict[str, Any]]:
    """The episode at the planner's 8 poses per channel, at its recorded resolution and
    frame rate: what the chain model is read from (``export.models.chain_fit.sweep_timing``)
    and what a stored chain calibration is checked against. An episode already in that
    timing is returned as it is; one in that timing whose metadata does not name every
    channel's segment (a user's own recorder) gains the segments found in its joint
    readings, on the same frames (the chain reads each channel's sweep by its segment; a
    49-frame recording without them was refused by ``store --chain`` after ``check``
    passed it).

    Raises:
        IngestError: as :func:`normalise_calibration`.
    """
    named = {g.dof for g in ep.metadata.segments} >= set(ep.metadata.dof_names)
    if not named and is_model_timing(ep, SEGMENT_FRAMES, None):
        return normalise_calibration(ep, None, fps=float(ep.metadata.fps))
    return ingest_calibration(ep, None, SEGMENT_FRAMES, fps=float(ep.metadata.fps))

