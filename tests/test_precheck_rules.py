"""Rules files: good ones parse; empty, malformed or unknown keys name the file and key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge.precheck.rules import KeepOutRegion, load_rules, rasterise
from edge.runtime.errors import RulesError

GOOD = """
keep_out:
  motion_threshold: 20
  max_moved_pixels: 2
  regions:
    - name: conveyor
      polygon: [[0.0, 0.0], [0.5, 0.0], [0.5, 0.5], [0.0, 0.5]]
joint_limits:
  lower: [-1.0, -1.0, -0.5]
  upper: [1.0, 1.0, 0.5]
max_step_action: [0.1, 0.1, 0.05]
goal:
  image: goal.npy
  min_ssim: 0.5
"""


def _write(tmp_path: Path, text: str) -> Path:
    np.save(tmp_path / "goal.npy", np.zeros((16, 16, 3), np.uint8))
    p = tmp_path / "rules.yaml"
    p.write_text(text, encoding="utf-8")
    return p


def test_good_rules_parse(tmp_path: Path) -> None:
    r = load_rules(_write(tmp_path, GOOD))
    assert r.keep_out.motion_threshold == 20 and r.keep_out.max_moved_pixels == 2
    assert r.keep_out.regions[0].name == "conveyor"
    assert r.joint_limits.upper == (1.0, 1.0, 0.5)
    assert r.max_step_action == (0.1, 0.1, 0.05)
    assert r.goal.image == tmp_path / "goal.npy" and r.goal.min_ssim == 0.5
    assert load_rules(_write(tmp_path, "max_step_action: 0.2\n")).max_step_action == (0.2,)


@pytest.mark.parametrize("text, match", [
    ("", "the rules file is empty"),
    ("{}", "no rules"),
    ("keep_out: [unclosed", r"not valid YAML at line 1, column 20: expected ',' or ']'"),
    ("- just\n- a list\n", "expected a mapping"),
    ("speed_limit: 3\n", r"rules.yaml:speed_limit: unknown key"),
    ("keep_out:\n  motion_threshold: 5\n  regions: []\n", r"keep_out.regions: expected a non"),
    ("keep_out:\n  regions: [{polygon: [[0,0],[1,0],[1,1]]}]\n",
     r"keep_out.motion_threshold: missing key"),
    ("keep_out:\n  motion_threshold: 300\n  regions: [{polygon: [[0,0],[1,0],[1,1]]}]\n",
     r"motion_threshold: expected a value in \[0, 255\]"),
    ("keep_out:\n  motion_threshold: 5\n  regions: [{polygon: [[0,0],[1,0]]}]\n",
     r"regions\[0\].polygon: expected at least 3"),
    ("keep_out:\n  motion_threshold: 5\n  regions: [{polygon: [[0,0],[1,0],[1,1.5]]}]\n",
     r"regions\[0\].polygon\[2\]\[1\]: expected a value in \[0, 1\]"),
    ("keep_out:\n  motion_threshold: 5\n  regions: [{shape: x, polygon: [[0,0],[1,0],[1,1]]}]\n",
     r"regions\[0\].shape: unknown key"),
    ("joint_limits:\n  lower: [0, 0]\n  upper: [1]\n", "same length"),
    ("joint_limits:\n  lower: [1]\n  upper: [0]\n", "lower <= upper"),
    ("joint_limits:\n  lower: [0]\n", r"joint_limits.upper: missing key"),
    ("max_step_action: fast\n", r"max_step_action: expected a finite number"),
    ("max_step_action: -1\n", r"max_step_action: expected a value >= 0, found -1"),
    ("keep_out:\n  motion_threshold: 5\n  max_moved_pixels: 2.7\n"
     "  regions: [{polygon: [[0,0],[1,0],[1,1]]}]\n",
     r"keep_out.max_moved_pixels: expected a whole number of pixels, found 2.7"),
    ("keep_out:\n  motion_threshold: 5\n  regions: [{polygon: [[0,0],[0.5,0.5],[1,1]]}]\n",
     r"regions\[0\].polygon: encloses no area"),
    ("goal:\n  image: nowhere.png\n  min_ssim: 0.5\n", r"goal.image: no such file"),
    ("goal:\n  image: goal.npy\n  min_ssim: 2\n", r"goal.min_ssim: expected a value in"),
])
def test_bad_rules_name_file_and_key(tmp_path: Path, text: str, match: str) -> None:
    p = _write(tmp_path, text)
    with pytest.raises(RulesError, match=match) as err:
        load_rules(p)
    assert str(p) in str(err.value)


def test_missing_rules_file(tmp_path: Path) -> None:
    with pytest.raises(RulesError, match="cannot read"):
        load_rules(tmp_path / "nope.yaml")


def test_rasterise_known_shapes() -> None:
    square = KeepOutRegion("sq", ((0.0, 0.0), (0.5, 0.0), (0.5, 0.5), (0.0, 0.5)))
    m = rasterise((square,), 8, 8)
    assert m.dtype == np.uint8 and m[:4, :4].all() and m.sum() == 16
    m2 = rasterise((square,), 16, 16)  # resolution-independent: a quarter either way
    assert m2.sum() == 64
    tri = KeepOutRegion("tri", ((0.0, 0.0), (1.0, 0.0), (0.0, 1.0)))
    t = rasterise((tri,), 4, 4)
    assert t.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]]


def test_keep_out_basis_and_robot_pixels_are_checked(tmp_path) -> None:
    from edge.precheck.rules import load_rules
    from edge.runtime.errors import RulesError

    base = ("keep_out:\n  motion_threshold: 20\n  regions:\n"
            "    - polygon: [[0, 0], [0.5, 0], [0.5, 1]]\n")
    p = tmp_path / "r.yaml"
    p.write_text(base + "  basis: robot_mask\n  max_robot_pixels: 6\n")
    ko = load_rules(p).keep_out
    assert ko is not None and (ko.basis, ko.max_robot_pixels) == ("robot_mask", 6)
    p.write_text(base)
    ko = load_rules(p).keep_out
    assert ko is not None and (ko.basis, ko.max_robot_pixels) == ("auto", 3)
    p.write_text(base + "  basis: mask\n")
    with pytest.raises(RulesError, match=r"keep_out.basis: expected one of \['auto', "
                                         r"'robot_mask', 'motion'\], found 'mask'"):
        load_rules(p)
    p.write_text(base + "  max_robot_pixels: 2.5\n")
    with pytest.raises(RulesError, match="max_robot_pixels: expected a whole number"):
        load_rules(p)
