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
