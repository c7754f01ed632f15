"""Errors of the rollout runtime (backends, model, rollout, inputs, pre-check).

All derive from :class:`edge.errors.EdgeError`; every message names the subject, what was
expected, what was found and, where useful, the fix.
"""

from __future__ import annotations

from edge.errors import ConfigError, EdgeError

__all__ = [
    "BackendError",
    "BackendUnavailableError",
    "CallOrderError",
    "ContextMismatchError",
    "RolloutInputError",
    "RulesError",
    "RuntimeInputError",
]


class BackendError(EdgeError, RuntimeError):
    """A backend was misused or failed (unknown name, inference error, wrong inputs)."""


class BackendUnavailableError(BackendError):
    """A backend cannot run here; the message says why (library, driver, device)."""


class CallOrderError(EdgeError, RuntimeError):
    """A method was called before the call it depends on; the message names that call."""


class RuntimeInputError(EdgeError, ValueError):
    """An input file or array is malformed (wrong width, NaN/inf, wrong frame size, ...)."""


class RolloutInputError(RuntimeInputError):
    """An input to the rollout loop is malformed."""


class ContextMismatchError(RuntimeInputError):
    """A calibration context does not belong to the model (shape or model sha256)."""


class RulesError(RuntimeInputError, ConfigError):
    """A pre-check rules file is missing, empty or malformed; names the file and key."""
