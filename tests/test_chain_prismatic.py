"""Prismatic channels (a reading in m: a linear axis, a gripper) in the chain model: fitted
as a slide, stored as schema 2, rolled out by the runtime."""

from __future__ import annotations

import numpy as np
import pytest

from edge.runtime.chain import (
    ChainCalibration,
    ChainFileError,
    chain_bytes,
    chain_from_bytes,
    chain_rollout,
    compose_chain,
)

F, C = 40.0, np.array([16.0, 16.0])
SIZE = 32


def _rot(p, axis, pivot, t):
    axis = axis / np.linalg.norm(axis)
    v = p - pivot
    return (pivot + v * np.cos(t) + np.cross(axis, v) * np.sin(t)
            + axis * (v @ axis)[:, None] * (1 - np.cos(t)))


def _project(p):
    return p[:, :2] / p[:, 2:3] * F + C


class ArmWithSlide:
    """A shoulder and an elbow (revolute, rad) and a block on the forearm that slides along
    a fixed direction (prismatic, m), on a tilted surface about 2 m from the camera."""

    def __init__(self):
        ys, xs = np.mgrid[0:SIZE, 0:SIZE]
        upper = (xs >= 8) & (xs < 14) & (ys >= 6) & (ys < 26)
        fore = (xs >= 14) & (xs < 24) & (ys >= 18) & (ys < 24)
        block = (xs >= 24) & (xs < 29) & (ys >= 17) & (ys < 25)
        self.robot = upper | fore | block
        self.link = np.select([block, fore], [2, 1], 0)[self.robot]
        z = 2.0 + 0.01 * xs + 0.005 * ys
        u, v = xs + 0.5, ys + 0.5
        pts = np.stack([(u - C[0]) * z / F, (v - C[1]) * z / F, z], -1)
        self.points = pts[self.robot]
        self.axes = np.array([[0.9, 0.3, 0.6], [1.0, 0.1, 0.4]])
        self.axes /= np.linalg.norm(self.axes, axis=1, keepdims=True)
        self.pivots = pts[[4, 21], [11, 14]]
        self.slide = np.array([0.8, 0.5, 0.33])
        self.slide /= np.linalg.norm(self.slide)  # m of travel per m of reading

    def positions(self, q):
        """Pixel positions of the home points at readings ``q [3]`` (rad, rad, m; home 0):
        slide first, then the elbow, then the shoulder (product of exponentials)."""
        p = self.points.copy()
        blk, dist = self.link == 2, self.link >= 1
        p[blk] = p[blk] + q[2] * self.slide
        p[dist] = _rot(p[dist], self.axes[1], self.pivots[1], q[1])
        p = _rot(p, self.axes[0], self.pivots[0], q[0])
        return _project(p)

    def sweep(self):
        """Readings ``[25, 3]`` and tracks ``[25, H, W, 2]``: each channel out and back in
        8 frames, the joints to 0.4 rad, the slide to 0.15 m."""
        prof = np.array([0.0, 0.25, 0.75, 1.0, 1.0, 0.75, 0.25, 0.0])
        q = np.zeros((25, 3))
        q[1:9, 0] = 0.4 * prof
        q[9:17, 1] = 0.4 * prof
        q[17:25, 2] = 0.15 * prof
        home = self.positions(np.zeros(3))
        tracks = np.zeros((25, SIZE, SIZE, 2), np.float32)
        for t in range(25):
            tracks[t][self.robot] = self.positions(q[t]) - home
        return q, tracks


@pytest.fixture(scope="module")
def slide_fit():
    pytest.importorskip("torch")
    from export.models.chain_fit import fit_chain

    arm = ArmWithSlide()
    q, tracks = arm.sweep()
    valid = np.ones(tracks.shape[:3], bool)
    segments = [(0, 9), (8, 17), (16, 25)]
    fit = fit_chain(tracks, valid, q, segments, F, C, robot=arm.robot, restarts=8,
                    steps=250, refine_steps=600, prismatic=[False, False, True])
    return arm, fit


