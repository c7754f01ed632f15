"""Pre-check rules, read from a YAML file (docs/runtime.md, "Rules file").

Every key is checked by the strict config reader (:mod:`edge.config_reader`); an empty or
malformed file, an unknown or missing key, a value of the wrong type or a bad value raises
:class:`~edge.runtime.errors.RulesError` naming the file and the key path
(``rules.yaml:keep_out.regions[0].polygon: ...``).

Keep-out polygons use normalised image coordinates (x right, y down, 0..1) so they survive
a change of resolution; :func:`rasterise` turns them into a pixel mask (a pixel is inside
when its centre is, even-odd rule).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import numpy as np

from edge.config_reader import Where, load_yaml, optional_key, read_config
from edge.fileio import not_utf8
from edge.runtime.errors import RulesError

__all__ = ["DEFAULT_MARGIN_PX", "KEEP_OUT_BASES", "MAX_MARGIN_PX", "GoalRule", "JointLimits",
           "KeepOutBasis", "KeepOutRegion", "KeepOutRule", "Rules", "keep_out_mask",
           "load_rules", "rasterise", "regions_past_the_frame"]

RULE_ORDER = ("max_step_action", "joint_limits", "keep_out", "goal")


@dataclass(frozen=True)
class KeepOutRegion:
    """A named polygon, points ``[(x, y), ...]`` in normalised image coordinates (0..1
    across the frame; from -1 to 2 for a region that reaches past an edge, which is clipped
    to the frame: :func:`rasterise` counts pixel centres only)."""

    name: str
    polygon: tuple[tuple[float, float], ...]


#: What a keep-out verdict is decided on (``keep_out.basis``).
KeepOutBasis = Literal["auto", "robot_mask", "motion"]
KEEP_OUT_BASES = get_args(KeepOutBasis)

#: ``keep_out.margin_px`` when the file leaves it out: the regions grow by this many pixels
#: (docs/runtime.md, "Keep-out margin": chosen on in-distribution cells of the pre-check
#: benchmark, then measured on the held-out ones).
DEFAULT_MARGIN_PX = 0.0
#: The largest margin accepted (pixels of the predicted frames).
MAX_MARGIN_PX = 32.0
#: How far a keep-out polygon's points may lie outside the frame, in frame widths /
#: heights: a region may be drawn past an edge (the part outside is not seen, so not
#: checked); beyond this a coordinate is taken for a mistake (pixels instead of fractions).
POLYGON_RANGE = (-1.0, 2.0)


@dataclass(frozen=True)
class KeepOutRule:
    """The robot must not enter the regions.

    Attributes:
        regions: the keep-out polygons.
        motion_threshold: a pixel moved if max over channels |pred - reference| exceeds
            this (0..255 pixel-value units); the reference is the model's own zero-action
            rollout (the start frame for a model whose zero-action rollout is exact). None
            (left out): only a keep-out decided on the robot mask can be judged; one that
            falls to motion is refused naming this key.
        max_moved_pixels: moved pixels allowed inside the regions per step (default 0).
        basis: ``robot_mask`` (the model's predicted robot mask: a pixel is robot where
            the mask is >= 0.5), ``motion`` (predicted change against the reference) or
            ``auto`` (the robot mask where the model predicts one, else motion).
        max_robot_pixels: predicted robot pixels allowed inside the regions per step
            (default 3: four robot pixels inside is entering).
        margin_px: the regions are grown by this distance (pixels of the predicted
            frames, Euclidean, between pixel centres) before pixels are counted in them:
            room for the model's error in where it puts the arm (:func:`keep_out_mask`).
    """

    regions: tuple[KeepOutRegion, ...]
    motion_threshold: int | None
    max_moved_pixels: int = 0
    basis: KeepOutBasis = "auto"
    max_robot_pixels: int = 3
    margin_px: float = DEFAULT_MARGIN_PX


@dataclass(frozen=True)
class JointLimits:
    """Joint positions (start state plus summed actions) must stay in [lower, upper] (rad|m)."""

    lower: tuple[float, ...]
    upper: tuple[float, ...]


@dataclass(frozen=True)
class GoalRule:
    """The last predicted frame must reach SSIM >= ``min_ssim`` with the goal image.

    Attributes:
        image: path of the goal image (PNG/JPEG, or .npy uint8 [H, W, 3]).
        min_ssim: threshold in [-1, 1].
    """

    image: Path
    min_ssim: float


@dataclass(frozen=True)
class Rules:
    """All rules of one file; absent rules are None. ``path`` is the file they came from."""

    path: Path
    keep_out: KeepOutRule | None = None
    joint_limits: JointLimits | None = None
    max_step_action: tuple[float, ...] | None = None
    goal: GoalRule | None = None


@dataclass(frozen=True)
class _RegionFile:
    """``keep_out.regions[i]`` as written."""

    polygon: tuple[tuple[float, float], ...]
    name: str | None = optional_key()


@dataclass(frozen=True)
class _KeepOutFile:
    """``keep_out`` as written: pixel counts are numbers here, whole numbers checked after."""

    regions: tuple[_RegionFile, ...]
    motion_threshold: float | None = optional_key()  # needed where motion decides
    max_moved_pixels: float = 0
    basis: KeepOutBasis = "auto"
    max_robot_pixels: float = 3
    margin_px: float = DEFAULT_MARGIN_PX


@dataclass(frozen=True)
class _GoalFile:
    image: str
    min_ssim: float


@dataclass(frozen=True)
class _RulesFile:
    """A rules file as written: every rule may be left out, none may be empty."""

    max_step_action: float | tuple[float, ...] | None = optional_key()
    joint_limits: JointLimits | None = optional_key()  # as stored; numbers checked after
    keep_out: _KeepOutFile | None = optional_key()
    goal: _GoalFile | None = optional_key()


def _num(v: float, w: Where, lo: float | None = None, hi: float | None = None) -> float:
    """``v`` (a finite number, as the reader checked) within [lo, hi], as a float."""
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        want = f"in [{lo:g}, {hi:g}]" if lo is not None and hi is not None else \
            f">= {lo:g}" if lo is not None else f"<= {hi:g}"
        w.fail(f"expected a value {want}, found {v!r}")
    return float(v)


def _num_list(v: tuple[float, ...], w: Where, lo: float | None = None) -> tuple[float, ...]:
    if not v:
        w.fail("expected a non-empty list of numbers, found []")
    return tuple(_num(x, w.index(i), lo=lo) for i, x in enumerate(v))


def _fraction(v: float, w: Where) -> float:
    """A polygon coordinate: a fraction of the frame within :data:`POLYGON_RANGE`."""
    lo, hi = POLYGON_RANGE
    if not lo <= v <= hi:
        w.fail(f"expected a fraction of the frame in [{lo:g}, {hi:g}] (0..1 inside it; a "
               f"region may reach past an edge and is clipped to the frame), found {v!r}; "
               f"a pixel coordinate? divide it by the frame's width or height")
    return float(v)


def _area_in_frame(poly: tuple[tuple[float, float], ...]) -> float:
    """Area of the polygon ``poly`` (normalised points, edges not crossing) inside the unit
    square: the polygon clipped to each of the square's four edges in turn
    (Sutherland-Hodgman, exact for a convex clip window)."""
    pts = [tuple(map(float, p)) for p in poly]
    for axis, bound, keep_below in ((0, 0.0, False), (0, 1.0, True), (1, 0.0, False),
                                    (1, 1.0, True)):
        def inside(p, axis=axis, bound=bound, keep_below=keep_below) -> bool:
            return p[axis] <= bound if keep_below else p[axis] >= bound

        out: list[tuple[float, float]] = []
        for i, cur in enumerate(pts):
            prev = pts[i - 1]
            if inside(cur) != inside(prev):  # the edge crosses the bound: add the crossing
                t = (bound - prev[axis]) / (cur[axis] - prev[axis])
                out.append((prev[0] + t * (cur[0] - prev[0]), prev[1] + t * (cur[1] - prev[1])))
            if inside(cur):
                out.append(cur)
        pts = out
        if not pts:
            return 0.0
    xs, ys = np.array(pts).T
    return 0.5 * abs(float(np.dot(xs, np.roll(ys, 1)) - np.dot(ys, np.roll(xs, 1))))


def regions_past_the_frame(rules: Rules, height: int | None = None,
                           width: int | None = None) -> list[str]:
    """One warning per keep-out region drawn past the frame's edge (``'NAME' reaches past
    the frame (x from A to B, y from C to D): only its part inside the frame is checked``)
    and, given the frame's ``height`` and ``width`` (pixels), per region that covers no
    pixel centre of it (a sliver inside the frame, or one too small for the resolution: it
    can never be entered); ``[]`` where every region lies within 0..1 and covers a pixel."""
    if rules.keep_out is None:
        return []
    out = []
    for r in rules.keep_out.regions:
        xs, ys = np.array(r.polygon, np.float64).T
        if height and width and not rasterise((r,), height, width).any():
            out.append(f"{rules.path}: keep_out region {r.name!r} covers no pixel of the "
                       f"{width}x{height} frame the rollout predicts (a pixel counts when "
                       "its centre is inside): it can never be entered; draw it larger")
        elif xs.min() < 0 or ys.min() < 0 or xs.max() > 1 or ys.max() > 1:
            out.append(f"{rules.path}: keep_out region {r.name!r} reaches past the frame "
                       f"(x from {xs.min():g} to {xs.max():g}, y from {ys.min():g} to "
                       f"{ys.max():g}; the frame is 0..1): only its part inside the frame "
                       "is checked (the camera sees nothing beyond)")
    return out


def _whole(v: float, w: Where, what: str) -> int:
    if v != int(v):
        w.fail(f"expected {what}, found {v:g}")
    return int(v)


def _crossing_edges(poly: tuple[tuple[float, float], ...]) -> tuple[int, int] | None:
    """The first two edges of the closed polygon ``poly`` (edge i from point i to i + 1)
    that cross or touch other than at the corner they share, or None: a bow-tie's loops
    cancel in the area and its inside is not what was drawn."""
    pts = np.asarray(poly, np.float64)
    n = len(pts)

    def orient(a, b, c) -> float:
        return float((b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0]))

    def on(a, b, c) -> bool:  # c on segment ab, given the three are on one line
        return (min(a[0], b[0]) - 1e-12 <= c[0] <= max(a[0], b[0]) + 1e-12
                and min(a[1], b[1]) - 1e-12 <= c[1] <= max(a[1], b[1]) + 1e-12)

    for i in range(n):
        p1, p2 = pts[i], pts[(i + 1) % n]
        for j in range(i + 1, n):
            if j == i + 1 or (i == 0 and j == n - 1):
                continue  # neighbours share a corner
            q1, q2 = pts[j], pts[(j + 1) % n]
            d1, d2 = orient(q1, q2, p1), orient(q1, q2, p2)
            d3, d4 = orient(p1, p2, q1), orient(p1, p2, q2)
            if ((d1 > 0) != (d2 > 0) and d1 != 0 and d2 != 0
                    and (d3 > 0) != (d4 > 0) and d3 != 0 and d4 != 0):
                return i, j
            if ((d1 == 0 and on(q1, q2, p1)) or (d2 == 0 and on(q1, q2, p2))
                    or (d3 == 0 and on(p1, p2, q1)) or (d4 == 0 and on(p1, p2, q2))):
                return i, j
    return None


def _parse_keep_out(k: _KeepOutFile, w: Where) -> KeepOutRule:
    thr: float | None = None
    if k.motion_threshold is None:
        if k.basis == "motion":
            w.key("motion_threshold").fail("missing key: basis: motion decides on predicted "
                                           "motion, which needs motion_threshold (0..255, "
                                           "e.g. 20)")
    else:
        thr = _num(k.motion_threshold, w.key("motion_threshold"), 0, 255)
        if thr != int(thr):
            w.key("motion_threshold").fail(f"expected an integer 0..255, found {thr}")
    allowed = _whole(_num(k.max_moved_pixels, w.key("max_moved_pixels"), 0),
                     w.key("max_moved_pixels"), "a whole number of pixels")
    robot = _whole(_num(k.max_robot_pixels, w.key("max_robot_pixels"), 0),
                   w.key("max_robot_pixels"), "a whole number of pixels")
    margin = _num(k.margin_px, w.key("margin_px"), 0, MAX_MARGIN_PX)
    if not k.regions:
        w.key("regions").fail("expected a non-empty list of regions, found []")
    out = []
    for i, r in enumerate(k.regions):
        rw = w.key("regions").index(i)
        pts = r.polygon
        if len(pts) < 3:
            rw.key("polygon").fail(f"expected at least 3 [x, y] points, found "
                                   f"{[list(p) for p in pts]!r}")
        poly = tuple((_fraction(x, rw.key("polygon").index(j).index(0)),
                      _fraction(y, rw.key("polygon").index(j).index(1)))
                     for j, (x, y) in enumerate(pts))
        # a point repeated at once (the ring closed by repeating the first point, as GeoJSON
        # writes it) adds no edge: dropped before the edges are tested
        poly = tuple(p for j, p in enumerate(poly) if p != poly[j - 1]) or poly[:1]
        crossing = _crossing_edges(poly) if len(poly) >= 3 else None
        if crossing is not None:
            a, b = crossing
            rw.key("polygon").fail(
                f"its edges cross (edge {a} from point {a} to {a + 1} and edge {b} from "
                f"point {b} to {(b + 1) % len(poly)}): list the corners in order around the "
                f"region, so that it does not fold over itself; found "
                f"{[list(p) for p in pts]!r}")
        xs, ys = np.array(poly).T
        area = 0.5 * abs(float(np.dot(xs, np.roll(ys, 1)) - np.dot(ys, np.roll(xs, 1))))
        if area < 1e-6:
            rw.key("polygon").fail(f"encloses no area (its points are on one line), so it "
                                   f"could never see motion; found {[list(p) for p in pts]!r}")
        if _area_in_frame(poly) < 1e-6:
            rw.key("polygon").fail(f"lies wholly outside the frame (0..1 across its width and "
                                   f"height), so no pixel of it is ever checked; found "
                                   f"{[list(p) for p in pts]!r}")
        out.append(KeepOutRegion(r.name if r.name is not None else f"region-{i}", poly))
    return KeepOutRule(tuple(out), None if thr is None else int(thr), allowed, k.basis,
                       robot, margin)


def load_rules(path: str | os.PathLike[str]) -> Rules:
    """Read and check a rules YAML file.

    Raises:
        RulesError: the file is missing, empty or not YAML, has an unknown or missing key, a
            value of the wrong type or a bad value (the message names the file and the key
            path).
    """
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RulesError(f"{path}: cannot read the rules file: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise RulesError(not_utf8(path, exc, "a rules YAML file")) from None
    try:
        d = load_yaml(text)
    except yaml.YAMLError as exc:  # one line: the problem and where
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RulesError(f"{path}: not valid YAML{where}: {what}") from None
    if d is None:
        raise RulesError(f"{path}: the rules file is empty; expected at least one of "
                         f"{list(RULE_ORDER)}")
    w = Where(path, error=RulesError)
    f = read_config(_RulesFile, d, w)
    if all(getattr(f, k) is None for k in RULE_ORDER):
        raise RulesError(f"{path}: no rules; expected at least one of {list(RULE_ORDER)}")
    keep = _parse_keep_out(f.keep_out, w.key("keep_out")) if f.keep_out is not None else None
    limits = None
    if f.joint_limits is not None:
        jw = w.key("joint_limits")
        lo = _num_list(f.joint_limits.lower, jw.key("lower"))
        hi = _num_list(f.joint_limits.upper, jw.key("upper"))
        if len(lo) != len(hi):
            jw.fail(f"expected lower and upper of the same length, found {len(lo)} and "
                    f"{len(hi)}")
        if any(a > b for a, b in zip(lo, hi, strict=True)):
            jw.fail("expected lower <= upper for every joint")
        limits = JointLimits(lo, hi)
    bound = None
    if f.max_step_action is not None:
        v, bw = f.max_step_action, w.key("max_step_action")
        bound = _num_list(v, bw, 0) if isinstance(v, tuple) else (_num(v, bw, 0),)
    goal = None
    if f.goal is not None:
        gw = w.key("goal")
        if not f.goal.image:
            gw.key("image").fail("expected a file path, found ''")
        img = Path(f.goal.image)
        img = img if img.is_absolute() else path.parent / img
        if not img.is_file():
            gw.key("image").fail(f"no such file {img}")
        goal = GoalRule(img, _num(f.goal.min_ssim, gw.key("min_ssim"), -1, 1))
    return Rules(path=path, keep_out=keep, joint_limits=limits, max_step_action=bound, goal=goal)


def rasterise(regions: tuple[KeepOutRegion, ...], height: int, width: int) -> np.ndarray:
    """Keep-out mask uint8 ``[height, width]`` (1 inside any region) from normalised polygons.

    A pixel is inside when its centre ``((j + 0.5) / W, (i + 0.5) / H)`` is inside the
    polygon (even-odd rule).
    """
    ys = (np.arange(height) + 0.5) / height
    xs = (np.arange(width) + 0.5) / width
    px, py = np.meshgrid(xs, ys)  # (H, W)
    mask = np.zeros((height, width), bool)
    for region in regions:
        pts = np.asarray(region.polygon, np.float64)
        inside = np.zeros((height, width), bool)
        for (x0, y0), (x1, y1) in zip(pts, np.roll(pts, -1, axis=0), strict=True):
            crosses = (y0 > py) != (y1 > py)
            with np.errstate(divide="ignore", invalid="ignore"):
                x_at = x0 + (py - y0) * (x1 - x0) / (y1 - y0)
            inside ^= crosses & (px < x_at)
        mask |= inside
    return mask.astype(np.uint8)


def keep_out_mask(rule: KeepOutRule, height: int, width: int) -> np.ndarray:
    """The pixels a keep-out verdict counts in: uint8 ``[height, width]``, 1 where a pixel's
    centre lies inside a region (:func:`rasterise`) or within ``rule.margin_px`` pixels
    (Euclidean distance between pixel centres) of a pixel that does.

    The margin is what a robot cell's safety zones are drawn with: a zone is entered when
    the arm comes within a clearance of it. Here it also covers the world model's own error
    in where it puts the arm's outline (docs/runtime.md, "Keep-out margin").
    """
    import cv2

    inside = rasterise(rule.regions, height, width)
    if rule.margin_px <= 0 or not inside.any():
        return inside
    # distance of every pixel to the nearest inside pixel (0 there): exact Euclidean
    dist = cv2.distanceTransform((1 - inside).astype(np.uint8), cv2.DIST_L2,
                                 cv2.DIST_MASK_PRECISE)
    return (dist <= rule.margin_px + 1e-6).astype(np.uint8)

