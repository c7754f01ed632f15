"""Availability probes for the backends and the CUDA kernels (used by ``syncedge doctor``).

Nothing here imports a GPU library at module import time; every probe returns an
:class:`Availability` with the reason when something is missing.
"""

from __future__ import annotations

import ctypes
import importlib.util
import shutil
from dataclasses import dataclass

__all__ = ["Availability", "cuda_driver_status", "kernels_status", "ort_providers"]


@dataclass(frozen=True)
class Availability:
    """Whether something can run here, and why not.

    Attributes:
        name: backend or component name.
        available: True when it can run.
        reason: what is present, or what is missing (library, driver, device).
    """

    name: str
    available: bool
    reason: str


def ort_providers() -> tuple[str, ...]:
    """``onnxruntime.get_available_providers()``, or ``()`` if onnxruntime is missing."""
    try:
        import onnxruntime
    except ImportError:
        return ()
    return tuple(onnxruntime.get_available_providers())


def cuda_driver_status() -> Availability:
    """Probe the CUDA driver library (``libcuda.so.1``) and count devices (ctypes only)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return Availability("cuda-driver", False,
                            "no CUDA driver: libcuda.so.1 cannot be loaded")
    rc = lib.cuInit(0)
    if rc != 0:
        return Availability("cuda-driver", False, f"CUDA driver present but cuInit failed "
                                                  f"(CUresult {rc}): no usable device")
    count = ctypes.c_int(0)
    rc = lib.cuDeviceGetCount(ctypes.byref(count))
    if rc != 0 or count.value < 1:
        return Availability("cuda-driver", False, "CUDA driver present but no device found")
    version = ctypes.c_int(0)
    lib.cuDriverGetVersion(ctypes.byref(version))
    v = version.value
    return Availability("cuda-driver", True,
                        f"CUDA driver {v // 1000}.{(v % 1000) // 10}, {count.value} device(s)")


def library_present(module: str) -> bool:
    """True if ``module`` can be imported (found on the path; not imported here)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def kernels_status() -> list[Availability]:
    """Status of nvcc (for the compile fallback) and of the committed fatbin."""
    out = []
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        out.append(Availability("nvcc", False, "nvcc not on PATH (only needed where the "
                                               "prebuilt fatbin cannot load, e.g. JetPack 6)"))
    else:
        from kernels.build import nvcc_version
        from kernels.errors import KernelError

        try:
            out.append(Availability("nvcc", True, f"{nvcc} (version {nvcc_version(nvcc)})"))
        except KernelError as exc:
            out.append(Availability("nvcc", False, str(exc)))
    from kernels.build import verify_manifest

    problems = verify_manifest()
    out.append(Availability("fatbin", not problems,
                            "committed fatbin matches its manifest and sources" if not problems
                            else "; ".join(problems)))
    return out
