"""The robot models cells are built from, and where their meshes come from.

Each arm is a :class:`edge.calibrate.spec.RobotSpec` (the one robot spec type: the planner
reads the same) in the asset's canonical joint order and signs, with a sweep magnitude of
0.3 to 0.5 rad per joint (the calibration sweeps' range).

Robot models are robosuite 1.5.2's MuJoCo assets (``robosuite/models/assets/robots``),
installed without robosuite's Python dependencies (``pip install --no-deps
robosuite==1.5.2``); only the XML and mesh files are used. Home poses are robosuite's
``init_qpos`` for each arm (``robosuite/models/robots/manipulators/*_robot.py``). Where an
asset leaves a revolute joint unlimited, a range is set here so sweeps stay within limits.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

from edge.calibrate.spec import DofSpec, RobotSpec
from export.cells.trajectories import SWEEP_AMPLITUDE_RAD
from export.errors import CellError

__all__ = ["EE_BODY", "FRAME_RATE_HZ", "MAX_DOF", "ROBOTS", "TRAIN_ROBOTS", "HELD_OUT_ROBOTS",
           "STRESS_ROBOTS", "robot_spec", "assets_root"]

#: The body whose origin is the end-effector keypoint (robosuite names it so in every arm).
EE_BODY = "right_hand"
#: The table's frame rate, Hz: the cells' default (the planner's specs give their own).
FRAME_RATE_HZ = 10.0


def _arm(name: str, joints: tuple[str, ...], home_rad: tuple[float, ...],
         limits_rad: tuple[tuple[float, float], ...]) -> RobotSpec:
    """One arm of the table as a :class:`~edge.calibrate.spec.RobotSpec` in its canonical
    joint order and signs; its asset is the folder ``name`` under robosuite's
    ``models/assets/robots``."""
    sweep_min, sweep_max = SWEEP_AMPLITUDE_RAD  # the calibration sweeps' range
    dofs = tuple(DofSpec(j, "rad", lo, hi, h, sweep_max)
                 for j, h, (lo, hi) in zip(joints, home_rad, limits_rad, strict=True))
    return RobotSpec(name, FRAME_RATE_HZ, sweep_min, dofs)


_PI = math.pi


#: Every arm: robot name -> spec (joints in the asset's canonical order, home pose, limits).
ROBOTS: dict[str, RobotSpec] = {
    r.robot: r
    for r in [
        _arm(
            "panda", tuple(f"joint{i}" for i in range(1, 8)),
            (0.0, _PI / 16, 0.0, -_PI / 2 - _PI / 3, 0.0, _PI - 0.2, _PI / 4),
            ((-2.8973, 2.8973), (-1.7628, 1.7628), (-2.8973, 2.8973), (-3.0718, -0.0698),
             (-2.8973, 2.8973), (-0.0175, 3.7525), (-2.8973, 2.8973)),
        ),
        _arm(
            "sawyer", tuple(f"right_j{i}" for i in range(7)),
            (0.0, -1.18, 0.0, 2.18, 0.0, 0.57, -1.57),
            ((-3.0503, 3.0503), (-3.8095, 2.2736), (-3.0426, 3.0426), (-3.0439, 3.0439),
             (-2.9761, 2.9761), (-2.9761, 2.9761), (-4.7124, 4.7124)),
        ),
        _arm(
            "ur5e",
            ("shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint", "wrist_1_joint",
             "wrist_2_joint", "wrist_3_joint"),
            (-0.470, -1.735, 2.480, -2.275, -1.590, -1.991),
            ((-6.28319, 6.28319), (-6.28319, 6.28319), (-3.14159, 3.14159),
             (-6.28319, 6.28319), (-6.28319, 6.28319), (-6.28319, 6.28319)),
        ),
        _arm(
            "kinova3", tuple(f"Actuator{i}" for i in range(1, 8)),
            (0.0, 0.650, 0.0, 1.890, 0.0, 0.600, -_PI / 2),
            # Actuators 1, 3, 5 and 7 are continuous in the asset; +-pi around home here.
            ((-_PI, _PI), (-2.41, 2.41), (-_PI, _PI), (-2.66, 2.66), (-_PI, _PI),
             (-2.23, 2.23), (-_PI / 2 - _PI, -_PI / 2 + _PI)),
        ),
        _arm(
            "iiwa", tuple(f"joint_{i}" for i in range(1, 8)),
            (0.0, 0.650, 0.0, -1.890, 0.0, 0.600, 0.0),
            # KUKA LBR iiwa 7 R800 axis ranges (+-170, 120, 170, 120, 170, 120, 175 deg).
            ((-2.967, 2.967), (-2.094, 2.094), (-2.967, 2.967), (-2.094, 2.094),
             (-2.967, 2.967), (-2.094, 2.094), (-3.054, 3.054)),
        ),
        _arm(
            "jaco", tuple(f"j2s7s300_joint_{i}" for i in range(1, 8)),
            (3.192, 3.680, 0.0, 1.170, 0.050, 3.760, 3.142),
            ((-6.28319, 6.28319), (0.820305, 5.46288), (-6.28319, 6.28319),
             (0.523599, 5.75959), (-6.28319, 6.28319), (1.13446, 5.14872),
             (-6.28319, 6.28319)),
        ),
        _arm(
            "xarm7", tuple(f"joint{i}" for i in range(1, 8)),
            (0.0, 0.0, 0.0, 0.39 * _PI, 0.0, 0.39 * _PI, 0.0),
            ((-6.28319, 6.28319), (-2.059, 2.0944), (-6.28319, 6.28319), (-0.19198, 3.927),
             (-6.28319, 6.28319), (-1.69297, 3.14159), (-6.28319, 6.28319)),
        ),
        _arm(
            # Boston Dynamics Spot's arm, 6 DoF; home: robosuite's SpotArm.init_qpos, ranges
            # from its robot.xml.
            "spot_arm",
            ("arm_sh0", "arm_sh1", "arm_el0", "arm_el1", "arm_wr0", "arm_wr1"),
            (0.0, -1.2, 1.85, 0.0, 0.862, 0.0),
            ((-2.61799, 3.14159), (-3.14159, 0.523599), (0.0, 3.14159), (-2.79253, 2.79253),
             (-1.8326, 1.8326), (-2.87979, 2.87979)),
        ),
    ]
}

#: Robots never seen in training; the held-out-robot and all-held-out splits use them.
HELD_OUT_ROBOTS: tuple[str, ...] = ("kinova3",)
#: The stress split's robot: used by no other split.
STRESS_ROBOTS: tuple[str, ...] = ("spot_arm",)
#: Robots of the training and validation splits.
TRAIN_ROBOTS: tuple[str, ...] = tuple(n for n in ROBOTS
                                      if n not in HELD_OUT_ROBOTS + STRESS_ROBOTS)
#: The largest DoF count of any robot: the action width A of generated data.
MAX_DOF = max(len(r.dofs) for r in ROBOTS.values())


def robot_spec(name: str) -> RobotSpec:
    """Return the :class:`RobotSpec` called ``name``.

    Raises:
        CellError: for an unknown name, listing the known ones.
    """
    try:
        return ROBOTS[name]
    except KeyError:
        raise CellError(f"unknown robot {name!r}; expected one of {sorted(ROBOTS)}") from None


def assets_root() -> Path:
    """Folder holding robosuite's robot assets.

    Raises:
        CellError: if robosuite's assets are not installed, with the install command.
    """
    spec = importlib.util.find_spec("robosuite")
    if spec is None or not spec.submodule_search_locations:
        raise CellError(
            "robot assets not found: install them with "
            "'pip install --no-deps robosuite==1.5.2' (only its model files are used)"
        )
    root = Path(next(iter(spec.submodule_search_locations))) / "models" / "assets" / "robots"
    if not root.is_dir():
        raise CellError(f"robot assets folder missing: {root}; reinstall robosuite==1.5.2")
    return root
