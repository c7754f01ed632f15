"""The runner interface every backend implements (docs/runtime.md, "Backends").

A runner executes one ONNX graph. The constructor only stores arguments; :meth:`activate`
loads the graph (session, engine, device buffers), :meth:`infer` runs it and
:meth:`deactivate` frees everything. Runners are context managers.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from edge.runtime.errors import BackendError, CallOrderError

__all__ = ["Runner"]


class Runner:
    """Base class of the backends' graph runners.

    Args:
        path: the ONNX graph file.

    Subclasses implement :meth:`_activate`, :meth:`_infer` and :meth:`_deactivate`, and set
    :attr:`input_names` / :attr:`output_names` when activated.
    """

    #: Backend name as accepted by ``--backend``.
    backend = "abstract"

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.input_names: tuple[str, ...] = ()
        self.output_names: tuple[str, ...] = ()
        self._active = False

    @property
    def is_active(self) -> bool:
        """True between :meth:`activate` and :meth:`deactivate`."""
        return self._active

    def activate(self) -> Runner:
        """Load the graph; idempotent. Returns ``self``.

        Raises:
            BackendUnavailableError: the backend cannot run here (the reason is named).
            BackendError: the graph could not be loaded.
        """
        if not self._active:
            self._activate()
            self._active = True
        return self

    def infer(self, feeds: Mapping[str, np.ndarray],
              outputs: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Run the graph once.

        Args:
            feeds: input name -> C-contiguous array of the graph's static shape and dtype.
            outputs: optional output name -> preallocated array of the output's shape and
                dtype; the result is written into it (and returned).

        Returns:
            Output name -> array (the given ``outputs`` arrays where provided).

        Raises:
            CallOrderError: :meth:`activate` was not called first.
            BackendError: an input name is missing or unknown, or inference failed.
        """
        if not self._active:
            raise CallOrderError(f"{type(self).__name__}({self.path.name}).infer: call "
                                 f"activate() first (or use the runner as a context manager)")
        missing = [n for n in self.input_names if n not in feeds]
        unknown = [n for n in feeds if n not in self.input_names]
        if missing or unknown:
            raise BackendError(f"{self.path.name}: expected inputs {list(self.input_names)}, "
                               f"found {sorted(feeds)} (missing {missing}, unknown {unknown})")
        return self._infer(feeds, outputs)

    def deactivate(self) -> None:
        """Free the session/engine and buffers; idempotent."""
        if self._active:
            self._deactivate()
            self._active = False

    def __enter__(self) -> Runner:
        return self.activate()

    def __exit__(self, *exc: object) -> None:
        self.deactivate()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r}, active={self._active})"

    # -- to implement -------------------------------------------------------------
    def _activate(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _infer(self, feeds: Mapping[str, np.ndarray],
               outputs: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray]:
        raise NotImplementedError  # pragma: no cover - abstract

    def _deactivate(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError
