"""Backends behind one runner interface, selected by name or automatically.

Names (``--backend``): ``cpu`` (ONNX Runtime CPU, the default), ``ort-cuda`` and
``ort-trt`` (ONNX Runtime's CUDA / TensorRT execution providers), ``tensorrt`` (native
TensorRT + pycuda), and ``auto`` (the first available of ``tensorrt``, ``ort-trt``,
``ort-cuda``, ``cpu``). An unknown name is an error; names are never guessed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from edge.runtime.backends.base import Runner
from edge.runtime.backends.ort import OrtCpuRunner, OrtCudaRunner, OrtTensorrtRunner
from edge.runtime.backends.probe import (
    Availability,
    cuda_driver_status,
    library_present,
    ort_providers,
)
from edge.runtime.errors import BackendError, BackendUnavailableError

__all__ = [
    "AUTO_ORDER",
    "RunnerFactory",
    "BACKEND_NAMES",
    "Availability",
    "Runner",
    "backend_availability",
    "make_runner_factory",
    "resolve_backend",
]

BACKEND_NAMES = ("cpu", "ort-cuda", "ort-trt", "tensorrt")
AUTO_ORDER = ("tensorrt", "ort-trt", "ort-cuda", "cpu")
_PROVIDERS = {"cpu": "CPUExecutionProvider", "ort-cuda": "CUDAExecutionProvider",
              "ort-trt": "TensorrtExecutionProvider"}

#: A factory making one runner per graph file.
RunnerFactory = Callable[[Path], Runner]


def _check_name(name: str, allow_auto: bool = True) -> str:
    names = BACKEND_NAMES + (("auto",) if allow_auto else ())
    if name not in names:
        raise BackendError(f"backend: expected one of {list(names)}, found {name!r}")
    return name


def backend_availability(name: str) -> Availability:
    """Whether backend ``name`` can run here, and why not (library, driver, device).

    Raises:
        BackendError: ``name`` is not a backend name.
    """
    _check_name(name, allow_auto=False)
    if name in _PROVIDERS:
        provider = _PROVIDERS[name]
        listed = ort_providers()
        if not listed:
            return Availability(name, False, "onnxruntime is not installed")
        if provider not in listed:
            return Availability(name, False, f"this onnxruntime build lists no {provider} "
                                             f"(found {list(listed)}; needs onnxruntime-gpu)")
        if name != "cpu":
            drv = cuda_driver_status()
            if not drv.available:
                return Availability(name, False, drv.reason)
            return Availability(name, True, f"{provider} listed; {drv.reason}")
        return Availability(name, True, f"{provider} listed")
    missing = [lib for lib in ("tensorrt", "pycuda") if not library_present(lib)]
    if missing:
        return Availability(name, False, f"missing librar{'y' if len(missing) == 1 else 'ies'} "
                                         f"{', '.join(missing)} "
                                         f"(pip install 'syncedge[nvidia]' on a JetPack device)")
    drv = cuda_driver_status()
    if not drv.available:
        return Availability(name, False, drv.reason)
    return Availability(name, True, f"tensorrt and pycuda importable; {drv.reason} "
                                    f"(engine execution unverified in this project)")


def resolve_backend(name: str) -> str:
    """Turn a ``--backend`` value into a concrete, available backend name.

    Raises:
        BackendError: unknown name.
        BackendUnavailableError: the named backend cannot run here (the reason is given).
    """
    _check_name(name)
    if name == "auto":
        for cand in AUTO_ORDER:
            if backend_availability(cand).available:
                return cand
        raise BackendUnavailableError("backend 'auto': no backend is available, not even "
                                      "'cpu' (is onnxruntime installed?)")
    av = backend_availability(name)
    if not av.available:
        raise BackendUnavailableError(f"backend '{name}' is not available here: {av.reason}")
    return name


def make_runner_factory(name: str, intra_op_num_threads: int | None = None,
                        **options: Any) -> RunnerFactory:
    """A factory building runners of backend ``name`` (``auto`` is resolved first).

    Args:
        name: a backend name or ``auto``.
        intra_op_num_threads: ONNX Runtime thread count (ignored by ``tensorrt``).
        options: extra keyword arguments of the runner class (e.g. ``engine_dir``).

    Raises:
        BackendError, BackendUnavailableError: as for :func:`resolve_backend`.
    """
    concrete = resolve_backend(name)
    if concrete == "tensorrt":
        from edge.runtime.backends.tensorrt import TensorrtRunner

        return lambda path: TensorrtRunner(path, **options)
    cls = {"cpu": OrtCpuRunner, "ort-cuda": OrtCudaRunner, "ort-trt": OrtTensorrtRunner}[concrete]
    return lambda path: cls(path, intra_op_num_threads=intra_op_num_threads, **options)
