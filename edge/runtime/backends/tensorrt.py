"""Native TensorRT runner with pycuda, in the device's primary CUDA context.

Written against the TensorRT 10.3-11 Python API (named tensors, ``execute_async_v3``).
TensorRT cannot be installed on any machine this project has, so this runner has never
run against the real library: it is imported lazily and tested against a fake
``tensorrt`` and a fake ``pycuda.driver`` (tests/fake_tensorrt.py, tests/fake_cuda.py);
what only a JetPack device can prove is listed in docs/runtime.md. The primary context is
the one the CUDA runtime, the rollout kernels (``kernels.launcher``) and PyTorch use, so
device pointers are shared with them.

Engines come from the one engine path, :func:`edge.runtime.engine_build.get_engine`: the
:class:`~edge.runtime.engine_cache.EngineCache` under ``state_root()/engines`` keyed by the graph's
sha256 (from ``model.json``), the TensorRT version, the GPU's compute capability, the
precision mode and the input shapes, the same key ``syncedge export engine`` fills. A
missing or stale entry is built once and cached; nothing is written beside the graph (a
bundle slot stays as installed).

Besides :meth:`infer` (host arrays in and out, for the encoder and calibration graphs),
the runner is a device executor (``edge.runtime.cuda_step.DeviceExecutor``): :meth:`enqueue` runs
the engine on given device pointers on a given stream, with no host copy, no
synchronisation and no allocation, so it can be captured into a CUDA graph.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edge.errors import EdgeError, MissingDependencyError
from edge.manifest import GraphSpec, ManifestError, load_model_dir
from edge.runtime.backends.base import Runner
from edge.runtime.device_copies import host_copy
from edge.runtime.engine_cache import EngineCache
from edge.runtime.errors import BackendError

__all__ = ["TensorrtRunner", "graph_spec_for"]


def _import_pycuda() -> Any:
    try:
        import pycuda.driver as cuda
    except ImportError as exc:
        raise MissingDependencyError("pycuda", "nvidia", "The 'tensorrt' backend") from exc
    return cuda


def graph_spec_for(path: Path) -> GraphSpec:
    """The :class:`~edge.manifest.GraphSpec` of the graph file ``path`` from the
    ``model.json`` beside it.

    Raises:
        BackendError: no manifest beside the file, or it does not list the file.
    """
    try:
        manifest = load_model_dir(path.parent, verify=False)
    except ManifestError as exc:
        raise BackendError(f"{path}: the tensorrt backend keys engines by the graph's sha256 "
                           f"and shapes from the model.json beside it: {exc}") from exc
    for g in manifest.graphs.values():
        if g.file == path.name:
            return g
    raise BackendError(f"{path}: expected a graph listed in {path.parent / 'model.json'}, "
                       f"found files {sorted(g.file for g in manifest.graphs.values())}")


class TensorrtRunner(Runner):
    """One ONNX graph as a TensorRT engine (from the engine cache, built when missing).

    Args:
        path: ONNX file (inside a model folder with its ``model.json``).
        graph: the graph's spec; default: read from the ``model.json`` beside ``path``.
        cache_dir: engine cache root (default ``state_root()/engines``).
        precision: build mode, ``"typed"`` (default) or ``"flag-fp16"``
            (``edge.runtime.engine_build.PRECISIONS``).
        device_ordinal: CUDA device index.
        workspace_bytes: builder workspace limit (part of the cache key).

    After :meth:`activate`, :attr:`engine_action` is ``"loaded"`` or ``"built"`` and
    :attr:`engine_reason` says why it was built (``"missing"``, ``"stale: ..."``,
    ``"corrupt: ..."``, ``"mismatch: ..."``).
    """

    backend = "tensorrt"

    def __init__(self, path: str | Path, graph: GraphSpec | None = None,
                 cache_dir: str | Path | None = None, precision: str = "typed",
                 device_ordinal: int = 0, workspace_bytes: int | None = None):
        super().__init__(path)
        self.graph = graph
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.precision = precision
        self.device_ordinal = device_ordinal
        self.workspace_bytes = workspace_bytes
        self.engine_action = ""
        self.engine_reason = ""
        self.engine_path: Path | None = None
        self._trt: Any = None
        self._cuda: Any = None
        self._ctx: Any = None
        self._engine: Any = None
        self._exec: Any = None
        self._stream: Any = None
        self._dev: dict[str, Any] = {}
        self._host_out: dict[str, np.ndarray] = {}
        self._specs: dict[str, tuple[tuple[int, ...], np.dtype]] = {}

    def _activate(self) -> None:
        from edge.runtime.engine_build import (
            DEFAULT_WORKSPACE_BYTES,
            TensorRT,
            get_engine,
            import_tensorrt,
        )

        trt = import_tensorrt()
        cuda = _import_pycuda()
        spec = self.graph or graph_spec_for(self.path)
        cuda.init()
        device = cuda.Device(self.device_ordinal)
        self._ctx = device.retain_primary_context()
        self._ctx.push()
        self._trt, self._cuda = trt, cuda
        try:
            major, minor = device.compute_capability()
            rt = TensorRT(trt, f"{major}.{minor}")
            cache = EngineCache(self.cache_dir)
            try:
                result = get_engine(self.path.parent, spec, rt, cache, self.precision,
                                    workspace_bytes=self.workspace_bytes or DEFAULT_WORKSPACE_BYTES)
            except EdgeError as exc:
                raise BackendError(f"{self.path.name}: no usable TensorRT engine: {exc}") from exc
            self._engine = result.engine
            self.engine_action, self.engine_reason = result.action, result.reason
            self.engine_path = result.path
            self._exec = self._engine.create_execution_context()
            self._stream = cuda.Stream()
            ins, outs = [], []
            for i in range(self._engine.num_io_tensors):
                name = self._engine.get_tensor_name(i)
                shape = tuple(int(d) for d in self._engine.get_tensor_shape(name))
                dtype = np.dtype(trt.nptype(self._engine.get_tensor_dtype(name)))
                self._specs[name] = (shape, dtype)
                self._dev[name] = cuda.mem_alloc(max(1, int(np.prod(shape)) * dtype.itemsize))
                if self._engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
                    ins.append(name)
                else:
                    outs.append(name)
                    self._host_out[name] = cuda.pagelocked_empty(shape, dtype)
            self.input_names, self.output_names = tuple(ins), tuple(outs)
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        """Free device memory and the context, whatever was made (activation failure too)."""
        if self._stream is not None:
            self._stream.synchronize()
        for alloc in self._dev.values():
            alloc.free()
        self._dev.clear()
        self._host_out.clear()
        self._specs.clear()
        self._exec = self._engine = self._stream = None
        if self._ctx is not None:
            self._ctx.pop()
            self._ctx.detach()
            self._ctx = None

    def _bind(self, pointers: Mapping[str, int]) -> None:
        for name in self.input_names + self.output_names:
            self._exec.set_tensor_address(name, int(pointers[name]))

    def _infer(self, feeds: Mapping[str, np.ndarray],
               outputs: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray]:
        cuda = self._cuda
        held = []
        for name, arr in feeds.items():
            shape, dtype = self._specs[name]
            x = np.ascontiguousarray(arr)
            if x.shape != shape or x.dtype != dtype:
                raise BackendError(f"{self.path.name}: input '{name}': expected {dtype} "
                                   f"{list(shape)}, found {x.dtype} {list(x.shape)}")
            held.append(x)  # alive until the stream is synchronised
            host_copy(cuda, "htod", self._dev[name], x, self._stream)
        self._bind({k: int(v) for k, v in self._dev.items()})
        if not self._exec.execute_async_v3(self._stream.handle):
            raise BackendError(f"{self.path.name}: TensorRT execution failed")
        for name in self.output_names:
            host_copy(cuda, "dtoh", self._host_out[name], self._dev[name], self._stream)
        self._stream.synchronize()
        result = {}
        for name, host in self._host_out.items():
            if outputs and name in outputs:
                outputs[name][...] = host
                result[name] = outputs[name]
            else:
                result[name] = host.copy()
        return result

    def enqueue(self, inputs: Mapping[str, int], outputs: Mapping[str, int],
                stream_handle: int) -> None:
        """Run the engine on device pointers, enqueued on ``stream_handle``.

        No host copy, no synchronisation, no allocation (capturable into a CUDA graph).

        Args:
            inputs: every input name -> device pointer (``int``) of its static shape and
                dtype.
            outputs: output name -> device pointer; an output not given is written to the
                runner's own buffer (e.g. the warp decoder's ``robot_mask``).
            stream_handle: ``CUstream`` as an int.

        Raises:
            CallOrderError: the runner is not active.
            BackendError: an input is missing or unknown, or ``execute_async_v3`` failed.
        """
        if not self._active:
            from edge.runtime.errors import CallOrderError

            raise CallOrderError(f"TensorrtRunner({self.path.name}).enqueue: call activate() "
                                 f"first")
        missing = [n for n in self.input_names if n not in inputs]
        unknown = [n for n in list(inputs) + list(outputs)
                   if n not in self.input_names + self.output_names]
        if missing or unknown:
            raise BackendError(f"{self.path.name}: enqueue expected inputs "
                               f"{list(self.input_names)}, found {sorted(inputs)} (missing "
                               f"{missing}, unknown {unknown})")
        ptrs = {n: int(self._dev[n]) for n in self.output_names}
        ptrs.update({k: int(v) for k, v in inputs.items()})
        ptrs.update({k: int(v) for k, v in outputs.items()})
        self._bind(ptrs)
        if not self._exec.execute_async_v3(int(stream_handle)):
            raise BackendError(f"{self.path.name}: TensorRT execute_async_v3 failed")

    def device_pointers(self) -> dict[str, int]:
        """Device addresses of the runner's own I/O buffers (name -> pointer)."""
        return {k: int(v) for k, v in self._dev.items()}

    def tensor_spec(self, name: str) -> tuple[tuple[int, ...], np.dtype]:
        """(static shape, dtype) of I/O tensor ``name`` in the engine."""
        return self._specs[name]

    def _deactivate(self) -> None:
        self._release()
