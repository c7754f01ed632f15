"""GPU rollout step: step and decoder executors plus the rollout kernels on one stream.

Each step, entirely on the device (no host copies; state indices live in a device
int32 ``state`` = {w, t}):

1. ``select_action``: action_t = masked candidate actions[:, t]            # (B, A)
2. step executor: (history latents, history actions, action_t, extra inputs)
   -> next latent                                                           # (B, L)
3. ``ring_push_linearise``: push (next latent, action_t), re-linearise history
4. decoder executor: next latent -> decoded float frames                   # (B, 3, H, W)
   (and, with ``robot_mask=True``, the predicted robot mask                 # (B, 1, H, W))
5. ``decode_frames`` (+ residual offset) -> uint8 frames, NaNs counted      # (B, H, W, 3)
6. ``precheck_scores`` against the start frame, keep-out mask and goal
   (and ``robot_in_keepout``: robot-mask pixels >= 0.5 inside the keep-out mask, # (B,))
7. ``store_step`` x4 (x5): frames and scores into per-horizon buffers at t
8. ``ring_advance``: w = (w + 1) % S, t += 1

After ``warmup_steps`` eager steps the whole step is captured once as a CUDA graph and
replayed for every later step (and every later rollout: the buffers never move). The
graph's node counts are kept; ``memcpy_nodes_per_step`` should be 0.

Executors are any GPU runner behind :class:`DeviceExecutor` (TensorRT engines on a
device; PyTorch, CuPy or pycuda kernels in tests). pycuda is imported lazily through
``kernels.launcher``; importing this module needs no GPU.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np

from edge.runtime.device_copies import host_copy
from kernels.cuda_graph import CapturedGraph
from kernels.errors import KernelInputError
from kernels.launcher import KernelLauncher, RingShape, check_nan_count

__all__ = ["CudaRolloutStep", "DeviceExecutor", "RolloutOutputs", "StepShapes"]


class DeviceExecutor(Protocol):
    """A model graph run on device buffers.

    ``enqueue`` must only enqueue work on the given stream: no synchronisation, no host
    copies and no allocation (it is captured into a CUDA graph). Pointers are ``int``
    device addresses; names follow the model contract (``history_latents``,
    ``history_actions``, ``action`` and any extra inputs such as ``context`` for the step
    graph, output ``next_latent``; ``latents`` -> ``frames`` for the decoder, and
    ``robot_mask`` where the decoder predicts one and the step asks for it).
    """

    def enqueue(
        self, inputs: Mapping[str, int], outputs: Mapping[str, int], stream_handle: int
    ) -> None:
        """Enqueue one run reading ``inputs`` and writing ``outputs`` on ``stream_handle``."""


@dataclass(frozen=True)
class StepShapes:
    """Static shapes of a rollout: batch B, history S, latent (C, h, w), action width A,
    frame H x W, horizon T (steps kept on the device)."""

    batch: int
    slots: int
    latent_shape: tuple[int, int, int]
    action: int
    height: int
    width: int
    horizon: int

    @property
    def latent(self) -> int:
        """L = C * h * w."""
        c, h, w = self.latent_shape
        return c * h * w

    @property
    def ring(self) -> RingShape:
        """The ring buffer's shape."""
        return RingShape(self.batch, self.slots, self.latent, self.action)


class RolloutOutputs(NamedTuple):
    """Host copies of a rollout's outputs (T = steps taken).

    frames uint8 [T, B, H, W, 3]; moved_in_keepout int32 [T, B]; motion_energy float32
    [T, B]; goal_mse float32 [T, B] or None; robot_in_keepout int32 [T, B] (predicted
    robot-mask pixels >= 0.5 inside the keep-out mask) or None when the step keeps no
    robot mask.
    """

    frames: np.ndarray
    moved_in_keepout: np.ndarray
    motion_energy: np.ndarray
    goal_mse: np.ndarray | None
    robot_in_keepout: np.ndarray | None = None


_FLOAT = 4


