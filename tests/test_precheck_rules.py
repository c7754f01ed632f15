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
    ("keep_out:\n  basis: motion\n  regions: [{polygon: [[0,0],[1,0],[1,1]]}]\n",
     r"keep_out.motion_threshold: missing key: basis: motion decides on predicted motion"),
    ("keep_out:\n  motion_threshold: 300\n  regions: [{polygon: [[0,0],[1,0],[1,1]]}]\n",
     r"motion_threshold: expected a value in \[0, 255\]"),
    ("keep_out:\n  motion_threshold: 5\n  regions: [{polygon: [[0,0],[1,0]]}]\n",
     r"regions\[0\].polygon: expected at least 3"),
    ("keep_out:\n  motion_threshold: 5\n  regions: [{polygon: [[0,0],[1,0],[1,40]]}]\n",
     r"regions\[0\].polygon\[2\]\[1\]: expected a fraction of the frame in \[-1, 2\].*found "
     r"40; a pixel coordinate\?"),
    ("keep_out:\n  motion_threshold: 5\n  regions: [{polygon: [[1.2,0],[1.8,0],[1.5,0.5]]}]\n",
     r"regions\[0\].polygon: lies wholly outside the frame"),
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
    # a bow-tie: its two loops cancel in the area formula (even) or leave a fold (uneven)
    ("keep_out:\n  motion_threshold: 5\n  regions: [{polygon: [[0,0],[0.5,0.5],[0.5,0],"
     "[0,0.5]]}]\n", r"regions\[0\].polygon: its edges cross \(edge 0 from point 0 to 1 and "
     r"edge 2 from point 2 to 3\)"),
    ("keep_out:\n  motion_threshold: 5\n  regions: [{polygon: [[0.1,0.1],[0.6,0.1],[0.1,0.5],"
     "[0.7,0.6]]}]\n", r"regions\[0\].polygon: its edges cross"),
    # the same key twice: the second would win silently
    ("max_step_action: 0.1\nmax_step_action: 0.01\n",
     r"not valid YAML at line 2, column 1: the key 'max_step_action' is given twice \(first "
     r"at line 1\)"),
    ('{"keep_out": {"motion_threshold": 5, "motion_threshold": 6, "regions": '
     '[{"polygon": [[0,0],[1,0],[1,1]]}]}}', r"the key 'motion_threshold' is given twice"),
    ("goal:\n  image: nowhere.png\n  min_ssim: 0.5\n", r"goal.image: no such file"),
    ("goal:\n  image: goal.npy\n  min_ssim: 2\n", r"goal.min_ssim: expected a value in"),
])
def test_bad_rules_name_file_and_key(tmp_path: Path, text: str, match: str) -> None:
    p = _write(tmp_path, text)
    with pytest.raises(RulesError, match=match) as err:
        load_rules(p)
    assert str(p) in str(err.value)


def test_a_region_drawn_past_the_frame_is_clipped_and_said(tmp_path: Path) -> None:
    """A keep-out zone drawn past the frame's edge (the right half and beyond, as a cell's
    safety zone often is) was refused ("expected a value in [0, 1]"): it is accepted, its
    mask is its part inside the frame, and the pre-check says it was clipped."""
    from edge.precheck.rules import regions_past_the_frame

    r = load_rules(_write(tmp_path, "keep_out:\n  motion_threshold: 5\n  regions: [{name: belt, "
                          "polygon: [[0.5,-0.5],[1.5,-0.5],[1.5,0.5],[0.5,0.5]]}]\n"))
    inside = KeepOutRegion("in", ((0.5, 0.0), (1.0, 0.0), (1.0, 0.5), (0.5, 0.5)))
    np.testing.assert_array_equal(rasterise(r.keep_out.regions, 64, 64),
                                  rasterise((inside,), 64, 64))
    assert rasterise(r.keep_out.regions, 64, 64).sum() == 32 * 32
    (said,) = regions_past_the_frame(r)
    assert "'belt' reaches past the frame (x from 0.5 to 1.5, y from -0.5 to 0.5" in said
    ok = load_rules(_write(tmp_path, GOOD))
    assert regions_past_the_frame(ok) == [] == regions_past_the_frame(ok, 64, 64)
    # a sliver inside the frame (0.005 of its width) covers no pixel centre at 64 px: said
    strip = load_rules(_write(tmp_path, "keep_out:\n  regions: [{name: edge, polygon: "
                              "[[-0.5,0.2],[0.005,0.2],[0.005,0.8],[-0.5,0.8]]}]\n"))
    (said,) = regions_past_the_frame(strip, 64, 64)
    assert "'edge' covers no pixel of the 64x64 frame" in said
    assert "reaches past the frame" in regions_past_the_frame(strip)[0]  # no size given


