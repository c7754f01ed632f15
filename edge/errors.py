"""Exception hierarchy of the ``edge`` package.

Every message names the subject (a file, a field, a key path), what was expected and what
was found, and where useful the fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

__all__ = ["OPTIONAL_LIBRARIES", "ConfigError", "EdgeError", "EpisodeError", "Terminated",
           "MissingDependencyError", "TimebaseError", "missing_dependency"]

_E = TypeVar("_E", bound="ConfigError")
_EE = TypeVar("_EE", bound="EpisodeError")

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


def _rebuilt(cls: type, args: tuple, state: dict) -> BaseException:
    """An error of ``cls`` with ``args`` and attributes ``state``, without calling its
    ``__init__`` (whose signature may differ from ``args``): the unpickling half of
    :meth:`EdgeError.__reduce__`."""
    err = cls.__new__(cls, *args)
    err.args = args
    err.__dict__.update(state)
    return err


class EdgeError(Exception):
    """Base class of every error raised by ``edge``.

    Picklable whatever a subclass's ``__init__`` takes (message, attributes and type kept),
    so an error raised in a worker process (``syncedge cells generate --workers``) reaches
    the parent as itself rather than as a broken process pool.
    """

    def __reduce__(self):
        return _rebuilt, (type(self), self.args, dict(self.__dict__))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class ConfigError(EdgeError, ValueError):
    """A config or manifest file (``model.json``, ``bundle.json``/``bundle.sig``, pre-check
    rules, a robot spec, episode metadata) holds an unknown or missing key, a value of the
    wrong type or one outside the allowed values.

    Each of those formats has its own error class derived from this one
    (:class:`~edge.manifest.ManifestError`, :class:`~edge.bundle.format.BundleError`,
    :class:`~edge.runtime.errors.RulesError`, :class:`~edge.calibrate.errors.PlanError`,
    :class:`EpisodeError`). The strict reader (:mod:`edge.config_reader`) raises them through
    :meth:`at`, giving the message ``<file>:<key.path>: <problem>``, e.g.
    ``m/model.json:contract.residual_decoding: expected true or false, found 'no'``.

    Attributes:
        file: the file (or ``archive:member``) concerned, or ``None``.
        key_path: the key path inside it (``contract.latent_shape[2]``), ``""`` for the
            whole document, or ``None`` for an error raised with a plain message.
    """

    file: str | None = None
    key_path: str | None = None

    @classmethod
    def at(cls: type[_E], file: object, key_path: str, problem: str) -> _E:
        """The error for ``problem`` at ``key_path`` of ``file`` (``None``: no file)."""
        where = ":".join(s for s in (None if file is None else str(file), key_path) if s)
        err = cls(f"{where}: {problem}" if where else problem)
        err.file, err.key_path = None if file is None else str(file), key_path
        return err

    @classmethod
    def unknown_keys(cls: type[_E], file: object, path: str, keys: Sequence[str],
                     allowed: Sequence[str]) -> _E:
        """The error for ``keys`` (at least one) that the mapping at ``path`` may not hold."""
        return cls.at(file, _join(path, keys[0]), f"unknown key; expected one of "
                                                 f"{sorted(allowed)}")

    @classmethod
    def missing_keys(cls: type[_E], file: object, path: str, keys: Sequence[str],
                     expected: Sequence[str]) -> _E:
        """The error for required ``keys`` (at least one) absent from the mapping at ``path``;
        ``expected[i]`` says what ``keys[i]`` holds (``"an integer"``)."""
        return cls.at(file, _join(path, keys[0]), f"missing key; expected {expected[0]}")


class EpisodeError(ConfigError):
    """An episode file or array failed validation.

    The message is ``<file>: field '<field>': <problem>``; the metadata's unknown or missing
    keys are listed together at ``field 'metadata'``.

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
        self.file = None if path is None else str(path)
        self.key_path = field

    @classmethod
    def at(cls: type[_EE], file: object, key_path: str, problem: str) -> _EE:
        """The error for ``problem`` at field ``key_path`` of ``file``."""
        return cls(problem, path=file, field=key_path or None)

    @classmethod
    def unknown_keys(cls: type[_EE], file: object, path: str, keys: Sequence[str],
                     allowed: Sequence[str]) -> _EE:
        """All unknown ``keys`` of the mapping at field ``path``, in one message."""
        return cls.at(file, path, f"unknown key(s) {sorted(keys)}; expected only "
                                  f"{sorted(allowed)}")

    @classmethod
    def missing_keys(cls: type[_EE], file: object, path: str, keys: Sequence[str],
                     expected: Sequence[str]) -> _EE:
        """All missing ``keys`` of the mapping at field ``path``, in one message."""
        return cls.at(file, path, f"missing key(s) {sorted(keys)}")


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


class Terminated(KeyboardInterrupt):
    """SIGTERM (a service manager stopping the command, ``kill``), raised in the main
    thread as Ctrl-C is, so that whatever a command keeps on Ctrl-C (``calibrate record``'s
    partial recording, ``bridge record``'s log) it keeps on SIGTERM too; the exit code is
    then 143 (128 + SIGTERM) instead of 130. Raised by ``edge.cli.main``'s handler."""
