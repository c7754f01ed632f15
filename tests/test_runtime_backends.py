"""One contract suite for every available backend plus a fake; selection; doctor."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from edge.commands import doctor
from edge.errors import EdgeError, MissingDependencyError
from edge.manifest import load_model_dir
from edge.runtime.backends import (
    BACKEND_NAMES,
    backend_availability,
    make_runner_factory,
    resolve_backend,
)
from edge.runtime.backends.tensorrt import TensorrtRunner
from edge.runtime.errors import BackendError, BackendUnavailableError, CallOrderError
from tests.fixtures.runtime import FakeRunner, tiny_model_dir

AVAILABLE = [n for n in BACKEND_NAMES if backend_availability(n).available]


def _factory(name: str):
    return FakeRunner if name == "fake" else make_runner_factory(name, intra_op_num_threads=1)


def _feeds(spec, rng):
    return {t.name: (rng.integers(0, 256, t.shape, dtype=np.uint8) if t.dtype == "uint8"
                     else rng.normal(0, 0.3, t.shape).astype(np.float32)) for t in spec.inputs}


@pytest.fixture(params=AVAILABLE + ["fake"])
def backend(request):
    return request.param


def test_backend_contract(backend: str) -> None:
    model_dir = tiny_model_dir()
    manifest = load_model_dir(model_dir)
    factory = _factory(backend)
    rng = np.random.default_rng(0)
    # The constructor stores arguments only: a missing file fails at activate().
    lazy = factory(model_dir / "missing.onnx")
    assert not lazy.is_active
    with pytest.raises(EdgeError):
        lazy.activate()
    for key in ("encoder", "step_b4", "decoder_b1"):
        g = manifest.graph(key)
        runner = factory(model_dir / g.file)
        feeds = _feeds(g, rng)
        with pytest.raises(CallOrderError, match="activate"):
            runner.infer(feeds)
        with runner as r:
            assert r.is_active
            assert set(r.input_names) == {t.name for t in g.inputs}
            out = r.infer(feeds)
            spec = g.outputs[0]
            assert out[spec.name].shape == spec.shape
            assert out[spec.name].dtype == np.float32
            buf = np.empty(spec.shape, np.float32)
            got = r.infer(feeds, {spec.name: buf})[spec.name]
            assert got is buf
            np.testing.assert_allclose(buf, out[spec.name], rtol=1e-6, atol=1e-6)
            with FakeRunner(model_dir / g.file) as ref:
                np.testing.assert_allclose(buf, ref.infer(feeds)[spec.name], rtol=1e-4,
                                           atol=1e-5)
            with pytest.raises(BackendError, match="missing"):
                r.infer({k: v for k, v in list(feeds.items())[1:]})
        assert not runner.is_active
        runner.deactivate()  # idempotent


def test_unknown_backend_names_are_errors() -> None:
    for bad in ("CPU", "gpu", "trt", "onnx", ""):
        with pytest.raises(BackendError, match="expected one of"):
            resolve_backend(bad)


def test_unavailable_backend_says_why() -> None:
    for name in BACKEND_NAMES:
        av = backend_availability(name)
        assert av.reason
        if not av.available:
            with pytest.raises(BackendUnavailableError, match=name):
                resolve_backend(name)
    assert resolve_backend("auto") in AVAILABLE
    assert resolve_backend("cpu") == "cpu"


def test_tensorrt_runner_is_lazy() -> None:
    runner = TensorrtRunner(tiny_model_dir() / "encoder.onnx")
    if backend_availability("tensorrt").available:
        pytest.skip("tensorrt is installed here")
    with pytest.raises(MissingDependencyError, match=r"syncedge\[nvidia\]"):
        runner.activate()


def test_doctor_reports_every_backend(capsys) -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    doctor.register(sub)
    args = parser.parse_args(["doctor"])
    assert args.func(args) == 0
    text = capsys.readouterr().out
    for name in BACKEND_NAMES + ("cuda-driver", "nvcc", "fatbin", "auto", "engine-cache",
                                 "rollout"):
        assert name in text
    assert "host path" in text or "device path" in text
    d = doctor.collect()
    assert d["auto"] in AVAILABLE


def test_ort_sessions_sleep_between_runs_unless_asked() -> None:
    from edge.runtime.backends.ort import OrtCpuRunner

    path = tiny_model_dir() / "encoder.onnx"
    key = "session.intra_op.allow_spinning"
    assert OrtCpuRunner(path, 2).session_options().get_session_config_entry(key) == "0"
    opts = OrtCpuRunner(path, 2, allow_spinning=True).session_options()
    assert opts.get_session_config_entry(key) == "1" and opts.intra_op_num_threads == 2