class CudaRolloutStep:
    """Runs rollout steps on the GPU, captured as a CUDA graph after warm-up.

    Args:
        launcher: an activated :class:`~kernels.launcher.KernelLauncher`; its stream and
            primary context are used for everything.
        step_executor: the step graph (see :class:`DeviceExecutor`).
        decoder_executor: the decoder graph.
        shapes: :class:`StepShapes`.
        use_graph: False runs every step eagerly (for comparison).
        warmup_steps: eager steps before the capture (>= 1 lets executors initialise).
        robot_mask: the decoder executor also writes ``robot_mask`` float32
            ``[B, 1, H, W]`` (0..1) into a buffer of this step, and each step counts its
            pixels >= 0.5 inside the keep-out mask (``robot_in_keepout``, int32 ``[B]``
            per step, on the device; :meth:`outputs` returns the counts, never the masks).

    Call order: :meth:`activate`, :meth:`reset`, :meth:`step` (or :meth:`run`),
    :meth:`outputs`, and :meth:`deactivate` (or use ``with``).
    """

    def __init__(self, launcher: KernelLauncher, step_executor: DeviceExecutor,
                 decoder_executor: DeviceExecutor, shapes: StepShapes, *,
                 use_graph: bool = True, warmup_steps: int = 1,
                 robot_mask: bool = False):  # fmt: skip
        self.launcher = launcher
        self.step_executor = step_executor
        self.decoder_executor = decoder_executor
        self.shapes = shapes
        self.use_graph = use_graph
        self.warmup_steps = max(0, int(warmup_steps))
        self.robot_mask = bool(robot_mask)
        self.node_counts: Counter = Counter()
        self._buf: dict[str, Any] = {}
        self._graph: CapturedGraph | None = None
        self._extra: dict[str, int] = {}
        self._has_goal = False
        self._has_offset = False
        self._threshold = 0
        self._steps = -1  # -1: reset() not called yet
        self._eager_steps = 0
        self._n_actions = 0
        self._host_actions: np.ndarray | None = None

    # ------------------------------------------------------------------ lifecycle

    def activate(self) -> CudaRolloutStep:
        """Allocate every device buffer once, for the maximum batch and horizon."""
        if self._buf:
            return self
        cuda = self.launcher.driver
        s = self.shapes
        b, sl, lat, a, hw, t = s.batch, s.slots, s.latent, s.action, s.height * s.width, s.horizon
        sizes = {
            "ring_latents": b * sl * lat * _FLOAT, "ring_actions": b * sl * a * _FLOAT,
            "hist_latents": b * sl * lat * _FLOAT, "hist_actions": b * sl * a * _FLOAT,
            "actions": b * t * a * _FLOAT, "dof_mask": a, "action_t": b * a * _FLOAT,
            "next_latent": b * lat * _FLOAT, "decoded": b * 3 * hw * _FLOAT,
            "offset": b * 3 * hw * _FLOAT, "frames_t": b * hw * 3, "frames": t * b * hw * 3,
            "start_frame": hw * 3, "keepout": hw, "goal": hw * 3,
            "moved_t": b * 4, "energy_t": b * _FLOAT, "goal_t": b * _FLOAT,
            "moved": t * b * 4, "energy": t * b * _FLOAT, "goal_mse": t * b * _FLOAT,
            "start_latent": b * lat * _FLOAT, "state": 2 * 4, "nan_count": 4,
        }  # fmt: skip
        if self.robot_mask:
            sizes.update({"robot_mask": b * hw * _FLOAT, "robot_t": b * 4, "robot": t * b * 4})
        self._buf = {name: cuda.mem_alloc(n) for name, n in sizes.items()}
        return self

    def deactivate(self) -> None:
        """Synchronise, destroy the graph and free the buffers."""
        if self._buf:
            self.launcher.synchronize()
        if self._graph is not None:
            self._graph.close()
            self._graph = None
        for alloc in self._buf.values():
            alloc.free()
        self._buf.clear()
        self._steps = -1

    def __enter__(self) -> CudaRolloutStep:
        return self.activate()

    def __exit__(self, *exc: object) -> None:
        self.deactivate()

    def _ptr(self, name: str) -> int:
        return int(self._buf[name])

    # ------------------------------------------------------------------ rollout

    def reset(self, start_latent: np.ndarray, actions: np.ndarray, dof_mask: np.ndarray,
              start_frame: np.ndarray, keepout: np.ndarray, threshold: int, *,
              goal: np.ndarray | None = None, offset: np.ndarray | None = None,
              extra_inputs: Mapping[str, int] | None = None) -> None:  # fmt: skip
        """Upload one rollout's inputs (the only host-to-device copies) and fill the ring.

        Args:
            start_latent: float32 [B, C, h, w] (or [B, L]), the encoded start frame.
            actions: float32 [B, T', A] candidate actions, T' <= T (SI units).
            dof_mask: uint8 [A], nonzero = controllable.
            start_frame: uint8 [H, W, 3]; keepout: uint8 [H, W]; threshold: 0..255.
            goal: optional uint8 [H, W, 3].
            offset: optional float32 [B, 3, H, W] residual-decoding offset.
            extra_inputs: device pointers passed unchanged to the step executor (e.g.
                ``{"context": ptr}``); they must stay valid for the whole rollout.

        Raises:
            KernelInputError: an array has the wrong dtype or shape (message names it), or
                :meth:`activate` was not called.
        """
        if not self._buf:
            raise KernelInputError("CudaRolloutStep: call activate() before reset()")
        s = self.shapes
        if not 0 <= int(threshold) <= 255:
            raise KernelInputError(
                f"threshold: expected an integer in [0, 255], found {threshold!r}"
            )
        host = {
            "start_latent": _as(start_latent, np.float32, (s.batch, s.latent), "start_latent"),
            "dof_mask": _as(dof_mask, np.uint8, (s.action,), "dof_mask"),
            "start_frame": _as(start_frame, np.uint8, (s.height, s.width, 3), "start_frame"),
            "keepout": _as(keepout, np.uint8, (s.height, s.width), "keepout"),
        }
        acts = np.zeros((s.batch, s.horizon, s.action), np.float32)
        given = _as(actions, np.float32, (s.batch, None, s.action), "actions")
        if not 1 <= given.shape[1] <= s.horizon:
            raise KernelInputError(
                f"actions: expected 1..{s.horizon} steps, found {given.shape[1]}"
            )
        acts[:, : given.shape[1]] = given
        host["actions"] = acts
        self._host_actions = acts
        if goal is not None:
            host["goal"] = _as(goal, np.uint8, (s.height, s.width, 3), "goal")
        if offset is not None:
            host["offset"] = _as(offset, np.float32, (s.batch, 3, s.height, s.width), "offset")
        if self._graph is not None and (goal is not None, offset is not None, int(threshold)) != (
            self._has_goal, self._has_offset, self._threshold,
        ):  # fmt: skip
            self._graph.close()  # the captured step no longer matches: capture again
            self._graph = None
            self._eager_steps = 0
        self._has_goal, self._has_offset = goal is not None, offset is not None
        self._threshold = int(threshold)
        self._extra = dict(extra_inputs or {})
        cuda, stream = self.launcher.driver, self.launcher.stream
        self.launcher.synchronize()
        for name, arr in host.items():
            host_copy(cuda, "htod", self._buf[name], arr, stream)
        cuda.memset_d32_async(self._buf["nan_count"], 0, 1, stream)
        self.launcher.ring_fill(s.ring, self._ptr("ring_latents"), self._ptr("ring_actions"),
                                self._ptr("hist_latents"), self._ptr("hist_actions"),
                                self._ptr("start_latent"), self._ptr("state"))  # fmt: skip
        self.launcher.synchronize()
        self._steps = 0
        self._n_actions = given.shape[1]

    def _enqueue_step(self) -> None:
        s, k, p = self.shapes, self.launcher, self._ptr
        b, hw = s.batch, s.height * s.width
        k.select_action(p("action_t"), p("actions"), p("dof_mask"), b, s.horizon, s.action,
                        p("state"))  # fmt: skip
        step_in = {"history_latents": p("hist_latents"), "history_actions": p("hist_actions"),
                   "action": p("action_t"), **self._extra}  # fmt: skip
        self.step_executor.enqueue(step_in, {"next_latent": p("next_latent")}, k.stream_handle)
        k.ring_push_linearise(s.ring, p("ring_latents"), p("ring_actions"), p("hist_latents"),
                              p("hist_actions"), p("next_latent"), p("action_t"), p("dof_mask"),
                              p("state"))  # fmt: skip
        dec_out = {"frames": p("decoded")}
        if self.robot_mask:
            dec_out["robot_mask"] = p("robot_mask")
        self.decoder_executor.enqueue({"latents": p("next_latent")}, dec_out, k.stream_handle)
        k.decode_frames(p("frames_t"), p("decoded"), p("offset") if self._has_offset else 0,
                        b, s.height, s.width, p("nan_count"))  # fmt: skip
        goal = p("goal") if self._has_goal else 0
        k.precheck_scores(p("moved_t"), p("energy_t"), p("goal_t") if goal else 0, p("frames_t"),
                          p("start_frame"), p("keepout"), goal, b, s.height, s.width,
                          self._threshold)  # fmt: skip
        if self.robot_mask:
            k.robot_in_keepout(p("robot_t"), p("robot_mask"), p("keepout"), b, s.height, s.width)
            k.store_step(p("robot"), p("robot_t"), b * 4, s.horizon, p("state"))
        k.store_step(p("frames"), p("frames_t"), b * hw * 3, s.horizon, p("state"))
        k.store_step(p("moved"), p("moved_t"), b * 4, s.horizon, p("state"))
        k.store_step(p("energy"), p("energy_t"), b * _FLOAT, s.horizon, p("state"))
        if goal:
            k.store_step(p("goal_mse"), p("goal_t"), b * _FLOAT, s.horizon, p("state"))
        k.ring_advance(s.ring, p("state"))

    def step(self) -> None:
        """Enqueue one step (asynchronous). Replays the captured graph after warm-up.

        Raises:
            KernelInputError: :meth:`reset` was not called, or the horizon is used up.
        """
        if self._steps < 0:
            raise KernelInputError("CudaRolloutStep: call reset() before step()")
        if self._steps >= self._n_actions:
            raise KernelInputError(
                f"CudaRolloutStep: all {self._n_actions} candidate steps are taken; call reset()"
            )
        if not self.use_graph or self._eager_steps < self.warmup_steps:
            self._enqueue_step()
            self._eager_steps += 1
        else:
            if self._graph is None:
                graph = CapturedGraph(self.launcher.stream_handle)
                graph.begin()
                try:
                    self._enqueue_step()
                finally:
                    self.node_counts = graph.end()
                self._graph = graph
            self._graph.launch()
        self._steps += 1

    def set_step_action(self, t: int, action: np.ndarray) -> None:
        """Replace step ``t``'s candidate actions (policy mode): one host-to-device copy of
        the whole ``[B, T, A]`` actions buffer, ordered on the stream before later steps.

        Args:
            t: step index, ``0 <= t <`` the actions given to :meth:`reset`.
            action: float32 ``[B, A]`` (SI units).

        Raises:
            KernelInputError: before :meth:`reset`, a bad ``t``, dtype or shape.
        """
        if self._host_actions is None:
            raise KernelInputError("CudaRolloutStep: call reset() before set_step_action()")
        s = self.shapes
        if not 0 <= int(t) < self._n_actions:
            raise KernelInputError(f"t: expected 0..{self._n_actions - 1}, found {t!r}")
        self.launcher.synchronize()  # the previous upload may still be reading the array
        self._host_actions[:, int(t)] = _as(action, np.float32, (s.batch, s.action), "action")
        host_copy(self.launcher.driver, "htod", self._buf["actions"], self._host_actions,
                  self.launcher.stream)

    def fetch_frames(self, t: int, out: np.ndarray) -> np.ndarray:
        """Synchronise and copy step ``t``'s frames into ``out`` (uint8 ``[B, H, W, 3]``):
        two device-to-host copies (the frames and the NaN counter).

        Raises:
            KernelInputError: ``t`` is not a step taken, or ``out`` has the wrong shape.
            NonFiniteOutputError: the decoder produced NaN so far (the count is named).
        """
        s = self.shapes
        if not 0 <= int(t) < max(self._steps, 0):
            raise KernelInputError(f"t: expected a step taken (0..{self._steps - 1}), found {t!r}")
        _as(out, np.uint8, (s.batch, s.height, s.width, 3), "out")
        cuda = self.launcher.driver
        self.launcher.synchronize()
        nan = np.zeros(1, np.int32)
        host_copy(cuda, "dtoh", nan, self._buf["nan_count"])
        check_nan_count(int(nan[0]))
        offset = int(t) * s.batch * s.height * s.width * 3
        host_copy(cuda, "dtoh", out, self._ptr("frames") + offset)
        return out

    def run(self, n_steps: int | None = None) -> None:
        """Enqueue ``n_steps`` steps (default: every remaining candidate step)."""
        remaining = self._n_actions - max(self._steps, 0)
        for _ in range(remaining if n_steps is None else n_steps):
            self.step()

    @property
    def memcpy_nodes_per_step(self) -> int | None:
        """memcpy nodes in the captured step graph (None before capture); target 0."""
        return self.node_counts.get("memcpy", 0) if self._graph is not None else None

    def outputs(self) -> RolloutOutputs:
        """Synchronise and copy the steps taken so far to the host.

        Raises:
            NonFiniteOutputError: the decoder produced NaN values (the count is named).
        """
        cuda = self.launcher.driver
        self.launcher.synchronize()
        s, t = self.shapes, max(self._steps, 0)
        nan = np.zeros(1, np.int32)
        host_copy(cuda, "dtoh", nan, self._buf["nan_count"])
        check_nan_count(int(nan[0]))
        frames = np.empty((s.horizon, s.batch, s.height, s.width, 3), np.uint8)
        moved = np.empty((s.horizon, s.batch), np.int32)
        energy = np.empty((s.horizon, s.batch), np.float32)
        host_copy(cuda, "dtoh", frames, self._buf["frames"])
        host_copy(cuda, "dtoh", moved, self._buf["moved"])
        host_copy(cuda, "dtoh", energy, self._buf["energy"])
        goal = None
        if self._has_goal:
            goal = np.empty((s.horizon, s.batch), np.float32)
            host_copy(cuda, "dtoh", goal, self._buf["goal_mse"])
            goal = goal[:t]
        robot = None
        if self.robot_mask:
            robot = np.empty((s.horizon, s.batch), np.int32)
            host_copy(cuda, "dtoh", robot, self._buf["robot"])
            robot = robot[:t]
        return RolloutOutputs(frames[:t], moved[:t], energy[:t], goal, robot)


def _as(arr: Any, dtype: type, shape: tuple[int | None, ...], name: str) -> np.ndarray:
    if not isinstance(arr, np.ndarray) or arr.dtype != np.dtype(dtype):
        found = arr.dtype if isinstance(arr, np.ndarray) else type(arr).__name__
        raise KernelInputError(f"{name}: expected a {np.dtype(dtype)} array, found {found}")
    if arr.ndim != len(shape) and not (name == "start_latent" and arr.ndim == 4):
        raise KernelInputError(f"{name}: expected {len(shape)} dimensions, found shape {arr.shape}")
    flat = arr.reshape(arr.shape[0], -1) if name == "start_latent" else arr
    if any(w is not None and g != w for g, w in zip(flat.shape, shape, strict=False)) or (
        flat.ndim != len(shape)
    ):
        want = "[" + ", ".join("*" if d is None else str(d) for d in shape) + "]"
        raise KernelInputError(f"{name}: expected shape {want}, found {list(arr.shape)}")
    return np.ascontiguousarray(flat)
