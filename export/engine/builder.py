"""Build TensorRT engines from a model's ONNX graphs (on the NVIDIA device).

Written against the TensorRT 10.3-11 Python API (NVIDIA's API reference: ``trt.Builder``,
``Builder.create_network``, ``NetworkDefinitionCreationFlag.STRONGLY_TYPED``,
``trt.OnnxParser.parse_from_file``, ``IBuilderConfig.set_memory_pool_limit``,
``create_timing_cache``/``set_timing_cache``/``get_timing_cache``,
``Builder.build_serialized_network``, ``trt.Runtime.deserialize_cuda_engine``).
TensorRT is imported lazily and has NOT been run by this project: no machine available
to it can install TensorRT (docs/engines.md).

Precision:

- ``typed`` (default, and the only mode on TensorRT 11): a strongly typed network; the
  precision comes from the graph itself (FP16 casts and weights, INT8 Q/DQ nodes). On
  TensorRT 11 the STRONGLY_TYPED flag is deprecated and ignored because strong typing is
  always on; it is set only where the enum still has it.
- ``flag-fp16``: a weakly typed network with ``BuilderFlag.FP16``, for an FP32 graph on a
  TensorRT that still has that flag (10.x); refused where it is gone (11.x).
- INT8 without Q/DQ nodes (calibrator-based implicit quantisation) is not supported:
  export the INT8 variant (Q/DQ) and build it ``typed``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from edge.engine_cache import CacheResult, EngineCache, EngineKey
from edge.errors import MissingDependencyError
from edge.fileio import atomic_write
from edge.manifest import GraphSpec, load_model_dir
from export.errors import ExportError

__all__ = ["PRECISIONS", "EngineBuildError", "TensorRT", "import_tensorrt", "engine_key",
           "build_serialized_engine", "build_model_engines", "EngineReport"]

PRECISIONS = ("typed", "flag-fp16")
DEFAULT_WORKSPACE_BYTES = 1 << 30


class EngineBuildError(ExportError, RuntimeError):
    """TensorRT could not parse or build a graph, or the requested mode is unavailable."""


def import_tensorrt() -> ModuleType:
    """Import ``tensorrt`` or raise :class:`MissingDependencyError` naming the extra."""
    try:
        import tensorrt
    except ImportError:
        raise MissingDependencyError("tensorrt", "nvidia",
                                     "building TensorRT engines (on the NVIDIA device that "
                                     "runs them, e.g. a JetPack Jetson)") from None
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
    capability, precision mode, static input shapes and dtypes, workspace)."""
    if precision not in PRECISIONS:
        raise EngineBuildError(f"precision {precision!r}: expected one of {list(PRECISIONS)}")
    return EngineKey(onnx_sha256=onnx_sha256, trt_version=rt.version,
                     compute_capability=rt.compute_capability, precision=precision,
                     shapes=tuple((t.name, tuple(t.shape), t.dtype) for t in graph.inputs),
                     options=(("workspace_bytes", str(workspace_bytes)),))


def build_serialized_engine(onnx_path: str | os.PathLike[str], rt: TensorRT, precision: str,
                            timing_cache: bytes = b"",
                            workspace_bytes: int = DEFAULT_WORKSPACE_BYTES) -> tuple[bytes, bytes]:
    """Parse one ONNX graph and build a serialized engine.

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
    """Build (or load from the cache) the engine of every graph of a model folder.

    The timing cache (``cache.timing_cache_path``) is read before and written after each
    build, so later builds on this TensorRT and GPU reuse tactic timings.

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
    timing_path = cache.timing_cache_path(rt.version, rt.compute_capability)
    reports = []
    for name in names:
        g = model.graphs[name]
        key = engine_key(g.sha256, g, rt, precision, workspace_bytes)

        def build(g: GraphSpec = g) -> bytes:
            prior = timing_path.read_bytes() if timing_path.is_file() else b""
            blob, timing = build_serialized_engine(model_dir / g.file, rt, precision, prior,
                                                   workspace_bytes)
            atomic_write(timing_path, lambda f: f.write(timing))
            return blob

        result: CacheResult[Any] = cache.get_or_build(key, build, rt.deserialize, force=force)
        reports.append(EngineReport(name, result.action, result.reason, result.path))
    return reports
