"""Merge two 8-cell halves of each split's futures into one 16-cell table (equal cell
counts, so the means of the halves are the 16-cell means).

    python scripts/chain_eval_merge.py OUT.json

Reads ``runs/cut3/<split>.json`` (cells 0-7: the chain without the rim fill, copy-last),
``runs/warp8/<split>.json`` (cells 0-7: ``--tracks none --warp-model models/reference``)
and ``runs/half2/<split>.json`` (cells 8-15: every prediction, with SSIM), all written by
``scripts/chain_fit_eval.py`` (README, "The chain model"); prints per split and writes JSON.
"""
import json, sys
import numpy as np
splits = ["test_convention", "test_robot", "test_all", "stress"]
names = {"test_convention": "held_out_convention", "test_robot": "held_out_robot",
         "test_all": "all_held_out", "stress": "stress"}
out = {}
for s in splits:
    a = json.load(open(f"runs/cut3/{s}.json"))      # cells 0-7: chain (no rim) + copy-last
    w = json.load(open(f"runs/warp8/{s}.json"))     # cells 0-7: warp + copy-last
    b = json.load(open(f"runs/half2/{s}.json"))     # cells 8-15: all
    def ret(d, k, prof, step): return d["retrieval"][f"{k}/{prof}/{step}"]
    def ps(d, k, m): return d["psnr_at_step"][f"{k}/{m}"]
    row = {}
    for label, first, second in (("chain_rim0", (a, "fit_dis_fill"), (b, "fit_dis_fill_rim0")),
                                 ("warp", (w, "warp"), (b, "warp")),
                                 ("copy_last", (a, "copy_last"), (b, "copy_last"))):
        r = {f"{p}@{st}": (ret(first[0], first[1], p, st) + ret(second[0], second[1], p, st)) / 2
             for p in ("all_joints", "two_joint") for st in (4, 8, 16)}
        for m in ("psnr", "motion_psnr"):
            r[m] = list((np.asarray(ps(first[0], first[1], m)) + np.asarray(ps(second[0], second[1], m))) / 2)
        row[label] = r
    for label, k in (("chain", "fit_dis_fill"), ("chain_rim0_8", "fit_dis_fill_rim0"), ("warp_8", "warp"), ("copy_last_8", "copy_last")):
        r = {f"{p}@{st}": ret(b, k, p, st) for p in ("all_joints", "two_joint") for st in (4, 8, 16)}
        for m in ("psnr", "motion_psnr", "ssim"):
            r[m] = ps(b, k, m)
        row[label] = r
    out[names[s]] = row
    c = row["copy_last"]
    print(f"\n{names[s]} (16 cells: 0-15)")
    for lab in ("chain_rim0", "warp", "copy_last"):
        r = row[lab]
        print(f"  {lab:12s} ret@8 {r['all_joints@8']:.2f} @16 {r['all_joints@16']:.2f} 2j@8 {r['two_joint@8']:.2f} "
              f"PSNR@16 {r['psnr'][-1]:.2f} ({r['psnr'][-1]-c['psnr'][-1]:+.2f}) worst {min(x-y for x,y in zip(r['psnr'], c['psnr'])):+.2f} "
              f"motion@16 {r['motion_psnr'][-1]:.2f} ({r['motion_psnr'][-1]-c['motion_psnr'][-1]:+.2f})")
    c8 = row["copy_last_8"]
    print(f"  cells 8-15:")
    for lab in ("chain", "chain_rim0_8", "warp_8", "copy_last_8"):
        r = row[lab]
        print(f"  {lab:12s} ret@8 {r['all_joints@8']:.2f} @16 {r['all_joints@16']:.2f} 2j@8 {r['two_joint@8']:.2f} "
              f"PSNR@16 {r['psnr'][-1]:.2f} ({r['psnr'][-1]-c8['psnr'][-1]:+.2f}) worst {min(x-y for x,y in zip(r['psnr'], c8['psnr'])):+.2f} "
              f"SSIM@16 {r['ssim'][-1]:.3f} worst {min(x-y for x,y in zip(r['ssim'], c8['ssim'])):+.3f} motion@16 {r['motion_psnr'][-1]:.2f} ({r['motion_psnr'][-1]-c8['motion_psnr'][-1]:+.2f})")
json.dump(out, open(sys.argv[1] if len(sys.argv) > 1 else "runs/merged.json", "w"), indent=1)
