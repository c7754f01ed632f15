"""The one engine path, on the CPU: ``export engine`` fills the engine cache, the runtime's
``tensorrt`` backend loads from it (fake TensorRT, fake CUDA driver with fake device
buffers; the real TensorRT has not run here, docs/runtime.md)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from device_fakes import Fakes, export_engine, make_slot
from fake_cuda import install_tensorrt
from fake_tensorrt import make_fake_trt

from edge.manifest import load_model_dir
from edge.runtime.backends.tensorrt import TensorrtRunner
from edge.runtime.device_copies import copy_counts
from edge.runtime.engine_cache import EngineCache
from edge.runtime.errors import BackendError
from edge.runtime.model import WorldModel, load_model
from tests.fixtures.runtime import tiny_model_dir


@pytest.fixture
def fakes(monkeypatch, tmp_path) -> Fakes:
    return Fakes(monkeypatch, tmp_path)


@pytest.fixture
def slot(tmp_path):
    yield from make_slot(tmp_path)


def _tree(folder: Path) -> dict[str, tuple[int, int, str]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns,
                                         hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _runners(model: WorldModel) -> dict[str, TensorrtRunner]:
    return {k: model.runner(k) for k in model.manifest.graphs}


def test_runtime_uses_the_engines_export_engine_built(fakes, slot, capsys):
    before = _tree(slot)
    assert export_engine(slot) == 0
    graphs = load_model_dir(slot).graphs
    assert fakes.builds == len(graphs)
    assert capsys.readouterr().out.count(": built (missing) -> ") == len(graphs)
    model = load_model(slot, backend="tensorrt")
    try:
        assert model.backend == "tensorrt"
        assert fakes.builds == len(graphs)  # the runtime's builder ran 0 times
        for key, runner in _runners(model).items():
            assert (runner.engine_action, runner.engine_reason) == ("loaded", ""), key
            assert runner.engine_path.is_relative_to(fakes.state / "engines")
            side = json.loads(runner.engine_path.with_suffix(".json").read_text())
            assert hashlib.sha256(runner._engine.blob).hexdigest() == side["engine_sha256"]
            assert side["key"]["onnx_sha256"] == graphs[key].sha256
            assert side["key"]["compute_capability"] == "8.7"
    finally:
        model.deactivate()
    assert _tree(slot) == before  # nothing written into the bundle slot
    assert not fakes.cuda.live and fakes.cuda.context_depth == 0


@pytest.mark.parametrize("change", ["tensorrt", "compute-capability"])
def test_stale_key_rebuilds_exactly_once(fakes, slot, change):
    export_engine(slot, "--graph", "encoder")
    if change == "tensorrt":
        fakes.use_trt("10.3.0.31")  # the device's TensorRT was upgraded
    else:
        fakes.cuda.cc = (9, 0)  # the engines were built on another GPU
    built = fakes.builds
    runner = TensorrtRunner(slot / "encoder.onnx").activate()
    assert (runner.engine_action, runner.engine_reason) == ("built", "missing")
    runner.deactivate()
    assert fakes.builds == built + 1
    again = TensorrtRunner(slot / "encoder.onnx").activate()
    assert again.engine_action == "loaded" and fakes.builds == built + 1
    again.deactivate()


def test_undeserialisable_cached_engine_is_rebuilt(fakes, slot):
    export_engine(slot, "--graph", "encoder")
    engine = next((fakes.state / "engines").rglob("*.engine"))
    side = engine.with_suffix(".json")
    bad = b"NOT AN ENGINE"
    engine.write_bytes(bad)  # bytes and sidecar agree, but TensorRT rejects them
    meta = json.loads(side.read_text())
    meta["engine_sha256"] = hashlib.sha256(bad).hexdigest()
    side.write_text(json.dumps(meta))
    runner = TensorrtRunner(slot / "encoder.onnx").activate()
    assert runner.engine_action == "built"
    assert runner.engine_reason == "stale: the cached engine was unusable (TensorRT did not " \
                                   "deserialise it)"
    assert engine.read_bytes().startswith(b"ENGINE:")
    runner.deactivate()


def test_engine_without_the_models_shapes_is_rebuilt(fakes, slot):
    """An entry under the right key whose engine has other tensors (here: batch 1 instead
    of 4) is rebuilt once, naming the tensor; never run with the wrong shapes."""
    export_engine(slot, "--graph", "step_b1", "--graph", "step_b4")
    cache = EngineCache(fakes.state / "engines")
    entries = {json.loads(p.read_text())["key"]["shapes"][0][1][0]: p
               for p in cache.root.rglob("*.json") if "timing" not in p.parts}
    b1 = entries[1].with_suffix(".engine").read_bytes()
    side4 = entries[4]
    side4.with_suffix(".engine").write_bytes(b1)
    meta = json.loads(side4.read_text())
    meta["engine_sha256"] = hashlib.sha256(b1).hexdigest()
    side4.write_text(json.dumps(meta))
    built = fakes.builds
    runner = TensorrtRunner(slot / "step_b4.onnx").activate()
    assert runner.engine_action == "built" and fakes.builds == built + 1
    assert "input 'history_latents': expected float32 [4," in runner.engine_reason
    assert runner.tensor_spec("history_latents")[0][0] == 4
    runner.deactivate()


def test_failed_activation_frees_device_memory(fakes, slot, monkeypatch):
    export_engine(slot, "--graph", "decoder_b1")
    from fake_tensorrt import FakeEngine

    def boom(self):
        raise RuntimeError("out of device memory")

    monkeypatch.setattr(FakeEngine, "create_execution_context", boom)
    runner = TensorrtRunner(slot / "decoder_b1.onnx")
    with pytest.raises(RuntimeError, match="out of device memory"):
        runner.activate()
    assert not fakes.cuda.live and fakes.cuda.context_depth == 0 and not runner.is_active


def test_build_failure_is_a_clear_backend_error(fakes, slot, monkeypatch):
    fakes.trt, fakes.calls = make_fake_trt(parse_ok=False, cuda=fakes.cuda)
    install_tensorrt(monkeypatch, fakes.trt)
    with pytest.raises(BackendError, match=r"encoder\.onnx: no usable TensorRT engine: .*"
                                           r"ONNX parser failed"):
        TensorrtRunner(slot / "encoder.onnx").activate()
    assert not fakes.cuda.live and fakes.cuda.context_depth == 0


def test_graph_outside_a_model_folder_is_named(fakes, tmp_path):
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(tiny_model_dir() / "encoder.onnx", lone)
    with pytest.raises(BackendError, match="model.json beside it"):
        TensorrtRunner(lone / "encoder.onnx").activate()


def test_infer_matches_onnxruntime_and_counts_its_copies(fakes, slot):
    rng = np.random.default_rng(0)
    spec = load_model_dir(slot).graph("step", 4)
    feeds = {t.name: rng.normal(0, 0.3, t.shape).astype(np.float32) for t in spec.inputs}
    with load_model(slot, backend="cpu", intra_op_num_threads=1) as cpu:
        want = cpu.runner("step_b4").infer(feeds)["next_latent"]
    with TensorrtRunner(slot / "step_b4.onnx") as r:
        c0 = copy_counts()
        got = r.infer(feeds)["next_latent"]
        d = copy_counts() - c0
        assert (d.htod, d.dtoh) == (len(spec.inputs), 1)
        assert fakes.cuda.raw_copies["htod"] >= d.htod
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        # the executor path: device pointers in, device pointers out, no host copy
        ptrs = r.device_pointers()
        out = fakes.cuda.mem_alloc(got.nbytes)
        c0, raw0 = copy_counts(), sum(fakes.cuda.raw_copies.values())
        stream = fakes.cuda.Stream()
        r.enqueue({n: ptrs[n] for n in r.input_names}, {"next_latent": int(out)},
                  stream.handle)
        assert (copy_counts() - c0).total == 0
        assert sum(fakes.cuda.raw_copies.values()) == raw0
        np.testing.assert_array_equal(fakes.cuda.view(out, np.float32, got.shape), got)
        out.free()
        with pytest.raises(BackendError, match=r"missing \['action'\]"):
            r.enqueue({n: ptrs[n] for n in r.input_names if n != "action"}, {}, stream.handle)
        with pytest.raises(BackendError, match=r"input 'action': expected float32 \[4, 3\]"):
            r.infer({**feeds, "action": feeds["action"][:1]})


def test_doctor_lists_the_engine_cache(fakes, slot):
    from edge.commands.doctor import engine_cache_status

    assert engine_cache_status().reason.endswith(": empty")
    export_engine(slot, "--graph", "encoder", "--graph", "step_b1")
    fakes.use_trt("10.3.0.31")
    export_engine(slot, "--graph", "encoder")
    status = engine_cache_status()
    assert status.available
    assert status.reason == (f"{fakes.state / 'engines'}: 2 for TensorRT 10.3.0.30 sm 8.7, "
                             f"1 for TensorRT 10.3.0.31 sm 8.7")