def test_area_in_frame_clips_to_the_unit_square() -> None:
    from edge.precheck.rules import _area_in_frame

    assert _area_in_frame(((0.5, -0.5), (1.5, -0.5), (1.5, 0.5), (0.5, 0.5))) == \
        pytest.approx(0.25)
    assert _area_in_frame(((-1, -1), (2, -1), (2, 2), (-1, 2))) == pytest.approx(1.0)
    assert _area_in_frame(((0.2, 0.2), (0.4, 0.2), (0.4, 0.4))) == pytest.approx(0.02)
    assert _area_in_frame(((1.2, 0), (1.8, 0), (1.5, 0.5))) == 0.0
    # a concave "U" reaching past the top edge: the part inside the frame
    u = ((0, -0.5), (1, -0.5), (1, 0.5), (0.75, 0.5), (0.75, 0), (0.25, 0), (0.25, 0.5),
         (0, 0.5))
    assert _area_in_frame(u) == pytest.approx(0.125 + 0.125)  # its two legs


def test_concave_polygon_and_merge_keys_are_accepted(tmp_path: Path) -> None:
    r = load_rules(_write(tmp_path, "keep_out:\n  motion_threshold: 5\n  regions: [{polygon: "
                          "[[0,0],[1,0],[0.5,0.5],[1,1],[0,1]]}]\n"))
    assert len(r.keep_out.regions[0].polygon) == 5
    # the ring closed by repeating its first point, and a point listed twice: no edge added
    for ring in ("[[0.25,0],[0.6,0],[0.6,0.6],[0.25,0.6],[0.25,0]]",
                 "[[0,0],[1,0],[1,0],[1,1],[0,1]]"):
        r = load_rules(_write(tmp_path, "keep_out:\n  motion_threshold: 5\n  regions: "
                              f"[{{polygon: {ring}}}]\n"))
        assert len(r.keep_out.regions[0].polygon) == 4
    # a YAML anchor merged into a mapping is not a key given twice
    r = load_rules(_write(tmp_path, "joint_limits:\n  <<: {lower: [0], upper: [2]}\n"
                          "  upper: [1]\n"))
    assert r.joint_limits.lower == (0.0,) and r.joint_limits.upper == (1.0,)


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


def test_keep_out_margin_grows_the_counted_region(tmp_path) -> None:
    from edge.precheck.rules import DEFAULT_MARGIN_PX, KeepOutRule, keep_out_mask

    square = KeepOutRegion("sq", ((0.25, 0.25), (0.5, 0.25), (0.5, 0.5), (0.25, 0.5)))
    rule = KeepOutRule((square,), 20, margin_px=0.0)
    exact = keep_out_mask(rule, 16, 16)
    assert exact.tolist() == rasterise((square,), 16, 16).tolist()  # rows/cols 4..7
    one = keep_out_mask(KeepOutRule((square,), 20, margin_px=1.0), 16, 16)
    # one pixel all round, not the diagonal corners (sqrt 2 > 1)
    assert one.dtype == np.uint8 and one.sum() == 16 + 4 * 4
    assert one[3, 4] and one[8, 7] and not one[3, 3] and not one[8, 8]
    corners = keep_out_mask(KeepOutRule((square,), 20, margin_px=1.5), 16, 16)
    assert corners.sum() == 36 and corners[3, 3] and corners[8, 8] and not corners[2, 4]
    # the default is what a file without the key gets
    p = tmp_path / "r.yaml"
    p.write_text("keep_out:\n  motion_threshold: 20\n  regions:\n"
                 "    - polygon: [[0, 0], [0.5, 0], [0.5, 1]]\n")
    ko = load_rules(p).keep_out
    assert ko is not None and ko.margin_px == DEFAULT_MARGIN_PX
    p.write_text(p.read_text() + "  margin_px: 2.5\n")
    ko = load_rules(p).keep_out
    assert ko is not None and ko.margin_px == 2.5
    p.write_text(p.read_text().replace("2.5", "-1"))
    with pytest.raises(RulesError, match=r"r.yaml:keep_out.margin_px: expected a value in "
                                         r"\[0, 32\], found -1"):
        load_rules(p)


