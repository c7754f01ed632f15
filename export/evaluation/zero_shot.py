"""Zero-shot evaluation of the reference model (``syncedge model eval``).

For every split and every variant, on the same episodes, 16-step open-loop rollouts from
the first frame of each cell's first motion episode:

- ``calibrated``: context from the cell's own calibration episode;
- ``zeroed``: calibration zeroed (DoF mask all zero, so the context is zero);
- ``other_cell``: the calibration of another cell of the same split;
- ``mislabelled``: the cell's calibration with its channels permuted and signs flipped
  (the rollout actions unchanged);
- ``no_calibration``: the baseline model trained without calibration (same data, steps,
  history);
- ``copy_last``: the start frame repeated.

Metrics per cell: PSNR, SSIM, motion-region PSNR (pixels whose ground truth changed from
the start frame), end-effector keypoint error after the last step (keypoint regressor on
the predicted frame against the rendered ground truth), and a per-DoF probe: a pure +delta
on one channel for a few steps, rendered with MuJoCo for the truth; the direction of the
predicted end-effector motion is compared with the true one. Differences to
``calibrated`` are paired per cell with percentile bootstrap 95% intervals.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edge.metrics import bootstrap_mean_ci, direction_agreement, motion_mask, psnr, ssim
from edge.metrics import masked_psnr as _masked_psnr
from export.cells.sampling import CellParams, Convention
from export.errors import ExportError
from export.models.latent import KeypointNet, ModelConfig, WorldModel
from export.train.data import Cell, load_cells, relabel
from export.train.latent import load_checkpoint

__all__ = ["EvalOptions", "load_world_model", "load_keypoint", "evaluate", "VARIANTS",
           "to_uint8"]

log = logging.getLogger("syncedge.eval")

VARIANTS = ("calibrated", "zeroed", "other_cell", "mislabelled", "no_calibration", "copy_last")
SPLITS = {"in_distribution": "val", "held_out_camera": "test_camera",
          "held_out_robot": "test_robot", "held_out_convention": "test_convention",
          "all_held_out": "test_all"}


@dataclass
class EvalOptions:
    """What to evaluate."""

    run: str
    data: str
    horizon: int = 16
    probe_steps: int = 4
    probe_delta_rad: float = 0.1
    max_cells: int | None = None
    seed: int = 0
    residual_decoding: bool = False


def masked_psnr(pred: np.ndarray, truth: np.ndarray, mask: np.ndarray) -> float:
    """:func:`edge.metrics.masked_psnr` with NaN for an empty mask (for nan-aware means)."""
    v = _masked_psnr(pred, truth, mask)
    return float("nan") if v is None else v


def load_world_model(run: str | Path, calibrated: bool = True) -> WorldModel:
    """Build a :class:`WorldModel` from a run folder's ``ae.pt`` and dynamics checkpoint."""
    run = Path(run)
    dyn = load_checkpoint(run / ("dynamics.pt" if calibrated else "dynamics_nocal.pt"))
    cfg = ModelConfig.from_dict(dyn["config"])
    model = WorldModel(cfg)
    ae = load_checkpoint(run / "ae.pt")
    model.encoder.load_state_dict(ae["encoder"])
    model.decoder.load_state_dict(ae["decoder"])
    cal = dyn["weights"]["calibration"]
    if not cfg.use_calibration:  # the baseline has no token network (older runs kept one)
        cal = {k: v for k, v in cal.items() if not k.startswith("token.")}
    model.calibration.load_state_dict(cal)
    model.step.load_state_dict(dyn["weights"]["step"])
    return model.eval()


def load_keypoint(run: str | Path) -> KeypointNet:
    """The keypoint regressor of a run folder."""
    ck = load_checkpoint(Path(run) / "keypoint.pt")
    net = KeypointNet(image_size=ModelConfig.from_dict(ck["config"]).image_size)
    net.load_state_dict(ck["weights"]["keypoint"])
    return net.eval()


