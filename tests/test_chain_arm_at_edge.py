"""A chain whose arm runs out of the view at home: its links beyond the frame are not in
the chain, so ``calibrate store --chain`` and ``model read-chain`` warn and say to frame
the whole arm (on held-out cells so framed, futures retrieval at step 16 fell from 0.74 to
0.53)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import edge.runtime.chain as chain_mod
from edge.cli import main
from edge.runtime.chain import ARM_AT_EDGE_MIN_PX, arm_at_edge_note, arm_at_frame_edge

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "cell_sample"


def test_arm_at_frame_edge_counts_each_side() -> None:
    robot = np.zeros((8, 10), bool)
    assert arm_at_frame_edge(robot) == {"top": 0, "bottom": 0, "left": 0, "right": 0}
    robot[0, 2:5] = True  # three on the top row
    robot[3:5, 9] = True  # two on the right column
    robot[7, 0] = True  # a corner: bottom and left
    assert arm_at_frame_edge(robot) == {"top": 3, "bottom": 1, "left": 1, "right": 2}


def test_the_note_names_the_sides_only_from_the_limit_up() -> None:
    robot = np.zeros((64, 64), bool)
    robot[20:40, 20:40] = True
    assert arm_at_edge_note(robot, "c") is None  # inside the view
    robot[0, 30:30 + ARM_AT_EDGE_MIN_PX - 1] = True
    robot[1:20, 30] = True
    assert arm_at_edge_note(robot, "c") is None  # under the limit
    robot[0, 29] = True
    note = arm_at_edge_note(robot, "chain X")
    assert note is not None and note.startswith("chain X: the arm runs out of the view")
    assert f"top ({ARM_AT_EDGE_MIN_PX} of 64 px)" in note
    assert "bottom" not in note and "left" not in note and "right" not in note
    assert "frame the whole arm" in note


def test_store_warns_of_an_arm_out_of_view_and_not_of_the_sample(tmp_path, capsys,
                                                                  monkeypatch) -> None:
    args = ["calibrate", "store", str(SAMPLE / "calibration_256.npz"), "--chain",
            str(SAMPLE / "chain.npz"), "--cache-dir", str(tmp_path / "cache")]
    assert main(args) == 0
    assert "runs out of the view" not in capsys.readouterr().err  # the whole arm in view
    monkeypatch.setattr(chain_mod, "arm_at_frame_edge",
                        lambda robot: {"top": 5, "bottom": 0, "left": 0, "right": 0})
    assert main(args) == 0
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if "runs out of the view" in x]
    assert line.startswith("warning: chain calibration (") and "top (5 of 64 px)" in line
