"""The virtual cell: the MuJoCo cell generator acting as a cell's camera and controller.

``sim://`` sources let the whole calibration procedure run on any machine, and they are as
awkward as a real cell: the camera and the controller run on their own clocks (drift, ppm)
with their own latency and jitter, the camera drops a frame now and then and the joint
stream a sample, so frames and samples must really be paired by time.

Camera (``edge.calibrate.camera.open_camera``), joint stream (``firmware_bridge`` scheme
``sim``) and robot spec (``syncedge calibrate plan --robot sim://...``) are plug-ins of the
``syncedge.cameras``, ``syncedge.joint_streams`` and ``syncedge.robot_specs`` groups
(``edge/plugins.py``). Camera and joint stream name the same cell by ``split``, ``seed``
and ``robot`` and share one simulated world and host clock (ns). Reading the camera advances that clock;
the joint stream delivers the samples whose receipt stamp has passed. With no camera open on
the cell (``syncedge bridge probe`` / ``record`` of a ``sim://`` URL alone), the joint stream
runs the clock with the wall clock from its opening, so samples come at ``rate_hz``. The controller
executes a :class:`edge.calibrate.plan.JointProgram` (``execute_program``) on its own clock.

Options (query string; both URLs accept the cell's ``split``, ``seed``, ``robot``,
``freeze``, ``clip``, ``occlude``)::

    camera: size=128x96 fps=30 latency_ms=35 drift_ppm=300 jitter_ms=0.5 drop=0.02
            stall_at_s=-1 stall_s=0 disconnect_at_s=-1 move_deg=0 tilt_deg=0 light=1
            (move_deg/tilt_deg turn the camera about its own position: a nudged camera;
            latency_ms is the frames' true delay, kept when the recorder is told another
            one with --camera-latency-s: a wrongly entered latency)
            point=robot|away
    joints: rate_hz=200 latency_ms=3 drift_ppm=-150 jitter_ms=0.2 drop=0.01 start_s=0.5
            drop_dof=NAME clock_jump_ms=0 clock_jump_at=0 (the controller's clock steps
            by clock_jump_ms from its sample clock_jump_at on: a reset or a time server's step)
            late_every=0 (every N-th sample is held back and delivered right after the next
            one: a link that reorders) again_every=0 (every N-th sample is delivered again
            right after the next one, unflagged: a controller that resends)
            wrap_dof=NAME wrap_margin_deg=3 (the controller reports NAME within one turn,
            [-180, 180) deg, its zero placed so that the joint starts wrap_margin_deg below
            the wrap point: a move up by more than that reads as a jump of a turn)
    cell:   freeze=NAME (the joint is stuck) clip=NAME (its sweep stops at a joint limit at
            half the amplitude) occlude=NAME (it moves but the camera cannot see it)
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from typing import Any

import numpy as np

from edge.calibrate.errors import CameraDisconnectedError, CameraError
from edge.calibrate.spec import RobotSpec
from export.cells.robots import robot_spec
from export.cells.sampling import CellParams, sample_cell
from export.cells.scene import CellScene, RenderSettings
from export.errors import CellError
from firmware_bridge.stream import CycleError, JointStream, Reading
from firmware_bridge.url import Options, split_url

__all__ = ["SimCamera", "SimJointStream", "VirtualCell", "open_sim_camera",
           "robot_spec_for_url", "virtual_robot_spec"]

_HOST0_NS = 1_000_000_000_000  # the simulated host clock starts at 1000 s
_CELL_KEYS = ("split", "seed", "robot", "freeze", "clip", "occlude")
_CELLS: dict[tuple, VirtualCell] = {}
_SCENES: dict[tuple, CellScene] = {}
_LOCK = threading.Lock()
CLIP_FRACTION = 0.5


def _cell_params(split: str, seed: int, robot: str | None) -> CellParams:
    return sample_cell(np.random.default_rng(seed), split, f"sim-{split}-{seed}", robot)


def virtual_robot_spec(split: str = "test_all", seed: int = 0, robot: str | None = None,
                       frame_rate_hz: float = 10.0) -> RobotSpec:
    """The robot spec of a virtual cell: the robot table's spec in the cell's controller
    channel order and signs, at ``frame_rate_hz``."""
    cell = _cell_params(split, seed, robot)
    spec = robot_spec(cell.robot)
    conv = cell.convention
    dofs = []
    for p, s in zip(conv.perm, conv.signs, strict=True):
        d = spec.dofs[p]
        lo, hi = (d.lower, d.upper) if s > 0 else (-d.upper, -d.lower)
        dofs.append(dataclasses.replace(d, lower=lo, upper=hi, home=s * d.home))
    return dataclasses.replace(spec, frame_rate_hz=frame_rate_hz, dofs=tuple(dofs))


def robot_spec_for_url(url: str, frame_rate_hz: float | None = None) -> RobotSpec:
    """The robot spec of the cell a ``sim://cell?split=..&seed=..&robot=..`` URL names (the
    ``sim`` entry of ``syncedge.robot_specs``), at ``frame_rate_hz`` (default 10 Hz); other
    options of the URL (a camera's, a joint stream's) are ignored."""
    _, _, o = split_url(url)
    return virtual_robot_spec(o.get("split", "test_all"), int(o.get("seed", "0")),
                              o.get("robot"), frame_rate_hz or 10.0)


class VirtualCell:
    """One simulated cell: scene, controller state and the shared simulated host clock.

    Use :meth:`shared` so that a camera and a joint stream meet in one world.
    """

    def __init__(self, split: str, seed: int, robot: str | None, freeze: str = "",
                 clip: str = "", occlude: str = ""):
        self.params = _cell_params(split, seed, robot)
        self.spec = virtual_robot_spec(split, seed, robot)
        self.names = list(self.spec.dof_names)
        for what, name in (("freeze", freeze), ("clip", clip), ("occlude", occlude)):
            if name and name not in self.names:
                raise CameraError(f"sim cell {what}={name!r}: expected one of {self.names}")
        self.freeze, self.clip, self.occlude = freeze, clip, occlude
        self.home = np.array([d.home for d in self.spec.dofs])
        self.now_ns = _HOST0_NS
        self.cond = threading.Condition()
        self.released = False
        self.program: Any = None
        self.program_start_ns = 0
        self.truth: list[tuple[int, np.ndarray]] = []  # (capture host ns, q) for tests
        self.refs = 0
        self.cameras = 0  # open cameras: while none is, a joint stream paces the clock itself
        self.controller_rate = 1.0  # controller clock seconds per host second
        self._key: tuple[str, int, str | None] | None = None  # set by shared()

    @classmethod
    def shared(cls, opts: dict[str, str], where: str = "") -> VirtualCell:
        """The cell named by ``split``/``seed``/``robot`` in ``opts`` (created on first use).

        Raises:
            CellError: an unknown split or robot, a seed that is no whole number; the
                message begins with ``where`` (the URL and its form).
        """
        try:
            key = (opts.get("split", "test_all"), int(opts.get("seed", "0")), opts.get("robot"))
        except ValueError:
            raise CellError(f"{where}option 'seed' expected a whole number, found "
                            f"{opts.get('seed')!r}") from None
        with _LOCK:
            cell = _CELLS.get(key)
            if cell is None:
                try:
                    cell = cls(*key, opts.get("freeze", ""), opts.get("clip", ""),
                               opts.get("occlude", ""))
                except CellError as exc:
                    raise CellError(f"{where}{exc}") from None
                _CELLS[key] = cell
            else:
                cell.freeze = opts.get("freeze", cell.freeze)
                cell.clip = opts.get("clip", cell.clip)
                cell.occlude = opts.get("occlude", cell.occlude)
            cell.refs += 1
            cell._key = key
            return cell

    def unref(self) -> None:
        """Forget the cell when its last camera or stream closes."""
        with _LOCK:
            self.refs -= 1
            if self.refs <= 0:
                key = self._key
                if key is not None:
                    _CELLS.pop(key, None)

    # -- the world ------------------------------------------------------------------------
    def advance(self, host_ns: int) -> None:
        """Move the simulated host clock forward to ``host_ns`` and wake the joint stream."""
        with self.cond:
            self.now_ns = max(self.now_ns, int(host_ns))
            self.cond.notify_all()

    def release(self) -> None:
        """Let the joint stream run freely (the recording is over)."""
        with self.cond:
            self.released = True
            self.cond.notify_all()

    def start_program(self, program: Any, start_s: float) -> None:
        """The controller starts ``program`` ``start_s`` after the current simulated time."""
        self.program = program
        self.program_start_ns = self.now_ns + int(start_s * 1e9)
        self.released = False

    def joint_state(self, host_ns: int) -> np.ndarray:
        """Physical joint positions float64 ``[n]`` (controller order, rad) at ``host_ns``.

        The controller runs the program on its own clock (``controller_rate``).
        """
        q = self.home.copy()
        p = self.program
        if p is not None:
            t = (host_ns - self.program_start_ns) / 1e9 * self.controller_rate
            q = np.array([np.interp(t, p.times_s, p.positions[:, c])
                          for c in range(p.positions.shape[1])])
        if self.freeze:
            i = self.names.index(self.freeze)
            q[i] = self.home[i]
        if self.clip and p is not None:
            i = self.names.index(self.clip)
            amp = max(abs(s.amplitude) for s in p.sweeps if s.dof == self.clip) \
                if any(s.dof == self.clip for s in p.sweeps) else 0.3
            q[i] = np.clip(q[i], self.home[i] - CLIP_FRACTION * amp,
                           self.home[i] + CLIP_FRACTION * amp)
        return q

    def render(self, scene: CellScene, q_ctrl: np.ndarray) -> np.ndarray:
        """Render controller-order positions (the occluded joint shown at home)."""
        q = q_ctrl.copy()
        if self.occlude:
            i = self.names.index(self.occlude)
            q[i] = self.home[i]
        rgb, _, _ = scene.render(self.params.convention.to_canonical(q), segmentation=False)
        return rgb


def _forward(azimuth_deg: float, elevation_deg: float) -> np.ndarray:
    a, e = np.radians(azimuth_deg), np.radians(elevation_deg)
    return np.array([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)])


def _panned_lookat(p: CellParams, pan_deg: float,
                   tilt_deg: float) -> tuple[float, float, float]:
    """The look-at point after turning the camera about its own position (a nudged
    camera), not orbiting the look-at point (MuJoCo free camera: position = lookat -
    distance * forward)."""
    d = p.distance_m * (_forward(p.azimuth_deg + pan_deg, p.elevation_deg + tilt_deg)
                        - _forward(p.azimuth_deg, p.elevation_deg))
    x, y, z = (float(v) for v in np.asarray(p.lookat) + d)
    return x, y, z


def _scene(robot: str, width: int, height: int) -> CellScene:
    key = (robot, width, height)
    if key not in _SCENES:
        _SCENES[key] = CellScene(robot, RenderSettings(width, height))
    return _SCENES[key]


class SimCamera:
    """The virtual cell's camera (see the module docstring for its options).

    Implements :class:`edge.calibrate.camera.FrameSource`.
    """

    FORM = ("sim://cell?split=test_all&seed=0&size=128x96&fps=30&latency_ms=35&drift_ppm=300"
            "&drop=0.02&move_deg=0&light=1&point=robot")

    def __init__(self, url: str):
        _, _, raw = split_url(url)
        cell_opts = {k: raw.pop(k) for k in _CELL_KEYS if k in raw}
        o = Options(url, raw, self.FORM)
        size = o.str("size", "128x96") or ""
        try:
            self.width, self.height = (int(v) for v in size.lower().split("x"))
        except ValueError:
            raise CameraError(f"{url}: option 'size' expected WIDTHxHEIGHT, found {size!r}; "
                              f"form: {self.FORM}") from None
        self.fps = o.float("fps", 30.0, 0.1)
        # the simulated camera's own delay from exposure to stamp; ``latency_s`` is what a
        # recorder corrects by (``open_camera(..., latency_s)`` may set another value, as a
        # technician may enter a wrong one: the frames keep their true delay)
        self.true_latency_s = o.float("latency_ms", 35.0, 0.0) / 1e3
        self.latency_s = self.true_latency_s
        self.drift = o.float("drift_ppm", 300.0, -1e5) * 1e-6
        self.jitter_s = o.float("jitter_ms", 0.5, 0.0) / 1e3
        self.drop = o.float("drop", 0.02, 0.0)
        self.stall_at_s, self.stall_s = o.float("stall_at_s", -1.0, -1.0), o.float("stall_s", 0.0, 0.0)
        self.disconnect_at_s = o.float("disconnect_at_s", -1.0, -1.0)
        move, tilt = o.float("move_deg", 0.0, -90.0), o.float("tilt_deg", 0.0, -90.0)
        light = o.float("light", 1.0, 0.0)
        point = o.str("point", "robot")
        if point not in ("robot", "away"):
            raise CameraError(f"{url}: option 'point' expected 'robot' or 'away', found {point!r}")
        o.finish()
        self.url = url
        self.cell = VirtualCell.shared(cell_opts, f"URL {url!r} (form: {self.FORM}): ")
        with self.cell.cond:
            self.cell.cameras += 1
        p = self.cell.params
        view = dataclasses.replace(
            p.with_light(light), azimuth_deg=p.azimuth_deg + move,
            elevation_deg=p.elevation_deg + tilt, lookat=_panned_lookat(p, move, tilt))
        if point == "away":
            view = dataclasses.replace(view, lookat=(0.0, -2.6, 0.6), distance_m=0.5)
        self.view = view
        self.scene = _scene(p.robot, self.width, self.height)
        self.rng = np.random.default_rng(int(cell_opts.get("seed", "0")) + 7)
        self.k = 0
        self.start_ns = self.cell.now_ns
        self.last_dropped = False
        self.frames = 0

    def _capture_ns(self, k: int) -> int:
        return self.start_ns + int(k / self.fps * (1.0 + self.drift) * 1e9)

    def read(self) -> tuple[np.ndarray, int]:
        """The next frame (rendered at its capture time) and its receipt stamp, ns."""
        while True:
            self.k += 1
            cap = self._capture_ns(self.k)
            t = (cap - self.start_ns) / 1e9
            if 0 <= self.disconnect_at_s <= t:
                self.cell.release()
                raise CameraDisconnectedError(f"camera {self.url!r}: disconnected at "
                                              f"{t:.2f} s after {self.frames} frames")
            stalled = self.stall_at_s >= 0 and self.stall_at_s <= t < self.stall_at_s + self.stall_s
            dropped = not self.last_dropped and self.rng.random() < self.drop
            self.last_dropped = dropped
            if not (stalled or dropped):
                break
        receipt = cap + int((self.true_latency_s + self.rng.uniform(-1, 1) * self.jitter_s)
                            * 1e9)
        q = self.cell.joint_state(cap)
        self.cell.truth.append((cap, q))
        self.scene.apply_cell(self.view)
        frame = self.cell.render(self.scene, q)
        self.cell.advance(receipt)
        self.frames += 1
        return frame, receipt

    def describe(self) -> dict[str, Any]:
        """The simulated equipment."""
        return {"source": self.url, "kind": "virtual", "width": self.width,
                "height": self.height, "fps": self.fps, "latency_s": self.latency_s,
                "true_latency_s": self.true_latency_s}

    def close(self) -> None:
        """Detach from the cell."""
        with self.cell.cond:
            self.cell.cameras -= 1
        self.cell.release()
        self.cell.unref()


def open_sim_camera(url: str) -> SimCamera:
    """Open the virtual cell's camera for a ``sim://`` URL."""
    return SimCamera(url)


