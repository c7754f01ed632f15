"""Host build of the kernel bodies: compile ``host_kernels.cpp`` with g++ and call it.

The tests use it to check, without a GPU, that the per-element bodies shared with the
CUDA kernels (``rollout_kernels.cuh``) agree with the NumPy reference bit for bit.
The functions mirror :mod:`kernels.reference` (validation is done there: call these
only with arrays of the documented dtype and shape).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from kernels.errors import KernelBuildError

__all__ = ["CXXFLAGS", "HostKernels", "build_host_library"]

KERNEL_DIR = Path(__file__).resolve().parent
SOURCES = ("host_kernels.cpp", "rollout_kernels.cuh")
# -ffp-contract=off: no fused multiply-add, so float results match the device's
# __fadd_rn / __fmul_rn and NumPy's separate float32 operations.
CXXFLAGS = ("-O2", "-std=c++17", "-ffp-contract=off", "-fno-fast-math", "-shared", "-fPIC")


def build_host_library(out_dir: str | os.PathLike[str], cxx: str = "g++") -> Path:
    """Compile the host build into ``out_dir`` (reused when sources and flags match).

    Returns:
        Path of the shared library.

    Raises:
        KernelBuildError: the compiler is missing or failed (its output is quoted).
    """
    compiler = shutil.which(cxx)
    if compiler is None:
        raise KernelBuildError(f"host build: expected a C++ compiler '{cxx}' on PATH, found none")
    digest = hashlib.sha256(" ".join(CXXFLAGS).encode())
    for name in SOURCES:
        digest.update((KERNEL_DIR / name).read_bytes())
    lib = Path(out_dir) / f"libse_host_{digest.hexdigest()[:16]}.so"
    if lib.exists():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    tmp = lib.with_suffix(f".{os.getpid()}.tmp")
    cmd = [compiler, *CXXFLAGS, "-o", str(tmp), str(KERNEL_DIR / "host_kernels.cpp")]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise KernelBuildError(
            f"host build: '{' '.join(cmd)}' exited with {proc.returncode}: {proc.stderr.strip()}"
        )
    os.replace(tmp, lib)
    return lib


def _ptr(arr: np.ndarray | None) -> ctypes.c_void_p:
    return ctypes.c_void_p(0 if arr is None else arr.ctypes.data)


class HostKernels:
    """ctypes binding of the host build; same semantics as :mod:`kernels.reference`.

    Args:
        library: path returned by :func:`build_host_library`.
    """

    def __init__(self, library: str | os.PathLike[str]):
        self._lib = ctypes.CDLL(str(library))
        p, i = ctypes.c_void_p, ctypes.c_int
        sig = {
            "se_host_ring_fill": (None, [p, p, p, i, i, i, i]),
            "se_host_ring_push": (i, [p, p, i, p, p, p, i, i, i, i]),
            "se_host_ring_linearise": (None, [p, p, p, p, i, i, i, i, i]),
            "se_host_ring_push_linearise": (i, [p, p, p, p, i, p, p, p, i, i, i, i]),
            "se_host_select_action": (None, [p, p, p, i, i, i, i]),
            "se_host_decode_frames": (i, [p, p, p, i, i, i]),
            "se_host_precheck_scores": (None, [p, p, p, p, p, p, p, i, i, i]),
            "se_host_robot_in_keepout": (None, [p, p, p, i, i]),
        }
        for name, (res, args) in sig.items():
            fn = getattr(self._lib, name)
            fn.restype = res
            fn.argtypes = args

    def ring_fill(self, ring_latents: np.ndarray, ring_actions: np.ndarray,
                  start_latent: np.ndarray) -> int:
        """See :func:`kernels.reference.ring_fill`."""
        b, s, lat = ring_latents.shape
        a = ring_actions.shape[2]
        self._lib.se_host_ring_fill(
            _ptr(ring_latents), _ptr(ring_actions), _ptr(start_latent), b, s, lat, a
        )
        return 0

    def ring_push(self, ring_latents: np.ndarray, ring_actions: np.ndarray, w: int,
                  new_latent: np.ndarray, new_action: np.ndarray, dof_mask: np.ndarray) -> int:
        """See :func:`kernels.reference.ring_push`."""
        b, s, lat = ring_latents.shape
        a = ring_actions.shape[2]
        return self._lib.se_host_ring_push(
            _ptr(ring_latents), _ptr(ring_actions), int(w), _ptr(new_latent), _ptr(new_action),
            _ptr(dof_mask), b, s, lat, a,
        )  # fmt: skip

    def ring_linearise(self, ring_latents: np.ndarray, ring_actions: np.ndarray, w_next: int,
                       hist_latents: np.ndarray, hist_actions: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
        """See :func:`kernels.reference.ring_linearise` (outputs are required here)."""
        b, s, lat = ring_latents.shape
        a = ring_actions.shape[2]
        self._lib.se_host_ring_linearise(
            _ptr(hist_latents), _ptr(hist_actions), _ptr(ring_latents), _ptr(ring_actions),
            int(w_next), b, s, lat, a,
        )  # fmt: skip
        return hist_latents, hist_actions

    def ring_push_linearise(
        self, ring_latents: np.ndarray, ring_actions: np.ndarray, hist_latents: np.ndarray,
        hist_actions: np.ndarray, w: int, new_latent: np.ndarray, new_action: np.ndarray,
        dof_mask: np.ndarray,
    ) -> int:  # fmt: skip
        """See :func:`kernels.reference.ring_push_linearise` (mirrors the fused kernel)."""
        b, s, lat = ring_latents.shape
        a = ring_actions.shape[2]
        return self._lib.se_host_ring_push_linearise(
            _ptr(ring_latents), _ptr(ring_actions), _ptr(hist_latents), _ptr(hist_actions),
            int(w), _ptr(new_latent), _ptr(new_action), _ptr(dof_mask), b, s, lat, a,
        )  # fmt: skip

    def select_action(self, actions: np.ndarray, dof_mask: np.ndarray, t: int,
                      out: np.ndarray) -> np.ndarray:
        """See :func:`kernels.reference.select_action` (output is required here)."""
        b, horizon, a = actions.shape
        self._lib.se_host_select_action(
            _ptr(out), _ptr(actions), _ptr(dof_mask), int(t), b, horizon, a
        )
        return out

    def decode_frames_counting(self, x: np.ndarray, offset: np.ndarray | None,
                               out: np.ndarray) -> tuple[np.ndarray, int]:
        """See :func:`kernels.reference.decode_frames_counting` (output is required here)."""
        b, _, h, w = x.shape
        n = self._lib.se_host_decode_frames(_ptr(out), _ptr(x), _ptr(offset), b, h, w)
        return out, int(n)

    def precheck_scores(self, pred: np.ndarray, start: np.ndarray, keepout: np.ndarray,
                        threshold: int, goal: np.ndarray | None = None
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """See :func:`kernels.reference.precheck_scores`; returns (moved, energy, goal_mse)."""
        b, h, w, _ = pred.shape
        moved = np.zeros(b, np.int32)
        energy = np.zeros(b, np.float32)
        mse = np.zeros(b, np.float32) if goal is not None else None
        self._lib.se_host_precheck_scores(
            _ptr(moved), _ptr(energy), _ptr(mse), _ptr(pred), _ptr(start), _ptr(keepout),
            _ptr(goal), b, h * w, int(threshold),
        )  # fmt: skip
        return moved, energy, mse

    def robot_in_keepout(self, robot_mask: np.ndarray, keepout: np.ndarray) -> np.ndarray:
        """See :func:`kernels.reference.robot_in_keepout`; returns int32 ``[B]``."""
        b, h, w = robot_mask.shape
        count = np.zeros(b, np.int32)
        self._lib.se_host_robot_in_keepout(
            _ptr(count), _ptr(robot_mask), _ptr(keepout), b, h * w
        )
        return count
