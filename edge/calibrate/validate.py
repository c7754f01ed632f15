"""Commissioning report: what the simulation is measured to do in this cell.

A validation episode of ordinary motion (not part of the calibration) is predicted from its
first frame with the cell's cached context and again with the context zeroed; the
report gives the fidelity of both against the recorded frames (PSNR, motion-region PSNR,
SSIM, dB), the per-DoF control probe where the model ships a keypoint regressor, and beside
them how long the calibration took to collect, its coverage and the equipment.

Control probe (``keypoint.onnx`` named by ``model.json`` ``extra.keypoint``: uint8
``[1, 3, H, W]`` -> pixel ``[1, 2]``): for each DoF sweep of the stored calibration
episode, the outward phase is predicted from the segment's first frame; the predicted
end-effector displacement is compared in direction with the recorded one
(``edge.metrics.direction_agreement``). These sweeps are the data the context was made
from, so the probe is in-sample; the report says so.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from edge.episode import Episode
from edge.metrics import direction_agreement, masked_psnr, motion_mask, psnr, ssim
from edge.runtime.context import CalibrationContext
from edge.runtime.model import WorldModel
from edge.runtime.rollout import Rollout

__all__ = ["fidelity", "keypoint_probe", "load_keypoint", "predict"]

MOTION_THRESHOLD = 8  # uint8 units, as edge.commands.simulate


def _mean(values: Sequence[float | None]) -> float | None:
    v = [x for x in values if x is not None and math.isfinite(x)]
    return round(float(np.mean(v)), 4) if v else None


def predict(model: WorldModel, ctx: CalibrationContext, start: np.ndarray,
            actions: np.ndarray) -> np.ndarray:
    """Predict frames uint8 ``[T, H, W, 3]`` from ``start`` for ``actions`` float32 ``[T, n]``."""
    rollout = Rollout(model, ctx, max_horizon=len(actions), max_candidates=1)
    rollout.check_actions(actions[None], "validation actions")
    return rollout.run(start, actions[None])[0]


def fidelity(pred: np.ndarray, truth: np.ndarray, start: np.ndarray) -> dict[str, Any]:
    """Mean PSNR, motion-region PSNR (dB) and SSIM of ``pred`` vs ``truth`` ``[T, H, W, 3]``."""
    p, m, s = [], [], []
    for t in range(len(pred)):
        mask = motion_mask(truth[t], start, MOTION_THRESHOLD)
        p.append(psnr(pred[t], truth[t]))
        m.append(masked_psnr(pred[t], truth[t], mask))
        s.append(ssim(pred[t], truth[t]))
    return {"psnr_db": _mean(p), "motion_psnr_db": _mean(m), "ssim": _mean(s),
            "steps": len(pred)}


def load_keypoint(model: WorldModel) -> tuple[Any, str]:
    """The keypoint regressor session, or ``(None, why not)``."""
    kp = (model.manifest.extra or {}).get("keypoint")
    if not kp:
        return None, "the model ships no keypoint regressor (model.json extra.keypoint)"
    path = model.model_dir / kp.get("file", "keypoint.onnx")
    if not path.is_file():
        return None, f"{path}: named by model.json extra.keypoint but missing"
    if kp.get("sha256") and hashlib.sha256(path.read_bytes()).hexdigest() != kp["sha256"]:
        return None, f"{path}: sha256 does not match model.json extra.keypoint"
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]), ""


def _kp(session: Any, frame: np.ndarray) -> np.ndarray:
    name = session.get_inputs()[0].name
    x = np.ascontiguousarray(frame.transpose(2, 0, 1)[None])  # (1, 3, H, W)
    return np.asarray(session.run(None, {name: x})[0], np.float64).reshape(-1)[:2]


def keypoint_probe(model: WorldModel, contexts: dict[str, CalibrationContext],
                   calibration: Episode, session: Any) -> dict[str, Any]:
    """Per-DoF control probe on the calibration sweeps (see the module docstring)."""
    true_d: list[np.ndarray] = []
    pred_d: dict[str, list[np.ndarray]] = {k: [] for k in contexts}
    per_dof: dict[str, dict[str, Any]] = {}
    for seg in calibration.metadata.segments:
        s = seg.start
        if s + 3 >= calibration.num_frames:
            continue
        start, acts = calibration.frames[s], calibration.actions[s:s + 3]
        t = _kp(session, calibration.frames[s + 3]) - _kp(session, start)
        true_d.append(t)
        per_dof[seg.dof] = {"true_px": [round(float(v), 3) for v in t]}
        for k, ctx in contexts.items():
            p = _kp(session, predict(model, ctx, start, acts)[-1]) - _kp(session, start)
            pred_d[k].append(p)
            per_dof[seg.dof][f"{k}_px"] = [round(float(v), 3) for v in p]
    out: dict[str, Any] = {"available": True, "source": "calibration sweeps (in-sample)",
                           "per_dof": per_dof}
    for k in contexts:
        if true_d:
            frac, cos, n = direction_agreement(np.stack(pred_d[k]), np.stack(true_d))
            out[k] = {"right_direction": None if math.isnan(frac) else round(frac, 4),
                      "mean_cosine": None if math.isnan(cos) else round(cos, 4), "cases": n}
    return out
