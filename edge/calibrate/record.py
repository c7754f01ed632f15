"""Recording a joint program on a cell: camera frames and joint samples, both stamped.

The camera is read on the calling thread and the joint stream on a second one; each frame
and sample keeps its own stamp (monotonic ns; the virtual cell's simulated host clock), so
nothing is paired by arrival order. The recording starts at once and waits for the robot to
move (the technician starts the program on the controller); it ends one program length
after the motion began, plus a tail. A controller that can run the program itself (the
virtual cell's ``execute_program``) is started by the recorder.

:func:`record` returns a :class:`RawRecording`; :mod:`edge.calibrate.assemble` turns it
into an episode. A camera that disconnects ends the recording early with
``disconnected`` set, so the caller can keep the partial recording.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edge.calibrate.camera import FrameSource
from edge.calibrate.errors import CameraDisconnectedError, RecordingError
from edge.calibrate.plan import SEGMENT_FRAMES, JointProgram
from edge.errors import EdgeError
from edge.joints import JointSample, JointSource

__all__ = ["INTERRUPTED", "RawRecording", "RecordOptions", "RecordingInterrupted", "record"]


@dataclass(frozen=True)
class RecordOptions:
    """How to record.

    Attributes:
        start_timeout_s: how long to wait for the robot to start moving, s.
        tail_s: extra recording after the program's expected end, s.
        motion_threshold: change from the first sample that counts as motion, rad|m.
        drain_timeout_s: how long to wait, after the last frame, for joint samples that
            cover it, s (wall clock).
        progress: called with one line per event (DoF started, DoF done); None: silent.
        first_readings: called once with the joint stream's first readings (float
            ``[J]``, the stream's channel order), while there is still time to stop (``calibrate
            record`` says there when they look like degrees:
            :func:`edge.calibrate.assemble.start_unit_warning`); None: not called.
    """

    start_timeout_s: float = 30.0
    tail_s: float = 0.5
    motion_threshold: float = 0.01
    drain_timeout_s: float = 1.0
    progress: Callable[[str], None] | None = None
    first_readings: Callable[[np.ndarray], None] | None = None


#: Why a recording stopped when Ctrl-C stopped it (``RawRecording.disconnected``, which
#: ``calibrate check`` names in ``partial_recording``).
INTERRUPTED = "interrupted (Ctrl-C)"


class RecordingInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`record`; ``recording`` holds the :class:`RawRecording` so far
    (a caller keeps it as a partial recording before the interrupt goes on)."""

    recording: Any = None


@dataclass
class RawRecording:
    """Everything recorded, before pairing.

    Attributes:
        frames: native-resolution RGB frames uint8 ``[H, W, 3]``.
        frame_stamps_ns: receipt stamps of the frames, ns.
        samples: the joint samples (:class:`edge.joints.JointSample`).
        joint_names: the stream's channel names.
        onset_ns: receipt stamp of the first sample that moved, or None.
        disconnected: why the camera stopped early, or None.
        joint_error: why the joint stream stopped early, or None.
        wall_s: wall-clock duration of the recording, s.
        equipment: camera and joint stream descriptions (JSON-ready).
    """

    frames: list[np.ndarray] = field(default_factory=list)
    frame_stamps_ns: list[int] = field(default_factory=list)
    samples: list[JointSample] = field(default_factory=list)
    joint_names: list[str] = field(default_factory=list)
    onset_ns: int | None = None
    disconnected: str | None = None
    joint_error: str | None = None
    wall_s: float = 0.0
    equipment: dict[str, Any] = field(default_factory=dict)


class _JointReader(threading.Thread):
    """Reads the joint stream into a list until told to stop."""

    def __init__(self, stream: JointSource):
        super().__init__(name="joint-reader", daemon=True)
        self.stream = stream
        self.samples: list[JointSample] = []
        self.error: str | None = None
        self.stop_event = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                s = self.stream.read()
            except EdgeError as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                return
            with self.lock:
                self.samples.append(s)

    def snapshot(self) -> list[JointSample]:
        with self.lock:
            return list(self.samples)


def _onset(samples: list[JointSample], threshold: float) -> int | None:
    if len(samples) < 2:
        return None
    q = np.stack([s.position_rad for s in samples])
    moved = np.abs(q - q[0]).max(axis=1) > threshold
    return int(samples[int(np.argmax(moved))].receipt_ns) if moved.any() else None


def _say(opts: RecordOptions, text: str) -> None:
    if opts.progress is not None:
        opts.progress(text)


