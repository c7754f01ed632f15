"""Parity of exported model variants against the PyTorch model (``syncedge export check``).

On held-out cells (default ``test_all`` and ``test_convention``; the training split is
refused), for each cell: the start frame and the first ``horizon`` actions of its first
motion episode, and its calibration episode.

1. **PyTorch reference** (FP32) of the folders' family (:mod:`export.variants.parity_reference`:
   the latent family's ``ae.pt`` + ``dynamics.pt``, the warp family's ``warp.pt``):
   calibration latents and context, a ``horizon``-step open-loop rollout (history padded
   with the start latent and zero actions, as the runtime does), the step inputs of every
   step, and the frames (decoded as the model's contract says, plainly or residually;
   clip, round half up).
2. **One step per graph**, the variant's graph fed exactly the PyTorch inputs: encoder on
   the start and calibration frames, calibration on the PyTorch calibration latents,
   ``step_bB`` on the PyTorch rollout's history at every step (teacher-forced, batched
   by B), ``decoder_bB`` on the PyTorch rollout's latents (both outputs where the decoder
   also predicts the robot mask: ``decoder_bB.robot_mask``). Max abs error per graph and,
   for the step graph, per rollout step.
3. **Rollout** through the runtime (:class:`edge.runtime.rollout.Rollout`, ONNX Runtime
   CPU) with the variant's own context: PSNR of each step's frame against ground truth,
   next to the PyTorch rollout's PSNR; the loss per step is the mean over cells of
   (PyTorch PSNR - variant PSNR). The same in the **motion region**
   (:func:`edge.metrics.motion_mask`: the pixels whose true frame differs from the start
   frame by more than 8 in some channel), mean over the cells with such pixels at that
   step. PSNR is capped at 100 dB.

The verdict comes from :mod:`export.variants.parity_gates`.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edge.manifest import load_model_dir
from edge.metrics import masked_psnr, motion_mask, psnr
from export.errors import ExportError
from export.train.data import load_cells
from export.variants.parity_gates import Gates, gates_dict, json_safe, judge
from export.variants.parity_reference import (
    ReferenceCase,
    TorchReference,
    load_reference,
    reference_case,
)

__all__ = ["PARITY_SPLITS", "MOTION_THRESHOLD", "CheckOptions", "ReferenceCase",
           "folders_family", "reference_cases", "check_variant"]

PARITY_SPLITS = ("test_all", "test_convention")
PSNR_CAP_DB = 100.0
#: A pixel is in the motion region when its true frame differs from the start frame by
#: more than this (0..255, any channel; :func:`edge.metrics.motion_mask`).
MOTION_THRESHOLD = 8


@dataclass
class CheckOptions:
    """What to check against.

    Attributes:
        run: the training run folder the model was exported from (``ae.pt`` +
            ``dynamics.pt`` for the latent family, ``warp.pt`` for the warp family).
        data: cells root.
        splits: held-out splits to check on (``train`` is refused).
        max_cells: cells per split (None: all).
        gates: the gate limits and horizon.
        family: ``contract.family`` of the folders checked (:func:`folders_family`).
        calibration_mode: their ``contract.calibration_mode``.
    """

    run: str
    data: str
    splits: tuple[str, ...] = PARITY_SPLITS
    max_cells: int | None = 8
    gates: Gates = field(default_factory=Gates)
    family: str = "latent"
    calibration_mode: str = "calibration"


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    return min(psnr(a, b), PSNR_CAP_DB)


def folders_family(model_dirs: list[str] | tuple[str, ...]) -> tuple[str, str]:
    """(``contract.family``, ``contract.calibration_mode``) shared by model folders.

    Raises:
        ExportError: the folders differ (check one family against its run at a time).
        edge.manifest.ManifestError: a folder is invalid.
    """
    found = {str(d): (m.contract.family, m.contract.calibration_mode)
             for d in model_dirs for m in [load_model_dir(d)]}
    kinds = sorted(set(found.values()))
    if len(kinds) != 1:
        raise ExportError(f"model folders of different families or calibration modes "
                          f"({', '.join(f'{d}: {f}/{c}' for d, (f, c) in found.items())}); "
                          f"check the folders exported from one run together")
    return kinds[0]


def reference_cases(opts: CheckOptions) -> tuple[TorchReference, list[ReferenceCase]]:
    """Load the PyTorch model of ``opts.run`` (of ``opts.family``) and its reference on the
    held-out cells.

    Raises:
        ExportError: a split is ``train``, a split has no cells, the run lacks the family's
            checkpoints, or an episode is shorter than the horizon.
    """
    if "train" in opts.splits:
        raise ExportError("--split train: parity is checked on held-out cells only (the "
                          "training split fed the quantisation calibration set)")
    model = load_reference(opts.run, opts.family, opts.calibration_mode)
    cfg = model.cfg
    cells = []
    for split in opts.splits:
        cells += load_cells(opts.data, [split], cfg.max_dof, cfg.segment_frames,
                            limit=opts.max_cells, with_masks=False)
    if not cells:
        raise ExportError(f"{opts.data}: no cells in {', '.join(opts.splits)} (a chunk "
                          "without cells); generate them with 'syncedge cells generate'")
    return model, [reference_case(model, c, opts.gates.horizon) for c in cells]


def _chunks(n: int, b: int) -> list[np.ndarray]:
    """Row indices for batches of ``b`` covering ``n`` rows (the last padded by repeats)."""
    out = []
    for i in range(0, n, b):
        idx = np.arange(i, i + b)
        out.append(np.minimum(idx, n - 1))
    return out


def _one_step(wm: Any, case: ReferenceCase, err: dict[str, float],
              per_step: np.ndarray) -> np.ndarray:
    """Feed every graph the PyTorch inputs; update ``err`` (graph -> max abs) and
    ``per_step`` ``[T]``; return the variant's calibration latents ``[K*L+1, C, h, w]``."""
    def upd(key: str, a: np.ndarray, b: np.ndarray) -> float:
        e = float(np.max(np.abs(a.astype(np.float64) - b)))
        err[key] = max(err.get(key, 0.0), e if math.isfinite(e) else math.inf)
        return e

    lat = np.stack([wm.encode(f) for f in (case.start, *case.cal_frames)])
    upd("encoder", lat, np.concatenate([case.start_latent[None], case.cal_latents]))
    upd("calibration", wm.calibrate(case.cal_latents, case.cal_actions, case.dof_mask),
        case.context)
    t_count = len(case.actions)
    if wm.has_prepare and case.prepared_latent is not None:
        for b in wm.batch_sizes:
            start = np.ascontiguousarray(np.repeat(case.start_latent[None], b, 0))
            ready = np.empty_like(start)
            wm.prepare(b, start, case.context, ready)
            upd(f"prepare_b{b}", ready, np.repeat(case.prepared_latent[None], b, 0))
    for b in wm.batch_sizes:
        out = np.empty((b, *case.latents.shape[1:]), np.float32)
        frames = np.empty((b, *case.decoded.shape[1:]), np.float32)
        for idx in _chunks(t_count, b):
            feeds = {"history_latents": np.ascontiguousarray(case.hist_latents[idx]),
                     "history_actions": np.ascontiguousarray(case.hist_actions[idx]),
                     "action": np.ascontiguousarray(case.actions[idx]),
                     "context": case.context}
            wm.step(b, feeds, out)
            rows = np.abs(out.astype(np.float64) - case.latents[idx]).reshape(b, -1).max(1)
            np.maximum.at(per_step, idx, rows)
            upd(f"step_b{b}", out, case.latents[idx])
            lat_b = np.ascontiguousarray(case.latents[idx])
            if case.decoded_mask is None:
                wm.decode(b, lat_b, frames)
            else:  # every output of the decoder: frames and robot_mask
                res = wm.runner(f"decoder_b{b}").infer({"latents": lat_b}, {"frames": frames})
                upd(f"decoder_b{b}.robot_mask", res["robot_mask"], case.decoded_mask[idx])
            upd(f"decoder_b{b}", frames, case.decoded[idx])
    return lat[1:]


