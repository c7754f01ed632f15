"""The TensorRT engine builder's decisions against a fake ``tensorrt`` module; the real
TensorRT has not been run (docs/engines.md)."""

from __future__ import annotations

import argparse

import pytest
from fake_tensorrt import make_fake_trt
from tiny_model import make_tiny_model

from edge.errors import MissingDependencyError
from edge.manifest import load_model_dir
from edge.runtime.engine_cache import EngineCache
from export.cli import SUBCOMMANDS, register
from export.engine.builder import (
    EngineBuildError,
    TensorRT,
    build_model_engines,
    build_serialized_engine,
    engine_key,
)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("m") / "tiny")


def test_strongly_typed_network_on_tensorrt_10(model):
    trt, calls = make_fake_trt("10.3.0.30")
    blob, timing = build_serialized_engine(model / "encoder.onnx", TensorRT(trt, "8.7"), "typed")
    assert blob.startswith(b"ENGINE:")
    assert ("network", 1 << 1) in calls  # 1 << int(STRONGLY_TYPED)
    assert not any(c[0] == "flag" for c in calls)
    assert timing == b"+"


def test_tensorrt_11_without_the_flag_enums(model):
    trt, calls = make_fake_trt("11.4.0.1", fp16_flag=False, strongly_typed_flag=False)
    build_serialized_engine(model / "encoder.onnx", TensorRT(trt, "11.0"), "typed")
    assert ("network", 0) in calls
    with pytest.raises(EngineBuildError, match="TensorRT 11.4.0.1 has no BuilderFlag.FP16"):
        build_serialized_engine(model / "encoder.onnx", TensorRT(trt, "11.0"), "flag-fp16")


def test_fp16_flag_on_a_weakly_typed_network_where_available(model):
    trt, calls = make_fake_trt("10.3.0.30")
    build_serialized_engine(model / "encoder.onnx", TensorRT(trt, "8.7"), "flag-fp16")
    assert ("network", 0) in calls and ("flag", trt.BuilderFlag.FP16) in calls


def test_parse_failure_names_the_file(model):
    trt, _ = make_fake_trt(parse_ok=False)
    with pytest.raises(EngineBuildError, match=r"encoder\.onnx: the TensorRT 10.3.0.30 ONNX "
                                               r"parser failed: node 0: unsupported"):
        build_serialized_engine(model / "encoder.onnx", TensorRT(trt, "8.7"), "typed")


def test_unknown_precision(model):
    trt, _ = make_fake_trt()
    with pytest.raises(EngineBuildError, match="precision 'int8'"):
        build_serialized_engine(model / "encoder.onnx", TensorRT(trt, "8.7"), "int8")


def test_model_engines_are_cached_and_timing_cache_persisted(model, tmp_path):
    trt, calls = make_fake_trt()
    rt, cache = TensorRT(trt, "8.7"), EngineCache(tmp_path / "engines")
    first = build_model_engines(model, rt, cache)
    assert sorted((r.graph, r.action, r.reason) for r in first) == [
        (g, "built", "missing") for g in ("calibration", "decoder_b1", "encoder", "step_b1")]
    timing = cache.timing_cache_path("10.3.0.30", "8.7")
    assert timing.read_bytes() == b"++++"  # each build extended the previous cache
    assert [c[1] for c in calls if c[0] == "timing_in"] == [b"", b"+", b"++", b"+++"]
    again = build_model_engines(model, rt, cache)
    assert {r.action for r in again} == {"loaded"}
    # A new TensorRT on the device: every engine is rebuilt under a new key.
    trt2, _ = make_fake_trt("10.3.0.31")
    third = build_model_engines(model, TensorRT(trt2, "8.7"), cache, graphs=["encoder"])
    assert [(r.action, r.reason) for r in third] == [("built", "missing")]


def test_corrupt_timing_cache_starts_empty(model, tmp_path):
    trt, _ = make_fake_trt()
    rt, cache = TensorRT(trt, "8.7"), EngineCache(tmp_path)
    path = cache.timing_cache_path(rt.version, "8.7")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"bad cache")
    build_model_engines(model, rt, cache, graphs=["encoder"])
    assert path.read_bytes() == b"+"


def test_unknown_graph(model, tmp_path):
    trt, _ = make_fake_trt()
    with pytest.raises(EngineBuildError, match="no graph 'step_b4'"):
        build_model_engines(model, TensorRT(trt, "8.7"), EngineCache(tmp_path), graphs=["step_b4"])


def test_key_uses_graph_shapes(model):
    trt, _ = make_fake_trt()
    m = load_model_dir(model)
    g = m.graphs["step_b1"]
    key = engine_key(g.sha256, g, TensorRT(trt, "8.7"), "typed")
    assert key.shapes[0] == ("history_latents", (1, 2, 2, 2, 2), "float32")
    assert key.trt_version == "10.3.0.30" and key.compute_capability == "8.7"


def test_export_group_registers_and_engine_needs_tensorrt(model, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tensorrt", None)  # as on every machine here
    parser = argparse.ArgumentParser(prog="syncedge")
    register(parser.add_subparsers(dest="command"))
    assert len(SUBCOMMANDS) >= 2
    args = parser.parse_args(["export", "engine", str(model)])
    with pytest.raises(MissingDependencyError, match=r"pip install 'syncedge\[nvidia\]'"):
        args.func(args)
