"""``syncedge simulate`` through its ``register`` function: outputs, --cell, bad inputs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from edge.commands import simulate
from edge.commands.common import run_command
from edge.episode import save_episode
from edge.runtime.context import encode_calibration
from edge.runtime.model import load_model
from edge.visual import write_png
from tests.fixtures.runtime import (
    MemoryContextSource,
    calibration_episode,
    motion_episode,
    tiny_model_dir,
)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="syncedge")
    sub = parser.add_subparsers(dest="command")
    simulate.register(sub)
    return parser.parse_args(["simulate", *argv])


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    cal = save_episode(calibration_episode(3, 4, 16, 16, seed=1), tmp_path / "cal.npz")
    ep = save_episode(motion_episode(3, 7, 16, 16, seed=2), tmp_path / "ep.npz")
    return {"cal": cal, "ep": ep, "model": tiny_model_dir(), "out": tmp_path / "out"}


def _base(f: dict[str, Path]) -> list[str]:
    return ["--calibration", str(f["cal"]), "--model", str(f["model"]), "--threads", "1",
            "--out", str(f["out"])]


def test_simulate_episode_writes_video_sheet_and_metrics(files) -> None:
    args = _parse([*_base(files), "--start", str(files["ep"])])
    assert args.func(args) == 0
    out = files["out"]
    assert sorted(p.name for p in out.iterdir()) == [".syncedge-outputs.json",
                                                     "contact_sheet.png", "metrics.json",
                                                     "prediction.mp4", "prediction.npz"]
    assert json.loads((out / ".syncedge-outputs.json").read_text()) == {
        "command": "syncedge simulate",
        "files": ["prediction.mp4", "prediction.npz", "contact_sheet.png", "metrics.json"]}
    m = json.loads((out / "metrics.json").read_text())
    assert m["horizon"] == 6 and len(m["per_step"]) == 6
    assert {"psnr_db", "ssim", "motion_psnr_db"} <= set(m["per_step"][0])
    # each step names the start episode's frame it is compared with (the sheet's t1 ...)
    assert [(p["step"], p["frame"]) for p in m["per_step"]] == [(k, k + 1) for k in range(6)]
    assert m["model_sha256"] and m["timings_s"]["first_frame"] > 0
    assert not list(out.parent.glob(".out.staging-*"))
    args = _parse([*_base(files), "--start", str(files["ep"]), "--backend", "auto"])
    assert args.func(args) == 0  # auto resolves to the CPU here; the report says which
    m = json.loads((out / "metrics.json").read_text())
    assert (m["backend"], m["backend_requested"]) == ("cpu", "auto")


def test_simulate_frame_with_actions_and_cell_context(files, tmp_path: Path) -> None:
    model = load_model(files["model"], intra_op_num_threads=1)
    src = MemoryContextSource()
    ctx = encode_calibration(model, calibration_episode(3, 4, 16, 16, seed=1))
    src.put("cell-9", "cam-9", "rob-9", model.sha256, ctx.values)
    model.deactivate()
    frame = tmp_path / "start.png"
    write_png(frame, np.full((16, 16, 3), 90, np.uint8))
    acts = tmp_path / "a.json"
    acts.write_text(json.dumps({"candidates": np.zeros((2, 3, 3)).tolist(),
                                "names": ["still", "also-still"]}))
    args = _parse(["--cell", "cell-9", "--camera-id", "cam-9", "--robot-id", "rob-9",
                   "--model", str(files["model"]), "--out", str(files["out"]), "--start",
                   str(frame), "--actions", str(acts)])
    assert simulate.run(args, context_source=src) == 0
    m = json.loads((files["out"] / "metrics.json").read_text())
    assert m["candidates"] == 2 and m["per_step"] is None and m["context"] == "cache:cell-9"
    args = _parse(["--cell", "other", "--camera-id", "c", "--robot-id", "r", "--model",
                   str(files["model"]), "--out", str(tmp_path / "o2"), "--start", str(frame),
                   "--actions", str(acts)])
    with pytest.raises(Exception, match="no context for cell 'other'"):
        simulate.run(args, context_source=src)
    assert not (tmp_path / "o2").exists()


def _bad_case(files, tmp_path: Path, case: str) -> list[str]:
    start = str(files["ep"])
    if case == "width":
        np.save(tmp_path / "a.npy", np.zeros((4, 5), np.float32))
        return ["--start", start, "--actions", str(tmp_path / "a.npy")]
    if case == "nan":
        a = np.zeros((4, 3), np.float32)
        a[2, 1] = np.nan
        np.save(tmp_path / "a.npy", a)
        return ["--start", start, "--actions", str(tmp_path / "a.npy")]
    if case == "inf":
        (tmp_path / "a.csv").write_text("j0,j1,j2\n0,0,0\n0,inf,0\n")
        return ["--start", start, "--actions", str(tmp_path / "a.csv")]
    if case == "semicolons":
        (tmp_path / "a.csv").write_text("j0;j1;j2\n0;0;0\n0;0.1;0\n")
        return ["--start", start, "--actions", str(tmp_path / "a.csv")]
    if case == "frame":
        write_png(tmp_path / "s.png", np.zeros((8, 8, 3), np.uint8))
        np.save(tmp_path / "a.npy", np.zeros((4, 3), np.float32))
        return ["--start", str(tmp_path / "s.png"), "--actions", str(tmp_path / "a.npy")]
    if case == "no_actions":
        np.save(tmp_path / "s.npy", np.zeros((16, 16, 3), np.uint8))
        return ["--start", str(tmp_path / "s.npy")]
    if case == "missing_png":
        np.save(tmp_path / "a.npy", np.zeros((4, 3), np.float32))
        return ["--start", str(tmp_path / "nowhere.png"), "--actions", str(tmp_path / "a.npy")]
    if case == "calibration_size":
        save_episode(calibration_episode(3, 4, 8, 8), tmp_path / "small.npz")
        return ["--start", start, "--calibration", str(tmp_path / "small.npz")]
    if case == "empty_start":
        (tmp_path / "s.npy").write_bytes(b"")
        np.save(tmp_path / "a.npy", np.zeros((4, 3), np.float32))
        return ["--start", str(tmp_path / "s.npy"), "--actions", str(tmp_path / "a.npy")]
    raise AssertionError(case)


@pytest.mark.parametrize("case, match", [
    ("width", r"a.npy: expected 3 action channels .* found 5"),
    ("nan", r"a.npy: expected finite actions, found nan at \[candidate, step, channel\] = "
            r"\[0, 2, 1\]"),
    ("inf", r"a.csv: expected finite actions, found inf"),
    ("semicolons", r"a.csv: the values are separated by semicolons; expected "
                   r"comma-separated values"),
    ("frame", r"s.png: expected a start frame 16 px wide and 16 high .*found an image 8 "
              r"wide and 8 high; an image smaller than the model's frame is not enlarged"),
    ("empty_start", r"s.npy: an empty file; expected a uint8 \[H, W, 3\] RGB image"),
    ("no_actions", r"--actions: required"),
    ("missing_png", r"nowhere.png: no such image file"),
    ("calibration_size", r"small.npz: calibration frames are 8x8; the model takes 16x16"),
])
def test_bad_inputs_exit_2_and_write_nothing(files, tmp_path: Path, capsys, case: str,
                                             match: str) -> None:
    argv = _bad_case(files, tmp_path, case)
    base = _base(files)
    if "--calibration" in argv:
        base = base[2:]
    rc = run_command("simulate", simulate.register, [*base, *argv])
    assert rc == 2
    err = capsys.readouterr().err
    assert "syncedge simulate: error:" in err
    import re
    assert re.search(match, err), err
    assert not files["out"].exists()
    assert not list(files["out"].parent.glob(".out.staging-*"))


def test_model_with_altered_graph_is_refused(files, tmp_path: Path, capsys) -> None:
    import shutil

    bad = tmp_path / "model"
    shutil.copytree(files["model"], bad)
    with open(bad / "step_b1.onnx", "ab") as f:
        f.write(b"\0")
    base = _base(files)
    base[base.index("--model") + 1] = str(bad)
    assert run_command("simulate", simulate.register, [*base, "--start", str(files["ep"])]) == 2
    assert "step_b1.onnx: sha256" in capsys.readouterr().err
    assert not files["out"].exists()


def test_a_cached_context_the_model_cannot_read_is_named_not_called_missing(
        files, tmp_path: Path) -> None:
    """A cached context of another shape is said as such, not as 'no context' beside a
    list of cached models that holds this very model."""
    from edge.cache.store import CalibrationCache
    from edge.cache.values import CacheKey
    from edge.runtime.errors import ContextMismatchError

    model = load_model(files["model"], intra_op_num_threads=1)
    sha = model.sha256
    model.deactivate()
    cal = calibration_episode(3, 4, 16, 16, seed=1)
    frame = tmp_path / "start.png"
    write_png(frame, np.full((16, 16, 3), 90, np.uint8))
    acts = tmp_path / "a.json"
    acts.write_text(json.dumps({"candidates": np.zeros((1, 2, 3)).tolist()}))
    with CalibrationCache(tmp_path / "cache") as cache:
        cache.put(CacheKey("cell-1", "cam-1", "robot-1", sha), cal,
                  np.ones((2, 3), np.float32), {"verdict": "pass"}, cal.frames[0])
        args = _parse(["--cell", "cell-1", "--camera-id", "cam-1", "--robot-id", "robot-1",
                       "--model", str(files["model"]), "--out", str(files["out"]),
                       "--start", str(frame), "--actions", str(acts)])
        with pytest.raises(ContextMismatchError, match=r"expected float32 \[.*found") as err:
            simulate.run(args, context_source=cache)
    assert "no context" not in str(err.value)
    assert not files["out"].exists()


def test_a_start_episode_at_the_camera_s_size_is_fitted_as_a_recording_is(files, tmp_path,
                                                                          capsys) -> None:
    """An imported episode keeps the camera's frame size: its frames are centre-cropped and
    area-resized to the model's, as 'calibrate validate' and a recording do, and stay the
    ground truth (it used to be refused, with advice to save its first frame as a PNG,
    which loses the truth)."""
    from edge.calibrate.camera import fit_frame
    from edge.episode import load_episode

    small = load_episode(files["ep"])
    big = motion_episode(3, 7, 24, 32, seed=2)  # 4:3, the camera's size
    save_episode(big, tmp_path / "big.npz")
    rc = run_command("simulate", simulate.register,
                     [*_base(files), "--start", str(tmp_path / "big.npz")])
    assert rc == 0
    assert "big.npz: frames of 32x24 px centre-cropped and resized to the model's 16x16" in \
        capsys.readouterr().err
    m = json.loads((files["out"] / "metrics.json").read_text())
    assert m["horizon"] == small.num_frames - 1 == len(m["per_step"])
    # the report says it too: the figures are at the model's size, not the recording's
    assert any("frames of 32x24 px centre-cropped and resized to the model's 16x16" in w
               and "not at the recorded size" in w for w in m["warnings"])
    with np.load(files["out"] / "prediction.npz") as z:
        assert z["frames"].shape[2:] == (16, 16, 3)
    # the start is the first frame fitted as the recorder fits it
    from edge.runtime.inputs import load_start
    start, ep = load_start(tmp_path / "big.npz", (16, 16))
    assert np.array_equal(start, fit_frame(big.frames[0], (16, 16)))
    assert ep.frames.shape == (big.num_frames, 16, 16, 3) and ep.robot_mask is None


def test_a_start_image_at_a_whole_multiple_of_the_model_s_size_is_reduced_by_area(
        tmp_path: Path) -> None:
    """A frame saved from the camera of a model run on a reduced grid (a chain read from a
    256x256 recording runs at 64x64) is taken as the episode's frames are: reduced by area,
    nothing cropped, no warning. Another factor per axis or a smaller image stays refused."""
    import cv2

    from edge.runtime.errors import RuntimeInputError
    from edge.runtime.inputs import load_start

    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (64, 64, 3), np.uint8)
    cv2.imwrite(str(tmp_path / "cam.png"), img[..., ::-1])
    start, ep = load_start(tmp_path / "cam.png", (16, 16))
    assert ep is None and start.shape == (16, 16, 3)
    assert np.array_equal(start, cv2.resize(img, (16, 16), interpolation=cv2.INTER_AREA))
    for shape in ((8, 8, 3), (8, 64, 3), (64, 12, 3)):  # smaller in a direction: refused
        np.save(tmp_path / "other.npy", np.zeros(shape, np.uint8))
        with pytest.raises(RuntimeInputError, match="expected a start frame 16 px wide"):
            load_start(tmp_path / "other.npy", (16, 16))
    # larger, not a whole multiple (a camera's 424x240 frame): centre-cropped and resized
    # as a recording is, and said
    from edge.calibrate.camera import fit_frame

    for shape in ((64, 32, 3), (48, 64, 3), (24, 24, 3)):
        img = rng.integers(0, 256, shape, np.uint8)
        np.save(tmp_path / "other.npy", img)
        notes: list[str] = []
        start, _ = load_start(tmp_path / "other.npy", (16, 16), notes)
        assert np.array_equal(start, fit_frame(img, (16, 16)))
        (note,) = notes
        assert f"an image of {shape[1]}x{shape[0]} px centre-cropped and resized" in note
