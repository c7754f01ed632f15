"""The rollout on the GPU behind :class:`~edge.runtime.rollout.Rollout` (backend
``tensorrt``): TensorRT engines as device executors, the rollout kernels between them and
the whole step captured once as a CUDA graph (:class:`edge.runtime.cuda_step.CudaRolloutStep`).

:class:`Rollout` does the checking, encodes the start frames and (for residual decoding)
the offset through the runners' ``infer``; this module keeps one
:class:`~edge.runtime.cuda_step.CudaRolloutStep` per chunk of the chosen batch size, allocated
once per batch size, fed with the context uploaded once. Between the engines of the
current model (the warp family warps and composites inside the decoder graph,
``contract.warping: decoder_graph``) the work is the ring buffer, the action selection,
the uint8 conversion and the pre-check scores: the kernels of ``kernels/`` whose NumPy
twins the CPU path runs (``kernels.reference``). Where the decoder also predicts a robot
mask (the warp decoder's second output, ``robot_mask``), it is written to a buffer of the
step and counted there, each step, inside the keep-out mask given to :meth:`DeviceRollout.reset`
(``se_robot_in_keepout``: pixels >= 0.5); the masks never leave the device, their counts
come back with the frames.

Host copies: :meth:`DeviceRollout.reset` uploads the inputs, :meth:`DeviceRollout.outputs`
downloads the frames and the counts; a step copies nothing (``edge.runtime.device_copies``
counts it), except the optional per-step fetch and a policy-mode action upload, both
counted.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from edge.runtime.context import CalibrationContext
from edge.runtime.device_copies import host_copy
from edge.runtime.errors import CallOrderError
from edge.runtime.model import WorldModel

__all__ = ["DeviceRollout"]


class DeviceRollout:
    """Device buffers and CUDA-graph steps of one :class:`~edge.runtime.rollout.Rollout`.

    Args:
        model: an activated model with ``model.on_device`` true.
        context: the cell's context (float32 ``[K, D, h, w]``), uploaded once.
        max_horizon: T, steps kept on the device.

    Raises:
        CallOrderError: the model is not on the device.
    """

    def __init__(self, model: WorldModel, context: CalibrationContext, max_horizon: int):
        self.model = model
        self.launcher = model.kernel_launcher
        self.max_horizon = int(max_horizon)
        cuda = self.launcher.driver
        values = np.ascontiguousarray(context.values, np.float32)
        self._context = cuda.mem_alloc(values.nbytes)
        host_copy(cuda, "htod", self._context, values)
        self._steps: dict[int, list[Any]] = {}
        self._active: list[Any] = []
        self._batch = 0
        model.register_device_user(self)

    def _steps_for(self, batch: int, chunks: int) -> list[Any]:
        from edge.runtime.cuda_step import CudaRolloutStep, DeviceExecutor, StepShapes

        c = self.model.contract
        have = self._steps.setdefault(batch, [])
        ch, lh, lw = c.latent_shape
        while len(have) < chunks:
            shapes = StepShapes(batch=batch, slots=c.history_length,
                                latent_shape=(ch, lh, lw), action=c.max_dof,
                                height=c.resolution[0], width=c.resolution[1],
                                horizon=self.max_horizon)
            # on the device path every step/decoder runner has enqueue (WorldModel.on_device)
            step = CudaRolloutStep(
                self.launcher, cast(DeviceExecutor, self.model.runner(f"step_b{batch}")),
                cast(DeviceExecutor, self.model.runner(f"decoder_b{batch}")), shapes,
                robot_mask=self.model.has_robot_mask)
            have.append(step.activate())
        return have[:chunks]

    @property
    def graph_node_counts(self) -> dict[str, int]:
        """Node counts of the first chunk's captured step graph ({} before capture)."""
        return dict(self._active[0].node_counts) if self._active else {}

    @property
    def memcpy_nodes_per_step(self) -> int | None:
        """memcpy nodes in the captured step graphs (None before capture); target 0."""
        counts = [s.memcpy_nodes_per_step for s in self._active]
        return None if not counts or None in counts else sum(counts)

    def reset(self, batch: int, chunks: int, start_latents: np.ndarray, actions: np.ndarray,
              mask: np.ndarray, start_frame: np.ndarray, offset: np.ndarray | None,
              keepout: np.ndarray | None = None) -> None:
        """Upload a request and fill the rings on the device.

        Args:
            batch, chunks: the plan (exported batch size B and number of chunks).
            start_latents: float32 ``[B*chunks, L]``.
            actions: float32 ``[B*chunks, T, A]`` (SI units; padding rows zero).
            mask: uint8 ``[A]``.
            start_frame: uint8 ``[H, W, 3]`` (the reference of the device's motion scores,
                which nothing reads back: the pre-check measures motion against the
                model's zero-action rollout on the host).
            offset: float32 ``[B*chunks, 3, H, W]`` residual offset, or None.
            keepout: uint8 ``[H, W]`` keep-out mask (nonzero = inside), where the
                robot-mask pixels are counted each step (a model with a robot mask);
                None: all zero (every count 0).

        Raises:
            KernelInputError: an array of the wrong dtype or shape (the message names it).
        """
        h, w = self.model.contract.resolution
        if keepout is None:
            keepout = np.zeros((h, w), np.uint8)
        self._active = self._steps_for(batch, chunks)
        self._batch = batch
        for k, step in enumerate(self._active):
            rows = slice(k * batch, (k + 1) * batch)
            step.reset(start_latents[rows], actions[rows], mask, start_frame, keepout, 0,
                       offset=None if offset is None else offset[rows],
                       extra_inputs={"context": int(self._context)})

    def step(self) -> None:
        """Enqueue one step of every chunk (asynchronous; graph replay after warm-up)."""
        for step in self._active:
            step.step()

    def set_action(self, t: int, actions: np.ndarray) -> None:
        """Policy mode: upload step ``t``'s actions float32 ``[B*chunks, A]`` (counted)."""
        b = self._batch
        for k, step in enumerate(self._active):
            step.set_step_action(t, np.ascontiguousarray(actions[k * b:(k + 1) * b]))

    def fetch(self, t: int, out: np.ndarray) -> None:
        """Copy step ``t``'s frames into ``out`` uint8 ``[B*chunks, H, W, 3]`` (counted)."""
        b = self._batch
        for k, step in enumerate(self._active):
            step.fetch_frames(t, out[k * b:(k + 1) * b])

    def outputs(self, t: int, out: np.ndarray, robot_out: np.ndarray | None = None) -> None:
        """Copy the first ``t`` steps' frames into ``out`` uint8 ``[T, P, H, W, 3]`` and, with
        ``robot_out`` int32 ``[T, P]``, their robot-in-keep-out counts (one download each
        per chunk, at the end).

        Raises:
            CallOrderError: ``robot_out`` for a model without a robot mask.
            NonFiniteOutputError: the decoder produced NaN (the count is named).
        """
        if robot_out is not None and not self.model.has_robot_mask:
            raise CallOrderError(f"DeviceRollout.outputs: {self.model.model_dir} predicts no "
                                 f"robot mask, so there are no counts to copy")
        b = self._batch
        for k, step in enumerate(self._active):
            res = step.outputs()
            out[:t, k * b:(k + 1) * b] = res.frames[:t]
            if robot_out is not None and res.robot_in_keepout is not None:
                robot_out[:t, k * b:(k + 1) * b] = res.robot_in_keepout[:t]

    def close(self) -> None:
        """Free every step's buffers and graph, and the context; idempotent."""
        for steps in self._steps.values():
            for s in steps:
                s.deactivate()
        self._steps.clear()
        self._active = []
        if self._context is not None:
            self._context.free()
            self._context = None
