"""The quantisation calibration set: representative graph inputs drawn from training cells.

"Quantisation calibration" is the representative data that fixes the INT8 scales; it has
nothing to do with a cell's calibration episode (which is one of the inputs drawn here).
It comes from the training split only (``DATA/train``): held-out cells are kept for the
parity gates (``syncedge export check``), so they never shape the quantised model.

Inputs per graph, all produced with the FP32 model folder's own graphs (ONNX Runtime, no
torch):

- ``encoder``: training frames (calibration and motion episodes), uint8 ``[1, 3, H, W]``;
- ``calibration``: each training cell's calibration episode (latents, actions, DoF mask),
  plus copies with the cell's channels relabelled (the training augmentation);
- ``step_bB``: history windows of motion episodes (oldest first, padded at the start as
  the runtime pads: start latent, zero action) with the next action and the cell's
  context; one cell per batch, since the context is shared by the batch;
- ``decoder_bB``: latents of training frames;
- ``prepare_bB`` (models that have it): encoder latents of motion frames (every
  16th) of one cell with that cell's context.

Where the windows' and the decoder's latents come from depends on the model family
(``contract.family``, :data:`STATE_SOURCES`):

- ``latent``: the encoder's latents of every frame of the motion episodes (teacher-forced
  windows), as listed above;
- ``warp``: the latent is the warp state, whose motion block is zero right after the
  encoder and non-zero only once step graphs have run, so encoder outputs would fit the
  decoder's motion path on zeros. The states are made by rolling the FP32 step graph out
  over the episode's real actions from the encoded start state (starts every
  :data:`ROLLOUT_HORIZON` frames, horizons 1..16): the step windows are those of the
  rollouts and the decoder reads the rolled-out states (horizons 1..16, never the start
  state).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from export.errors import ExportError
from export.train.data import Cell, load_cells, relabel, sample_relabelling

__all__ = ["QUANT_CALIBRATION_SPLIT", "ROLLOUT_HORIZON", "STATE_SOURCES", "QuantCalibrationSet",
           "build_quant_calibration_set", "load_quant_calibration_cells", "rollout_states"]

#: The only split the quantisation calibration set is drawn from.
QUANT_CALIBRATION_SPLIT = "train"
#: Longest rollout of the warp family's states (the parity gates' horizon).
ROLLOUT_HORIZON = 16

Feeds = dict[str, np.ndarray]


@dataclass
class QuantCalibrationSet:
    """Representative inputs for every graph of a model, from training cells only.

    Attributes:
        data: the cells root the set was drawn from.
        cell_ids: the training cells used (all from ``DATA/train``).
        feeds: graph key (``"encoder"``, ``"calibration"``, ``"step_b16"``, ...) -> list of
            feed dictionaries (input name -> array of the graph's static shape and dtype).
        seed: the seed that chose frames, windows and relabellings.
        states: how the step windows' and the decoder's latents were made
            (:data:`STATE_SOURCES`).
    """

    data: str
    cell_ids: tuple[str, ...]
    feeds: dict[str, list[Feeds]] = field(default_factory=dict)
    seed: int = 0
    states: str = ""

    def for_graph(self, key: str) -> list[Feeds]:
        """The feeds of graph ``key``.

        Raises:
            ExportError: no inputs were drawn for that graph.
        """
        if not self.feeds.get(key):
            raise ExportError(f"quantisation calibration set: no inputs for graph {key!r}; "
                              f"found {sorted(self.feeds)}")
        return self.feeds[key]

    def describe(self) -> dict[str, Any]:
        """JSON-ready provenance: data root, split, cells, samples per graph, seed and
        (where known) where the step and decoder latents came from."""
        out: dict[str, Any] = {"data": self.data, "split": QUANT_CALIBRATION_SPLIT,
                               "cells": list(self.cell_ids), "seed": self.seed,
                               "samples": {k: len(v) for k, v in sorted(self.feeds.items())}}
        if self.states:
            out["states"] = self.states
        return out


def load_quant_calibration_cells(data: str | os.PathLike[str],
                                 split: str = QUANT_CALIBRATION_SPLIT,
                                 max_cells: int | None = None, max_dof: int = 7,
                                 segment_frames: int = 8) -> list[Cell]:
    """Load the training cells the quantisation calibration set is drawn from.

    Args:
        data: cells root (``DATA/<split>/chunk-*/``).
        split: must be ``"train"``; any other split is refused.
        max_cells: load at most this many cells (chunk order).
        max_dof, segment_frames: the model's A and L.

    Raises:
        ExportError: ``split`` is not the training split, ``DATA/train`` has no complete
            chunk, or a cell's recorded split is not ``train`` (held-out cells copied
            into the training folder).
    """
    if split != QUANT_CALIBRATION_SPLIT:
        raise ExportError(f"quantisation calibration: split {split!r} refused; the set is "
                          f"drawn from the training split '{QUANT_CALIBRATION_SPLIT}' only "
                          f"(held-out cells are for the parity gates)")
    cells = load_cells(data, [split], max_dof, segment_frames, limit=max_cells,
                       with_masks=False)
    for c in cells:
        recorded = c.params.get("split")
        if recorded != QUANT_CALIBRATION_SPLIT:
            raise ExportError(f"{Path(data) / split}: cell {c.cell_id} records split "
                              f"{recorded!r}, expected '{QUANT_CALIBRATION_SPLIT}'; held-out "
                              f"cells must not enter the quantisation calibration set")
    return cells


def _windows(z: np.ndarray, actions: np.ndarray,
             s: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """History windows of one episode: (hist latents [S,C,h,w], hist actions [S,A], action [A]).

    ``z [T, C, h, w]`` latents, ``actions [T - 1, A]`` or longer; slot tau holds
    (z_tau, a_{tau-1}); times before 0 are the start latent with a zero action (the
    runtime's padding). One window per step t < T - 1.
    """
    return list(_windows_online(list(z), actions[:len(z) - 1], s))


def rollout_states(model: Any, start_latent: np.ndarray, actions: np.ndarray,
                   context: np.ndarray) -> np.ndarray:
    """Roll the FP32 step graph out from one start latent, as the runtime does.

    Args:
        model: an activated :class:`edge.runtime.model.WorldModel`.
        start_latent: ``[C, h, w]``, the encoder's output for the start frame (prepared
            here where the model has prepare graphs).
        actions: ``[T, A]`` rad, one per step.
        context: the cell's context ``[K, D, h, w]``.

    Returns:
        ``[T + 1, C, h, w]``: the (prepared) start latent, then the state after each step.
    """
    s = model.contract.history_length
    b = model.batch_sizes[0]  # the rows beyond the first repeat it
    out = np.empty((b, *start_latent.shape), np.float32)

    def rows(x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.broadcast_to(x, (b, *x.shape)))

    if model.has_prepare:  # as Rollout.reset: the steps start from the prepared latent
        start_latent = model.prepare(b, rows(start_latent), context, out)[0].copy()
    states = [start_latent]

    for hist_l, hist_a, act in _windows_online(states, actions, s):
        model.step(b, {"history_latents": rows(hist_l), "history_actions": rows(hist_a),
                       "action": rows(act), "context": context}, out)
        states.append(out[0].copy())
    return np.stack(states)


def _windows_online(states: list[np.ndarray], actions: np.ndarray, s: int
                    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The windows of steps t = 0..len(actions)-1 (see :func:`_windows`) over a state list
    the caller may extend while iterating (window t reads ``states[:t + 1]``)."""
    zero = np.zeros(actions.shape[1:], actions.dtype)
    for t in range(len(actions)):
        taus = range(t - s + 1, t + 1)
        hist_l = np.stack([states[max(tau, 0)] for tau in taus])  # (S, C, h, w)
        hist_a = np.stack([actions[tau - 1] if tau >= 1 else zero for tau in taus])  # (S, A)
        yield hist_l, hist_a, actions[t]


