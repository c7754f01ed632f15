"""A stand-in for the ``tensorrt`` module with the slice of the TensorRT 10/11 Python API
the engine builder and the runner use; it records calls. Engines are b"ENGINE:" + the ONNX
bytes; a deserialised engine lists the graph's I/O tensors (names, static shapes, dtypes)
and, given a fake driver (tests/fake_cuda.py), executes the graph with ONNX Runtime on the
fake device memory, enqueued on the given stream (so it can be captured)."""

from __future__ import annotations

import enum
from pathlib import Path
from types import SimpleNamespace

import numpy as np


class DataType(enum.IntEnum):
    FLOAT = 0
    HALF = 1
    INT8 = 2
    INT32 = 3
    BOOL = 4
    UINT8 = 5
    INT64 = 8


class TensorIOMode(enum.IntEnum):
    NONE = 0
    INPUT = 1
    OUTPUT = 2


_NP = {DataType.FLOAT: np.float32, DataType.HALF: np.float16, DataType.INT8: np.int8,
       DataType.INT32: np.int32, DataType.BOOL: np.bool_, DataType.UINT8: np.uint8,
       DataType.INT64: np.int64}
_ONNX_TO_TRT = {1: DataType.FLOAT, 10: DataType.HALF, 3: DataType.INT8, 6: DataType.INT32,
                9: DataType.BOOL, 2: DataType.UINT8, 7: DataType.INT64}


def nptype(dt):
    return _NP[dt]


class FakeEngine:
    """A deserialised fake engine: the ONNX graph's I/O tensors; runs it with ONNX Runtime."""

    def __init__(self, blob: bytes, cuda, calls: list):
        import onnx

        self.blob = bytes(blob)
        self.cuda, self.calls = cuda, calls
        model = onnx.load_from_string(self.blob[len(b"ENGINE:"):])
        self.io = []
        for vi, mode in [(v, TensorIOMode.INPUT) for v in model.graph.input] + \
                        [(v, TensorIOMode.OUTPUT) for v in model.graph.output]:
            t = vi.type.tensor_type
            shape = tuple(int(d.dim_value) for d in t.shape.dim)
            self.io.append((vi.name, shape, _ONNX_TO_TRT[t.elem_type], mode))
        self._session = None

    @property
    def num_io_tensors(self) -> int:
        return len(self.io)

    def get_tensor_name(self, i: int) -> str:
        return self.io[i][0]

    def _row(self, name):
        return next(r for r in self.io if r[0] == name)

    def get_tensor_shape(self, name):
        return self._row(name)[1]

    def get_tensor_dtype(self, name):
        return self._row(name)[2]

    def get_tensor_mode(self, name):
        return self._row(name)[3]

    def create_execution_context(self):
        return FakeExecutionContext(self)

    def run(self, addresses: dict) -> None:
        import onnxruntime as ort

        if self._session is None:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1
            self._session = ort.InferenceSession(self.blob[len(b"ENGINE:"):], opts,
                                                 providers=["CPUExecutionProvider"])
        view = self.cuda.view
        feeds = {n: view(addresses[n], _NP[dt], s).copy() for n, s, dt, m in self.io
                 if m == TensorIOMode.INPUT}
        outs = [n for n, s, dt, m in self.io if m == TensorIOMode.OUTPUT]
        for name, value in zip(outs, self._session.run(outs, feeds), strict=True):
            _, s, dt, _ = self._row(name)
            view(addresses[name], _NP[dt], s)[...] = value


class FakeExecutionContext:
    def __init__(self, engine: FakeEngine):
        self.engine = engine
        self.addresses: dict[str, int] = {}

    def set_tensor_address(self, name: str, ptr: int) -> None:
        self.addresses[name] = int(ptr)

    def execute_async_v3(self, stream_handle: int) -> bool:
        eng = self.engine
        if eng.cuda is None:
            raise RuntimeError("fake engine: make_fake_trt(cuda=...) is needed to execute")
        missing = [n for n, *_ in eng.io if n not in self.addresses]
        if missing:
            raise RuntimeError(f"fake engine: tensors without an address: {missing}")
        addresses = dict(self.addresses)
        eng.calls.append(("execute", int(stream_handle)))
        eng.cuda.enqueue(stream_handle, "kernel", lambda: eng.run(addresses))
        return True


def make_fake_trt(version: str = "10.3.0.30", fp16_flag: bool = True,
                  strongly_typed_flag: bool = True, parse_ok: bool = True, cuda=None):
    calls: list[tuple] = []

    class Logger:
        WARNING = 2

        def __init__(self, level):
            self.level = level

    members = {"STRONGLY_TYPED": 1} if strongly_typed_flag else {}
    members["PREFER_JIT_PYTHON_PLUGINS"] = 3
    NetworkDefinitionCreationFlag = enum.IntEnum("NetworkDefinitionCreationFlag", members)
    flags = {"FP16": 0, "INT8": 1} if fp16_flag else {}
    flags["TF32"] = 5
    BuilderFlag = enum.IntEnum("BuilderFlag", flags)

    class MemoryPoolType(enum.IntEnum):
        WORKSPACE = 0

    class TimingCache:
        def __init__(self, data: bytes):
            self.data = bytes(data)

        def serialize(self):
            return self.data + b"+"

    class Config:
        def __init__(self):
            self.flags, self.cache = [], None

        def set_memory_pool_limit(self, pool, size):
            calls.append(("pool", pool, size))

        def set_flag(self, flag):
            self.flags.append(flag)
            calls.append(("flag", flag))

        def create_timing_cache(self, data):
            if data.startswith(b"bad"):
                raise RuntimeError("corrupt timing cache")
            calls.append(("timing_in", bytes(data)))
            return TimingCache(data)

        def set_timing_cache(self, cache, ignore_mismatch):
            self.cache = cache

        def get_timing_cache(self):
            return self.cache

    class Network:
        def __init__(self, flags):
            self.flags, self.onnx = flags, b""

    class OnnxParser:
        num_errors = 0 if parse_ok else 2

        def __init__(self, network, logger):
            self.network = network

        def parse_from_file(self, path):
            calls.append(("parse", Path(path).name))
            self.network.onnx = Path(path).read_bytes()
            return parse_ok

        def get_error(self, i):
            return f"node {i}: unsupported"

    class Builder:
        def __init__(self, logger):
            pass

        def create_network(self, flags):
            calls.append(("network", flags))
            return Network(flags)

        def create_builder_config(self):
            return Config()

        def build_serialized_network(self, network, config):
            calls.append(("build", network.flags, tuple(config.flags)))
            return b"ENGINE:" + network.onnx

    class Runtime:
        def __init__(self, logger):
            pass

        def deserialize_cuda_engine(self, blob):
            calls.append(("deserialize",))
            if not bytes(blob).startswith(b"ENGINE:"):
                return None
            try:
                return FakeEngine(blob, cuda, calls)
            except Exception:  # not an ONNX graph after the prefix: TensorRT rejects it
                return None

    mod = SimpleNamespace(__version__=version, Logger=Logger, Builder=Builder,
                          NetworkDefinitionCreationFlag=NetworkDefinitionCreationFlag,
                          BuilderFlag=BuilderFlag, MemoryPoolType=MemoryPoolType,
                          OnnxParser=OnnxParser, Runtime=Runtime, DataType=DataType,
                          TensorIOMode=TensorIOMode, nptype=nptype)
    return mod, calls
