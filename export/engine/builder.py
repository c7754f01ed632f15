"""``syncedge export engine``'s builder: the runtime's one engine path, re-exported.

The builder, the key and the cache decisions live in :mod:`edge.runtime.engine_build` (the engine
is built on the NVIDIA device that runs it, by ``export engine`` or on first use by the
``tensorrt`` backend; both go through :func:`edge.runtime.engine_build.get_engine`). See
docs/engines.md.
"""

from __future__ import annotations

from edge.runtime.engine_build import (
    DEFAULT_WORKSPACE_BYTES,
    PRECISIONS,
    EngineBuildError,
    EngineReport,
    TensorRT,
    build_model_engines,
    build_serialized_engine,
    engine_key,
    get_engine,
    import_tensorrt,
)

__all__ = ["DEFAULT_WORKSPACE_BYTES", "PRECISIONS", "EngineBuildError", "EngineReport",
           "TensorRT", "build_model_engines", "build_serialized_engine", "engine_key",
           "get_engine", "import_tensorrt"]
