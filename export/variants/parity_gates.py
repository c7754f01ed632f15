"""Parity gates of exported model variants and their record in ``model.json``.

``syncedge export check`` (:mod:`export.variants.parity`) measures a variant against the PyTorch
model on held-out cells; this module turns the figures into a verdict, stores it as
``model.json`` ``evaluation.parity`` and lets ``syncedge bundle build`` refuse a variant
whose record is missing, failed or made for other graphs. No torch here.

Gates (:class:`Gates`):

- **fp32**: every graph's one-step output matches PyTorch within ``fp32_max_abs``
  (1e-4; latent units for the encoder, calibration and step graphs, [0, 1] pixel units
  for the decoder), on the same inputs, at every step of the 16-step rollout (the step
  graph is fed the PyTorch rollout's history at each step).
- **int8**: the rollout PSNR against ground truth loses at most ``int8_psnr_loss_db``
  (0.5 dB) to the FP32 rollout, at every one of the 16 steps (mean over cells), on the
  whole frame and, where the record has the figure, in the motion region (the pixels
  whose true frame differs from the start frame; mean over the cells with such pixels).
- **fp16**: the same with ``fp16_psnr_loss_db`` (0.1 dB): FP16 keeps an 11-bit mantissa in
  the convolutions only, so a loss above 0.1 dB points to a conversion fault (an overflow
  or a normalisation moved to FP16), not to expected rounding.

``syncedge export check`` measures the motion region for every family; ``bundle build``
requires it of the warp family's INT8 and FP16 records (:data:`MOTION_GATED_FAMILIES`),
whose whole frame is mostly the start frame copied. Records of the latent family made
before the motion region was measured stay valid.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from edge.manifest import ModelManifest, load_model_dir, save_manifest
from export.errors import ExportError

__all__ = ["MOTION_GATED_FAMILIES", "Gates", "ParityError", "gates_dict", "graphs_digest",
           "json_safe", "judge", "record_parity", "require_parity", "format_parity_table"]


class ParityError(ExportError, ValueError):
    """A parity record is missing, failed or does not belong to the model's graphs."""


@dataclass(frozen=True)
class Gates:
    """Parity gate limits (see the module docstring).

    Attributes:
        fp32_max_abs: largest one-step max abs error of any FP32 graph (output units).
        int8_psnr_loss_db: largest per-step rollout PSNR loss of INT8 against FP32, dB.
        fp16_psnr_loss_db: the same for FP16, dB.
        horizon: rollout steps.
    """

    fp32_max_abs: float = 1e-4
    int8_psnr_loss_db: float = 0.5
    fp16_psnr_loss_db: float = 0.1
    horizon: int = 16


def graphs_digest(manifest: ModelManifest) -> str:
    """sha256 over the sorted ``key:file:sha256`` lines of every graph of ``manifest``.

    A parity record stores it, so a record copied to a model with other graphs is refused.
    """
    lines = "".join(f"{k}:{g.file}:{g.sha256}\n" for k, g in sorted(manifest.graphs.items()))
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()


def judge(variant: str, figures: Mapping[str, Any], gates: Gates) -> dict[str, Any]:
    """The gate of ``variant`` applied to measured ``figures``.

    Args:
        variant: ``"fp32"``, ``"int8"`` or ``"fp16"``.
        figures: needs ``one_step_max_abs`` (graph key -> float) for fp32 and
            ``rollout.psnr_loss_db`` (per-step list, dB) for int8/fp16; an int8/fp16
            gate also covers ``rollout.motion_psnr_loss_db`` when present (per step, dB;
            None for a step without moving pixels).
        gates: the limits.

    Returns:
        ``{"name", "metric", "value", "limit", "unit", "passed"}`` (plus ``region_values``,
        the whole-frame and motion-region maxima, when the motion region was measured); a
        NaN value fails.

    Raises:
        ParityError: unknown variant or a figure missing.
    """
    gate: dict[str, Any]
    try:
        if variant == "fp32":
            values = [float(v) for v in figures["one_step_max_abs"].values()]
            limit = gates.fp32_max_abs
            gate = {"name": "fp32", "metric": "max over graphs and steps of the one-step max "
                    "abs error against PyTorch", "limit": limit,
                    "unit": "latent units ([0, 1] for the decoder)"}
        elif variant in ("int8", "fp16"):
            ro = figures["rollout"]
            values = [float(v) for v in ro["psnr_loss_db"]]
            limit = gates.int8_psnr_loss_db if variant == "int8" else gates.fp16_psnr_loss_db
            gate = {"name": variant, "metric": f"max over {len(ro['psnr_loss_db'])} rollout "
                    "steps of the mean (over cells) PSNR loss against the FP32 rollout, both "
                    "against ground truth", "limit": limit, "unit": "dB"}
            if ro.get("motion_psnr_loss_db") is not None:
                motion = [float(v) for v in ro["motion_psnr_loss_db"] if v is not None]
                gate["metric"] += (", on the whole frame and in the motion region (pixels "
                                   "whose true frame differs from the start frame)")
                gate["region_values"] = {"whole_frame": _max_or_none(values),
                                         "motion_region": _max_or_none(motion)}
                values = values + motion
        else:
            raise ParityError(f"variant: expected fp32, int8 or fp16, found {variant!r}")
    except (KeyError, ValueError, TypeError) as exc:
        if isinstance(exc, ParityError):
            raise
        raise ParityError(f"parity figures for {variant}: missing or malformed ({exc!r})") \
            from None
    if not values:
        raise ParityError(f"parity figures for {variant}: no values")
    finite = all(math.isfinite(v) for v in values)
    value = max(values) if finite else None  # NaN/inf (a broken graph) fails
    passed = value is not None and value <= limit
    return {**gate, "value": value, "passed": bool(passed)}


