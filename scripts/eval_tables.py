"""Markdown tables from one or more ``syncedge model eval-frames`` results (README, docs/eval).

    python scripts/eval_tables.py docs/eval/frames_a.json docs/eval/frames_b.json ... \
        [--json docs/eval/frames_summary.json]

Per split: one row per model and variant (whole-frame PSNR at steps 1 and 16 and its mean,
SSIM at 16, motion-region PSNR at 16, static-pixel PSNR, futures retrieval, end-effector
error), the copy-last, oracle-flow-warp and blurred-truth references, the paired interval
of the warp model against the latent one, and every target with its verdict.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edge.metrics import bootstrap_mean_ci  # noqa: E402

ORDER = ("in_distribution", "held_out_camera", "held_out_robot", "held_out_convention",
         "all_held_out", "stress")


def _f(v: float | None, fmt: str = "{:.2f}") -> str:
    return "" if v is None or not np.isfinite(v) else fmt.format(v)


def merge(paths: list[str]) -> dict:
    """One result with every split of the given files (later files win on a clash),
    with the targets recomputed over all of them."""
    from export.evaluation.frames import _targets

    out: dict = {"splits": {}}
    for p in paths:
        out["splits"].update(json.loads(Path(p).read_text())["splits"])
    out["targets"] = _targets(out)  # across files too (held-out robot vs in-distribution)
    return out


def split_table(name: str, s: dict) -> list[str]:
    """The markdown table of one split."""
    lines = [f"**{name}** ({s['split']}, {s['cells']} cells)", "",
             "| model | variant | PSNR@1 | PSNR@16 | mean PSNR | SSIM@16 | motion PSNR@16 | "
             "static PSNR | retrieval@8 | retrieval@16 | retrieval@8 two-joint | EE px@16 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    copy_done = False
    for label, m in s["models"].items():
        for v, r in m["summary"].items():
            if v == "copy_last":
                if copy_done:
                    continue
                copy_done = True
                label_shown = ""
            else:
                label_shown = label
            lines.append(
                f"| {label_shown} | {v} | {_f(r['psnr'][0])} | {_f(r['psnr'][-1])} | "
                f"{_f(float(np.mean(r['psnr'])))} | {_f(r['ssim'][-1], '{:.3f}')} | "
                f"{_f(r['motion_psnr'][-1])} | {_f(r.get('static_psnr'))} | "
                f"{_f(r.get('retrieval/all_joints/8'))} | {_f(r.get('retrieval/all_joints/16'))} | "
                f"{_f(r.get('retrieval/two_joint/8'))} | {_f(r.get('ee_error_px'))} |")
    ob = s["oracle_flow_warp"]
    bl = s["blurred_truth_retrieval"]
    lines.append(f"| oracle-flow warp | (DIS flow from the truth) | {_f(ob['psnr'][0])} | "
                 f"{_f(ob['psnr'][-1])} | {_f(float(np.mean(ob['psnr'])))} | | "
                 f"{_f(ob['motion_psnr'][-1])} | | | | | |")
    lines.append(f"| blurred truth | (2 px Gaussian) | | | | | | | {_f(bl.get('all_joints/8'))} | "
                 f"{_f(bl.get('all_joints/16'))} | {_f(bl.get('two_joint/8'))} | |")
    lines.append(f"| | EE reader on the truth | | | | | | | | | | "
                 f"{_f(s['ee_reader_error_on_truth_px'])} |")
    models = s["models"]
    if "warp" in models and "latent" in models:
        a = np.array([x[-1] for x in models["warp"]["per_cell"]["calibrated"]["psnr"]])
        b = np.array([x[-1] for x in models["latent"]["per_cell"]["calibrated"]["psnr"]])
        mean, lo, hi = bootstrap_mean_ci(a - b)
        lines += ["", f"warp minus latent, calibrated, PSNR@16: {mean:+.2f} dB "
                      f"[{lo:+.2f}, {hi:+.2f}] (paired 95% bootstrap)"]
    if "warp" in models:
        p = models["warp"]["paired"]
        parts = []
        for other in ("zeroed", "mislabelled", "other_cell", "no_calibration", "copy_last"):
            q = p.get(other, {}).get("retrieval/all_joints/8")
            if q:
                parts.append(f"{other} {q['mean_diff']:+.2f} [{q['ci95_low']:+.2f}, "
                             f"{q['ci95_high']:+.2f}]")
        if parts:
            lines.append(f"retrieval@8, calibrated minus: {'; '.join(parts)}")
    return lines + [""]


def compact_table(r: dict) -> list[str]:
    """One row per split: the warp model, the latent model and copy-last side by side."""
    lines = ["| split (cells) | PSNR@16 warp / latent / copy-last | SSIM@16 | motion PSNR@16 "
             "| retrieval@8 (blurred truth) | EE px@16 (reader on truth) | warp - latent PSNR@16 |",
             "|---|---|---|---|---|---|---|"]
    for name in [n for n in ORDER if n in r["splits"]]:
        s = r["splits"][name]
        w = s["models"]["warp"]["summary"]
        lat = s["models"]["latent"]["summary"]["calibrated"]
        c, cl = w["calibrated"], w["copy_last"]

        def trio(k: str, fmt: str = "{:.2f}", rows: tuple = (c, lat, cl)) -> str:
            return " / ".join(fmt.format(x[k][-1]) for x in rows)

        a = np.array([x[-1] for x in s["models"]["warp"]["per_cell"]["calibrated"]["psnr"]])
        b = np.array([x[-1] for x in s["models"]["latent"]["per_cell"]["calibrated"]["psnr"]])
        mean, lo, hi = bootstrap_mean_ci(a - b)
        ret = " / ".join(f"{x['retrieval/all_joints/8']:.2f}" for x in (c, lat, cl))
        ee = " / ".join(f"{x['ee_error_px']:.1f}" for x in (c, lat, cl))
        lines.append(f"| {name} ({s['cells']}) | {trio('psnr')} | {trio('ssim', '{:.3f}')} | "
                     f"{trio('motion_psnr')} | {ret} ({s['blurred_truth_retrieval']['all_joints/8']:.2f}) "
                     f"| {ee} ({s['ee_reader_error_on_truth_px']:.1f}) | {mean:+.2f} [{lo:+.2f}, {hi:+.2f}] |")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Print the tables; optionally write the merged summary (means, targets) as JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="+", help="eval_frames.json files")
    ap.add_argument("--json", help="write the merged summary (no per-cell rows) here")
    ap.add_argument("--compact", action="store_true",
                    help="only the one-row-per-split table (warp, latent, copy-last)")
    args = ap.parse_args(argv)
    r = merge(args.results)
    if args.compact:
        print("\n".join(compact_table(r)))
        return 0
    for name in [n for n in ORDER if n in r["splits"]]:
        print("\n".join(split_table(name, r["splits"][name])))
    print("targets:")
    for label, per in r["targets"].items():
        for name in [n for n in ORDER if n in per]:
            for k, v in per[name].items():
                print(f"- {label} {name} {k}: {json.dumps(v)}")
    if args.json:
        summ = {"splits": {n: {k: v for k, v in s.items() if k not in ("models", "cell_ids")}
                           | {"models": {lab: {"summary": m["summary"], "paired": m["paired"]}
                                         for lab, m in s["models"].items()}}
                           for n, s in r["splits"].items()},
                "targets": r["targets"]}
        Path(args.json).write_text(json.dumps(summ, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