def record(camera: FrameSource, stream: JointSource, program: JointProgram,
           opts: RecordOptions | None = None) -> RawRecording:
    """Record ``program`` from ``camera`` and an opened joint ``stream``.

    Args:
        camera: a :class:`~edge.calibrate.camera.FrameSource`.
        stream: an opened joint stream (:func:`edge.calibrate.sources.open_joints`).
        program: the joint program being executed.
        opts: :class:`RecordOptions`.

    Returns:
        :class:`RawRecording` (``disconnected`` set when the camera stopped early).
    Raises:
        RecordingError: the robot never moved within ``start_timeout_s`` (the frames so far
            are in the error's ``recording`` attribute).
    """
    opts = opts or RecordOptions()
    raw = RawRecording(joint_names=list(stream.joint_names))
    raw.equipment = {"camera": camera.describe(),
                     "joints": {"url": getattr(stream, "url", ""), "joints": raw.joint_names}}
    t_wall = time.perf_counter()
    execute = getattr(stream, "execute_program", None)
    if callable(execute):
        execute(program)
    reader = _JointReader(stream)
    reader.start()
    fps = program.frame_rate_hz
    motion_s = (len(program.positions) - program.lead_in_frames) / fps
    end_ns: int | None = None
    announced = -1
    unit_checked = False
    failure: RecordingError | None = None
    interrupted = False
    try:
        try:
            while True:
                try:
                    frame, stamp = camera.read()
                except CameraDisconnectedError as exc:
                    raw.disconnected = str(exc)
                    _say(opts, f"camera disconnected after {len(raw.frames)} frames: {exc}")
                    break
                raw.frames.append(frame)
                raw.frame_stamps_ns.append(int(stamp))
                first = raw.frame_stamps_ns[0]
                if not unit_checked and opts.first_readings is not None:
                    snap = reader.snapshot()
                    if snap:
                        unit_checked = True
                        opts.first_readings(np.asarray(snap[0].position_rad, np.float64))
                if raw.onset_ns is None:
                    raw.onset_ns = _onset(reader.snapshot(), opts.motion_threshold)
                    if raw.onset_ns is not None:
                        end_ns = raw.onset_ns + int((motion_s + opts.tail_s) * 1e9)
                        _say(opts, f"motion detected; recording {motion_s + opts.tail_s:.1f} s")
                    elif stamp - first > opts.start_timeout_s * 1e9:
                        failure = RecordingError(
                            f"joints {getattr(stream, 'url', '')!r}: expected the robot to start "
                            f"the program within {opts.start_timeout_s} s, found no motion above "
                            f"{opts.motion_threshold} (start the program on the controller)")
                        break
                if raw.onset_ns is not None and program.kind == "calibration":
                    k = int((stamp - raw.onset_ns) / 1e9 * fps) // SEGMENT_FRAMES
                    if announced < k < len(program.sweeps):
                        s = program.sweeps[k]
                        _say(opts, f"DoF {k + 1}/{len(program.sweeps)} {s.dof}: sweeping "
                                   f"{s.amplitude:+.3f} and back")
                        announced = k
                if reader.error is not None:
                    raw.joint_error = reader.error
                    break
                if end_ns is not None and stamp >= end_ns:
                    break
            last = raw.frame_stamps_ns[-1] if raw.frame_stamps_ns else 0
            deadline = time.monotonic() + opts.drain_timeout_s
            while time.monotonic() < deadline and reader.error is None:
                snap = reader.snapshot()
                if snap and snap[-1].receipt_ns > last:
                    break
                time.sleep(0.005)
        except KeyboardInterrupt:  # Ctrl-C: what was recorded goes with it (kept as partial)
            interrupted = True
    finally:
        reader.stop_event.set()
        try:
            wake = getattr(stream, "wake", None)
            if callable(wake):
                wake()
            reader.join(timeout=2.0)
        except KeyboardInterrupt:  # a second Ctrl-C while the reader stops
            interrupted = True
        raw.samples = reader.snapshot()
        raw.joint_error = raw.joint_error or reader.error
        raw.wall_s = time.perf_counter() - t_wall
    if interrupted:
        # a frame whose stamp was not yet appended when the interrupt came is dropped
        n = min(len(raw.frames), len(raw.frame_stamps_ns))
        del raw.frames[n:], raw.frame_stamps_ns[n:]
        raw.disconnected = raw.disconnected or INTERRUPTED
        stop = RecordingInterrupted(f"interrupted after {n} frames")
        stop.recording = raw
        raise stop
    if failure is not None:
        failure.recording = raw  # type: ignore[attr-defined]
        raise failure
    _say(opts, f"recorded {len(raw.frames)} frames and {len(raw.samples)} joint samples")
    return raw