def test_a_prismatic_channel_is_read_as_a_slide(slide_fit):
    arm, fit = slide_fit
    assert fit.rad_per_unit.tolist() == [1.0, 1.0, 0.0]
    assert fit.travel_per_unit[:2].tolist() == [0.0, 0.0] and fit.travel_per_unit[2] > 0
    err = np.degrees(np.arccos(np.clip(arm.slide @ fit.axes[2], -1, 1)))
    assert err < 2.0, (err, fit.axes[2], arm.slide)
    # travel in the gauge (median depth 1): 1 m per m at the arm's median depth
    true_travel = 1.0 / np.median(arm.points[:, 2])
    assert fit.travel_per_unit[2] == pytest.approx(true_travel, rel=0.03)
    assert (fit.carried[2] > 0)[arm.link == 2].mean() > 0.95
    assert not (fit.carried[2] > 0)[arm.link < 2].any()  # the slide carries the block only
    assert fit.residual_px.max() < 0.05


def test_a_prismatic_channel_predicts_poses_it_never_saw(slide_fit):
    from export.models.chain_fit import chain_positions

    arm, fit = slide_fit
    for q in ([0.3, -0.2, 0.1], [-0.2, 0.3, -0.12], [0.0, 0.0, 0.2]):
        uv, _ = chain_positions(fit, np.asarray(q)[None])
        err = np.linalg.norm(uv[0] - arm.positions(np.asarray(q)), axis=1)
        assert err.max() < 0.1, (q, err.max())


def test_read_as_a_turn_the_same_sweep_predicts_the_slide_worse(slide_fit):
    """The control: the slide's channel fitted as revolute (what a chain without prismatic
    channels does) misplaces the block at a reading it never saw."""
    from export.models.chain_fit import chain_positions, fit_chain

    arm, fit = slide_fit
    q, tracks = arm.sweep()
    turn = fit_chain(tracks, np.ones(tracks.shape[:3], bool), q, [(0, 9), (8, 17), (16, 25)],
                     F, C, robot=arm.robot, restarts=8, steps=250, refine_steps=600)
    probe = np.array([[0.0, 0.0, 0.3]])  # twice the sweep's reach
    blk = arm.link == 2
    truth = arm.positions(probe[0])[blk]
    err_slide = np.linalg.norm(chain_positions(fit, probe)[0][0][blk] - truth, axis=1).max()
    err_turn = np.linalg.norm(chain_positions(turn, probe)[0][0][blk] - truth, axis=1).max()
    assert err_slide < 0.1 < err_turn, (err_slide, err_turn)


def test_compose_chain_slides_along_the_axis_and_matches_the_torch_twin():
    torch = pytest.importorskip("torch")
    from export.models.kinematics import compose_chain as compose_torch

    rng = np.random.default_rng(3)
    pts = rng.normal(size=(20, 3)) + [0, 0, 3]
    axes = rng.normal(size=(2, 3))
    axes /= np.linalg.norm(axes, axis=1, keepdims=True)
    piv = rng.normal(size=(2, 3))
    car = np.zeros((2, 20))
    car[0] = 1.0
    car[1, 10:] = 1.0
    # a pure slide of the distal channel: its points translate by d * axis
    out = compose_chain(pts, axes, piv, np.zeros((1, 2)), car, np.array([[0.0, 0.7]]))
    np.testing.assert_allclose(out[0, 10:], pts[10:] + 0.7 * axes[1], atol=1e-12)
    np.testing.assert_allclose(out[0, :10], pts[:10], atol=1e-12)
    ang = rng.normal(size=(4, 2))
    trav = rng.normal(size=(4, 2))
    ref = compose_torch(torch.from_numpy(pts)[None].expand(4, -1, -1),
                        torch.from_numpy(axes)[None].expand(4, -1, -1),
                        torch.from_numpy(piv)[None].expand(4, -1, -1), torch.from_numpy(ang),
                        torch.from_numpy(car)[None].expand(4, -1, -1),
                        travel=torch.from_numpy(trav)).numpy()
    np.testing.assert_allclose(compose_chain(pts, axes, piv, ang, car, trav), ref, atol=1e-12)
    with pytest.raises(ValueError, match="travel"):
        compose_torch(torch.from_numpy(pts)[None], torch.from_numpy(axes)[None],
                      torch.from_numpy(piv)[None], torch.from_numpy(ang[:1]),
                      torch.from_numpy(car)[None], travel=torch.zeros(1, 3))


