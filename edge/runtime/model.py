"""The loaded world model: immutable after :meth:`WorldModel.activate`, shared by rollouts.

Holds the verified manifest and one runner per graph (``encoder``, ``calibration``,
``step_b{B}``, ``decoder_b{B}``). Shapes come from ``model.json``, never from constants.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import numpy as np

from edge.manifest import ModelContract, ModelManifest, load_model_dir, model_sha256
from edge.runtime.backends import Runner, RunnerFactory, make_runner_factory
from edge.runtime.errors import BackendError, CallOrderError, RolloutInputError

__all__ = ["RowWork", "WorldModel", "default_candidate_workers", "load_model"]

#: The caller's per-row work around a batched call: ``f(first, stop)`` for rows
#: ``first..stop-1`` (:meth:`WorldModel.step_decode`).
RowWork = Callable[[int, int], None]


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
        candidate_workers: where the step and decoder graphs run on ONNX Runtime's CPU
            execution provider, split the candidates of a batched call into this many
            groups that run at the same time, each in its own sessions with
            ``intra_op_num_threads // candidate_workers`` threads (at least 1). 1 (the
            default) runs a batch in one session. For a model this small, candidates in
            parallel use the cores better than ONNX Runtime's intra-op threads do
            (docs/runtime.md, "Candidates in parallel"); :func:`load_model` chooses it.

    The constructor only stores arguments; call :meth:`activate` (or use ``with``).

    Raises:
        RolloutInputError: ``candidate_workers`` < 1.
    """

    def __init__(self, model_dir: str | os.PathLike[str],
                 runner_factory: RunnerFactory | None = None, verify: bool = True,
                 fuse_step_decoder: bool = True, candidate_workers: int = 1):
        if int(candidate_workers) < 1:
            raise RolloutInputError(f"candidate_workers: expected an integer >= 1, found "
                                    f"{candidate_workers!r}")
        self.model_dir = Path(model_dir)
        self.candidate_workers = int(candidate_workers)
        self._workers: list[dict[str, Runner]] = []
        self._pool: ThreadPoolExecutor | None = None
        self._plans: dict[int, list[list[tuple[int, int]]]] = {}
        self._rows: dict[tuple[str, int], frozenset[str]] = {}
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
            else:
                if self.fuse_step_decoder:
                    _fused_runners(manifest, runners, self._fused)
                if self.candidate_workers > 1:
                    _worker_runners(manifest, runners, self._fused, self.candidate_workers,
                                    self._workers)
        except BaseException:
            for r in [*runners.values(), *self._fused.values(),
                      *(r for w in self._workers for r in w.values())]:
                r.deactivate()
            self._fused, self._workers = {}, []
            raise
        if len(self._workers) > 1:
            self._pool = ThreadPoolExecutor(len(self._workers) - 1,
                                            thread_name_prefix="syncedge-candidates")
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
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for r in [*self._runners.values(), *self._fused.values(),
                  *(r for w in self._workers for r in w.values())]:
            r.deactivate()
        self._runners, self._fused, self._workers = {}, {}, []
        self._plans, self._rows = {}, {}
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
        self._run_batched("step", batch, feeds, {"next_latent": out})
        return out

    def step_decode(self, batch: int, feeds: Mapping[str, np.ndarray], next_out: np.ndarray,
                    frames_out: np.ndarray, before: RowWork | None = None,
                    after: RowWork | None = None) -> None:
        """:meth:`step` then :meth:`decode` of its ``next_latent`` (one fused session run
        where the model was activated with ``fuse_step_decoder``).

        Args:
            batch: an exported batch size B.
            feeds: the step graph's inputs.
            next_out: float32 ``[B, C, h, w]``, receives ``next_latent``.
            frames_out: float32 ``[B, 3, H, W]``, receives the decoded frames.
            before, after: the caller's own per-row work, called as ``f(first, stop)``
                (rows ``first..stop-1`` of this batch) just before and just after those
                rows are stepped and decoded, on the thread that runs them: with candidate
                groups, each group's rows on its own thread at the same time as the other
                groups' (so the work must touch those rows only), else once for all rows.

        Raises:
            RolloutInputError: ``batch`` is not an exported batch size.
        """
        if batch not in self._fused:  # the row work in the same groups, around both calls
            self._run_batched("step", batch, feeds, {"next_latent": next_out}, before, None)
            self._run_batched("decoder", batch, {"latents": next_out}, {"frames": frames_out},
                              None, after)
            return
        self._run_batched("fused", batch, feeds, {"next_latent": next_out, "frames": frames_out},
                          before, after)

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
        self._run_batched("decoder", batch, {"latents": latents},
                          {"frames": frames_out, "robot_mask": mask_out})
        return mask_out

    def decode(self, batch: int, latents: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Run ``decoder_b{batch}``: latents ``[B, C, h, w]`` -> float32 ``[B, 3, H, W]`` in out.

        Raises:
            RolloutInputError: ``batch`` is not an exported batch size (names those).
        """
        self._run_batched("decoder", batch, {"latents": latents}, {"frames": out})
        return out

    # -- candidates in parallel --------------------------------------------------------------
    @property
    def candidate_groups(self) -> int:
        """How many groups of candidates run at the same time in a batched call (1: one
        session runs the whole batch; 0 before :meth:`activate`)."""
        if self._manifest is None:
            return 0
        return max(1, len(self._workers))

    def _runner_of(self, kind: str, batch: int, worker: int | None) -> Runner:
        """The runner of ``kind`` (``step``, ``decoder`` or ``fused``) for ``batch``: the
        model's own (``worker`` None) or a candidate worker's."""
        if worker is not None:  # never the model's own: its binding is not per thread
            return self._workers[worker][f"{kind}_b{batch}"]
        if kind == "fused":
            return self._fused[batch]
        return self._batched(kind, batch)

    def shard_plan(self, batch: int) -> list[list[tuple[int, int]]]:
        """How a batched call of exported batch size ``batch`` is split: per candidate
        group, its ``(first row, exported batch size)`` runs, in order; the groups' rows
        are contiguous, near-equal and cover ``0..batch-1`` exactly. One group holding one
        ``(0, batch)`` run where the batch is not split (one worker, a batch smaller than
        the number of workers, or rows that the exported sizes cannot cover exactly).

        Raises:
            RolloutInputError: ``batch`` is not an exported batch size.
        """
        plan = self._plans.get(batch)
        if plan is not None:
            return plan
        self._batched("step", batch)  # raises for an unexported batch
        plan = [[(0, batch)]]
        k = min(len(self._workers), batch)
        sizes = sorted((s for s in self.batch_sizes if s < batch), reverse=True)
        if k > 1 and sizes:
            groups, row = [], 0
            for g in range(k):
                n = batch // k + (1 if g < batch % k else 0)
                runs = []
                while n > 0:
                    s = next((s for s in sizes if s <= n), 0)
                    if s == 0:
                        break
                    runs.append((row, s))
                    row, n = row + s, n - s
                if n > 0:
                    groups = []
                    break
                groups.append(runs)
            if groups:
                plan = groups
        self._plans[batch] = plan
        return plan

    def _run_batched(self, kind: str, batch: int, feeds: Mapping[str, np.ndarray],
                     outputs: Mapping[str, np.ndarray], before: RowWork | None = None,
                     after: RowWork | None = None) -> None:
        """Run ``kind``'s graph for ``batch`` rows into ``outputs`` (every output batched on
        its first axis), split over the candidate workers by :meth:`shard_plan`; a batch
        that is not split runs in the model's own session (all its intra-op threads).
        ``before``/``after``: as in :meth:`step_decode`."""
        plan = self.shard_plan(batch) if self._workers else [[(0, batch)]]
        if len(plan) == 1:
            if before is not None:
                before(0, batch)
            self._runner_of(kind, batch, None).infer(feeds, outputs)
            if after is not None:
                after(0, batch)
            return
        rows = self._batched_inputs("step" if kind == "fused" else kind, batch)

        def group(worker: int) -> None:
            first, stop = plan[worker][0][0], plan[worker][-1][0] + plan[worker][-1][1]
            if before is not None:
                before(first, stop)
            for row, s in plan[worker]:
                part = {name: arr[row:row + s] if name in rows else arr
                        for name, arr in feeds.items()}
                outs = {name: arr[row:row + s] for name, arr in outputs.items()}
                self._runner_of(kind, s, worker).infer(part, outs)
            if after is not None:
                after(first, stop)

        assert self._pool is not None  # made in activate() with the workers
        futures = [self._pool.submit(group, w) for w in range(1, len(plan))]
        try:
            group(0)
        finally:
            wait(futures)
        for f in futures:
            f.result()

    def _batched_inputs(self, kind: str, batch: int) -> frozenset[str]:
        """The inputs of ``{kind}_b{batch}`` with one row per candidate: first axis
        ``batch`` there and the batch size in every smaller exported graph of ``kind``
        (a shared input, e.g. the context, has the same shape in all of them)."""
        key = (kind, batch)
        names = self._rows.get(key)
        if names is None:
            smaller = [self.manifest.graph(f"{kind}_b{s}") for s in self.batch_sizes
                       if s < batch]
            names = frozenset(
                ts.name for ts in self.manifest.graph(f"{kind}_b{batch}").inputs
                if ts.shape and ts.shape[0] == batch
                and all(t.shape[0] == g.batch for g in smaller for t in g.inputs
                        if t.name == ts.name))
            self._rows[key] = names
        return names


def _worker_runners(manifest: ModelManifest, runners: Mapping[str, Runner],
                    fused: Mapping[int, Runner], workers: int,
                    out: list[dict[str, Runner]]) -> None:
    """Per candidate worker, its own sessions of the step, decoder and fused graphs of every
    exported batch size but the largest (a group never runs a whole batch), each with the
    model's intra-op threads divided by ``workers`` (activated into ``out`` one by one, so a
    failure leaves only those to free). Nothing is made unless every step and decoder graph
    runs on ONNX Runtime's CPU execution provider."""
    from edge.runtime.backends.ort import OrtCpuRunner

    batched = {k: r for k, r in runners.items() if k.startswith(("step_b", "decoder_b"))}
    if not batched or not all(type(r) is OrtCpuRunner for r in batched.values()):
        return
    sizes = manifest.batch_sizes[:-1]
    graphs: dict[str, OrtCpuRunner] = {  # type: ignore[misc]
        k: r for k, r in batched.items() if int(k.rsplit("_b", 1)[1]) in sizes}
    graphs.update({f"fused_b{b}": r for b, r in fused.items() if b in sizes})  # type: ignore[misc]
    for _ in range(workers):
        own: dict[str, Runner] = {}
        out.append(own)
        for key, r in graphs.items():
            threads = max(1, (r.intra_op_num_threads or _cores()) // workers)
            own[key] = r.derived(r.path.name, None, threads).activate()


def _cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


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


def default_candidate_workers(backend: str, intra_op_num_threads: int | None) -> int:
    """The candidate workers :func:`load_model` chooses: on the ``cpu`` backend one per
    thread (``intra_op_num_threads``, else one per core), at most 4; 1 on every other
    backend. Measured on 2 cores (docs/runtime.md, "Candidates in parallel"): the batch-16
    step took 22 ms with one session on 2 intra-op threads and 10.6 ms as two groups of
    candidates on 1 thread each."""
    if backend != "cpu":
        return 1
    return max(1, min(4, intra_op_num_threads or _cores()))


def load_model(model_dir: str | os.PathLike[str], backend: str = "cpu",
               intra_op_num_threads: int | None = None,
               candidate_workers: int | None = None) -> WorldModel:
    """Load, verify and activate a model folder with the named backend.

    Args:
        model_dir: the model folder (``model.json`` and its graphs).
        backend: a backend name or ``auto``.
        intra_op_num_threads: ONNX Runtime threads (None: one per core), shared out among
            the candidate workers.
        candidate_workers: groups of candidates run at the same time
            (:class:`WorldModel`); None: :func:`default_candidate_workers`.

    Raises:
        ManifestError, BackendError, BackendUnavailableError, RolloutInputError.
    """
    from edge.runtime.backends import resolve_backend

    concrete = resolve_backend(backend)
    if candidate_workers is None:
        candidate_workers = default_candidate_workers(concrete, intra_op_num_threads)
    factory = make_runner_factory(concrete, intra_op_num_threads=intra_op_num_threads)
    return WorldModel(model_dir, runner_factory=factory,
                      candidate_workers=candidate_workers).activate()
