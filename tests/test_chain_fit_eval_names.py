"""scripts/chain_fit_eval.py: the kept motion refinements' names say which motion made them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import chain_fit_eval as cfe  # noqa: E402


@pytest.mark.parametrize("args, want", [
    (("poses", 0, 0.5), ""),                      # the cell's motion-01 episode
    (("poses", 32, 0.5), "_poses32"),             # the names kept before amplitudes were named
    (("comp", 32, 0.5, 2), "_comp32_lat2"),
    (("poses", 32, 1.0), "_poses32_amp1rad"),
    (("plan", 16, 0.25, 3), "_plan16_amp0.25rad_lat3"),
])
def test_motion_tag(args, want):
    assert cfe.motion_tag(*args) == want


def test_another_amplitude_never_shares_the_kept_file():
    tags = {cfe.motion_tag("poses", 32, a) for a in (0.25, 0.5, 0.75, 1.0, 1.5)}
    assert len(tags) == 5
