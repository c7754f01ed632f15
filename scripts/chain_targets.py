"""The world-model targets, checked on futures evaluations of ``scripts/chain_fit_eval.py``.

One JSON per split (``chain_fit_eval.py ... --anchor --warp-model models/reference --json``,
at this version: it scores the truth blurred by 2 px, ``blurred_truth``, and the rollout
the runtime runs by default, ``chain_auto``: the chain anchored at the start where the
start agreement is below ``edge.runtime.chain.AUTO_ANCHOR_BELOW``). For each split and
each named prediction it prints, against copy-last on the same cells and futures:

- futures retrieval top-1 (all-joints) at steps 8 and 16 (targets 0.80 and 0.60), and as a
  share of the blurred-truth control's (target 0.85 at both steps);
- whole-frame PSNR and SSIM over copy-last at their worst step of 1-16 (target >= 0) and
  PSNR at step 16 (target +2 dB);
- motion-region PSNR over copy-last at step 16 (target +3 dB) and as a share of the
  oracle-warp bound's gain there (target 0.70);
- with ``--in-distribution FILE`` (the same prediction on in-distribution cells): the
  split's PSNR at step 16 and retrieval at step 8 below the in-distribution figure
  (targets: within 3 dB and 0.15; a split above it passes).

    python scripts/chain_targets.py docs/eval/chain_fit/targets_test_robot_0-63.json \
        docs/eval/chain_fit/targets_test_convention_0-63.json ... \
        [--prediction chain_auto --prediction warp] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

#: The targets: each figure of :func:`figures` and the least it may be.
TARGETS = {
    "retrieval_at_8": 0.80,
    "retrieval_at_16": 0.60,
    "retrieval_at_8_over_blurred_truth": 0.85,
    "retrieval_at_16_over_blurred_truth": 0.85,
    "psnr_over_copy_last_worst_step_db": 0.0,
    "ssim_over_copy_last_worst_step": 0.0,
    "psnr_at_16_over_copy_last_db": 2.0,
    "motion_psnr_at_16_over_copy_last_db": 3.0,
    "motion_gain_share_of_oracle_at_16": 0.70,
}
#: Held out against in-distribution: the most a split may lie below it.
IN_DISTRIBUTION_GAP = {"psnr_at_16_below_in_distribution_db": 3.0,
                       "retrieval_at_8_below_in_distribution": 0.15}


def figures(d: dict, name: str) -> dict[str, float]:
    """The target figures of prediction ``name`` in one ``chain_fit_eval.py`` JSON ``d``.

    Raises:
        KeyError: ``name``, copy-last or the blurred-truth control not in ``d`` (a JSON of
            another version or run without ``--anchor`` / ``--warp-model``), naming it.
    """
    r, ps = d["retrieval"], d["psnr_at_step"]
    for need in (f"{name}/all_joints/8", "blurred_truth/all_joints/8",
                 "copy_last/all_joints/8"):
        if need not in r:
            raise KeyError(f"{need!r} not in the JSON of split {d.get('split')!r}: run "
                           "chain_fit_eval.py --anchor --warp-model models/reference at "
                           "this version")

    def gain(k: str) -> np.ndarray:
        return np.asarray(ps[f"{name}/{k}"], float) - np.asarray(ps[f"copy_last/{k}"], float)

    out = {"retrieval_at_8": r[f"{name}/all_joints/8"],
           "retrieval_at_16": r[f"{name}/all_joints/16"],
           "blurred_truth_retrieval_at_8": r["blurred_truth/all_joints/8"],
           "blurred_truth_retrieval_at_16": r["blurred_truth/all_joints/16"]}
    for s in (8, 16):
        b = out[f"blurred_truth_retrieval_at_{s}"]
        out[f"retrieval_at_{s}_over_blurred_truth"] = (out[f"retrieval_at_{s}"] / b if b > 0
                                                       else float("nan"))
    p, q, m = gain("psnr"), gain("ssim"), gain("motion_psnr")
    out.update({"psnr_over_copy_last_worst_step_db": float(p.min()),
                "psnr_over_copy_last_worst_step": int(p.argmin()) + 1,
                "ssim_over_copy_last_worst_step": float(q.min()),
                "psnr_at_16_over_copy_last_db": float(p[-1]),
                "motion_psnr_at_16_over_copy_last_db": float(m[-1])})
    if "oracle_flow/motion_psnr" in ps:
        o = ps["oracle_flow/motion_psnr"][-1] - ps["copy_last/motion_psnr"][-1]
        out["oracle_motion_gain_at_16_db"] = float(o)
        out["motion_gain_share_of_oracle_at_16"] = float(m[-1] / o) if o > 0 else float("nan")
    return out


def check(fig: dict[str, float], in_dist: dict[str, float] | None = None
          ) -> dict[str, bool]:
    """Which targets ``fig`` (of :func:`figures`) meets; with ``in_dist`` (the same
    prediction's figures in distribution) the held-out gaps too. A NaN figure fails."""
    ok = {k: bool(fig.get(k, float("nan")) >= t) for k, t in TARGETS.items()}
    if in_dist is not None:
        fig["psnr_at_16_below_in_distribution_db"] = (
            in_dist["psnr_at_16_over_copy_last_db"] - fig["psnr_at_16_over_copy_last_db"])
        fig["retrieval_at_8_below_in_distribution"] = (in_dist["retrieval_at_8"]
                                                       - fig["retrieval_at_8"])
        for k, t in IN_DISTRIBUTION_GAP.items():
            ok[k] = bool(fig[k] <= t)
    return ok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="chain_fit_eval.py JSONs, one per split")
    p.add_argument("--prediction", action="append",
                   help="prediction to check (repeatable; default chain_auto and warp, "
                        "those the JSON has)")
    p.add_argument("--in-distribution", metavar="FILE",
                   help="the same run on in-distribution cells (the held-out gaps)")
    p.add_argument("--json", help="write the figures and verdicts here")
    args = p.parse_args(argv)
    runs = []
    for f in args.runs:
        try:
            runs.append(json.loads(Path(f).read_text()))
        except (OSError, ValueError) as e:
            p.error(f"{f}: cannot read a chain_fit_eval.py JSON ({e})")
    ind = json.loads(Path(args.in_distribution).read_text()) if args.in_distribution else None
    result: dict[str, dict] = {}
    for f, d in zip(args.runs, runs, strict=True):
        names = args.prediction or [n for n in ("chain_auto", "warp")
                                    if f"{n}/all_joints/8" in d["retrieval"]]
        split = f"{d['split']} ({d['cells']} cells)"
        result[split] = {"file": f, "predictions": {}}
        for n in names:
            try:
                fig = figures(d, n)
                ref = figures(ind, n) if ind is not None else None
            except KeyError as e:
                print(f"error: {f}: {e.args[0]}", file=sys.stderr)
                return 2
            result[split]["predictions"][n] = {"figures": fig, "met": check(fig, ref)}
    keys = list(TARGETS) + (list(IN_DISTRIBUTION_GAP) if ind is not None else [])
    for split, res in result.items():
        print(f"\n{split}: {res['file']}")
        print("| target | threshold | " + " | ".join(res["predictions"]) + " |")
        print("|---|---|" + "---|" * len(res["predictions"]))
        for k in keys:
            thr = TARGETS.get(k, IN_DISTRIBUTION_GAP.get(k))
            side = "<=" if k in IN_DISTRIBUTION_GAP else ">="
            cells = []
            for v in res["predictions"].values():
                x = v["figures"].get(k, float("nan"))
                cells.append(f"{x:.2f} {'met' if v['met'].get(k) else '**not met**'}")
            print(f"| {k} | {side} {thr:g} | " + " | ".join(cells) + " |")
        b = next(iter(res["predictions"].values()))["figures"]
        print(f"blurred-truth control retrieval @8 / @16: {b['blurred_truth_retrieval_at_8']:.2f}"
              f" / {b['blurred_truth_retrieval_at_16']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"targets": TARGETS, "splits": result},
                                              indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