def to_uint8(x: torch.Tensor) -> np.ndarray:
    """float ``[..., 3, H, W]`` in [0, 1] -> uint8 ``[..., H, W, 3]`` (clip, round half up)."""
    v = torch.floor(x.clamp(0, 1) * 255.0 + 0.5).to(torch.uint8)
    return v.movedim(-3, -1).numpy()


def _mislabelling(rng: np.random.Generator, n: int) -> Convention:
    """A permutation with no fixed point plus random sign flips (at least one flip)."""
    while True:
        perm = rng.permutation(n)
        if n < 2 or (perm != np.arange(n)).all():
            break
    signs = rng.choice([-1, 1], size=n)
    signs[rng.integers(n)] = -1
    return Convention(tuple(int(p) for p in perm), tuple(int(s) for s in signs))


@torch.no_grad()
def _decode(model: WorldModel, z: torch.Tensor, start: torch.Tensor, z0: torch.Tensor,
            residual: bool) -> np.ndarray:
    """Decode latents ``[B, T, C, h, w]`` to uint8 frames; residual decoding adds
    ``start - dec(z_0)`` (cancels the autoencoder's error on static background)."""
    b, t = z.shape[:2]
    dec = model.decoder(z.flatten(0, 1)).reshape(b, t, 3, *start.shape[-2:])
    if not residual:
        return to_uint8(dec)
    base = start.to(torch.float32)[:, None] / 255.0 - model.decoder(z0)[:, None]
    return to_uint8(dec + base)


def _required(a: np.ndarray | None, cell: Cell, field: str) -> np.ndarray:
    """``a``, an optional array of ``cell``'s first motion episode that evaluation needs.

    Raises:
        ExportError: naming the cell and the field, if the episode does not carry it.
    """
    if a is None:
        raise ExportError(f"cell {cell.cell_id}: its motion episode has no {field}; evaluation "
                          f"needs generated episodes ('syncedge cells generate'), which carry it")
    return a


