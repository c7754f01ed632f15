"""Native TensorRT runner with pycuda, in the device's primary CUDA context.

Written against the TensorRT 10.3-11 Python API (named tensors, ``execute_async_v3``).
TensorRT cannot be installed on any machine this project has, so this runner has never
run: it is imported lazily and unverified until it runs on a JetPack device
(docs/runtime.md). The primary context is the one the CUDA runtime, the rollout kernels
(``kernels.launcher``) and PyTorch use, so device pointers can be shared with them.

Engines are built from the ONNX file on first use and cached next to it (or in
``engine_dir``) under the sha256 of the ONNX bytes and the TensorRT version.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edge.errors import MissingDependencyError
from edge.runtime.backends.base import Runner
from edge.runtime.errors import BackendError

__all__ = ["TensorrtRunner"]


def _import_tensorrt() -> tuple[Any, Any]:
    try:
        import tensorrt as trt
    except ImportError as exc:
        raise MissingDependencyError("tensorrt", "nvidia", "The 'tensorrt' backend") from exc
    try:
        import pycuda.driver as cuda
    except ImportError as exc:
        raise MissingDependencyError("pycuda", "nvidia", "The 'tensorrt' backend") from exc
    return trt, cuda


class TensorrtRunner(Runner):
    """One ONNX graph as a TensorRT engine.

    Args:
        path: ONNX file.
        engine_dir: where built engines are cached (default: beside the ONNX file).
        device_ordinal: CUDA device index.
        workspace_bytes: builder workspace limit.
        fp16: allow FP16 kernels.
    """

    backend = "tensorrt"

    def __init__(self, path: str | Path, engine_dir: str | Path | None = None,
                 device_ordinal: int = 0, workspace_bytes: int = 1 << 30, fp16: bool = False):
        super().__init__(path)
        self.engine_dir = Path(engine_dir) if engine_dir is not None else None
        self.device_ordinal = device_ordinal
        self.workspace_bytes = workspace_bytes
        self.fp16 = fp16
        self._trt: Any = None
        self._cuda: Any = None
        self._ctx: Any = None
        self._engine: Any = None
        self._exec: Any = None
        self._stream: Any = None
        self._dev: dict[str, Any] = {}
        self._host_out: dict[str, np.ndarray] = {}

    def _engine_path(self, trt: Any) -> Path:
        digest = hashlib.sha256(self.path.read_bytes()).hexdigest()[:16]
        folder = self.engine_dir or self.path.parent
        return folder / f"{self.path.stem}.{digest}.trt{trt.__version__}.engine"

    def _build(self, trt: Any, logger: Any) -> bytes:
        builder = trt.Builder(logger)
        network = builder.create_network(0)  # explicit batch is the only mode in TRT 10+
        parser = trt.OnnxParser(network, logger)
        if not parser.parse(self.path.read_bytes()):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise BackendError(f"{self.path}: TensorRT's ONNX parser rejected the graph: "
                               f"{errors}")
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(self.workspace_bytes))
        if self.fp16:
            config.set_flag(trt.BuilderFlag.FP16)
        blob = builder.build_serialized_network(network, config)
        if blob is None:
            raise BackendError(f"{self.path}: TensorRT could not build an engine")
        return bytes(blob)

    def _activate(self) -> None:
        trt, cuda = _import_tensorrt()
        cuda.init()
        self._ctx = cuda.Device(self.device_ordinal).retain_primary_context()
        self._ctx.push()
        try:
            logger = trt.Logger(trt.Logger.WARNING)
            cached = self._engine_path(trt)
            if cached.is_file():
                blob = cached.read_bytes()
            else:
                from edge.fileio import atomic_write

                blob = self._build(trt, logger)
                atomic_write(cached, lambda f: f.write(blob))
            self._engine = trt.Runtime(logger).deserialize_cuda_engine(blob)
            if self._engine is None:
                raise BackendError(f"{cached}: TensorRT could not deserialise the engine "
                                   f"(delete it to rebuild)")
            self._exec = self._engine.create_execution_context()
            self._stream = cuda.Stream()
            ins, outs = [], []
            for i in range(self._engine.num_io_tensors):
                name = self._engine.get_tensor_name(i)
                shape = tuple(self._engine.get_tensor_shape(name))
                dtype = np.dtype(trt.nptype(self._engine.get_tensor_dtype(name)))
                self._dev[name] = cuda.mem_alloc(max(1, int(np.prod(shape)) * dtype.itemsize))
                self._exec.set_tensor_address(name, int(self._dev[name]))
                if self._engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
                    ins.append(name)
                else:
                    outs.append(name)
                    self._host_out[name] = cuda.pagelocked_empty(shape, dtype)
            self.input_names, self.output_names = tuple(ins), tuple(outs)
            self._trt, self._cuda = trt, cuda
        except BaseException:
            self._ctx.pop()
            self._ctx.detach()
            self._ctx = None
            raise

    def _infer(self, feeds: Mapping[str, np.ndarray],
               outputs: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray]:
        cuda = self._cuda
        for name, arr in feeds.items():
            cuda.memcpy_htod_async(self._dev[name], np.ascontiguousarray(arr), self._stream)
        if not self._exec.execute_async_v3(self._stream.handle):
            raise BackendError(f"{self.path.name}: TensorRT execution failed")
        for name in self.output_names:
            cuda.memcpy_dtoh_async(self._host_out[name], self._dev[name], self._stream)
        self._stream.synchronize()
        result = {}
        for name, host in self._host_out.items():
            if outputs and name in outputs:
                outputs[name][...] = host
                result[name] = outputs[name]
            else:
                result[name] = host.copy()
        return result

    def device_pointers(self) -> dict[str, int]:
        """Device addresses of every I/O tensor (for ``edge.cuda_step`` executors)."""
        return {k: int(v) for k, v in self._dev.items()}

    def _deactivate(self) -> None:
        if self._stream is not None:
            self._stream.synchronize()
        for alloc in self._dev.values():
            alloc.free()
        self._dev.clear()
        self._host_out.clear()
        self._exec = self._engine = self._stream = None
        if self._ctx is not None:
            self._ctx.pop()
            self._ctx.detach()
            self._ctx = None
