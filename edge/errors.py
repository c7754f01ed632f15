"""Exception hierarchy of the ``edge`` package.

Every message names the subject (a file, a field, a key path), what was expected and what
was found, and where useful the fix.
"""

__all__ = ["EdgeError", "EpisodeError", "MissingDependencyError"]


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
