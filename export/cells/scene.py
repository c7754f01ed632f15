"""MuJoCo scenes of one robot arm, a table and a few objects, rendered offscreen.

One :class:`CellScene` compiles one robot's scene once (visual meshes only, decimated for
CPU rendering) and then renders any number of cells by changing the camera, lights and
colours in place, without recompiling. Rendering is kinematic replay: joint positions are
set and ``mj_kinematics`` places the bodies; there is no physics. A cell whose
``lighting`` is ``"lit"`` also gets its lights placed (``mj_camlight``, which
``mj_kinematics`` does not run); an ``"ambient"`` cell is drawn by the ambient term alone,
as every cell was before the lights were placed. A ``"shadowed"`` cell is lit, its lights
cast shadows and its table and floor carry a grain texture.

Throughput settings (measured in ``bench/bench_cells.py``): collision geoms removed,
visual meshes welded and decimated with quadric edge collapse (``fast_simplification``),
anti-aliasing off (``offsamples = 0``), no shadows (but in a ``"shadowed"`` cell), no
reflections, no skybox.
"""

from __future__ import annotations

import atexit
import math
import os
import weakref
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from edge.calibrate.spec import RobotSpec
from edge.errors import MissingDependencyError
from export.cells.robots import EE_BODY, assets_root, robot_spec
from export.errors import CellError, RendererUnavailableError

__all__ = ["CellScene", "RenderSettings", "decimated_robot_spec", "require_mujoco"]

_DEBIAN_HINT = (
    "install an offscreen OpenGL renderer: 'apt-get install libegl1 libegl-mesa0 "
    "libgl1-mesa-dri' (MUJOCO_GL=egl) or 'apt-get install libosmesa6' (MUJOCO_GL=osmesa)"
)

# Scene layout, metres, in the robot base frame (robot faces +x).
TABLE_CENTER = (0.62, 0.0)
TABLE_HALF = (0.28, 0.42)
TABLE_TOP_Z = 0.30
BASE_Z = 0.42  # robot base on a pedestal, so the home pose clears the table
NUM_OBJECTS = 3
WALL_DISTANCE = 3.0
MIN_FACES_PER_MESH = 60
#: Shadow map size of a ``"shadowed"`` cell's lights, px.
SHADOW_MAP_PX = 2048


@dataclass(frozen=True)
class RenderSettings:
    """How a scene is rendered.

    Attributes:
        width, height: image size in pixels.
        face_budget: decimation target, faces for the whole robot (``None``: originals).
    """

    width: int = 64
    height: int = 64
    face_budget: int | None = 8000


def require_mujoco() -> Any:
    """Import MuJoCo with an offscreen backend and return the module.

    Sets ``MUJOCO_GL=egl`` unless the environment already chose a backend.

    Raises:
        MissingDependencyError: MuJoCo is not installed (names ``syncedge[train]``).
    """
    os.environ.setdefault("MUJOCO_GL", "egl")
    if os.environ["MUJOCO_GL"] == "osmesa":
        os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")
    try:
        import mujoco
    except ImportError as exc:
        raise MissingDependencyError("mujoco", "train", "Rendering robot cells") from exc
    return mujoco


def _quat_to_mat(mujoco: Any, quat: np.ndarray) -> np.ndarray:
    m = np.zeros(9)
    mujoco.mju_quat2Mat(m, np.asarray(quat, dtype=np.float64))
    return m.reshape(3, 3)


