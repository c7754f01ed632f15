"""Exception hierarchy of the ``export`` package (all derive from ``edge.errors.EdgeError``)."""

from edge.errors import EdgeError

__all__ = ["ExportError", "CellError", "RendererUnavailableError", "require_mujoco",
           "require_torch"]


class ExportError(EdgeError):
    """Base class of errors raised by ``export``."""


class CellError(ExportError, ValueError):
    """Bad cell parameters, robot names or generation options."""


class RendererUnavailableError(ExportError, RuntimeError):
    """MuJoCo cannot create an offscreen OpenGL context (no EGL or OSMesa)."""


def _require(module: str, extra: str, purpose: str) -> None:
    """Raise :class:`edge.errors.MissingDependencyError` (the one-line install hint) when
    ``module`` is not installed, without importing it."""
    import importlib.util

    from edge.errors import MissingDependencyError

    if importlib.util.find_spec(module) is None:
        raise MissingDependencyError(module, extra, purpose)


def require_torch(purpose: str) -> None:
    """Raise :class:`edge.errors.MissingDependencyError` (the one-line install hint) when
    torch is not installed, before a command imports it.

    Args:
        purpose: what needs it, e.g. ``"syncedge export onnx"``.
    """
    _require("torch", "train", purpose)


def require_mujoco(purpose: str) -> None:
    """Raise :class:`edge.errors.MissingDependencyError` (the one-line install hint) when
    MuJoCo is not installed, before a command renders anything.

    Args:
        purpose: what needs it, e.g. ``"syncedge model eval-precheck"``.
    """
    _require("mujoco", "train", purpose)
