"""The chain anchored at a rollout's start frame (``export.models.chain_fit.
anchor_chain_to_start``; ``simulate``/``precheck --chain ... --anchor``), on the synthetic
two-link arm of ``test_chain_fit``."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from export.models.chain_fit import ChainFit, as_calibration, chain_positions
from tests.test_chain_fit import SIZE, C, F, TwoLinkArm, _render_sweep, _two_link_episodes

#: A start pose far from home with both joints turned (the sweep turns one at a time).
START_Q = np.array([0.45, -0.35])


@pytest.fixture(scope="module")
def tilted():
    """The arm, its calibration episode (sweep frames at 128x128), a chain of the arm's
    true geometry with its axes tilted (~27 deg) and pivots moved, and the start frame at
    ``START_Q`` on the 32x32 grid."""
    arm = TwoLinkArm()
    q, _ = arm.sweep()
    frames = _render_sweep(arm, q, 4)
    cal, _ = _two_link_episodes(arm, q, frames, q[:3], frames[:3])
    z = arm.points[:, 2]
    scale = float(np.median(z))  # the chain's depth unit: the median arm depth
    tilt = arm.axes * arm.signs[:, None] + np.array([[0.0, 0.5, 0.0], [0.0, 0.0, -0.5]])
    off = ChainFit(arm.robot, z / scale, tilt / np.linalg.norm(tilt, axis=1, keepdims=True),
                   (arm.pivots + np.array([0.1, -0.1, 0.0])) / scale,
                   np.stack([np.ones(len(z)), (arm.link == 1).astype(float)]), np.ones(2),
                   F, C.copy(), np.zeros(2))
    home = frames[0].reshape(SIZE, 4, SIZE, 4, 3).mean((1, 3)).round().astype(np.uint8)
    chain = as_calibration(off, home, q[0], None, ["shoulder", "elbow"], {"read": "test"})
    start = _render_sweep(arm, START_Q[None], 4)[0]
    start = start.reshape(SIZE, 4, SIZE, 4, 3).mean((1, 3)).round().astype(np.uint8)
    return arm, cal, chain, start


def _error_at(arm: TwoLinkArm, chain, qq) -> float:
    """Mean distance (px) between where the chain and the true arm put the arm's pixels."""
    from export.models.chain_fit import fit_of_calibration

    uv, _ = chain_positions(fit_of_calibration(chain), np.asarray(qq, float)[None])
    return float(np.linalg.norm(uv[0] - arm.positions(np.asarray(qq, float)), axis=1).mean())


def test_anchoring_puts_the_arm_where_the_start_frame_shows_it(tilted):
    """Anchored at a start frame with both joints turned, the chain puts the arm's pixels
    at the start pose (and at poses near it) much nearer where the true chain does; the
    home frame, channels and provenance are kept and the start is recorded."""
    from edge.runtime.chain import frames_sha256
    from export.models.chain_fit import anchor_chain_to_start

    arm, cal, chain, start = tilted
    lines: list[str] = []
    anchored = anchor_chain_to_start(chain, cal, start, START_Q, photometric_size=64,
                                     steps=(60, 60), blur_px=(2.0, 1.0), log=lines.append)
    # 0.76 px -> 0.42 px at the start pose, 0.99 -> 0.53 a step of 0.1 rad per joint on
    before, after = _error_at(arm, chain, START_Q), _error_at(arm, anchored, START_Q)
    assert after < 0.7 * before, (before, after)
    near = START_Q + np.array([0.1, -0.1])  # the first steps of a rollout from the start
    assert _error_at(arm, anchored, near) < 0.7 * _error_at(arm, chain, near)
    assert _error_at(arm, anchored, np.zeros(2)) < 1e-9  # home stays home
    assert anchored.dof_names == ["shoulder", "elbow"]
    assert np.array_equal(anchored.home_frame, chain.home_frame)
    assert anchored.info["read"] == "test"
    record = anchored.info["anchor"]
    assert record["start_sha256"] == frames_sha256(start[None])
    assert record["start_joint_positions"] == pytest.approx(START_Q.tolist())
    assert record["copies"] == 8 and record["seconds"] >= 0
    assert "anchor" not in chain.info  # the chain given is not touched
    assert any("anchor" in line for line in lines)


