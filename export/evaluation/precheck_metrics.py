"""The pre-check benchmark's figures from per-cell verdicts (:mod:`export.evaluation.precheck`):
pooled keep-out recall and false refusals, the 10% false-refusal operating point, joint-limit
accuracy, chosen = truly best, the median Spearman correlation, bootstrap intervals and the
table."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["TABLE_COLUMNS", "format_table", "operating_point", "spearman", "summarise"]

TABLE_COLUMNS = ("keepout_recall", "keepout_false_refusals",
                 "keepout_recall_at_10pct_false_refusals", "joint_limit_accuracy",
                 "chosen_is_truly_best", "spearman_median")


def _ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of a 1-D array, ties given their average rank."""
    x = np.asarray(x, np.float64)
    order = np.argsort(x, kind="stable")
    _, first, counts = np.unique(x[order], return_index=True, return_counts=True)
    ranks = np.empty(len(x))
    ranks[order] = np.repeat(first + (counts + 1) / 2, counts)
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation of two float ``[n]`` arrays (average ranks for ties);
    0.0 when either is constant."""
    rx, ry = _ranks(x), _ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return 0.0
    return float(np.corrcoef(rx, ry)[0, 1])


def _metrics(rows: list[dict]) -> dict:
    enters = np.concatenate([r["enters"] for r in rows]).astype(bool)
    ref = np.concatenate([r["keepout_refused"] for r in rows]).astype(bool)
    jl = np.concatenate([r["jl_correct"] for r in rows]).astype(bool)
    chosen = [r["chosen_is_best"] for r in rows if r["chosen_is_best"] is not None]
    rho = [r["spearman"] for r in rows if r["spearman"] is not None]
    tau, recall_at = operating_point(
        np.concatenate([r["keepout_moved_max"] for r in rows]), enters)
    return {"keepout_recall": float(ref[enters].mean()) if enters.any() else None,
            "keepout_false_refusals": float(ref[~enters].mean()) if (~enters).any() else None,
            "joint_limit_accuracy": float(jl.mean()),
            "chosen_is_truly_best": float(np.mean(chosen)) if chosen else None,
            "spearman_median": float(np.median(rho)) if rho else None,
            "keepout_recall_at_10pct_false_refusals": recall_at,
            "max_moved_pixels_for_10pct_false_refusals": tau}


def operating_point(moved_max: np.ndarray, enters: np.ndarray, false_rate: float = 0.10
                    ) -> tuple[float | None, float | None]:
    """The smallest ``max_moved_pixels`` whose false refusals (candidates that truly stay
    out but move more pixels than that inside the region) are at most ``false_rate``, and
    the keep-out recall there. Chosen on the same cells it is reported on (optimistic).

    Args:
        moved_max: int ``[n]`` per candidate, the most predicted moved pixels inside the
            region at any step.
        enters: bool ``[n]`` whether the candidate truly enters.

    Returns:
        ``(threshold_px, recall)``, or ``(None, None)`` when all or none enter or no
        threshold keeps false refusals that low.
    """
    enters = enters.astype(bool)
    if not enters.any() or enters.all():
        return None, None
    for tau in range(int(moved_max.max()) + 1):
        if (moved_max[~enters] > tau).mean() <= false_rate:
            return float(tau), float((moved_max[enters] > tau).mean())
    return None, None


def summarise(rows: list[dict], seed: int = 0, resamples: int = 1000) -> dict:
    """The metrics over cells and their 95% bootstrap intervals (cells resampled).

    Args:
        rows: one :func:`score_cell` result per cell (at least one).

    Returns:
        Per metric ``{"value": float | None, "ci95": [lo, hi] | None}``.
    """
    point = _metrics(rows)
    rng = np.random.default_rng(seed)
    boots: dict[str, list[float]] = {k: [] for k in point}
    for _ in range(resamples):
        sample = [rows[i] for i in rng.integers(len(rows), size=len(rows))]
        for k, v in _metrics(sample).items():
            if v is not None:
                boots[k].append(v)
    return {k: {"value": v, "ci95": ([float(np.percentile(boots[k], 2.5)),
                                      float(np.percentile(boots[k], 97.5))]
                                     if boots[k] else None)} for k, v in point.items()}


def format_table(result: dict[str, Any]) -> str:
    """The result as a Markdown table: one row per split and model, each figure with its
    95% interval (``n/a`` where it is undefined)."""
    def f(m: dict) -> str:
        if m["value"] is None:
            return "n/a"
        lo, hi = m["ci95"] or (m["value"], m["value"])
        return f"{m['value']:.2f} [{lo:.2f}, {hi:.2f}]"

    lines = ["| split (cells) | model | " + " | ".join(TABLE_COLUMNS) + " |",
             "|---|---|" + "---|" * len(TABLE_COLUMNS)]
    for name, s in result["splits"].items():
        for label, m in s["models"].items():
            lines.append(f"| {name} ({s['cells']}) | {label} | "
                         + " | ".join(f(m[c]) for c in TABLE_COLUMNS) + " |")
    return "\n".join(lines)
