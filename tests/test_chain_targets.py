"""scripts/chain_targets.py: the world-model targets checked on hand-made evaluations."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from chain_targets import check, figures, main  # noqa: E402


def _run(split="hand", r8=0.75, r16=0.70, blur8=0.9, blur16=0.8, dip=0.5):
    # 16 steps: copy-last flat, the prediction 3 dB above it except step 5 (``dip`` below)
    steps = 16
    cl = [20.0] * steps
    pred = [23.0] * steps
    pred[4] = 20.0 - dip
    return {"split": split, "cells": 4,
            "retrieval": {"chain_auto/all_joints/8": r8, "chain_auto/all_joints/16": r16,
                          "copy_last/all_joints/8": 0.125, "copy_last/all_joints/16": 0.125,
                          "blurred_truth/all_joints/8": blur8,
                          "blurred_truth/all_joints/16": blur16},
            "psnr_at_step": {"copy_last/psnr": cl, "chain_auto/psnr": pred,
                             "copy_last/ssim": [0.8] * steps,
                             "chain_auto/ssim": [0.85] * steps,
                             "copy_last/motion_psnr": [10.0] * steps,
                             "chain_auto/motion_psnr": [10.0 + 3.5] * steps,
                             "oracle_flow/motion_psnr": [15.0] * steps}}


def test_figures_and_verdicts_follow_the_targets():
    fig = figures(_run(), "chain_auto")
    assert fig["retrieval_at_8_over_blurred_truth"] == pytest.approx(0.75 / 0.9)
    assert fig["retrieval_at_16_over_blurred_truth"] == pytest.approx(0.70 / 0.8)
    assert fig["psnr_over_copy_last_worst_step_db"] == pytest.approx(-0.5)
    assert fig["psnr_over_copy_last_worst_step"] == 5
    assert fig["psnr_at_16_over_copy_last_db"] == pytest.approx(3.0)
    assert fig["motion_gain_share_of_oracle_at_16"] == pytest.approx(3.5 / 5.0)
    met = check(fig)
    assert met["retrieval_at_8"] is False  # 0.75 < 0.80
    assert met["retrieval_at_16"] is True
    assert met["retrieval_at_8_over_blurred_truth"] is False  # 0.83 < 0.85
    assert met["retrieval_at_16_over_blurred_truth"] is True  # 0.875
    assert met["psnr_over_copy_last_worst_step_db"] is False  # one step below copy-last
    assert met["ssim_over_copy_last_worst_step"] is True
    assert met["psnr_at_16_over_copy_last_db"] is True
    assert met["motion_psnr_at_16_over_copy_last_db"] is True
    assert met["motion_gain_share_of_oracle_at_16"] is True  # exactly 0.70: a tie passes
    # no dip: every step above copy-last
    assert check(figures(_run(dip=-3.0), "chain_auto"))["psnr_over_copy_last_worst_step_db"]


def test_held_out_gaps_against_in_distribution():
    held, ind = figures(_run(r8=0.70), "chain_auto"), figures(_run(r8=0.90), "chain_auto")
    met = check(held, ind)
    assert held["retrieval_at_8_below_in_distribution"] == pytest.approx(0.20)
    assert met["retrieval_at_8_below_in_distribution"] is False
    assert met["psnr_at_16_below_in_distribution_db"] is True  # the same PSNR
    # a held-out split above in-distribution passes
    assert check(figures(_run(r8=0.95), "chain_auto"), ind)[
        "retrieval_at_8_below_in_distribution"]


def test_a_blurred_control_that_never_retrieves_fails_the_share():
    fig = figures(_run(blur8=0.0), "chain_auto")
    assert check(fig)["retrieval_at_8_over_blurred_truth"] is False


def test_main_prints_writes_and_refuses_an_old_json(tmp_path, capsys):
    f = tmp_path / "run.json"
    f.write_text(json.dumps(_run()))
    out = tmp_path / "targets.json"
    assert main([str(f), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| retrieval_at_8 | >= 0.8 | 0.75 **not met** |" in text
    saved = json.loads(out.read_text())
    assert saved["splits"]["hand (4 cells)"]["predictions"]["chain_auto"]["met"][
        "retrieval_at_16"] is True
    old = _run()
    del old["retrieval"]["blurred_truth/all_joints/8"]
    f.write_text(json.dumps(old))
    assert main([str(f)]) == 2
    assert "blurred_truth/all_joints/8" in capsys.readouterr().err
