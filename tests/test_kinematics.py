"""The kinematic chain and the splat of export/models/kinematics.py on hand-made arrays
with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from export.models.kinematics import (  # noqa: E402
    camera_frame,
    close_gaps,
    compose_chain,
    project_pinhole,
    rotate_about_axis,
    splat_flow,
    splat_values,
)


def _rz(t: float) -> np.ndarray:
    return np.array([[math.cos(t), -math.sin(t), 0], [math.sin(t), math.cos(t), 0], [0, 0, 1]])


def test_a_quarter_turn_about_an_offset_axis() -> None:
    p = torch.tensor([[[2.0, 0.0, 0.5]]])
    out = rotate_about_axis(p, torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[1.0, 0.0, 0.0]]),
                            torch.tensor([math.pi / 2]))
    assert torch.allclose(out, torch.tensor([[[1.0, 1.0, 0.5]]]), atol=1e-6)


def test_the_chain_matches_forward_kinematics_whatever_the_joint_numbering() -> None:
    # a planar two-link arm: joint a at the origin, joint b at (1, 0, 0), both about z;
    # a point on link 1 (carried by a) and one on link 2 (carried by a and b)
    ta, tb = 0.7, -1.1
    pts = torch.tensor([[[0.5, 0.0, 0.0], [1.5, 0.2, 0.0]]], dtype=torch.float64)
    fk1 = _rz(ta) @ np.array([0.5, 0.0, 0.0])
    fk2 = _rz(ta) @ (np.array([1.0, 0, 0]) + _rz(tb) @ np.array([0.5, 0.2, 0.0]))
    z = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    for numbering in ((0, 1), (1, 0)):  # which index each joint gets
        axes = torch.stack([z, z])[None]
        piv = torch.zeros(1, 2, 3, dtype=torch.float64)
        ang = torch.zeros(1, 2, dtype=torch.float64)
        car = torch.zeros(1, 2, 2, dtype=torch.float64)
        ia, ib = numbering
        piv[0, ib, 0] = 1.0
        ang[0, ia], ang[0, ib] = ta, tb
        car[0, ia] = 1.0  # joint a carries both points
        car[0, ib, 1] = 1.0  # joint b carries the distal one
        out = compose_chain(pts, axes, piv, ang, car)[0].numpy()
        assert np.allclose(out[0], fk1, atol=1e-9) and np.allclose(out[1], fk2, atol=1e-9)
        assert torch.equal(compose_chain(pts, axes, piv, ang * 0, car), pts)
    with pytest.raises(ValueError, match="expected"):
        compose_chain(pts, axes, piv, ang[:, :1], car)


def test_the_pinhole_of_a_cell_camera_matches_its_projection() -> None:
    from export.cells.geometry import project_points

    cam = np.array([0.3, -0.2, 1.1, 0.8, 0.6, 0.0, 0.0, 0.0, 1.0, 0.05, 0.02, -0.03, 0.004])
    cam[3:6] /= np.linalg.norm(cam[3:6])
    pts = np.array([[2.0, 1.0, 0.9], [1.5, 0.2, 1.4], [2.5, 1.8, 0.5]])
    rot, f, c = camera_frame(torch.from_numpy(cam), 64, 48)
    local = (torch.from_numpy(pts) - torch.from_numpy(cam[0:3])) @ rot.T
    uv = project_pinhole(local[None], f[None], c[None])[0].numpy()
    assert np.allclose(uv, project_points(pts, cam, 64, 48), atol=1e-9)


def test_a_translated_block_splats_its_backward_flow_where_it_lands() -> None:
    ys, xs = torch.meshgrid(torch.arange(4, 8.0), torch.arange(2, 6.0), indexing="ij")
    src = torch.stack([xs.flatten() + 0.5, ys.flatten() + 0.5], -1)[None]  # 16 pixel centres
    dst = src + torch.tensor([6.0, 1.0])
    flow, dens = splat_flow(src, dst, (16, 16))
    target = torch.zeros(16, 16, dtype=torch.bool)
    target[5:9, 8:12] = True
    assert torch.allclose(flow[0][:, target], torch.tensor([[-6.0], [-1.0]]))
    assert torch.allclose(dens[0, 0][target], torch.ones(16)) and (dens[0, 0][~target] == 0).all()
    assert (flow[0][:, ~target] == 0).all()
    # a sample halfway between two centres splits its weight; zero motion gives zero flow
    f0, d0 = splat_flow(src, src, (16, 16))
    assert (f0 == 0).all() and torch.allclose(d0.sum(), torch.tensor(16.0))


def test_the_nearest_surface_wins_where_two_land() -> None:
    src = torch.tensor([[[2.5, 2.5], [8.5, 2.5]]])
    dst = torch.tensor([[[5.5, 2.5], [5.5, 2.5]]])  # both land on pixel (2, 5)
    near_first = torch.tensor([[1.0, 1.2]])
    flow, _ = splat_flow(src, dst, (8, 12), depth=near_first, depth_scale=0.01)
    assert torch.allclose(flow[0, :, 2, 5], torch.tensor([-3.0, 0.0]), atol=1e-6)
    flow, _ = splat_flow(src, dst, (8, 12), depth=near_first.flip(1), depth_scale=0.01)
    assert torch.allclose(flow[0, :, 2, 5], torch.tensor([3.0, 0.0]), atol=1e-6)


def test_gaps_between_stretched_samples_are_closed_and_the_silhouette_does_not_grow() -> None:
    flow = torch.zeros(1, 2, 8, 8)
    dens = torch.zeros(1, 1, 8, 8)
    dens[0, 0, 2:6, 2:6] = 1.0
    flow[0, 0, 2:6, 2:6] = 2.0
    dens[0, 0, 3, 3] = 0.0  # a hole
    flow[0, 0, 3, 3] = 0.0
    out, cover = close_gaps(flow, dens)
    assert cover[0, 0, 3, 3] == 1 and torch.isclose(out[0, 0, 3, 3], torch.tensor(2.0))
    assert cover[0, 0].sum() == 16 and cover[0, 0, 1, 3] == 0


def test_the_nearest_surface_wins_however_deep_the_scene() -> None:
    # two samples on one pixel centre, 0.1 apart in depth, in a scene whose nearest point
    # is 5 depth units closer: the softmax is taken per pixel, so nothing underflows
    tgt = torch.tensor([[[3.5, 3.5], [3.5, 3.5], [0.5, 0.5]]], dtype=torch.float64)
    val = torch.tensor([[[10.0], [20.0], [7.0]]], dtype=torch.float64)
    z = torch.tensor([[6.0, 6.1, 1.0]], dtype=torch.float64)
    out, dens = splat_values(tgt, val, (5, 5), depth=z, depth_scale=0.01)
    assert out[0, 0, 3, 3].item() == pytest.approx(10.0, abs=1e-3)
    assert out[0, 0, 0, 0].item() == pytest.approx(7.0)
    assert dens[0, 0, 3, 3].item() == pytest.approx(2.0)


def test_a_sample_at_no_position_lands_nowhere() -> None:
    tgt = torch.tensor([[[1.5, 1.5], [float("nan"), 2.0]]], dtype=torch.float64)
    val = torch.tensor([[[1.0, 2.0, 3.0], [9.0, 9.0, 9.0]]], dtype=torch.float64)
    out, dens = splat_values(tgt, val, (3, 3), depth=torch.tensor([[1.0, 0.5]],
                                                                     dtype=torch.float64))
    assert torch.isfinite(out).all()
    assert out[0, :, 1, 1].tolist() == pytest.approx([1.0, 2.0, 3.0])
    assert dens.sum().item() == pytest.approx(1.0)
