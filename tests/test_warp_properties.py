"""Properties of the shipped warp model that hold in its exported ONNX graphs, run through
the product's runtime (ONNX Runtime CPU, the rollout loop): zero actions give the start
frame back, tiny actions stay near it, relabelling the controller's channels changes
nothing, and a context read back from the calibration cache gives the same frames as a
freshly encoded one."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from edge.cache.store import CacheKey, CalibrationCache
from edge.episode import load_episode
from edge.metrics import psnr
from edge.runtime.calibration_input import CalibrationInputError
from edge.runtime.context import CalibrationContext, encode_calibration
from edge.runtime.model import load_model
from edge.runtime.rollout import Rollout

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "reference"
SAMPLE = ROOT / "samples" / "cell_sample"


@pytest.fixture(scope="module")
def model():
    m = load_model(MODEL, intra_op_num_threads=1)
    assert m.contract.family == "warp" and m.contract.warping == "decoder_graph"
    yield m
    m.deactivate()


@pytest.fixture(scope="module")
def calibration():
    return load_episode(SAMPLE / "calibration.npz")


@pytest.fixture(scope="module")
def start():
    return load_episode(SAMPLE / "test.npz").frames[0]


def _run(model, ctx, start, actions):
    r = Rollout(model, ctx, max_horizon=actions.shape[1], max_candidates=actions.shape[0])
    return r.run(start, actions)


def test_zero_actions_reproduce_the_start_frame_at_every_step(model, calibration, start):
    ctx = encode_calibration(model, calibration)
    frames = _run(model, ctx, start, np.zeros((2, 16, 7), np.float32))
    diff = np.abs(frames.astype(int) - start.astype(int)[None, None])
    assert diff.max() <= 1, f"max abs difference {diff.max()} at step " \
                            f"{int(np.argmax(diff.reshape(2, 16, -1).max(-1).max(0)))}"


def test_tiny_actions_stay_above_40_db(model, calibration, start):
    ctx = encode_calibration(model, calibration)
    acts = np.full((1, 16, 7), 1e-4, np.float32)
    acts[0, :, 1::2] *= -1
    frames = _run(model, ctx, start, acts)[0]
    worst = min(psnr(f, start) for f in frames)
    assert worst > 40.0, worst


def test_real_actions_move_pixels(model, calibration, start):
    """The zero-action test above must be able to fail: real actions change the frame."""
    ctx = encode_calibration(model, calibration)
    acts = load_episode(SAMPLE / "test.npz").actions[None, :16]
    frames = _run(model, ctx, start, acts)[0]
    assert np.abs(frames[-1].astype(int) - start.astype(int)).max() > 20


def test_relabelled_calibration_and_actions_give_the_same_frames(model, calibration, start):
    rng = np.random.default_rng(4)
    n = calibration.num_dof
    perm = rng.permutation(n)
    signs = np.where(rng.random(n) < 0.5, -1.0, 1.0).astype(np.float32)
    signs[0] = -1.0
    relabelled = dataclasses.replace(
        calibration, actions=(calibration.actions[:, perm] * signs).astype(np.float32),
        metadata=dataclasses.replace(calibration.metadata,
                                     dof_names=tuple(calibration.metadata.dof_names[p]
                                                     for p in perm), segments=()))
    acts = load_episode(SAMPLE / "test.npz").actions[:16].astype(np.float32)
    a = _run(model, encode_calibration(model, calibration), start, acts[None])[0]
    b = _run(model, encode_calibration(model, relabelled), start,
             (acts[:, perm] * signs)[None])[0]
    assert np.abs(a.astype(int) - b.astype(int)).max() <= 1
    # the same relabelling applied to the actions alone does change the frames
    c = _run(model, encode_calibration(model, calibration), start,
             (acts[:, perm] * signs)[None])[0]
    assert np.abs(a.astype(int) - c.astype(int)).max() > 20


def test_cached_context_gives_the_same_frames_as_a_fresh_one(model, calibration, start,
                                                             tmp_path):
    fresh = encode_calibration(model, calibration)
    md = calibration.metadata
    key = CacheKey(md.cell_id, md.camera_id, md.robot_id, model.sha256)
    with CalibrationCache(tmp_path / "cache") as cache:
        cache.put(key, calibration, fresh.values, {"verdict": "pass"}, calibration.frames[0])
        values = cache.get_context(md.cell_id, md.camera_id, md.robot_id, model.sha256)
    assert values is not None
    cached = CalibrationContext(values=values, model_sha256=model.sha256,
                                num_dof=calibration.num_dof, source="cache")
    acts = load_episode(SAMPLE / "test.npz").actions[None, :16]
    assert np.array_equal(_run(model, fresh, start, acts), _run(model, cached, start, acts))


def test_a_sweep_outside_the_accepted_amplitudes_is_refused_naming_the_dof(model,
                                                                          calibration):
    lo, hi = model.contract.calibration_amplitude_rad
    big = dataclasses.replace(calibration, actions=(calibration.actions * (1.05 * hi / 0.46))
                              .astype(np.float32))
    with pytest.raises(CalibrationInputError, match=r"DoF '\w+' swept .* rad.*; this model "
                                                    r"accepts sweeps of") as exc:
        encode_calibration(model, big)
    named = [n for n in calibration.metadata.dof_names if f"'{n}'" in str(exc.value)]
    assert len(named) >= 2, str(exc.value)  # every DoF outside the range, not the first


HISTORY = ROOT / "models" / "reference-history"


def test_history_mode_runs_without_a_calibration_and_says_so(tmp_path, capsys):
    from edge.cli import main

    args = ["--start", str(SAMPLE / "test.npz"), "--out", str(tmp_path / "h")]
    assert main(["simulate", "--model", str(HISTORY), *args]) == 0
    err = capsys.readouterr().err
    assert "history mode: no calibration" in err
    assert (tmp_path / "h" / "metrics.json").is_file()
    assert main(["simulate", "--model", str(MODEL), *args]) == 2
    assert "--model models/reference-history" in capsys.readouterr().err
    # a calibration given to a history-mode model is said to be ignored, not silently used
    assert main(["simulate", "--model", str(HISTORY), "--calibration",
                 str(SAMPLE / "calibration.npz"), *args[:2], "--out", str(tmp_path / "h2")]) == 0
    assert "is ignored" in capsys.readouterr().err


def test_history_mode_zero_actions_reproduce_the_start_frame(start):
    from edge.commands.common import history_context

    m = load_model(HISTORY, intra_op_num_threads=1)
    try:
        assert m.contract.calibration_mode == "history"
        ctx = history_context(m, 7)
        frames = _run(m, ctx, start, np.zeros((1, 16, 7), np.float32))
        assert np.abs(frames.astype(int) - start.astype(int)[None, None]).max() <= 1
    finally:
        m.deactivate()
