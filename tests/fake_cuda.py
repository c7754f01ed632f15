"""A stand-in for ``pycuda.driver`` with fake device memory, streams, stream capture and the
rollout kernels run by their NumPy twins (``kernels.reference``).

Device memory is host memory: an allocation is a NumPy byte buffer and its "device
pointer" is the buffer's address, so kernels and the fake TensorRT engine read and write
it through :meth:`FakeCuda.view`. Work enqueued on a stream runs at once, except while the
stream is being captured (:class:`FakeCuda.CapturedGraph`), when it is recorded as graph
nodes (``kernel``, ``memcpy``, ``memset``) and replayed by ``launch()``. Every memcpy is
also counted in :attr:`FakeCuda.raw_copies`, independently of ``edge.runtime.device_copies``.

This checks the wiring (which buffer goes where, in which order, how many copies); it
does not check the CUDA code, which only the GPU tests do (tests/test_kernels_gpu.py).
"""

from __future__ import annotations

import bisect
import importlib.machinery
import itertools
import sys
import types
from collections import Counter
from collections.abc import Callable

import numpy as np

from kernels import reference as ref


class FakeCudaError(RuntimeError):
    """What the fake raises for misuse (a bad pointer, a freed buffer)."""


class FakeAllocation:
    def __init__(self, owner: FakeCuda, nbytes: int):
        self.owner = owner
        self.buf = np.zeros(max(1, int(nbytes)), np.uint8)
        self.ptr = int(self.buf.ctypes.data)
        self.freed = False

    def __int__(self) -> int:
        return self.ptr

    def __index__(self) -> int:
        return self.ptr

    def free(self) -> None:
        if not self.freed:
            self.freed = True
            self.owner._free(self)


class FakeStream:
    def __init__(self, owner: FakeCuda):
        self.owner = owner
        self.handle = next(owner._handles)
        self.capture: list[tuple[str, Callable[[], None]]] | None = None
        owner.streams[self.handle] = self

    def synchronize(self) -> None:
        if self.capture is not None:
            raise FakeCudaError("stream synchronize during capture (illegal in CUDA)")
        self.owner.syncs += 1


class FakeContext:
    def __init__(self, owner: FakeCuda):
        self.owner = owner

    def push(self) -> None:
        self.owner.context_depth += 1

    def pop(self) -> None:
        self.owner.context_depth -= 1

    def detach(self) -> None:
        self.owner.detached += 1


class FakeDevice:
    def __init__(self, owner: FakeCuda, ordinal: int):
        self.owner, self.ordinal = owner, ordinal

    def compute_capability(self) -> tuple[int, int]:
        return self.owner.cc

    def retain_primary_context(self) -> FakeContext:
        return FakeContext(self.owner)


class FakeFunction:
    def __init__(self, owner: FakeCuda, name: str):
        self.owner, self.name = owner, name

    def prepare(self, fmt: str) -> None:
        self.fmt = fmt

    def prepared_async_call(self, grid, block, stream, *args) -> None:
        impl = getattr(self.owner, "_k_" + self.name)
        self.owner.enqueue(stream.handle, "kernel", lambda: impl(*args))


class FakeModule:
    def __init__(self, owner: FakeCuda):
        self.owner = owner

    def get_function(self, name: str) -> FakeFunction:
        if not hasattr(self.owner, "_k_" + name):
            raise FakeCudaError(f"no kernel {name}")
        return FakeFunction(self.owner, name)


