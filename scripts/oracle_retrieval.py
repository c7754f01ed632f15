"""How far can moving the start frame's pixels go in futures retrieval, with perfect flows?

    python scripts/oracle_retrieval.py --data data/cells --split test_convention \
        [--cells 32] [--json out.json] [--sheet out.png]

The futures are the ones ``syncedge model eval-frames`` scores every model on (8 candidates
per cell from the first frame of the cell's first motion episode, both motion profiles,
cached under ``DATA/SPLIT/futures/``; rendered here when missing). Each candidate's frames
are replayed in the cell's own scene for their geometry (``CellScene.render_geometry``),
and these predictions of every candidate are scored as eval-frames scores a model
(``export.evaluation.frames.retrieval_hits``, whole-frame PSNR, motion-region PSNR):

- ``copy_last``: the start frame;
- ``exact_warp``: the start frame warped by the exact backward flow of the robot's pixels
  at each step (``true_backward_flow``; static pixels stay; no fill: where the arm
  uncovers background, the start frame's arm stays);
- ``exact_warp_fill``: the same, with the pixels the arm uncovers taken from the true
  frame (a perfect fill; the ceiling of warping the start frame at all);
- ``additive_fields``: the warp model's form with a perfect reading: the start frame's
  robot pixels moved by the sum over channels of ``sin(theta_c) S_c + (1 - cos(theta_c))
  C_c``, each channel's true fields at the start pose (``true_dof_fields``), used as the
  model uses its fields (negated, as a backward flow on the start frame's grid), 64x64;
- ``exact_forward_as_backward``: the true forward displacement of the start frame's robot
  pixels under the whole move, negated and used as a backward flow on the start frame's
  grid (what the model's form does with its fields; wrong by the displacement itself where
  the arm moves far);
- ``exact_forward_inverted`` / ``additive_fields_inverted``: the true forward
  displacement / the additive fields' sum, turned into a backward flow by the fixed point
  ``b(x) = -fwd(x + b(x))`` (5 bilinear iterations from ``-fwd(x)``);
- ``exact_splatflow``: the true forward displacement of the start frame's robot pixels,
  carried to where each pixel lands (a backward flow at the target, splatted bilinearly
  from a 2x finer sampling, gaps of one pixel closed); ``_z``: the same with softmax
  splatting by the moved points' depth (the nearest surface wins); ``_linkdepth`` /
  ``_flatdepth``: each link's pixels moved as if at their link's median depth / the whole
  robot at one depth (how exact a model's depth must be);
- ``exact_splatflow_fill``: ``exact_splatflow`` with what the arm uncovers taken from the
  true frame (as ``exact_warp_fill``): what the splat leaves once the fill is perfect;
- ``additive_splatflow``: the additive per-DoF fields' sum, splatted the same way;
- ``chain_affine_splatflow``: each joint's true fields fitted by 2-D affine maps over the
  pixels it carries and composed along the chain (distal first, the image-plane product of
  exponentials), splatted the same way;
- ``chain_home_axes_splatflow``: the chain composed from each joint's axis and pivot at
  the *calibration's home pose* instead of the start pose (what a reading of the sweep
  gives when it is not carried to the start pose), splatted; ``..._offset``: the same
  axes carried to the start pose through the start's joint offsets from the home pose
  (which a cell knows from its joint readings; exact by the product of exponentials);
  ``chain_axes_5deg`` /
  ``_10deg``: from the start pose's axes each turned by 5 / 10 degrees and pivots moved
  by 1 / 2 cm, in random directions (how exact a learned reading must be);
- ``additive_fields16``: the same fields averaged over each 4x4 cell's robot pixels and
  upsampled bilinearly, as the step's 16x16 per-DoF fields reach the decoder.

The geometry of the split's own motion episodes is not needed; the per-DoF poses are
computed here (``dof_link_poses``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from export.cells.geometry import (  # noqa: E402
    NO_LINK,
    dof_link_poses,
    moved_robot_points,
    project_points,
    true_backward_flow,
    true_dof_fields,
    true_joint_axes,
    unproject,
)
from export.evaluation.frames import (  # noqa: E402
    RETRIEVAL_STEPS,
    _remap,
    frame_psnr,
    retrieval_hits,
)

PREDICTORS = ("copy_last", "exact_warp", "exact_warp_fill", "exact_forward_as_backward",
              "exact_forward_inverted", "exact_forward_splat", "additive_fields",
              "additive_fields_inverted", "additive_fields_splat", "additive_fields16",
              "exact_splatflow", "exact_splatflow_z", "exact_splatflow_linkdepth",
              "exact_splatflow_flatdepth", "additive_splatflow", "chain_affine_splatflow",
              "chain_home_axes_splatflow", "chain_home_axes_offset_splatflow",
              "chain_axes_5deg_splatflow",
              "chain_axes_10deg_splatflow", "exact_splatflow_fill")


def _tilt(axes: np.ndarray, pivots: np.ndarray, rng: np.random.Generator, degrees: float,
          pivot_m: float) -> tuple[np.ndarray, np.ndarray]:
    """Each axis turned by ``degrees`` about a random direction perpendicular to it, each
    pivot moved by a random offset of ``pivot_m`` (m) perpendicular to its axis."""
    out_a, out_p = axes.copy(), pivots.copy()
    for j, a in enumerate(axes):
        if not a.any():
            continue
        r = rng.normal(size=3)
        perp = r - (r @ a) * a
        perp /= np.linalg.norm(perp)
        t = np.radians(degrees)
        out_a[j] = np.cos(t) * a + np.sin(t) * perp
        r = rng.normal(size=3)
        off = r - (r @ a) * a
        out_p[j] = pivots[j] + pivot_m * off / np.linalg.norm(off)
    return out_a, out_p


def carry_axes(axes: np.ndarray, pivots: np.ndarray, carried: np.ndarray,
               offset: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Joint axes read at one pose carried to another through the joints' own turns
    ``offset [n]`` (rad): joint j's axis rides on every joint that carries all the links j
    carries (its proximal joints), so the chain moves the axis's pivot and a point one unit
    along it like any other point (``compose_chain``)."""
    import torch

    from export.models.kinematics import compose_chain

    n = len(axes)
    pts = np.concatenate([pivots, pivots + axes])  # (2n, 3)
    car = np.zeros((n, 2 * n))
    for j in range(n):
        for i in range(n):
            if i != j and carried[j].any() and (carried[i] >= carried[j]).all() \
                    and carried[i].sum() > carried[j].sum():
                car[i, j] = car[i, n + j] = 1.0
    moved = compose_chain(torch.from_numpy(pts)[None], torch.from_numpy(axes)[None],
                          torch.from_numpy(pivots)[None], torch.from_numpy(offset)[None],
                          torch.from_numpy(car)[None])[0].numpy()
    new_axes = moved[n:] - moved[:n]
    norm = np.linalg.norm(new_axes, axis=1, keepdims=True)
    return np.where(norm > 0, new_axes / np.maximum(norm, 1e-12), 0.0), moved[:n]


