"""The device's own bundle target (one of :data:`edge.bundle.format.TARGETS`).

Resolution order: an explicit value (the ``--target`` flag), then ``SYNCEDGE_TARGET``,
then detection:

- a Jetson (``/proc/device-tree/model`` names "NVIDIA Jetson"): Orin -> ``jetson-orin-sm87``,
  Thor -> ``jetson-thor-sm110``; another Jetson is an error asking for ``SYNCEDGE_TARGET``;
- an x86-64 machine whose CUDA driver reports compute capability 9.0 -> ``x86-sm90``;
  another GPU is an error naming the compute capability found;
- otherwise (no CUDA driver, no GPU) ``cpu``.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Callable
from pathlib import Path

from edge.bundle.format import BundleError, check_target

__all__ = ["ENV_VAR", "cuda_compute_capability", "detect_target", "device_target"]

ENV_VAR = "SYNCEDGE_TARGET"
DEVICE_TREE_MODEL = Path("/proc/device-tree/model")


def cuda_compute_capability(device: int = 0) -> tuple[int, int] | None:
    """(major, minor) of CUDA device ``device`` from the driver library, or ``None``.

    Uses ``libcuda.so.1`` through ctypes (``cuDeviceGetAttribute`` with attributes 75/76,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR/MINOR of the CUDA driver API); ``None``
    when no driver or no device is present.
    """
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    if lib.cuInit(0) != 0:
        return None
    dev = ctypes.c_int(0)
    if lib.cuDeviceGet(ctypes.byref(dev), device) != 0:
        return None
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    if lib.cuDeviceGetAttribute(ctypes.byref(major), 75, dev) != 0 \
            or lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev) != 0:
        return None
    return major.value, minor.value


def detect_target(model_file: Path = DEVICE_TREE_MODEL,
                  compute_capability: Callable[[], tuple[int, int] | None] = cuda_compute_capability,
                  machine: str | None = None) -> str:
    """Detect the target from the hardware (see the module docstring).

    Raises:
        BundleError: a GPU or Jetson this table does not know, naming what was found and
            asking for ``SYNCEDGE_TARGET``.
    """
    try:
        model = model_file.read_bytes().rstrip(b"\x00").decode("utf-8", "replace").strip()
    except OSError:
        model = ""
    if model.startswith("NVIDIA Jetson") or "Jetson" in model.split():
        words = model.replace("-", " ").split()
        if "Orin" in words:
            return "jetson-orin-sm87"
        if "Thor" in words:
            return "jetson-thor-sm110"
        raise BundleError(f"{model_file}: Jetson model {model!r} is not a supported target; "
                          f"set {ENV_VAR} to one of the targets if it is compatible")
    cc = compute_capability()
    if cc is None:
        return "cpu"
    machine = machine or platform.machine()
    if cc == (9, 0) and machine in ("x86_64", "AMD64"):
        return "x86-sm90"
    raise BundleError(f"CUDA device 0: compute capability {cc[0]}.{cc[1]} on {machine} is not "
                      f"a known target; set {ENV_VAR} (e.g. {ENV_VAR}=cpu to run on the CPU)")


def device_target(explicit: str | None = None) -> str:
    """The device target: ``explicit``, else ``$SYNCEDGE_TARGET``, else :func:`detect_target`.

    Raises:
        BundleError: an unknown target name (naming where it came from) or a failed
            detection.
    """
    if explicit:
        return check_target(explicit, "--target")
    env = os.environ.get(ENV_VAR)
    if env:
        return check_target(env, ENV_VAR)
    return detect_target()
