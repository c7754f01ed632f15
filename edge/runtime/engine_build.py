"""The one TensorRT engine path: build, cache, check, load (used by ``export engine`` and
the runtime's ``tensorrt`` backend).

Written against the TensorRT 10.3-11 Python API (NVIDIA's API reference: ``trt.Builder``,
``Builder.create_network``, ``NetworkDefinitionCreationFlag.STRONGLY_TYPED``,
``trt.OnnxParser.parse_from_file``, ``IBuilderConfig.set_memory_pool_limit``,
``create_timing_cache``/``set_timing_cache``/``get_timing_cache``,
``Builder.build_serialized_network``, ``trt.Runtime.deserialize_cuda_engine``,
``ICudaEngine.num_io_tensors``/``get_tensor_name``/``get_tensor_shape``/
``get_tensor_dtype``/``get_tensor_mode``). TensorRT is imported lazily and has NOT been run
by this project: no machine available to it can install TensorRT (docs/engines.md); the
decisions are tested against a fake ``tensorrt`` module.

Precision:

- ``typed`` (default, and the only mode on TensorRT 11): a strongly typed network; the
  precision comes from the graph itself (FP16 casts and weights, INT8 Q/DQ nodes). On
  TensorRT 11 the STRONGLY_TYPED flag is deprecated and ignored because strong typing is
  always on; it is set only where the enum still has it.
- ``flag-fp16``: a weakly typed network with ``BuilderFlag.FP16``, for an FP32 graph on a
  TensorRT that still has that flag (10.x); refused where it is gone (11.x).
- INT8 without Q/DQ nodes (calibrator-based implicit quantisation) is not supported:
  export the INT8 variant (Q/DQ) and build it ``typed``.

The graph is parsed from its file (``parse_from_file``), so external weights
(``.onnx.data`` beside it) resolve. Engines live only in the :class:`EngineCache` under
the state root, never beside the graph (a bundle slot stays untouched).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from edge.errors import EdgeError, MissingDependencyError
from edge.fileio import atomic_write
from edge.manifest import GraphSpec, load_model_dir
from edge.runtime.engine_cache import CacheResult, EngineCache, EngineCacheError, EngineKey

__all__ = ["DEFAULT_WORKSPACE_BYTES", "PRECISIONS", "EngineBuildError", "EngineReport",
           "TensorRT", "build_model_engines", "build_serialized_engine", "engine_io_mismatch",
           "engine_key", "get_engine", "import_tensorrt"]

PRECISIONS = ("typed", "flag-fp16")
DEFAULT_WORKSPACE_BYTES = 1 << 30


class EngineBuildError(EdgeError, RuntimeError):
    """TensorRT could not parse or build a graph, or the requested mode is unavailable."""


def import_tensorrt() -> ModuleType:
    """Import ``tensorrt`` or raise :class:`MissingDependencyError` naming the extra."""
    try:
        import tensorrt
    except ImportError:
        raise MissingDependencyError("tensorrt", "nvidia",
                                     "building or running TensorRT engines (on the NVIDIA "
                                     "device that runs them, e.g. a JetPack Jetson)") from None
    return tensorrt


@dataclass
class TensorRT:
    """The TensorRT module and this GPU's identity, as used for keys and builds.

    Attributes:
        trt: the ``tensorrt`` module (or a test double with the same API).
        compute_capability: ``"major.minor"`` of the GPU engines are built for.
    """

    trt: Any
    compute_capability: str

    @property
    def version(self) -> str:
        """``tensorrt.__version__``."""
        return str(self.trt.__version__)

    def has_fp16_flag(self) -> bool:
        """Whether this TensorRT still has ``BuilderFlag.FP16`` (removed in 11)."""
        return hasattr(self.trt.BuilderFlag, "FP16")

    def deserialize(self, blob: bytes) -> Any:
        """``Runtime.deserialize_cuda_engine``; ``None`` when TensorRT rejects the bytes."""
        runtime = self.trt.Runtime(self.trt.Logger(self.trt.Logger.WARNING))
        return runtime.deserialize_cuda_engine(blob)


def engine_key(onnx_sha256: str, graph: GraphSpec, rt: TensorRT, precision: str,
               workspace_bytes: int = DEFAULT_WORKSPACE_BYTES) -> EngineKey:
    """The cache key of one graph's engine (ONNX sha256, TensorRT version, compute
    capability, precision mode, static input shapes and dtypes, workspace).

    Raises:
        EngineBuildError: ``precision`` is not one of :data:`PRECISIONS`.
    """
    if precision not in PRECISIONS:
        raise EngineBuildError(f"precision {precision!r}: expected one of {list(PRECISIONS)}")
    return EngineKey(onnx_sha256=onnx_sha256, trt_version=rt.version,
                     compute_capability=rt.compute_capability, precision=precision,
                     shapes=tuple((t.name, tuple(t.shape), t.dtype) for t in graph.inputs),
                     options=(("workspace_bytes", str(workspace_bytes)),))


def build_serialized_engine(onnx_path: str | os.PathLike[str], rt: TensorRT, precision: str,
                            timing_cache: bytes = b"",
                            workspace_bytes: int = DEFAULT_WORKSPACE_BYTES) -> tuple[bytes, bytes]:
    """Parse one ONNX graph from its file and build a serialized engine.

    Args:
        onnx_path: the graph (external data next to it is found by the parser).
        rt: TensorRT and the GPU's compute capability.
        precision: one of :data:`PRECISIONS`.
        timing_cache: a previous serialized timing cache for this TensorRT and GPU, or b"".
        workspace_bytes: builder workspace memory pool limit.
    Returns:
        (serialized engine, updated serialized timing cache).
    Raises:
        EngineBuildError: parse errors (the first few, with the file), a mode this
            TensorRT lacks, or a failed build.
    """
    trt = rt.trt
    if precision not in PRECISIONS:
        raise EngineBuildError(f"precision {precision!r}: expected one of {list(PRECISIONS)}")
    if precision == "flag-fp16" and not rt.has_fp16_flag():
        raise EngineBuildError(f"{onnx_path}: TensorRT {rt.version} has no BuilderFlag.FP16; "
                               f"export the FP16 variant of the model and build it 'typed'")
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = 0
    strongly = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    if precision == "typed" and strongly is not None:
        flags |= 1 << int(strongly)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise EngineBuildError(f"{onnx_path}: the TensorRT {rt.version} ONNX parser failed: "
                               + "; ".join(errors[:5]) + (" ..." if len(errors) > 5 else ""))
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_bytes)
    if precision == "flag-fp16":
        config.set_flag(trt.BuilderFlag.FP16)
    try:
        cache = config.create_timing_cache(timing_cache)
    except Exception:  # a corrupt or foreign timing cache: start an empty one
        cache = config.create_timing_cache(b"")
    config.set_timing_cache(cache, False)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise EngineBuildError(f"{onnx_path}: TensorRT {rt.version} failed to build an engine "
                               f"(see the TensorRT log above)")
    return bytes(serialized), bytes(config.get_timing_cache().serialize())


def engine_io_mismatch(engine: Any, graph: GraphSpec, trt: Any) -> str:
    """Compare a deserialised engine's I/O tensors with the graph's specs.

    Returns:
        ``""`` when every input and output of ``graph`` exists in the engine with the same
        static shape and dtype (and the engine has no other I/O tensor); otherwise what
        differs (the first difference, naming the tensor, expected and found).
    """
    found: dict[str, tuple[tuple[int, ...], str, bool]] = {}
    for i in range(int(engine.num_io_tensors)):
        name = engine.get_tensor_name(i)
        shape = tuple(int(d) for d in engine.get_tensor_shape(name))
        dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name))).name
        is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        found[name] = (shape, dtype, is_input)
    want = {t.name: (tuple(t.shape), t.dtype, True) for t in graph.inputs}
    want.update({t.name: (tuple(t.shape), t.dtype, False) for t in graph.outputs})
    for name, (shape, dtype, is_input) in want.items():
        role = "input" if is_input else "output"
        if name not in found:
            return f"{role} {name!r}: expected in the engine, found only {sorted(found)}"
        if found[name] != (shape, dtype, is_input):
            f_shape, f_dtype, f_in = found[name]
            return (f"{role} {name!r}: expected {dtype} {list(shape)}, found "
                    f"{f_dtype} {list(f_shape)} ({'input' if f_in else 'output'})")
    extra = sorted(set(found) - set(want))
    if extra:
        return f"engine tensors {extra}: not in the graph's specs"
    return ""


def get_engine(model_dir: str | os.PathLike[str], graph: GraphSpec, rt: TensorRT,
               cache: EngineCache, precision: str = "typed", force: bool = False,
               workspace_bytes: int = DEFAULT_WORKSPACE_BYTES) -> CacheResult[Any]:
    """The engine of one graph: from the cache, or built (once) and cached.

    A cached entry that does not verify, does not deserialise or whose I/O tensors do not
    match ``graph`` (another shape) is removed and rebuilt. The builder's timing cache
    (``cache.timing_cache_path``) is read before and written after a build.

    Args:
        model_dir: the model folder holding ``graph.file`` (never written).
        graph: the graph's spec from ``model.json`` (sha256, I/O shapes and dtypes).
        rt: TensorRT and the GPU's compute capability.
        cache: the engine cache (by default under ``state_root()/engines``).
        precision: one of :data:`PRECISIONS`.
        force: rebuild even when a valid entry exists.
        workspace_bytes: builder workspace limit (part of the key).

    Returns:
        :class:`~edge.runtime.engine_cache.CacheResult`: ``action`` ``"loaded"`` or ``"built"``
        (with the reason), the engine and its cache path.

    Raises:
        EngineBuildError: parse or build failure, a mode this TensorRT lacks, or a freshly
            built engine that does not deserialise or does not match the graph's shapes.
    """
    model_dir = Path(model_dir)
    key = engine_key(graph.sha256, graph, rt, precision, workspace_bytes)
    timing_path = cache.timing_cache_path(rt.version, rt.compute_capability)
    why: list[str] = []

    def build() -> bytes:
        prior = timing_path.read_bytes() if timing_path.is_file() else b""
        blob, timing = build_serialized_engine(model_dir / graph.file, rt, precision, prior,
                                               workspace_bytes)
        atomic_write(timing_path, lambda f: f.write(timing))
        return blob

    def deserialize(blob: bytes) -> Any:
        engine = rt.deserialize(blob)
        if engine is None:
            why.append("TensorRT did not deserialise it")
            return None
        problem = engine_io_mismatch(engine, graph, rt.trt)
        if problem:
            why.append(f"its tensors differ from {graph.file}: {problem}")
            return None
        return engine

    try:
        result = cache.get_or_build(key, build, deserialize, force=force)
    except EngineCacheError as exc:
        raise EngineBuildError(f"{model_dir / graph.file}: the engine just built with TensorRT "
                               f"{rt.version} for sm {rt.compute_capability} is unusable: "
                               f"{why[-1] if why else exc}; nothing was cached") from exc
    if result.action == "built" and result.reason.startswith("corrupt: cached engine") and why:
        result = replace(result, reason=f"stale: the cached engine was unusable ({why[0]})")
    return result


@dataclass(frozen=True)
class EngineReport:
    """What happened to one graph: key name, action (loaded/built), reason, engine path."""

    graph: str
    action: str
    reason: str
    path: Path


def build_model_engines(model_dir: str | os.PathLike[str], rt: TensorRT, cache: EngineCache,
                        precision: str = "typed", graphs: Sequence[str] | None = None,
                        force: bool = False,
                        workspace_bytes: int = DEFAULT_WORKSPACE_BYTES) -> list[EngineReport]:
    """Build (or load from the cache) the engine of every graph of a model folder
    (``syncedge export engine``), through :func:`get_engine`.

    Raises:
        edge.manifest.ManifestError: the model folder does not verify.
        EngineBuildError: unknown graph name, parse or build failure.
    """
    model_dir = Path(model_dir)
    model = load_model_dir(model_dir, verify=True)
    names = list(graphs) if graphs else list(model.graphs)
    unknown = [n for n in names if n not in model.graphs]
    if unknown:
        raise EngineBuildError(f"{model_dir}/model.json: no graph {unknown[0]!r}; found "
                               f"{sorted(model.graphs)}")
    reports = []
    for name in names:
        result = get_engine(model_dir, model.graphs[name], rt, cache, precision, force,
                            workspace_bytes)
        reports.append(EngineReport(name, result.action, result.reason, result.path))
    return reports