def test_anchoring_refuses_inputs_it_cannot_use(tilted):
    """A start frame off the chain's grid, readings of other channels or not finite, a
    photometric size off the grid, no copies, a calibration of other channels: ValueError
    naming the field."""
    from export.models.chain_fit import anchor_chain_to_start

    _, cal, chain, start = tilted
    kw = {"photometric_size": 64, "steps": (1,), "blur_px": (1.0,)}
    with pytest.raises(ValueError, match=r"start frame: expected uint8 \[32, 32, 3\]"):
        anchor_chain_to_start(chain, cal, np.zeros((64, 64, 3), np.uint8), START_Q, **kw)
    with pytest.raises(ValueError, match="start joint readings: expected 2 finite"):
        anchor_chain_to_start(chain, cal, start, np.zeros(3), **kw)
    with pytest.raises(ValueError, match="start joint readings"):
        anchor_chain_to_start(chain, cal, start, np.array([np.nan, 0.0]), **kw)
    with pytest.raises(ValueError, match="photometric size 48"):
        anchor_chain_to_start(chain, cal, start, START_Q, **{**kw, "photometric_size": 48})
    with pytest.raises(ValueError, match="copies 0"):
        anchor_chain_to_start(chain, cal, start, START_Q, copies=0, **kw)
    other = dataclasses.replace(cal, metadata=dataclasses.replace(
        cal.metadata, dof_names=("elbow", "shoulder"),
        segments=tuple(dataclasses.replace(s, dof={"shoulder": "elbow", "elbow": "shoulder"}[
            s.dof]) for s in cal.metadata.segments)))
    with pytest.raises(ValueError, match="dof_names"):
        anchor_chain_to_start(chain, other, start, START_Q, **kw)


def _start_episode(cal, start: np.ndarray, q: np.ndarray):
    """A motion episode of 4 frames from ``start`` at readings ``q`` (its own actions
    zero)."""
    from edge.episode import Episode

    return Episode(np.repeat(start[None], 4, 0), np.zeros((4, 2), np.float32),
                   np.arange(4) / 10.0, dataclasses.replace(cal.metadata, kind="motion",
                                                            segments=()),
                   joint_positions=np.repeat(q[None], 4, 0))


def _cached_cell(tilted, tmp_path):
    """``(cache folder, start episode path)``: the tilted chain and its calibration episode
    stored as cell ``two-link``'s chain entry, and a start episode at ``START_Q``."""
    from edge.cache.store import CalibrationCache
    from edge.cache.values import CacheKey
    from edge.episode import save_episode
    from edge.runtime.chain import CHAIN_MODEL_SHA256

    _, cal, chain, start = tilted
    cache = tmp_path / "cache"
    with CalibrationCache(cache) as c:
        c.put(CacheKey("two-link", "cam", "arm", CHAIN_MODEL_SHA256), cal, chain,
              {"stored": {"model": "chain"}}, chain.home_frame)
    return cache, save_episode(_start_episode(cal, start, START_Q), tmp_path / "start.npz")


