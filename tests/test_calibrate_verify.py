"""A moved camera is detected (and an unmoved one is not, under a lighting change); the
stale-calibration gate of precheck."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from edge.calibrate.verify import compare_frames

if importlib.util.find_spec("mujoco") is None:
    pytest.skip("the virtual cell needs MuJoCo", allow_module_level=True)

from edge.cache.store import CalibrationCache  # noqa: E402
from edge.cache.values import CacheKey  # noqa: E402
from edge.calibrate.camera import open_camera  # noqa: E402
from edge.commands import precheck  # noqa: E402
from edge.commands.common import run_command  # noqa: E402
from edge.manifest import model_sha256  # noqa: E402
from tests.calib_cell_helpers import cli, model_dir  # noqa: E402
from tests.fixtures.runtime import calibration_episode, motion_episode, tiny_model_dir  # noqa: E402


def _frame(seed: int, query: str = "") -> np.ndarray:
    cam = open_camera(f"sim://cell?split=test_all&seed={seed}&drop=0{query}")
    try:
        return cam.read()[0]
    finally:
        cam.close()


@pytest.mark.parametrize("seed", [3, 9])
def test_moved_camera_detected_unmoved_not_even_under_new_lighting(seed: int) -> None:
    ref = _frame(seed)
    for query in ("", "&light=0.6", "&light=1.4"):
        r = compare_frames(ref, _frame(seed, query))
        assert r["valid"], (query, r)
        assert r["shift_frac"] < 0.002
    for query in ("&move_deg=2", "&move_deg=-2&light=0.7", "&tilt_deg=2", "&move_deg=1"):
        r = compare_frames(ref, _frame(seed, query))
        assert not r["valid"], (query, r)
        assert any("shifted" in x for x in r["reasons"])
    r = compare_frames(ref, _frame(seed, "&move_deg=3"))
    assert abs(r["shift_px"][0]) > 4 and abs(r["shift_px"][1]) < 1


@pytest.mark.parametrize("seed", [3, 9])
def test_sensor_noise_and_jpeg_are_not_a_moved_camera(seed: int) -> None:
    # a real camera delivers every frame with its own noise and compression: the reference
    # and the live frame differ everywhere by a few levels, and the camera has not moved
    from export.evaluation.frames import camera_degrade

    ref = _frame(seed)
    for levels, quality in ((3.0, 80), (6.0, 50)):
        r = compare_frames(camera_degrade(ref, levels, quality, seed=1),
                           camera_degrade(ref, levels, quality, seed=2))
        assert r["valid"], (levels, quality, r)
        assert r["shift_frac"] < 0.002
    moved = camera_degrade(_frame(seed, "&move_deg=2"), 3.0, 80, seed=2)
    r = compare_frames(camera_degrade(ref, 3.0, 80, seed=1), moved)
    assert not r["valid"] and any("shifted" in x for x in r["reasons"])


def test_a_covered_camera_or_another_scene_is_no_match_not_a_shift() -> None:
    ref = _frame(3)
    rng = np.random.default_rng(0)
    for live in (np.zeros_like(ref), np.full_like(ref, 128),
                 rng.integers(0, 256, ref.shape).astype(np.uint8), _frame(3, "&point=away")):
        r = compare_frames(ref, live)
        assert not r["valid"] and not r["matched"], r
        assert "does not show the reference's scene" in r["reasons"][0]
        assert not any("shifted" in x for x in r["reasons"])
    assert compare_frames(ref, _frame(3, "&light=0.6"))["matched"]


def test_a_sub_pixel_rotation_or_scale_of_a_small_frame_is_not_a_moved_camera() -> None:
    # a 64x64 reference shifted by half a pixel was fitted as rotated 0.51 deg and scaled
    # 1.36% (0.4 and 0.6 px at the corners): STALE for a camera that had not moved
    import cv2

    from edge.episode import load_episode

    ref = load_episode(Path(__file__).resolve().parent.parent / "samples" / "cell_sample"
                       / "calibration.npz").frames[0]
    h, w = ref.shape[:2]
    half = cv2.warpAffine(ref, np.float32([[1, 0, 0.5], [0, 1, 0]]), (w, h),
                          borderMode=cv2.BORDER_REPLICATE)
    assert compare_frames(ref, half)["valid"]
    far = cv2.warpAffine(ref, np.float32([[1, 0, 3], [0, 1, 0]]), (w, h),
                         borderMode=cv2.BORDER_REPLICATE)
    r = compare_frames(ref, far)
    assert not r["valid"] and any("shifted" in x for x in r["reasons"])
    turned = cv2.warpAffine(ref, cv2.getRotationMatrix2D((w / 2, h / 2), 4.0, 1.0), (w, h),
                            borderMode=cv2.BORDER_REPLICATE)  # 3.2 px at the corners
    assert any("rotated" in x for x in compare_frames(ref, turned)["reasons"])


def test_verify_cli_and_precheck_gate(tmp_path: Path, capsys) -> None:
    model = model_dir()
    sha = model_sha256(model)
    ep = calibration_episode(7, 8, 64, 64, seed=1)
    ref = _frame(3)
    with CalibrationCache(tmp_path / "cache") as cache:
        cache.put(CacheKey("cell-1", "cam-1", "robot-1", sha), ep,
                  np.zeros(json.loads((model / "model.json").read_text())["contract"][
                      "context_shape"], np.float32), {"verdict": "pass"}, ref)
    common = ["--cell", "cell-1", "--model", str(model), "--cache-dir", str(tmp_path / "cache")]
    assert cli("verify", "--camera", "sim://cell?split=test_all&seed=3&light=0.7", *common,
               "--out", str(tmp_path / "ok.json")) == 0
    assert cli("verify", "--camera", "sim://cell?split=test_all&seed=3&move_deg=3", *common,
               "--out", str(tmp_path / "moved.json")) == 1
    moved = json.loads((tmp_path / "moved.json").read_text())
    assert not moved["valid"] and moved["cell_id"] == "cell-1"
    assert "STALE" in capsys.readouterr().out
    # precheck: warn (report carries it) or refuse (exit 2, nothing written)
    tiny = tiny_model_dir()
    from edge.episode import save_episode

    cal = save_episode(calibration_episode(3, 4, 16, 16, seed=1), tmp_path / "cal.npz")
    start = save_episode(motion_episode(3, 6, 16, 16, seed=2), tmp_path / "ep.npz")
    np.save(tmp_path / "acts.npy", np.zeros((1, 3, 3), np.float32))
    (tmp_path / "rules.yaml").write_text("max_step_action: 0.4\n")
    argv = ["--calibration", str(cal), "--start", str(start), "--rules",
            str(tmp_path / "rules.yaml"), "--model", str(tiny), "--threads", "1",
            "--actions", str(tmp_path / "acts.npy")]
    assert run_command("precheck", precheck.register, [
        *argv, "--verification", str(tmp_path / "moved.json"), "--out", str(tmp_path / "w")]) == 0
    rep = json.loads((tmp_path / "w" / "report.json").read_text())
    assert "stale" in rep["calibration_warning"]
    assert run_command("precheck", precheck.register, [
        *argv, "--verification", str(tmp_path / "moved.json"), "--stale", "refuse",
        "--out", str(tmp_path / "r")]) == 2
    assert "camera moved" in capsys.readouterr().err and not (tmp_path / "r").exists()
    assert run_command("precheck", precheck.register, [
        *argv, "--verification", str(tmp_path / "ok.json"), "--stale", "refuse",
        "--out", str(tmp_path / "k")]) == 0
    assert json.loads((tmp_path / "k" / "report.json").read_text())["calibration_warning"] is None


def test_verify_checks_a_still_image_whose_file_ends_within_the_warmup(tmp_path: Path,
                                                                         capsys) -> None:
    import cv2

    model = model_dir()
    sha = model_sha256(model)
    ref = _frame(3)
    with CalibrationCache(tmp_path / "cache") as cache:
        cache.put(CacheKey("cell-1", "cam-1", "robot-1", sha),
                  calibration_episode(7, 8, 64, 64, seed=1),
                  np.zeros(json.loads((model / "model.json").read_text())["contract"][
                      "context_shape"], np.float32), {"verdict": "pass"}, ref)
    common = ["--cell", "cell-1", "--model", str(model), "--cache-dir", str(tmp_path / "cache")]
    still, moved = tmp_path / "still.png", tmp_path / "moved.png"
    cv2.imwrite(str(still), ref[..., ::-1])
    cv2.imwrite(str(moved), np.roll(ref, 4, axis=1)[..., ::-1])
    assert cli("verify", "--camera", str(still), *common) == 0  # default --warmup 5
    captured = capsys.readouterr()
    assert "VALID" in captured.out
    # which cached frame it was compared with (a cell may hold entries of several models)
    assert f"reference: the 128x96 frame cached with cell 'cell-1''s entry for model {sha[:12]}" \
        in captured.out
    assert "the file ended after 1 frame(s), within --warmup 5: checking its last frame" in \
        captured.err
    assert cli("verify", "--camera", str(moved), *common) == 1
    assert "STALE" in capsys.readouterr().out
