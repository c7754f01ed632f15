"""Ground-truth motion of the robot's pixels: where each pixel of one frame was in another.

A cell is rendered by kinematic replay, so the true backward flow between two frames of the
same camera is known exactly: a pixel that sees robot link ``b`` at depth ``z`` is the world
point ``P`` on the camera ray (:func:`unproject`); in the link's own frame it is
``p = R_b(t)^T (P - x_b(t))``, and at the other pose it is ``R_b(s) p + x_b(s)``, projected
back into the image (:func:`project_points`). The world model's flow is a *backward* flow
(``frame_t(x) = start(x + f(x))``), which is exactly this displacement for every pixel of
the robot at the target; static pixels have zero flow, and pixels the arm uncovers have no
flow of the arm (the fill takes them). The training loss of the warp model uses it where
the optical flow of 64x64 frames of a textureless arm is unreliable.

Pixel coordinates: ``u`` (x, to the right) and ``v`` (y, down) with pixel ``i``'s centre at
``i + 0.5``, the convention of :meth:`export.cells.scene.CellScene.project`.
"""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from export.errors import CellError

__all__ = ["unproject", "project_points", "moved_robot_points", "true_backward_flow",
           "true_dof_fields", "true_joint_axes",
           "dof_link_poses", "NO_LINK", "DOF_STEP_RAD", "geometry_path", "load_geometry",
           "render_chunk_geometry", "GEOMETRY_MANIFEST"]

#: the link index of a pixel that does not see the robot
NO_LINK = 255

#: the joint step (rad) of the per-DoF link poses stored with the geometry (``dof_poses``):
#: each joint moved by +- this from the frame's pose, the others held
DOF_STEP_RAD = 0.35


def _camera(camera: np.ndarray, width: int, height: int) -> tuple[np.ndarray, ...]:
    c = np.asarray(camera, np.float64)
    if c.shape != (13,):
        raise ValueError(f"camera: expected float [13] (CellScene.camera_vector), got "
                         f"{c.shape}")
    pos, fwd, up = c[0:3], c[3:6], c[6:9]
    near, top, bottom, centre = c[9:13]
    right = np.cross(fwd, up)
    half_w = 0.5 * (top - bottom) * width / height
    return pos, fwd, up, right, np.array([near, top, bottom, centre - half_w, 2 * half_w])


def unproject(depth: np.ndarray, camera: np.ndarray) -> np.ndarray:
    """World points seen at each pixel centre: float32 depth ``[H, W]`` along the camera's
    viewing axis (m) -> float64 ``[H, W, 3]`` (m). ``camera``: float ``[13]`` of
    :meth:`~export.cells.scene.CellScene.camera_vector`.

    Raises:
        ValueError: a camera vector of another shape.
    """
    h, w = depth.shape
    pos, fwd, up, right, (near, top, bottom, left, width) = _camera(camera, w, h)
    x_near = left + (np.arange(w) + 0.5) / w * width  # (W,)
    y_near = top - (np.arange(h) + 0.5) / h * (top - bottom)  # (H,)
    z = depth.astype(np.float64)[..., None]
    ray = (fwd[None, None] + (x_near / near)[None, :, None] * right[None, None]
           + (y_near / near)[:, None, None] * up[None, None])
    return pos + z * ray


def project_points(points: np.ndarray, camera: np.ndarray, width: int,
                   height: int) -> np.ndarray:
    """Pixel positions ``(u, v)`` float64 ``[..., 2]`` of world points ``[..., 3]`` (m);
    NaN for a point on or behind the camera plane. The same projection as
    :meth:`~export.cells.scene.CellScene.project`, for many points at once."""
    pos, fwd, up, right, (near, top, bottom, left, w_near) = _camera(camera, width, height)
    d = np.asarray(points, np.float64) - pos
    z = d @ fwd
    with np.errstate(divide="ignore", invalid="ignore"):
        x_near = near * (d @ right) / z
        y_near = near * (d @ up) / z
    u = (x_near - left) / w_near * width
    v = (top - y_near) / (top - bottom) * height
    out = np.stack([u, v], -1)
    out[z <= 1e-6] = np.nan
    return out


