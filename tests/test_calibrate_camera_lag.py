"""The camera's lag against the joint readings, measured from a calibration episode itself
(``edge.calibrate.check.estimate_camera_lag``) and judged by ``calibrate check``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from edge.calibrate.check import EpisodeArrays, check_arrays, estimate_camera_lag, load_for_check
from tests.calib_cell_helpers import sweep_episode

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "cell_sample" / "calibration.npz"


def _bands(q: np.ndarray) -> np.ndarray:
    """The frames of ``sweep_episode``'s picture for joint positions ``q`` [T, 7]: each DoF
    brightens its own band in proportion to its position."""
    frames = np.full((len(q), 64, 64, 3), 40, np.uint8)
    for k in range(q.shape[1]):
        frames[:, :, 9 * k:9 * k + 8, :] = (120 + 200 * q[:, k])[:, None, None, None] \
            .clip(0, 255).astype(np.uint8)
    return frames


def _late(q: np.ndarray, lag: float) -> np.ndarray:
    """``q`` as a camera late by ``lag`` frames shows it (linear between knots)."""
    t = np.clip(np.arange(len(q)) - lag, 0, len(q) - 1)
    return np.stack([np.interp(t, np.arange(len(q)), q[:, k]) for k in range(q.shape[1])], 1)


@pytest.mark.parametrize("lag", [0.0, 0.3, -0.6, 1.0, 2.5, -3.0])
def test_the_lag_of_a_drawn_sweep_is_measured_to_a_tenth_of_a_frame(lag: float) -> None:
    ep = sweep_episode()
    frames = _bands(_late(ep.joint_positions, lag))
    got = estimate_camera_lag(frames, ep.joint_positions, fps=10.0)
    assert got is not None and got["frames"] == pytest.approx(lag, abs=0.1), got
    assert got["s"] == pytest.approx(got["frames"] / 10.0, abs=1e-3)
    assert got["r2"] > 0.9 and got["search_frames"] == 4.0
    if abs(lag) >= 1:  # a frame or more: no lag fits far worse
        assert got["r2_at_zero"] < got["r2"] - 0.3


@pytest.mark.parametrize("shift", [0, 1, 2, 3, -1])
def test_the_sample_cells_frames_shifted_by_whole_frames(shift: int) -> None:
    """The rendered sample sweep (MuJoCo, the Kinova Gen3), its frames shown ``shift``
    knots late: measured within 0.05 frames; beyond half a frame the check fails with the
    one reason camera_lag (not with DoFs whose picture 'did not change': their motion is
    judged where the late camera shows it) and names the latency to record with."""
    arr = load_for_check(SAMPLE)
    idx = np.clip(np.arange(len(arr.frames)) - shift, 0, len(arr.frames) - 1)
    report = check_arrays(dataclasses.replace(arr, frames=arr.frames[idx]))
    lag = report["camera_lag"]
    assert lag["frames"] == pytest.approx(shift, abs=0.05)
    assert lag["image_motion_shifted_frames"] == shift
    if shift == 0:
        assert report["verdict"] == "pass" and report["reasons"] == []
        return
    assert [r["code"] for r in report["reasons"]] == ["camera_lag"]
    msg = report["reasons"][0]["message"]
    assert ("late" if shift > 0 else "early") in msg
    # recorded without a latency: an early camera needs a negative one (the joints are late)
    option = "--camera-latency-s " if shift > 0 else "--camera-latency-s="
    assert float(msg.split(option)[1].split()[0].rstrip(";")) == pytest.approx(shift / 10,
                                                                                abs=0.005)
    assert msg.endswith("an episode that cannot be recorded again: syncedge calibrate retime")
    assert ("negative: the joint readings are the late ones" in msg) == (shift < 0)
    if shift < 0:  # or, the same, the joints' latency raised by the lag
        joint = float(msg.split("--joint-latency-s ")[1].split()[0])
        assert joint == pytest.approx(-shift / 10, abs=0.005)


def test_no_lag_is_judged_without_motion_or_from_a_poor_fit() -> None:
    ep = sweep_episode()
    still = np.repeat(ep.joint_positions[:1], len(ep.joint_positions), 0)
    assert estimate_camera_lag(_bands(still), still, 10.0) is None  # nothing moved
    assert estimate_camera_lag(ep.frames[:5], ep.joint_positions[:5], 10.0) is None
    rng = np.random.default_rng(0)  # a picture unrelated to the joints: a poor fit
    noise = rng.integers(0, 255, ep.frames.shape, dtype=np.uint8)
    report = check_arrays(EpisodeArrays(noise, ep.actions, ep.timestamps,
                                        ep.metadata.to_json_dict(), ep.joint_positions))
    assert report["camera_lag"]["r2"] < 0.6
    assert "camera_lag" not in [r["code"] for r in report["reasons"]]


def test_check_prints_the_lag_and_names_the_failing_codes(tmp_path: Path, capsys) -> None:
    from edge.episode import load_episode, save_episode
    from tests.calib_cell_helpers import cli

    ep = load_episode(SAMPLE)
    idx = np.clip(np.arange(ep.num_frames) - 1, 0, ep.num_frames - 1)
    late = save_episode(dataclasses.replace(ep, frames=ep.frames[idx]), tmp_path / "late.npz")
    assert cli("check", str(late), "--out", str(tmp_path / "report")) == 1
    out, err = capsys.readouterr()
    assert "camera lag against the joint readings: +1.00 frames (+100 ms" in out
    assert "verdict: fail (camera_lag: the FAIL lines say what to do)" in out
    assert "FAIL camera_lag: the frames are 100 ms (1.00 frames) late" in err


def test_retime_moves_a_late_cameras_frames_back_and_the_check_passes(tmp_path: Path,
                                                                       capsys) -> None:
    from edge.episode import load_episode, save_episode
    from tests.calib_cell_helpers import cli

    ep = load_episode(SAMPLE)
    idx = np.clip(np.arange(ep.num_frames) - 2, 0, ep.num_frames - 1)
    late = save_episode(dataclasses.replace(ep, frames=ep.frames[idx]), tmp_path / "late.npz")
    assert cli("retime", str(late), "--out", str(tmp_path / "fixed.npz")) == 0
    out = capsys.readouterr().out
    assert "measured camera lag: +1.99 frames" in out and "frames moved 2 earlier" in out
    fixed = load_episode(tmp_path / "fixed.npz")
    assert np.array_equal(fixed.frames[:-2], ep.frames[:-2])  # the recording's own frames
    assert fixed.metadata.extra["retime"]["shift_frames"] == 2
    assert fixed.metadata.extra["retime"]["held_frames"] == [55, 56]
    assert np.array_equal(fixed.joint_positions, ep.joint_positions)
    report = check_arrays(EpisodeArrays.from_episode(fixed))
    assert report["verdict"] == "pass" and abs(report["camera_lag"]["frames"]) < 0.1
    # a new path only; an episode without a lag is left alone
    assert cli("retime", str(late), "--out", str(tmp_path / "fixed.npz")) == 2
    assert "already exists" in capsys.readouterr().err
    assert cli("retime", str(SAMPLE), "--out", str(tmp_path / "same.npz")) == 0
    assert "within half a frame: nothing to re-time" in capsys.readouterr().out
    assert not (tmp_path / "same.npz").exists()
    assert cli("retime", str(late), "--out", str(tmp_path / "x.npz"), "--shift-frames",
               "99") == 2
    assert "expected a non-zero whole number of frames shorter than the episode" in \
        capsys.readouterr().err


def test_retime_refuses_a_lag_it_cannot_measure(tmp_path: Path, capsys) -> None:
    from edge.episode import save_episode
    from tests.calib_cell_helpers import cli

    ep = sweep_episode()
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 255, ep.frames.shape, dtype=np.uint8)
    path = save_episode(dataclasses.replace(ep, frames=noise), tmp_path / "noise.npz")
    assert cli("retime", str(path), "--out", str(tmp_path / "x.npz")) == 2
    err = capsys.readouterr().err
    assert "the camera's lag cannot be measured from this episode" in err
    assert "give --shift-frames N" in err and not (tmp_path / "x.npz").exists()
    assert cli("retime", str(path), "--out", str(tmp_path / "x.npz"), "--shift-frames",
               "-1") == 0
    assert "frames moved 1 later; frame [0] repeats the recording's first frame" in \
        capsys.readouterr().out


def test_a_weak_fit_at_the_end_of_the_range_is_not_judged() -> None:
    """A flickering strip at the picture's edge: the best (poor) fit lies at the end of the
    +-4 frames searched; below R^2 0.6 no lag is judged, at the end of the range or not."""
    ep = sweep_episode()
    rng = np.random.default_rng(13)
    f = ep.frames.astype(np.int16)
    f[:, :, 55:, :] += rng.integers(0, 60, (len(f), 1, 1, 1))
    report = check_arrays(EpisodeArrays.from_episode(dataclasses.replace(
        ep, frames=f.clip(0, 255).astype(np.uint8))))
    lag = report["camera_lag"]
    assert lag["at_search_end"] and lag["r2"] < 0.6
    assert report["verdict"] == "pass", report["reasons"]


def test_a_lag_in_doubt_names_the_other_peak_and_an_import_s_stamp_delays() -> None:
    from edge.calibrate.check import CheckOptions, _lag_reason

    lag = {"frames": 12.0, "s": 1.2, "r2": 0.90, "r2_at_zero": 0.2, "search_frames": 20.0,
           "at_search_end": False, "next_best": {"frames": -45.0, "s": -1.5, "r2": 0.89}}
    imported = {"format": "rosbag2", "image_offset_s": 0.0,
                "receive_delay_s": {"image": 1.502, "joints": 0.001}}
    (reason,) = _lag_reason(lag, {}, 10.0, CheckOptions(), imported)
    msg = reason["message"]
    assert "the fit is nearly as good at -1500 ms (R^2 0.89)" in msg
    assert "--image-offset-s=-1.200" in msg
    assert "they point to --image-offset-s=1.501, not this" in msg
    clear = {**lag, "next_best": {"frames": -45.0, "s": -1.5, "r2": 0.80}}
    agree = {**imported, "receive_delay_s": {"image": -1.199, "joints": 0.001}}
    (reason,) = _lag_reason(clear, {}, 10.0, CheckOptions(), agree)
    assert "nearly as good" not in reason["message"] and "they point" not in reason["message"]


def test_image_motion_is_the_same_taken_a_few_frames_at_a_time(monkeypatch) -> None:
    """The chunked differences (uint16 channel sums) give what the whole stack in float32
    gave, with and without camera noise, across chunk edges."""
    import edge.calibrate.check as check

    ep = sweep_episode()
    rng = np.random.default_rng(0)
    noisy = np.clip(ep.frames.astype(int) + rng.integers(-3, 4, ep.frames.shape), 0,
                    255).astype(np.uint8)
    for frames, chunk in ((ep.frames, 5), (noisy, 1), (noisy[:3], 1), (noisy[:2], 7)):
        f = frames.astype(np.float32)
        d = np.abs(np.diff(f, axis=0)).mean(axis=3)
        flat = d.reshape(len(d), -1)
        steady = np.percentile(np.percentile(flat, 95.0, axis=1), 20.0)
        noise = np.maximum(steady, 3.0 * np.median(flat, axis=1)) if len(d) >= 2 else \
            np.zeros(len(d))
        want = np.maximum(d - noise[:, None, None], 0.0)
        # 56 transitions in chunks of 5 (a partial last one), of 1; 2 and 1 transitions
        monkeypatch.setattr(check, "ENERGY_CHUNK_BYTES", chunk * frames[0].size * 2)
        energy, maps = check._energy(frames)
        np.testing.assert_allclose(maps, want, atol=1e-5)
        np.testing.assert_allclose(energy, want.mean(axis=(1, 2)), atol=1e-6)
        assert check._energy(frames, maps=False)[1] is None


def test_retime_measures_an_episode_at_the_camera_s_rate_as_check_does(tmp_path: Path,
                                                                      capsys) -> None:
    """A 30 Hz episode whose frames show the poses 0.5 s late (15 of its frames, past the
    +-4 frames retime searched): measured and moved in the episode's own frames, then
    the check passes."""
    from edge.episode import save_episode
    from tests.calib_cell_helpers import camera_rate_sweep_episode, cli

    ep = camera_rate_sweep_episode()
    idx = np.clip(np.arange(ep.num_frames) - 15, 0, ep.num_frames - 1)
    late = save_episode(dataclasses.replace(ep, frames=ep.frames[idx]), tmp_path / "late.npz")
    assert cli("retime", str(late), "--out", str(tmp_path / "fixed.npz")) == 0
    out = capsys.readouterr().out
    assert "measured camera lag: +15.00 frames (+500 ms" in out and "moved 15 earlier" in out
    report = check_arrays(load_for_check(tmp_path / "fixed.npz"))
    assert report["verdict"] == "pass" and abs(report["camera_lag"]["s"]) < 0.01