def chain_motion(depth: np.ndarray, link: np.ndarray, camera: np.ndarray, axes: np.ndarray,
                 pivots: np.ndarray, carried: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Forward displacement ``[2, H, W]`` of every robot pixel of a frame under the joints'
    turns ``theta [n]`` (rad), composed along the chain from the joints' ``axes``,
    ``pivots`` (world, m) and the links each ``carried`` (``[n, B]``)
    (``export.models.kinematics.compose_chain``)."""
    import torch

    from export.models.kinematics import compose_chain

    h, w = depth.shape
    on = link != NO_LINK
    ys, xs = np.nonzero(on)
    disp = np.zeros((2, h, w))
    if not len(ys):
        return disp
    pts = unproject(depth, camera)[ys, xs]
    car = carried[:, link[ys, xs]].astype(np.float64)
    moved = compose_chain(torch.from_numpy(pts)[None], torch.from_numpy(axes)[None],
                          torch.from_numpy(pivots)[None], torch.from_numpy(theta)[None],
                          torch.from_numpy(car)[None])[0].numpy()
    uv = project_points(moved, camera, w, h)
    disp[0, ys, xs] = uv[:, 0] - (xs + 0.5)
    disp[1, ys, xs] = uv[:, 1] - (ys + 0.5)
    return np.nan_to_num(disp)


def rigid_motion(depth: np.ndarray, link: np.ndarray, poses: np.ndarray, poses_to: np.ndarray,
                 camera: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Forward displacement ``[2, H, W]`` (px) of every robot pixel under the links' move
    from ``poses`` to ``poses_to`` (``[B, 12]``), and the moved points' depth ``[H, W]`` (m,
    along the viewing axis; 0 off the robot)."""
    h, w = depth.shape
    disp = np.zeros((2, h, w))
    z = np.zeros((h, w))
    ys, xs, moved = moved_robot_points(depth, link, poses, poses_to[None], camera)
    if not len(ys):
        return disp, z
    uv = project_points(moved[0], camera, w, h)
    disp[0, ys, xs] = uv[:, 0] - (xs + 0.5)
    disp[1, ys, xs] = uv[:, 1] - (ys + 0.5)
    z[ys, xs] = (moved[0] - camera[0:3]) @ camera[3:6]
    return np.nan_to_num(disp), z


def splat_flow(robot: np.ndarray, fwd: np.ndarray, upsample: int = 2,
               depth: np.ndarray | None = None, depth_scale_m: float = 0.01
               ) -> tuple[np.ndarray, np.ndarray]:
    """A backward flow at the *target* from a forward displacement of the start frame's
    robot pixels (``export.models.kinematics.splat_flow`` and ``close_gaps``): each robot
    sample, ``upsample`` times finer than the frame, carries ``-fwd`` to where it lands; a
    pixel is landed on where at least half a pixel's worth of samples arrives, and a gap
    that at least half of its 3x3 neighbourhood's worth reaches takes the neighbourhood's
    mean (stretched links leave no holes, and the silhouette does not grow). With
    ``depth`` (the moved points' depth ``[H, W]``, m) the nearest surface wins (softmax
    splatting). Returns the flow float32 ``[H, W, 2]`` (zero where nothing lands) and the
    cover float32 ``[H, W]`` (0 or 1)."""
    import cv2
    import torch

    from export.models.kinematics import close_gaps
    from export.models.kinematics import splat_flow as splat

    h, w = robot.shape
    big = (w * upsample, h * upsample)
    rob = cv2.resize(robot.astype(np.float32), big, interpolation=cv2.INTER_NEAREST) > 0.5
    fu = np.stack([cv2.resize(f.astype(np.float32), big, interpolation=cv2.INTER_NEAREST)
                   for f in fwd])
    ys, xs = np.nonzero(rob)
    src = np.stack([(xs + 0.5) / upsample, (ys + 0.5) / upsample], -1)
    dst = src + np.stack([fu[0, ys, xs], fu[1, ys, xs]], -1)
    z = None
    if depth is not None:
        zu = cv2.resize(depth.astype(np.float32), big, interpolation=cv2.INTER_NEAREST)
        z = torch.from_numpy(zu[ys, xs].astype(np.float64))[None]
    flow, dens = splat(torch.from_numpy(src)[None], torch.from_numpy(dst)[None], (h, w),
                       depth=z, depth_scale=depth_scale_m, samples_per_px=upsample ** 2)
    flow, cover = close_gaps(flow, dens)
    return (flow[0].permute(1, 2, 0).numpy().astype(np.float32),
            cover[0, 0].numpy().astype(np.float32))


def affine_fields(fields: np.ndarray, on: np.ndarray, min_px: float = 0.05
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each joint's per-DoF fields fitted by 2-D affine maps of the pixel position over the
    pixels it carries: ``S(x) ~ As [x, y, 1]``, ``C(x) ~ Ac [x, y, 1]``. Returns ``As``,
    ``Ac`` float64 ``[n, 2, 3]`` and the carried pixels bool ``[n, H, W]``."""
    n, _, h, w = fields.shape
    ys, xs = np.mgrid[0:h, 0:w]
    X = np.stack([xs + 0.5, ys + 0.5, np.ones_like(xs, float)], -1)  # (H, W, 3)
    As, Ac = np.zeros((n, 2, 3)), np.zeros((n, 2, 3))
    carried = np.zeros((n, h, w), bool)
    for j in range(n):
        mag = np.abs(fields[j]).sum(0)
        c = on & (mag > min_px)
        carried[j] = c
        if c.sum() < 3:
            continue
        A = X[c]
        for dst, a, b in ((As, 0, 2), (Ac, 2, 4)):
            sol, *_ = np.linalg.lstsq(A, fields[j, a:b][:, c].T, rcond=None)
            dst[j] = sol.T
    return As, Ac, carried


def chain_displacement(As: np.ndarray, Ac: np.ndarray, carried: np.ndarray,
                       theta: np.ndarray) -> np.ndarray:
    """The forward displacement ``[2, H, W]`` of every start pixel under the 2-D product of
    exponentials: the joints ordered proximal to distal by how many pixels they carry,
    applied distal first, each moving a pixel it carries by its affine fields evaluated
    where the joints after it have already taken that pixel."""
    n, h, w = carried.shape
    ys, xs = np.mgrid[0:h, 0:w]
    pos = np.stack([xs + 0.5, ys + 0.5], 0).astype(np.float64)  # (2, H, W)
    start = pos.copy()
    order = np.argsort(-carried.reshape(n, -1).sum(1), kind="stable")
    for j in order[::-1]:
        if not carried[j].any():
            continue
        X = np.concatenate([pos, np.ones((1, h, w))], 0)
        d = (np.sin(theta[j]) * np.einsum("ik,khw->ihw", As[j], X)
             + (1 - np.cos(theta[j])) * np.einsum("ik,khw->ihw", Ac[j], X))
        pos = pos + d * carried[j][None]
    return pos - start


def forward_splat(start: np.ndarray, robot: np.ndarray, fwd: np.ndarray,
                  upsample: int = 2) -> np.ndarray:
    """The start frame's robot pixels moved *forward* by ``fwd`` ``[2, H, W]`` (px) and
    splatted bilinearly over the start frame (average of what lands on a pixel where at
    least half a pixel's worth lands; a pixel less reaches keeps the start frame, so what the arm uncovers keeps its old
    look). Sampled ``upsample`` times finer than the frame so stretched links leave no
    holes: uint8 ``[H, W, 3]``."""
    import cv2

    h, w = robot.shape
    big = (w * upsample, h * upsample)
    img = cv2.resize(start.astype(np.float32), big, interpolation=cv2.INTER_LINEAR)
    rob = cv2.resize(robot.astype(np.float32), big, interpolation=cv2.INTER_NEAREST) > 0.5
    fu = np.stack([cv2.resize(f.astype(np.float32), big, interpolation=cv2.INTER_NEAREST)
                   for f in fwd])
    ys, xs = np.nonzero(rob)
    x = (xs + 0.5) / upsample - 0.5 + fu[0, ys, xs]
    y = (ys + 0.5) / upsample - 0.5 + fu[1, ys, xs]
    x0, y0 = np.floor(x).astype(int), np.floor(y).astype(int)
    acc = np.zeros((h, w, 3))
    wsum = np.zeros((h, w))
    col = img[ys, xs]
    for dy in (0, 1):
        for dx in (0, 1):
            xi, yi = x0 + dx, y0 + dy
            wt = (1 - np.abs(x - xi)) * (1 - np.abs(y - yi))
            ok = (xi >= 0) & (xi < w) & (yi >= 0) & (yi < h) & (wt > 0)
            np.add.at(wsum, (yi[ok], xi[ok]), wt[ok])
            np.add.at(acc, (yi[ok], xi[ok]), wt[ok, None] * col[ok])
    cover = (wsum / upsample ** 2 >= 0.5)[..., None]  # at least half a pixel landed
    layer = acc / np.maximum(wsum, 1e-6)[..., None]
    out = cover * layer + (1 - cover) * start
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


#: the predictions drawn on the contact sheet, and their tile labels
SHEET = ("exact_warp", "exact_warp_fill", "exact_splatflow", "exact_splatflow_fill",
         "additive_splatflow", "additive_fields16", "exact_forward_as_backward")
SHEET_LABELS = {"exact_warp": "exact", "exact_warp_fill": "exact+fill",
                "exact_splatflow": "splat", "exact_splatflow_fill": "splat+fill",
                "additive_splatflow": "add splat",
                "additive_fields16": "model form", "exact_forward_as_backward": "fwd as bwd"}


def invert_forward(fwd: np.ndarray, iterations: int = 5) -> np.ndarray:
    """A backward flow ``b`` ``[H, W, 2]`` from a forward displacement field ``fwd`` ``[H, W,
    2]`` of the start frame's pixels, by the fixed point ``b(x) = -fwd(x + b(x))`` (bilinear
    samples, starting from ``-fwd(x)``)."""
    import cv2

    h, w = fwd.shape[:2]
    gx, gy = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
    f = fwd.astype(np.float32)
    b = -f
    for _ in range(iterations):
        b = -cv2.remap(f, gx + b[..., 0], gy + b[..., 1], cv2.INTER_LINEAR,
                       borderMode=cv2.BORDER_CONSTANT, borderValue=0)
    return b


def _pool_up(flow: np.ndarray, robot: np.ndarray) -> np.ndarray:
    """A ``[2, 64, 64]`` flow averaged over each 4x4 cell's robot pixels (zero where none),
    upsampled bilinearly back to 64x64 (``align_corners=False``, as the decoder does)."""
    import cv2

    r = robot.astype(np.float32)
    count = r.reshape(16, 4, 16, 4).sum((1, 3))
    pooled = (flow * r).reshape(2, 16, 4, 16, 4).sum((2, 4)) / np.maximum(count, 1.0)
    return np.stack([cv2.resize(p, (64, 64), interpolation=cv2.INTER_LINEAR) for p in pooled])


@dataclass
class StartPose:
    """What the predictions of one cell share: its start frame's geometry (depth, links,
    link poses, camera), each joint's true fields and axes there, the axes at the
    calibration's home pose, the depth variants and the affine fits."""

    q0_ctrl: np.ndarray  # the start's joint positions, controller order, rad
    q0: np.ndarray  # the same, canonical order
    depth: np.ndarray
    link: np.ndarray
    poses: np.ndarray
    camera: np.ndarray
    fields: np.ndarray  # (n, 4, H, W)
    on: np.ndarray
    axes: np.ndarray
    pivots: np.ndarray
    carried: np.ndarray
    home_axes: tuple[np.ndarray, np.ndarray]
    carried_home_axes: tuple[np.ndarray, np.ndarray]
    link_depth: np.ndarray
    flat_depth: np.ndarray
    affine: tuple[np.ndarray, np.ndarray, np.ndarray]

    @property
    def robot(self) -> np.ndarray:
        return self.link != NO_LINK