def _max_or_none(values: list[float]) -> float | None:
    """The largest value; None when there is none or one is NaN/inf."""
    return max(values) if values and all(math.isfinite(v) for v in values) else None


def json_safe(obj: Any) -> Any:
    """Copy of ``obj`` with NaN/inf floats replaced by None (model.json is strict JSON)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def record_parity(model_dir: str | os.PathLike[str], record: Mapping[str, Any]) -> Path:
    """Write ``record`` as ``evaluation.parity`` of the folder's ``model.json``.

    Adds ``graphs_sha256`` (:func:`graphs_digest`) and ``status`` (``passed``/``failed``
    from ``record["gate"]["passed"]``). The model's identity (sha256 of ``model.json``)
    changes; the graphs do not.
    """
    model_dir = Path(model_dir)
    manifest = load_model_dir(model_dir, verify=True)
    rec = {**json_safe(record), "graphs_sha256": graphs_digest(manifest),
           "status": "passed" if record["gate"]["passed"] else "failed"}
    evaluation = {**manifest.evaluation, "parity": rec}
    return save_manifest(replace(manifest, evaluation=evaluation), model_dir / "model.json")


def require_parity(manifest: ModelManifest, where: str = "model.json") -> dict[str, Any]:
    """Check that ``manifest`` carries a passed parity record for its own graphs.

    Returns:
        The record.

    Raises:
        ParityError: naming ``where`` and the fix: record missing, failed, for another
            variant, or made for other graphs.
    """
    folder = Path(where).parent if Path(where).name == "model.json" else Path("MODEL_DIR")
    fix = (f"run 'syncedge export check {folder} --run RUN --data DATA' with the default "
           f"gates (or pass --force-unchecked to build anyway, recorded in the bundle)")
    rec = manifest.evaluation.get("parity") if isinstance(manifest.evaluation, Mapping) \
        else None
    if not isinstance(rec, Mapping):
        raise ParityError(f"{where}: evaluation.parity is missing: the {manifest.variant} "
                          f"variant was never checked against PyTorch; {fix}")
    if rec.get("status") != "passed":
        gate = rec.get("gate", {})
        raise ParityError(f"{where}: evaluation.parity.status is {rec.get('status')!r}: the "
                          f"{manifest.variant} gate ({gate.get('metric', '?')}) measured "
                          f"{gate.get('value')} against a limit of {gate.get('limit')}; "
                          f"this variant must not ship: re-export or re-quantise it and "
                          f"check again (--force-unchecked builds anyway, recorded in the "
                          f"bundle)")
    if rec.get("variant") != manifest.variant:
        raise ParityError(f"{where}: evaluation.parity is for variant {rec.get('variant')!r}, "
                          f"the model is {manifest.variant!r}; {fix}")
    if rec.get("graphs_sha256") != graphs_digest(manifest):
        raise ParityError(f"{where}: evaluation.parity was recorded for other graphs "
                          f"(graphs_sha256 differs); {fix}")
    loosened = _loosened(manifest.variant, rec, manifest.contract.family)
    if loosened:
        raise ParityError(f"{where}: evaluation.parity passed gates looser than the defaults "
                          f"({'; '.join(loosened)}); {fix}")
    return dict(rec)


#: Families whose INT8/FP16 gate must also have been measured in the motion region: the
#: warp family's frames are the start frame resampled, so the whole frame is mostly the
#: static background that every variant reproduces, and a whole-frame loss hides errors
#: where the robot moves.
MOTION_GATED_FAMILIES = ("warp",)


def _loosened(variant: str, rec: Mapping[str, Any], family: str = "latent") -> list[str]:
    """What in a parity record is looser than :class:`Gates`' defaults (limit, horizon, and
    for :data:`MOTION_GATED_FAMILIES` the motion region)."""
    default = Gates()
    limits = {"fp32": default.fp32_max_abs, "int8": default.int8_psnr_loss_db,
              "fp16": default.fp16_psnr_loss_db}
    out = []
    limit = rec.get("gate", {}).get("limit")
    if variant in limits and not (isinstance(limit, (int, float)) and limit <= limits[variant]):
        out.append(f"limit {limit} where the default is {limits[variant]:g}")
    horizon = rec.get("gates", {}).get("horizon", default.horizon)
    if not (isinstance(horizon, int) and horizon >= default.horizon):
        out.append(f"horizon {horizon} steps where the default is {default.horizon}")
    regions = rec.get("gate", {}).get("region_values")
    if family in MOTION_GATED_FAMILIES and variant in ("int8", "fp16") \
            and not (isinstance(regions, Mapping) and "motion_region" in regions):
        out.append(f"no motion-region figure: a {family}-family {variant} gate must also "
                   f"be measured in the motion region (re-run export check)")
    return out


def format_parity_table(records: Mapping[str, Mapping[str, Any]]) -> str:
    """A printable table: one block per model folder (one-step errors, rollout, gate)."""
    lines = []
    for where, r in records.items():
        g = r["gate"]
        value = "NaN/inf" if g["value"] is None else f"{g['value']:.3g}"
        lines.append(f"{where}  [{r['variant']}]  {'PASSED' if g['passed'] else 'FAILED'}: "
                     f"{value} (limit {g['limit']:g} {g['unit']})")
        width = max([14, *(len(k) for k in r["one_step_max_abs"])])
        lines.append(f"  {'graph':{width}} {'one-step max abs':>16}")
        for k, v in r["one_step_max_abs"].items():
            lines.append(f"  {k:{width}} {_num(v, '16.3e')}")
        ro = r["rollout"]
        motion = "motion_psnr_loss_db" in ro
        lines.append(f"  {'step':>4} {'PSNR torch':>10} {'PSNR ' + r['variant']:>10} "
                     f"{'loss dB':>8} {'vs torch dB':>11} {'latent max abs':>15}"
                     + (f" {'motion torch':>12} {'motion ' + r['variant']:>11} "
                        f"{'motion loss':>11}" if motion else ""))
        n = len(ro["psnr_db"])
        vs = ro.get("psnr_vs_fp32_db") or [None] * n
        m_ref = ro.get("reference_motion_psnr_db") or [None] * n
        m_var = ro.get("motion_psnr_db") or [None] * n
        m_loss = ro.get("motion_psnr_loss_db") or [None] * n
        for t, (a, b, d, v, e, ma, mb, md) in enumerate(zip(
                ro["reference_psnr_db"], ro["psnr_db"], ro["psnr_loss_db"], vs,
                ro["latent_max_abs"], m_ref, m_var, m_loss, strict=True)):
            lines.append(f"  {t + 1:4d} {_num(a, '10.2f')} {_num(b, '10.2f')} {_num(d, '8.3f')} "
                         f"{_num(v, '11.2f')} {_num(e, '15.3e')}"
                         + (f" {_num(ma, '12.2f')} {_num(mb, '11.2f')} {_num(md, '11.3f')}"
                            if motion else ""))
        lines.append("  (PSNR against ground truth of the PyTorch FP32 rollout and of this "
                     "folder's; loss = torch - this; vs torch: this folder's frames against "
                     "PyTorch's" + ("; motion: the same over the pixels whose true frame "
                                    "differs from the start frame, n/a where none does)"
                                    if motion else ")"))
    return "\n".join(lines)


def _num(v: float | None, fmt: str) -> str:
    width = int(fmt.split(".")[0])
    if v is None:
        return f"{'n/a':>{width}}"
    if fmt.endswith("f"):  # no "-0.000" for a loss that rounds to zero
        v = round(v, int(fmt.split(".")[1][:-1])) + 0.0
    return format(v, fmt)


def gates_dict(gates: Gates) -> dict[str, Any]:
    """JSON-ready copy of ``gates``."""
    return asdict(gates)