def _motion_psnr(frame: np.ndarray, truth: np.ndarray, moving: np.ndarray) -> float:
    """PSNR over the motion region (NaN where it is empty; capped like :func:`_psnr`)."""
    v = masked_psnr(frame, truth, moving)
    return math.nan if v is None else min(v, PSNR_CAP_DB)


#: Rows of :func:`_rollout`'s per-step figures.
_ROWS = ("psnr", "reference_psnr", "psnr_vs_fp32", "latent_max_abs", "motion_psnr",
         "reference_motion_psnr", "moving_fraction")


def _rollout(wm: Any, case: ReferenceCase, cal_latents: np.ndarray) -> list[list[float]]:
    """Runtime rollout with the variant's own context: per-step figures in the order of
    :data:`_ROWS`: PSNR vs truth, PyTorch PSNR vs truth, PSNR vs PyTorch frames, latent max
    abs vs PyTorch, the two PSNRs in the motion region (NaN where the step has no moving
    pixel) and the moving fraction of the frame. The variant's figures are NaN from the
    step where the decoder produced NaN on."""
    from edge.runtime.context import CalibrationContext
    from edge.runtime.errors import RolloutInputError
    from edge.runtime.rollout import Rollout, RolloutParams

    values = wm.calibrate(cal_latents, case.cal_actions, case.dof_mask)
    ctx = CalibrationContext(np.ascontiguousarray(values, np.float32), wm.sha256,
                             case.num_dof, f"cell {case.cell_id}")
    mask = tuple(int(v) for v in case.dof_mask)
    t_count = len(case.actions)
    r = Rollout(wm, ctx, RolloutParams(dof_mask=mask), max_horizon=t_count)
    r.reset(case.start, case.actions)
    reference = case.frames if wm.contract.residual_decoding else case.frames_plain
    moving = motion_mask(case.truth, case.start, MOTION_THRESHOLD)  # (T, H, W)
    out: list[list[float]] = [[] for _ in _ROWS]
    broken = False
    for t in range(t_count):
        if not broken:
            try:
                frame = r.step()[0]
            except RolloutInputError:  # the decoder produced NaN: the gate fails on NaN
                broken = True
        if broken:
            out[0].append(math.nan)
            out[2].append(math.nan)
            out[3].append(math.nan)
            out[4].append(math.nan)
        else:
            out[0].append(_psnr(frame, case.truth[t]))
            out[2].append(_psnr(frame, reference[t]))
            out[3].append(float(np.max(np.abs(r.next_latents[0] - case.latents[t]))))
            out[4].append(_motion_psnr(frame, case.truth[t], moving[t]))
        out[1].append(_psnr(reference[t], case.truth[t]))
        out[5].append(_motion_psnr(reference[t], case.truth[t], moving[t]))
        out[6].append(float(moving[t].mean()))
    return out


