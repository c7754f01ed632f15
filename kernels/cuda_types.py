"""Protocol types of the pycuda handles the launcher holds (pycuda ships no type
information): what :mod:`kernels.launcher` calls on each, no more, so mypy checks every call
and a fake (``tests/fake_cuda.py``) needs only these members. Signatures follow pycuda
2024.1's ``pycuda.driver``.
"""

from __future__ import annotations

from typing import Protocol, SupportsInt

__all__ = ["CudaContext", "CudaDevice", "CudaDriver", "CudaFunction", "CudaModule",
           "CudaStream", "DevicePointer"]

#: A device pointer argument: an ``int`` or anything ``int()`` accepts (a pycuda
#: ``DeviceAllocation``); ``None`` or 0 is a null pointer where a kernel allows one.
DevicePointer = SupportsInt | None


class CudaStream(Protocol):
    """``pycuda.driver.Stream``."""

    def synchronize(self) -> None:
        """Wait for everything enqueued on the stream."""
        ...


class CudaFunction(Protocol):
    """``pycuda.driver.Function``, prepared."""

    def prepare(self, arg_types: str) -> CudaFunction:
        """Fix the argument format (``P`` pointer, ``i`` int32, ``q`` int64)."""
        ...

    def prepared_async_call(self, grid: tuple[int, int], block: tuple[int, int, int],
                            stream: CudaStream | None, *args: int) -> None:
        """Enqueue one launch on ``stream``."""
        ...


class CudaModule(Protocol):
    """``pycuda.driver.Module``."""

    def get_function(self, name: str) -> CudaFunction:
        """A kernel by its ``extern "C"`` name."""
        ...


class CudaContext(Protocol):
    """``pycuda.driver.Context`` (the device's primary context)."""

    def push(self) -> None:
        """Make it current on this thread."""
        ...

    def pop(self) -> None:
        """Make it no longer current."""
        ...

    def detach(self) -> None:
        """Release this reference."""
        ...


class CudaDevice(Protocol):
    """``pycuda.driver.Device``."""

    def retain_primary_context(self) -> CudaContext:
        """The device's primary context (shared with the CUDA runtime and other libraries)."""
        ...

    def compute_capability(self) -> tuple[int, int]:
        """``(major, minor)``."""
        ...


class CudaDriver(Protocol):
    """The ``pycuda.driver`` module, as far as the launcher uses it."""

    Error: type[Exception]

    def init(self) -> None:
        """Initialise the driver API."""
        ...

    def Device(self, ordinal: int) -> CudaDevice:  # noqa: N802 - pycuda's class name
        """A device by index."""
        ...

    def Stream(self) -> CudaStream:  # noqa: N802 - pycuda's class name
        """A new stream in the current context."""
        ...

    def module_from_buffer(self, buffer: bytes) -> CudaModule:
        """Load a cubin or fatbin image."""
        ...

    def get_driver_version(self) -> int:
        """The driver's CUDA version, ``1000 * major + 10 * minor``."""
        ...