class _Evaluator:
    def __init__(self, opts: EvalOptions):
        self.opts = opts
        self.model = load_world_model(opts.run, True)
        self.nocal = load_world_model(opts.run, False)
        self.kp = load_keypoint(opts.run)
        self.cfg = self.model.cfg
        self.rng = np.random.default_rng(opts.seed)
        self.last_sheet: np.ndarray | None = None  # rollouts of the last split evaluated

    @torch.no_grad()
    def contexts(self, cells: list[Cell]) -> dict[str, torch.Tensor]:
        m = self.model
        cal_lat = torch.stack([m.encode_frames(torch.from_numpy(c.cal_frames)) for c in cells])
        cal_act = torch.from_numpy(np.stack([c.cal_actions for c in cells]))
        mask = torch.from_numpy(np.stack([c.dof_mask for c in cells]))
        mis = np.stack([relabel(c.cal_actions, _mislabelling(self.rng, c.num_dof))
                        for c in cells])
        own = m.calibration(cal_lat, cal_act, mask)
        return {
            "calibrated": own,
            "zeroed": m.calibration(cal_lat, cal_act, mask * 0),
            "other_cell": torch.roll(own, 1, 0),
            "mislabelled": m.calibration(cal_lat, torch.from_numpy(mis), mask),
            "no_calibration": self.nocal.calibration(cal_lat, cal_act, mask),
        }

    @torch.no_grad()
    def keypoints(self, frames: np.ndarray) -> np.ndarray:
        """uint8 ``[..., H, W, 3]`` -> pixel (x, y) ``[..., 2]``."""
        flat = torch.from_numpy(frames.reshape(-1, *frames.shape[-3:])).permute(0, 3, 1, 2)
        return self.kp(flat).numpy().reshape(*frames.shape[:-3], 2)

    @torch.no_grad()
    def rollouts(self, start: np.ndarray, actions: np.ndarray, ctx: dict[str, torch.Tensor]
                 ) -> dict[str, np.ndarray]:
        """start uint8 ``[B, H, W, 3]``, actions ``[B, T, A]`` -> variant -> ``[B, T, H, W, 3]``."""
        s = torch.from_numpy(start).permute(0, 3, 1, 2)
        a = torch.from_numpy(actions.astype(np.float32))
        out = {}
        for name, context in ctx.items():
            model = self.nocal if name == "no_calibration" else self.model
            z0 = model.encoder(s)
            z = model.rollout(z0, a, context)
            out[name] = _decode(model, z, s, z0, self.opts.residual_decoding)
        out["copy_last"] = np.repeat(start[:, None], actions.shape[1], 1)
        return out

    def split(self, split: str) -> dict[str, Any]:
        o = self.opts
        cells = load_cells(o.data, [split], self.cfg.max_dof, self.cfg.segment_frames,
                           limit=o.max_cells)
        t = o.horizon
        if not cells:
            raise ExportError(f"{Path(o.data) / split}: no cells to evaluate; generate them "
                              f"with 'syncedge cells generate --split {split} --out {o.data}'")
        if t < 1:
            raise ExportError(f"--horizon {t}: expected 1 or more rollout steps")
        short = [c for c in cells if len(c.motions[0].frames) < t + 1]
        if short:
            n = len(short[0].motions[0].frames)
            raise ExportError(f"{Path(o.data) / split}: cell {short[0].cell_id}'s first motion "
                              f"episode has {n} frames; --horizon {t} needs {t + 1} (give "
                              f"--horizon {n - 1} or less)")
        if len(cells) < 2:
            log.warning("%s: one cell only: the other_cell variant reads that cell's own "
                        "calibration (its figures equal calibrated's)", split)
        ctx = self.contexts(cells)
        start = np.stack([c.motions[0].frames[0] for c in cells])
        gt = np.stack([c.motions[0].frames[1:t + 1] for c in cells])
        acts = np.stack([c.motions[0].actions[:t] for c in cells])
        ee_gt = np.stack([_required(c.motions[0].ee_px, c, "ee_px")[1:t + 1] for c in cells])
        preds = self.rollouts(start, acts, ctx)
        ae_rec = self.autoencoder_ceiling(gt, start)
        per_cell: dict[str, dict[str, list[float]]] = {v: {} for v in VARIANTS}
        per_step: dict[str, list[float]] = {}
        for v, p in preds.items():
            kp = self.keypoints(p)  # (B, T, 2)
            ee_err = np.linalg.norm(kp - ee_gt, axis=-1)  # (B, T)
            per_step[f"{v}/ee_error_px"] = np.nanmean(ee_err, 0).tolist()
            rows = per_cell[v]
            for i in range(len(cells)):
                mm = motion_mask(gt[i], start[i])
                rows.setdefault("psnr", []).append(psnr(p[i], gt[i]))
                rows.setdefault("ssim", []).append(float(np.mean(
                    [ssim(p[i, k], gt[i, k]) for k in range(0, t, 3)])))
                rows.setdefault("motion_psnr", []).append(masked_psnr(p[i], gt[i], mm))
                rows.setdefault("ee_error_px", []).append(float(ee_err[i, -1]))
            per_step[f"{v}/motion_psnr"] = [
                float(np.nanmean([masked_psnr(p[i, k], gt[i, k], motion_mask(gt[i, k:k + 1],
                                                                              start[i])[0])
                                  for i in range(len(cells))])) for k in range(t)]
        probe = self.probe(cells, ctx)
        self.last_sheet = rollout_sheet(start, gt, preds["calibrated"], preds["zeroed"],
                                        [c.cell_id for c in cells])
        return {"cells": len(cells), "per_cell": per_cell, "per_step": per_step,
                "probe": probe, "ae_ceiling": ae_rec,
                "cell_ids": [c.cell_id for c in cells]}

    @torch.no_grad()
    def autoencoder_ceiling(self, gt: np.ndarray, start: np.ndarray) -> dict[str, float]:
        """Motion-region PSNR of the autoencoder's reconstruction of the ground truth, decoded
    plainly and residually (``start + dec(z_t) - dec(z_0)``)."""
        m = self.model
        b, t = gt.shape[:2]
        x = torch.from_numpy(gt.reshape(-1, *gt.shape[2:])).permute(0, 3, 1, 2)
        rec = to_uint8(m.decoder(m.encoder(x))).reshape(gt.shape)
        z = m.encoder(x).reshape(b, t, *m.encoder(x[:1]).shape[1:])
        s = torch.from_numpy(start).permute(0, 3, 1, 2)
        rec_res = _decode(m, z, s, m.encoder(s), True)
        plain, resid = [], []
        for i in range(b):
            mm = motion_mask(gt[i], start[i])
            plain.append(masked_psnr(rec[i], gt[i], mm))
            resid.append(masked_psnr(rec_res[i], gt[i], mm))
        return {"motion_psnr": float(np.nanmean(plain)),
                "motion_psnr_residual": float(np.nanmean(resid)),
                "psnr": float(psnr(rec, gt))}

    @torch.no_grad()
    def probe(self, cells: list[Cell], ctx: dict[str, torch.Tensor]) -> dict[str, Any]:
        """Per-DoF probe: +delta on one channel; direction of EE motion, predicted vs true."""
        from export.cells.generate import CellGenerator, GenerateOptions

        o = self.opts
        disp: dict[str, list[np.ndarray]] = {v: [] for v in ctx}
        true: list[np.ndarray] = []
        with CellGenerator(GenerateOptions(segmentation=False)) as gen:
            for i, cell in enumerate(cells):
                params = CellParams.from_json_dict(cell.params)
                n = cell.num_dof
                q0 = _required(cell.motions[0].joint_positions, cell, "joint_positions")[0, :n]
                acts = np.zeros((n, o.probe_steps, self.cfg.max_dof), np.float32)
                ee_true = []
                start = None
                for c in range(n):
                    acts[c, :, c] = o.probe_delta_rad
                    q = q0[None] + np.cumsum(np.vstack([np.zeros((1, n)),
                                                        acts[c, :, :n]]), 0)
                    ep = gen.render_episode(params, params.convention.to_canonical(q), "motion")
                    ee_px = ep.ee_px
                    assert ee_px is not None  # render_episode always sets it
                    ee_true.append(ee_px[-1] - ee_px[0])
                    start = ep.frames[0]
                true.append(np.stack(ee_true))
                assert start is not None  # np.stack raised above unless the loop ran
                starts = np.repeat(start[None], n, 0)
                one = {k: v[i:i + 1].expand(n, *v.shape[1:]) for k, v in ctx.items()}
                preds = self.rollouts(starts, acts, one)
                kp0 = self.keypoints(start[None])[0]
                for v in ctx:
                    disp[v].append(self.keypoints(preds[v][:, -1]) - kp0)
        t = np.concatenate(true)
        out = {}
        for v in ctx:
            frac, cos, count = direction_agreement(np.concatenate(disp[v]), t)
            out[v] = {"right_direction": frac, "mean_cosine": cos, "cases": count}
        return out


