"""``calibrate check``'s ``camera_moves``: a camera that moves with the robot (a wrist
camera, a loose mount) is refused; a fixed camera whose arm fills much of the view is not."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import cv2
import numpy as np
import pytest

from edge.calibrate.check import EpisodeArrays, check_arrays, view_motion
from edge.episode import load_episode

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "cell_sample" / "calibration.npz"


def _textured(seed: int = 0, size: int = 96) -> np.ndarray:
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (size // 8, size // 8, 3), dtype=np.uint8)
    return cv2.resize(small, (size, size), interpolation=cv2.INTER_NEAREST)


def _shift(img: np.ndarray, dx: float, dy: float = 0.0, turn_deg: float = 0.0) -> np.ndarray:
    h, w = img.shape[:2]
    m = cv2.getRotationMatrix2D((w / 2, h / 2), turn_deg, 1.0)
    m[:, 2] += (dx, dy)
    return cv2.warpAffine(img, m, (w, h), borderMode=cv2.BORDER_REFLECT)


def test_view_motion_tells_a_moving_view_from_an_object_moving_in_a_still_view() -> None:
    home = _textured()
    moved = view_motion(home, _shift(home, 6.0, 3.0))
    assert moved["view_moved"] and moved["moved"] > 0.9
    assert all(e is not None and e > 0.9 for e in moved["edges"])
    # a large object (the middle 60% of the frame) moved, the edges still: not the view
    obj = home.copy()
    obj[19:77, 19:77] = _shift(home, 5.0)[19:77, 19:77]
    inside = view_motion(home, obj)
    assert not inside["view_moved"]
    assert max(inside["edges"]) < 0.2
    # a change of exposure is not motion
    brighter = np.clip(home.astype(np.int16) + 30, 0, 255).astype(np.uint8)
    assert not view_motion(home, brighter)["view_moved"]
    assert view_motion(home, home)["moved"] == 0.0
    flat = np.full_like(home, 90)
    assert view_motion(flat, flat) == {"moved": None, "edges": [None] * 4, "view_moved": False}


def _wrist_camera(ep, carried: list[str], px_per_rad: float = 30.0):
    """The sample calibration as a camera mounted beyond the DoFs ``carried`` would see it:
    the whole view shifted and turned with their offsets from home."""
    q = np.asarray(ep.joint_positions, np.float64)
    cols = [list(ep.metadata.dof_names).index(n) for n in carried]
    off = (q - q[0])[:, cols].sum(1)
    frames = np.stack([_shift(f, px_per_rad * o, 0.3 * px_per_rad * o, np.degrees(o) * 0.3)
                       for f, o in zip(ep.frames, off, strict=True)])
    return dataclasses.replace(ep, frames=frames)


def test_a_calibration_seen_by_a_camera_on_the_arm_fails_naming_the_dofs_that_carry_it(
        ) -> None:
    ep = load_episode(SAMPLE)
    fixed = check_arrays(EpisodeArrays.from_episode(ep))
    assert fixed["verdict"] == "pass"
    assert "camera_moves" not in {r["code"] for r in fixed["reasons"]}
    # the arm fills much of the sample's view in some sweeps, but never its edges
    assert all(d["view_moved"] is None or d["view_moved"] < 0.8 for d in fixed["dofs"])

    carried = ["Actuator1", "Actuator2"]
    report = check_arrays(EpisodeArrays.from_episode(_wrist_camera(ep, carried)))
    assert report["verdict"] == "fail"
    moves = [r for r in report["reasons"] if r["code"] == "camera_moves"]
    assert len(moves) == 1
    message = moves[0]["message"]
    for name in carried:
        assert repr(name) in message
    others = set(ep.metadata.dof_names) - set(carried)
    assert not any(repr(n) in message for n in others)
    assert "wrist camera" in message and "fixed" in message


@pytest.mark.parametrize("imported", [False, True])
def test_camera_moves_says_how_to_choose_another_camera(imported: bool) -> None:
    ep = load_episode(SAMPLE)
    ep = _wrist_camera(ep, ["Actuator1"])
    if imported:
        extra = dict(ep.metadata.extra or {})
        extra["import"] = {"source": "dataset"}
        ep = dataclasses.replace(ep, metadata=dataclasses.replace(ep.metadata, extra=extra))
    report = check_arrays(EpisodeArrays.from_episode(ep))
    (reason,) = [r for r in report["reasons"] if r["code"] == "camera_moves"]
    assert reason["dof"] == "Actuator1"
    assert ("--camera-key" in reason["message"]) == imported
    assert ("record again" in reason["message"]) == (not imported)


def test_store_refuses_a_moving_camera_and_says_what_forcing_it_costs(tmp_path: Path,
                                                                     capsys) -> None:
    """A forced store of a wrist camera's calibration read the whole frame as arm (4096 of
    4096 model pixels) and spent minutes per channel on a chain that cannot be right:
    store refuses it naming camera_moves; --force (a fixed camera whose only texture is a
    long link crossing the view can read as moved) stores it with that said."""
    from edge.episode import save_episode
    from tests.calib_cell_helpers import cli, model_dir

    path = save_episode(_wrist_camera(load_episode(SAMPLE), ["Actuator1"]),
                        tmp_path / "wrist.npz")
    common = ["--model", str(model_dir()), "--cache-dir", str(tmp_path / "cache"),
              "--threads", "1"]
    assert cli("store", str(path), *common) == 2
    assert "failed its check (camera_moves)" in capsys.readouterr().err
    assert cli("store", str(path), *common, "--force", "fixed, only the arm is textured") == 0
    err = capsys.readouterr().err
    assert "stored past camera_moves" in err and "'Actuator1'" in err


@pytest.mark.parametrize("hw", [(10, 10), (12, 128), (24, 320), (31, 400)])
def test_view_motion_does_not_judge_frames_too_small_for_the_flow(hw) -> None:
    """DIS needs room: a 10x10 frame raised cv2.error and a 12x128 one crashed the process
    inside OpenCV; frames with a side under 32 px are not judged."""
    rng = np.random.default_rng(1)
    home = rng.integers(0, 256, (*hw, 3), dtype=np.uint8)
    assert view_motion(home, home[::-1].copy()) == {"moved": None, "edges": [None] * 4,
                                                    "view_moved": False}


def test_a_recording_with_a_conveyor_in_its_holds_says_so_and_leaves_it_out() -> None:
    """A recording of another timing whose lead-in and lead-out show a belt moving: the
    belt's pixels are left out of the image motion (report ``scene_motion_share``, a note);
    the same recording without the belt has none."""
    from edge.calibrate.check import check_episode
    from tests.calib_cell_helpers import camera_rate_sweep_episode

    ep = camera_rate_sweep_episode(fps=30.0)
    clean, _ = check_episode(EpisodeArrays.from_episode(ep))
    assert clean["scene_motion_share"] == 0.0
    frames = ep.frames.copy()
    h, w = frames.shape[1:3]
    for i in range(len(frames)):  # a box sliding along the bottom rows, 1 px a frame
        frames[i, h - 12:h] = 40
        x = i % (w - 8)
        frames[i, h - 10:h - 2, x:x + 8] = 230
    belt = dataclasses.replace(ep, frames=frames)
    report, _ = check_episode(EpisodeArrays.from_episode(belt))
    assert 0.0 < report["scene_motion_share"] < 0.3
    assert any("moves on its own while the arm holds still" in n for n in report["notes"])