def test_keep_out_margin_decides_the_verdict() -> None:
    """A predicted arm one pixel outside the region passes with no margin and is refused
    with a margin of 1 px; the counts are those of the grown region."""
    from edge.precheck.evaluate import evaluate
    from edge.precheck.rules import KeepOutRule, Rules

    square = KeepOutRegion("sq", ((0.25, 0.25), (0.5, 0.25), (0.5, 0.5), (0.25, 0.5)))
    start = np.zeros((16, 16, 3), np.uint8)
    masks = np.zeros((1, 2, 16, 16), np.float32)
    masks[0, 1, 3, 2:10] = 1.0  # a row of 8 px just above the region (rows 4..7)
    acts = np.zeros((1, 2, 3), np.float32)
    frames = np.zeros((1, 2, 16, 16, 3), np.uint8)
    verdicts = []
    for margin in (0.0, 1.0):
        rules = Rules(Path("r.yaml"), keep_out=KeepOutRule((square,), 20, basis="robot_mask",
                                                           margin_px=margin))
        res = evaluate(rules, start, None, acts, frames, robot_masks=masks)
        verdicts.append((res.verdicts[0].passed, res.verdicts[0].scores["keepout_robot_max"]))
        assert res.keepout_margin_px == margin
    assert verdicts == [(True, 0), (False, 4)]
    assert "4 px of the predicted robot inside the keep-out regions grown by 1 px " \
        "(allowed 3) at step 1" in res.verdicts[0].detail


def test_motion_threshold_is_needed_only_where_motion_decides(tmp_path) -> None:
    """A keep-out on the robot mask (the chain's, or a model's) needs no motion_threshold:
    a rules file without it was refused ('missing key') even with basis: robot_mask. Where
    motion decides (basis: motion, or auto on a model without a robot mask) it is still
    required, by name."""
    from edge.precheck.evaluate import evaluate
    from edge.runtime.errors import RuntimeInputError

    p = tmp_path / "r.yaml"
    p.write_text("keep_out:\n  regions:\n    - polygon: [[0.25, 0.25], [0.5, 0.25], "
                 "[0.5, 0.5], [0.25, 0.5]]\n")
    rules = load_rules(p)
    assert rules.keep_out is not None and rules.keep_out.motion_threshold is None
    start = np.zeros((16, 16, 3), np.uint8)
    masks = np.zeros((1, 2, 16, 16), np.float32)
    masks[0, 1, 4:8, 4:8] = 1.0  # 16 px of arm inside the region at step 1
    frames = np.zeros((1, 2, 16, 16, 3), np.uint8)
    acts = np.zeros((1, 2, 3), np.float32)
    res = evaluate(rules, start, None, acts, frames, robot_masks=masks)
    assert not res.verdicts[0].passed and res.verdicts[0].scores["keepout_robot_max"] == 16
    with pytest.raises(RuntimeInputError, match=r"r.yaml:keep_out.motion_threshold: missing "
                                                r"key: this model predicts no robot mask"):
        evaluate(rules, start, None, acts, frames)
