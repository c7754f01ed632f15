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

__all__ = ["unproject", "project_points", "true_backward_flow", "NO_LINK", "geometry_path",
           "load_geometry", "render_chunk_geometry", "GEOMETRY_MANIFEST"]

#: the link index of a pixel that does not see the robot
NO_LINK = 255


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
    on = link_t != NO_LINK
    flow = np.zeros((2, h, w), np.float32)
    if not on.any():
        return flow, on
    links = link_t[on].astype(np.int64)
    if links.max() >= len(poses_t):
        raise ValueError(f"true_backward_flow: link {links.max()} but {len(poses_t)} poses")
    world = unproject(depth_t, camera)[on]  # (N, 3)
    pt = poses_t[links].astype(np.float64)
    ps = poses_s[links].astype(np.float64)
    rt, rs = pt[:, 3:].reshape(-1, 3, 3), ps[:, 3:].reshape(-1, 3, 3)
    local = np.einsum("nji,nj->ni", rt, world - pt[:, :3])  # R_t^T (P - x_t)
    back = np.einsum("nij,nj->ni", rs, local) + ps[:, :3]
    uv = project_points(back, camera, w, h)
    ys, xs = np.nonzero(on)
    ok = np.isfinite(uv).all(1)
    flow[0, ys[ok], xs[ok]] = uv[ok, 0] - (xs[ok] + 0.5)
    flow[1, ys[ok], xs[ok]] = uv[ok, 1] - (ys[ok] + 0.5)
    on = on.copy()
    on[ys[~ok], xs[~ok]] = False
    return flow, on


GEOMETRY_MANIFEST = "geometry.json"
GEOMETRY_VERSION = 1


def geometry_path(episode_path: str | os.PathLike[str]) -> Path:
    """Where the geometry of a motion episode ``<cell>/motion-NN.npz`` is kept:
    ``<cell>/motion-NN.geometry.npz``."""
    p = Path(episode_path)
    return p.with_name(p.stem + ".geometry.npz")


def load_geometry(episode_path: str | os.PathLike[str]) -> dict[str, np.ndarray] | None:
    """The geometry of one motion episode (``depth`` float32 ``[T, H, W]``, ``link`` uint8
    ``[T, H, W]``, ``poses`` float32 ``[T, B, 12]``, ``camera`` float64 ``[13]``), or None
    when its chunk has none (``syncedge cells geometry`` makes it).

    Raises:
        CellError: a geometry file that cannot be read or lacks a field.
    """
    path = geometry_path(episode_path)
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in ("depth", "link", "poses", "camera")}
    except (OSError, ValueError, KeyError) as exc:
        raise CellError(f"{path}: unreadable geometry ({exc}); remove the chunk's "
                        f"{GEOMETRY_MANIFEST} and run 'syncedge cells geometry' again") from None


def render_chunk_geometry(chunk_dir: str | os.PathLike[str], command: str = "",
                          progress: Callable[[str], None] | None = None) -> Path:
    """Render the geometry of every motion episode of one generated chunk (the cells'
    own scenes, replayed at each frame's recorded joint positions) next to its episodes,
    then the chunk's ``geometry.json`` (checksums, the command), written last; a chunk that
    has one is skipped.

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
                depth, link, poses = [], [], []
                camera = np.zeros(13)
                for t, qt in enumerate(q):
                    d, lk, ps, camera = scene.render_geometry(qt)
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
                                    poses=np.stack(poses), camera=camera)
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