class FakeCuda:
    """The fake driver: one instance plays ``pycuda.driver`` (see :func:`install`)."""

    Error = FakeCudaError

    def __init__(self, cc: tuple[int, int] = (8, 7), driver_version: int = 13000):
        self.cc = cc
        self.driver_version = driver_version
        self.live: dict[int, FakeAllocation] = {}
        self._bases: list[int] = []
        self.streams: dict[int, FakeStream] = {}
        self._handles = itertools.count(0x1000)
        self.raw_copies: Counter = Counter()
        self.context_depth = 0
        self.detached = 0
        self.syncs = 0
        self.allocs = 0
        fake = self

        class CapturedGraph:
            """Stands in for ``kernels.cuda_graph.CapturedGraph`` on fake streams."""

            def __init__(self, stream_handle: int):
                self.stream_handle = int(stream_handle)
                self.node_counts: Counter = Counter()
                self.nodes: list[tuple[str, Callable[[], None]]] = []
                self.launches = 0

            def begin(self) -> None:
                fake.streams[self.stream_handle].capture = []

            def end(self) -> Counter:
                s = fake.streams[self.stream_handle]
                self.nodes, s.capture = s.capture or [], None
                self.node_counts = Counter(kind for kind, _ in self.nodes)
                return self.node_counts

            def launch(self) -> None:
                self.launches += 1
                for kind, fn in self.nodes:
                    fake.enqueue(self.stream_handle, kind, fn)

            def close(self) -> None:
                self.nodes = []

        self.CapturedGraph = CapturedGraph

    # -- driver API used by the project ------------------------------------------------
    def init(self) -> None:
        pass

    def Device(self, ordinal: int) -> FakeDevice:  # noqa: N802 - pycuda's name
        return FakeDevice(self, ordinal)

    def Stream(self) -> FakeStream:  # noqa: N802 - pycuda's name
        return FakeStream(self)

    def get_driver_version(self) -> int:
        return self.driver_version

    def module_from_buffer(self, data: bytes) -> FakeModule:
        return FakeModule(self)

    def mem_alloc(self, nbytes: int) -> FakeAllocation:
        a = FakeAllocation(self, nbytes)
        self.live[a.ptr] = a
        bisect.insort(self._bases, a.ptr)
        self.allocs += 1
        return a

    def _free(self, a: FakeAllocation) -> None:
        del self.live[a.ptr]
        self._bases.remove(a.ptr)

    def pagelocked_empty(self, shape, dtype) -> np.ndarray:
        return np.empty(shape, dtype)

    def enqueue(self, stream_handle: int, kind: str, fn: Callable[[], None]) -> None:
        """Run ``fn`` now, or record it while the stream is captured."""
        s = self.streams.get(int(stream_handle))
        if s is None:
            raise FakeCudaError(f"unknown stream handle {stream_handle:#x}")
        if s.capture is not None:
            s.capture.append((kind, fn))
        else:
            fn()

    def _bytes(self, ptr: int, nbytes: int) -> np.ndarray:
        ptr = int(ptr)
        i = bisect.bisect_right(self._bases, ptr) - 1
        if i < 0:
            raise FakeCudaError(f"pointer {ptr:#x}: not in any live allocation")
        a = self.live[self._bases[i]]
        off = ptr - a.ptr
        if off + nbytes > a.buf.size:
            raise FakeCudaError(f"pointer {ptr:#x} + {nbytes} bytes: past the end of its "
                                f"{a.buf.size}-byte allocation")
        return a.buf[off:off + nbytes]

    def view(self, ptr: int, dtype, shape) -> np.ndarray:
        """The device memory at ``ptr`` as an array of ``dtype`` and ``shape`` (no copy)."""
        dtype = np.dtype(dtype)
        shape = tuple(int(d) for d in np.atleast_1d(shape))
        n = int(np.prod(shape)) * dtype.itemsize
        return self._bytes(ptr, n).view(dtype).reshape(shape)

    def memcpy_htod(self, dst, src: np.ndarray) -> None:
        self.raw_copies["htod"] += 1
        self._bytes(int(dst), src.nbytes)[...] = np.frombuffer(src.tobytes(), np.uint8)

    def memcpy_dtoh(self, dst: np.ndarray, src) -> None:
        self.raw_copies["dtoh"] += 1
        dst.reshape(-1).view(np.uint8)[...] = self._bytes(int(src), dst.nbytes)

    def memcpy_htod_async(self, dst, src: np.ndarray, stream: FakeStream) -> None:
        data = np.frombuffer(src.tobytes(), np.uint8)  # the host array as it is now
        self.raw_copies["htod"] += 1
        self.enqueue(stream.handle, "memcpy",
                     lambda: self._bytes(int(dst), data.size).__setitem__(..., data))

    def memcpy_dtoh_async(self, dst: np.ndarray, src, stream: FakeStream) -> None:
        self.raw_copies["dtoh"] += 1

        def run() -> None:
            dst.reshape(-1).view(np.uint8)[...] = self._bytes(int(src), dst.nbytes)

        self.enqueue(stream.handle, "memcpy", run)

    def memset_d32_async(self, dst, value: int, count: int, stream: FakeStream) -> None:
        self.enqueue(stream.handle, "memset",
                     lambda: self.view(int(dst), np.uint32, count).__setitem__(..., value))

    # -- the rollout kernels, by their NumPy twins ---------------------------------------
    def _state(self, ptr: int) -> np.ndarray:
        return self.view(ptr, np.int32, 2)

    def _k_se_ring_fill(self, rl, ra, hl, ha, start, b, s, lat, a, state) -> None:
        ring_l = self.view(rl, np.float32, (b, s, lat))
        ring_a = self.view(ra, np.float32, (b, s, a))
        ref.ring_fill(ring_l, ring_a, self.view(start, np.float32, (b, lat)))
        if hl:
            self.view(hl, np.float32, (b, s, lat))[...] = ring_l
        if ha:
            self.view(ha, np.float32, (b, s, a))[...] = 0.0
        if state:
            self._state(state)[...] = 0

    def _k_se_ring_push(self, rl, ra, nl, na, mask, b, s, lat, a, state) -> None:
        ref.ring_push(self.view(rl, np.float32, (b, s, lat)), self.view(ra, np.float32, (b, s, a)),
                      int(self._state(state)[0]), self.view(nl, np.float32, (b, lat)),
                      self.view(na, np.float32, (b, a)), self.view(mask, np.uint8, a))

    def _k_se_ring_linearise(self, hl, ha, rl, ra, b, s, lat, a, state) -> None:
        ref.ring_linearise(self.view(rl, np.float32, (b, s, lat)),
                           self.view(ra, np.float32, (b, s, a)), int(self._state(state)[0]),
                           self.view(hl, np.float32, (b, s, lat)),
                           self.view(ha, np.float32, (b, s, a)))

    def _k_se_ring_push_linearise(self, rl, ra, hl, ha, nl, na, mask, b, s, lat, a,
                                  state) -> None:
        ref.ring_push_linearise(
            self.view(rl, np.float32, (b, s, lat)), self.view(ra, np.float32, (b, s, a)),
            self.view(hl, np.float32, (b, s, lat)), self.view(ha, np.float32, (b, s, a)),
            int(self._state(state)[0]), self.view(nl, np.float32, (b, lat)),
            self.view(na, np.float32, (b, a)), self.view(mask, np.uint8, a))

    def _k_se_ring_advance(self, state, s) -> None:
        st = self._state(state)
        st[0] = (st[0] + 1) % s
        st[1] += 1

    def _k_se_select_action(self, out, actions, mask, b, t, a, state) -> None:
        ref.select_action(self.view(actions, np.float32, (b, t, a)), self.view(mask, np.uint8, a),
                          int(self._state(state)[1]), out=self.view(out, np.float32, (b, a)))

    def _k_se_decode_frames(self, frames, x, offset, b, h, w, nan) -> None:
        off = self.view(offset, np.float32, (b, 3, h, w)) if offset else None
        _, count = ref.decode_frames_counting(self.view(x, np.float32, (b, 3, h, w)), off,
                                              out=self.view(frames, np.uint8, (b, h, w, 3)))
        self.view(nan, np.int32, 1)[0] += count

    def _k_se_precheck_scores(self, moved, energy, goal_mse, pred, start, keepout, goal, b,
                              hw, threshold) -> None:
        scores = ref.precheck_scores(self.view(pred, np.uint8, (b, hw, 1, 3)),
                                     self.view(start, np.uint8, (hw, 1, 3)),
                                     self.view(keepout, np.uint8, (hw, 1)), int(threshold),
                                     self.view(goal, np.uint8, (hw, 1, 3)) if goal else None)
        self.view(moved, np.int32, b)[...] = scores.moved_in_keepout
        self.view(energy, np.float32, b)[...] = scores.motion_energy
        if goal_mse:
            self.view(goal_mse, np.float32, b)[...] = scores.goal_mse

    def _k_se_robot_in_keepout(self, count, mask, keepout, b, hw) -> None:
        self.view(count, np.int32, b)[...] = ref.robot_in_keepout(
            self.view(mask, np.float32, (b, hw, 1)), self.view(keepout, np.uint8, (hw, 1)))

    def _k_se_store_step(self, dst, src, nbytes, t_max, state) -> None:
        t = min(max(int(self._state(state)[1]), 0), int(t_max) - 1)
        self._bytes(int(dst) + t * int(nbytes), int(nbytes))[...] = self._bytes(int(src), int(nbytes))


