"""When to anchor the chain at the start frame: the automatic choice of ``simulate`` and
``precheck`` (``edge.commands.common.anchor_chain``) measured on the futures.

Reads the JSON of ``scripts/chain_fit_eval.py ... --anchor`` (per cell: the chain as read,
``chain_dis``, and anchored, ``chain_dis_anchor``; their retrieval and PSNR at step 16;
the share of the arm drawn at the start that lies on the true robot mask,
``start_arm_precision``, and the same read from the calibration's background alone,
``start_arm_on_arm_estimate``, which is what the runtime sees) and prints, per threshold,
what anchoring only the cells whose estimate lies below it gives, beside never and always
anchoring; then, among the anchored chains, the cells still below the low-agreement
warning's threshold against the rest.

    python scripts/anchor_policy.py docs/eval/chain_fit/start_agreement_test_robot_0-63.json \
        [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9)


def policy_table(d: dict, thresholds=THRESHOLDS, low: float = 0.5) -> dict:
    """The figures printed, from one ``chain_fit_eval.py`` JSON ``d``.

    Raises:
        KeyError: a JSON without the anchored rows or the start agreement (run
            chain_fit_eval.py with ``--anchor``, at this version).
    """
    pc = d["per_cell"]
    r8, a8 = (np.asarray(pc["retrieval"][f"{k}/all_joints/8"], float)
              for k in ("chain_dis", "chain_dis_anchor"))
    r16, a16 = (np.asarray(pc["retrieval"][f"{k}/all_joints/16"], float)
                for k in ("chain_dis", "chain_dis_anchor"))
    cl = np.asarray(pc["psnr_at_16"]["copy_last/psnr"], float)
    p, pa = (np.asarray(pc["psnr_at_16"][f"{k}/psnr"], float) - cl
             for k in ("chain_dis", "chain_dis_anchor"))
    est = np.asarray(d["start_arm_on_arm_estimate"]["chain_dis"], float)
    est_a = np.asarray(d["start_arm_on_arm_estimate"]["chain_dis_anchor"], float)
    true = np.asarray(d["start_arm_precision"]["chain_dis"], float)

    def row(mask: np.ndarray) -> dict:
        g = np.where(mask, pa, p)
        return {"anchored": int(mask.sum()),
                "retrieval_at_8": round(float(np.where(mask, a8, r8).mean()), 4),
                "retrieval_at_16": round(float(np.where(mask, a16, r16).mean()), 4),
                "psnr16_over_copy_last_db": round(float(g.mean()), 3),
                "cells_below_copy_last": int((g < 0).sum())}

    ok = np.isfinite(est)
    rows = {"never": row(np.zeros(len(est), bool)), "always": row(np.ones(len(est), bool))}
    for th in thresholds:
        rows[f"below {th:g}"] = row(ok & (est < th))
    lo = np.isfinite(est_a) & (est_a < low)
    return {"split": d.get("split"), "cells": len(est),
            "estimate_vs_true_r": round(float(np.corrcoef(true[ok], est[ok])[0, 1]), 3),
            "policies": rows,
            "anchored_low": {"threshold": low, "cells": int(lo.sum()),
                             "psnr16_over_copy_last_db": round(float(pa[lo].mean()), 3)
                             if lo.any() else None,
                             "retrieval_at_8": round(float(a8[lo].mean()), 4)
                             if lo.any() else None,
                             "rest_psnr16_over_copy_last_db": round(float(pa[~lo].mean()), 3),
                             "rest_retrieval_at_8": round(float(a8[~lo].mean()), 4)}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json_file", type=Path, help="scripts/chain_fit_eval.py --anchor --json")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    try:
        t = policy_table(json.loads(args.json_file.read_text()))
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {args.json_file}: {exc!r}: expected the JSON of scripts/chain_fit_eval.py"
              " --anchor with start_arm_on_arm_estimate", file=sys.stderr)
        return 2
    print(f"{t['split']}, {t['cells']} cells; start agreement read from the background "
          f"against the share on the true robot mask: r = {t['estimate_vs_true_r']:.2f}")
    print("| anchored where the estimate is | cells anchored | retrieval@8 | @16 | "
          "PSNR@16 over copy-last | cells below copy-last |")
    print("|---|---|---|---|---|---|")
    for name, r in t["policies"].items():
        print(f"| {name} | {r['anchored']} | {r['retrieval_at_8']:.3f} | "
              f"{r['retrieval_at_16']:.3f} | {r['psnr16_over_copy_last_db']:+.2f} dB | "
              f"{r['cells_below_copy_last']} |")
    lo = t["anchored_low"]
    if lo["cells"]:
        print(f"anchored, still below {lo['threshold']:g}: {lo['cells']} cells, "
              f"{lo['psnr16_over_copy_last_db']:+.2f} dB over copy-last, retrieval@8 "
              f"{lo['retrieval_at_8']:.2f}; the rest {lo['rest_psnr16_over_copy_last_db']:+.2f} "
              f"dB, {lo['rest_retrieval_at_8']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(t, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
