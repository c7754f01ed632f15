"""The oracle predictions of scripts/oracle_retrieval.py on hand-made arrays with known
answers: a forward displacement carried to the target as a backward flow, and the
image-plane product of exponentials of nested joints."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import oracle_retrieval as oracle  # noqa: E402


def test_a_translated_block_gets_its_backward_flow_at_the_target() -> None:
    robot = np.zeros((16, 16), bool)
    robot[4:8, 2:6] = True
    fwd = np.zeros((2, 16, 16))
    fwd[0][robot] = 6.0  # the block moves 6 px to the right
    fwd[1][robot] = 1.0  # and 1 px down
    flow, cover = oracle.splat_flow(robot, fwd)
    target = np.zeros((16, 16), bool)
    target[5:9, 8:12] = True
    assert np.allclose(flow[target], [-6.0, -1.0], atol=1e-4)
    assert (cover[target] == 1).all()
    far = np.ones((16, 16), bool)
    far[5:9, 8:12] = False  # the silhouette does not grow
    assert (flow[far] == 0).all() and (cover[far] == 0).all()
    # the start frame warped by it shows the block where it went
    start = np.zeros((16, 16, 3), np.uint8)
    start[robot] = 200
    from export.evaluation.frames import _remap

    moved = _remap(start, [flow])[0]
    assert (moved[target] == 200).all()


def test_nested_joints_compose_distal_first() -> None:
    # joint 0 carries every pixel of a 16x16 grid and turns it about c = (8, 8); joint 1
    # carries the left half and translates it by one pixel to the right. At a quarter turn
    # of joint 0, a pixel of the left half goes to c + J (x + (1, 0) - c), J the quarter turn.
    h = w = 16
    carried = np.zeros((2, h, w), bool)
    carried[0] = True
    carried[1][:, :8] = True
    c = np.array([8.0, 8.0])
    jm = np.array([[0.0, -1.0], [1.0, 0.0]])
    As, Ac = np.zeros((2, 2, 3)), np.zeros((2, 2, 3))
    As[0, :, :2], As[0, :, 2] = jm, -jm @ c  # S(x) = J (x - c)
    Ac[0, :, :2], Ac[0, :, 2] = -np.eye(2), c  # C(x) = -(x - c)
    As[1, 0, 2] = 1.0  # sin(pi/2) * 1 px
    d = oracle.chain_displacement(As, Ac, carried, np.array([np.pi / 2, np.pi / 2]))
    for y, x in ((3, 2), (12, 5), (7, 13)):
        p = np.array([x + 0.5, y + 0.5])
        q = p + (np.array([1.0, 0.0]) if x < 8 else 0.0)
        assert np.allclose(p + d[:, y, x], c + jm @ (q - c), atol=1e-9)


def test_axes_read_at_home_are_carried_to_the_start_by_the_proximal_turns() -> None:
    # joint a about z through the origin carries links 0 and 1; joint b about z through
    # (1, 0, 0) carries link 1. A quarter turn of a moves b's pivot to (0, 1, 0); b's own
    # turn moves nothing of its axis, and a's axis stays.
    axes = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    pivots = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    carried = np.array([[True, True], [False, True]])
    new_axes, new_pivots = oracle.carry_axes(axes, pivots, carried, np.array([np.pi / 2, 0.4]))
    assert np.allclose(new_axes, axes, atol=1e-12)
    assert np.allclose(new_pivots, [[0.0, 0.0, 0.0], [0.0, 1.0, 0.0]], atol=1e-12)