def _motion_means(values: np.ndarray, moving: np.ndarray) -> list[float | None]:
    """Per step, the mean of ``values [cells, T]`` over the cells whose step has moving
    pixels (``moving [cells, T]``); None where no cell has any. NaN stays NaN."""
    return [float(values[moving[:, t], t].mean()) if moving[:, t].any() else None
            for t in range(values.shape[1])]


def check_variant(model_dir: str | os.PathLike[str], model: TorchReference,
                  cases: list[ReferenceCase], opts: CheckOptions) -> dict[str, Any]:
    """Measure one model folder against the PyTorch reference and judge its gate.

    Returns:
        The parity record (JSON-ready): variant, gate verdict, one-step max abs per graph
        and per step, per-step rollout PSNR (variant, FP32 reference, loss, against the
        FP32 frames; whole frame and motion region, with the moving fraction and the
        number of cells with moving pixels) and latent error, cells, splits, run, data,
        versions, time.

    Raises:
        ExportError: the model folder is of another family than the reference or was not
            exported from this run's configuration.
        edge.manifest.ManifestError: the folder is invalid.
    """
    import onnxruntime

    from edge.runtime.model import load_model
    from export.provenance import git_commit

    model_dir = Path(model_dir)
    manifest = load_model_dir(model_dir, verify=True)
    if manifest.contract.family != model.family:
        raise ExportError(f"{model_dir / 'model.json'}: contract.family is "
                          f"{manifest.contract.family!r}, the PyTorch reference of run "
                          f"{opts.run} is {model.family!r}; check folders of one family "
                          f"together, against the run they were exported from")
    cfg = manifest.provenance.get("config")
    if cfg != model.cfg.to_dict():
        raise ExportError(f"{model_dir / 'model.json'}: provenance.config does not match the "
                          f"run {opts.run} (found {cfg}); check a model against the run it "
                          f"was exported from")
    err: dict[str, float] = {}
    t_count = opts.gates.horizon
    per_step = np.zeros(t_count)
    rows: list[list[list[float]]] = []
    # every graph checked as itself: no batch split into groups of smaller graphs
    with load_model(model_dir, candidate_workers=1) as wm:
        for case in cases:
            cal_lat = _one_step(wm, case, err, per_step)
            rows.append(_rollout(wm, case, cal_lat))
    arr = np.asarray(rows, np.float64)  # (cells, len(_ROWS), T)
    moving = arr[:, 6] > 0  # (cells, T)
    rollout = {"horizon": t_count,
               "psnr_db": arr[:, 0].mean(0).tolist(),
               "reference_psnr_db": arr[:, 1].mean(0).tolist(),
               "psnr_loss_db": (arr[:, 1] - arr[:, 0]).mean(0).tolist(),
               "psnr_vs_fp32_db": arr[:, 2].mean(0).tolist(),
               "latent_max_abs": arr[:, 3].max(0).tolist(),
               "motion_psnr_db": _motion_means(arr[:, 4], moving),
               "reference_motion_psnr_db": _motion_means(arr[:, 5], moving),
               "motion_psnr_loss_db": _motion_means(arr[:, 5] - arr[:, 4], moving),
               "motion_cells": moving.sum(0).tolist(),
               "motion_fraction": arr[:, 6].mean(0).tolist(),
               "motion_threshold": MOTION_THRESHOLD,
               "reference": f"PyTorch FP32 rollout ({opts.run})"}
    figures = {"one_step_max_abs": dict(sorted(err.items())), "rollout": rollout}
    checked = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    return json_safe({
        "variant": manifest.variant, "gate": judge(manifest.variant, figures, opts.gates),
        "gates": gates_dict(opts.gates), **figures,
        "step_max_abs_per_step": per_step.tolist(),
        "cells": [c.cell_id for c in cases], "splits": list(opts.splits),
        "run": str(opts.run), "data": str(opts.data), "checked_utc": checked,
        "git_commit": git_commit(), "onnxruntime": onnxruntime.__version__,
        "torch": torch.__version__})
