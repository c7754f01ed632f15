"""Joints a controller reports within one turn: read as turning on through the wrap
(edge.joints.continuous_positions, edge.episode.continuous_joints)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from edge.episode import actions_from_positions, continuous_joints, load_episode, save_episode
from edge.joints import continuous_positions
from tests.helpers import make_episode

TURN = 2 * np.pi


def wrapped(q: np.ndarray, low: float = -np.pi) -> np.ndarray:
    """``q`` reported within one turn ``[low, low + 2 pi)``."""
    return (np.asarray(q, np.float64) - low) % TURN + low


@pytest.mark.parametrize("low", [-np.pi, 0.0])
def test_a_joint_turning_through_the_wrap_point_reads_on(low: float) -> None:
    true = np.concatenate([np.linspace(2.9, 3.5, 7), np.linspace(3.5, 2.9, 7)]) + (
        0.0 if low < 0 else -3.05)  # crosses pi, or crosses 0 for a [0, 2 pi) controller
    seen = wrapped(true, low)
    assert np.abs(np.diff(seen)).max() > 5.5
    q, wraps = continuous_positions(seen[:, None], ["rad"])
    np.testing.assert_allclose(q[:, 0], true - true[0] + seen[0], atol=1e-12)
    # up through the wrap point (a turn added), then back down through it
    assert [(w["channel"], w["turns"]) for w in wraps] == [(0, 1), (0, -1)]
    assert [w["sample"] for w in wraps] == [int(np.argmax(true > -low)),
                                           7 + int(np.argmax(true[7:] < -low))]


def test_many_turns_unknown_readings_metres_and_fast_moves() -> None:
    true = np.linspace(0.0, 3 * TURN, 61)  # three whole turns, 0.31 rad per reading
    seen = wrapped(true)
    q = np.stack([seen, seen.copy(), np.linspace(0, 7.0, 61)], 1)
    q[[10, 11], 0] = np.nan  # unknown this cycle: neither spreads nor moves
    cont, wraps = continuous_positions(q, ["rad", "m", "rad"])
    ok = np.isfinite(q[:, 0])
    np.testing.assert_allclose(cont[ok, 0], true[ok], atol=1e-9)
    assert np.isnan(cont[[10, 11], 0]).all()
    assert sum(w["turns"] for w in wraps if w["channel"] == 0) == 3
    np.testing.assert_array_equal(cont[:, 1], q[:, 1])  # metres are as read
    # a real move of less than half a turn per reading is motion, never a wrap
    np.testing.assert_array_equal(cont[:, 2], q[:, 2])
    step = np.array([[0.0], [3.1], [0.0]])
    assert continuous_positions(step, ["rad"])[1] == []
    with pytest.raises(ValueError, match="J units"):
        continuous_positions(q, ["rad"])


def _wrapped_episode() -> tuple:
    ep = make_episode(t=12, a=3, seed=4)
    true = ep.joint_positions.copy()
    true[:, 0] = np.pi - 0.15 + np.concatenate([np.linspace(0, 0.5, 6), np.linspace(0.5, 0, 6)])
    seen = true.copy()
    seen[:, 0] = wrapped(true[:, 0])
    return dataclasses.replace(ep, joint_positions=seen, actions=actions_from_positions(seen)
                               ).validate(), true


def test_an_episode_file_with_wrapped_readings_loads_continuous(tmp_path: Path) -> None:
    ep, true = _wrapped_episode()
    assert np.abs(ep.actions[:, 0]).max() > 5.5
    back = load_episode(save_episode(ep, tmp_path / "w.npz"))
    np.testing.assert_allclose(back.joint_positions, true, atol=1e-9)
    np.testing.assert_allclose(back.actions, actions_from_positions(true), atol=1e-6)
    assert back.metadata.extra["joint_turns_unwrapped"] == [
        {"dof": "j0", "frame": 2, "turns": 1}, {"dof": "j0", "frame": 10, "turns": -1}]
    assert back.metadata.extra["note"] == "x"
    # saved again and read again: continuous already, nothing more is undone
    again = load_episode(save_episode(back, tmp_path / "w2.npz"))
    assert again.metadata.extra["joint_turns_unwrapped"] == \
        back.metadata.extra["joint_turns_unwrapped"]
    np.testing.assert_array_equal(again.actions, back.actions)


def test_actions_that_are_not_the_readings_change_are_left_as_they_are() -> None:
    ep, true = _wrapped_episode()
    commands = np.full_like(ep.actions, 0.01)
    out = continuous_joints(dataclasses.replace(ep, actions=commands).validate())
    np.testing.assert_array_equal(out.actions, commands)
    np.testing.assert_allclose(out.joint_positions, true, atol=1e-9)
    plain = make_episode(t=12, a=3, seed=4)
    assert continuous_joints(plain) is plain


def test_a_lerobot_dataset_with_wrapped_state_reads_continuous(tmp_path: Path) -> None:
    from edge.lerobot import read_lerobot, write_lerobot

    ep, true = _wrapped_episode()
    (back,) = read_lerobot(write_lerobot([ep], tmp_path / "ds"))
    np.testing.assert_allclose(back.joint_positions, true, atol=1e-5)
    assert np.abs(back.actions[:, 0]).max() < 0.2
    assert [w["frame"] for w in back.metadata.extra["joint_turns_unwrapped"]] == [2, 10]


def test_readings_in_degrees_are_not_taken_for_wraps() -> None:
    """A sweep read in degrees moves several units a reading, some steps near a whole
    'turn' of 6.28: such a channel spans more than one turn and is left as read (before
    the guard, a 25 deg sweep was 'unwrapped' into nonsense and the check blamed a stuck
    joint)."""
    rad = 0.45 * np.sin(np.linspace(0, np.pi, 9)) ** 2
    deg = np.degrees(np.concatenate([rad, -rad]) + 1.2)[:, None]
    assert (np.abs(np.diff(deg[:, 0])) > np.pi).any()
    cont, wraps = continuous_positions(deg, ["rad"])
    assert wraps == [] and np.array_equal(cont, deg)
    # within one turn but a jump far from a whole turn: not a wrap either
    odd = np.array([[3.0], [3.1], [-1.0], [-1.1]])
    assert continuous_positions(odd, ["rad"])[1] == []


def test_check_passes_a_sweep_through_the_wrap_and_says_so(tmp_path: Path, capsys) -> None:
    from tests.calib_cell_helpers import cli, sweep_episode

    cal = sweep_episode()
    q = cal.joint_positions.copy()
    start = np.pi - 0.05 if cal.actions[0:3, 0].sum() > 0 else -np.pi + 0.05  # j0 sweeps first
    q[:, 0] += start - q[0, 0]  # its sweep starts next to the wrap point and turns through it
    seen = wrapped(q)
    assert np.abs(np.diff(seen[:, 0])).max() > 5.5  # j0's sweep crosses the wrap point
    path = save_episode(dataclasses.replace(cal, joint_positions=seen,
                                            actions=actions_from_positions(seen)).validate(),
                        tmp_path / "cal.npz")
    assert cli("check", str(path), "--out", str(tmp_path / "chk")) == 0
    captured = capsys.readouterr()
    assert "verdict: pass" in captured.out
    assert "note: joint readings jumped by whole turns" in captured.err and "j0 at frame" in \
        captured.err


def test_readings_in_degrees_wrapped_into_half_turns_read_on() -> None:
    """A controller reporting degrees wraps at +-180: the jump of about 360 is undone in
    degrees (the chain reads degrees with its fitted turn per unit), and the degrees are
    never mistaken for rad wraps."""
    true_deg = 175.0 + np.concatenate([np.linspace(0, 26, 9), np.linspace(26, 0, 9)])
    seen = (true_deg + 180.0) % 360.0 - 180.0  # (-180, 180]
    assert np.abs(np.diff(seen)).max() > 300
    cont, wraps = continuous_positions(np.stack([seen, np.linspace(10, 40, 18)], 1),
                                       ["rad", "rad"])
    np.testing.assert_allclose(cont[:, 0], true_deg, atol=1e-9)
    assert [(w["channel"], w["turns"], w["turn"]) for w in wraps] == [(0, 1, 360.0),
                                                                     (0, -1, 360.0)]
    np.testing.assert_array_equal(cont[:, 1], np.linspace(10, 40, 18))
