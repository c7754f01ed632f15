"""The chain model's runtime (edge.runtime.chain): file format, rollout properties and
the NumPy splatting's agreement with the training code's."""

from __future__ import annotations

import dataclasses
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from edge.runtime.chain import (
    ChainCalibration,
    ChainFileError,
    arm_cover,
    chain_positions,
    chain_rollout,
    close_gaps,
    load_chain_calibration,
    save_chain_calibration,
    splat_values,
)
from edge.runtime.errors import RuntimeInputError

SIZE, F = 32, 40.0
C = np.array([16.0, 16.0])
ARM, SCENE = (200, 40, 40), (30, 90, 160)


def two_link_chain(signs=(1.0, -1.0)) -> ChainCalibration:
    """Two links on a tilted plane 2 units away: channel 0 turns both (shoulder), channel 1
    only the forearm (elbow); a plain scene behind."""
    ys, xs = np.mgrid[0:SIZE, 0:SIZE]
    upper = (xs >= 8) & (xs < 14) & (ys >= 6) & (ys < 26)
    fore = (xs >= 14) & (xs < 26) & (ys >= 18) & (ys < 24)
    robot = upper | fore
    z = 2.0 + 0.01 * xs + 0.005 * ys
    u, v = xs + 0.5, ys + 0.5
    pts = np.stack([(u - C[0]) * z / F, (v - C[1]) * z / F, z], -1)
    axes = np.array([[0.9, 0.3, 0.6], [1.0, 0.1, 0.4]])
    axes /= np.linalg.norm(axes, axis=1, keepdims=True)
    home = np.empty((SIZE, SIZE, 3), np.uint8)
    home[:] = SCENE
    home[robot] = ARM
    bg = np.empty((SIZE, SIZE, 3), np.float32)
    bg[:] = SCENE
    return ChainCalibration(
        robot=robot, depth=z[robot], axes=axes, pivots=pts[[4, 21], [11, 14]],
        carried=np.stack([np.ones(robot.sum()), fore[robot].astype(float)]),
        rad_per_unit=np.asarray(signs, float), focal_px=F, centre_px=C.copy(),
        residual_px=np.zeros(2), home_frame=home, home_joint_positions=np.array([0.1, -0.2]),
        background=bg, background_seen=np.ones((SIZE, SIZE), bool),
        dof_names=["shoulder", "elbow"], info={"calibration": {"fps": 10.0}})


def start_frame(chain: ChainCalibration, q: np.ndarray) -> np.ndarray:
    """The frame at joint readings ``q``: the scene with the arm drawn where the chain puts
    it (the rollout's own drawing, so only the rollout's motion is under test)."""
    return chain_rollout(chain, chain.home_frame, chain.home_joint_positions,
                         (np.asarray(q) - chain.home_joint_positions)[None])[0]


def test_zero_actions_give_the_start_frame_from_any_start_pose():
    chain = two_link_chain()
    rng = np.random.default_rng(0)
    for q in ([0.1, -0.2], [0.4, 0.3], [-0.3, 1.8], [0.0, -2.5]):
        start = start_frame(chain, np.asarray(q))
        start = np.where(rng.random(start.shape[:2])[..., None] < 0.2,
                         rng.integers(0, 256, start.shape), start).astype(np.uint8)
        out = chain_rollout(chain, start, np.asarray(q), np.zeros((5, 2)))
        assert out.shape == (5, SIZE, SIZE, 3)
        np.testing.assert_array_equal(out, np.broadcast_to(start, out.shape))


def test_actions_move_the_arm_and_uncover_the_background():
    chain = two_link_chain()
    q0 = chain.home_joint_positions
    out = chain_rollout(chain, chain.home_frame, q0, np.array([[0.3, 0.0], [0.3, 0.0]]))
    arm_at = [np.all(f == ARM, axis=-1) for f in out]
    cover = arm_cover(chain, np.array([[0.3, 0.0], [0.6, 0.0]]))
    left = chain.robot & ~cover[1]
    assert left.sum() > 30  # the arm left home pixels...
    np.testing.assert_array_equal(out[1][left], np.broadcast_to(SCENE, out[1][left].shape))
    assert (arm_at[1] & ~chain.robot).sum() > 10  # ...and is drawn where it was not
    assert (arm_at[1] & ~arm_at[0]).sum() > 5  # and step 2 moved on from step 1
    # without the fill the vacated pixels keep the start frame's arm colour
    nofill = chain_rollout(chain, chain.home_frame, q0, np.array([[0.6, 0.0]]), fill=False)
    np.testing.assert_array_equal(nofill[0][left], np.broadcast_to(ARM, nofill[0][left].shape))


