"""What simulate and precheck write besides the verdicts: size limits checked before any
work, a video with the truth beside the prediction and labels, sheets that say when rows
were left out, the predicted frames losslessly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edge.cli import main
from edge.commands import precheck, simulate
from edge.commands.common import run_command
from edge.episode import load_episode, save_episode
from tests.fixtures.runtime import calibration_episode, motion_episode, tiny_model_dir

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "cell_sample"
REFERENCE = ["--model", str(ROOT / "models" / "reference"), "--calibration",
             str(SAMPLE / "calibration.npz"), "--threads", "2"]


@pytest.fixture()
def tiny(tmp_path: Path) -> dict[str, Path]:
    cal = save_episode(calibration_episode(3, 4, 16, 16, seed=1), tmp_path / "cal.npz")
    ep = save_episode(motion_episode(3, 7, 16, 16, seed=2), tmp_path / "ep.npz")
    return {"cal": cal, "ep": ep, "tmp": tmp_path, "out": tmp_path / "out"}


def _tiny_argv(f: dict[str, Path], *extra: str) -> list[str]:
    return ["--calibration", str(f["cal"]), "--model", str(tiny_model_dir()), "--threads", "1",
            "--out", str(f["out"]), *extra]


def _decode(path: Path) -> np.ndarray:
    import av

    with av.open(str(path)) as c:
        return np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])


# -- limits: refused before any work ------------------------------------------------------

@pytest.mark.parametrize("shape, match", [
    ((257, 2, 3), r"257 candidates; at most 256"),
    ((1, 257, 3), r"257 steps; at most 256"),
    ((64, 200, 3), r"64 candidates x 200 steps = 12800 predicted frames; at most 8192"),
])
def test_simulate_refuses_past_the_documented_limits(tiny, capsys, shape, match) -> None:
    acts = tiny["tmp"] / "a.npy"
    np.save(acts, np.zeros(shape, np.float32))
    rc = run_command("simulate", simulate.register,
                     _tiny_argv(tiny, "--start", str(tiny["ep"]), "--actions", str(acts)))
    err = capsys.readouterr().err
    assert rc == 2 and f"{acts}: " in err
    import re
    assert re.search(match, err), err
    assert "docs/runtime.md" in err
    assert not tiny["out"].exists()
    from edge.commands.limits import MAX_CANDIDATES, MAX_HORIZON, MAX_PREDICTED_FRAMES

    assert (MAX_CANDIDATES, MAX_HORIZON, MAX_PREDICTED_FRAMES) == (256, 256, 8192)


def test_precheck_policy_horizon_is_limited_before_any_work(tiny, capsys) -> None:
    (tiny["tmp"] / "rules.yaml").write_text("max_step_action: 0.4\n")
    rc = run_command("precheck", precheck.register, [
        *_tiny_argv(tiny, "--start", str(tiny["ep"]), "--rules", str(tiny["tmp"] / "rules.yaml"),
                    "--joint-state", "0,0,0"),
        "--policy", str(tiny["tmp"] / "no-such-policy.onnx"), "--horizon", "300"])
    err = capsys.readouterr().err
    # the horizon is refused first: before the model or the policy is opened
    assert rc == 2 and "--horizon 300: expected 1..256 steps" in err, err
    assert not tiny["out"].exists()


# -- the video ----------------------------------------------------------------------------

def test_simulate_video_puts_the_truth_beside_the_prediction_with_labels(tiny) -> None:
    assert run_command("simulate", simulate.register,
                       _tiny_argv(tiny, "--start", str(tiny["ep"]))) == 0
    m = json.loads((tiny["out"] / "metrics.json").read_text())
    video = m["video"]
    assert video["tiles"] == ["truth", "episode"]
    video_frames = _decode(tiny["out"] / "prediction.mp4")
    assert video_frames.shape[0] == m["horizon"] == 6
    assert list(video_frames.shape[1:3]) == video["size_px"]
    ep = load_episode(tiny["ep"])
    with np.load(tiny["out"] / "prediction.npz", allow_pickle=False) as z:
        pred = z["frames"][0]
    import cv2

    for t in (0, 5):
        pair = {"truth": ep.frames[1 + t], "episode": pred[t]}
        for name, other in (("truth", "episode"), ("episode", "truth")):
            y, x, h, w = video["boxes_px"][video["tiles"].index(name)]
            got = video_frames[t, y:y + h, x:x + w].astype(int)

            def err(img: np.ndarray, h: int = h, w: int = w, got: np.ndarray = got) -> float:
                big = cv2.resize(img, (w, h), interpolation=cv2.INTER_NEAREST).astype(int)
                return float(np.abs(got - big).mean())

            # H.264 (yuv420p) of the tiny model's noisy frames is far from a copy: each tile
            # is nearer its own frame than the other one
            assert err(pair[name]) < 0.8 * err(pair[other]), (t, name)
    # the header band above the tiles carries the step counter: it differs between steps
    band = video["boxes_px"][0][0]
    assert band > 0
    assert np.abs(video_frames[0, :band].astype(int) - video_frames[5, :band]).max() > 100


def test_65_candidates_on_the_shipped_model_write_a_grid_video(tmp_path: Path) -> None:
    acts = tmp_path / "a.npy"
    rng = np.random.default_rng(0)
    np.save(acts, rng.uniform(-0.05, 0.05, (65, 2, 7)).astype(np.float32))
    out = tmp_path / "o"
    assert main(["simulate", *REFERENCE, "--start", str(SAMPLE / "test.npz"), "--actions",
                 str(acts), "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    h, w = m["video"]["size_px"]
    assert w <= 2048 and h <= 2048 and len(m["video"]["tiles"]) == 65
    assert _decode(out / "prediction.mp4").shape[1:3] == (h, w)


# -- sheets say when rows were left out ---------------------------------------------------

def test_sheets_say_how_many_rows_they_show(tiny) -> None:
    acts = tiny["tmp"] / "a.npy"
    np.save(acts, np.zeros((20, 3, 3), np.float32))
    assert run_command("simulate", simulate.register,
                       _tiny_argv(tiny, "--start", str(tiny["ep"]), "--actions", str(acts))) == 0
    m = json.loads((tiny["out"] / "metrics.json").read_text())
    assert m["contact_sheet"] == {"candidates_shown": 16, "candidates": 20,
                                  "note": "16 of 20 candidates shown (the first 16); every "
                                          "candidate is in prediction.npz"}
    (tiny["tmp"] / "rules.yaml").write_text("max_step_action: 0.4\n")
    out2 = tiny["tmp"] / "pc"
    rc = run_command("precheck", precheck.register, [
        "--calibration", str(tiny["cal"]), "--model", str(tiny_model_dir()), "--threads", "1",
        "--start", str(tiny["ep"]), "--rules", str(tiny["tmp"] / "rules.yaml"), "--actions",
        str(acts), "--out", str(out2)])
    assert rc == 0
    rep = json.loads((out2 / "report.json").read_text())
    assert rep["report_png"] == {"candidates_shown": 16, "candidates": 20,
                                 "note": "16 of 20 candidates shown (ranks 1-16); every "
                                         "verdict is in report.json"}


def test_precheck_writes_the_predicted_frames_losslessly(tiny) -> None:
    acts = tiny["tmp"] / "a.npy"
    a = np.zeros((2, 3, 3), np.float32)
    a[1, :, 0] = 0.1
    np.save(acts, a)
    (tiny["tmp"] / "rules.yaml").write_text("max_step_action: 0.4\n")
    rc = run_command("precheck", precheck.register, [
        *_tiny_argv(tiny, "--start", str(tiny["ep"]), "--rules", str(tiny["tmp"] / "rules.yaml")),
        "--actions", str(acts)])
    assert rc == 0
    with np.load(tiny["out"] / "prediction.npz", allow_pickle=False) as z:
        frames, times, names = z["frames"], z["step_times_s"], z["candidate_names"]
    assert frames.dtype == np.uint8 and frames.shape == (2, 3, 16, 16, 3)
    assert list(names) == ["candidate-0", "candidate-1"]
    assert np.allclose(times, np.arange(1, 4) / 10.0)
    from edge.runtime.context import encode_calibration
    from edge.runtime.model import load_model
    from edge.runtime.rollout import Rollout

    m = load_model(tiny_model_dir(), intra_op_num_threads=1)
    try:
        ctx = encode_calibration(m, load_episode(tiny["cal"]))
        want = Rollout(m, ctx, max_horizon=3, max_candidates=2).run(
            load_episode(tiny["ep"]).frames[0], a)
    finally:
        m.deactivate()
    assert np.array_equal(frames, want)


# -- which model ran ----------------------------------------------------------------------

def test_simulate_and_precheck_name_the_model_and_the_bundle_slot_that_ran(
        tiny, monkeypatch, capsys) -> None:
    import shutil

    home = tiny["tmp"] / "home"
    shutil.copytree(tiny_model_dir(), home / "bundles" / "b")
    (home / "bundles" / "active").symlink_to("b")
    monkeypatch.setenv("SYNCEDGE_HOME", str(home))
    argv = _tiny_argv(tiny, "--start", str(tiny["ep"]))
    del argv[argv.index("--model"):argv.index("--model") + 2]  # the active bundle
    assert run_command("simulate", simulate.register, argv) == 0
    printed = capsys.readouterr().out
    m = json.loads((tiny["out"] / "metrics.json").read_text())
    from edge.manifest import model_sha256

    sha = model_sha256(home / "bundles" / "b")
    assert m["model_id"] == {"name": "tiny-synthetic", "variant": "fp32", "sha256": sha,
                             "bundle_slot": "b",
                             "folder": str(home / "bundles" / "active")}
    assert f"model tiny-synthetic fp32 {sha[:12]} from bundle slot b" in printed
    # a model folder given with --model is no bundle slot
    assert run_command("simulate", simulate.register,
                       _tiny_argv(tiny, "--start", str(tiny["ep"]))) == 0
    m = json.loads((tiny["out"] / "metrics.json").read_text())
    assert m["model_id"]["bundle_slot"] is None
    assert "(not an installed bundle)" in capsys.readouterr().out
    (tiny["tmp"] / "rules.yaml").write_text("max_step_action: 0.4\n")
    argv = [*_tiny_argv(tiny, "--start", str(tiny["ep"]), "--rules",
                        str(tiny["tmp"] / "rules.yaml"), "--joint-state", "0,0,0"),
            "--actions", str(tiny["ep"])]
    del argv[argv.index("--model"):argv.index("--model") + 2]
    argv[argv.index("--out") + 1] = str(tiny["tmp"] / "pre")  # not simulate's folder
    assert run_command("precheck", precheck.register, argv) == 0
    rep = json.loads((tiny["tmp"] / "pre" / "report.json").read_text())
    assert rep["model_id"]["bundle_slot"] == "b" and rep["model_id"]["sha256"] == sha


def test_a_grid_too_large_for_h264_is_refused_before_any_rollout() -> None:
    from edge.errors import EdgeError
    from edge.visual import video_layout

    with pytest.raises(EdgeError, match=r"H.264 takes at most 16384 px a side"):
        video_layout([f"c{i}" for i in range(256)], (1024, 1024), truth=False)
