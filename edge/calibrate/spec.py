"""Robot specs: what the sweep planner needs to know about a robot unit on a cell.

A spec is a YAML or JSON file (examples in ``samples/robots/``)::

    robot: panda              # robot model name
    frame_rate_hz: 10         # the model's frame rate (one plan knot per frame)
    sweep_min: 0.3            # smallest sweep of a revolute DoF, rad (the model's range)
    sweep_min_m: 0.02         # smallest sweep of a prismatic DoF (unit: m), m (optional)
    dofs:                     # controller channel order and sign convention
      - {name: joint1, unit: rad, lower: -2.8973, upper: 2.8973, home: 0.0, sweep_max: 0.5}
      - {name: slide, unit: m, lower: 0.0, upper: 0.08, home: 0.0, sweep_max: 0.06}
      ...

``lower``/``upper`` are joint limits and ``home`` the pose the sweep starts and ends at
(rad, or m for ``unit: m``); ``sweep_max`` is the largest safe sweep magnitude of that DoF
and an optional ``sweep_min`` its own smallest one (default: ``sweep_min`` for a revolute
DoF, ``sweep_min_m`` for a prismatic one: a slide's metres are not a joint's radians).
The strict config reader (:mod:`edge.config_reader`) checks the keys, the value types and
``unit`` (``rad`` or ``m``): unknown or missing keys and wrong types are errors naming the
file and the key path (``panda.yaml:dofs[2].home: expected a finite number, found '0'``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from edge.calibrate.errors import PlanError
from edge.config_reader import Where, load_yaml, no_duplicate_keys, optional_key, read_config
from edge.fileio import not_utf8

__all__ = ["DofSpec", "RobotSpec", "load_robot_spec", "robot_spec_from_dict",
           "robot_spec_to_dict"]

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
    sweep_min: float | None = None  # as written; None: the spec's for the DoF's unit


@dataclass(frozen=True)
class RobotSpec:
    """A robot unit as the planner sees it.

    Attributes:
        robot: robot model name.
        frame_rate_hz: the model's frame rate, Hz.
        sweep_min: smallest sweep magnitude of a revolute DoF, rad.
        segment_frames: frames per DoF segment (8: out 3, pause 1, back 3, pause 1).
        dofs: one :class:`DofSpec` per controller channel.
        sweep_min_m: smallest sweep magnitude of a prismatic DoF, m.
    """

    robot: str
    frame_rate_hz: float
    sweep_min: float
    dofs: tuple[DofSpec, ...]
    segment_frames: int = 8
    sweep_min_m: float = 0.02

    def dof_sweep_min(self, dof: DofSpec) -> float:
        """The smallest sweep of ``dof``: its own ``sweep_min``, else the spec's for its
        unit (``sweep_min`` rad, ``sweep_min_m`` m)."""
        if dof.sweep_min is not None:
            return dof.sweep_min
        return self.sweep_min_m if dof.unit == "m" else self.sweep_min

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


@dataclass(frozen=True)
class _DofFile:
    """One ``dofs`` entry as written."""

    name: str
    lower: float
    upper: float
    home: float
    sweep_max: float
    unit: Literal["rad", "m"] = "rad"
    sweep_min: float | None = optional_key()


@dataclass(frozen=True)
class _SpecFile:
    """A robot spec as written."""

    robot: str
    frame_rate_hz: float
    dofs: tuple[_DofFile, ...]
    sweep_min: float = 0.3
    sweep_min_m: float = 0.02
    segment_frames: int = 8


def robot_spec_from_dict(d: Any, where: str = "robot spec") -> RobotSpec:
    """Build and check a :class:`RobotSpec` from a parsed YAML/JSON mapping.

    Args:
        d: the parsed spec.
        where: the file (or a description of the source), for messages.
    Raises:
        PlanError: unknown or missing keys, values of the wrong type, a unit other than
            ``rad``/``m``, bad values, duplicated DoF names, a home pose outside the
            limits, or a DoF whose limits leave no room for ``sweep_min``.
    """
    w = Where(where, error=PlanError)
    f = read_config(_SpecFile, d, w)
    if not f.robot:
        w.key("robot").fail(f"expected a non-empty name, found {f.robot!r}")
    fps, sweep_min, sweep_min_m = float(f.frame_rate_hz), float(f.sweep_min), \
        float(f.sweep_min_m)
    if fps <= 0 or sweep_min <= 0 or sweep_min_m <= 0:
        w.fail(f"expected frame_rate_hz > 0, sweep_min > 0 and sweep_min_m > 0, found {fps}, "
               f"{sweep_min} and {sweep_min_m}")
    if f.segment_frames != 8:
        w.key("segment_frames").fail(f"expected 8 (out 3, pause 1, back 3, pause 1, as the "
                                     f"model was trained), found {f.segment_frames!r}")
    if not f.dofs:
        w.key("dofs").fail("expected a non-empty list, found []")
    dofs = []
    for i, x in enumerate(f.dofs):
        dw = w.key("dofs").index(i)
        if not x.name:
            dw.key("name").fail(f"expected a non-empty name, found {x.name!r}")
        lo, hi, home, amp = float(x.lower), float(x.upper), float(x.home), float(x.sweep_max)
        if not lo < hi or not lo <= home <= hi:
            raise PlanError(f"{dw} ({x.name}): expected lower < upper and home within them, "
                            f"found lower={lo}, upper={hi}, home={home}")
        own = None if x.sweep_min is None else float(x.sweep_min)
        if own is not None and own <= 0:
            dw.key("sweep_min").fail(f"expected a sweep magnitude > 0, found {own}")
        least, which = (own, "its sweep_min") if own is not None else \
            (sweep_min_m, "sweep_min_m") if x.unit == "m" else (sweep_min, "sweep_min")
        room = max(hi - LIMIT_MARGIN - home, home - lo - LIMIT_MARGIN)
        if amp < least or room < least:
            raise PlanError(f"{dw} ({x.name}): expected room to sweep at least {which}="
                            f"{least} {x.unit} within the limits, found sweep_max={amp} and "
                            f"{room:.3f} of room from home (a DoF's own smallest sweep: "
                            f"sweep_min in its dofs entry)")
        dofs.append(DofSpec(x.name, x.unit, lo, hi, home, amp, own))
    names = [x.name for x in dofs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        w.key("dofs").fail(f"duplicated DoF name(s) {dup}; every channel needs its own name")
    return RobotSpec(f.robot, fps, sweep_min, tuple(dofs), f.segment_frames, sweep_min_m)


def robot_spec_to_dict(spec: RobotSpec) -> dict[str, Any]:
    """The JSON/YAML form of a spec (inverse of :func:`robot_spec_from_dict`)."""
    return {"robot": spec.robot, "frame_rate_hz": spec.frame_rate_hz,
            "sweep_min": spec.sweep_min, "sweep_min_m": spec.sweep_min_m,
            "segment_frames": spec.segment_frames,
            "dofs": [{"name": x.name, "unit": x.unit, "lower": x.lower, "upper": x.upper,
                      "home": x.home, "sweep_max": x.sweep_max,
                      **({} if x.sweep_min is None else {"sweep_min": x.sweep_min})}
                     for x in spec.dofs]}


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
    except UnicodeDecodeError as exc:
        raise PlanError(not_utf8(path, exc, "a robot spec (.yaml, .yml or .json)")) from None
    try:
        if path.suffix.lower() == ".json":
            d = json.loads(text, object_pairs_hook=no_duplicate_keys)
        else:
            d = load_yaml(text)
    except ValueError as exc:  # json.JSONDecodeError and yaml.YAMLError's common base here
        raise PlanError(f"{path}: expected a YAML or JSON robot spec, found a syntax error: "
                        f"{exc}") from None
    except Exception as exc:  # yaml.YAMLError does not derive from ValueError
        raise PlanError(f"{path}: expected a YAML robot spec, found a syntax error: "
                        f"{exc}") from None
    return robot_spec_from_dict(d, str(path))
