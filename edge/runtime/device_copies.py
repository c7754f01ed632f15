"""The one function every copy between host and GPU memory goes through, and its counts.

The GPU rollout's promise is that a step copies nothing between host and device: the
state, the frames and the scores stay on the device until :meth:`outputs`. To make that
checkable, every host<->device transfer in ``edge`` (the TensorRT runner's ``infer``,
``edge.runtime.cuda_step.CudaRolloutStep``'s ``reset``/``outputs``, the device rollout's context
upload) calls :func:`host_copy`, which counts calls and bytes per direction in the
process-wide :data:`COUNTS`. Tests and ``metrics.json`` read differences of
:func:`copy_counts` around a step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

__all__ = ["COUNTS", "CopyCounts", "copy_counts", "host_copy"]


@dataclass
class CopyCounts:
    """Host<->device copies: calls and bytes per direction.

    Attributes:
        htod: host-to-device copies (calls).
        dtoh: device-to-host copies (calls).
        htod_bytes: bytes copied host to device.
        dtoh_bytes: bytes copied device to host.
    """

    htod: int = 0
    dtoh: int = 0
    htod_bytes: int = 0
    dtoh_bytes: int = 0

    @property
    def total(self) -> int:
        """Copies in both directions (calls)."""
        return self.htod + self.dtoh

    def __sub__(self, other: CopyCounts) -> CopyCounts:
        return CopyCounts(self.htod - other.htod, self.dtoh - other.dtoh,
                          self.htod_bytes - other.htod_bytes, self.dtoh_bytes - other.dtoh_bytes)

    def to_json(self) -> dict[str, int]:
        """``{"htod": .., "dtoh": .., "htod_bytes": .., "dtoh_bytes": ..}``."""
        return {"htod": self.htod, "dtoh": self.dtoh, "htod_bytes": self.htod_bytes,
                "dtoh_bytes": self.dtoh_bytes}


#: Process-wide counts of every :func:`host_copy` call.
COUNTS = CopyCounts()


def copy_counts() -> CopyCounts:
    """A snapshot of :data:`COUNTS` (subtract two snapshots to count copies in between)."""
    return replace(COUNTS)


def host_copy(cuda: Any, direction: str, dst: Any, src: Any, stream: Any = None) -> None:
    """Copy between a host array and device memory, and count it.

    Args:
        cuda: the ``pycuda.driver`` module (or a double with ``memcpy_htod[_async]`` and
            ``memcpy_dtoh[_async]``).
        direction: ``"htod"`` (``src`` a C-contiguous host array, ``dst`` a device
            pointer/allocation) or ``"dtoh"`` (``dst`` a C-contiguous host array, ``src``
            device memory).
        dst, src: as above; the host array's ``nbytes`` is the size copied.
        stream: a stream for an asynchronous copy (the host array must stay alive and,
            for ``dtoh``, is valid after the stream is synchronised); None copies
            synchronously.

    Raises:
        ValueError: an unknown direction or a non-contiguous host array.
    """
    host = src if direction == "htod" else dst
    if direction not in ("htod", "dtoh"):
        raise ValueError(f"host_copy direction: expected 'htod' or 'dtoh', found {direction!r}")
    if not isinstance(host, np.ndarray) or not host.flags.c_contiguous:
        raise ValueError(f"host_copy ({direction}): expected a C-contiguous host array, found "
                         f"{type(host).__name__}")
    if direction == "htod":
        COUNTS.htod += 1
        COUNTS.htod_bytes += host.nbytes
        if stream is None:
            cuda.memcpy_htod(dst, src)
        else:
            cuda.memcpy_htod_async(dst, src, stream)
    else:
        COUNTS.dtoh += 1
        COUNTS.dtoh_bytes += host.nbytes
        if stream is None:
            cuda.memcpy_dtoh(dst, src)
        else:
            cuda.memcpy_dtoh_async(dst, src, stream)
