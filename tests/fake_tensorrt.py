"""A stand-in for the ``tensorrt`` module with the slice of the TensorRT 10/11 Python API
the engine builder uses; it records calls. Engines are b"ENGINE:" + the ONNX bytes."""

from __future__ import annotations

import enum
from pathlib import Path
from types import SimpleNamespace


def make_fake_trt(version: str = "10.3.0.30", fp16_flag: bool = True,
                  strongly_typed_flag: bool = True, parse_ok: bool = True):
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
            return SimpleNamespace(blob=blob) if bytes(blob).startswith(b"ENGINE:") else None

    mod = SimpleNamespace(__version__=version, Logger=Logger, Builder=Builder,
                          NetworkDefinitionCreationFlag=NetworkDefinitionCreationFlag,
                          BuilderFlag=BuilderFlag, MemoryPoolType=MemoryPoolType,
                          OnnxParser=OnnxParser, Runtime=Runtime)
    return mod, calls
