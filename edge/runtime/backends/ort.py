"""ONNX Runtime runners: CPU (default), CUDA and TensorRT execution providers.

The CUDA and TensorRT execution providers are used only when
``onnxruntime.get_available_providers()`` lists them (the ``onnxruntime-gpu`` build);
neither could be installed on the machines this project has, so those two runners are
thin and unverified (docs/runtime.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from edge.runtime.backends.base import Runner
from edge.runtime.errors import BackendError, BackendUnavailableError

if TYPE_CHECKING:
    import onnxruntime

__all__ = ["OrtCpuRunner", "OrtCudaRunner", "OrtRunner", "OrtTensorrtRunner", "fuse_graphs"]


def fuse_graphs(first: Path, second: Path, io_map: list[tuple[str, str]]) -> bytes:
    """One ONNX graph running ``first`` then ``second`` (graph-level fusion: one session
    run, one thread pool, instead of two).

    ``second``'s node and value names are prefixed so they cannot collide; its inputs named
    in ``io_map`` (``(output of first, input of second)``) are fed by ``first``; the outputs
    are ``first``'s then ``second``'s. The files are not changed.

    Raises:
        BackendError: the graphs cannot be read or composed.
    """
    import onnx
    import onnx.compose

    try:
        a, b = onnx.load(str(first)), onnx.load(str(second))
        b = onnx.compose.add_prefix(b, "fused_2/", rename_inputs=False, rename_outputs=False)
        outputs = [o.name for o in a.graph.output] + [o.name for o in b.graph.output]
        merged = onnx.compose.merge_models(a, b, io_map=io_map, outputs=outputs)
    except Exception as exc:  # onnx raises ValueError, OSError, DecodeError, ...
        raise BackendError(f"{first.name} + {second.name}: cannot fuse the graphs: {exc}") from exc
    return merged.SerializeToString()


class OrtRunner(Runner):
    """One ONNX graph in an ONNX Runtime session.

    Args:
        path: ONNX file.
        intra_op_num_threads: threads inside one operator (None: ONNX Runtime's default,
            one per physical core).
        provider_options: options of the execution provider (passed unchanged).
        allow_spinning: let idle intra-op threads spin between runs (default False: they
            sleep; see :meth:`session_options`).
        model_bytes: the serialized graph to run instead of reading ``path`` (a graph
            derived in memory, e.g. :func:`fuse_graphs`); ``path`` then only names it.
    """

    backend = "cpu"
    provider = "CPUExecutionProvider"

    def __init__(self, path: str | Path, intra_op_num_threads: int | None = None,
                 provider_options: Mapping[str, object] | None = None,
                 allow_spinning: bool = False, model_bytes: bytes | None = None):
        super().__init__(path)
        self.model_bytes = model_bytes
        self.intra_op_num_threads = intra_op_num_threads
        self.allow_spinning = allow_spinning
        self.provider_options = dict(provider_options or {})
        self._session: onnxruntime.InferenceSession | None = None
        self._binding: onnxruntime.IOBinding | None = None

    def _activate(self) -> None:
        try:
            import onnxruntime as ort
        except ImportError as exc:  # pragma: no cover - a dependency of syncedge
            raise BackendUnavailableError(
                f"backend '{self.backend}': onnxruntime is not installed "
                f"(pip install onnxruntime)") from exc
        if self.provider not in ort.get_available_providers():
            raise BackendUnavailableError(
                f"backend '{self.backend}': expected {self.provider} in "
                f"onnxruntime.get_available_providers(), found "
                f"{ort.get_available_providers()}")
        opts = self.session_options()
        providers = [(self.provider, self.provider_options)]
        if self.provider != "CPUExecutionProvider":
            providers.append(("CPUExecutionProvider", {}))
        try:
            source = self.model_bytes if self.model_bytes is not None else str(self.path)
            session = ort.InferenceSession(source, sess_options=opts, providers=providers)
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise BackendError(f"{self.path}: ONNX Runtime could not load the graph: "
                               f"{exc}") from exc
        self._session = session
        self.input_names = tuple(i.name for i in session.get_inputs())
        self.output_names = tuple(o.name for o in session.get_outputs())
        self._binding = session.io_binding()

    def derived(self, name: str, model_bytes: bytes | None,
                intra_op_num_threads: int | None = None) -> OrtRunner:
        """A runner of the same class and options (not active) for a graph made in memory
        (``model_bytes``; None: this runner's own graph again, a second session of it),
        with ``intra_op_num_threads`` instead of this runner's where given."""
        threads = intra_op_num_threads or self.intra_op_num_threads
        return type(self)(self.path.with_name(name), threads, self.provider_options,
                          self.allow_spinning,
                          self.model_bytes if model_bytes is None else model_bytes)

    def session_options(self) -> onnxruntime.SessionOptions:
        """The session options: ``intra_op_num_threads``, one inter-op thread, sequential
        execution, warnings off, and intra-op threads that sleep instead of spinning
        between runs unless ``allow_spinning`` (a model runs several sessions one after the
        other; a spinning pool of the idle ones takes the cores the running one needs)."""
        import onnxruntime as ort

        opts = ort.SessionOptions()
        if self.intra_op_num_threads is not None:
            opts.intra_op_num_threads = int(self.intra_op_num_threads)
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.log_severity_level = 3
        opts.add_session_config_entry("session.intra_op.allow_spinning",
                                      "1" if self.allow_spinning else "0")
        return opts

    def _infer(self, feeds: Mapping[str, np.ndarray],
               outputs: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray]:
        session, io = self._session, self._binding
        # both set by _activate; Runner.infer() calls _infer only while active
        assert session is not None and io is not None
        try:
            if not outputs:
                values = session.run(None, dict(feeds))
                return dict(zip(self.output_names, values, strict=True))
            io.clear_binding_inputs()
            io.clear_binding_outputs()
            for name, arr in feeds.items():
                io.bind_cpu_input(name, arr)
            for name in self.output_names:
                out = outputs.get(name)
                if out is None:
                    io.bind_output(name, "cpu")
                else:
                    io.bind_output(name, "cpu", 0, out.dtype, list(out.shape), out.ctypes.data)
            session.run_with_iobinding(io)
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise BackendError(f"{self.path.name}: inference failed: {exc}") from exc
        result = dict(outputs)
        for name, value in zip(self.output_names, io.get_outputs(), strict=True):
            if name not in outputs:
                result[name] = value.numpy()
        return result

    def _deactivate(self) -> None:
        self._binding = None
        self._session = None


class OrtCpuRunner(OrtRunner):
    """ONNX Runtime on the CPU (always available; the default backend)."""

    backend = "cpu"
    provider = "CPUExecutionProvider"


class OrtCudaRunner(OrtRunner):
    """ONNX Runtime's CUDA execution provider (onnxruntime-gpu; unverified here)."""

    backend = "ort-cuda"
    provider = "CUDAExecutionProvider"


class OrtTensorrtRunner(OrtRunner):
    """ONNX Runtime's TensorRT execution provider (onnxruntime-gpu; unverified here).

    ``provider_options`` may set ``trt_engine_cache_enable`` / ``trt_engine_cache_path``.
    """

    backend = "ort-trt"
    provider = "TensorrtExecutionProvider"

