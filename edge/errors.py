"""Exception hierarchy of the ``edge`` package.

Every message names the subject (a file, a field, a key path), what was expected and what
was found, and where useful the fix.
"""

from __future__ import annotations

__all__ = ["OPTIONAL_LIBRARIES", "EdgeError", "EpisodeError", "MissingDependencyError",
           "TimebaseError", "missing_dependency"]

#: Optional libraries by import name: (distribution, the extra of setup.py that installs it).
OPTIONAL_LIBRARIES: dict[str, tuple[str, str]] = {
    "torch": ("torch", "train"),
    "mujoco": ("mujoco", "train"),
    "fast_simplification": ("fast-simplification", "train"),
    "matplotlib": ("matplotlib", "train"),
    "dynamixel_sdk": ("dynamixel-sdk", "bridge"),
    "scservo_sdk": ("feetech-servo-sdk", "bridge"),
    "pysoem": ("pysoem", "bridge"),
    "tensorrt": ("tensorrt", "nvidia"),
    "pycuda": ("pycuda", "nvidia"),
    "rosbags": ("rosbags", "ros"),
}


class EdgeError(Exception):
    """Base class of every error raised by ``edge``."""


class EpisodeError(EdgeError, ValueError):
    """An episode file or array failed validation.

    Attributes:
        path: the file concerned, or ``None`` for in-memory episodes.
        field: the field concerned (``"frames"``, ``"metadata.fps"``, ...), or ``None``.
    """

    def __init__(self, message: str, *, path: object = None, field: str | None = None):
        where = []
        if path is not None:
            where.append(str(path))
        if field is not None:
            where.append(f"field '{field}'")
        prefix = ": ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message)
        self.path = path
        self.field = field


class TimebaseError(EdgeError, ValueError):
    """Stamps or positions that time alignment (:mod:`edge.timebase`) cannot use."""


class MissingDependencyError(EdgeError, ImportError):
    """An optional library is not installed; the message names the extra to install."""

    def __init__(self, library: str, extra: str, purpose: str):
        super().__init__(
            f"{purpose} needs the '{library}' library, which is not installed; "
            f"install it with: pip install 'syncedge[{extra}]' (from a source checkout: "
            f"pip install '.[{extra}]')"
        )
        self.library = library
        self.extra = extra


def missing_dependency(exc: ImportError, purpose: str) -> ImportError | None:
    """The error to show for a failed import: ``exc`` itself when it already names the extra
    (``edge``'s or ``kernels``' :class:`MissingDependencyError`), a
    :class:`MissingDependencyError` when an optional library of :data:`OPTIONAL_LIBRARIES` is
    missing, else ``None`` (a module of ours, or a required library: a bug or a broken
    install, which keeps its traceback).

    Args:
        exc: the import error.
        purpose: what needed the library, e.g. ``"syncedge model train"``.
    """
    if getattr(exc, "library", None) and getattr(exc, "extra", None):
        return exc
    top = (exc.name or "").split(".")[0] if isinstance(exc, ModuleNotFoundError) else ""
    if top not in OPTIONAL_LIBRARIES:
        return None
    distribution, extra = OPTIONAL_LIBRARIES[top]
    return MissingDependencyError(distribution, extra, purpose)