def start_pose(scene, params, q0_ctrl: np.ndarray, home_ctrl: np.ndarray) -> StartPose:
    """:class:`StartPose` of a cell's start ``q0_ctrl [n]`` and its calibration's home pose
    ``home_ctrl [n]`` (controller order, rad)."""
    conv = params.convention
    q0 = conv.to_canonical(q0_ctrl.astype(np.float64)[None])[0]
    d0, l0, p0, cam = scene.render_geometry(q0)
    dof0 = dof_link_poses(scene.link_poses, q0)
    fields, on0 = true_dof_fields(d0, l0, p0, dof0, cam)
    axes0, piv0, car0 = true_joint_axes(p0, dof0)
    qh = conv.to_canonical(home_ctrl.astype(np.float64)[None])[0]
    axes_h, piv_h, car_h = true_joint_axes(scene.link_poses(qh),
                                           dof_link_poses(scene.link_poses, qh))
    robot = l0 != NO_LINK
    link_depth = d0.copy()
    for lk in np.unique(l0[robot]):
        link_depth[l0 == lk] = np.median(d0[l0 == lk])
    flat_depth = np.where(robot, np.median(d0[robot]) if robot.any() else 0.0,
                          0.0).astype(np.float32)
    return StartPose(q0_ctrl, q0, d0, l0, p0, cam, fields, on0, axes0, piv0, car0, (axes_h, piv_h),
                     carry_axes(axes_h, piv_h, car_h, q0 - qh), link_depth, flat_depth,
                     affine_fields(fields, on0))