def install(monkeypatch, fake: FakeCuda) -> None:
    """Make ``import pycuda.driver`` give ``fake`` (for the duration of a test)."""
    pkg = types.ModuleType("pycuda")
    pkg.__spec__ = importlib.machinery.ModuleSpec("pycuda", None, is_package=True)
    pkg.__path__ = []
    drv = types.ModuleType("pycuda.driver")
    drv.__spec__ = importlib.machinery.ModuleSpec("pycuda.driver", None)
    for name in ("Error", "init", "Device", "Stream", "get_driver_version",
                 "module_from_buffer", "mem_alloc", "pagelocked_empty", "memcpy_htod",
                 "memcpy_dtoh", "memcpy_htod_async", "memcpy_dtoh_async", "memset_d32_async"):
        setattr(drv, name, getattr(fake, name))
    pkg.driver = drv
    monkeypatch.setitem(sys.modules, "pycuda", pkg)
    monkeypatch.setitem(sys.modules, "pycuda.driver", drv)


def install_tensorrt(monkeypatch, trt) -> None:
    """Make ``import tensorrt`` give the fake module ``trt`` (tests/fake_tensorrt.py)."""
    mod = types.ModuleType("tensorrt")
    mod.__spec__ = importlib.machinery.ModuleSpec("tensorrt", None)
    for k, v in vars(trt).items():
        setattr(mod, k, v)
    monkeypatch.setitem(sys.modules, "tensorrt", mod)


__all__ = ["FakeCuda", "FakeCudaError", "install", "install_tensorrt"]