def _paired(per_cell: dict[str, dict[str, list[float]]], metric: str, other: str,
            lower_is_better: bool) -> dict[str, float]:
    a = np.asarray(per_cell["calibrated"][metric], float)
    b = np.asarray(per_cell[other][metric], float)
    d = a - b
    mean, lo, hi = bootstrap_mean_ci(d)
    ok = np.isfinite(d)
    wins = (d[ok] < 0) if lower_is_better else (d[ok] > 0)
    return {"mean_diff": mean, "ci95_low": lo, "ci95_high": hi,
            "win_rate": float(wins.mean()) if ok.any() else float("nan"),
            "ratio_le_half": float(np.mean(a[ok] <= 0.5 * b[ok])) if lower_is_better
            else float("nan")}


def rollout_sheet(start: np.ndarray, truth: np.ndarray, calibrated: np.ndarray,
                  zeroed: np.ndarray, cell_ids: list[str], max_cells: int = 8) -> np.ndarray:
    """Contact sheet of rollouts, one row per cell (the first ``max_cells``): the start frame,
    ground truth at steps 4, 8, 12 and 16 (or the horizon's quarters), the calibrated
    prediction at the same steps, and the zeroed-calibration prediction at the last step.

    Args:
        start: uint8 ``[B, H, W, 3]``; truth, calibrated, zeroed: uint8 ``[B, T, H, W, 3]``.
        cell_ids: ``B`` names, drawn on each row's first tile.

    Returns:
        uint8 RGB image (see :func:`edge.visual.contact_sheet`).
    """
    from edge.visual import contact_sheet

    t = truth.shape[1]
    steps = sorted({max(1, round(t * k / 4)) for k in (1, 2, 3, 4)})
    rows, labels = [], []
    for i in range(min(max_cells, len(start))):
        rows.append(np.concatenate([start[i][None], truth[i, [k - 1 for k in steps]],
                                    calibrated[i, [k - 1 for k in steps]], zeroed[i, -1:]]))
        # the first tile carries the row label (the cell id); step labels on the first row
        labels.append([] if i else [""] + [f"gt {k}" for k in steps]
                       + [f"cal {k}" for k in steps] + [f"zero {t}"])
    return contact_sheet(rows, row_labels=cell_ids[:len(rows)], tile_labels=labels, scale=2)


