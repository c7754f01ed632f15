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
    gave, with and without camera noise (blurred first), across chunk edges."""
    import cv2

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
        if noise.mean() >= check.NOISY_CAMERA_LEVEL:  # a camera's noise: blurred first
            f = np.stack([cv2.GaussianBlur(x, (0, 0), check.ENERGY_BLUR_PX)
                          for x in frames]).astype(np.float32)
            d = np.abs(np.diff(f, axis=0)).mean(axis=3)
            flat = d.reshape(len(d), -1)
            steady = np.percentile(np.percentile(flat, 95.0, axis=1), 20.0)
            noise = np.maximum(steady, 3.0 * np.median(flat, axis=1))
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


def _drawn_chain(p: np.ndarray, roll_seen: bool = True) -> np.ndarray:
    """A 128x128 planar arm at joint positions ``p`` [4] (rad): a thick upper arm and a
    forearm (large, moving many pixels), a short thin tip and a small mark that a wrist
    roll shifts across the forearm (faint; not drawn unless ``roll_seen``), drawn
    anti-aliased at sub-pixel positions."""
    import cv2

    img = np.full((128, 128, 3), 90, np.uint8)
    img[96:] = (70, 80, 60)
    a = np.radians(-70.0) + p[0]
    base = np.array([30.0, 100.0])
    elbow = base + 55 * np.array([np.cos(a), np.sin(a)])
    b = a + np.radians(80.0) + p[1]
    wrist = elbow + 35 * np.array([np.cos(b), np.sin(b)])
    c = b + p[2]
    tip = wrist + 9 * np.array([np.cos(c), np.sin(c)])
    mark = wrist + 3.0 * np.sin(p[3]) * np.array([-np.sin(b), np.cos(b)])

    def px(v: np.ndarray) -> tuple[int, int]:  # 4 fractional bits
        return int(round(v[0] * 16)), int(round(v[1] * 16))

    cv2.line(img, px(base), px(elbow), (200, 120, 40), 14, cv2.LINE_AA, 4)
    cv2.line(img, px(elbow), px(wrist), (40, 160, 200), 9, cv2.LINE_AA, 4)
    cv2.line(img, px(wrist), px(tip), (230, 230, 230), 3, cv2.LINE_AA, 4)
    if roll_seen:
        cv2.circle(img, px(mark), 32, (20, 20, 20), -1, cv2.LINE_AA, 4)
    return img


def _drawn_chain_calibration(lag: float, flicker: int = 0, noise: float = 0.0,
                             jpeg: int = 0, roll_seen: bool = True) -> EpisodeArrays:
    """The drawn arm's calibration (4 DoFs swept in turn, 10 Hz) seen by a camera ``lag``
    frames late (< 0: early); ``flicker``: a 12 px lamp in a corner whose brightness
    jumps by up to that many levels every frame; ``noise``: the camera's Gaussian noise
    (levels), then JPEG compression at quality ``jpeg`` (0: none)."""
    import cv2

    from edge.calibrate.plan import SWEEP_PROFILE
    from edge.episode import Episode, EpisodeMetadata, actions_from_positions

    amps = (0.45, -0.5, 0.6, 0.5)
    q = np.zeros((len(amps) * 8 + 1, len(amps)))
    for k, amp in enumerate(amps):
        q[k * 8 + 1:(k + 1) * 8 + 1, k] = np.cumsum(np.asarray(SWEEP_PROFILE) * amp)
    frames = np.stack([_drawn_chain(p, roll_seen) for p in _late(q, lag)])
    rng = np.random.default_rng(1)
    if flicker:
        frames[:, :12, -12:] = rng.integers(128 - flicker, 128 + flicker, (len(q), 1, 1, 1))
    if noise:
        frames = np.clip(np.round(frames + rng.normal(0.0, noise, frames.shape)), 0, 255) \
            .astype(np.uint8)
    if jpeg:
        frames = np.stack([cv2.imdecode(cv2.imencode(".jpg", f, [cv2.IMWRITE_JPEG_QUALITY,
                                                                  jpeg])[1], cv2.IMREAD_COLOR)
                           for f in frames])
    meta = EpisodeMetadata("cell-1", "cam-1", "robot-1", "toy", ("j0", "j1", "j2", "j3"),
                           ("rad",) * 4, 10.0, kind="calibration", source="test")
    return EpisodeArrays.from_episode(Episode(frames, actions_from_positions(q),
                                              np.arange(len(q)) / 10.0, meta,
                                              joint_positions=q))


@pytest.mark.parametrize("lag", [0.3, -0.3, 0.45])
def test_faint_dofs_pass_with_the_camera_a_fraction_of_a_frame_off(lag: float) -> None:
    """Under the half-frame limit a camera's lag puts a share of each sweep's last step
    into the pause after it (an early one, the next sweep's first step into the pause
    before): the noise floor takes the DoFs' own motion off the pauses, so the large links'
    motion, not linear in their speed, does not raise it past the faint DoFs' (it read
    0.14 at +0.3 and 0.22 at +0.45 and failed the tip and the roll, 0.00 on time)."""
    on_time = check_arrays(_drawn_chain_calibration(0.0))
    report = check_arrays(_drawn_chain_calibration(lag))
    assert on_time["verdict"] == "pass" and on_time["dofs"][0]["noise_floor"] < 0.01
    assert report["camera_lag"]["frames"] == pytest.approx(lag, abs=0.05)
    assert report["verdict"] == "pass", report["reasons"]
    faint = min(d["image_motion"] for d in report["dofs"])
    assert report["dofs"][0]["noise_floor"] < 0.2 * faint


def test_a_flickering_lamp_still_raises_the_noise_floor_with_the_camera_late() -> None:
    """What changes in every pause alike (a lamp flickering by up to 40 levels in a corner,
    at once larger than the noise level allows for) stays in the floor: the roll, whose
    motion is below it, fails, with the camera on time and 0.3 frames late."""
    for lag in (0.0, 0.3):
        report = check_arrays(_drawn_chain_calibration(lag, flicker=40))
        floor = report["dofs"][0]["noise_floor"]
        assert floor > 0.1, floor
        failed = {r["dof"] for r in report["reasons"] if r["code"] == "no_image_motion"}
        assert "j3" in failed and {"j0", "j1"}.isdisjoint(failed), report["reasons"]


def test_a_camera_s_noise_and_compression_stay_under_the_faint_dofs() -> None:
    """The frames of a camera with noise are differenced after a 1 px blur, so the noise's
    tail does not raise the floor past a faint DoF's motion. Noise of 2 levels and JPEG
    quality 85, on time and 0.3 frames late: every DoF passes (differenced as they were,
    the floor read 0.21 late and failed the tip and the roll). Noise of 3 levels and
    quality 70: the floor stays under 0.05 (it read 0.08-0.28) and the tip passes; the roll
    (0.06) is at the limit there. A roll the camera does not see still fails."""
    from edge.calibrate.check import NOISY_CAMERA_LEVEL, noise_level

    for lag in (0.0, 0.3):
        report = check_arrays(_drawn_chain_calibration(lag, noise=2.0, jpeg=85))
        assert report["verdict"] == "pass", report["reasons"]
        report = check_arrays(_drawn_chain_calibration(lag, noise=3.0, jpeg=70))
        assert report["dofs"][0]["noise_floor"] < 0.05
        assert [d["passed"] for d in report["dofs"][:3]] == [True] * 3, report["reasons"]
    # frames without noise (rendered; compressed alike where nothing moves) are not blurred
    clean = _drawn_chain_calibration(0.0, jpeg=85).frames
    sums = np.abs(np.diff(clean.astype(np.int16), axis=0)).sum(axis=3)
    assert noise_level(sums, 1.0 / 3.0).mean() < NOISY_CAMERA_LEVEL
    assert check_arrays(_drawn_chain_calibration(0.0))["dofs"][3]["image_motion"] == \
        pytest.approx(0.0613, abs=1e-3)
    hidden = check_arrays(_drawn_chain_calibration(0.0, noise=2.0, jpeg=85, roll_seen=False))
    failed = {r["dof"] for r in hidden["reasons"] if r["code"] == "no_image_motion"}
    assert failed == {"j3"}, hidden["reasons"]


def test_pause_noise_floor_is_what_every_transition_adds_beyond_the_sweeps() -> None:
    """Image motion made of each DoF's speed (one a hundred times another's) plus 0.05 on
    every transition: the floor is the 0.05, on time and 0.3 frames late; the pauses of
    no sweep inside the episode give None."""
    from edge.calibrate.check import pause_noise_floor, positions_seen_late

    ep = sweep_episode()
    q = ep.joint_positions
    gains = np.array([100.0, 40.0, 1.0, 0.5, 2.0, 30.0, 1.0])
    for lag in (0.0, 0.3):
        energy = np.abs(np.diff(positions_seen_late(q, lag), axis=0)) @ gains + 0.05
        sweeps = [(k, k * 8) for k in range(7)]
        assert pause_noise_floor(energy, q, lag, sweeps) == pytest.approx(0.05, abs=0.01)
    assert pause_noise_floor(energy[:2], q[:3], 0.0, [(6, 48)]) is None
