"""Parity of exported model variants against the PyTorch model (``syncedge export check``).

On held-out cells (default ``test_all`` and ``test_convention``; the training split is
refused), for each cell: the start frame and the first ``horizon`` actions of its first
motion episode, and its calibration episode.

1. **PyTorch reference** (FP32): calibration latents and context, a ``horizon``-step
   open-loop rollout (history padded with the start latent and zero actions, as the
   runtime does), the step inputs of every step, and the frames (decoded as the model's
   contract says, plainly or residually; clip, round half up).
2. **One step per graph**, the variant's graph fed exactly the PyTorch inputs: encoder on
   the start and calibration frames, calibration on the PyTorch calibration latents,
   ``step_bB`` on the PyTorch rollout's history at every step (teacher-forced, batched
   by B), ``decoder_bB`` on the PyTorch rollout's latents. Max abs error per graph and, for
   the step graph, per rollout step.
3. **Rollout** through the runtime (:class:`edge.runtime.rollout.Rollout`, ONNX Runtime
   CPU) with the variant's own context: PSNR of each step's frame against ground truth,
   next to the PyTorch rollout's PSNR; the loss per step is the mean over cells of
   (PyTorch PSNR - variant PSNR). PSNR is capped at 100 dB.

The verdict comes from :mod:`export.parity_gates`.
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
from edge.metrics import psnr
from export.data import load_cells
from export.errors import ExportError
from export.evaluate import load_world_model, to_uint8
from export.model import WorldModel
from export.parity_gates import Gates, gates_dict, json_safe, judge

__all__ = ["PARITY_SPLITS", "CheckOptions", "ReferenceCase", "reference_cases", "check_variant"]

PARITY_SPLITS = ("test_all", "test_convention")
PSNR_CAP_DB = 100.0


@dataclass
class CheckOptions:
    """What to check against.

    Attributes:
        run: the training run folder (``ae.pt``, ``dynamics.pt``) the model was exported from.
        data: cells root.
        splits: held-out splits to check on (``train`` is refused).
        max_cells: cells per split (None: all).
        gates: the gate limits and horizon.
    """

    run: str
    data: str
    splits: tuple[str, ...] = PARITY_SPLITS
    max_cells: int | None = 8
    gates: Gates = field(default_factory=Gates)


@dataclass
class ReferenceCase:
    """One held-out cell and the PyTorch FP32 reference on it (NumPy arrays).

    Shapes: ``start [H, W, 3]`` uint8, ``actions [T, A]`` rad, ``truth [T, H, W, 3]`` uint8,
    ``cal_frames [K*L+1, H, W, 3]``, ``cal_actions [K*L+1, A]``, ``dof_mask [A]``,
    ``start_latent [C, h, w]``, ``cal_latents [K*L+1, C, h, w]``, ``context [K, D, h, w]``,
    ``hist_latents [T, S, C, h, w]``, ``hist_actions [T, S, A]`` (the step inputs of each
    step), ``latents [T, C, h, w]`` (predicted), ``decoded [T, 3, H, W]`` (decoder output,
    [0, 1]), ``frames [T, H, W, 3]`` uint8.
    """

    cell_id: str
    num_dof: int
    start: np.ndarray
    actions: np.ndarray
    truth: np.ndarray
    cal_frames: np.ndarray
    cal_actions: np.ndarray
    dof_mask: np.ndarray
    start_latent: np.ndarray
    cal_latents: np.ndarray
    context: np.ndarray
    hist_latents: np.ndarray
    hist_actions: np.ndarray
    latents: np.ndarray
    decoded: np.ndarray
    frames: np.ndarray  # residual decoding: start + dec(z_t) - dec(z_0)
    frames_plain: np.ndarray  # plain decoding: dec(z_t)


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    return min(psnr(a, b), PSNR_CAP_DB)


@torch.no_grad()
def _reference(model: WorldModel, cell: Any, horizon: int) -> ReferenceCase:
    motion = cell.motions[0]
    if len(motion.frames) < horizon + 1:
        raise ExportError(f"{motion.path}: {len(motion.frames)} frames; the parity rollout "
                          f"needs {horizon + 1}")
    s = model.cfg.history
    acts = motion.actions[:horizon].astype(np.float32).copy()  # (T, A)
    acts[:, cell.num_dof:] = 0.0
    start = motion.frames[0]
    x0 = torch.from_numpy(np.ascontiguousarray(start.transpose(2, 0, 1)[None]))
    z0 = model.encoder(x0)  # (1, C, h, w)
    cal_lat = model.encode_frames(torch.from_numpy(cell.cal_frames))
    ctx = model.calibration(cal_lat, torch.from_numpy(cell.cal_actions),
                            torch.from_numpy(cell.dof_mask))  # (K, D, h, w)
    hist_l = z0[:, None].expand(1, s, *z0.shape[1:])
    hist_a = torch.zeros(1, s, acts.shape[1])
    a = torch.from_numpy(acts)
    hl, ha, preds = [], [], []
    for t in range(horizon):
        hl.append(hist_l[0])
        ha.append(hist_a[0])
        nxt = model.step(hist_l, hist_a, a[t:t + 1], ctx)
        preds.append(nxt[0])
        hist_l = torch.cat([hist_l[:, 1:], nxt[:, None]], 1)
        hist_a = torch.cat([hist_a[:, 1:], a[t:t + 1, None]], 1)
    z = torch.stack(preds)  # (T, C, h, w)
    dec = model.decoder(z)  # (T, 3, H, W)
    offset = x0.to(torch.float32) / 255.0 - model.decoder(z0)
    return ReferenceCase(
        cell.cell_id, cell.num_dof, start, acts, motion.frames[1:horizon + 1],
        cell.cal_frames, cell.cal_actions, cell.dof_mask, z0[0].numpy(), cal_lat.numpy(),
        ctx.numpy(), torch.stack(hl).numpy(), torch.stack(ha).numpy(), z.numpy(),
        dec.numpy(), to_uint8(dec + offset), to_uint8(dec))


def reference_cases(opts: CheckOptions) -> tuple[WorldModel, list[ReferenceCase]]:
    """Load the PyTorch model of ``opts.run`` and its reference on the held-out cells.

    Raises:
        ExportError: a split is ``train``, a split has no cells, or an episode is shorter
            than the horizon.
    """
    if "train" in opts.splits:
        raise ExportError("--split train: parity is checked on held-out cells only (the "
                          "training split fed the quantisation calibration set)")
    model = load_world_model(opts.run, calibrated=True)
    cfg = model.cfg
    cells = []
    for split in opts.splits:
        cells += load_cells(opts.data, [split], cfg.max_dof, cfg.segment_frames,
                            limit=opts.max_cells, with_masks=False)
    return model, [_reference(model, c, opts.gates.horizon) for c in cells]


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
            wm.decode(b, np.ascontiguousarray(case.latents[idx]), frames)
            upd(f"decoder_b{b}", frames, case.decoded[idx])
    return lat[1:]


def _rollout(wm: Any, case: ReferenceCase, cal_latents: np.ndarray
             ) -> tuple[list[float], list[float], list[float], list[float]]:
    """Runtime rollout with the variant's own context: per-step (PSNR vs truth, PyTorch
    PSNR vs truth, PSNR vs PyTorch frames, latent max abs vs PyTorch); NaN from the step
    where the decoder produced NaN on."""
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
    out: tuple[list[float], ...] = ([], [], [], [])
    for t in range(t_count):
        try:
            frame = r.step()[0]
        except RolloutInputError:  # the decoder produced NaN: the gate fails on NaN
            for lst in out:
                lst.extend([math.nan] * (t_count - t))
            break
        out[0].append(_psnr(frame, case.truth[t]))
        out[1].append(_psnr(reference[t], case.truth[t]))
        out[2].append(_psnr(frame, reference[t]))
        out[3].append(float(np.max(np.abs(r.next_latents[0] - case.latents[t]))))
    return out  # type: ignore[return-value]


def check_variant(model_dir: str | os.PathLike[str], model: WorldModel,
                  cases: list[ReferenceCase], opts: CheckOptions) -> dict[str, Any]:
    """Measure one model folder against the PyTorch reference and judge its gate.

    Returns:
        The parity record (JSON-ready): variant, gate verdict, one-step max abs per graph
        and per step, per-step rollout PSNR (variant, FP32 reference, loss, against the
        FP32 frames) and latent error, cells, splits, run, data, versions, time.

    Raises:
        ExportError: the model folder was not exported from this run's configuration.
        edge.manifest.ManifestError: the folder is invalid.
    """
    import onnxruntime

    from edge.runtime.model import load_model
    from export.provenance import git_commit

    model_dir = Path(model_dir)
    manifest = load_model_dir(model_dir, verify=True)
    cfg = manifest.provenance.get("config")
    if cfg != model.cfg.to_dict():
        raise ExportError(f"{model_dir / 'model.json'}: provenance.config does not match the "
                          f"run {opts.run} (found {cfg}); check a model against the run it "
                          f"was exported from")
    err: dict[str, float] = {}
    t_count = opts.gates.horizon
    per_step = np.zeros(t_count)
    rows: list[tuple[list[float], ...]] = []
    with load_model(model_dir) as wm:
        for case in cases:
            cal_lat = _one_step(wm, case, err, per_step)
            rows.append(_rollout(wm, case, cal_lat))
    arr = np.asarray(rows, np.float64)  # (cells, 4, T)
    rollout = {"horizon": t_count,
               "psnr_db": arr[:, 0].mean(0).tolist(),
               "reference_psnr_db": arr[:, 1].mean(0).tolist(),
               "psnr_loss_db": (arr[:, 1] - arr[:, 0]).mean(0).tolist(),
               "psnr_vs_fp32_db": arr[:, 2].mean(0).tolist(),
               "latent_max_abs": arr[:, 3].max(0).tolist(),
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
