"""The true backward flow of robot pixels: hand-made cameras and poses with known answers,
and a MuJoCo-rendered episode whose start frame, warped by it, shows the target's arm."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from export.cells.geometry import (
    NO_LINK,
    dof_link_poses,
    load_geometry,
    project_points,
    render_chunk_geometry,
    true_backward_flow,
    true_dof_fields,
    unproject,
)
from export.errors import CellError

# a camera at the origin looking along +x, z up; near plane 0.1 m, 0.2 m tall, centred
CAMERA = np.array([0, 0, 0, 1, 0, 0, 0, 0, 1, 0.1, 0.1, -0.1, 0.0], np.float64)


def _pose(pos, rot=None) -> np.ndarray:
    rot = np.eye(3) if rot is None else rot
    return np.concatenate([np.asarray(pos, np.float32), np.asarray(rot, np.float32).ravel()])


def test_unproject_and_project_are_inverse_at_pixel_centres() -> None:
    depth = np.full((8, 8), 2.0, np.float32)
    pts = unproject(depth, CAMERA)
    assert np.allclose(pts[..., 0], 2.0)  # depth is along the viewing axis
    uv = project_points(pts, CAMERA, 8, 8)
    ys, xs = np.mgrid[0:8, 0:8]
    assert np.allclose(uv[..., 0], xs + 0.5) and np.allclose(uv[..., 1], ys + 0.5)
    # the image's top-left pixel looks up and to the left (right = forward x up = -y)
    assert pts[0, 0, 1] > 0 and pts[0, 0, 2] > 0
    assert np.isnan(project_points(np.array([[-1.0, 0, 0]]), CAMERA, 8, 8)).all()


def test_a_translated_link_flows_by_its_image_displacement() -> None:
    # one link 2 m away, seen in a 4x4 patch; at the start it was 0.1 m to the camera's
    # right (-y): 0.1 / 2 * (near 0.1 / near-plane width 0.2 * 64 px) ... = 1.6 px
    depth = np.zeros((64, 64), np.float32)
    link = np.full((64, 64), NO_LINK, np.uint8)
    depth[30:34, 30:34] = 2.0
    link[30:34, 30:34] = 0
    at_t = _pose([2.0, 0.0, 0.0])[None]
    at_s = _pose([2.0, -0.1, 0.0])[None]
    flow, on = true_backward_flow(depth, link, at_t, at_s, CAMERA)
    assert on.sum() == 16 and not on[0, 0]
    assert np.allclose(flow[0][on], 0.1 / 2.0 * 0.1 / 0.2 * 64, atol=1e-4)  # 1.6 px
    assert np.allclose(flow[1][on], 0.0, atol=1e-4)
    assert (flow[:, ~on] == 0).all()
    same, _ = true_backward_flow(depth, link, at_t, at_t, CAMERA)
    assert np.abs(same).max() < 1e-4


def test_a_rotated_link_moves_its_pixels_about_the_joint() -> None:
    # link frame at 2 m; a half turn about the viewing axis maps each pixel to its mirror
    # through the link's origin (the image centre)
    depth = np.zeros((64, 64), np.float32)
    link = np.full((64, 64), NO_LINK, np.uint8)
    depth[20:28, 40:44] = 2.0
    link[20:28, 40:44] = 0
    half_turn = np.diag([1.0, -1.0, -1.0])  # rotation by pi about x
    flow, on = true_backward_flow(depth, link, _pose([2, 0, 0])[None],
                                  _pose([2, 0, 0], half_turn)[None], CAMERA)
    ys, xs = np.nonzero(on)
    u, v = xs + 0.5 + flow[0, ys, xs], ys + 0.5 + flow[1, ys, xs]
    assert np.allclose(u, 64 - (xs + 0.5), atol=1e-3) and np.allclose(v, 64 - (ys + 0.5),
                                                                       atol=1e-3)


def _turn_about_x(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[1.0, 0, 0], [0, c, -s], [0, s, c]])


def test_per_dof_fields_of_a_turn_about_the_viewing_axis() -> None:
    # link 0 is carried by joint 0, a turn about the viewing axis through the link's origin
    # (the image centre, 2 m away); joint 1 moves nothing. Depth is unchanged by such a
    # turn, so the image motion is the same turn: the sin field is the radius turned by a
    # quarter and the (1 - cos) field is minus the radius, exactly.
    depth = np.zeros((64, 64), np.float32)
    link = np.full((64, 64), NO_LINK, np.uint8)
    depth[20:28, 40:44] = 2.0
    link[20:28, 40:44] = 0
    home = _pose([2, 0, 0])[None]

    def link_poses(q: np.ndarray) -> np.ndarray:
        return _pose([2, 0, 0], _turn_about_x(q[0]))[None]

    dof = dof_link_poses(link_poses, np.zeros(2), 0.3)
    assert dof.shape == (2, 2, 1, 12)
    fields, on = true_dof_fields(depth, link, home, dof, CAMERA, 0.3)
    assert fields.shape == (2, 4, 64, 64) and on.sum() == 32
    ys, xs = np.nonzero(on)
    r = np.stack([xs + 0.5 - 32, ys + 0.5 - 32])  # (2, N) px from the centre
    assert np.allclose(fields[0, 2:4][:, ys, xs], -r, atol=1e-3)
    sin = fields[0, 0:2][:, ys, xs]
    assert np.allclose(np.linalg.norm(sin, axis=0), np.linalg.norm(r, axis=0), atol=1e-3)
    assert np.allclose((sin * r).sum(0), 0.0, atol=1e-3)  # a quarter turn of the radius
    assert np.abs(fields[1]).max() < 1e-4 and (fields[:, :, ~on] == 0).all()
    # the fields predict the motion of any turn: sin(t) S + (1 - cos t) C
    t = 0.7
    flow, _ = true_backward_flow(depth, link, home, _pose([2, 0, 0], _turn_about_x(t))[None],
                                 CAMERA)
    pred = np.sin(t) * fields[0, 0:2] + (1 - np.cos(t)) * fields[0, 2:4]
    assert np.allclose(pred[:, on], flow[:, on], atol=1e-3)
    with pytest.raises(ValueError, match="step"):
        true_dof_fields(depth, link, home, dof, CAMERA, 0.0)
    with pytest.raises(ValueError, match="expected"):
        true_dof_fields(depth, link, home, dof[:, :1], CAMERA, 0.3)


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="expected"):
        true_backward_flow(np.zeros((4, 4), np.float32), np.zeros((4, 5), np.uint8),
                           np.zeros((1, 12), np.float32), np.zeros((1, 12), np.float32),
                           CAMERA)
    with pytest.raises(ValueError, match="link 3 but 1 poses"):
        true_backward_flow(np.ones((4, 4), np.float32), np.full((4, 4), 3, np.uint8),
                           np.zeros((1, 12), np.float32), np.zeros((1, 12), np.float32),
                           CAMERA)
    with pytest.raises(ValueError, match="camera"):
        unproject(np.ones((4, 4), np.float32), CAMERA[:12])


@pytest.fixture(scope="module")
def chunk(tmp_path_factory) -> Path:
    from export.cells.generate import GenerateOptions, generate_chunk

    out = tmp_path_factory.mktemp("cells")
    return generate_chunk("train", 0, out, GenerateOptions(
        cells_per_chunk=1, motion_episodes=1, motion_frames=12), command="test").parent


def test_rendered_geometry_warps_the_start_onto_the_target_arm(chunk: Path) -> None:
    torch = pytest.importorskip("torch")
    from edge.episode import load_episode
    from export.cells.sampling import CellParams
    from export.cells.scene import CellScene
    from export.models.warp import identity_grid, warp

    manifest = render_chunk_geometry(chunk, command="test")
    files = json.loads(manifest.read_text())["files"]
    assert len(files) == 1 and next(iter(files)).endswith("motion-00.geometry.npz")
    ep_path = next(chunk.glob("*/motion-00.npz"))
    ep, geo = load_episode(ep_path), load_geometry(ep_path)
    assert geo is not None and geo["depth"].shape == (12, 64, 64)
    assert np.array_equal(geo["link"] != NO_LINK, ep.robot_mask)
    n, links = ep.num_dof, geo["poses"].shape[1]
    assert geo["dof_poses"].shape == (12, n, 2, links, 12)
    # each joint's own field predicts where the arm goes when that joint alone turns
    fields, on = true_dof_fields(geo["depth"][0], geo["link"][0], geo["poses"][0],
                                 geo["dof_poses"][0], geo["camera"], float(geo["dof_step"]))
    assert on.sum() > 20 and np.array_equal(on, geo["link"][0] != NO_LINK)
    # the first joint carries the whole arm: a small turn of it alone is predicted by its
    # fields to within a tenth of a pixel (the projection's second order)
    t, q = 0.1, ep.joint_positions[0]
    params = CellParams.from_json_dict(
        json.loads((chunk / "manifest.json").read_text())["cells"][0])
    with CellScene(params.robot) as scene:
        scene.apply_cell(params)
        qc = params.convention.to_canonical(q.astype(np.float64)[None])[0]
        qc[0] += t
        turned = scene.link_poses(qc)
    flow, ok = true_backward_flow(geo["depth"][0], geo["link"][0], geo["poses"][0], turned,
                                  geo["camera"])
    pred = np.sin(t) * fields[0, 0:2] + (1 - np.cos(t)) * fields[0, 2:4]
    assert np.abs(flow[:, ok]).mean() > 0.5
    assert np.abs(pred[:, ok] - flow[:, ok]).max() < 0.1
    s, t = 0, 11
    flow, on = true_backward_flow(geo["depth"][t], geo["link"][t], geo["poses"][t],
                                  geo["poses"][s], geo["camera"])
    assert np.abs(flow[:, on]).mean() > 1.0  # the arm moved
    start = torch.from_numpy(ep.frames[s]).permute(2, 0, 1)[None].float() / 255
    warped = warp(start, torch.from_numpy(flow)[None], identity_grid(64))[0]
    warped = warped.permute(1, 2, 0).numpy()
    target = ep.frames[t] / 255.0
    err_warp = np.abs(warped - target)[on].mean()
    err_copy = np.abs(ep.frames[s] / 255.0 - target)[on].mean()
    assert err_warp < 0.7 * err_copy, (err_warp, err_copy)
    # a complete chunk's geometry is kept, not rendered again
    mtime = manifest.stat().st_mtime_ns
    assert render_chunk_geometry(chunk).stat().st_mtime_ns == mtime


def test_geometry_of_an_incomplete_chunk_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CellError, match="no manifest.json"):
        render_chunk_geometry(tmp_path)


def test_exact_flow_warp_bound_beats_copying_the_start_on_the_moving_pixels(chunk: Path) -> None:
    from edge.episode import load_episode
    from export.evaluation.frames import exact_flow_warp

    render_chunk_geometry(chunk, command="test")
    ep_path = next(chunk.glob("*/motion-00.npz"))
    ep, geo = load_episode(ep_path), load_geometry(ep_path)
    assert geo is not None
    warped = exact_flow_warp(ep.frames[0], geo, 11)
    assert warped.shape == (11, 64, 64, 3) and warped.dtype == np.uint8
    truth, start = ep.frames[1:12].astype(float), ep.frames[0].astype(float)
    moving = np.abs(truth - start).max(-1) > 8
    err_warp = ((warped - truth) ** 2).mean(-1)[moving].mean()
    err_copy = ((start - truth) ** 2).mean(-1)[moving].mean()
    assert err_warp < 0.8 * err_copy, (err_warp, err_copy)
    # a geometry whose poses never change warps nothing
    still = dict(geo, poses=np.repeat(geo["poses"][:1], len(geo["poses"]), 0))
    assert np.array_equal(exact_flow_warp(ep.frames[0], still, 3), np.repeat(ep.frames[:1], 3, 0))


def test_train_warp_with_the_exact_flow_stops_at_max_minutes_and_resumes(chunk: Path,
                                                                        tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from export.train.warp import WarpTrainOptions, train_warp

    render_chunk_geometry(chunk, command="test")
    data = str(chunk.parent.parent)  # <root>/train/chunk-0000
    opts = WarpTrainOptions(data=[data], out=str(tmp_path / "run"), steps=50, horizon=8,
                            cells_per_batch=1, pairs_per_cell=2, true_flow_weight=0.05,
                            joint_width=8, max_minutes=0.0, threads=1)
    ck = torch.load(train_warp(opts), map_location="cpu", weights_only=False)
    assert ck["step"] == 1 and ck["options"]["true_flow_weight"] == 0.05
    assert np.isfinite(ck["history"][0][4]) and ck["history"][0][4] > 0  # the flow loss
    again = WarpTrainOptions(**{**opts.__dict__, "resume": True, "steps": 3, "max_minutes": None})
    ck = torch.load(train_warp(again), map_location="cpu", weights_only=False)
    assert ck["step"] == 3 and len(ck["history"]) == 3


def test_cli_renders_every_complete_chunk_and_names_a_missing_split(chunk: Path, tmp_path: Path,
                                                                   capsys) -> None:
    from edge.cli import main

    root = chunk.parent.parent
    assert main(["cells", "geometry", "--data", str(root), "--split", "train"]) == 0
    assert "geometry of 1 chunk(s) of train" in capsys.readouterr().out
    assert (chunk / "geometry.json").is_file()
    assert main(["cells", "geometry", "--data", str(tmp_path), "--split", "train"]) == 2
    err = capsys.readouterr().err
    assert "no complete chunk" in err and "syncedge cells generate --split train" in err


def test_per_dof_targets_follow_the_controller_channels(chunk: Path) -> None:
    # controller channel c turns canonical joint perm[c] by signs[c] times its action: the
    # target of channel c, combined as the step combines it, gives the backward flow of
    # that turn (pooled to the 16x16 grid), whatever the convention
    pytest.importorskip("torch")
    from export.cells.sampling import CellParams, Convention
    from export.cells.scene import CellScene
    from export.train.data import load_cells
    from export.train.warp import PairSet

    render_chunk_geometry(chunk, command="test")
    cells = load_cells(chunk.parent.parent, ["train"], with_geometry=True)
    pairs = PairSet(cells, "cpu")
    n = cells[0].num_dof
    conv = Convention(tuple(reversed(range(n))), tuple((-1) ** i for i in range(n)))
    pairs.conventions[0] = conv
    fields, cover = pairs.start_dof_fields(0, 0, 0)
    assert fields.shape == (7, 4, 16, 16) and cover.shape == (1, 16, 16)
    assert (fields[n:] == 0).all() and float(cover.max()) <= 1.0
    geo = cells[0].motions[0].geometry
    params = CellParams.from_json_dict(
        json.loads((chunk / "manifest.json").read_text())["cells"][0])
    q0 = params.convention.to_canonical(
        cells[0].motions[0].joint_positions[0, :n].astype(np.float64)[None])[0]
    keep = cover[0].numpy() >= 0.5
    assert keep.sum() >= 4
    t = 0.1
    moved = 0.0
    with CellScene(params.robot) as scene:
        scene.apply_cell(params)
        for c in range(n):
            q = q0.copy()
            q[conv.perm[c]] += conv.signs[c] * t
            flow, on = true_backward_flow(geo["depth"][0], geo["link"][0], geo["poses"][0],
                                          scene.link_poses(q), geo["camera"])
            robot = on.astype(np.float32)
            pooled = -(flow * robot).reshape(2, 16, 4, 16, 4).sum((2, 4)) / np.maximum(
                robot.reshape(16, 4, 16, 4).sum((1, 3)), 1.0)
            pred = (np.sin(t) * fields[c, 0:2] + (1 - np.cos(t)) * fields[c, 2:4]).numpy()
            assert np.abs(pred - pooled)[:, keep].max() < 0.1, c
            moved = max(moved, float(np.abs(pooled[:, keep]).mean()))
    assert moved > 0.3  # some channel moves the arm by more than a third of a pixel


def test_train_warp_with_the_per_dof_field_loss(chunk: Path, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from export.errors import ExportError
    from export.train.warp import WarpTrainOptions, train_warp

    render_chunk_geometry(chunk, command="test")
    data = str(chunk.parent.parent)
    opts = WarpTrainOptions(data=[data], out=str(tmp_path / "run"), steps=2, horizon=8,
                            cells_per_batch=1, pairs_per_cell=2, true_flow_weight=0.05,
                            dof_field_weight=0.05, joint_width=8, threads=1)
    ck = torch.load(train_warp(opts), map_location="cpu", weights_only=False)
    assert ck["step"] == 2 and ck["options"]["dof_field_weight"] == 0.05
    assert all(np.isfinite(h[1]) for h in ck["history"])
    with pytest.raises(ExportError, match="joint-width"):
        train_warp(WarpTrainOptions(**{**opts.__dict__, "out": str(tmp_path / "r2"),
                                       "joint_width": 0}))


def test_the_product_of_exponentials_of_the_true_axes_moves_the_arm_exactly(chunk: Path) -> None:
    # every joint turned at once by up to 0.6 rad: the chain composed from each joint's
    # axis at the start pose (true_joint_axes) lands every robot pixel where the scene's
    # own forward kinematics puts it
    torch = pytest.importorskip("torch")
    from edge.episode import load_episode
    from export.cells.geometry import true_joint_axes
    from export.cells.sampling import CellParams
    from export.cells.scene import CellScene
    from export.models.kinematics import compose_chain

    render_chunk_geometry(chunk, command="test")
    ep_path = next(chunk.glob("*/motion-00.npz"))
    ep, geo = load_episode(ep_path), load_geometry(ep_path)
    assert geo is not None
    params = CellParams.from_json_dict(
        json.loads((chunk / "manifest.json").read_text())["cells"][0])
    axes, pivots, carried = true_joint_axes(geo["poses"][0], geo["dof_poses"][0],
                                            float(geo["dof_step"]))
    n = ep.num_dof
    assert np.allclose(np.linalg.norm(axes, axis=1), 1.0)
    assert carried[0].sum() >= carried[-1].sum() > 0  # the base joint carries the most
    q0 = params.convention.to_canonical(ep.joint_positions[:1].astype(np.float64))[0]
    dq = np.random.default_rng(0).uniform(-0.6, 0.6, n)
    with CellScene(params.robot) as scene:
        scene.apply_cell(params)
        moved_poses = scene.link_poses(q0 + dq)
    depth, link = geo["depth"][0], geo["link"][0]
    truth, on = true_backward_flow(depth, link, geo["poses"][0], moved_poses, geo["camera"])
    ys, xs = np.nonzero(on)
    pts = unproject(depth, geo["camera"])[ys, xs]
    car = carried[:, link[ys, xs]].astype(np.float64)  # (n, N)
    out = compose_chain(torch.from_numpy(pts)[None], torch.from_numpy(axes)[None],
                        torch.from_numpy(pivots)[None], torch.from_numpy(dq)[None],
                        torch.from_numpy(car)[None])[0].numpy()
    uv = project_points(out, geo["camera"], 64, 64)
    disp = uv - np.stack([xs + 0.5, ys + 0.5], -1)
    assert np.abs(truth[:, ys, xs].T).mean() > 1.0  # the arm moved
    assert np.abs(disp - truth[:, ys, xs].T).max() < 0.05
