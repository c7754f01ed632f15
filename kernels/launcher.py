"""pycuda launcher of the rollout kernels (lazy: importing this module needs no GPU).

Loading order in :meth:`KernelLauncher.activate`:

1. the prebuilt ``rollout_kernels.fatbin`` (SASS for sm_87 / sm_90 / sm_110, PTX for
   compute_110) with ``pycuda.driver.module_from_buffer``, if its manifest matches the
   sources and the driver is CUDA 13 or newer;
2. otherwise (JetPack 6's CUDA 12.6 driver cannot load CUDA 13 binaries, or the fatbin
   is stale) a cubin compiled with the device's own nvcc for its compute capability,
   cached by the sha256 of the sources and the nvcc version;
3. otherwise :class:`~kernels.errors.KernelLoadError` naming both failures.

The launcher works in the device's primary context (the one the CUDA runtime,
TensorRT, PyTorch and CuPy use), so device pointers and streams are shared with them,
and enqueues every kernel on one stream without synchronising. All array arguments
are device pointers (``int`` or anything ``int()`` accepts, e.g. a pycuda
``DeviceAllocation``); 0 is a null pointer where a kernel allows one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from kernels.build import FATBIN, KERNEL_DIR, SOURCES, compile_cubin, nvcc_version, verify_manifest
from kernels.cuda_types import (
    CudaContext,
    CudaDriver,
    CudaFunction,
    CudaModule,
    CudaStream,
    DevicePointer,
)
from kernels.errors import (
    KernelBuildError,
    KernelInputError,
    KernelLoadError,
    MissingDependencyError,
    NonFiniteOutputError,
)

__all__ = ["BLOCK", "KernelLauncher", "RingShape", "check_nan_count", "import_pycuda_driver"]

BLOCK = 256  # threads per block; the reduction kernels require exactly SE_REDUCE_THREADS = 256
MAX_GRID = 65535
MIN_FATBIN_DRIVER = 13000  # the fatbin is built by nvcc 13: CUDA 13 driver or newer

# Kernel name -> pycuda prepared-call format (P pointer, i int32, q int64).
_SIGNATURES = {
    "se_ring_fill": "PPPPPiiiiP",
    "se_ring_push": "PPPPPiiiiP",
    "se_ring_linearise": "PPPPiiiiP",
    "se_ring_push_linearise": "PPPPPPPiiiiP",
    "se_ring_advance": "Pi",
    "se_select_action": "PPPiiiP",
    "se_decode_frames": "PPPiiiP",
    "se_precheck_scores": "PPPPPPPiii",
    "se_robot_in_keepout": "PPPii",
    "se_store_step": "PPqiP",
}


def import_pycuda_driver() -> Any:
    """Import and return ``pycuda.driver``.

    Raises:
        MissingDependencyError: pycuda is not installed (names ``syncedge[nvidia]``).
    """
    try:
        import pycuda.driver as cuda
    except ImportError as exc:
        raise MissingDependencyError("pycuda", "nvidia", "Launching the CUDA kernels") from exc
    return cuda


def check_nan_count(nan_count: int, subject: str = "decoder output") -> None:
    """Raise :class:`~kernels.errors.NonFiniteOutputError` if ``nan_count`` is not 0."""
    if int(nan_count):
        raise NonFiniteOutputError(int(nan_count), subject)


@dataclass(frozen=True)
class RingShape:
    """Shape of the rollout state: ``batch`` B, ``slots`` S, ``latent`` L = C*h*w, ``action`` A."""

    batch: int
    slots: int
    latent: int
    action: int

    def __post_init__(self) -> None:
        for name in ("batch", "slots", "latent", "action"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1 or value >= 2**31:
                raise KernelInputError(f"RingShape.{name}: expected an int >= 1, found {value!r}")


def _grid(n: int) -> tuple[int, int]:
    return (max(1, min((int(n) + BLOCK - 1) // BLOCK, MAX_GRID)), 1)


#: A device pointer argument (:data:`kernels.cuda_types.DevicePointer`).
Ptr = DevicePointer


def _p(ptr: Ptr) -> int:
    return 0 if ptr is None else int(ptr)


class KernelLauncher:
    """Loads the kernels into the primary context and launches them on one stream.

    The constructor only stores arguments; :meth:`activate` (or ``with``) does the work.

    Args:
        device_ordinal: CUDA device index.
        fatbin: path of the prebuilt fatbin (default: the one shipped in ``kernels/``).
        cache_dir: where compiled cubins are kept (default ``~/.cache/syncedge/kernels``).
        nvcc: nvcc executable for the compile fallback.
        allow_compile: False forbids the nvcc fallback (the fatbin must load).
    """

    def __init__(
        self,
        device_ordinal: int = 0,
        *,
        fatbin: str | Path | None = None,
        cache_dir: str | Path | None = None,
        nvcc: str = "nvcc",
        allow_compile: bool = True,
    ):
        self.device_ordinal = device_ordinal
        self.fatbin = Path(fatbin) if fatbin is not None else KERNEL_DIR / FATBIN
        self.cache_dir = (
            Path(cache_dir) if cache_dir is not None else Path.home() / ".cache/syncedge/kernels"
        )
        self.nvcc = nvcc
        self.allow_compile = allow_compile
        self.load_path: str | None = None  # "fatbin" or "nvcc sm_XY", set by activate()
        self._cuda: Any = None  # the pycuda.driver module (what .driver returns)
        self._ctx: CudaContext | None = None
        self._module: CudaModule | None = None
        self._stream: CudaStream | None = None
        self._fn: dict[str, CudaFunction] = {}

    # ------------------------------------------------------------------ lifecycle

    def activate(self) -> KernelLauncher:
        """Retain and push the primary context, load the kernels, create the stream.

        Raises:
            MissingDependencyError: pycuda is not installed.
            KernelLoadError: neither the fatbin nor a compiled cubin could be loaded.
        """
        if self._module is not None:
            return self
        cuda = cast(CudaDriver, import_pycuda_driver())
        cuda.init()
        device = cuda.Device(self.device_ordinal)
        self._cuda = cuda
        ctx = self._ctx = device.retain_primary_context()
        ctx.push()
        try:
            major, minor = device.compute_capability()
            module = self._module = self._load_module(cuda, f"{major}{minor}")
            self._stream = cuda.Stream()
            for name, fmt in _SIGNATURES.items():
                fn = module.get_function(name)
                fn.prepare(fmt)
                self._fn[name] = fn
        except BaseException:
            ctx.pop()
            ctx.detach()
            self._ctx = None
            raise
        return self

    def _load_module(self, cuda: CudaDriver, arch: str) -> CudaModule:
        fatbin_error = self._fatbin_unusable(cuda)
        if fatbin_error is None:
            try:
                module = cuda.module_from_buffer(self.fatbin.read_bytes())
                self.load_path = "fatbin"
                return module
            except cuda.Error as exc:
                fatbin_error = f"the driver refused {self.fatbin}: {exc}"
        if not self.allow_compile:
            raise KernelLoadError(f"kernels: {fatbin_error}; compiling is disabled")
        try:
            cubin = self._cached_cubin(arch)
            module = cuda.module_from_buffer(cubin.read_bytes())
        except (KernelBuildError, cuda.Error) as exc:
            raise KernelLoadError(
                f"kernels: {fatbin_error}; compiling for sm_{arch} failed too: {exc}"
            ) from exc
        self.load_path = f"nvcc sm_{arch}"
        return module

    def _fatbin_unusable(self, cuda: CudaDriver) -> str | None:
        if not self.fatbin.exists():
            return f"{self.fatbin} is missing"
        if self.fatbin == KERNEL_DIR / FATBIN:
            problems = verify_manifest()
            if problems:
                return "the shipped fatbin is stale: " + "; ".join(problems)
        driver = cuda.get_driver_version()
        if driver < MIN_FATBIN_DRIVER:
            return (
                f"the driver supports CUDA {driver // 1000}.{driver % 1000 // 10}, the fatbin "
                f"needs {MIN_FATBIN_DRIVER // 1000}.0 or newer"
            )
        return None

    def _cached_cubin(self, arch: str) -> Path:
        digest = hashlib.sha256(nvcc_version(self.nvcc).encode())
        for name in SOURCES:
            digest.update((KERNEL_DIR / name).read_bytes())
        out_dir = self.cache_dir / digest.hexdigest()[:16]
        cubin = out_dir / f"rollout_kernels.sm_{arch}.cubin"
        return cubin if cubin.exists() else compile_cubin(arch, out_dir, self.nvcc)

    def deactivate(self) -> None:
        """Synchronise the stream, unload the kernels and release the primary context."""
        ctx = self._ctx
        if ctx is None:
            return
        try:
            if self._stream is not None:
                self._stream.synchronize()
        finally:
            self._fn.clear()
            self._module = None
            self._stream = None
            ctx.pop()
            ctx.detach()
            self._ctx = None

    def __enter__(self) -> KernelLauncher:
        return self.activate()

    def __exit__(self, *exc: object) -> None:
        self.deactivate()

    # ------------------------------------------------------------------ accessors

    def _require(self) -> None:
        if self._module is None:
            raise KernelLoadError("KernelLauncher: call activate() (or use 'with') first")

    @property
    def driver(self) -> Any:
        """The ``pycuda.driver`` module (after :meth:`activate`)."""
        self._require()
        return self._cuda

    @property
    def stream(self) -> Any:
        """The pycuda ``Stream`` every kernel is enqueued on."""
        self._require()
        return self._stream

    @property
    def stream_handle(self) -> int:
        """The raw ``CUstream`` handle of :attr:`stream`, for other libraries' executors."""
        stream = self.stream
        for attr in ("handle", "handle_int"):
            value = getattr(stream, attr, None)
            if value is not None:
                return int(value)
        raise KernelLoadError(
            "pycuda Stream: expected a 'handle' attribute (pycuda >= 2024.1), found none"
        )

    def synchronize(self) -> None:
        """Wait for everything enqueued on the stream."""
        self.stream.synchronize()

    def _launch(self, name: str, grid: tuple[int, int], block: int, *args: Any) -> None:
        self._require()
        self._fn[name].prepared_async_call(grid, (block, 1, 1), self._stream, *args)

    # ------------------------------------------------------------------ kernels
    # state: device int32[2] = {w, t} (next write slot, steps since fill); see docs/kernels.md.

    def ring_fill(self, shape: RingShape, ring_latents: Ptr, ring_actions: Ptr, hist_latents: Ptr,
                  hist_actions: Ptr, start_latent: Ptr, state: Ptr) -> None:
        """Every slot = start latent (float32 [B, L]) and zero action; history likewise
        (hist_* may be 0); state = {0, 0} (may be 0)."""
        s = shape
        n = max(s.batch * s.slots * s.latent, s.batch * s.slots * s.action)
        self._launch("se_ring_fill", _grid(n), BLOCK, _p(ring_latents), _p(ring_actions),
                     _p(hist_latents), _p(hist_actions), _p(start_latent), s.batch, s.slots,
                     s.latent, s.action, _p(state))  # fmt: skip

    def ring_push(self, shape: RingShape, ring_latents: Ptr, ring_actions: Ptr, new_latent: Ptr,
                  new_action: Ptr, dof_mask: Ptr, state: Ptr) -> None:
        """Write slot state[0]: latent float32 [B, L], masked action float32 [B, A]
        (dof_mask uint8 [A]). Does not advance state."""
        s = shape
        n = max(s.batch * s.latent, s.batch * s.action)
        self._launch("se_ring_push", _grid(n), BLOCK, _p(ring_latents), _p(ring_actions),
                     _p(new_latent), _p(new_action), _p(dof_mask), s.batch, s.slots, s.latent,
                     s.action, _p(state))  # fmt: skip

    def ring_linearise(self, shape: RingShape, hist_latents: Ptr, hist_actions: Ptr,
                       ring_latents: Ptr, ring_actions: Ptr, state: Ptr) -> None:
        """hist[b, s] = ring[b, (state[0] + s) % S] for latents [B, S, L] and actions [B, S, A]."""
        s = shape
        n = max(s.batch * s.slots * s.latent, s.batch * s.slots * s.action)
        self._launch("se_ring_linearise", _grid(n), BLOCK, _p(hist_latents), _p(hist_actions),
                     _p(ring_latents), _p(ring_actions), s.batch, s.slots, s.latent, s.action,
                     _p(state))  # fmt: skip

    def ring_push_linearise(self, shape: RingShape, ring_latents: Ptr, ring_actions: Ptr,
                            hist_latents: Ptr, hist_actions: Ptr, new_latent: Ptr, new_action: Ptr,
                            dof_mask: Ptr, state: Ptr) -> None:
        """Push into slot state[0] and write the history as it is after the push."""
        s = shape
        n = max(s.batch * s.slots * s.latent, s.batch * s.slots * s.action)
        self._launch("se_ring_push_linearise", _grid(n), BLOCK, _p(ring_latents),
                     _p(ring_actions), _p(hist_latents), _p(hist_actions), _p(new_latent),
                     _p(new_action), _p(dof_mask), s.batch, s.slots, s.latent, s.action,
                     _p(state))  # fmt: skip

    def ring_advance(self, shape: RingShape, state: Ptr) -> None:
        """state = {(w + 1) % S, t + 1}."""
        self._launch("se_ring_advance", (1, 1), 1, _p(state), shape.slots)

    def select_action(self, action_out: Ptr, actions: Ptr, dof_mask: Ptr, batch: int, horizon: int,
                      action_width: int, state: Ptr) -> None:
        """action_out float32 [B, A] = masked actions[:, min(state[1], T-1), :] of float32
        [B, T, A]."""
        self._launch("se_select_action", _grid(batch * action_width), BLOCK, _p(action_out),
                     _p(actions), _p(dof_mask), batch, horizon, action_width, _p(state))  # fmt: skip

    def decode_frames(self, frames: Ptr, x: Ptr, offset: Ptr, batch: int, height: int, width: int,
                      nan_count: Ptr) -> None:
        """float32 [B, 3, H, W] (+ offset, or 0) to uint8 [B, H, W, 3]; NaN values are
        added to the int32 at nan_count (check it with :func:`check_nan_count`)."""
        self._launch("se_decode_frames", _grid(batch * height * width), BLOCK, _p(frames),
                     _p(x), _p(offset), batch, height, width, _p(nan_count))  # fmt: skip

    def precheck_scores(self, moved: Ptr, energy: Ptr, goal_mse: Ptr, pred: Ptr, start: Ptr,
                        keepout: Ptr, goal: Ptr, batch: int, height: int, width: int,
                        threshold: int) -> None:
        """Per candidate: moved int32 [B], energy float32 [B], goal_mse float32 [B] (goal and
        goal_mse may be 0). pred uint8 [B, H, W, 3], start [H, W, 3], keepout [H, W]."""
        if not 0 <= int(threshold) <= 255:
            raise KernelInputError(
                f"threshold: expected an integer in [0, 255], found {threshold!r}"
            )
        self._launch("se_precheck_scores", (batch, 1), BLOCK, _p(moved), _p(energy),
                     _p(goal_mse), _p(pred), _p(start), _p(keepout), _p(goal), batch,
                     height * width, int(threshold))  # fmt: skip

    def robot_in_keepout(self, count: Ptr, robot_mask: Ptr, keepout: Ptr, batch: int,
                         height: int, width: int) -> None:
        """Per candidate: count int32 [B] = pixels with robot_mask >= 0.5 (float32 [B, 1, H, W],
        NaN is not robot) where keepout (uint8 [H, W]) is nonzero."""
        self._launch("se_robot_in_keepout", (batch, 1), BLOCK, _p(count), _p(robot_mask),
                     _p(keepout), batch, height * width)  # fmt: skip

    def store_step(self, dst: Ptr, src: Ptr, nbytes: int, horizon: int, state: Ptr) -> None:
        """Copy nbytes from src to dst + min(state[1], T-1) * nbytes (device to device)."""
        self._launch("se_store_step", _grid(nbytes), BLOCK, _p(dst), _p(src), int(nbytes),
                     horizon, _p(state))  # fmt: skip