def _calibration(fit, arm) -> ChainCalibration:
    from export.models.chain_fit import as_calibration

    home = np.full((SIZE, SIZE, 3), 30, np.uint8)
    home[arm.robot] = (200, 60, 40)
    home[arm.robot & (np.mgrid[0:SIZE, 0:SIZE][1] >= 24)] = (40, 200, 60)  # the block
    scene = (np.full((SIZE, SIZE, 3), 30, np.float32), np.ones((SIZE, SIZE), bool))
    return as_calibration(fit, home, np.zeros(3), scene, ["shoulder", "elbow", "gripper"])


def test_a_chain_with_a_slide_is_schema_2_and_rolls_out(slide_fit):
    arm, fit = slide_fit
    chain = _calibration(fit, arm)
    assert chain.schema_version == 2 and chain.prismatic.tolist() == [False, False, True]
    raw = chain_bytes(chain)
    back = chain_from_bytes(raw, "mem")
    np.testing.assert_array_equal(back.travel_per_unit, chain.travel_per_unit)
    assert back.sha256() == chain.sha256()
    start = chain.home_frame
    # zero actions: the start frame exactly; the slide alone moves the block, nothing else
    zero = chain_rollout(back, start, np.zeros(3), np.zeros((1, 3, 3), np.float32))
    np.testing.assert_array_equal(zero[0, -1], start)
    acts = np.zeros((1, 3, 3), np.float32)
    acts[0, :, 2] = 0.05  # 5 cm per step
    out = chain_rollout(back, start, np.zeros(3), acts)[0, -1]
    changed = np.abs(out.astype(int) - start).sum(-1) > 30
    ys, xs = np.nonzero(changed)
    assert changed.sum() > 10 and xs.min() >= 22, (changed.sum(), xs.min())
    # the block's centre moved the way the true slide moves it
    blk = arm.link == 2
    want = (arm.positions(np.array([0, 0, 0.15]))[blk] - arm.positions(np.zeros(3))[blk]).mean(0)
    green = (out[..., 1] > 150) & (out[..., 0] < 100)
    hy, hx = np.nonzero((start[..., 1] > 150) & (start[..., 0] < 100))
    gy, gx = np.nonzero(green)
    moved = np.array([gx.mean() - hx.mean(), gy.mean() - hy.mean()])
    assert np.linalg.norm(moved - want) < 0.5, (moved, want)


def test_a_revolute_chain_keeps_schema_1_and_its_digest():
    """Without a prismatic channel the file is schema 1 with no travel field, as before."""
    import io

    from edge.runtime.chain import load_chain_calibration

    chain = load_chain_calibration("samples/cell_sample/chain.npz")
    assert chain.schema_version == 1 and not chain.prismatic.any()
    with np.load(io.BytesIO(chain_bytes(chain))) as z:
        assert "travel_per_unit" not in z.files
    raw = open("samples/cell_sample/chain.npz", "rb").read()
    assert chain_from_bytes(raw, "x").sha256() == chain.sha256()


def test_a_channel_that_both_turns_and_slides_is_refused(slide_fit):
    arm, fit = slide_fit
    chain = _calibration(fit, arm)
    chain.rad_per_unit = np.ones(3)
    with pytest.raises(ChainFileError, match="'travel_per_unit'.*a channel turns or slides"):
        chain.validate("x")
    chain.rad_per_unit = np.array([1.0, 1.0, 0.0])
    chain.travel_per_unit = np.array([0.0, 0.0, -1.0])
    with pytest.raises(ChainFileError, match="'travel_per_unit': expected values >= 0"):
        chain.validate("x")


