"""scripts/precheck_twin_union.py: which twins count as plausible, and the rates."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import precheck_twin_union as ptu  # noqa: E402


def test_plausible_twins_are_the_last_rounds_near_ties():
    info = {"twins": {"refined": [
        {"kind": "alone", "channel": 5, "round": 0, "gain": 0.06},    # kept in round 0
        {"kind": "alone", "channel": 1, "round": 1, "gain": -0.001},  # a near tie: plausible
        {"kind": "distal", "channel": 1, "round": 1, "gain": -0.02},  # at the bound: plausible
        {"kind": "alone", "channel": 3, "round": 1, "gain": -0.05},   # clearly worse
    ]}}
    assert ptu.plausible_twins(info, -0.02) == {("alone", 1), ("distal", 1)}
    assert ptu.plausible_twins(info, 0.0) == set()


def test_a_read_without_a_refined_twin_choice_has_no_plausible_twins():
    assert ptu.plausible_twins({}, -0.02) == set()
    assert ptu.plausible_twins({"twins": {"kept": [], "candidates_scored": 14}}, -0.02) == set()


def test_rates():
    enters = np.array([True, True, True, False, False])
    refused = np.array([True, False, True, True, False])
    assert ptu.rates(refused, enters) == (2 / 3, 0.5)