def _weld(v: np.ndarray, f: np.ndarray, tol_m: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """Merge vertices closer than ``tol_m`` so that quadric decimation sees a connected mesh."""
    key = np.round(v / tol_m).astype(np.int64)
    uniq, inverse = np.unique(key, axis=0, return_inverse=True)
    f = inverse.reshape(-1)[f]
    keep = (f[:, 0] != f[:, 1]) & (f[:, 1] != f[:, 2]) & (f[:, 0] != f[:, 2])
    return uniq.astype(np.float64) * tol_m, f[keep]


@cache
def decimated_robot_spec(name: str, face_budget: int | None) -> Any:
    """Load a robot's MJCF with visual geoms only and meshes decimated to a face budget.

    The budget (faces for the whole robot) is shared among the meshes in proportion to
    their original face counts, at least ``MIN_FACES_PER_MESH`` each.

    Returns a fresh ``mujoco.MjSpec`` copy each call (the cache holds the master).

    Raises:
        CellError: unknown robot or assets not installed.
    """
    return _load_robot(name, face_budget)


def _load_robot(name: str, face_budget: int | None) -> Any:
    mujoco = require_mujoco()
    spec: RobotSpec = robot_spec(name)
    path = assets_root() / spec.robot / "robot.xml"
    robot = mujoco.MjSpec.from_file(str(path))
    for g in list(robot.geoms):
        if g.group != 1:
            robot.delete(g)  # robosuite puts visual geoms in group 1; the rest collide
    used = {g.meshname for g in robot.geoms if g.type == mujoco.mjtGeom.mjGEOM_MESH}
    for mesh in list(robot.meshes):
        if mesh.name not in used:
            robot.delete(mesh)
    for act in list(robot.actuators):
        robot.delete(act)
    if face_budget is None:
        return robot
    import fast_simplification

    compiled = robot.copy().compile()
    total_faces = int(compiled.mesh_facenum.sum())
    for mesh in robot.meshes:
        i = mujoco.mj_name2id(compiled, mujoco.mjtObj.mjOBJ_MESH, mesh.name)
        va, vn = compiled.mesh_vertadr[i], compiled.mesh_vertnum[i]
        fa, fn = compiled.mesh_faceadr[i], compiled.mesh_facenum[i]
        v = compiled.mesh_vert[va:va + vn].astype(np.float64)
        f = compiled.mesh_face[fa:fa + fn].astype(np.int64)
        # Compiled vertices live in the mesh's inertial frame; map back to the file frame.
        v = v @ _quat_to_mat(mujoco, compiled.mesh_quat[i]).T + compiled.mesh_pos[i]
        v, f = _weld(v, f)
        # Share the robot's face budget among its meshes by their original face counts.
        target = max(MIN_FACES_PER_MESH, int(face_budget * fn / total_faces))
        if len(f) > target:
            v, f = fast_simplification.simplify(
                v.astype(np.float32), f.astype(np.int32),
                target_reduction=1.0 - target / len(f))
        mesh.file = ""
        mesh.scale = [1.0, 1.0, 1.0]
        mesh.refpos = [0.0, 0.0, 0.0]
        mesh.refquat = [1.0, 0.0, 0.0, 0.0]
        mesh.uservert = np.asarray(v, dtype=np.float32).ravel().tolist()
        mesh.userface = np.asarray(f, dtype=np.int32).ravel().tolist()
    return robot


class CellScene:
    """One robot's scene, compiled once, rendered for many cells.

    Args:
        robot: robot name (see :mod:`export.cells.robots`).
        settings: image size and decimation.

    Raises:
        RendererUnavailableError: no EGL/OSMesa, naming the Debian packages to install.
        CellError: unknown robot or missing assets.
    """

    def __init__(self, robot: str, settings: RenderSettings | None = None):
        self.robot = robot_spec(robot)
        self.settings = settings or RenderSettings()
        mujoco = require_mujoco()
        self._mj = mujoco
        robot_mjcf = decimated_robot_spec(robot, self.settings.face_budget).copy()
        world = mujoco.MjSpec()
        world.modelname = f"cell_{robot}"
        world.visual.quality.offsamples = 0
        # the shadow map only a "shadowed" cell's lights draw into (no light casts a shadow
        # otherwise, and an ambient or lit cell renders as without it)
        world.visual.quality.shadowsize = SHADOW_MAP_PX
        world.visual.global_.offwidth = self.settings.width
        world.visual.global_.offheight = self.settings.height
        world.visual.headlight.active = 0
        wb = world.worldbody
        geom = mujoco.mjtGeom
        wb.add_geom(name="floor", type=geom.mjGEOM_PLANE, size=[WALL_DISTANCE, WALL_DISTANCE, 0.1])
        for i, (x, y, sx, sy) in enumerate([
            (WALL_DISTANCE, 0, 0.05, WALL_DISTANCE), (-WALL_DISTANCE, 0, 0.05, WALL_DISTANCE),
            (0, WALL_DISTANCE, WALL_DISTANCE, 0.05), (0, -WALL_DISTANCE, WALL_DISTANCE, 0.05),
        ]):
            wb.add_geom(name=f"wall{i}", type=geom.mjGEOM_BOX, size=[sx, sy, 1.5], pos=[x, y, 1.5])
        cx, cy = TABLE_CENTER
        hx, hy = TABLE_HALF
        wb.add_geom(name="table", type=geom.mjGEOM_BOX, size=[hx, hy, 0.02],
                    pos=[cx, cy, TABLE_TOP_Z - 0.02])
        for i, (dx, dy) in enumerate([(hx - 0.03, hy - 0.03), (hx - 0.03, -hy + 0.03),
                                      (-hx + 0.03, hy - 0.03), (-hx + 0.03, -hy + 0.03)]):
            wb.add_geom(name=f"table_leg{i}", type=geom.mjGEOM_BOX,
                        size=[0.02, 0.02, (TABLE_TOP_Z - 0.04) / 2],
                        pos=[cx + dx, cy + dy, (TABLE_TOP_Z - 0.04) / 2])
        kinds = [(geom.mjGEOM_BOX, [0.04, 0.04, 0.04]), (geom.mjGEOM_CYLINDER, [0.035, 0.05, 0]),
                 (geom.mjGEOM_SPHERE, [0.04, 0, 0])]
        for i in range(NUM_OBJECTS):
            kind, size = kinds[i % len(kinds)]
            wb.add_geom(name=f"object{i}", type=kind, size=size, pos=[cx, cy, TABLE_TOP_Z + 0.05])
        wb.add_geom(name="pedestal", type=geom.mjGEOM_CYLINDER, size=[0.12, BASE_Z / 2, 0],
                    pos=[0, 0, BASE_Z / 2])
        for i in range(2):
            wb.add_light(name=f"light{i}", pos=[0, 0, 3], dir=[0, 0, -1], castshadow=False)
        # a "shadowed" cell's surfaces: a light checker (the cell's colour times 0.78-1.0)
        # with random grain marks, so a shadow falls on texture as on a real table or floor
        texture = mujoco.mjtTexture.mjTEXTURE_2D
        for name, repeat, grain in (("table", 6, 0.06), ("floor", 10, 0.03)):
            world.add_texture(name=f"{name}_grain", type=texture,
                              builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER, rgb1=[1, 1, 1],
                              rgb2=[0.78, 0.78, 0.78], mark=mujoco.mjtMark.mjMARK_RANDOM,
                              random=grain, markrgb=[0.55, 0.55, 0.55], width=256, height=256)
            mat = world.add_material(name=f"{name}_grain", texrepeat=[repeat, repeat])
            mat.textures[int(mujoco.mjtTextureRole.mjTEXROLE_RGB)] = f"{name}_grain"
        frame = wb.add_frame(pos=[0.0, 0.0, BASE_Z])
        frame.attach_body(robot_mjcf.worldbody.first_body(), "robot/", "")
        self.model = world.compile()
        self.data = mujoco.MjData(self.model)
        self._light_xpos0 = self.data.light_xpos.copy()  # as MjData starts them
        self._light_xdir0 = self.data.light_xdir.copy()
        self._lit = False
        m = self.model
        self._qadr = np.array([
            m.jnt_qposadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, f"robot/{j}")]
            for j in self.robot.dof_names
        ])
        self._ee_body = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, f"robot/{EE_BODY}")
        in_robot = np.array([m.body(b).name.startswith("robot/") for b in range(m.nbody)])
        self._robot_geom = np.append(in_robot[m.geom_bodyid], False)  # index -1 -> False
        #: robot links (bodies) in model order, and each body's index among them (255: none)
        self._robot_bodies = np.flatnonzero(in_robot)
        if len(self._robot_bodies) > 255:
            raise CellError(f"robot {robot!r}: {len(self._robot_bodies)} links, at most 255")
        self._link_of_body = np.full(m.nbody, 255, np.uint8)
        self._link_of_body[self._robot_bodies] = np.arange(len(self._robot_bodies))
        self._geom_id = {n: mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, n)
                         for n in ["floor", "table", "pedestal"]
                         + [f"wall{i}" for i in range(4)] + [f"table_leg{i}" for i in range(4)]
                         + [f"object{i}" for i in range(NUM_OBJECTS)]}
        self._grain = {n: mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_MATERIAL, f"{n}_grain")
                       for n in ("table", "floor")}
        for mat in range(m.nmat):
            m.mat_reflectance[mat] = 0.0
        try:
            self._renderer = mujoco.Renderer(m, self.settings.height, self.settings.width)
        except Exception as exc:  # MuJoCo raises several types for a missing GL stack
            raise RendererUnavailableError(
                f"MuJoCo could not open an offscreen OpenGL context "
                f"(MUJOCO_GL={os.environ.get('MUJOCO_GL')}: {exc}); {_DEBIAN_HINT}"
            ) from None
        self._camera = mujoco.MjvCamera()
        self._camera.type = mujoco.mjtCamera.mjCAMERA_FREE
        # Release the GL context before interpreter teardown unloads EGL (a renderer freed
        # later fails noisily in its finaliser).
        ref = weakref.ref(self)

        def _close_at_exit() -> None:
            scene = ref()
            if scene is not None:
                scene.close()

        atexit.register(_close_at_exit)

    # -- cell appearance ---------------------------------------------------------------
    def apply_cell(self, cell: Any) -> None:
        """Set camera, lights, colours and object placement from a :class:`CellParams`."""
        m = self.model
        cam = self._camera
        cam.lookat[:] = cell.lookat
        cam.azimuth = cell.azimuth_deg
        cam.elevation = cell.elevation_deg
        cam.distance = cell.distance_m
        m.vis.global_.fovy = cell.fovy_deg
        m.vis.headlight.ambient[:] = cell.ambient_rgb
        m.vis.headlight.diffuse[:] = 0.0
        m.vis.headlight.active = 1  # ambient only
        lighting = getattr(cell, "lighting", "ambient")
        self._lit = lighting in ("lit", "shadowed")
        shadowed = lighting == "shadowed"
        m.light_castshadow[:] = shadowed
        for i, light in enumerate(cell.lights):
            m.light_pos[i] = light["pos"]
            direction = -np.asarray(light["pos"]) + np.array([0.4, 0.0, 0.5])
            m.light_dir[i] = direction / np.linalg.norm(direction)
            m.light_diffuse[i] = light["diffuse"]
            m.light_specular[i] = 0.1
        g = self._geom_id
        for name in ("table", "floor"):  # textured in a shadowed cell, plain otherwise
            mat = self._grain[name]
            m.geom_matid[g[name]] = mat if shadowed else -1
            m.mat_rgba[mat] = [*getattr(cell, f"{name}_rgb"), 1]
        m.geom_rgba[g["floor"]] = [*cell.floor_rgb, 1]
        for i in range(4):
            m.geom_rgba[g[f"wall{i}"]] = [*cell.wall_rgb, 1]
            m.geom_rgba[g[f"table_leg{i}"]] = [*cell.table_rgb, 1]
        m.geom_rgba[g["table"]] = [*cell.table_rgb, 1]
        m.geom_rgba[g["pedestal"]] = [0.2, 0.2, 0.22, 1]
        for i, obj in enumerate(cell.objects):
            gid = g[f"object{i}"]
            m.geom_rgba[gid] = [*obj["rgb"], 1]
            z = TABLE_TOP_Z + m.geom_size[gid][2 if i % 3 != 2 else 0]
            if i % 3 == 1:
                z = TABLE_TOP_Z + m.geom_size[gid][1]
            m.geom_pos[gid] = [obj["xy"][0], obj["xy"][1], z]

    # -- rendering ---------------------------------------------------------------------
    def _place(self, q_rad: np.ndarray) -> None:
        """Set joint positions ``q_rad`` (canonical order, rad) and place the bodies, and
        for a lit cell the lights; an ambient cell's lights stay where ``MjData`` starts
        them (at the origin, pointing nowhere: they light nothing), even after a lit cell
        was rendered in this scene."""
        self.data.qpos[self._qadr] = q_rad
        self._mj.mj_kinematics(self.model, self.data)
        if self._lit:
            self._mj.mj_camlight(self.model, self.data)
        else:
            self.data.light_xpos[:] = self._light_xpos0
            self.data.light_xdir[:] = self._light_xdir0

    def render(self, q_rad: np.ndarray, segmentation: bool = True
               ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """Render one frame at joint positions ``q_rad`` (canonical joint order, rad).

        Returns:
            ``(rgb, robot_mask, ee_px)``: uint8 ``[H, W, 3]``; bool ``[H, W]`` (``None``
            when ``segmentation`` is false); float32 ``[2]`` end-effector pixel (x, y),
            NaN when behind the camera.
        """
        mujoco = self._mj
        self._place(q_rad)
        r = self._renderer
        r.update_scene(self.data, camera=self._camera)
        rgb = r.render().copy()
        mask = None
        if segmentation:
            r.enable_segmentation_rendering()
            seg = r.render()
            r.disable_segmentation_rendering()
            ids = np.where(seg[..., 1] == int(mujoco.mjtObj.mjOBJ_GEOM), seg[..., 0], -1)
            mask = self._robot_geom[ids]
        ee = self.project(self.data.xpos[self._ee_body])
        return rgb, mask, ee

    def render_geometry(self, q_rad: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                         np.ndarray]:
        """The geometry behind one frame at joint positions ``q_rad`` (canonical order, rad):
        what :func:`export.cells.geometry.true_backward_flow` needs to say where each robot
        pixel was at another pose.

        Returns:
            ``(depth, link, link_poses, camera)``: float32 ``[H, W]`` depth along the
            camera's viewing axis (m) where the robot is seen, 0 elsewhere; uint8 ``[H, W]``
            index of the robot link seen (255: not the robot); float32 ``[B, 12]`` every
            robot link's world pose (position m, then the row-major rotation matrix); float64
            ``[13]`` the camera (:meth:`camera_vector`).
        """
        mujoco = self._mj
        self._place(q_rad)
        r = self._renderer
        r.update_scene(self.data, camera=self._camera)
        r.enable_segmentation_rendering()
        seg = r.render().copy()
        r.disable_segmentation_rendering()
        r.enable_depth_rendering()
        depth = r.render().astype(np.float32)
        r.disable_depth_rendering()
        ids = np.where(seg[..., 1] == int(mujoco.mjtObj.mjOBJ_GEOM), seg[..., 0], -1)
        robot = self._robot_geom[ids]
        link = np.full(ids.shape, 255, np.uint8)
        link[robot] = self._link_of_body[self.model.geom_bodyid[ids[robot]]]
        depth = np.where(robot, depth, 0.0).astype(np.float32)
        return depth, link, self._link_poses(), self.camera_vector()

    def link_poses(self, q_rad: np.ndarray) -> np.ndarray:
        """Every robot link's world pose at joint positions ``q_rad`` (canonical order, rad),
        without rendering: float32 ``[B, 12]`` as in :meth:`render_geometry`."""
        self.data.qpos[self._qadr] = q_rad
        self._mj.mj_kinematics(self.model, self.data)
        return self._link_poses()

    def _link_poses(self) -> np.ndarray:
        bodies = self._robot_bodies
        poses = np.concatenate([self.data.xpos[bodies], self.data.xmat[bodies]], 1)
        return poses.astype(np.float32)

    def camera_vector(self) -> np.ndarray:
        """The OpenGL camera of the last render as float64 ``[13]``: position (m), forward
        and up unit vectors, then the near plane's distance, top, bottom and horizontal
        centre (m) (``mjvGLCamera``; the near plane's width follows from the aspect, as in
        :meth:`project`)."""
        g = self._renderer.scene.camera[0]
        return np.array([*g.pos, *g.forward, *g.up, g.frustum_near, g.frustum_top,
                         g.frustum_bottom, g.frustum_center], np.float64)

    def project(self, point_m: np.ndarray) -> np.ndarray:
        """Project a world point (m) to pixel (x, y) float32 with the current camera.

        Uses the OpenGL camera of the last :meth:`render` (``mjvGLCamera`` frustum).
        """
        glcam = self._renderer.scene.camera[0]
        pos = np.asarray(glcam.pos)
        fwd = np.asarray(glcam.forward)
        up = np.asarray(glcam.up)
        right = np.cross(fwd, up)
        d = np.asarray(point_m, dtype=np.float64) - pos
        z = float(d @ fwd)
        if z <= 1e-6:
            return np.array([math.nan, math.nan], dtype=np.float32)
        x_near = glcam.frustum_near * float(d @ right) / z
        y_near = glcam.frustum_near * float(d @ up) / z
        # mjv_updateScene leaves frustum_width to the renderer: derive it from the aspect.
        half_w = 0.5 * (glcam.frustum_top - glcam.frustum_bottom) \
            * self.settings.width / self.settings.height
        left = glcam.frustum_center - half_w
        width = 2.0 * half_w
        u = (x_near - left) / width * self.settings.width
        v = (glcam.frustum_top - y_near) / (glcam.frustum_top - glcam.frustum_bottom) \
            * self.settings.height
        return np.array([u, v], dtype=np.float32)

    def close(self) -> None:
        """Release the OpenGL context."""
        r = getattr(self, "_renderer", None)
        if r is not None:
            r.close()
            self._renderer = None

    def __enter__(self) -> CellScene:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
