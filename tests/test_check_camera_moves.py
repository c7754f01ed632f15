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


def test_store_refuses_a_moving_camera_even_when_forced(tmp_path: Path, capsys) -> None:
    """A forced store of a wrist camera's calibration read the whole frame as arm (4096 of
    4096 model pixels) and spent minutes per channel on a chain that cannot be right: no
    model simulates a camera that moves with the arm, so --force does not pass it."""
    from edge.episode import save_episode
    from tests.calib_cell_helpers import cli, model_dir

    path = save_episode(_wrist_camera(load_episode(SAMPLE), ["Actuator1"]),
                        tmp_path / "wrist.npz")
    common = ["--model", str(model_dir()), "--cache-dir", str(tmp_path / "cache"),
              "--threads", "1"]
    assert cli("store", str(path), *common, "--force", "try anyway") == 2
    err = capsys.readouterr().err
    assert "camera_moves), which --force does not pass" in err
    assert "'Actuator1'" in err
    if (tmp_path / "cache").exists():
        from edge.cache.store import CalibrationCache

        with CalibrationCache(tmp_path / "cache") as cache:
            assert cache.list() == []


def test_what_moves_on_its_own_in_a_recording_s_holds_is_left_out_and_said() -> None:
    """A conveyor in view: its boxes move in the recording's lead-in and lead-out, where
    every joint holds still; those pixels are left out of the image motion and the check
    says so (a user's belt cell raised the noise floor past its flange's motion)."""
    from edge.calibrate.check import held_transitions, scene_motion

    q = np.zeros((20, 2))
    q[8:12, 0] = [0.1, 0.3, 0.3, 0.1]  # a sweep in the middle; holds either side
    # three still transitions either side of each held one (a late camera's arm motion
    # does not reach it); the sweep's own pause (transition 9) is too short
    assert held_transitions(q) == [3, 15]
    q2 = np.zeros((30, 2))
    q2[12:16, 1] = 0.2
    assert held_transitions(q2) == [3, 4, 5, 6, 7, 19, 20, 21, 22, 23, 24, 25]
    frames = np.repeat(_textured(3, 64)[None], 30, axis=0)
    belt = frames.copy()
    for i in range(30):  # a box sliding along the bottom rows, one px a frame
        belt[i, 48:60] = 40
        belt[i, 50:58, i + 2:i + 10] = 230
    mask = scene_motion(belt, held_transitions(q2))
    assert mask is not None and mask[48:60].any() and not mask[:40].any()
    assert scene_motion(frames, held_transitions(q2)) is None  # nothing moved on its own
    assert scene_motion(belt, [3, 4]) is None  # a run of two transitions tells nothing