class SimJointStream(JointStream):
    """The virtual cell's controller as a ``firmware_bridge`` joint stream (scheme ``sim``).

    Executes a program (:meth:`execute_program`) on its own clock; samples carry a device
    counter and device stamp, a receipt stamp on the simulated host clock, latency and
    jitter, and are occasionally lost.
    """

    URL_FORM = ("sim://cell?split=test_all&seed=0&rate_hz=200&latency_ms=3&drift_ppm=-150"
                "&drop=0.01&start_s=0.5&drop_dof=NAME&clock_jump_ms=0&clock_jump_at=0"
                "&wrap_dof=NAME&wrap_margin_deg=3&late_every=0&again_every=0")

    def __init__(self, url: str, cell_opts: dict[str, str], *, device_rate_hz: float = 200.0,
                 latency_s: float = 0.003, drift: float = -150e-6, jitter_s: float = 0.0002,
                 drop: float = 0.01, start_s: float = 0.5, drop_dof: str = "",
                 clock_jump_ms: float = 0.0, clock_jump_at: int = 0, wrap_dof: str = "",
                 wrap_margin_deg: float = 3.0, late_every: int = 0, again_every: int = 0,
                 **kw):
        kw.setdefault("read_timeout_s", 5.0)
        super().__init__(url, **kw)
        self.cell_opts, self.device_rate_hz = cell_opts, device_rate_hz
        self.latency_s, self.drift, self.jitter_s = latency_s, drift, jitter_s
        self.drop, self.start_s, self.drop_dof = drop, start_s, drop_dof
        # the controller's clock steps by clock_jump_ms from its sample clock_jump_at on (a
        # reset or a time server's step; negative: back); its samples' timing is unchanged
        self.clock_jump_ns, self.clock_jump_at = int(round(clock_jump_ms * 1e6)), clock_jump_at
        # wrap_dof is reported within one turn, starting wrap_margin_deg below the wrap point
        self.wrap_dof, self.wrap_margin = wrap_dof, float(np.radians(wrap_margin_deg))
        self._wrap: tuple[int, float] | None = None  # (column, shift to the reported zero)
        # delivery faults: sample N held back (late_every) or sent again (again_every),
        # handed over right after sample N + 1
        self.late_every, self.again_every = late_every, again_every
        self._queued: deque[Reading] = deque()  # readings to hand over before a new one
        self.cell: VirtualCell | None = None

    @classmethod
    def from_url(cls, url: str, target: str, opts: Options, **kw: Any) -> SimJointStream:
        """Build from a parsed URL (see ``firmware_bridge.url.stream_for_url``)."""
        cell_opts = {k: v for k in _CELL_KEYS if (v := opts.str(k)) is not None}
        args: dict[str, Any] = dict(  # constructor keywords of mixed types
            device_rate_hz=opts.float("rate_hz", 200.0, 1.0),
            latency_s=opts.float("latency_ms", 3.0, 0.0) / 1e3,
            drift=opts.float("drift_ppm", -150.0, -1e5) * 1e-6,
            jitter_s=opts.float("jitter_ms", 0.2, 0.0) / 1e3,
            drop=opts.float("drop", 0.01, 0.0), start_s=opts.float("start_s", 0.5, 0.0),
            drop_dof=opts.str("drop_dof", "") or "",
            clock_jump_ms=opts.float("clock_jump_ms", 0.0, -1e9),
            clock_jump_at=opts.int("clock_jump_at", 0, 0),
            wrap_dof=opts.str("wrap_dof", "") or "",
            wrap_margin_deg=opts.float("wrap_margin_deg", 3.0, 0.0),
            late_every=opts.int("late_every", 0, 0), again_every=opts.int("again_every", 0, 0))
        opts.finish()
        args.update(kw)
        return cls(url, cell_opts, **args)

    @property
    def joint_names(self) -> list[str]:
        names = self.cell.names if self.cell else []
        return [n for n in names if n != self.drop_dof]

    def _open(self) -> None:
        self.cell = VirtualCell.shared(self.cell_opts,
                                       f"URL {self.url!r} (form: {self.URL_FORM}): ")
        if self.drop_dof and self.drop_dof not in self.cell.names:
            raise CameraError(f"{self.url}: drop_dof={self.drop_dof!r}: expected one of "
                              f"{self.cell.names}")
        self._i = 0
        self._queued.clear()
        self._t0 = self.cell.now_ns
        self._wall0 = time.monotonic_ns()
        self.cell.controller_rate = 1.0 / (1.0 + self.drift)
        self._rng = np.random.default_rng(int(self.cell_opts.get("seed", "0")) + 11)
        self._cols = [i for i, n in enumerate(self.cell.names) if n != self.drop_dof]
        if self.wrap_dof:
            names = [self.cell.names[i] for i in self._cols]
            if self.wrap_dof not in names:
                raise CameraError(f"{self.url}: wrap_dof={self.wrap_dof!r}: expected one of "
                                  f"{names}")
            col = names.index(self.wrap_dof)
            start = float(self.cell.joint_state(self._t0)[self._cols][col])
            self._wrap = (col, np.pi - self.wrap_margin - start)

    def _close(self) -> None:
        if self.cell is not None:
            self.cell.unref()
            self.cell = None

    def execute_program(self, program: Any) -> None:
        """Run ``program`` (a ``JointProgram``), starting ``start_s`` from now."""
        assert self.cell is not None
        self.cell.start_program(program, self.start_s)

    def wake(self) -> None:
        """Unblock a read waiting for simulated time (the recording is over)."""
        if self.cell is not None:
            self.cell.release()

    def _cycle(self) -> Reading:
        if self._queued:  # delivered after a later sample (late_every, again_every)
            return self._queued.popleft()
        r = self._reading()
        late = bool(self.late_every) and self._i % self.late_every == 0
        again = bool(self.again_every) and self._i % self.again_every == 0
        if not (late or again):
            return r
        try:
            after = self._reading()
        except CycleError:  # the next one was lost: nothing to deliver this one after
            return r
        behind = dataclasses.replace(r, position_rad=r.position_rad.copy(),
                                     receipt_ns=after.receipt_ns + 1000)
        if late:
            self._queued.append(behind)
            return after
        self._queued.extend([after, behind])
        return r

    def _reading(self) -> Reading:
        """The controller's next sample as it leaves the device (see ``_cycle``)."""
        cell = self.cell
        assert cell is not None
        self._i += 1
        device_ns = int(self._i * 1e9 / self.device_rate_hz)
        phys = self._t0 + int(device_ns * (1.0 + self.drift))
        receipt = phys + int((self.latency_s + self._rng.uniform(-1, 1) * self.jitter_s) * 1e9)
        with cell.cond:
            while not cell.released and cell.now_ns < receipt:
                if cell.cameras:  # a camera drives the simulated clock: wait for it
                    cell.cond.wait(0.5)
                    continue
                # no camera (``bridge probe`` / ``record`` alone): the simulated clock runs
                # with the wall clock from the stream's opening, so samples come at the
                # device rate in real time
                due = self._wall0 + (receipt - self._t0) - time.monotonic_ns()
                if due > 0:
                    cell.cond.wait(min(due / 1e9, 0.5))
                else:
                    cell.now_ns = max(cell.now_ns, receipt)
        if self._rng.random() < self.drop:
            raise CycleError("lost", f"{self.url}: sample {self._i} lost (drop)")
        q = cell.joint_state(phys)[self._cols]
        if self._wrap is not None:  # reported within one turn, [-pi, pi)
            col, shift = self._wrap
            q[col] = (q[col] + shift + np.pi) % (2 * np.pi) - np.pi
        nan = np.full(len(q), np.nan)
        if self.clock_jump_at and self._i >= self.clock_jump_at:
            device_ns += self.clock_jump_ns
        return Reading(q, nan, nan.copy(), receipt, device_counter=self._i,
                       device_stamp_ns=device_ns)

