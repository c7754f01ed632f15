"""One robot spec type: the cell generator's robot table holds the planner's specs."""

from __future__ import annotations

import pytest

from edge.calibrate.spec import RobotSpec, robot_spec_from_dict, robot_spec_to_dict
from export.cells.robots import ROBOTS


@pytest.mark.parametrize("robot", sorted(ROBOTS))
def test_every_arm_of_the_table_is_a_spec_the_planner_accepts(robot: str) -> None:
    spec = ROBOTS[robot]
    assert isinstance(spec, RobotSpec) and spec.robot == robot
    assert robot_spec_from_dict(robot_spec_to_dict(spec), robot) == spec
    assert spec.num_dof == len(spec.home_rad) == len(spec.limits_rad) == len(spec.dof_names)
    assert all(lo <= h <= hi for h, (lo, hi) in zip(spec.home_rad, spec.limits_rad,
                                                      strict=True))


def test_a_virtual_cell_spec_is_the_table_spec_in_its_controller_convention() -> None:
    import numpy as np

    from export.cells.sampling import sample_cell
    from export.cells.virtual import virtual_robot_spec

    cell = sample_cell(np.random.default_rng(3), "test_all", "sim-test_all-3", None)
    spec = virtual_robot_spec("test_all", 3, frame_rate_hz=12.0)
    table = ROBOTS[cell.robot]
    assert spec.frame_rate_hz == 12.0 and spec.sweep_min == table.sweep_min
    for d, p, s in zip(spec.dofs, cell.convention.perm, cell.convention.signs, strict=True):
        t = table.dofs[p]
        want = (t.lower, t.upper) if s > 0 else (-t.upper, -t.lower)
        assert (d.lower, d.upper) == want
        assert (d.name, d.home, d.sweep_max) == (t.name, s * t.home, t.sweep_max)