def test_simulate_anchor_runs_the_anchored_chain_and_says_so(tilted, tmp_path, capsys,
                                                            monkeypatch):
    """``simulate --chain FILE --anchor CAL``: the rollout runs from the chain anchored at
    the start, metrics.json says so and records the anchor; ``--anchor`` alone with a
    chain FILE, ``--anchor`` with another calibration episode, with a missing file and
    without the chain model are refused (exit 2) before any work."""
    import export.models.chain_fit as chain_fit
    from edge.cli import main
    from edge.episode import save_episode
    from edge.runtime.chain import chain_rollout, frames_sha256, save_chain_calibration

    monkeypatch.setattr(chain_fit, "MOTION_REFINE_STEPS", (20,))  # a short refinement
    monkeypatch.setattr(chain_fit, "MOTION_REFINE_BLUR_PX", (1.0,))
    _, cal, chain, start = tilted
    chain_path = save_chain_calibration(tmp_path / "chain.npz", chain)
    cal_path = save_episode(cal, tmp_path / "cal.npz")
    start_path = save_episode(_start_episode(cal, start, START_Q), tmp_path / "start.npz")
    base = ["simulate", "--chain", str(chain_path), "--start", str(start_path)]
    assert main([*base, "--anchor", str(cal_path), "--out", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert "anchoring the chain at the start frame" in err and "anchored in" in err
    metrics = json.loads((tmp_path / "a" / "metrics.json").read_text())
    assert metrics["context"].endswith("anchored at the start frame")
    assert metrics["chain"]["anchor"]["start_joint_positions"] == pytest.approx(
        START_Q.tolist())
    assert metrics["chain"]["anchor"]["episode"] == str(cal_path)  # which episode, and its
    assert metrics["chain"]["anchor"]["episode_frames_sha256"] == frames_sha256(cal.frames)
    # zero actions (the start episode's own) still give the start frame exactly
    pred = np.load(tmp_path / "a" / "prediction.npz")["frames"]
    assert np.array_equal(pred[0], np.repeat(start[None], 3, 0))
    assert np.array_equal(pred[0], chain_rollout(chain, start, START_Q, np.zeros((3, 2))))

    assert main([*base, "--anchor", "--out", str(tmp_path / "b")]) == 2
    assert "give the calibration episode that chain was read from" in capsys.readouterr().err
    moved = dataclasses.replace(cal, frames=np.ascontiguousarray(cal.frames[:, ::-1]))
    moved_path = save_episode(moved, tmp_path / "other.npz")
    assert main([*base, "--anchor", str(moved_path), "--out", str(tmp_path / "c")]) == 2
    assert "differs from the chain's home_frame" in capsys.readouterr().err
    assert main([*base, "--anchor", str(tmp_path / "none.npz"),
                 "--out", str(tmp_path / "d")]) == 2
    assert "--anchor: " in (err := capsys.readouterr().err) and "none.npz" in err
    assert main([*base, "--anchor", str(tmp_path), "--out", str(tmp_path / "d")]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert main(["simulate", "--model", "models/reference", "--start", str(start_path),
                 "--anchor", str(cal_path), "--out", str(tmp_path / "e")]) == 2
    assert "--anchor: only with --chain" in capsys.readouterr().err
    assert not any((tmp_path / d).exists() for d in "bcde")


def test_precheck_anchor_takes_the_cached_calibration_episode(tilted, tmp_path, capsys,
                                                              monkeypatch):
    """``precheck --cell ID --chain --anchor``: the chain and its calibration episode from
    the cache, anchored at the start before the verdicts; the report says so."""
    import export.models.chain_fit as chain_fit
    from edge.cli import main

    monkeypatch.setattr(chain_fit, "MOTION_REFINE_STEPS", (20,))
    monkeypatch.setattr(chain_fit, "MOTION_REFINE_BLUR_PX", (1.0,))
    _, cal, chain, start = tilted
    cache, start_path = _cached_cell(tilted, tmp_path)
    actions = np.zeros((2, 3, 2), np.float32)
    actions[1, :, 0] = 0.05
    np.save(tmp_path / "cands.npy", actions)
    (tmp_path / "rules.yaml").write_text("max_step_action: 0.1\n")
    assert main(["precheck", "--cell", "two-link", "--chain", "--anchor",
                 "--cache-dir", str(cache), "--start", str(start_path),
                 "--actions", str(tmp_path / "cands.npy"), "--rules",
                 str(tmp_path / "rules.yaml"), "--out", str(tmp_path / "p")]) == 0
    assert "anchoring the chain at the start frame with cache:two-link/cam/arm" in \
        capsys.readouterr().err
    report = json.loads((tmp_path / "p" / "report.json").read_text())
    assert "anchored at the start frame" in json.dumps(report)
    assert report["start_agreement"]["anchored"] is True
    assert report["start_agreement"]["why"] == "--anchor"


def test_a_chain_from_the_cache_is_anchored_when_it_misplaces_the_arm_at_the_start(
        tilted, tmp_path, capsys, monkeypatch):
    """Without --anchor or --no-anchor: a start agreement below AUTO_ANCHOR_BELOW anchors
    a cached chain (its episode at hand) and says why; a chain file is only noted, naming
    --anchor EPISODE; --no-anchor keeps the chain as read; one still below
    LOW_START_AGREEMENT is warned about in the report. The agreement measure itself is
    tested on drawn frames in test_chain_runtime; here it is set, to test the decision."""
    import edge.runtime.chain as runtime_chain
    import export.models.chain_fit as chain_fit
    from edge.cli import main
    from edge.runtime.chain import (
        AUTO_ANCHOR_BELOW,
        LOW_START_AGREEMENT,
        save_chain_calibration,
    )

    monkeypatch.setattr(chain_fit, "MOTION_REFINE_STEPS", (20,))
    monkeypatch.setattr(chain_fit, "MOTION_REFINE_BLUR_PX", (1.0,))
    shares = {"before": 0.3, "after": 0.3}

    def agreement(chain, start, q0, change=30.0):
        share = shares["after" if "anchor" in chain.info else "before"]
        return {"arm_on_arm": share, "arm_drawn": 0.5, "judged_px": 100, "differs_px": 120}

    monkeypatch.setattr(runtime_chain, "start_agreement", agreement)
    _, cal, chain, start = tilted
    cache, start_path = _cached_cell(tilted, tmp_path)
    cached = ["simulate", "--cell", "two-link", "--chain", "--cache-dir", str(cache),
              "--start", str(start_path)]
    assert 0.3 < AUTO_ANCHOR_BELOW and 0.3 < LOW_START_AGREEMENT

    assert main([*cached, "--out", str(tmp_path / "auto")]) == 0
    err = capsys.readouterr().err
    assert "the chain puts 30% of the arm it draws at the start" in err
    assert "anchoring the chain at the start frame with cache:two-link/cam/arm" in err
    m = json.loads((tmp_path / "auto" / "metrics.json").read_text())
    assert m["start_agreement"]["anchored"] is True and "below 80%" in m["start_agreement"]["why"]
    assert m["context"].endswith("anchored at the start frame")
    assert any("only 30% of the arm" in w for w in m["warnings"])  # still low after

    shares["after"] = 0.9  # anchoring put it right: no warning
    assert main([*cached, "--out", str(tmp_path / "fixed")]) == 0
    m = json.loads((tmp_path / "fixed" / "metrics.json").read_text())
    assert m["start_agreement"]["after"]["arm_on_arm"] == 0.9
    assert not any("of the arm" in w for w in m["warnings"])

    capsys.readouterr()
    assert main([*cached, "--no-anchor", "--out", str(tmp_path / "no")]) == 0
    err = capsys.readouterr().err
    assert "anchoring" not in err and "warning: the chain puts only 30%" in err
    m = json.loads((tmp_path / "no" / "metrics.json").read_text())
    assert m["start_agreement"]["anchored"] is False and "anchor" not in m["chain"]

    chain_path = save_chain_calibration(tmp_path / "chain.npz", chain)
    assert main(["simulate", "--chain", str(chain_path), "--start", str(start_path),
                 "--out", str(tmp_path / "file")]) == 0
    err = capsys.readouterr().err
    assert "--anchor EPISODE" in err and "anchoring the chain" not in err
    m = json.loads((tmp_path / "file" / "metrics.json").read_text())
    assert m["start_agreement"]["anchored"] is False
    assert "not at hand" in m["start_agreement"]["why"]

    shares["before"] = 0.95  # the chain as read agrees: nothing is done
    assert main([*cached, "--out", str(tmp_path / "good")]) == 0
    err = capsys.readouterr().err
    assert "anchoring" not in err and "of the arm" not in err
    m = json.loads((tmp_path / "good" / "metrics.json").read_text())
    assert m["start_agreement"]["anchored"] is False and "not below" in \
        m["start_agreement"]["why"]

    assert main([*cached, "--anchor", "--no-anchor", "--out", str(tmp_path / "both")]) == 2
    assert "--anchor and --no-anchor: give one of the two" in capsys.readouterr().err
    assert main(["simulate", "--model", "models/reference", "--start", str(start_path),
                 "--no-anchor", "--out", str(tmp_path / "onnx")]) == 2
    assert "--no-anchor: only with --chain" in capsys.readouterr().err
    assert not (tmp_path / "both").exists() and not (tmp_path / "onnx").exists()


def test_calibrate_validate_scores_the_chain_simulate_runs(tilted, tmp_path, capsys,
                                                           monkeypatch):
    """``calibrate validate --chain`` follows the runtime's anchoring default: a start
    agreement below AUTO_ANCHOR_BELOW anchors the cached chain with the cached calibration
    episode first, as ``simulate --cell ID --chain`` does, so both score the same rollout
    and record the same decision (validate never anchored and reported the unanchored
    score without a word); ``--no-anchor`` keeps the chain as read, and without torch it
    says so. The agreement is set, to test the decision (as above)."""
    import importlib.util

    import edge.runtime.chain as runtime_chain
    import export.models.chain_fit as chain_fit
    from edge.cli import main

    monkeypatch.setattr(chain_fit, "MOTION_REFINE_STEPS", (20,))
    monkeypatch.setattr(chain_fit, "MOTION_REFINE_BLUR_PX", (1.0,))

    def agreement(chain, start, q0, change=30.0):
        return {"arm_on_arm": 0.9 if "anchor" in chain.info else 0.3, "arm_drawn": 0.5,
                "judged_px": 100, "differs_px": 120, "light": None, "camera": None}

    monkeypatch.setattr(runtime_chain, "start_agreement", agreement)
    cache, start_path = _cached_cell(tilted, tmp_path)
    common = ["--cell", "two-link", "--chain", "--cache-dir", str(cache)]
    assert main(["simulate", *common, "--start", str(start_path),
                 "--out", str(tmp_path / "sim")]) == 0
    sim = json.loads((tmp_path / "sim" / "metrics.json").read_text())
    assert sim["start_agreement"]["anchored"] is True
    capsys.readouterr()
    validate = ["calibrate", "validate", *common, "--episode", str(start_path)]
    assert main([*validate, "--out", str(tmp_path / "val")]) == 0
    err = capsys.readouterr().err
    assert "anchoring the chain at the start frame with cache:two-link/cam/arm" in err
    val = json.loads((tmp_path / "val" / "report.json").read_text())
    got, want = val["start_agreement"], sim["start_agreement"]
    assert got["anchored"] is True and got["why"] == want["why"]
    assert got["after"]["arm_on_arm"] == 0.9 and got["before"]["arm_on_arm"] == 0.3
    assert val["fidelity"]["calibrated"]["psnr_db"] == pytest.approx(
        sim["summary"]["psnr_db"], abs=0.05)
    assert val["model"]["chain"].endswith("anchored at the start frame")

    assert main([*validate, "--no-anchor", "--out", str(tmp_path / "no")]) == 0
    no = json.loads((tmp_path / "no" / "report.json").read_text())
    assert no["start_agreement"]["anchored"] is False
    assert no["start_agreement"]["why"] == "--no-anchor: not anchored"
    assert "anchoring the chain" not in capsys.readouterr().err

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))
    assert main([*validate, "--out", str(tmp_path / "notorch")]) == 0
    assert "anchoring it there needs torch" in capsys.readouterr().err
    nt = json.loads((tmp_path / "notorch" / "report.json").read_text())
    assert nt["start_agreement"]["anchored"] is False
    assert "needs torch" in nt["start_agreement"]["why"]
