"""The one-change timing variants (``ONE_CHANGE_VARIANTS``) take ``30Hz-2s-all`` apart: each
is the same 30 Hz recording with exactly one of its changes, and each changes the sweeps as
its name says."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from export.evaluation.calibration_timing import (
    DEFAULT_MATRIX,
    ONE_CHANGE_VARIANTS,
    _variant_sweeps,
)

NAMES = [f"j{i}" for i in range(6)]
AMPS = [0.3, -0.35, 0.4, 0.45, -0.5, 0.3]


def _cell():
    segs = [SimpleNamespace(dof=n, amplitude=a) for n, a in zip(NAMES, AMPS, strict=True)]
    cal = SimpleNamespace(metadata=SimpleNamespace(dof_names=NAMES, segments=segs),
                          joint_positions=np.zeros((1, len(NAMES))))
    conv = SimpleNamespace(to_canonical=lambda q: q)  # controller order is canonical here
    limits = np.tile([-3.0, 3.0], (len(NAMES), 1))
    return cal, conv, limits


def test_each_one_change_variant_is_30hz_all_with_one_change() -> None:
    full = {v.name: v for v in DEFAULT_MATRIX}["30Hz-2s-all"]
    by = {v.name.rsplit("-", 1)[1]: v for v in ONE_CHANGE_VARIANTS}
    assert sorted(by) == ["amp", "flip", "order", "plain"]
    for v in ONE_CHANGE_VARIANTS:
        assert (v.rate_hz, v.phase_s, v.pause_s) == (full.rate_hz, full.phase_s, full.pause_s)
    assert (by["plain"].amplitude, by["plain"].flip_signs, by["plain"].shuffle_order) == (
        None, False, False)
    assert by["amp"].amplitude == full.amplitude and not by["amp"].flip_signs
    assert by["flip"].flip_signs and by["flip"].amplitude is None
    assert by["order"].shuffle_order and not by["order"].flip_signs


def test_each_variant_changes_the_sweeps_as_named() -> None:
    cal, conv, limits = _cell()
    by = {v.name.rsplit("-", 1)[1]: v for v in ONE_CHANGE_VARIANTS}
    own = list(enumerate(AMPS))
    assert _variant_sweeps(cal, conv, limits, by["plain"], np.random.default_rng(1)) == own
    amp = _variant_sweeps(cal, conv, limits, by["amp"], np.random.default_rng(1))
    assert [c for c, _ in amp] == list(range(len(NAMES)))
    assert all(np.sign(a) == np.sign(o) and 0.2 <= abs(a) <= 0.8
               for (_, a), o in zip(amp, AMPS, strict=True))
    assert [abs(a) for _, a in amp] != [abs(o) for o in AMPS]
    flips = [_variant_sweeps(cal, conv, limits, by["flip"], np.random.default_rng(s))
             for s in range(8)]
    assert all([abs(a) for _, a in f] == [abs(o) for o in AMPS] for f in flips)
    assert any([a for _, a in f] != AMPS for f in flips)
    orders = [_variant_sweeps(cal, conv, limits, by["order"], np.random.default_rng(s))
              for s in range(8)]
    assert all(sorted(f) == sorted(own) for f in orders)
    assert any(f != own for f in orders)
