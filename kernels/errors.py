"""Exception hierarchy of the ``kernels`` package.

``kernels`` imports nothing of the project, so it has its own hierarchy. Every message
names the subject, what was expected, what was found and, where useful, the fix.
"""

from __future__ import annotations

__all__ = [
    "KernelBuildError",
    "KernelError",
    "KernelInputError",
    "KernelLoadError",
    "MissingDependencyError",
    "NonFiniteOutputError",
]


class KernelError(Exception):
    """Base class of every error raised by ``kernels``."""


class KernelInputError(KernelError, ValueError):
    """An array passed to a kernel or its reference has the wrong shape, dtype or value."""


class NonFiniteOutputError(KernelError, ValueError):
    """Decoder output held NaN values (an error by contract; the frames are not usable).

    Attributes:
        nan_count: number of NaN values met (pixels x channels).
    """

    def __init__(self, nan_count: int, subject: str = "decoder output"):
        super().__init__(
            f"{subject}: expected finite values, found {nan_count} NaN value(s); the frames "
            "are not usable (check the model and its inputs)"
        )
        self.nan_count = int(nan_count)


class MissingDependencyError(KernelError, ImportError):
    """An optional library is not installed; the message names the extra to install.

    Same arguments and message as ``edge.errors.MissingDependencyError`` (kept apart
    because ``kernels`` imports nothing of the other packages).
    """

    def __init__(self, library: str, extra: str, purpose: str):
        super().__init__(
            f"{purpose} needs the '{library}' library, which is not installed; "
            f"install it with: pip install 'syncedge[{extra}]' (from a source checkout: "
            f"pip install '.[{extra}]')"
        )
        self.library = library
        self.extra = extra


class KernelBuildError(KernelError, RuntimeError):
    """nvcc or the host compiler failed, or the fatbin manifest does not match its files."""


class KernelLoadError(KernelError, RuntimeError):
    """The CUDA driver could not load the kernels (no usable fatbin and no nvcc)."""