def test_relabelled_and_sign_flipped_channels_give_the_same_frames():
    chain = two_link_chain()
    rng = np.random.default_rng(1)
    q0 = np.array([0.25, 0.5])
    acts = rng.uniform(-0.1, 0.1, (3, 6, 2))
    start = start_frame(chain, q0)
    ref = chain_rollout(chain, start, q0, acts)
    # the controller reports elbow first and the shoulder negated: the calibration read
    # on that controller carries the same relabelling
    perm, sign = np.array([1, 0]), np.array([1.0, -1.0])
    other = two_link_chain(signs=tuple(np.asarray((1.0, -1.0))[perm] * sign))
    other.axes, other.pivots = chain.axes[perm], chain.pivots[perm]
    other.carried, other.dof_names = chain.carried[perm], ["elbow", "shoulder"]
    other.home_joint_positions = chain.home_joint_positions[perm] * sign
    out = chain_rollout(other, start, q0[perm] * sign, acts[..., perm] * sign)
    np.testing.assert_array_equal(out, ref)


def test_batched_candidates_equal_one_at_a_time():
    chain = two_link_chain()
    acts = np.random.default_rng(2).uniform(-0.15, 0.15, (4, 5, 2))
    start = start_frame(chain, np.array([0.2, 0.1]))
    both = chain_rollout(chain, start, np.array([0.2, 0.1]), acts)
    for i in range(4):
        np.testing.assert_array_equal(both[i], chain_rollout(chain, start,
                                                             np.array([0.2, 0.1]), acts[i]))


@pytest.mark.parametrize("carry_rim", [False, True])
def test_frames_drawn_a_chunk_at_a_time_equal_all_at_once(monkeypatch, carry_rim):
    import edge.runtime.chain as chain_module

    chain = two_link_chain()
    q0 = np.array([0.2, 0.1])
    acts = np.random.default_rng(5).uniform(-0.2, 0.2, (3, 7, 2))
    start = start_frame(chain, q0)
    runs = []
    for chunk in (1, 4, 16, 1000):  # 21 frames: chunks that split candidates and not
        monkeypatch.setattr(chain_module, "ROLLOUT_CHUNK_FRAMES", chunk)
        runs.append(chain_rollout(chain, start, q0, acts, with_cover=True,
                                  carry_rim=carry_rim))
    assert runs[0][1].any() and not np.array_equal(runs[0][0][:, 0], runs[0][0][:, -1])
    for frames, cover in runs[1:]:
        np.testing.assert_array_equal(frames, runs[0][0])
        np.testing.assert_array_equal(cover, runs[0][1])


def test_compose_by_link_groups_equals_joint_by_joint():
    import edge.runtime.chain as chain_module

    rng = np.random.default_rng(7)
    k, n = 5, 200
    axes = rng.normal(size=(k, 3))
    axes /= np.linalg.norm(axes, axis=1, keepdims=True)
    piv, pts = rng.normal(size=(k, 3)), rng.normal(size=(n, 3)) + [0, 0, 3]
    link = rng.integers(0, k + 1, n)
    serial = (np.arange(k)[:, None] < link[None]).astype(float)  # one group per link
    soft = serial.copy()
    soft[:, :40] *= 0.5  # soft memberships: still few groups
    scattered = rng.random((k, n))  # a group per point: moved joint by joint
    ang, trav = rng.normal(size=(6, k)), rng.normal(size=(6, k))
    for car in (serial, soft, scattered):
        order = np.argsort(-car.sum(1), kind="stable")
        for travel in (None, trav):
            want = chain_module._compose_by_joint(pts, axes, piv, ang, car, travel, order)
            got = chain_module.compose_chain(pts, axes, piv, ang, car, travel)
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    # and the points really move (the comparison is not of two identities)
    assert np.abs(chain_module.compose_chain(pts, axes, piv, ang, serial) - pts).max() > 0.1


