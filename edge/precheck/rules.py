"""Pre-check rules, read from a YAML file (docs/runtime.md, "Rules file").

Every key is checked; an empty or malformed file, an unknown key or a bad value raises
:class:`~edge.runtime.errors.RulesError` naming the file and the key path.

Keep-out polygons use normalised image coordinates (x right, y down, 0..1) so they survive
a change of resolution; :func:`rasterise` turns them into a pixel mask (a pixel is inside
when its centre is, even-odd rule).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge.runtime.errors import RulesError

__all__ = ["KEEP_OUT_BASES", "GoalRule", "JointLimits", "KeepOutRegion", "KeepOutRule", "Rules",
           "load_rules", "rasterise"]

RULE_ORDER = ("max_step_action", "joint_limits", "keep_out", "goal")


@dataclass(frozen=True)
class KeepOutRegion:
    """A named polygon, points ``[(x, y), ...]`` in normalised image coordinates (0..1)."""

    name: str
    polygon: tuple[tuple[float, float], ...]


#: What a keep-out verdict is decided on (``keep_out.basis``).
KEEP_OUT_BASES = ("auto", "robot_mask", "motion")


@dataclass(frozen=True)
class KeepOutRule:
    """The robot must not enter the regions.

    Attributes:
        regions: the keep-out polygons.
        motion_threshold: a pixel moved if max over channels |pred - reference| exceeds
            this (0..255 pixel-value units); the reference is the model's own zero-action
            rollout (the start frame for a model whose zero-action rollout is exact).
        max_moved_pixels: moved pixels allowed inside the regions per step (default 0).
        basis: ``robot_mask`` (the model's predicted robot mask: a pixel is robot where
            the mask is >= 0.5), ``motion`` (predicted change against the reference) or
            ``auto`` (the robot mask where the model predicts one, else motion).
        max_robot_pixels: predicted robot pixels allowed inside the regions per step
            (default 3: four robot pixels inside is entering).
    """

    regions: tuple[KeepOutRegion, ...]
    motion_threshold: int
    max_moved_pixels: int = 0
    basis: str = "auto"
    max_robot_pixels: int = 3


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


def _keys(d: Any, where: str, allowed: dict[str, bool]) -> Mapping[str, Any]:
    """Check ``d`` is a mapping with only ``allowed`` keys (value: required)."""
    if not isinstance(d, Mapping):
        raise RulesError(f"{where}: expected a mapping, found {type(d).__name__}")
    sep = "." if ":" in where else ":"  # file:key at the top level, key.sub below it
    for k in d:
        if k not in allowed:
            raise RulesError(f"{where}{sep}{k}: unknown key; expected one of {sorted(allowed)}")
    for k, required in allowed.items():
        if required and k not in d:
            raise RulesError(f"{where}{sep}{k}: missing key")
    return d


def _num(v: Any, where: str, lo: float | None = None, hi: float | None = None) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
        raise RulesError(f"{where}: expected a finite number, found {v!r}")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        want = f"in [{lo:g}, {hi:g}]" if lo is not None and hi is not None else \
            f">= {lo:g}" if lo is not None else f"<= {hi:g}"
        raise RulesError(f"{where}: expected a value {want}, found {v!r}")
    return float(v)


def _num_list(v: Any, where: str, lo: float | None = None) -> tuple[float, ...]:
    if not isinstance(v, list) or not v:
        raise RulesError(f"{where}: expected a non-empty list of numbers, found {v!r}")
    return tuple(_num(x, f"{where}[{i}]", lo=lo) for i, x in enumerate(v))


def _parse_keep_out(d: Any, w: str) -> KeepOutRule:
    d = _keys(d, w, {"regions": True, "motion_threshold": True, "max_moved_pixels": False,
                     "basis": False, "max_robot_pixels": False})
    thr = _num(d["motion_threshold"], f"{w}.motion_threshold", 0, 255)
    if thr != int(thr):
        raise RulesError(f"{w}.motion_threshold: expected an integer 0..255, found {thr}")
    allowed = _num(d.get("max_moved_pixels", 0), f"{w}.max_moved_pixels", 0)
    if allowed != int(allowed):
        raise RulesError(f"{w}.max_moved_pixels: expected a whole number of pixels, found "
                         f"{allowed:g}")
    robot = _num(d.get("max_robot_pixels", 3), f"{w}.max_robot_pixels", 0)
    if robot != int(robot):
        raise RulesError(f"{w}.max_robot_pixels: expected a whole number of pixels, found "
                         f"{robot:g}")
    basis = d.get("basis", "auto")
    if basis not in KEEP_OUT_BASES:
        raise RulesError(f"{w}.basis: expected one of {list(KEEP_OUT_BASES)}, found {basis!r}")
    regions = d["regions"]
    if not isinstance(regions, list) or not regions:
        raise RulesError(f"{w}.regions: expected a non-empty list of regions, found {regions!r}")
    out = []
    for i, r in enumerate(regions):
        rw = f"{w}.regions[{i}]"
        r = _keys(r, rw, {"name": False, "polygon": True})
        pts = r["polygon"]
        if not isinstance(pts, list) or len(pts) < 3:
            raise RulesError(f"{rw}.polygon: expected at least 3 [x, y] points, found {pts!r}")
        poly = []
        for j, p in enumerate(pts):
            if not isinstance(p, list) or len(p) != 2:
                raise RulesError(f"{rw}.polygon[{j}]: expected [x, y], found {p!r}")
            poly.append((_num(p[0], f"{rw}.polygon[{j}][0]", 0, 1),
                         _num(p[1], f"{rw}.polygon[{j}][1]", 0, 1)))
        xs, ys = np.array(poly).T
        area = 0.5 * abs(float(np.dot(xs, np.roll(ys, 1)) - np.dot(ys, np.roll(xs, 1))))
        if area < 1e-6:
            raise RulesError(f"{rw}.polygon: encloses no area (its points are on one line), so "
                             f"it could never see motion; found {pts!r}")
        out.append(KeepOutRegion(str(r.get("name", f"region-{i}")), tuple(poly)))
    return KeepOutRule(tuple(out), int(thr), int(allowed), str(basis), int(robot))


def load_rules(path: str | os.PathLike[str]) -> Rules:
    """Read and check a rules YAML file.

    Raises:
        RulesError: the file is missing, empty or not YAML, has an unknown key or a bad
            value (the message names the file and the key path).
    """
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RulesError(f"{path}: cannot read the rules file: {exc.strerror}") from None
    try:
        d = yaml.safe_load(text)
    except yaml.YAMLError as exc:  # one line: the problem and where
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RulesError(f"{path}: not valid YAML{where}: {what}") from None
    if d is None:
        raise RulesError(f"{path}: the rules file is empty; expected at least one of "
                         f"{list(RULE_ORDER)}")
    w = str(path)
    d = _keys(d, w, {k: False for k in RULE_ORDER})
    if not d:
        raise RulesError(f"{path}: no rules; expected at least one of {list(RULE_ORDER)}")
    keep = _parse_keep_out(d["keep_out"], f"{w}:keep_out") if "keep_out" in d else None
    limits = None
    if "joint_limits" in d:
        jw = f"{w}:joint_limits"
        jl = _keys(d["joint_limits"], jw, {"lower": True, "upper": True})
        lo, hi = _num_list(jl["lower"], f"{jw}.lower"), _num_list(jl["upper"], f"{jw}.upper")
        if len(lo) != len(hi):
            raise RulesError(f"{jw}: expected lower and upper of the same length, found "
                             f"{len(lo)} and {len(hi)}")
        if any(a > b for a, b in zip(lo, hi, strict=True)):
            raise RulesError(f"{jw}: expected lower <= upper for every joint")
        limits = JointLimits(lo, hi)
    bound = None
    if "max_step_action" in d:
        v = d["max_step_action"]
        bw = f"{w}:max_step_action"
        bound = (_num(v, bw, 0),) if not isinstance(v, list) else _num_list(v, bw, 0)
    goal = None
    if "goal" in d:
        gw = f"{w}:goal"
        g = _keys(d["goal"], gw, {"image": True, "min_ssim": True})
        if not isinstance(g["image"], str) or not g["image"]:
            raise RulesError(f"{gw}.image: expected a file path, found {g['image']!r}")
        img = Path(g["image"])
        img = img if img.is_absolute() else path.parent / img
        if not img.is_file():
            raise RulesError(f"{gw}.image: no such file {img}")
        goal = GoalRule(img, _num(g["min_ssim"], f"{gw}.min_ssim", -1, 1))
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
