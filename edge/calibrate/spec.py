"""Robot specs: what the sweep planner needs to know about a robot unit on a cell.

A spec is a YAML or JSON file (examples in ``samples/robots/``)::

    robot: panda              # robot model name
    frame_rate_hz: 10         # the model's frame rate (one plan knot per frame)
    sweep_min: 0.3            # smallest sweep magnitude, rad|m (the model's training range)
    dofs:                     # controller channel order and sign convention
      - {name: joint1, unit: rad, lower: -2.8973, upper: 2.8973, home: 0.0, sweep_max: 0.5}
      ...

``lower``/``upper`` are joint limits and ``home`` the pose the sweep starts and ends at
(rad, or m for ``unit: m``); ``sweep_max`` is the largest safe sweep magnitude of that DoF.
Unknown or missing keys are errors naming the file and the key path.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge.calibrate.errors import PlanError

__all__ = ["DofSpec", "RobotSpec", "load_robot_spec", "robot_spec_from_dict",
           "robot_spec_to_dict"]

_TOP_KEYS = {"robot", "frame_rate_hz", "sweep_min", "dofs", "segment_frames"}
_DOF_KEYS = {"name", "unit", "lower", "upper", "home", "sweep_max"}
#: Limit margin kept clear by every sweep, rad|m.
LIMIT_MARGIN = 0.02


@dataclass(frozen=True)
class DofSpec:
    """One controllable DoF in controller order and sign (values in rad, or m)."""

    name: str
    unit: str
    lower: float
    upper: float
    home: float
    sweep_max: float


@dataclass(frozen=True)
class RobotSpec:
    """A robot unit as the planner sees it.

    Attributes:
        robot: robot model name.
        frame_rate_hz: the model's frame rate, Hz.
        sweep_min: smallest sweep magnitude, rad|m.
        segment_frames: frames per DoF segment (8: out 3, pause 1, back 3, pause 1).
        dofs: one :class:`DofSpec` per controller channel.
    """

    robot: str
    frame_rate_hz: float
    sweep_min: float
    dofs: tuple[DofSpec, ...]
    segment_frames: int = 8

    @property
    def dof_names(self) -> tuple[str, ...]:
        """Channel names in controller order."""
        return tuple(d.name for d in self.dofs)

    @property
    def num_dof(self) -> int:
        """Number of controllable DoFs."""
        return len(self.dofs)

    @property
    def home_rad(self) -> tuple[float, ...]:
        """Home pose per channel, rad (m for ``unit: m``)."""
        return tuple(d.home for d in self.dofs)

    @property
    def limits_rad(self) -> tuple[tuple[float, float], ...]:
        """``(lower, upper)`` per channel, rad (m for ``unit: m``)."""
        return tuple((d.lower, d.upper) for d in self.dofs)


def _num(where: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise PlanError(f"{where}: expected a finite number, found {v!r}")
    return float(v)


def robot_spec_from_dict(d: Any, where: str = "robot spec") -> RobotSpec:
    """Build and check a :class:`RobotSpec` from a parsed YAML/JSON mapping.

    Raises:
        PlanError: unknown or missing keys, bad values, duplicated DoF names, a home pose
            outside the limits, or a DoF whose limits leave no room for ``sweep_min``.
    """
    if not isinstance(d, Mapping):
        raise PlanError(f"{where}: expected a mapping, found {type(d).__name__}")
    unknown = sorted(set(d) - _TOP_KEYS)
    if unknown:
        raise PlanError(f"{where}:{unknown[0]}: unknown key; expected one of {sorted(_TOP_KEYS)}")
    for k in ("robot", "frame_rate_hz", "dofs"):
        if k not in d:
            raise PlanError(f"{where}:{k}: missing key")
    if not isinstance(d["robot"], str) or not d["robot"]:
        raise PlanError(f"{where}:robot: expected a non-empty name, found {d['robot']!r}")
    fps = _num(f"{where}:frame_rate_hz", d["frame_rate_hz"])
    sweep_min = _num(f"{where}:sweep_min", d.get("sweep_min", 0.3))
    seg = d.get("segment_frames", 8)
    if fps <= 0 or sweep_min <= 0:
        raise PlanError(f"{where}: expected frame_rate_hz > 0 and sweep_min > 0, found "
                        f"{fps} and {sweep_min}")
    if seg != 8:
        raise PlanError(f"{where}:segment_frames: expected 8 (out 3, pause 1, back 3, pause 1, "
                        f"as the model was trained), found {seg!r}")
    if not isinstance(d["dofs"], list) or not d["dofs"]:
        raise PlanError(f"{where}:dofs: expected a non-empty list, found {d['dofs']!r}")
    dofs = []
    for i, raw in enumerate(d["dofs"]):
        w = f"{where}:dofs[{i}]"
        if not isinstance(raw, Mapping):
            raise PlanError(f"{w}: expected a mapping, found {raw!r}")
        bad = sorted(set(raw) - _DOF_KEYS)
        missing = sorted(_DOF_KEYS - set(raw) - {"unit"})
        if bad or missing:
            raise PlanError(f"{w}.{(bad or missing)[0]}: {'unknown' if bad else 'missing'} key; "
                            f"expected {sorted(_DOF_KEYS)}")
        name, unit = raw["name"], raw.get("unit", "rad")
        if not isinstance(name, str) or not name or unit not in ("rad", "m"):
            raise PlanError(f"{w}: expected a non-empty name and unit 'rad' or 'm', found "
                            f"{name!r}, {unit!r}")
        lo, hi = _num(f"{w}.lower", raw["lower"]), _num(f"{w}.upper", raw["upper"])
        home, amp = _num(f"{w}.home", raw["home"]), _num(f"{w}.sweep_max", raw["sweep_max"])
        if not lo < hi or not lo <= home <= hi:
            raise PlanError(f"{w} ({name}): expected lower < upper and home within them, found "
                            f"lower={lo}, upper={hi}, home={home}")
        room = max(hi - LIMIT_MARGIN - home, home - lo - LIMIT_MARGIN)
        if amp < sweep_min or room < sweep_min:
            raise PlanError(f"{w} ({name}): expected room to sweep at least sweep_min="
                            f"{sweep_min} within the limits, found sweep_max={amp} and "
                            f"{room:.3f} of room from home")
        dofs.append(DofSpec(name, unit, lo, hi, home, amp))
    names = [x.name for x in dofs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise PlanError(f"{where}:dofs: duplicated DoF name(s) {dup}; every channel needs its "
                        f"own name")
    return RobotSpec(d["robot"], fps, sweep_min, tuple(dofs), int(seg))


def robot_spec_to_dict(spec: RobotSpec) -> dict[str, Any]:
    """The JSON/YAML form of a spec (inverse of :func:`robot_spec_from_dict`)."""
    return {"robot": spec.robot, "frame_rate_hz": spec.frame_rate_hz,
            "sweep_min": spec.sweep_min, "segment_frames": spec.segment_frames,
            "dofs": [{"name": x.name, "unit": x.unit, "lower": x.lower, "upper": x.upper,
                      "home": x.home, "sweep_max": x.sweep_max} for x in spec.dofs]}


def load_robot_spec(path: str | os.PathLike[str]) -> RobotSpec:
    """Read a robot spec from ``.yaml``/``.yml``/``.json``.

    Raises:
        PlanError: unreadable file, bad syntax, or any check of :func:`robot_spec_from_dict`.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanError(f"{path}: cannot read the robot spec: {exc.strerror}") from None
    try:
        if path.suffix.lower() == ".json":
            d = json.loads(text)
        else:
            import yaml

            d = yaml.safe_load(text)
    except ValueError as exc:  # json.JSONDecodeError and yaml.YAMLError's common base here
        raise PlanError(f"{path}: expected a YAML or JSON robot spec, found a syntax error: "
                        f"{exc}") from None
    except Exception as exc:  # yaml.YAMLError does not derive from ValueError
        raise PlanError(f"{path}: expected a YAML robot spec, found a syntax error: "
                        f"{exc}") from None
    return robot_spec_from_dict(d, str(path))
