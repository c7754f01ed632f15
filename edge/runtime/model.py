"""The loaded world model: immutable after :meth:`WorldModel.activate`, shared by rollouts.

Holds the verified manifest and one runner per graph (``encoder``, ``calibration``,
``step_b{B}``, ``decoder_b{B}``). Shapes come from ``model.json``, never from constants.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edge.manifest import ModelContract, ModelManifest, load_model_dir, model_sha256
from edge.runtime.backends import Runner, RunnerFactory, make_runner_factory
from edge.runtime.errors import BackendError, CallOrderError, RolloutInputError

__all__ = ["WorldModel", "load_model"]


class WorldModel:
    """A model folder with one activated runner per graph.

    Args:
        model_dir: folder holding ``model.json`` and the graphs.
        runner_factory: makes a runner for a graph file (default: ONNX Runtime CPU).
        verify: check every graph's sha256 against ``model.json`` on activation.
        fuse_step_decoder: where the step and decoder runners are ONNX Runtime runners,
            also run each batch's step and decoder as one fused graph in one session
            (:meth:`step_decode`; ``edge.runtime.backends.ort.fuse_graphs``; default on:
            faster at batch 16, within the noise at batch 1 on 2 cores; docs/runtime.md,
            "CPU rollout").

    The constructor only stores arguments; call :meth:`activate` (or use ``with``).
    """

    def __init__(self, model_dir: str | os.PathLike[str],
                 runner_factory: RunnerFactory | None = None, verify: bool = True,
                 fuse_step_decoder: bool = True):
        self.model_dir = Path(model_dir)
        self.runner_factory = runner_factory
        self.verify = verify
        self.fuse_step_decoder = fuse_step_decoder
        self._fused: dict[int, Runner] = {}
        self._manifest: ModelManifest | None = None
        self._sha256 = ""
        self._runners: dict[str, Runner] = {}
        self._launcher: Any = None
        self._device_users: list[Any] = []

    # -- lifecycle ---------------------------------------------------------------------
    def activate(self) -> WorldModel:
        """Load and verify ``model.json`` and activate a runner per graph.

        Raises:
            ManifestError: the manifest is malformed or a graph's sha256 does not match.
            BackendError: a graph could not be loaded.
        """
        if self._manifest is not None:
            return self
        manifest = load_model_dir(self.model_dir, verify=self.verify)
        factory = self.runner_factory or make_runner_factory("cpu")
        runners: dict[str, Runner] = {}
        try:
            for key, g in manifest.graphs.items():
                runners[key] = factory(self.model_dir / g.file).activate()
            if _device_resident(runners, manifest):
                self._launcher = _activate_launcher()
            elif self.fuse_step_decoder:
                _fused_runners(manifest, runners, self._fused)
        except BaseException:
            for r in [*runners.values(), *self._fused.values()]:
                r.deactivate()
            self._fused = {}
            raise
        self._runners = runners
        self._sha256 = model_sha256(self.model_dir)
        self._manifest = manifest
        return self

    @property
    def on_device(self) -> bool:
        """True when every step and decoder graph runs as a device executor (the
        ``tensorrt`` backend): rollouts then run on the GPU through
        ``edge.runtime.cuda_step.CudaRolloutStep`` (kernels between the engines, one CUDA graph)."""
        return self._launcher is not None

    @property
    def kernel_launcher(self) -> Any:
        """The activated ``kernels.launcher.KernelLauncher`` of a device-resident model.

        Raises:
            CallOrderError: the model is not activated or not on the device.
        """
        if self._launcher is None:
            raise CallOrderError(f"WorldModel({self.model_dir}).kernel_launcher: the model is "
                                 f"not activated on the device (backend 'tensorrt')")
        return self._launcher

    def register_device_user(self, user: Any) -> None:
        """Have :meth:`deactivate` call ``user.close()`` first (device buffers of a rollout)."""
        self._device_users.append(user)

    def unregister_device_user(self, user: Any) -> None:
        """Forget ``user`` (it was closed by its owner)."""
        self._device_users = [u for u in self._device_users if u is not user]

    @property
    def backend(self) -> str:
        """The backend the graphs run on (``auto`` resolved), e.g. ``"cpu"``; ``""`` when
        not activated."""
        names = {r.backend for r in self._runners.values()}
        return ",".join(sorted(names))

    def engine_report(self) -> dict[str, dict[str, str]] | None:
        """Per graph, how its TensorRT engine was obtained (``action`` loaded/built,
        ``reason``, ``path``); None for backends without engines."""
        engines: dict[str, Any] = {k: r for k, r in self._runners.items()
                                   if getattr(r, "engine_action", "")}
        rows = {k: {"action": r.engine_action, "reason": r.engine_reason,
                    "path": str(r.engine_path)} for k, r in engines.items()}
        return rows or None

    def deactivate(self) -> None:
        """Free every rollout's device buffers, the kernels and every runner."""
        for user in self._device_users:
            user.close()
        self._device_users = []
        if self._launcher is not None:
            self._launcher.deactivate()
            self._launcher = None
        for r in [*self._runners.values(), *self._fused.values()]:
            r.deactivate()
        self._runners, self._fused = {}, {}
        self._manifest = None

    def __enter__(self) -> WorldModel:
        return self.activate()

    def __exit__(self, *exc: object) -> None:
        self.deactivate()

    # -- properties ----------------------------------------------------------------------
    @property
    def manifest(self) -> ModelManifest:
        """The verified manifest. Raises :class:`CallOrderError` before :meth:`activate`."""
        if self._manifest is None:
            raise CallOrderError(f"WorldModel({self.model_dir}): call activate() first")
        return self._manifest

    @property
    def contract(self) -> ModelContract:
        """The model contract (shapes, history length, residual decoding, ...)."""
        return self.manifest.contract

    @property
    def sha256(self) -> str:
        """The model's identity: sha256 of its ``model.json``."""
        self.manifest  # noqa: B018 - raises before activate()
        return self._sha256

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        """Exported batch sizes of the step and decoder graphs, ascending."""
        return self.manifest.batch_sizes

    def runner(self, key: str) -> Runner:
        """The runner of graph ``key`` (e.g. ``"step_b16"``).

        Raises:
            CallOrderError: before :meth:`activate`.
            RolloutInputError: no such graph (names the graphs the model has).
        """
        self.manifest  # noqa: B018
        try:
            return self._runners[key]
        except KeyError:
            raise RolloutInputError(
                f"graph {key!r}: not in {self.model_dir / 'model.json'}; the model has "
                f"{sorted(self._runners)} (exported batch sizes {list(self.batch_sizes)})"
            ) from None

    def plan_batches(self, n: int) -> tuple[int, int]:
        """(exported batch size B, number of chunks) to run ``n`` candidates.

        The smallest B >= n if one exists, else the largest B in ceil(n / B) chunks.
        """
        if n < 1:
            raise RolloutInputError(f"candidates: expected at least 1, found {n}")
        sizes = self.batch_sizes
        for b in sizes:
            if b >= n:
                return b, 1
        b = sizes[-1]
        return b, -(-n // b)

    # -- graphs --------------------------------------------------------------------------
    def encode(self, frame: np.ndarray) -> np.ndarray:
        """Encode one RGB frame uint8 ``[H, W, 3]`` to a latent float32 ``[C, h, w]``.

        Raises:
            RolloutInputError: wrong dtype or size (names expected and found).
        """
        h, w = self.contract.resolution
        if not isinstance(frame, np.ndarray) or frame.dtype != np.uint8 \
                or frame.shape != (h, w, 3):
            found = (frame.dtype, frame.shape) if isinstance(frame, np.ndarray) else type(frame)
            raise RolloutInputError(f"frame: expected uint8 ({h}, {w}, 3) RGB (the model's "
                                    f"resolution), found {found}")
        x = np.ascontiguousarray(frame.transpose(2, 0, 1)[None])  # (1, 3, H, W)
        return self._runners["encoder"].infer({"frames": x})["latents"][0]

    def calibrate(self, latents: np.ndarray, actions: np.ndarray,
                  dof_mask: np.ndarray) -> np.ndarray:
        """Run the calibration graph.

        Args:
            latents: float32 ``[K*L+1, C, h, w]``.
            actions: float32 ``[K*L+1, A]`` (SI units).
            dof_mask: float32 ``[A]`` (1 controllable, 0 absent).

        Returns:
            The context float32 ``context_shape`` (``[K, D, h, w]``).
        """
        spec = self.manifest.graph("calibration")
        feeds = {"calibration_latents": latents, "calibration_actions": actions,
                 "dof_mask": dof_mask}
        for ts in spec.inputs:
            ts.check(feeds[ts.name], f"calibration input '{ts.name}'")
        return self._runners["calibration"].infer(feeds)["context"]

    def _batched(self, kind: str, batch: int) -> Runner:
        runner = self._runners.get(f"{kind}_b{batch}")
        if runner is None:
            self.manifest  # noqa: B018 - raises before activate()
            raise RolloutInputError(
                f"{kind} batch {batch}: not exported by {self.model_dir}; exported batch "
                f"sizes are {list(self.batch_sizes)} (Rollout pads N candidates up to one of "
                f"them: plan_batches(N))")
        return runner

    @property
    def has_prepare(self) -> bool:
        """Whether the model prepares its start latents once per rollout (``prepare_b{B}``
        graphs: e.g. the warp model's per-DoF flow fields, made once instead of every step)."""
        return self.manifest.has_prepare

    def prepare(self, batch: int, latents: np.ndarray, context: np.ndarray,
                out: np.ndarray) -> np.ndarray:
        """Run ``prepare_b{batch}``: start latents float32 ``[B, C, h, w]`` and the context
        ``context_shape`` -> the latents the steps start from, written into ``out``
        (``[B, C, h, w]``). A model without prepare graphs copies ``latents``.

        Raises:
            RolloutInputError: ``batch`` is not an exported batch size (names those).
        """
        if not self.has_prepare:
            np.copyto(out, latents)
            return out
        return self._batched("prepare", batch).infer(
            {"start_latents": latents, "context": context}, {"latents": out})["latents"]

    def step(self, batch: int, feeds: Mapping[str, np.ndarray], out: np.ndarray) -> np.ndarray:
        """Run ``step_b{batch}`` writing ``next_latent`` float32 ``[B, C, h, w]`` into ``out``.

        Raises:
            RolloutInputError: ``batch`` is not an exported batch size (names those).
        """
        return self._batched("step", batch).infer(feeds, {"next_latent": out})["next_latent"]

    def step_decode(self, batch: int, feeds: Mapping[str, np.ndarray], next_out: np.ndarray,
                    frames_out: np.ndarray) -> None:
        """:meth:`step` then :meth:`decode` of its ``next_latent`` (one fused session run
        where the model was activated with ``fuse_step_decoder``).

        Args:
            batch: an exported batch size B.
            feeds: the step graph's inputs.
            next_out: float32 ``[B, C, h, w]``, receives ``next_latent``.
            frames_out: float32 ``[B, 3, H, W]``, receives the decoded frames.

        Raises:
            RolloutInputError: ``batch`` is not an exported batch size.
        """
        fused = self._fused.get(batch)
        if fused is None:
            self.step(batch, feeds, next_out)
            self.decode(batch, next_out, frames_out)
            return
        fused.infer(feeds, {"next_latent": next_out, "frames": frames_out})

    @property
    def has_robot_mask(self) -> bool:
        """Whether the decoder also predicts the robot mask (``contract.decoder_outputs``)."""
        return "robot_mask" in tuple(getattr(self.contract, "decoder_outputs", ()) or ())

    def decode_robot_mask(self, batch: int, latents: np.ndarray, frames_out: np.ndarray,
                          mask_out: np.ndarray) -> np.ndarray:
        """Run ``decoder_b{batch}`` for both outputs: latents ``[B, C, h, w]`` -> frames
        float32 ``[B, 3, H, W]`` in ``frames_out`` and the robot mask float32
        ``[B, 1, H, W]`` (0..1) in ``mask_out``; returns ``mask_out``.

        Raises:
            RolloutInputError: the model predicts no robot mask, or ``batch`` is not an
                exported batch size.
        """
        if not self.has_robot_mask:
            raise RolloutInputError(f"{self.model_dir}: the decoder predicts no robot mask "
                                    f"(model.json contract.decoder_outputs)")
        return self._batched("decoder", batch).infer(
            {"latents": latents}, {"frames": frames_out, "robot_mask": mask_out})["robot_mask"]

    def decode(self, batch: int, latents: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Run ``decoder_b{batch}``: latents ``[B, C, h, w]`` -> float32 ``[B, 3, H, W]`` in out.

        Raises:
            RolloutInputError: ``batch`` is not an exported batch size (names those).
        """
        return self._batched("decoder", batch).infer({"latents": latents},
                                                     {"frames": out})["frames"]


def _device_resident(runners: Mapping[str, Runner], manifest: ModelManifest) -> bool:
    """Whether every step/decoder runner is a device executor (has ``enqueue``)."""
    batched = [r for k, r in runners.items() if k.startswith(("step_b", "decoder_b"))]
    return bool(batched) and all(callable(getattr(r, "enqueue", None)) for r in batched)


def _fused_runners(manifest: ModelManifest, runners: Mapping[str, Runner],
                   out: dict[int, Runner]) -> None:
    """Per batch size, the step and decoder graphs fused into one ONNX Runtime session
    (activated into ``out`` one by one, so a failure leaves only those to free)."""
    from edge.runtime.backends.ort import OrtRunner, fuse_graphs

    for b in manifest.batch_sizes:
        step, dec = runners.get(f"step_b{b}"), runners.get(f"decoder_b{b}")
        if not isinstance(step, OrtRunner) or not isinstance(dec, OrtRunner):
            continue
        blob = fuse_graphs(step.path, dec.path, [("next_latent", "latents")])
        out[b] = step.derived(f"step_decoder_b{b}.onnx", blob).activate()


def _activate_launcher() -> Any:
    """The rollout kernels in the device's primary context (lazy pycuda import)."""
    from kernels.errors import KernelError
    from kernels.launcher import KernelLauncher

    try:
        return KernelLauncher().activate()
    except KernelError as exc:
        raise BackendError(f"backend 'tensorrt': the rollout kernels cannot load on this "
                           f"device: {exc}") from exc


def load_model(model_dir: str | os.PathLike[str], backend: str = "cpu",
               intra_op_num_threads: int | None = None) -> WorldModel:
    """Load, verify and activate a model folder with the named backend.

    Raises:
        ManifestError, BackendError, BackendUnavailableError.
    """
    factory = make_runner_factory(backend, intra_op_num_threads=intra_op_num_threads)
    return WorldModel(model_dir, runner_factory=factory).activate()