def true_backward_flow(depth_t: np.ndarray, link_t: np.ndarray, poses_t: np.ndarray,
                       poses_s: np.ndarray, camera: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The exact backward flow from frame t to frame s of one camera, on the robot.

    Args:
        depth_t: float32 ``[H, W]``, frame t's depth (m) where it sees the robot.
        link_t: uint8 ``[H, W]``, the link each pixel of frame t sees (:data:`NO_LINK`:
            none).
        poses_t, poses_s: float32 ``[B, 12]``, every link's world pose at t and at s
            (position m, row-major rotation matrix), from
            :meth:`~export.cells.scene.CellScene.render_geometry`.
        camera: float ``[13]``, the camera of both frames.

    Returns:
        ``(flow, on_robot)``: float32 ``[2, H, W]`` (dx, dy) px, so that frame t's robot
        pixel at ``x`` shows the point frame s shows at ``x + flow(x)`` (0 off the robot);
        bool ``[H, W]``, the pixels of frame t that see the robot (and project in front of
        the camera at s).

    Raises:
        ValueError: shapes that do not match, or a link index past the poses.
    """
    h, w = depth_t.shape
    if link_t.shape != (h, w) or poses_t.shape != poses_s.shape or poses_t.shape[-1] != 12:
        raise ValueError(f"true_backward_flow: depth {depth_t.shape}, links {link_t.shape}, "
                         f"poses {poses_t.shape} / {poses_s.shape}: expected [H, W] twice "
                         "and two [B, 12]")
    flow = np.zeros((2, h, w), np.float32)
    ys, xs, uv = _moved_pixels(depth_t, link_t, poses_t, poses_s[None], camera)
    on = np.zeros((h, w), bool)
    if not len(ys):
        return flow, on
    ok = np.isfinite(uv[0]).all(1)
    flow[0, ys[ok], xs[ok]] = uv[0, ok, 0] - (xs[ok] + 0.5)
    flow[1, ys[ok], xs[ok]] = uv[0, ok, 1] - (ys[ok] + 0.5)
    on[ys[ok], xs[ok]] = True
    return flow, on


def moved_robot_points(depth: np.ndarray, link: np.ndarray, poses: np.ndarray,
                       poses_to: np.ndarray, camera: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where the world point behind each robot pixel of one frame goes when the links take
    other poses (each point rides rigidly on its link).

    Args:
        depth: float32 ``[H, W]`` (m); link: uint8 ``[H, W]``; poses: float32 ``[B, 12]``,
            the links' poses of this frame; poses_to: float32 ``[S, B, 12]``, S other sets
            of poses; camera: float ``[13]``.

    Returns:
        ``(ys, xs, points)``: int ``[N]`` rows and columns of the N robot pixels; float64
        ``[S, N, 3]``, their world points (m) under each set.

    Raises:
        ValueError: a link index past the poses.
    """
    on = link != NO_LINK
    ys, xs = np.nonzero(on)
    if not len(ys):
        return ys, xs, np.zeros((len(poses_to), 0, 3))
    links = link[on].astype(np.int64)
    if links.max() >= len(poses) or links.max() >= poses_to.shape[1]:
        raise ValueError(f"link {links.max()} but {min(len(poses), poses_to.shape[1])} poses")
    world = unproject(depth, camera)[on]  # (N, 3)
    pt = poses[links].astype(np.float64)
    rt = pt[:, 3:].reshape(-1, 3, 3)
    local = np.einsum("nji,nj->ni", rt, world - pt[:, :3])  # R_t^T (P - x_t)
    ps = poses_to[:, links].astype(np.float64)  # (S, N, 12)
    rs = ps[..., 3:].reshape(*ps.shape[:2], 3, 3)
    return ys, xs, np.einsum("snij,nj->sni", rs, local) + ps[..., :3]


def _moved_pixels(depth: np.ndarray, link: np.ndarray, poses: np.ndarray,
                  poses_to: np.ndarray, camera: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`moved_robot_points` projected: ``(ys, xs, uv)`` with ``uv`` float64 ``[S, N,
    2]`` pixel positions ``(u, v)`` (NaN behind the camera)."""
    h, w = depth.shape
    ys, xs, moved = moved_robot_points(depth, link, poses, poses_to, camera)
    if not len(ys):
        return ys, xs, np.zeros((len(poses_to), 0, 2))
    return ys, xs, project_points(moved, camera, w, h)


def dof_link_poses(link_poses: Callable[[np.ndarray], np.ndarray], q_rad: np.ndarray,
                   step_rad: float = DOF_STEP_RAD) -> np.ndarray:
    """Every link's pose with each joint moved by ``+step_rad`` and by ``-step_rad`` from
    ``q_rad`` (canonical order, rad), the other joints held: float32 ``[n, 2, B, 12]``
    (``[:, 0]`` plus, ``[:, 1]`` minus). ``link_poses(q) -> [B, 12]`` is e.g.
    :meth:`~export.cells.scene.CellScene.link_poses` (no rendering)."""
    q = np.asarray(q_rad, np.float64)
    out = []
    for j in range(len(q)):
        for sign in (1.0, -1.0):
            qq = q.copy()
            qq[j] += sign * step_rad
            out.append(np.asarray(link_poses(qq), np.float32))
    return np.stack(out).reshape(len(q), 2, *out[0].shape)


def true_dof_fields(depth: np.ndarray, link: np.ndarray, poses: np.ndarray,
                    dof_poses: np.ndarray, camera: np.ndarray,
                    step_rad: float = DOF_STEP_RAD) -> tuple[np.ndarray, np.ndarray]:
    """Each joint's own image motion field at one frame: where the frame's robot pixels go
    when that joint alone turns by ``theta``, written ``sin(theta) S + (1 - cos(theta)) C``.

    For a revolute joint with unit axis ``w`` through ``o``, a point ``P`` on a link it
    carries moves by ``sin(theta) w x (P - o) + (1 - cos(theta)) w x (w x (P - o))``
    (Rodrigues' rotation formula), so the fields come from the two poses at ``+-step``:
    ``S = (d+ - d-) / (2 sin step)`` and ``C = (d+ + d-) / (2 (1 - cos step))``, with
    ``d+-`` the pixels' image displacements there (exact for the 3-D motion, first-order in
    the perspective projection). A pixel on a link the joint does not carry gets zero.
    These are the per-DoF fields of the warp model's step (``export.models.warp``,
    ``StateStep.joint_fields``) as *forward* displacements in canonical joint order.

    Args:
        depth: float32 ``[H, W]`` (m); link: uint8 ``[H, W]``; poses: float32 ``[B, 12]``
            of the frame; dof_poses: float32 ``[n, 2, B, 12]`` (:func:`dof_link_poses` at
            the frame's joint positions); camera: float ``[13]``; step_rad: the step of
            ``dof_poses``.

    Returns:
        ``(fields, on)``: float32 ``[n, 4, H, W]`` (``S`` dx, dy then ``C`` dx, dy, px per
        unit of ``sin``/``1 - cos``, zero off the robot); bool ``[H, W]``, the robot pixels
        (in front of the camera at every pose).

    Raises:
        ValueError: shapes that do not match, or a step outside (0, pi/2].
    """
    h, w = depth.shape
    n = dof_poses.shape[0]
    if link.shape != (h, w) or dof_poses.shape[1:] != (2, *poses.shape) or poses.shape[-1] != 12:
        raise ValueError(f"true_dof_fields: depth {depth.shape}, links {link.shape}, poses "
                         f"{poses.shape}, dof poses {dof_poses.shape}: expected [H, W] twice, "
                         "[B, 12] and [n, 2, B, 12]")
    if not 0.0 < step_rad <= np.pi / 2:
        raise ValueError(f"true_dof_fields: step {step_rad} rad, expected in (0, pi/2]")
    fields = np.zeros((n, 4, h, w), np.float32)
    ys, xs, uv = _moved_pixels(depth, link, poses, dof_poses.reshape(2 * n, *poses.shape),
                               camera)
    on = np.zeros((h, w), bool)
    if not len(ys):
        return fields, on
    d = (uv - np.stack([xs + 0.5, ys + 0.5], -1)[None]).reshape(n, 2, len(ys), 2)
    ok = np.isfinite(d).all((0, 1, 3))
    s = (d[:, 0] - d[:, 1]) / (2.0 * np.sin(step_rad))  # (n, N, 2)
    c = (d[:, 0] + d[:, 1]) / (2.0 * (1.0 - np.cos(step_rad)))
    yo, xo = ys[ok], xs[ok]
    for k, part in enumerate((s[:, ok, 0], s[:, ok, 1], c[:, ok, 0], c[:, ok, 1])):
        fields[:, k, yo, xo] = part
    on[yo, xo] = True
    return fields, on


def true_joint_axes(poses: np.ndarray, dof_poses: np.ndarray,
                    step_rad: float = DOF_STEP_RAD) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each joint's axis, a point on it and the links it carries, at one frame, from the
    links' poses with that joint turned by ``+step_rad`` (:func:`dof_link_poses`).

    A joint turns every link it carries by the same world motion, a rotation by the step
    about the joint's axis: ``T = P+ P^-1``; its rotation's axis (``vee(R - R^T) / (2 sin
    step)``) is the joint's, and ``(I - R) o = t`` gives the points ``o`` of the axis (the
    one nearest the world origin is returned). A link whose pose does not change is not
    carried.

    Args:
        poses: float32 ``[B, 12]``, the frame's link poses; dof_poses: float32 ``[n, 2, B,
            12]``; step_rad: the step of ``dof_poses``.

    Returns:
        ``(axes, pivots, carried)``: float64 ``[n, 3]`` unit axes (right-handed: a positive
        turn of the joint turns its links positively about it), float64 ``[n, 3]`` points
        (m, world), bool ``[n, B]``. A joint that carries nothing gets a zero axis.

    Raises:
        ValueError: shapes that do not match.
    """
    n = dof_poses.shape[0]
    if dof_poses.shape[1:] != (2, *poses.shape) or poses.shape[-1] != 12:
        raise ValueError(f"true_joint_axes: poses {poses.shape}, dof poses {dof_poses.shape}: "
                         "expected [B, 12] and [n, 2, B, 12]")
    p0 = poses.astype(np.float64)
    r0, x0 = p0[:, 3:].reshape(-1, 3, 3), p0[:, :3]
    axes, pivots = np.zeros((n, 3)), np.zeros((n, 3))
    carried = np.zeros((n, len(poses)), bool)
    for j in range(n):
        p1 = dof_poses[j, 0].astype(np.float64)
        r = np.einsum("bij,bkj->bik", p1[:, 3:].reshape(-1, 3, 3), r0)  # R+ R^T
        t = p1[:, :3] - np.einsum("bij,bj->bi", r, x0)
        moved = (np.abs(r - np.eye(3)).max((1, 2)) > 1e-5) | (np.abs(t).max(1) > 1e-6)
        carried[j] = moved
        if not moved.any():
            continue
        b = int(np.flatnonzero(moved)[-1])  # the most distal carried link
        rb = r[b]
        w = np.array([rb[2, 1] - rb[1, 2], rb[0, 2] - rb[2, 0], rb[1, 0] - rb[0, 1]])
        axes[j] = w / np.linalg.norm(w)
        pivots[j] = np.linalg.lstsq(np.eye(3) - rb, t[b], rcond=None)[0]
    return axes, pivots, carried


GEOMETRY_MANIFEST = "geometry.json"
#: 2: every frame also carries ``dof_poses`` (:func:`dof_link_poses`, step
#: :data:`DOF_STEP_RAD`); a chunk rendered with an older version is rendered again
GEOMETRY_VERSION = 2


def geometry_path(episode_path: str | os.PathLike[str]) -> Path:
    """Where the geometry of a motion episode ``<cell>/motion-NN.npz`` is kept:
    ``<cell>/motion-NN.geometry.npz``."""
    p = Path(episode_path)
    return p.with_name(p.stem + ".geometry.npz")


def load_geometry(episode_path: str | os.PathLike[str]) -> dict[str, np.ndarray] | None:
    """The geometry of one motion episode (``depth`` float32 ``[T, H, W]``, ``link`` uint8
    ``[T, H, W]``, ``poses`` float32 ``[T, B, 12]``, ``camera`` float64 ``[13]`` and, from
    version 2 on, ``dof_poses`` float32 ``[T, n, 2, B, 12]`` with ``dof_step`` float64
    ``[]``, rad), or None when its chunk has none (``syncedge cells geometry`` makes it).

    Raises:
        CellError: a geometry file that cannot be read or lacks a field.
    """
    path = geometry_path(episode_path)
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            keys = ["depth", "link", "poses", "camera"]
            keys += [k for k in ("dof_poses", "dof_step") if k in z.files]
            return {k: z[k] for k in keys}
    except (OSError, ValueError, KeyError) as exc:
        raise CellError(f"{path}: unreadable geometry ({exc}); remove the chunk's "
                        f"{GEOMETRY_MANIFEST} and run 'syncedge cells geometry' again") from None


def render_chunk_geometry(chunk_dir: str | os.PathLike[str], command: str = "",
                          progress: Callable[[str], None] | None = None) -> Path:
    """Render the geometry of every motion episode of one generated chunk (the cells'
    own scenes, replayed at each frame's recorded joint positions) next to its episodes,
    then the chunk's ``geometry.json`` (checksums, the command), written last; a chunk that
    has one of the current :data:`GEOMETRY_VERSION` is skipped (an older one is rendered
    again).

    Returns:
        The path of ``geometry.json``.

    Raises:
        CellError: the chunk is incomplete, or a replayed frame's robot mask differs from
            the recorded one (the episode was not rendered by this scene: the geometry
            would not belong to its frames).
        RendererUnavailableError: no offscreen OpenGL.
    """
    from edge.episode import load_episode
    from edge.fileio import atomic_write, sha256_file, write_json_atomic
    from export.cells.generate import CellGenerator, GenerateOptions
    from export.cells.sampling import CellParams

    chunk = Path(chunk_dir)
    out = chunk / GEOMETRY_MANIFEST
    if out.is_file():
        try:
            version = json.loads(out.read_text()).get("version")
        except (OSError, ValueError):
            version = None
        if version == GEOMETRY_VERSION:
            return out
    man_path = chunk / "manifest.json"
    if not man_path.is_file():
        raise CellError(f"{chunk}: no manifest.json (an incomplete chunk); generate it with "
                        "'syncedge cells generate' first")
    man = json.loads(man_path.read_text())
    opts = man.get("options", {})
    gen_opts = GenerateOptions(width=int(opts.get("width", 64)),
                               height=int(opts.get("height", 64)),
                               face_budget=opts.get("face_budget", 8000))
    files: dict[str, str] = {}
    t0 = time.perf_counter()
    frames = 0
    with CellGenerator(gen_opts) as gen:
        for i, cell_json in enumerate(man["cells"]):
            params = CellParams.from_json_dict(cell_json)
            scene = gen.scene(params.robot)
            scene.apply_cell(params)
            rels = sorted(r for r in man["files"]
                          if r.startswith(params.cell_id + "/") and "motion-" in r)
            for rel in rels:
                ep = load_episode(chunk / rel)
                if ep.joint_positions is None or ep.robot_mask is None:
                    raise CellError(f"{chunk / rel}: no joint positions or robot mask to "
                                    "replay; generate cells with segmentation")
                q = params.convention.to_canonical(ep.joint_positions)
                depth, link, poses, dof = [], [], [], []
                camera = np.zeros(13)
                for t, qt in enumerate(q):
                    d, lk, ps, camera = scene.render_geometry(qt)
                    dof.append(dof_link_poses(scene.link_poses, qt))
                    if not np.array_equal(lk != NO_LINK, ep.robot_mask[t]):
                        raise CellError(
                            f"{chunk / rel}: frame {t}: the replayed robot mask differs from "
                            f"the recorded one in {int(((lk != NO_LINK) != ep.robot_mask[t]).sum())} "
                            "pixels; the episode was rendered with other scene settings")
                    depth.append(d)
                    link.append(lk)
                    poses.append(ps)
                frames += len(q)
                buf = io.BytesIO()
                np.savez_compressed(buf, depth=np.stack(depth), link=np.stack(link),
                                    poses=np.stack(poses), camera=camera,
                                    dof_poses=np.stack(dof), dof_step=np.float64(DOF_STEP_RAD))
                target = geometry_path(chunk / rel)
                data = buf.getvalue()
                atomic_write(target, lambda f: f.write(data))  # noqa: B023 (called at once)
                files[target.relative_to(chunk).as_posix()] = sha256_file(target)
            if progress:
                progress(f"{chunk.name}: cell {i + 1}/{len(man['cells'])}, {frames} frames, "
                         f"{frames / max(time.perf_counter() - t0, 1e-9):.0f} frames/s")
    return write_json_atomic(out, {"version": GEOMETRY_VERSION, "command": command,
                                   "files": files, "frames": frames,
                                   "seconds": round(time.perf_counter() - t0, 3)})