def predict(scene, params, sp: StartPose, start: np.ndarray, actions: np.ndarray,
            truth: np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
    """Every predictor's frames uint8 ``[T, H, W, 3]`` of one candidate: controller actions
    ``[T, n]`` from the start :class:`StartPose`, its true frames ``truth [T, H, W, 3]``;
    ``seed``: of the axes' tilts."""
    conv = params.convention
    q = conv.to_canonical((sp.q0_ctrl[None] + np.cumsum(actions, 0)).astype(np.float64))
    theta = q - sp.q0  # (T, n) canonical joint turns
    d0, l0, p0, cam, fields = sp.depth, sp.link, sp.poses, sp.camera, sp.fields
    rng = np.random.default_rng(seed)
    chains = {"chain_home_axes_splatflow": sp.home_axes,
              "chain_home_axes_offset_splatflow": sp.carried_home_axes,
              "chain_axes_5deg_splatflow": _tilt(sp.axes, sp.pivots, rng, 5.0, 0.01),
              "chain_axes_10deg_splatflow": _tilt(sp.axes, sp.pivots, rng, 10.0, 0.02)}
    out: dict[str, list[np.ndarray]] = {k: [] for k in ("exact_warp", "exact_warp_fill",
                                                         "exact_forward_splat",
                                                         "additive_fields_splat")}
    flows_sf: dict[str, list[np.ndarray]] = {k: [] for k in PREDICTORS
                                             if "splatflow" in k and not k.endswith("_fill")}
    uncovered_all: list[np.ndarray] = []
    flows_add, flows_add16, flows_fwd, flows_fwd_inv, flows_add_inv = [], [], [], [], []
    robot0 = sp.robot
    for t in range(len(q)):
        d, lk, ps, _ = scene.render_geometry(q[t])
        back, _ = true_backward_flow(d, lk, ps, p0, cam)
        warped = _remap(start, [back.transpose(1, 2, 0)])[0]
        out["exact_warp"].append(warped)
        uncovered = robot0 & (lk == NO_LINK)
        uncovered_all.append(uncovered)
        filled = warped.copy()
        filled[uncovered] = truth[t][uncovered]
        out["exact_warp_fill"].append(filled)
        moved, z_t = rigid_motion(d0, l0, p0, ps, cam)  # forward, start pixels
        whole = moved.astype(np.float32)
        flows_fwd.append((-whole).transpose(1, 2, 0))
        flows_fwd_inv.append(invert_forward(whole.transpose(1, 2, 0)))
        out["exact_forward_splat"].append(forward_splat(start, robot0, whole))
        fwd = (np.sin(theta[t])[:, None, None, None] * fields[:, 0:2]
               + (1 - np.cos(theta[t]))[:, None, None, None] * fields[:, 2:4]).sum(0)
        flows_add.append((-fwd).transpose(1, 2, 0).astype(np.float32))
        flows_add_inv.append(invert_forward(fwd.transpose(1, 2, 0)))
        out["additive_fields_splat"].append(forward_splat(start, robot0, fwd))
        chain = chain_displacement(*sp.affine, theta[t])
        for key, disp in (("exact_splatflow", whole), ("additive_splatflow", fwd),
                          ("chain_affine_splatflow", chain)):
            flows_sf[key].append(splat_flow(robot0, disp)[0])
        flows_sf["exact_splatflow_z"].append(splat_flow(robot0, moved, depth=z_t)[0])
        for key, (ax, pv) in chains.items():
            flows_sf[key].append(splat_flow(robot0, chain_motion(d0, l0, cam, ax, pv,
                                                                 sp.carried, theta[t]))[0])
        for key, dd in (("exact_splatflow_linkdepth", sp.link_depth),
                        ("exact_splatflow_flatdepth", sp.flat_depth)):
            flows_sf[key].append(splat_flow(robot0, rigid_motion(dd, l0, p0, ps, cam)[0])[0])
        flows_add16.append(_pool_up(-fwd, sp.on).transpose(1, 2, 0).astype(np.float32))
    out["additive_fields"] = list(_remap(start, flows_add))
    out["exact_forward_as_backward"] = list(_remap(start, flows_fwd))
    out["exact_forward_inverted"] = list(_remap(start, flows_fwd_inv))
    out["additive_fields_inverted"] = list(_remap(start, flows_add_inv))
    for key, fl in flows_sf.items():
        out[key] = list(_remap(start, fl))
    fill = [f.copy() for f in out["exact_splatflow"]]
    for t, unc in enumerate(uncovered_all):
        fill[t][unc] = truth[t][unc]
    out["exact_splatflow_fill"] = fill
    out["additive_fields16"] = list(_remap(start, flows_add16))
    res = {k: np.stack(v) for k, v in out.items()}
    res["copy_last"] = np.repeat(start[None], len(q), 0)
    return res


class FuturesScore:
    """Futures retrieval, whole-frame and motion-region PSNR of named predictions, summed
    over cells as ``syncedge model eval-frames`` scores a model (retrieval per profile at
    ``RETRIEVAL_STEPS``; PSNR and SSIM per step on the all-joints profile)."""

    def __init__(self) -> None:
        self.hits: dict[str, list[float]] = {}
        self.psnr: dict[str, list[list[float]]] = {}

    def add(self, profile: str, start: np.ndarray, truth: np.ndarray,
            preds: dict[str, np.ndarray]) -> None:
        """One cell's candidates of one motion profile: ``start`` uint8 ``[H, W, 3]``,
        ``truth`` and every prediction uint8 ``[M, T, H, W, 3]``."""
        from edge.metrics import motion_mask, ssim

        m_count, horizon = truth.shape[:2]
        masks = ([motion_mask(truth[m], start) for m in range(m_count)]
                 if profile == "all_joints" else [])
        for k, stack in preds.items():
            for s in RETRIEVAL_STEPS:
                self.hits.setdefault(f"{k}/{profile}/{s}", []).append(
                    float(retrieval_hits(stack[:, s - 1], truth[:, s - 1]).mean()))
            if masks:
                self.psnr.setdefault(f"{k}/psnr", []).append(
                    [float(np.mean([frame_psnr(stack[m, t], truth[m, t])
                                    for m in range(m_count)])) for t in range(horizon)])
                self.psnr.setdefault(f"{k}/motion_psnr", []).append(
                    [float(np.nanmean([frame_psnr(stack[m, t], truth[m, t], masks[m][t])
                                       for m in range(m_count)])) for t in range(horizon)])
                self.psnr.setdefault(f"{k}/ssim", []).append(
                    [float(np.mean([ssim(stack[m, t], truth[m, t]) for m in range(m_count)]))
                     for t in range(horizon)])

    def summary(self) -> tuple[dict[str, float], dict[str, list[float]]]:
        """``(retrieval, psnr_at_step)``: means over cells."""
        return ({k: float(np.mean(v)) for k, v in self.hits.items()},
                {k: [float(x) for x in np.nanmean(np.asarray(v), 0)]
                 for k, v in self.psnr.items()})

    def print_table(self, names: list[str] | tuple[str, ...]) -> None:
        """The markdown table of ``names``: retrieval@4/8/16 (all-joints), two-joint@8,
        PSNR@16 and motion PSNR@16."""
        r, ps = self.summary()
        print("| prediction | retrieval@4 | @8 | @16 | two-joint @8 | PSNR@16 | "
              "motion PSNR@16 |")
        print("|---|---|---|---|---|---|---|")
        for k in names:
            print(f"| {k} | {r[f'{k}/all_joints/4']:.2f} | {r[f'{k}/all_joints/8']:.2f} | "
                  f"{r[f'{k}/all_joints/16']:.2f} | {r[f'{k}/two_joint/8']:.2f} | "
                  f"{ps[f'{k}/psnr'][-1]:.2f} | {ps[f'{k}/motion_psnr'][-1]:.2f} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="cells folder")
    p.add_argument("--split", required=True, help="split folder (e.g. test_convention)")
    p.add_argument("--cells", type=int, default=32, help="first N cells (default 32)")
    p.add_argument("--candidates", type=int, default=8)
    p.add_argument("--horizon", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--sheet", help="write a contact sheet here (PNG): the first 4 cells' first "
                                   "all-joints candidate at step 8, one row per cell")
    args = p.parse_args(argv)
    os.environ.setdefault("MUJOCO_GL", "egl")
    from export.cells.futures import load_or_render_futures
    from export.cells.generate import CellGenerator, GenerateOptions
    from export.cells.sampling import CellParams
    from export.train.data import load_cells

    t0 = time.perf_counter()
    cells = load_cells(args.data, [args.split], 7, 8, limit=args.cells)
    gen = CellGenerator(GenerateOptions())
    score = FuturesScore()
    sheet_rows: list[np.ndarray] = []
    for i, cell in enumerate(cells):
        params = CellParams.from_json_dict(cell.params)
        scene = gen.scene(params.robot)
        scene.apply_cell(params)
        mo = cell.motions[0]
        q0 = mo.joint_positions[0, :cell.num_dof]
        home = (cell.cal_home[:cell.num_dof] if cell.cal_home is not None
                else q0)  # no recorded home: the start itself
        sp = start_pose(scene, params, q0, home)
        for prof in ("all_joints", "two_joint"):
            f = load_or_render_futures(args.data, args.split, cell.cell_id, lambda: gen, params,
                                       q0, args.candidates, args.horizon, prof, args.seed)
            start, truth = f.frames[0, 0], f.frames[:, 1:]
            preds = [predict(scene, params, sp, start, f.actions[m], truth[m], seed=m)
                     for m in range(len(truth))]
            if prof == "all_joints" and len(sheet_rows) < 4:
                sheet_rows.append(np.stack([start, truth[0, 7]]
                                           + [preds[0][k][7] for k in SHEET]))
            score.add(prof, start, truth,
                      {k: np.stack([pr[k] for pr in preds]) for k in PREDICTORS})
        if (i + 1) % 8 == 0 or i + 1 == len(cells):
            print(f"[{time.perf_counter() - t0:6.1f}s] cell {i + 1}/{len(cells)}",
                  file=sys.stderr, flush=True)
    gen.close()
    if args.sheet:
        from edge.visual import contact_sheet, write_png

        names = ["start", "truth 8"] + [SHEET_LABELS[k] for k in SHEET]
        write_png(args.sheet, contact_sheet(
            sheet_rows, row_labels=[c.cell_id for c in cells[:len(sheet_rows)]],
            tile_labels=[names] + [[]] * (len(sheet_rows) - 1), scale=3,
            note=f"{args.split}: step 8 of each cell's first all-joints candidate"))
    retrieval, psnr_at_step = score.summary()
    out = {"split": args.split, "cells": len(cells), "candidates": args.candidates,
           "retrieval": retrieval, "psnr_at_step": psnr_at_step}
    print(f"{args.split}, {len(cells)} cells, M = {args.candidates}")
    score.print_table(PREDICTORS)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
