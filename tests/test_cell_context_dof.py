"""``--cell``: the DoF count comes from the cached calibration episode, a contradicting
``--dof`` is refused, and a missing context says how to encode it from the cache."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
from fixtures.runtime import tiny_model_dir

from edge.commands.common import get_context
from edge.runtime.errors import RuntimeInputError
from edge.runtime.model import load_model


@dataclass
class CacheDouble:
    """Holds one cell (camera c, robot r) whose episode has ``dof`` action channels."""

    values: np.ndarray | None
    dof: int
    model: str

    def get_context(self, cell, camera, robot, model_sha256):
        return self.values if model_sha256 == self.model else None

    def get(self, key):
        if key.model_sha256 != self.model:
            return None
        return SimpleNamespace(episode=SimpleNamespace(num_dof=self.dof))

    def list(self, cell_id=None, camera_id=None, robot_id=None, model_prefix=None):
        key = SimpleNamespace(model_sha256=self.model)
        return [SimpleNamespace(key=key)] if cell_id == "cell-1" else []


def _args(dof=None) -> argparse.Namespace:
    return argparse.Namespace(calibration=None, cell="cell-1", camera_id="c", robot_id="r",
                              dof=dof, cache_dir=None)


@pytest.fixture(scope="module")
def model():
    m = load_model(tiny_model_dir(), intra_op_num_threads=1)
    yield m
    m.deactivate()


def test_dof_comes_from_the_cached_episode(model) -> None:
    values = np.zeros(model.contract.context_shape, np.float32)
    src = CacheDouble(values, model.contract.max_dof - 1, model.sha256)
    assert get_context(_args(), model, None, src).num_dof == model.contract.max_dof - 1
    assert get_context(_args(model.contract.max_dof - 1), model, None, src).num_dof == \
        model.contract.max_dof - 1
    with pytest.raises(RuntimeInputError, match=rf"--dof {model.contract.max_dof}: the cached "
                                                rf"calibration of cell 'cell-1' .* has "
                                                rf"{model.contract.max_dof - 1} DoFs"):
        get_context(_args(model.contract.max_dof), model, None, src)


def test_missing_context_names_the_cached_episode(model) -> None:
    src = CacheDouble(None, 3, "ab" * 32)  # cached for another model only
    with pytest.raises(RuntimeInputError, match=r"no context for .*; the cache holds this "
                                                r"cell's calibration episode.*abababababab.*"
                                                r"calibrate store --cell cell-1"):
        get_context(_args(), model, None, src)