def evaluate(opts: EvalOptions, splits: dict[str, str] | None = None,
             sheets: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """Run the evaluation; returns the JSON-ready result (tables, paired stats, targets).

    If ``sheets`` is given, it receives per split name a contact sheet of rollouts
    (:func:`rollout_sheet`)."""
    ev = _Evaluator(opts)
    splits = splits or SPLITS
    result: dict[str, Any] = {"options": vars(opts), "splits": {}}
    for name, split in splits.items():
        log.info("evaluating %s (%s)", name, split)
        r = ev.split(split)
        if sheets is not None and ev.last_sheet is not None:
            sheets[name] = ev.last_sheet
        summary = {v: {k: float(np.nanmean(vals)) for k, vals in r["per_cell"][v].items()}
                   for v in VARIANTS}
        paired = {}
        for other in VARIANTS[1:]:
            paired[other] = {
                "motion_psnr": _paired(r["per_cell"], "motion_psnr", other, False),
                "ee_error_px": _paired(r["per_cell"], "ee_error_px", other, True),
            }
        result["splits"][name] = {**r, "summary": summary, "paired": paired, "split": split}
    result["targets"] = _targets(result)
    return result


def _targets(result: dict[str, Any]) -> dict[str, Any]:
    s = result["splits"]
    t: dict[str, Any] = {}
    ceil = {k: v["ae_ceiling"]["motion_psnr"] for k, v in s.items()}
    t["ae_motion_psnr_ge_30dB"] = {"value": min(ceil.values()), "met": min(ceil.values()) >= 30}
    if "held_out_convention" in s:
        p = s["held_out_convention"]["paired"]
        t["ee_error_le_half_in_80pct"] = {
            o: {"value": p[o]["ee_error_px"]["ratio_le_half"],
                "met": p[o]["ee_error_px"]["ratio_le_half"] >= 0.8}
            for o in ("mislabelled", "zeroed")}
        t["pixels_win_80pct"] = {
            o: {"value": p[o]["motion_psnr"]["win_rate"],
                "met": p[o]["motion_psnr"]["win_rate"] >= 0.8}
            for o in ("zeroed", "mislabelled", "other_cell", "no_calibration")}
        gain = p["zeroed"]["motion_psnr"]["mean_diff"]
        t["motion_psnr_gain_over_zeroed_ge_1p5dB"] = {"value": gain, "met": gain >= 1.5}
        t["hard_floor_ci_excludes_zero"] = {
            o: {"ci95": [p[o]["ee_error_px"]["ci95_low"], p[o]["ee_error_px"]["ci95_high"]],
                "met": p[o]["ee_error_px"]["ci95_high"] < 0}
            for o in ("zeroed", "mislabelled", "no_calibration")}
    if "in_distribution" in s:
        base = s["in_distribution"]
        for name in ("held_out_camera", "held_out_robot"):
            if name in s:
                drop = base["summary"]["calibrated"]["motion_psnr"] - \
                    s[name]["summary"]["calibrated"]["motion_psnr"]
                ceil_drop = base["ae_ceiling"]["motion_psnr"] - s[name]["ae_ceiling"]["motion_psnr"]
                t[f"{name}_drop_le_ceiling_drop_plus_0p5dB"] = {
                    "drop": drop, "ceiling_drop": ceil_drop, "met": drop <= ceil_drop + 0.5}
    return t


def format_table(result: dict[str, Any]) -> str:
    """The evaluation as a text table (one block per split)."""
    lines = []
    for name, r in result["splits"].items():
        c = r["ae_ceiling"]
        lines.append(f"== {name} ({r['split']}, {r['cells']} cells)   autoencoder ceiling: "
                     f"motion-region PSNR {c['motion_psnr']:.2f} dB "
                     f"(residual {c['motion_psnr_residual']:.2f}), PSNR {c['psnr']:.2f} dB")
        lines.append(f"{'variant':16} {'PSNR':>7} {'SSIM':>6} {'motionPSNR':>10} "
                     f"{'EE err px':>9} {'probe dir':>9} {'cal better':>10}")
        for v in VARIANTS:
            s = r["summary"][v]
            pr = r["probe"].get(v, {})
            win = r["paired"][v]["motion_psnr"]["win_rate"] if v in r["paired"] else float("nan")
            lines.append(f"{v:16} {s['psnr']:7.2f} {s['ssim']:6.3f} {s['motion_psnr']:10.2f} "
                         f"{s['ee_error_px']:9.2f} {pr.get('right_direction', float('nan')):9.2f} "
                         f"{win:10.2f}")
    lines.append("motionPSNR: PSNR over the pixels where the ground truth changed from the start "
                 "frame; EE err px: end-effector keypoint error at the last step; probe dir: "
                 "share of per-DoF probes moving the end effector the true way (none for "
                 "copy_last); cal better: share of cells where the calibrated model's "
                 "motionPSNR is higher than this variant's (none for itself)")
    lines.append("targets:")
    for k, v in result["targets"].items():
        lines.append(f"  {k}: {json.dumps(v)}")
    return "\n".join(lines)


def plot_error_growth(result: dict[str, Any], path: str | Path) -> Path:
    """PNG of EE error and motion-region PSNR per rollout step for each variant and split."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["splits"])
    fig, axes = plt.subplots(2, len(names), figsize=(3.2 * len(names), 5.5), squeeze=False)
    for j, name in enumerate(names):
        ps = result["splits"][name]["per_step"]
        for v in VARIANTS:
            steps = np.arange(1, len(ps[f"{v}/ee_error_px"]) + 1)
            axes[0, j].plot(steps, ps[f"{v}/ee_error_px"], label=v)
            axes[1, j].plot(steps, ps[f"{v}/motion_psnr"], label=v)
        axes[0, j].set_title(name, fontsize=9)
        axes[0, j].set_ylabel("EE error (px)")
        axes[1, j].set_ylabel("motion-region PSNR (dB)")
        axes[1, j].set_xlabel("rollout step")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
