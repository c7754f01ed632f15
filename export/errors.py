"""Exception hierarchy of the ``export`` package (all derive from ``edge.errors.EdgeError``)."""

from edge.errors import EdgeError

__all__ = ["ExportError", "CellError", "RendererUnavailableError"]


class ExportError(EdgeError):
    """Base class of errors raised by ``export``."""


class CellError(ExportError, ValueError):
    """Bad cell parameters, robot names or generation options."""


class RendererUnavailableError(ExportError, RuntimeError):
    """MuJoCo cannot create an offscreen OpenGL context (no EGL or OSMesa)."""