#: Per stretch of a motion episode: (latents ``[T, C, h, w]`` the step windows are cut
#: from, their actions ``[T - 1 or more, A]``, the decoder's latents ``[N, C, h, w]``).
Sequences = list[tuple[np.ndarray, np.ndarray, np.ndarray]]


def _encoded_states(model: Any, frames: np.ndarray, actions: np.ndarray,
                    context: np.ndarray) -> Sequences:
    """Latent family: the encoder's latents of every frame (teacher-forced windows; the
    decoder reads the same latents)."""
    z = np.stack([model.encode(f) for f in frames])  # (T, C, h, w)
    return [(z, actions, z)]


def _rolled_out_states(model: Any, frames: np.ndarray, actions: np.ndarray,
                       context: np.ndarray) -> Sequences:
    """Warp family: from the encoded frame at every :data:`ROLLOUT_HORIZON`-th step, the
    FP32 step graph rolled out over the episode's actions (horizons 1..16); the decoder
    reads the rolled-out states, not the start state (its motion block is zero)."""
    out: Sequences = []
    for start in range(0, len(frames) - 1, ROLLOUT_HORIZON):
        h = min(ROLLOUT_HORIZON, len(frames) - 1 - start)
        acts = actions[start:start + h]
        z = rollout_states(model, model.encode(frames[start]), acts, context)  # (h+1, C, h, w)
        out.append((z, acts, z[1:]))
    return out


#: ``contract.family`` -> (how the latents are made, what the describe() record says).
STATE_SOURCES: dict[str, tuple[Callable[[Any, np.ndarray, np.ndarray, np.ndarray], Sequences],
                               str]] = {
    "latent": (_encoded_states, "encoder latents of the motion episodes' frames"),
    "warp": (_rolled_out_states,
             f"states of the FP32 step graph rolled out over the motion episodes' actions "
             f"from the encoded start state (horizons 1..{ROLLOUT_HORIZON}); the decoder "
             f"reads the rolled-out states"),
}


