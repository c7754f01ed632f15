"""Inputs that are well formed but wrong for the cell (actions in another unit, readings
far from the calibration's, a calibration of another cell) are said, and bad or unwritable
paths end in one line naming the user's path."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from edge.cli import join_negative_values, main
from edge.episode import load_episode
from edge.runtime.inputs import (
    PLAUSIBLE_TURN_RAD_S,
    action_speed_warnings,
    episode_mismatch_warning,
    episode_sliding,
    start_joint_warnings,
)

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "cell_sample"
CHAIN = ["simulate", "--chain", str(SAMPLE / "chain.npz"), "--start", str(SAMPLE / "test.npz")]


def test_action_speeds_past_any_arm_are_named_per_channel() -> None:
    a = np.zeros((2, 5, 3), np.float32)
    a[1, 3, 2] = 1.0  # 1 rad in one frame at 10 Hz: 10 rad/s
    a[0, 1, 0] = 0.5  # 5 rad/s: within the bound
    lines = action_speed_warnings(a, 10.0, ["j0", "j1", "j2"], "acts.npy")
    assert len(lines) == 1
    assert lines[0].startswith("acts.npy: j2 changes by 1 rad in one step")
    assert "(candidate 1, step 3)" in lines[0] and "10 rad/s at 10 Hz" in lines[0]
    # the bound is a speed: at 30 Hz 0.5 rad per frame is 15 rad/s
    assert len(action_speed_warnings(a, 30.0, ["j0", "j1", "j2"], "x")) == 2
    # exactly at the bound is plausible
    b = np.full((1, 2, 1), PLAUSIBLE_TURN_RAD_S / 10.0, np.float64)
    assert action_speed_warnings(b, 10.0, ["j0"], "x") == []


def test_the_start_episode_s_units_say_which_channels_slide() -> None:
    """simulate and precheck pass the start episode's units: a gripper (m) stepping 0.5 m
    in a frame is named in m/s, not as a turn in rad."""
    from tests.helpers import make_episode

    ep = make_episode(a=3)  # units rad, rad, m
    assert episode_sliding(ep, 3).tolist() == [False, False, True]
    assert episode_sliding(ep, 4) is None and episode_sliding(None, 3) is None
    a = np.zeros((1, 2, 3), np.float32)
    a[0, 0, 2] = 0.5
    (line,) = action_speed_warnings(a, 10.0, ["j0", "j1", "j2"], "x",
                                    sliding=episode_sliding(ep, 3))
    assert "m/s" in line and "rad" not in line.split("j2")[1].split(";")[0]


def test_action_speeds_read_the_controller_units_and_sliding_channels() -> None:
    a = np.zeros((1, 2, 2), np.float32)
    a[0, 0] = [40.0, 0.5]  # 40 counts at 0.001 rad per count; 0.5 m in one frame
    lines = action_speed_warnings(a, 10.0, ["turn", "grip"], "x",
                                  turn_per_unit=np.array([0.001, 0.0]),
                                  sliding=np.array([False, True]))
    assert len(lines) == 1 and lines[0].startswith("x: grip changes by 0.5 m")
    assert "1 m/s" in lines[0]


def test_start_readings_past_a_full_turn_from_home_are_named() -> None:
    home = np.array([0.0, 1.0, 0.0])
    q = np.array([0.1, 1.0 + 2 * math.pi + 0.01, 200.0])
    lines = start_joint_warnings(q, home, ["a", "b", "c"], "--start-joints",
                                 turn_per_unit=np.array([1.0, 1.0, 0.0]))
    assert len(lines) == 1 and lines[0].startswith("--start-joints: b reads")  # c slides


def test_a_start_of_another_cell_than_the_calibration_is_named() -> None:
    meta = load_episode(SAMPLE / "test.npz").metadata
    same = {"cell_id": meta.cell_id, "camera_id": meta.camera_id, "robot_id": meta.robot_id}
    assert episode_mismatch_warning(meta, same, "s.npz", "c.npz") is None
    assert episode_mismatch_warning(None, same, "s.npz", "c.npz") is None
    other = dict(same, camera_id="cam-2")
    line = episode_mismatch_warning(meta, other, "s.npz", "c.npz")
    assert line is not None and f"camera_id {meta.camera_id!r}" in line and "'cam-2'" in line
    assert "cell_id" not in line


def test_simulate_chain_warns_of_actions_in_another_unit(tmp_path: Path, capsys) -> None:
    ep = load_episode(SAMPLE / "test.npz")
    acts = tmp_path / "deg.npy"
    np.save(acts, np.degrees(ep.actions[:-1, :7]).astype(np.float32))  # degrees, not rad
    assert main(CHAIN + ["--actions", str(acts), "--out", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert f"warning: {acts}: " in err and "faster than any arm" in err
    report = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert report["warnings"] and all("faster than any arm" in w for w in report["warnings"])
    # the same actions in rad: nothing to say
    np.save(acts, ep.actions[:-1, :7].astype(np.float32))
    assert main(CHAIN + ["--actions", str(acts), "--out", str(tmp_path / "p")]) == 0
    assert "warning" not in capsys.readouterr().err
    assert json.loads((tmp_path / "p" / "metrics.json").read_text())["warnings"] == []


def test_simulate_warns_of_a_calibration_from_another_cell(tmp_path: Path, capsys) -> None:
    from dataclasses import replace

    from edge.episode import save_episode

    cal = load_episode(SAMPLE / "calibration.npz")
    other = tmp_path / "other_cal.npz"
    save_episode(replace(cal, metadata=replace(cal.metadata, cell_id="cell-B")), other)
    args = ["simulate", "--model", str(ROOT / "models" / "reference"), "--start",
            str(SAMPLE / "test.npz")]
    assert main(args + ["--calibration", str(other), "--out", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert "warning: " in err and "'cell-B'" in err and str(other) in err
    assert "'cell-B'" in json.loads((tmp_path / "o" / "metrics.json").read_text())[
        "warnings"][0]


def test_negative_joint_readings_parse_without_an_equals_sign(tmp_path: Path) -> None:
    assert join_negative_values(["x", "--start-joints", "-0.5,1", "--joint-state", "-.2",
                                 "--out", "-o"]) == [
        "x", "--start-joints=-0.5,1", "--joint-state=-.2", "--out", "-o"]
    q = load_episode(SAMPLE / "test.npz").joint_positions[0, :7]
    assert q[0] < 0
    text = ",".join(f"{x:.6f}" for x in q)
    assert main(CHAIN + ["--start-joints", text, "--out", str(tmp_path / "o")]) == 0


def test_an_unwritable_out_names_the_out_folder(tmp_path: Path, capsys, monkeypatch) -> None:
    import tempfile

    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied", str(tmp_path / ".o.staging-x"))

    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    assert main(CHAIN + ["--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'o'}: cannot write the output there (permission denied)" in err
    assert "staging" not in err and not (tmp_path / "o").exists()


def test_a_failed_write_inside_the_staging_folder_names_out(tmp_path: Path) -> None:
    from edge.commands.common import StagedOutput
    from edge.runtime.errors import RuntimeInputError

    with pytest.raises(RuntimeInputError, match=r"/o: cannot write the output there \(no "
                                                r"space left on device\)"):
        with StagedOutput(tmp_path / "o") as out:
            raise OSError(28, "No space left on device", str(out.path("a.png")))
    assert [p.name for p in tmp_path.iterdir()] == []


def test_candidate_workers_are_refused_with_the_chain(tmp_path: Path, capsys) -> None:
    assert main(CHAIN + ["--candidate-workers", "2", "--out", str(tmp_path / "o")]) == 2
    assert "--candidate-workers: not with --chain" in capsys.readouterr().err


def test_bad_action_shapes_say_what_is_missing(tmp_path: Path, capsys) -> None:
    for arr, said in ((np.zeros(40, np.float32), "a 1-D array of shape [40]"),
                      (np.zeros((0, 7), np.float32), "no steps")):
        f = tmp_path / "a.npy"
        np.save(f, arr)
        assert main(CHAIN + ["--actions", str(f), "--out", str(tmp_path / "o")]) == 2
        assert said in capsys.readouterr().err


def test_a_start_of_another_size_says_width_and_height(tmp_path: Path, capsys) -> None:
    """A start image smaller than the model's frame is refused naming width and height; a
    larger one of another shape (a camera's own frame) is cropped and resized as a
    recording is, and said."""
    def run(shape: tuple[int, int, int], out: str) -> int:
        f = tmp_path / f"{out}.npy"
        np.save(f, np.zeros(shape, np.uint8))
        return main(["simulate", "--model", str(ROOT / "models" / "reference"),
                     "--calibration", str(SAMPLE / "calibration.npz"), "--start", str(f),
                     "--actions", str(ROOT / "samples" / "precheck" / "candidates.json"),
                     "--out", str(tmp_path / out)])

    assert run((48, 96, 3), "low") == 2
    err = capsys.readouterr().err
    assert "64 px wide and 64 high" in err and "found an image 96 wide and 48 high" in err
    assert run((64, 96, 3), "wide") == 0
    assert "an image of 96x64 px centre-cropped and resized to the model's 64x64" in \
        capsys.readouterr().err


def test_a_misnamed_or_mistaken_file_gets_a_hint(tmp_path: Path, capsys) -> None:
    z = dict(np.load(SAMPLE / "calibration.npz", allow_pickle=False))
    z["action"] = z.pop("actions")
    bad = tmp_path / "cal.npz"
    np.savez(bad, **z)
    args = ["simulate", "--model", str(ROOT / "models" / "reference"), "--start",
            str(SAMPLE / "test.npz"), "--out", str(tmp_path / "o")]
    assert main(args + ["--calibration", str(bad)]) == 2
    assert "found 'action': rename it 'actions'" in capsys.readouterr().err
    assert main(args + ["--calibration", str(SAMPLE / "chain.npz")]) == 2
    err = capsys.readouterr().err
    assert "no 'metadata_json' array" in err and "give it as --chain" in err
    assert main(["calibrate", "check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "rename it 'actions'" in err and "is not a file in the archive" not in err


def test_the_failing_step_is_a_column_of_its_row() -> None:
    from edge.commands.precheck import fail_columns

    cols = np.array([0, 2, 4, 6, 9, 11, 13, 15])
    assert fail_columns(cols, None).tolist() == cols.tolist()
    assert fail_columns(cols, 4).tolist() == cols.tolist()
    assert fail_columns(cols, 5).tolist() == [0, 2, 5, 6, 9, 11, 13, 15]
    assert fail_columns(cols, 14).tolist() == [0, 2, 4, 6, 9, 11, 14, 15]  # never the last


def test_a_folder_holds_one_commands_outputs(tmp_path: Path, capsys) -> None:
    """Another command's output folder is refused before any work; a rerun of the same
    command replaces its outputs and removes the ones it no longer writes; a folder with
    no record (the user's own) keeps its files."""
    from edge.commands.common import StagedOutput
    from edge.runtime.errors import RuntimeInputError

    out = tmp_path / "o"
    with StagedOutput(out, "syncedge precheck") as o:
        for name in ("report.json", "report.png"):
            o.path(name).write_text(name)
        o.commit()
    assert main(CHAIN + ["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "holds the outputs of `syncedge precheck` (report.json, report.png); give " \
           "`syncedge simulate` another folder" in err
    assert sorted(p.name for p in out.iterdir()) == [".syncedge-outputs.json", "report.json",
                                                     "report.png"]
    with StagedOutput(out, "syncedge precheck") as o:  # a rerun writing one file of the two
        o.path("report.json").write_text("again")
        o.commit()
    assert sorted(p.name for p in out.iterdir()) == [".syncedge-outputs.json", "report.json"]
    assert (out / "report.json").read_text() == "again"
    with pytest.raises(RuntimeInputError, match="holds the outputs of `syncedge precheck`"):
        StagedOutput(out, "syncedge simulate")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    assert main(CHAIN + ["--out", str(mine)]) == 0
    assert (mine / "notes.txt").read_text() == "keep" and (mine / "metrics.json").is_file()