def test_bad_inputs_are_refused_naming_them():
    chain = two_link_chain()
    start = chain.home_frame
    with pytest.raises(RuntimeInputError, match=r"start frame: expected uint8 \[32, 32, 3\]"):
        chain_rollout(chain, np.zeros((64, 64, 3), np.uint8), np.zeros(2), np.zeros((2, 2)))
    with pytest.raises(RuntimeInputError, match="start joint readings: expected 2"):
        chain_rollout(chain, start, np.zeros(3), np.zeros((2, 2)))
    with pytest.raises(RuntimeInputError, match=r"actions: expected \[S, 2\]"):
        chain_rollout(chain, start, np.zeros(2), np.zeros((2, 7)))
    with pytest.raises(RuntimeInputError, match="actions: NaN"):
        chain_rollout(chain, start, np.zeros(2), np.full((2, 2), np.nan))


def test_file_round_trip_and_refusals(tmp_path):
    chain = two_link_chain()
    p = save_chain_calibration(tmp_path / "chain.npz", chain)
    back = load_chain_calibration(p)
    assert back.sha256() == chain.sha256()
    assert back.dof_names == chain.dof_names and back.info == chain.info
    np.testing.assert_array_equal(chain_rollout(back, chain.home_frame, [0.3, 0.1],
                                                np.full((3, 2), 0.1)),
                                  chain_rollout(chain, chain.home_frame, [0.3, 0.1],
                                                np.full((3, 2), 0.1)))
    with pytest.raises(ChainFileError, match="no such file"):
        load_chain_calibration(tmp_path / "missing.npz")
    with pytest.raises(ChainFileError, match="is a folder"):
        load_chain_calibration(tmp_path)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ChainFileError, match="not a chain calibration: expected a NumPy .npz"):
        load_chain_calibration(tmp_path / "junk.npz")
    (tmp_path / "cut.npz").write_bytes(p.read_bytes()[:600])
    with pytest.raises(ChainFileError, match="damaged or truncated"):
        load_chain_calibration(tmp_path / "cut.npz")

    def rewrite(name: str, **changes) -> str:
        with np.load(p) as z:
            data = {k: z[k] for k in z.files}
        header = json.loads(bytes(data["header_json"]).decode())
        for k, v in changes.items():
            if k in header:
                header[k] = v
            else:
                data[k] = v
        data["header_json"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
        out = tmp_path / name
        np.savez(out, **data)
        return str(out)

    with pytest.raises(ChainFileError, match="'schema_version': expected one of 1, 2, found 3"):
        load_chain_calibration(rewrite("v3.npz", schema_version=3))
    with pytest.raises(ChainFileError, match="field 'travel_per_unit' missing"):
        load_chain_calibration(rewrite("v2.npz", schema_version=2))
    with pytest.raises(ChainFileError, match="has no prismatic channel"):
        load_chain_calibration(rewrite("v2zero.npz", schema_version=2,
                                       travel_per_unit=np.zeros(chain.num_dof)))
    with pytest.raises(ChainFileError, match="field 'depth': expected positive"):
        load_chain_calibration(rewrite("neg.npz", depth=-chain.depth))
    with pytest.raises(ChainFileError, match="field 'axes': expected shape"):
        load_chain_calibration(rewrite("axes.npz", axes=np.zeros((3, 3))))
    with pytest.raises(ChainFileError, match="sha256"):
        load_chain_calibration(rewrite("altered.npz", pivots=chain.pivots + 0.01))
    with zipfile.ZipFile(p) as z:
        names = [n for n in z.namelist() if n != "depth.npy"]
        with zipfile.ZipFile(tmp_path / "nodepth.npz", "w") as out:
            for n in names:
                out.writestr(n, z.read(n))
    with pytest.raises(ChainFileError, match="field 'depth' missing"):
        load_chain_calibration(tmp_path / "nodepth.npz")


def test_saving_refuses_an_inconsistent_chain_and_writes_nothing(tmp_path):
    chain = two_link_chain()
    chain.carried = chain.carried[:, :-1]
    with pytest.raises(ChainFileError, match="field 'carried'"):
        save_chain_calibration(tmp_path / "c.npz", chain)
    assert not list(tmp_path.iterdir())


def test_positions_follow_rodrigues_about_each_axis():
    chain = two_link_chain()
    uv0, _ = chain_positions(chain, np.zeros((1, 2)))
    ys, xs = np.nonzero(chain.robot)
    np.testing.assert_allclose(uv0[0], np.stack([xs + 0.5, ys + 0.5], 1), atol=1e-9)
    # a half turn of the elbow about its axis, twice, is a full turn: back home
    uv, _ = chain_positions(chain, np.array([[0.0, np.pi], [0.0, 2 * np.pi]]))
    fore = chain.carried[1] > 0
    assert np.median(np.linalg.norm(uv[0][fore] - uv0[0][fore], axis=1)) > 2.0
    np.testing.assert_allclose(uv[1], uv0[0], atol=1e-9)
    np.testing.assert_allclose(uv[0][~fore], uv0[0][~fore], atol=1e-9)  # upper arm stays
    assert arm_cover(chain, np.zeros((1, 2)))[0][chain.robot].mean() > 0.99


def test_numpy_splatting_equals_the_training_code():
    torch = pytest.importorskip("torch")
    from export.models.kinematics import close_gaps as close_t
    from export.models.kinematics import splat_values as splat_t

    rng = np.random.default_rng(3)
    b, n, h, w = 3, 400, 12, 16
    tgt = rng.uniform(-2, 18, (b, n, 2))
    tgt[0, :5] = np.nan  # lands nowhere
    vals = rng.normal(size=(b, n, 3))
    wt = rng.uniform(0, 1, (b, n))
    z = rng.uniform(1.0, 1.1, (b, n))
    v_np, d_np = splat_values(tgt, vals, (h, w), wt, z, 0.01, 4.0)
    v_t, d_t = splat_t(torch.from_numpy(tgt), torch.from_numpy(vals), (h, w),
                       torch.from_numpy(wt), torch.from_numpy(z), 0.01, 4.0)
    np.testing.assert_allclose(v_np, v_t.permute(0, 2, 3, 1).numpy(), atol=1e-9)
    np.testing.assert_allclose(d_np, d_t[:, 0].numpy(), atol=1e-9)
    c_np, cov_np = close_gaps(v_np, d_np)
    c_t, cov_t = close_t(v_t, d_t)
    np.testing.assert_allclose(c_np, c_t.permute(0, 2, 3, 1).numpy(), atol=1e-9)
    np.testing.assert_array_equal(cov_np, cov_t[:, 0].numpy() > 0.5)


def test_the_arm_rim_the_cut_left_out_goes_with_the_arm():
    """A start frame whose arm is a pixel wider than the chain's arm pixels (a rim the cut
    left out): once the arm has left, the rim is background too, not a ghost, and the rim
    is drawn around the arm where it went (and counts as arm in the cover); without
    carrying, the moved arm has no rim; with ``edge_px=0`` the rim stays; an arm that stays
    keeps its rim."""
    import cv2

    chain = two_link_chain()
    q0 = chain.home_joint_positions
    start = chain.home_frame.copy()
    grow = np.ones((3, 3), np.uint8)
    wide = cv2.dilate(chain.robot.astype(np.uint8), grow) > 0
    rim = wide & ~chain.robot
    start[rim] = ARM
    move = np.array([[0.6, 0.0]])
    cover = arm_cover(chain, move)[0]
    out, got_cover = chain_rollout(chain, start, q0, move, with_cover=True, carry_rim=True)
    out, got_cover = out[0], got_cover[0]
    moved_wide = cv2.dilate(cover.astype(np.uint8), grow) > 0  # the true arm after the move
    gone = rim & ~moved_wide & ~chain.robot
    assert gone.sum() > 20
    left_behind = gone & np.all(out == ARM, axis=-1)
    assert left_behind.sum() <= 0.1 * gone.sum(), left_behind.sum()  # beside arm that stays
    new_rim = moved_wide & ~cover & ~wide  # where the rim went, away from where it was
    assert new_rim.sum() > 20
    drawn = (new_rim & np.all(out == ARM, axis=-1)).sum()
    assert drawn >= 0.6 * new_rim.sum(), (drawn, new_rim.sum())
    assert (got_cover & new_rim).sum() == drawn  # the predicted robot mask includes it
    plain = chain_rollout(chain, start, q0, move)[0]
    assert (new_rim & np.all(plain == ARM, axis=-1)).sum() <= 0.1 * new_rim.sum()
    kept = chain_rollout(chain, start, q0, move, edge_px=0)[0]
    assert (gone & np.all(kept == ARM, axis=-1)).sum() >= 0.9 * gone.sum()
    np.testing.assert_array_equal(chain_rollout(chain, start, q0, np.zeros((2, 2))),
                                  np.broadcast_to(start, (2,) + start.shape))


def test_start_agreement_says_whether_the_chain_puts_the_arm_where_the_start_shows_it():
    from edge.runtime.chain import start_agreement

    chain = two_link_chain()
    q = np.array([0.5, 0.8])
    true_start = start_frame(chain, q)  # the arm where the chain puts it at q
    right = start_agreement(chain, true_start, q)
    assert right["arm_on_arm"] == pytest.approx(1.0, abs=0.02)
    assert right["arm_drawn"] == pytest.approx(1.0, abs=0.02)
    # the same frame with readings the chain turns elsewhere: its arm lies on background
    wrong = start_agreement(chain, true_start, np.array([-0.6, -1.5]))
    assert wrong["arm_on_arm"] < 0.5 and wrong["arm_drawn"] < 0.5
    # a thin part the chain does not carry (drawn beside the arm): drawn share falls, the
    # chain's own arm still lies on arm
    extra = true_start.copy()
    extra[0:3, :] = ARM
    part = start_agreement(chain, extra, q)
    assert part["arm_on_arm"] == right["arm_on_arm"] and part["arm_drawn"] < right["arm_drawn"]
    # no background seen anywhere: nothing decides
    blind = dataclasses.replace(chain, background_seen=np.zeros((SIZE, SIZE), bool))
    assert start_agreement(blind, true_start, q)["arm_on_arm"] is None
    with pytest.raises(RuntimeInputError, match="start frame: expected uint8"):
        start_agreement(chain, true_start[:16], q)
    with pytest.raises(RuntimeInputError, match="start joint readings"):
        start_agreement(chain, true_start, np.zeros(3))


def textured_chain() -> ChainCalibration:
    """:func:`two_link_chain` in front of a textured scene (a light's change of gain
    and offset can be told apart there, not on a flat one)."""
    chain = two_link_chain()
    ys, xs = np.mgrid[0:SIZE, 0:SIZE]
    scene = np.stack([60 + 50 * np.sin(xs / 3.0) + 2 * ys, 100 + 40 * np.cos(ys / 4.0) + xs,
                      140 + 30 * np.sin((xs + ys) / 5.0)], -1).astype(np.float32)
    home = np.rint(scene).astype(np.uint8)
    home[chain.robot] = ARM
    return dataclasses.replace(chain, home_frame=home, background=np.rint(scene)
                               .astype(np.float32))


def relit(frames: np.ndarray, gain, offset=0.0) -> np.ndarray:
    """``frames`` (uint8) under another light: ``gain * x + offset`` (gain may be an
    array broadcasting over the frame), rounded and clipped."""
    return np.clip(np.rint(frames.astype(np.float64) * gain + offset), 0, 255).astype(np.uint8)


def test_a_light_changed_since_the_calibration_is_matched_from_the_start_frame():
    from edge.runtime.chain import match_light, start_agreement

    chain = textured_chain()
    q = np.array([0.5, 0.8])
    start = start_frame(chain, q)
    acts = np.tile(np.array([[-0.08, 0.06]]), (6, 1))
    # the same light: nothing is measured as changed, the rollout is bit for bit the same
    same = match_light(chain, start, q)
    assert not same.applied and same.before == 0.0
    assert np.array_equal(chain_rollout(chain, start, q, acts),
                          chain_rollout(chain, start, q, acts, match_lighting=False))
    # dimmed (gain 0.6, offset +8): recovered from the start frame alone
    dim = relit(start, 0.6, 8.0)
    m = match_light(chain, dim, q)
    assert m.applied and m.before > 10 and m.after < 1.0
    assert np.allclose(m.gain, 0.6, atol=0.02) and np.allclose(m.offset, 8.0, atol=1.5)
    assert np.abs(m.invert(dim).astype(int) - start).mean() < 1.0
    # the rollout draws what the arm uncovers in the start's light
    want = relit(chain_rollout(chain, start, q, acts), 0.6, 8.0).astype(int)
    got = chain_rollout(chain, dim, q, acts).astype(int)
    old = chain_rollout(chain, dim, q, acts, match_lighting=False).astype(int)
    left = np.abs(old - want).sum(-1) > 30  # the pixels drawn in the old light
    assert left.sum() > 20
    assert np.abs(got - want)[left].mean() < 1.5 and np.abs(old - want)[left].mean() > 30
    # the start agreement: readings that put the arm elsewhere are still told apart
    wrong = np.array([-0.6, -1.5])
    assert start_agreement(chain, dim, wrong)["arm_on_arm"] < 0.5
    assert start_agreement(chain, dim, wrong, match_lighting=False)["arm_on_arm"] > 0.9
    assert start_agreement(chain, dim, q)["light"]["applied"] is True
    # unevenly (dimmer to the left, as from a lamp on one side): the smooth field takes
    # what one gain cannot
    ramp = np.linspace(0.55, 1.0, SIZE)[None, :, None]
    uneven = match_light(chain, relit(start, ramp), q)
    assert uneven.applied and uneven.field is not None and uneven.after < uneven.before / 4


def test_a_light_mapping_that_falls_below_zero_keeps_a_finite_field():
    """More contrast and a negative offset (gain 1.6, offset -60) map the scene's dark
    parts below 0: the uneven field's block ratios must stay positive (its log finite)."""
    from edge.runtime.chain import match_light

    chain = textured_chain()
    dark = np.zeros(chain.robot.shape, bool)
    dark[:8, :8] = True  # a dark corner of the scene (no arm there)
    assert not (dark & chain.robot).any()
    home = chain.home_frame.copy()
    home[dark] = 36  # mapped to 1.6 * 36 - 60 = -2.4: within 3 levels of the start's 0
    bg = chain.background.copy()
    bg[dark] = 36.0
    chain = dataclasses.replace(chain, home_frame=home, background=bg)
    q = np.array([0.5, 0.8])
    start = relit(start_frame(chain, q), 1.6, -60.0)
    m = match_light(chain, start, q)
    assert m.applied and m.field is not None
    assert np.isfinite(m.field).all() and (m.field > 0).all()
    out = chain_rollout(chain, start, q, np.tile(np.array([[-0.08, 0.06]]), (4, 1)))
    assert np.isfinite(m.apply(chain.background)).all()
    # the rollout draws the uncovered background near the start's light, not garbage
    want = relit(chain_rollout(chain, start_frame(chain, q), q,
                               np.tile(np.array([[-0.08, 0.06]]), (4, 1))), 1.6, -60.0)
    assert np.abs(out.astype(int) - want).mean() < 2.0


def test_a_camera_moved_since_the_calibration_is_told_from_a_moved_arm_and_a_light():
    """On the sample cell's rendered frames: starts with the arm anywhere, dimmed or not,
    read no shift; the same starts moved by 1.5 px (a camera knocked), dimmed or not, do."""
    import cv2

    from edge.episode import load_episode
    from edge.runtime.chain import (
        CAMERA_SHIFT_WARN_PX,
        camera_shift,
        load_chain_calibration,
        start_agreement,
    )

    sample = Path(__file__).resolve().parents[1] / "samples" / "cell_sample"
    chain = load_chain_calibration(sample / "chain.npz")
    ep = load_episode(sample / "test.npz")
    k = chain.num_dof

    def shifted(img, dx, dy):
        m = np.float32([[1, 0, dx], [0, 1, dy]])
        return cv2.warpAffine(img, m, img.shape[1::-1], borderMode=cv2.BORDER_REPLICATE)

    for t in (0, 12, 25, 38):  # the arm anywhere along the test episode
        start, q = ep.frames[t], ep.joint_positions[t, :k]
        for frame in (start, relit(start, 0.6, 8.0)):
            cam = start_agreement(chain, frame, q)["camera"]
            assert not cam["moved"] and cam["shift"] < 0.5, (t, cam)
        for frame in (shifted(start, 1.5, -0.8), relit(shifted(start, 1.5, -0.8), 0.6, 8.0)):
            cam = start_agreement(chain, frame, q)["camera"]
            assert cam["moved"] and cam["shift"] >= CAMERA_SHIFT_WARN_PX, (t, cam)
            assert cam["shift_px"] == pytest.approx([1.5, -0.8], abs=0.4)
    # without the chain's cover (the home arm and the differences still left out)
    assert not camera_shift(chain, ep.frames[0])["moved"]
    assert camera_shift(chain, shifted(ep.frames[0], 2.0, 0.0))["moved"]
    # a chain whose calibration saw no background leaves nothing static to compare: no
    # shift is claimed (it read half the frame's shift, and precheck refused the start)
    import dataclasses

    blind = dataclasses.replace(chain, background_seen=np.zeros_like(chain.background_seen))
    cam = camera_shift(blind, shifted(ep.frames[0], 2.0, 0.0))
    assert not cam["moved"] and cam["judged_px"] < 0.1 * 64 * 64, cam
