"""TensorRT engines (built on the NVIDIA device) and the ONNX operator support check.

:mod:`export.engine.builder` builds engines through the lazily imported TensorRT Python
API; the engine cache itself is :mod:`edge.runtime.engine_cache` (the runtime reads it).
:mod:`export.engine.ops` checks graphs against ``trt_onnx_ops.json``. See docs/engines.md.
"""

__all__: list[str] = []
