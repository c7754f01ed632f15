"""CUDA graph capture and inspection through the driver API (``libcuda``, via ctypes).

Works on any ``CUstream`` handle, whichever library made it (pycuda, PyTorch, CuPy,
TensorRT's caller), and independent of the pycuda version's graph bindings. Counts the
captured graph's nodes by type, child graphs included, so a test can assert that a
rollout step holds no memcpy node (no host round trip).

Nothing is loaded at import time; :func:`load_driver` opens ``libcuda.so.1`` lazily.
"""

from __future__ import annotations

import ctypes
from collections import Counter
from typing import Any

from kernels.errors import KernelError, KernelLoadError

__all__ = [
    "CapturedGraph",
    "CudaDriverError",
    "NODE_TYPES",
    "count_graph_nodes",
    "load_driver",
]

# CUgraphNodeType values (cuda.h, stable since CUDA 10-12).
NODE_TYPES = {
    0: "kernel",
    1: "memcpy",
    2: "memset",
    3: "host",
    4: "graph",
    5: "empty",
    6: "wait_event",
    7: "event_record",
    8: "ext_semas_signal",
    9: "ext_semas_wait",
    10: "mem_alloc",
    11: "mem_free",
    12: "batch_mem_op",
    13: "conditional",
}
CAPTURE_MODE_THREAD_LOCAL = 1
_NODE_TYPE_GRAPH = 4


class CudaDriverError(KernelError, RuntimeError):
    """A CUDA driver API call failed; the message names the call and the error."""


_DRIVER: Any = None


def load_driver() -> Any:
    """Open ``libcuda.so.1`` once and declare the graph functions used here.

    Raises:
        KernelLoadError: no CUDA driver library on this machine.
    """
    global _DRIVER
    if _DRIVER is not None:
        return _DRIVER
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise KernelLoadError(
            f"CUDA driver: expected libcuda.so.1 (an NVIDIA driver), found none: {exc}"
        ) from exc
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    sigs = {
        "cuStreamBeginCapture_v2": [vp, ctypes.c_int],
        "cuStreamEndCapture": [vp, ctypes.POINTER(vp)],
        "cuGraphGetNodes": [vp, ctypes.POINTER(vp), ctypes.POINTER(sz)],
        "cuGraphNodeGetType": [vp, ctypes.POINTER(ctypes.c_int)],
        "cuGraphChildGraphNodeGetGraph": [vp, ctypes.POINTER(vp)],
        "cuGraphInstantiateWithFlags": [ctypes.POINTER(vp), vp, ctypes.c_ulonglong],
        "cuGraphLaunch": [vp, vp],
        "cuGraphExecDestroy": [vp],
        "cuGraphDestroy": [vp],
        "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
    }
    for name, args in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = ctypes.c_int
    _DRIVER = lib
    return lib


def _check(lib: Any, call: str, result: int) -> None:
    if result != 0:
        name = ctypes.c_char_p()
        lib.cuGetErrorName(result, ctypes.byref(name))
        text = name.value.decode() if name.value else f"error {result}"
        raise CudaDriverError(f"{call}: expected CUDA_SUCCESS, found {text}")


def count_graph_nodes(graph: int | None, lib: Any = None) -> Counter:
    """Count a ``CUgraph``'s nodes by type name (see :data:`NODE_TYPES`), child graphs
    included (a child-graph node counts as ``"graph"`` and its nodes are added).

    ``graph`` is the handle as an int, or None for NULL (as ``ctypes.c_void_p.value``
    gives it); the driver reports a NULL graph as an error."""
    lib = lib if lib is not None else load_driver()
    count = ctypes.c_size_t(0)
    _check(lib, "cuGraphGetNodes", lib.cuGraphGetNodes(graph, None, ctypes.byref(count)))
    nodes = (ctypes.c_void_p * max(count.value, 1))()
    _check(lib, "cuGraphGetNodes", lib.cuGraphGetNodes(graph, nodes, ctypes.byref(count)))
    totals: Counter = Counter()
    for i in range(count.value):
        kind = ctypes.c_int(-1)
        _check(lib, "cuGraphNodeGetType", lib.cuGraphNodeGetType(nodes[i], ctypes.byref(kind)))
        totals[NODE_TYPES.get(kind.value, f"type_{kind.value}")] += 1
        if kind.value == _NODE_TYPE_GRAPH:
            child = ctypes.c_void_p()
            _check(
                lib,
                "cuGraphChildGraphNodeGetGraph",
                lib.cuGraphChildGraphNodeGetGraph(nodes[i], ctypes.byref(child)),
            )
            totals.update(count_graph_nodes(child.value, lib))
    return totals


class CapturedGraph:
    """One stream's work captured as a CUDA graph, instantiated and replayable.

    Usage::

        graph = CapturedGraph(stream_handle)
        graph.begin()
        ...enqueue the work on that stream (nothing runs)...
        graph.end()            # instantiates; node counts in graph.node_counts
        graph.launch()         # replay (asynchronous, on the same stream)
        graph.close()

    Args:
        stream_handle: ``CUstream`` as an int; must not be the legacy default stream.
    """

    def __init__(self, stream_handle: int):
        self.stream_handle = int(stream_handle)
        self.node_counts: Counter = Counter()
        self._graph = ctypes.c_void_p()
        self._exec = ctypes.c_void_p()
        self._lib: Any = None

    def begin(self) -> None:
        """Start capturing (thread-local mode)."""
        if not self.stream_handle:
            raise CudaDriverError("stream capture: expected a created stream, found the default")
        self._lib = load_driver()
        _check(
            self._lib,
            "cuStreamBeginCapture",
            self._lib.cuStreamBeginCapture_v2(self.stream_handle, CAPTURE_MODE_THREAD_LOCAL),
        )

    def end(self) -> Counter:
        """Stop capturing, count the nodes and instantiate; returns the node counts."""
        lib = self._lib
        _check(
            lib,
            "cuStreamEndCapture",
            lib.cuStreamEndCapture(self.stream_handle, ctypes.byref(self._graph)),
        )
        self.node_counts = count_graph_nodes(self._graph.value, lib)
        _check(
            lib,
            "cuGraphInstantiate",
            lib.cuGraphInstantiateWithFlags(ctypes.byref(self._exec), self._graph, 0),
        )
        return self.node_counts

    def launch(self) -> None:
        """Enqueue one replay of the graph on its stream."""
        if not self._exec.value:
            raise CudaDriverError("graph launch: call begin() and end() first")
        _check(self._lib, "cuGraphLaunch", self._lib.cuGraphLaunch(self._exec, self.stream_handle))

    def close(self) -> None:
        """Destroy the executable graph and the graph."""
        if self._exec.value:
            self._lib.cuGraphExecDestroy(self._exec)
            self._exec = ctypes.c_void_p()
        if self._graph.value:
            self._lib.cuGraphDestroy(self._graph)
            self._graph = ctypes.c_void_p()
