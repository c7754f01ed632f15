"""Does a calibration recorded at another timing carry what the planner's timing carries?

For each generated cell of a split, its calibration sweep (the generator's timing: 3 frames
out, a pause, 3 back, a pause, at 10 Hz) is re-rendered by MuJoCo at other timings: camera
rates, phase durations, pauses, amplitudes, DoF order and signs (:data:`DEFAULT_MATRIX`).
Each recording goes through the product's ingest (``edge.calibrate.ingest``, through
``edge.runtime.context.encode_calibration``) into a context of the shipped model, and the
model's rollouts with it are scored beside those of the planner-timing context and of the
zeroed calibration (DoF mask 0, which for the warp family is copy-last exactly):

- motion-region PSNR at step 16 of the cell's first motion episode (pixels whose truth
  differs from the start frame; ``export.evaluation.frames``);
- futures retrieval at step 8: 8 candidate action sequences from one start state, each
  rendered by MuJoCo (both motion profiles, cached under ``DATA/<split>/futures/``); a hit
  is a prediction nearest its own future.

The figure of merit is the *margin kept*: ``(variant - zeroed) / (planner - zeroed)`` per
metric over the cells (target >= 0.9). A planner margin under 1 dB (PSNR) or under 0.05
(retrieval) makes that ratio uninformative; the result says so instead of passing it.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["DEFAULT_MATRIX", "ONE_CHANGE_VARIANTS", "TimingVariant", "evaluate_timing",
           "format_timing_table", "retimed_positions"]


@dataclass(frozen=True)
class TimingVariant:
    """One recording timing.

    Attributes:
        name: label.
        rate_hz: camera (and joint sample) rate, Hz.
        phase_s: out and back duration of each DoF's sweep, s (eased in and out).
        pause_s: hold at the peak and at home after each phase, s.
        amplitude: (low, high) magnitude drawn per DoF, rad; None keeps the cell's own.
        shuffle_order: sweep the DoFs in another random order.
        flip_signs: reverse each DoF's direction with probability 1/2 (where the limits
            allow).
    """

    name: str
    rate_hz: float
    phase_s: float
    pause_s: float
    amplitude: tuple[float, float] | None = None
    shuffle_order: bool = False
    flip_signs: bool = False


#: The timings measured (camera 10/15/30 Hz, 0.3-2 s per phase, amplitudes across the
#: shipped model's 0.2-0.8 rad, random order and signs).
DEFAULT_MATRIX = (
    TimingVariant("10Hz-0.3s", 10.0, 0.3, 0.1),
    TimingVariant("10Hz-2s-nopause", 10.0, 2.0, 0.0, shuffle_order=True),
    TimingVariant("15Hz-0.6s-order", 15.0, 0.6, 0.2, shuffle_order=True),
    TimingVariant("15Hz-0.3s-amp", 15.0, 0.3, 0.5, amplitude=(0.2, 0.8), flip_signs=True),
    TimingVariant("30Hz-1s-signs", 30.0, 1.0, 0.3, flip_signs=True),
    TimingVariant("30Hz-2s-all", 30.0, 2.0, 0.5, amplitude=(0.2, 0.8), shuffle_order=True,
                  flip_signs=True),
)

#: ``30Hz-2s-all`` taken apart: the same 30 Hz recording of 2 s phases with one change at a
#: time from the planner's sweep (``plain``: none; ``amp``: amplitudes drawn in 0.2-0.8 rad;
#: ``flip``: random signs; ``order``: a shuffled channel order), to find which change a
#: read of the sweep is sensitive to (``scripts/chain_fit_eval.py --calibration-timing``).
ONE_CHANGE_VARIANTS = (
    TimingVariant("30Hz-2s-plain", 30.0, 2.0, 0.5),
    TimingVariant("30Hz-2s-amp", 30.0, 2.0, 0.5, amplitude=(0.2, 0.8)),
    TimingVariant("30Hz-2s-flip", 30.0, 2.0, 0.5, flip_signs=True),
    TimingVariant("30Hz-2s-order", 30.0, 2.0, 0.5, shuffle_order=True),
)


def retimed_positions(q0_ctrl: np.ndarray, sweeps: list[tuple[int, float]],
                      variant: TimingVariant, lead_s: float = 0.5) -> np.ndarray:
    """Joint positions of a calibration sweep at a variant's timing.

    Args:
        q0_ctrl: float64 ``[n]`` the start pose, controller convention, rad.
        sweeps: ``(channel, signed amplitude rad)`` in sweep order.
        variant: the timing.
        lead_s: hold at the start pose before the first and after the last sweep, s.

    Returns:
        float64 ``[T, n]`` positions at ``variant.rate_hz`` (frame k at ``k / rate`` s).
    """
    r = variant.rate_hz
    move = max(1, int(round(variant.phase_s * r)))
    hold = int(round(variant.pause_s * r))
    u = 0.5 - 0.5 * np.cos(np.pi * np.arange(1, move + 1) / move)  # (move,) eased
    lead = max(1, int(round(lead_s * r)))
    rows = [np.repeat(q0_ctrl[None], lead, 0)]
    for c, amp in sweeps:
        prof = np.concatenate([u, np.ones(hold), 1 - u, np.zeros(hold)])  # share of amp
        seg = np.repeat(q0_ctrl[None], len(prof), 0)
        seg[:, c] += amp * prof
        rows.append(seg)
    rows.append(np.repeat(q0_ctrl[None], lead, 0))
    return np.concatenate(rows)


def _variant_sweeps(cal: Any, conv: Any, limits: np.ndarray, variant: TimingVariant,
                    rng: np.random.Generator) -> list[tuple[int, float]]:
    """The cell's own sweeps (channel, amplitude) in its order, changed as the variant
    asks; a direction that would leave the joint limits is reversed."""
    names = list(cal.metadata.dof_names)
    sweeps = [(names.index(s.dof), float(s.amplitude)) for s in cal.metadata.segments]
    if variant.shuffle_order:
        sweeps = [sweeps[i] for i in rng.permutation(len(sweeps))]
    q0 = np.asarray(cal.joint_positions[0], np.float64)
    out = []
    for c, amp in sweeps:
        if variant.amplitude is not None:
            amp = float(np.sign(amp) * rng.uniform(*variant.amplitude))
        if variant.flip_signs and rng.random() < 0.5:
            amp = -amp
        for a in (amp, -amp):
            peak = q0.copy()
            peak[c] += a
            canon = conv.to_canonical(peak[None])[0]
            if np.all((canon >= limits[:, 0]) & (canon <= limits[:, 1])):
                amp = a
                break
        out.append((c, amp))
    return out


def _zeroed_context(model: Any, ep: Any) -> Any:
    """The context of ``ep`` with every DoF masked (the zeroed calibration)."""
    from edge.runtime.context import CalibrationContext, pad_calibration

    frames, actions, mask = pad_calibration(model, ep, check_amplitude=False)
    c, h, w = model.contract.latent_shape
    lat = np.empty((len(frames), c, h, w), np.float32)
    for i, f in enumerate(frames):
        lat[i] = model.encode(f)
    values = model.calibrate(lat, actions, mask * 0)
    return CalibrationContext(np.ascontiguousarray(values, np.float32), model.sha256,
                              ep.num_dof, "zeroed")


def evaluate_timing(data: str | Path, split: str, model_dir: str | Path,
                    variants: tuple[TimingVariant, ...] = DEFAULT_MATRIX,
                    max_cells: int | None = 16, candidates: int = 8, horizon: int = 16,
                    seed: int = 0, threads: int | None = None,
                    progress: Any = print) -> dict[str, Any]:
    """Score each timing variant's context against the planner's and the zeroed one.

    Args:
        data: cells folder (``DATA/<split>/chunk-*``, from ``syncedge cells generate``).
        split: the split; model_dir: a model folder (the shipped ``models/reference``).
        variants: the timings; max_cells: cells used (None: all).
        candidates, horizon, seed: the futures (as ``syncedge model eval-frames``).
        threads: ONNX Runtime threads; progress: a print-like callable.

    Returns:
        JSON-ready: per variant and per cell, whether ingest accepted it (else the reason
        code), motion PSNR@16 and retrieval@8; per variant the means and the margin kept.
    Raises:
        ExportError: no cells in the split.
    """
    from edge.calibrate.ingest import IngestError
    from edge.episode import load_episode
    from edge.runtime.context import encode_calibration
    from edge.runtime.model import load_model
    from edge.runtime.rollout import Rollout
    from export.cells.futures import load_or_render_futures
    from export.cells.generate import CellGenerator, GenerateOptions
    from export.cells.robots import robot_spec
    from export.cells.sampling import CellParams
    from export.cells.trajectories import MOTION_PROFILES
    from export.errors import ExportError
    from export.evaluation.frames import _frame_metrics, retrieval_hits

    t0 = time.perf_counter()
    root = Path(data)
    manifests = sorted((root / split).glob("chunk-*/manifest.json"))
    if not manifests:
        raise ExportError(f"{root / split}: no complete chunk; generate it with 'syncedge "
                          f"cells generate --split {split} --out {root}'")
    cells = []
    for m in manifests:
        man = json.loads(m.read_text())
        for c in man["cells"]:
            cells.append((m.parent / c["cell_id"], c))
    cells = cells[:max_cells] if max_cells else cells
    model = load_model(model_dir, intra_op_num_threads=threads)
    gen = CellGenerator(GenerateOptions())
    rng = np.random.default_rng(seed)
    names = ["planner", "zeroed", *[v.name for v in variants]]
    rows: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    try:
        for i, (cdir, cjson) in enumerate(cells):
            cal = load_episode(cdir / "calibration.npz")
            motion = load_episode(sorted(cdir.glob("motion-*.npz"))[0])
            params = CellParams.from_json_dict(cjson)
            if cal.joint_positions is None or motion.joint_positions is None:
                raise ExportError(f"{cdir}: episodes without joint_positions; the timing "
                                  f"evaluation needs generated cells")
            q_cal, q_motion = cal.joint_positions, motion.joint_positions
            conv = params.convention
            limits = np.asarray(robot_spec(params.robot).limits_rad, np.float64)
            futs = [load_or_render_futures(root, split, params.cell_id, lambda: gen, params,
                                           q_motion[0], candidates, horizon, p,
                                           seed) for p in MOTION_PROFILES]
            contexts: dict[str, Any] = {"planner": encode_calibration(model, cal),
                                        "zeroed": _zeroed_context(model, cal)}
            info: dict[str, dict[str, Any]] = {"planner": {}, "zeroed": {}}
            for v in variants:
                q = retimed_positions(np.asarray(q_cal[0]),
                                      _variant_sweeps(cal, conv, limits, v, rng), v)
                ep = gen.render_episode(params, conv.to_canonical(q), "calibration")
                ep = replace(ep, timestamps=np.arange(len(q), dtype=np.float64) / v.rate_hz,
                             ee_px=None, robot_mask=None)
                try:
                    contexts[v.name] = encode_calibration(model, ep, where=v.name)
                    info[v.name] = {"recorded_frames": len(q)}
                except IngestError as exc:
                    info[v.name] = {"recorded_frames": len(q), "refused": exc.code,
                                    "message": str(exc)}
            a = model.contract.max_dof
            start, truth = motion.frames[0], motion.frames[1:horizon + 1]
            acts = np.zeros((1, horizon, a), np.float32)
            acts[0, :, :motion.num_dof] = motion.actions[:horizon]
            for name in names:
                row = {"cell": params.cell_id, **info.get(name, {})}
                ctx = contexts.get(name)
                if ctx is not None:
                    rollout = Rollout(model, ctx, max_horizon=horizon,
                                      max_candidates=candidates)
                    pred = rollout.run(start, acts)[0]
                    fm = _frame_metrics(pred[-1:], truth[-1:], start)
                    row["motion_psnr_16"] = float(fm["motion_psnr"][0])
                    row["psnr_16"] = float(fm["psnr"][0])
                    hits = []
                    for f in futs:
                        fa = np.zeros((candidates, horizon, a), np.float32)
                        fa[..., :f.actions.shape[-1]] = f.actions
                        fp = rollout.run(start, fa)
                        hits.append(float(retrieval_hits(fp[:, 7], f.frames[:, 8]).mean()))
                    row["retrieval_8"] = float(np.mean(hits))
                rows[name].append(row)
            progress(f"[{time.perf_counter() - t0:6.0f} s] cell {i + 1}/{len(cells)} "
                     f"{params.cell_id}: " + ", ".join(
                         f"{n} {rows[n][-1].get('motion_psnr_16', float('nan')):.2f}"
                         for n in names[:3]))
    finally:
        gen.close()
        model.deactivate()
    return _summary(split, str(model_dir), variants, rows, time.perf_counter() - t0)


def _mean(rows: list[dict[str, Any]], key: str) -> float | None:
    v = [r[key] for r in rows if key in r]
    return float(np.mean(v)) if v else None


def _summary(split: str, model: str, variants: tuple[TimingVariant, ...],
             rows: dict[str, list[dict[str, Any]]], wall_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {"split": split, "model": model, "cells": len(rows["planner"]),
                           "wall_s": round(wall_s, 1),
                           "variants": {v.name: asdict(v) for v in variants},
                           "per_cell": rows, "summary": {}}
    base = {k: _mean(rows["planner"], k) for k in ("motion_psnr_16", "retrieval_8")}
    zero = {k: _mean(rows["zeroed"], k) for k in ("motion_psnr_16", "retrieval_8")}
    floor = {"motion_psnr_16": 1.0, "retrieval_8": 0.05}
    margins: dict[str, float | None] = {}
    for k in base:
        b, z0 = base[k], zero[k]
        margins[k] = None if b is None or z0 is None else b - z0
    for name, rs in rows.items():
        s: dict[str, Any] = {"accepted": sum("refused" not in r for r in rs), "cells": len(rs),
                             "refused": sorted({r["refused"] for r in rs if "refused" in r}),
                             "psnr_16": _mean(rs, "psnr_16")}
        for k in ("motion_psnr_16", "retrieval_8"):
            val, margin, z = _mean(rs, k), margins[k], zero[k]
            s[k] = val
            if name in ("planner", "zeroed") or val is None or margin is None or z is None:
                continue
            s[f"{k}_margin_kept"] = (val - z) / margin if margin else None
            s[f"{k}_informative"] = bool(margin >= floor[k])
            s[f"{k}_met"] = bool(margin >= floor[k] and margin
                                 and (val - z) / margin >= 0.9)
        out["summary"][name] = s
    out["planner_margin"] = margins
    return out


def format_timing_table(result: dict[str, Any]) -> str:
    """The result as a text table."""
    lines = [f"split {result['split']}, {result['cells']} cells, model {result['model']}, "
             f"{result['wall_s']:.0f} s",
             f"{'timing':18} {'accepted':>9} {'motionPSNR@16':>14} {'kept':>6} "
             f"{'retrieval@8':>12} {'kept':>6}"]
    for name, s in result["summary"].items():
        def f(v: Any, spec: str) -> str:
            return format(v, spec) if isinstance(v, (int, float)) else "-"
        lines.append(f"{name:18} {s['accepted']:>4}/{s['cells']:<4} "
                     f"{f(s['motion_psnr_16'], '14.2f')} "
                     f"{f(s.get('motion_psnr_16_margin_kept'), '6.2f')} "
                     f"{f(s['retrieval_8'], '12.3f')} "
                     f"{f(s.get('retrieval_8_margin_kept'), '6.2f')}")
    pm = result["planner_margin"]
    lines.append(f"planner margin over zeroed: motion PSNR@16 "
                 f"{pm['motion_psnr_16'] if pm['motion_psnr_16'] is None else round(pm['motion_psnr_16'], 2)} dB"
                 f", retrieval@8 {pm['retrieval_8'] if pm['retrieval_8'] is None else round(pm['retrieval_8'], 3)}"
                 " (under 1 dB / 0.05 the kept ratio is uninformative)")
    return "\n".join(lines)
