"""kernels and edge.runtime.cuda_step import without pycuda or a GPU; launching names the extra."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from kernels import cuda_graph
from kernels.errors import MissingDependencyError, NonFiniteOutputError
from kernels.launcher import KernelLauncher, RingShape, check_nan_count

BLOCKED = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name == "pycuda" or name.startswith("pycuda."):
            raise ImportError(f"blocked: {name}")
sys.meta_path.insert(0, _Block())
import kernels, kernels.launcher, kernels.reference, kernels.build, kernels.cuda_graph
import edge.runtime.cuda_step
assert not any(m == "pycuda" or m.startswith("pycuda.") for m in sys.modules)
from kernels.launcher import KernelLauncher
from kernels.errors import MissingDependencyError
launcher = KernelLauncher()
try:
    launcher.activate()
except MissingDependencyError as exc:
    print("RAISED:", exc)
"""


def test_imports_work_with_pycuda_blocked_and_launch_names_the_extra():
    proc = subprocess.run([sys.executable, "-c", BLOCKED], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "RAISED: Launching the CUDA kernels needs the 'pycuda' library" in proc.stdout
    assert "pip install 'syncedge[nvidia]'" in proc.stdout


def test_launcher_constructor_stores_only(monkeypatch):
    launcher = KernelLauncher(3, allow_compile=False)
    assert launcher.device_ordinal == 3 and launcher.load_path is None
    with pytest.raises(Exception, match=r"call activate\(\)"):
        launcher.ring_advance(RingShape(1, 2, 3, 4), 0)


def test_missing_dependency_is_an_import_error():
    exc = MissingDependencyError("pycuda", "nvidia", "Launching the CUDA kernels")
    assert isinstance(exc, ImportError) and str(exc)


def test_ring_shape_and_nan_check_errors():
    with pytest.raises(ValueError, match=r"RingShape.slots: expected an int >= 1, found 0"):
        RingShape(1, 0, 3, 4)
    check_nan_count(0)
    with pytest.raises(NonFiniteOutputError, match="found 5 NaN"):
        check_nan_count(5)


class _FakeDriver:
    """Graph API of libcuda over a dict graph -> [(node, type)]."""

    def __init__(self, graphs, children):
        self.graphs, self.children = graphs, children

    def cuGraphGetNodes(self, graph, nodes, count):
        items = self.graphs[graph]
        if nodes is not None:
            for i, (node, _) in enumerate(items):
                nodes[i] = node
        count._obj.value = len(items)
        return 0

    def cuGraphNodeGetType(self, node, kind):
        kind._obj.value = dict(n for items in self.graphs.values() for n in items)[node]
        return 0

    def cuGraphChildGraphNodeGetGraph(self, node, child):
        child._obj.value = self.children[node]
        return 0

    def cuGetErrorName(self, result, name):
        name._obj.value = b"CUDA_ERROR_FAKE"
        return 0


def test_count_graph_nodes_includes_child_graphs():
    fake = _FakeDriver({1: [(10, 0), (11, 1), (12, 4)], 2: [(20, 0), (21, 2), (22, 1)]}, {12: 2})
    counts = cuda_graph.count_graph_nodes(1, fake)
    assert counts == Counter(kernel=2, memcpy=2, graph=1, memset=1)


def test_driver_errors_name_the_call():
    class _Failing(_FakeDriver):
        def cuGraphGetNodes(self, graph, nodes, count):
            return 999

    with pytest.raises(cuda_graph.CudaDriverError, match="cuGraphGetNodes: .*CUDA_ERROR_FAKE"):
        cuda_graph.count_graph_nodes(1, _Failing({}, {}))


def test_load_driver_without_libcuda_is_a_clear_error(monkeypatch):
    def _missing(name, *a, **k):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(cuda_graph, "_DRIVER", None)
    monkeypatch.setattr(ctypes, "CDLL", _missing)
    with pytest.raises(Exception, match="expected libcuda.so.1"):
        cuda_graph.load_driver()


def test_cuda_step_rejects_bad_shapes_before_any_gpu_work():
    from edge.runtime.cuda_step import StepShapes, _as

    shapes = StepShapes(2, 4, (2, 2, 2), 3, 4, 4, 5)
    assert shapes.latent == 8 and shapes.ring == RingShape(2, 4, 8, 3)
    assert _as(np.zeros((2, 2, 2, 2), np.float32), np.float32, (2, 8), "start_latent").shape == (
        2,
        8,
    )
    with pytest.raises(ValueError, match=r"keepout: expected shape \[4, 4\], found \[4, 5\]"):
        _as(np.zeros((4, 5), np.uint8), np.uint8, (4, 4), "keepout")
    with pytest.raises(ValueError, match="dof_mask: expected a uint8 array, found float32"):
        _as(np.zeros(3, np.float32), np.uint8, (3,), "dof_mask")


def test_both_missing_dependency_errors_take_library_extra_purpose_in_that_order():
    from edge.errors import MissingDependencyError as EdgeMissing

    k = MissingDependencyError("pycuda", "nvidia", "Launching the CUDA kernels")
    e = EdgeMissing("pycuda", "nvidia", "Launching the CUDA kernels")
    assert (k.library, k.extra) == (e.library, e.extra) == ("pycuda", "nvidia")
    assert str(k) == str(e)
    assert "pip install 'syncedge[nvidia]'" in str(k)