def _render(arm: ArmWithSlide, q: np.ndarray, scale: int) -> np.ndarray:
    """The sweep drawn at ``scale`` times the grid: uint8 ``[T, S, S, 3]``, a striped arm
    (nearest surface wins) over a scene with still boxes."""
    n = SIZE * scale
    ys, xs = np.mgrid[0:n, 0:n]
    scene = np.zeros((n, n, 3), np.uint8)
    scene[...] = (40, 70, 120)
    scene[(xs // (3 * scale) + ys // (5 * scale)) % 7 == 0] = (60, 140, 60)
    off = (np.arange(scale) + 0.5) / scale
    rys, rxs = np.nonzero(arm.robot)
    shape = (len(rxs), scale, scale)
    u = np.broadcast_to(rxs[:, None, None] + off[None, None, :], shape).reshape(-1)
    v = np.broadcast_to(rys[:, None, None] + off[None, :, None], shape).reshape(-1)
    link = np.repeat(arm.link, scale * scale)
    z = 2.0 + 0.01 * (u - 0.5) + 0.005 * (v - 0.5)
    pts = np.stack([(u - C[0]) * z / F, (v - C[1]) * z / F, z], -1)
    stripe = ((u * 2).astype(int) + (v * 3).astype(int)) % 3
    colour = np.array([[200, 40, 40], [240, 120, 60], [150, 20, 60]], np.uint8)[stripe]
    colour[link == 2] = (230, 230, 90)
    out = np.empty((len(q), n, n, 3), np.uint8)
    for t, qt in enumerate(q):
        p = pts.copy()
        p[link == 2] += qt[2] * arm.slide
        p[link >= 1] = _rot(p[link >= 1], arm.axes[1], arm.pivots[1], qt[1])
        p = _rot(p, arm.axes[0], arm.pivots[0], qt[0])
        px = np.floor(_project(p) * scale).astype(int)
        ok = (px >= 0).all(1) & (px < n).all(1)
        order = np.argsort(-p[:, 2])
        order = order[ok[order]]
        frame = scene.copy()
        frame[px[order, 1], px[order, 0]] = colour[order]
        out[t] = frame
    return out


def test_read_chain_reads_a_recorded_sweep_with_a_gripper_channel_in_metres(tmp_path):
    """``syncedge model read-chain`` on a recorded sweep whose third channel is in m (a
    gripper): read, not refused; the file says which channel slides; the runtime moves the
    block where the true slide puts it, at a reading the sweep never reached."""
    pytest.importorskip("torch")
    import json

    from edge.cli import main
    from edge.episode import CalibrationSegment, Episode, EpisodeMetadata, save_episode
    from edge.runtime.chain import chain_positions, load_chain_calibration

    arm = ArmWithSlide()
    q, _ = arm.sweep()
    fovy = float(np.degrees(2 * np.arctan(0.5 * SIZE / F)))
    meta = EpisodeMetadata(
        cell_id="slide", camera_id="cam", robot_id="arm", robot="arm-with-gripper",
        dof_names=("shoulder", "elbow", "gripper"), dof_units=("rad", "rad", "m"),
        fps=10.0, kind="calibration", camera={"fovy_deg": fovy},
        segments=(CalibrationSegment("shoulder", 0, 8, 0.4),
                  CalibrationSegment("elbow", 8, 16, 0.4),
                  CalibrationSegment("gripper", 16, 24, 0.15)))
    acts = np.zeros((len(q), 3), np.float32)
    acts[:-1] = np.diff(q, axis=0)
    ep = Episode(_render(arm, q, 4), acts, np.arange(len(q)) / 10.0, meta,
                 joint_positions=q)
    cal = save_episode(ep, tmp_path / "cal.npz")
    out = tmp_path / "chain.npz"
    assert main(["model", "read-chain", "--calibration", str(cal), "--out", str(out),
                 "--grid", str(SIZE), "--photometric", "64", "--threads", "1"]) == 0
    chain = load_chain_calibration(out)
    assert chain.schema_version == 2 and chain.prismatic.tolist() == [False, False, True]
    assert chain.info["prismatic"] == ["gripper"]
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["sha256"] == chain.sha256()
    idx = np.full(arm.robot.shape, -1)
    idx[arm.robot] = np.arange(arm.robot.sum())
    blk = np.zeros(arm.robot.shape, bool)
    blk[arm.robot] = arm.link == 2
    both = chain.robot & blk  # the block's pixels the read kept as arm
    assert both.sum() >= 20
    # the slide alone, past the sweep's reach and the other way: within a tenth of the
    # motion; with the joints turned too, within the bound the revolute read meets
    # (test_chain_fit's two-link read-chain test; the slide's depth component is what
    # perspective alone tells, and the turns carry its error into the image)
    for qq, bound in (([0.0, 0.0, 0.25], 0.1), ([0.0, 0.0, -0.2], 0.1),
                      ([0.2, -0.1, 0.2], 0.6), ([0.2, -0.1, 0.0], 0.6)):
        uv, _ = chain_positions(chain, np.asarray(qq)[None])
        truth = arm.positions(np.asarray(qq))[idx[both]]
        still = arm.positions(np.zeros(3))[idx[both]]
        err = np.median(np.linalg.norm(uv[0][both[chain.robot]] - truth, axis=1))
        moved = np.median(np.linalg.norm(still - truth, axis=1))
        assert err < bound * moved, (qq, err, moved)
