"""Moving pixels through a kinematic chain, and carrying the motion to the target frame.

The building blocks of a world model that moves the start frame's pixels *forward* through
the robot's joints instead of laying a flow on the start frame's grid (why:
docs/eval/experiments.md, "the form's own ceiling"): every robot pixel of the start frame
is a 3-D point; each controllable joint turns the points it carries about its axis; the
turns compose along the chain; the moved points are projected, and the motion is splatted
to where each point lands, giving a backward flow *at the target* that a warp of the start
frame can use.

- :func:`rotate_about_axis` is Rodrigues' rotation formula.
- :func:`compose_chain` is the product of exponentials of a serial chain (Brockett 1984;
  Lynch and Park, *Modern Robotics*, 2017, sec. 4.1): with every joint's axis taken at the
  reference pose, ``P' = exp(xi_1 t_1) ... exp(xi_K t_K) P``, the distal joint's turn
  applied first; a point moves only with the joints that carry it.
- :func:`project_pinhole` maps camera-frame points to pixels.
- :func:`splat_flow` carries a forward motion of source pixels to where they land: a
  bilinear splat of ``-motion`` (a backward flow) normalised by the landed weight, with
  optional softmax weighting by depth (Niklaus and Liu 2020, "Softmax Splatting for Video
  Frame Interpolation") so the nearest surface wins.

Everything is differentiable PyTorch on batched tensors; zero angles leave every point
where it is, and a zero motion splats a zero flow. The NumPy oracle
(``scripts/oracle_retrieval.py``) drives these functions with the true geometry of the
cells.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["rotate_about_axis", "compose_chain", "project_pinhole", "splat_values", "splat_flow",
           "close_gaps", "camera_frame"]


def rotate_about_axis(points: Tensor, axis: Tensor, pivot: Tensor, angle: Tensor) -> Tensor:
    """Points turned by ``angle`` about the line through ``pivot`` along ``axis``
    (Rodrigues: ``v cos t + (w x v) sin t + w (w . v)(1 - cos t)`` with ``v = P - o``).

    Args:
        points: ``[..., N, 3]``.
        axis: ``[..., 3]``, unit length (not normalised here).
        pivot: ``[..., 3]``, a point on the axis, in the points' frame and unit.
        angle: ``[...]``, rad (right-handed about ``axis``).

    Returns:
        ``[..., N, 3]``.
    """
    w = axis[..., None, :]
    v = points - pivot[..., None, :]
    c, s = torch.cos(angle)[..., None, None], torch.sin(angle)[..., None, None]
    dot = (v * w).sum(-1, keepdim=True)
    return pivot[..., None, :] + v * c + torch.cross(w.expand_as(v), v, dim=-1) * s \
        + w * dot * (1.0 - c)


def compose_chain(points: Tensor, axes: Tensor, pivots: Tensor, angles: Tensor,
                  carried: Tensor, order: Tensor | None = None,
                  travel: Tensor | None = None) -> Tensor:
    """The product of exponentials: every point moved by each joint that carries it
    (turned about its axis, and slid along it by ``travel``: a prismatic joint).

    Args:
        points: float ``[B, N, 3]`` at the reference pose.
        axes, pivots: float ``[B, K, 3]``, each joint's unit axis and a point on it at the
            reference pose (the points' frame and unit).
        angles: float ``[B, K]``, each joint's turn from the reference pose, rad.
        carried: float ``[B, K, N]`` in [0, 1]: how much joint k carries point n (1: the
            point is on a link distal to joint k; a soft value blends the turned and the
            unturned point).
        order: long ``[B, K]``, the joints from proximal to distal; None: by how much each
            joint carries, most first (a proximal joint carries every point its distal
            joints carry, so the order follows from the memberships and does not depend on
            how the joints are numbered).
        travel: float ``[B, K]``, each joint's slide along its axis from the reference
            pose (the points' unit), or None: none (every joint revolute).

    Returns:
        float ``[B, N, 3]``.

    Raises:
        ValueError: shapes that do not match.
    """
    b, n, _ = points.shape
    k = axes.shape[1]
    if axes.shape != (b, k, 3) or pivots.shape != (b, k, 3) or angles.shape != (b, k) \
            or carried.shape != (b, k, n) or (travel is not None and travel.shape != (b, k)):
        raise ValueError(f"compose_chain: points {tuple(points.shape)}, axes "
                         f"{tuple(axes.shape)}, pivots {tuple(pivots.shape)}, angles "
                         f"{tuple(angles.shape)}, carried {tuple(carried.shape)}: expected "
                         "[B, N, 3], [B, K, 3] twice, [B, K], [B, K, N] (travel [B, K])")
    if order is None:
        order = torch.argsort(-carried.sum(-1), dim=1, stable=True)
    p = points
    rows = torch.arange(b, device=points.device)
    for i in range(k - 1, -1, -1):  # distal first
        j = order[:, i]
        turned = rotate_about_axis(p, axes[rows, j], pivots[rows, j], angles[rows, j])
        if travel is not None:
            turned = turned + travel[rows, j][:, None, None] * axes[rows, j][:, None, :]
        c = carried[rows, j][..., None]  # (B, N, 1)
        p = p + c * (turned - p)
    return p


def project_pinhole(points: Tensor, focal_px: Tensor, centre_px: Tensor) -> Tensor:
    """Pixel positions ``(u, v)`` ``[..., N, 2]`` of camera-frame points ``[..., N, 3]``
    (x right, y down, z forward; ``u = f x / z + cx``). ``focal_px`` ``[...]``, ``centre_px``
    ``[..., 2]``, px, pixel ``i``'s centre at ``i + 0.5``. Points at ``z <= 1e-6`` get a
    clamped depth (they are the caller's to mask)."""
    z = points[..., 2:3].clamp(min=1e-6)
    return points[..., 0:2] / z * focal_px[..., None, None] + centre_px[..., None, :]


def splat_values(target_px: Tensor, values: Tensor, size: tuple[int, int],
                 weight: Tensor | None = None, depth: Tensor | None = None,
                 depth_scale: float = 0.01, samples_per_px: float = 1.0
                 ) -> tuple[Tensor, Tensor]:
    """Per-sample values splatted to where the samples land.

    Each sample lands at ``target_px`` and spreads its value bilinearly over the four
    nearest pixel centres; a pixel's value is the weighted mean of what lands on it, and its
    density the landed weight per ``samples_per_px`` (1 where a whole pixel's worth of
    samples landed). With ``depth``, what lands is weighted by ``exp(-(z - min z) /
    depth_scale)`` with ``min z`` the nearest depth landing on that pixel (softmax
    splatting: Niklaus and Liu 2020): the nearest surface decides the value where several
    land.

    Args:
        target_px: float ``[B, N, 2]`` (u, v), px, pixel ``i``'s centre at ``i + 0.5``;
            a sample with a non-finite position lands nowhere.
        values: float ``[B, N, C]``.
        size: ``(H, W)`` of the target.
        weight: float ``[B, N]`` in [0, 1] (e.g. a soft robot mask, a visibility), or None
            (all 1).
        depth: float ``[B, N]``, the samples' depth at the target, or None.
        depth_scale: the depth difference (same unit) that divides the weight by e.
        samples_per_px: how many samples a source pixel has (4 for a 2x finer sampling).

    Returns:
        ``(value [B, C, H, W], density [B, 1, H, W])``; value zero where nothing landed.

    Raises:
        ValueError: shapes that do not match.
    """
    b, n, _ = target_px.shape
    if target_px.shape[-1] != 2 or values.shape[:2] != (b, n):
        raise ValueError(f"splat_values: target {tuple(target_px.shape)} and values "
                         f"{tuple(values.shape)}: expected [B, N, 2] and [B, N, C]")
    h, w = size
    ch = values.shape[-1]
    wt = torch.ones(b, n, dtype=target_px.dtype, device=target_px.device) \
        if weight is None else weight
    finite = torch.isfinite(target_px).all(-1)  # a sample at no position lands nowhere
    if not bool(finite.all()):
        target_px = torch.where(finite[..., None], target_px,
                                torch.full_like(target_px, -10.0))
        values = torch.where(finite[..., None], values, torch.zeros_like(values))
        if depth is not None:
            depth = torch.where(finite, depth, torch.ones_like(depth))
    x = target_px[..., 0] - 0.5
    y = target_px[..., 1] - 0.5
    x0, y0 = torch.floor(x.detach()), torch.floor(y.detach())
    corners = []
    for dy in (0.0, 1.0):
        for dx in (0.0, 1.0):
            xi, yi = x0 + dx, y0 + dy
            bil = (1.0 - (x - xi).abs()).clamp(min=0) * (1.0 - (y - yi).abs()).clamp(min=0)
            inside = ((xi >= 0) & (xi < w) & (yi >= 0) & (yi < h)).to(bil.dtype)
            corners.append((bil * inside, (yi.clamp(0, h - 1) * w + xi.clamp(0, w - 1)).long()))
    zmin = None
    if depth is not None:
        # each pixel's nearest landing depth, so the softmax never underflows
        zmin = torch.full((b, h * w), float("inf"), dtype=depth.dtype, device=depth.device)
        zd = depth.detach()
        for bil, idx in corners:
            zmin = zmin.scatter_reduce(1, idx, torch.where(bil > 0, zd, torch.full_like(
                zd, float("inf"))), reduce="amin")
    acc = target_px.new_zeros(b, ch + 1, h * w)  # importance-weighted values, importance
    dens = target_px.new_zeros(b, 1, h * w)
    for bil, idx in corners:
        imp = wt
        if zmin is not None and depth is not None:
            near = torch.gather(zmin, 1, idx)
            imp = wt * torch.exp(-(depth - torch.where(torch.isfinite(near), near, depth))
                                 / depth_scale)
        a = bil * imp
        src = torch.cat([a[..., None] * values, a[..., None]], -1).transpose(1, 2)
        acc = acc.scatter_add(2, idx[:, None].expand(-1, ch + 1, -1), src)
        dens = dens.scatter_add(2, idx[:, None], (bil * wt)[:, None])
    landed = acc[:, ch:] > 0
    val = acc[:, :ch] / torch.where(landed, acc[:, ch:], torch.ones_like(acc[:, ch:]))
    val = torch.where(landed, val, torch.zeros_like(val))
    return val.reshape(b, ch, h, w), (dens / samples_per_px).reshape(b, 1, h, w)


def splat_flow(source_px: Tensor, target_px: Tensor, size: tuple[int, int],
               weight: Tensor | None = None, depth: Tensor | None = None,
               depth_scale: float = 0.01, samples_per_px: float = 1.0
               ) -> tuple[Tensor, Tensor]:
    """A backward flow at the target from a forward motion of source samples: each sample
    moves from ``source_px`` to ``target_px`` ``[B, N, 2]`` and carries ``source -
    target`` to where it lands (:func:`splat_values`, same arguments).

    Returns:
        ``(flow [B, 2, H, W], density [B, 1, H, W])``; flow zero where nothing landed.

    Raises:
        ValueError: shapes that do not match.
    """
    b, n, _ = source_px.shape
    if target_px.shape != (b, n, 2) or source_px.shape[-1] != 2:
        raise ValueError(f"splat_flow: source {tuple(source_px.shape)} and target "
                         f"{tuple(target_px.shape)}: expected two [B, N, 2]")
    return splat_values(target_px, source_px - target_px, size, weight, depth, depth_scale,
                        samples_per_px)


def camera_frame(camera: Tensor, width: int, height: int) -> tuple[Tensor, Tensor, Tensor]:
    """The pinhole of a cell's camera vector (``CellScene.camera_vector``, float ``[13]``:
    position, forward, up, near, top, bottom, centre): the world-to-camera rotation ``[3,
    3]`` (rows: right, down, forward), the focal length (px, a 0-d tensor) and the
    principal point ``[2]`` (px), so that ``project_pinhole(R (P - pos), f, c)`` is
    :func:`export.cells.geometry.project_points`."""
    c = camera.to(torch.float64)
    fwd, up = c[3:6], c[6:9]
    near, top, bottom, centre = c[9], c[10], c[11], c[12]
    right = torch.linalg.cross(fwd, up)
    rot = torch.stack([right, -up, fwd])
    f = near * height / (top - bottom)
    half_w = 0.5 * (top - bottom) * width / height
    cx = (half_w - centre) / (2 * half_w) * width
    cy = top / (top - bottom) * height
    return rot, f, torch.stack([cx, cy])


def close_gaps(flow: Tensor, density: Tensor, threshold: float = 0.5
               ) -> tuple[Tensor, Tensor]:
    """Where less than ``threshold`` landed but at least that much landed on average over
    the 3x3 neighbourhood (a gap between stretched samples), the neighbourhood's
    density-weighted mean flow; elsewhere the flow where ``threshold`` landed and zero
    where it did not. Returns ``(flow [B, 2, H, W], cover [B, 1, H, W])``, cover 1 where
    the target is taken to be landed on, else 0 (the silhouette does not grow)."""
    direct = (density >= threshold).to(flow.dtype)
    d3 = F.avg_pool2d(density, 3, 1, 1, count_include_pad=True)
    f3 = F.avg_pool2d(flow * density, 3, 1, 1, count_include_pad=True) / d3.clamp(min=1e-12)
    gap = (1.0 - direct) * (d3 >= threshold).to(flow.dtype)
    return flow * direct + f3 * gap, direct + gap
