"""The blur-proof evaluation metrics on hand-made arrays with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from export.errors import ExportError
from export.evaluation.frames import (
    PSNR_CAP_DB,
    blur_control,
    camera_degrade,
    frame_psnr,
    oracle_flow_warp,
    retrieval_hits,
    static_mask,
)


def _frames(values: list[int]) -> np.ndarray:
    return np.stack([np.full((4, 4, 3), v, np.uint8) for v in values])


def test_retrieval_counts_only_strictly_nearest_own_future() -> None:
    truths = _frames([0, 100, 200])
    # pred 0 is nearest its own truth; pred 1 sits nearer truth 2; pred 2 exactly between
    # truths 1 and 2 (150): a tie with its own truth is a miss
    preds = _frames([10, 160, 150])
    assert retrieval_hits(preds, truths).tolist() == [True, False, False]


def test_retrieval_of_identical_predictions_is_all_ties() -> None:
    truths = _frames([0, 100, 200, 50])
    preds = _frames([100, 100, 100, 100])  # one prediction for every candidate
    assert retrieval_hits(preds, truths).tolist() == [False, True, False, False]
    same = _frames([7, 7])
    assert retrieval_hits(same, same).tolist() == [False, False]  # truths tie


def test_retrieval_refuses_mismatched_stacks() -> None:
    with pytest.raises(ExportError, match="two"):
        retrieval_hits(_frames([0, 1]), _frames([0, 1, 2]))
    with pytest.raises(ExportError):
        retrieval_hits(_frames([0]), _frames([0]))


def test_frame_psnr_known_values_cap_and_mask() -> None:
    a = np.zeros((2, 2, 3), np.uint8)
    b = a.copy()
    b[0, 0] = 255  # 3 of 12 values differ by 255: MSE = 255^2 / 4
    assert frame_psnr(b, a) == pytest.approx(10 * math.log10(4))
    assert frame_psnr(a, a) == PSNR_CAP_DB
    m = np.zeros((2, 2), bool)
    m[0, 0] = True
    assert frame_psnr(b, a, m) == pytest.approx(0.0)
    assert frame_psnr(b, a, ~m) == PSNR_CAP_DB
    assert math.isnan(frame_psnr(b, a, np.zeros((2, 2), bool)))


def test_static_mask_marks_pixels_that_never_change() -> None:
    start = np.zeros((2, 3, 3), np.uint8)
    truth = np.zeros((4, 2, 3, 3), np.uint8)
    truth[2, 1, 2, 0] = 1  # one pixel changes at one step, in one channel
    want = np.ones((2, 3), bool)
    want[1, 2] = False
    assert np.array_equal(static_mask(truth, start), want)


def test_blur_control_blurs_an_edge_and_keeps_flat_images() -> None:
    flat = np.full((1, 16, 16, 3), 90, np.uint8)
    assert np.array_equal(blur_control(flat), flat)
    edge = np.zeros((1, 16, 16, 3), np.uint8)
    edge[:, :, 8:] = 255
    out = blur_control(edge)
    assert 0 < out[0, 8, 7, 0] < 255 and out.shape == edge.shape


def test_camera_degrade_adds_noise_of_the_asked_level_and_is_seeded() -> None:
    frames = np.full((2, 64, 64, 3), 128, np.uint8)
    noisy = camera_degrade(frames, noise_levels=4.0, seed=3)
    assert noisy.dtype == np.uint8 and noisy.shape == frames.shape
    assert abs(float(np.std(noisy.astype(float) - 128)) - 4.0) < 0.1
    assert np.array_equal(noisy, camera_degrade(frames, noise_levels=4.0, seed=3))
    assert not np.array_equal(noisy, camera_degrade(frames, noise_levels=4.0, seed=4))
    assert np.array_equal(frames, np.full((2, 64, 64, 3), 128, np.uint8))  # input kept
    assert np.array_equal(camera_degrade(frames), frames)  # nothing asked: unchanged


def test_camera_degrade_jpeg_blocks_and_loses_detail() -> None:
    rng = np.random.default_rng(0)
    frames = (rng.random((1, 64, 64, 3)) * 255).astype(np.uint8)
    low = camera_degrade(frames, jpeg_quality=30)
    high = camera_degrade(frames, jpeg_quality=95)
    err = lambda x: float(np.abs(x.astype(float) - frames).mean())  # noqa: E731
    assert err(low) > err(high) > 0
    flat = np.full((1, 16, 16, 3), 200, np.uint8)  # a flat frame survives JPEG
    assert np.abs(camera_degrade(flat, jpeg_quality=80).astype(int) - 200).max() <= 1


@pytest.mark.parametrize("kwargs", [{"noise_levels": -1.0}, {"noise_levels": float("nan")},
                                    {"jpeg_quality": 0}, {"jpeg_quality": 101}])
def test_camera_degrade_refuses_bad_settings(kwargs) -> None:
    with pytest.raises(ValueError, match="camera_degrade"):
        camera_degrade(np.zeros((1, 8, 8, 3), np.uint8), **kwargs)
    with pytest.raises(ValueError, match="uint8"):
        camera_degrade(np.zeros((1, 8, 8, 3), np.float32))


def test_oracle_flow_warp_of_a_static_scene_is_the_start_frame() -> None:
    rng = np.random.default_rng(0)
    start = (rng.random((32, 32, 3)) * 255).astype(np.uint8)
    out = oracle_flow_warp(start, np.stack([start, start]))
    assert np.abs(out.astype(int) - start.astype(int)).max() <= 1


def test_calibration_flow_moves_what_the_calibration_moved() -> None:
    from export.models.calibration_flow import CalibrationFlow

    rng = np.random.default_rng(0)
    bg = (rng.random((64, 64, 1)) * 60 + 40).astype(np.uint8).repeat(3, 2)

    def frame(x: float) -> np.ndarray:
        f = bg.copy()
        xi = int(round(x))
        f[24:40, xi:xi + 16] = 220
        f[28:36, xi + 4:xi + 8] = 120  # texture inside the block
        return f

    amp = 0.4  # rad: the block moves 8 px at the peak
    poses = np.array([0.0, 0.25, 0.75, 1.0, 1.0, 0.75, 0.25, 0.0, 0.0])
    frames = np.stack([frame(10 + 8 * p) for p in poses])
    actions = np.zeros((9, 2), np.float32)
    actions[:8, 0] = np.diff(poses) * amp
    flow = CalibrationFlow(frames, actions)
    assert list(flow.bases) == [0]  # channel 1 never moved: no basis
    start = frames[0]
    acts = np.zeros((2, 1, 2), np.float32)
    acts[0, 0, 0] = amp  # the full sweep
    acts[1, 0, 1] = 0.3  # the channel without a basis moves nothing
    pred = flow.rollout(start, acts)
    np.testing.assert_array_equal(pred[1, 0], start)
    # where the block arrived (and the start frame shows background) it is drawn again;
    # where it left, a backward warp has nothing to fill from (the baseline's weakness)
    arrived = (slice(24, 40), slice(27, 34))
    assert start[arrived].mean() < 110 and pred[0, 0][arrived].mean() > 150
    assert frame_psnr(pred[0, 0], frames[3]) > frame_psnr(start, frames[3]) + 1.0


def test_lens_distort_moves_points_along_the_radius_as_browns_model_says():
    import math

    from export.evaluation.frames import lens_distort

    h = w = 64
    fovy, k1 = 45.0, -0.2
    f = (h / 2) / math.tan(math.radians(fovy) / 2)
    img = np.zeros((h, w, 3), np.uint8)
    y0, x0 = 6, 8  # a bright pixel near a corner, at the pinhole's (x0 + 0.5, y0 + 0.5)
    img[y0, x0] = 255
    out = lens_distort(img, fovy, k1)
    # where Brown's model puts it: the normalised point scaled by 1 + k1 r^2 (barrel: inward)
    xn, yn = (x0 + 0.5 - w / 2) / f, (y0 + 0.5 - h / 2) / f
    s = 1 + k1 * (xn * xn + yn * yn)
    want = np.array([xn * s * f + w / 2 - 0.5, yn * s * f + h / 2 - 0.5])
    wy, wx = np.mgrid[0:h, 0:w]
    m = out[..., 0].astype(float)
    got = np.array([(m * wx).sum() / m.sum(), (m * wy).sum() / m.sum()])
    assert np.abs(got - want).max() < 0.35, (got, want)
    assert np.hypot(*(got - [x0, y0])) > 0.8  # it moved, toward the centre
    assert np.hypot(*(got - [w / 2, h / 2])) < np.hypot(x0 - w / 2, y0 - h / 2)
    # no distortion: the frame itself; the centre pixel stays where it is
    assert np.array_equal(lens_distort(img, fovy, 0.0), img)
    centre = np.zeros((h, w, 3), np.uint8)
    centre[32, 32] = 200
    assert lens_distort(centre, fovy, k1)[32, 32, 0] > 150
    with pytest.raises(ValueError, match="lens_distort: expected 0 < fovy_deg < 180"):
        lens_distort(img, 0.0, k1)
