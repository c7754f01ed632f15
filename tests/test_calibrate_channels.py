"""Pairing a program's DoFs with a joint stream's channels."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from edge.calibrate.assemble import _channels
from edge.calibrate.errors import RecordingError
from edge.joints import names_are_positional, positional_names

PANDA = SimpleNamespace(dof_names=[f"joint{i}" for i in range(1, 8)], robot="panda")


def test_unnamed_serial_channels_pair_by_position_not_by_overlapping_names() -> None:
    # a framed serial stream reports joint0..joint6; the Panda spec names joint1..joint7:
    # pairing by name would shift every joint by one channel
    names = positional_names(7)
    assert names_are_positional(names) and names_are_positional(["id1", "id2"])
    assert names_are_positional(["slave0:drive", "slave1:drive"])
    assert not names_are_positional(["slave1:drive", "slave0:drive"])
    assert _channels(PANDA, names) == (list(range(7)), list(range(7)), "by position")
    with pytest.raises(RecordingError, match=r"6 unnamed channels \(joint0 ... joint5\), "
                                             r"expected the program's 7 DoFs"):
        _channels(PANDA, positional_names(6))


def test_named_channels_pair_by_name_and_another_robot_is_refused() -> None:
    names = ["joint3", "joint1", "joint2", "joint4", "joint5", "joint6", "joint7"]
    assert not names_are_positional(names)
    pc, sc, how = _channels(PANDA, names)
    assert how == "by name" and [names[s] for s in sc] == [PANDA.dof_names[p] for p in pc]
    kinova = [f"Actuator{i}" for i in range(1, 8)]
    with pytest.raises(RecordingError, match=r"share no name with the program's DoFs .* "
                                             r"\(a program for robot 'panda'\)"):
        _channels(PANDA, kinova)