def build_quant_calibration_set(model: Any, data: str | os.PathLike[str], *,
                                max_cells: int = 16, samples: int = 32,
                                seed: int = 0) -> QuantCalibrationSet:
    """Draw representative inputs for every graph of an FP32 model from training cells.

    Args:
        model: an activated :class:`edge.runtime.model.WorldModel` of the FP32 model folder
            (its encoder and calibration graphs make the latents and contexts; for the warp
            family its step graph makes the rolled-out states, :data:`STATE_SOURCES`).
        data: cells root; only ``DATA/train`` is read.
        max_cells: training cells to use.
        samples: feeds per graph (encoder frames, calibration episodes, step and decoder
            batches).
        seed: chooses frames, windows and relabellings.

    Returns:
        :class:`QuantCalibrationSet` with feeds for every graph of ``model``.

    Raises:
        ExportError: see :func:`load_quant_calibration_cells`; a family without a recipe.
    """
    c = model.contract
    if c.family not in STATE_SOURCES:
        raise ExportError(f"contract.family {c.family!r}: no quantisation calibration recipe; "
                          f"expected one of {sorted(STATE_SOURCES)}")
    make_states, states_doc = STATE_SOURCES[c.family]
    rng = np.random.default_rng(seed)
    cells = load_quant_calibration_cells(data, max_cells=max_cells, max_dof=c.max_dof,
                                         segment_frames=c.segment_frames)
    frames = [f for cell in cells for f in (*cell.cal_frames, *(m for mo in cell.motions
                                                                 for m in mo.frames))]
    pick = rng.choice(len(frames), size=min(samples, len(frames)), replace=False)
    feeds: dict[str, list[Feeds]] = {"encoder": [
        {"frames": np.ascontiguousarray(frames[i].transpose(2, 0, 1)[None])} for i in pick]}
    contexts: list[np.ndarray] = []
    windows: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []  # (cell, *window)
    latents: list[np.ndarray] = []
    starts: list[tuple[int, np.ndarray]] = []  # (cell, encoder latent of a motion frame)
    for i, cell in enumerate(cells):
        cal_lat = np.stack([model.encode(f) for f in cell.cal_frames])  # (K*L+1, C, h, w)
        contexts.append(model.calibrate(cal_lat, cell.cal_actions, cell.dof_mask))
        cal = feeds.setdefault("calibration", [])
        cal.append({"calibration_latents": cal_lat, "calibration_actions": cell.cal_actions,
                    "dof_mask": cell.dof_mask})
        n = cell.num_dof
        for _ in range(max(0, samples // len(cells) - 1)):
            r = sample_relabelling(rng, cell.convention)
            cal.append({"calibration_latents": cal_lat,
                        "calibration_actions": relabel(cell.cal_actions, r),
                        "dof_mask": cell.dof_mask})
        for mo in cell.motions:
            starts.extend((i, model.encode(f)) for f in mo.frames[::ROLLOUT_HORIZON])
            acts = mo.actions.copy()
            acts[:, n:] = 0.0
            for z, z_acts, z_dec in make_states(model, mo.frames, acts, contexts[i]):
                latents.append(z_dec)
                windows.extend((i, *w) for w in _windows(z, z_acts, c.history_length))
    if not windows:
        raise ExportError(f"{Path(data) / QUANT_CALIBRATION_SPLIT}: no motion episodes with "
                          f"two or more frames for the step graph's quantisation calibration")
    feeds["calibration"] = feeds["calibration"][:max(samples, len(cells))]
    all_latents = np.concatenate(latents)
    for b in model.batch_sizes:
        steps, decs = feeds.setdefault(f"step_b{b}", []), feeds.setdefault(f"decoder_b{b}", [])
        for _ in range(samples):
            cell_i = windows[int(rng.integers(len(windows)))][0]
            own = [w for w in windows if w[0] == cell_i]
            chosen = [own[int(j)] for j in rng.integers(len(own), size=b)]
            steps.append({"history_latents": np.stack([w[1] for w in chosen]),
                          "history_actions": np.stack([w[2] for w in chosen]),
                          "action": np.stack([w[3] for w in chosen]),
                          "context": contexts[cell_i]})
            decs.append({"latents": all_latents[rng.integers(len(all_latents), size=b)]})
        if model.has_prepare:  # start latents of one cell with that cell's context
            preps = feeds.setdefault(f"prepare_b{b}", [])
            for _ in range(samples):
                cell_i = starts[int(rng.integers(len(starts)))][0]
                frames_of = [z for ci, z in starts if ci == cell_i]
                preps.append({"start_latents": np.stack([frames_of[int(j)] for j in
                                                         rng.integers(len(frames_of), size=b)]),
                              "context": contexts[cell_i]})
    return QuantCalibrationSet(str(data), tuple(cell.cell_id for cell in cells), feeds, seed,
                               states_doc)
