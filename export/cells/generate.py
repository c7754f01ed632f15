"""Rendering cells into episode files, in seeded chunks that regenerate identically.

Layout of a generated data set::

    OUT/<split>/chunk-0003/manifest.json          # written last: the chunk is complete
    OUT/<split>/chunk-0003/<cell_id>/calibration.npz
    OUT/<split>/chunk-0003/<cell_id>/motion-00.npz ...

A chunk's content is a function of (split, chunk index, options) only
(:func:`export.cells.sampling.chunk_seed`), so no data set needs committing: the same
command regenerates it. A chunk whose manifest exists is skipped (resume).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from edge.episode import CalibrationSegment, Episode, EpisodeMetadata, save_episode
from edge.fileio import sha256_file, write_json_atomic
from export.cells.robots import robot_spec
from export.cells.sampling import LIGHTINGS, CellParams, chunk_seed, sample_cell
from export.cells.scene import CellScene, RenderSettings
from export.cells.trajectories import (
    MOTION_PROFILES,
    SWEEP_AMPLITUDE_RAD,
    SweepSegment,
    calibration_sweep,
    motion_trajectory,
)
from export.errors import CellError

__all__ = ["GenerateOptions", "CellGenerator", "generate_chunk"]

log = logging.getLogger(__name__)

CHUNK_MANIFEST_VERSION = 1


@dataclass(frozen=True)
class GenerateOptions:
    """What each cell yields.

    Attributes:
        cells_per_chunk: cells in one chunk.
        motion_episodes: random-motion episodes per cell (besides its calibration episode).
        motion_frames: frames per motion episode.
        fps: frame rate, Hz (actions are position changes per frame at this rate).
        width, height: image size, px.
        face_budget: mesh decimation budget (``None``: original meshes).
        segmentation: also render the robot mask (evaluation only).
        motion: motion-episode profile, ``all_joints`` (every joint at once; the reference
            model's data) or ``two_joint`` (two joints move at a time), see
            :func:`~export.cells.trajectories.motion_trajectory`.
        sweep_amplitude_rad: (low, high) magnitude of each DoF's calibration sweep, rad
            (:data:`~export.cells.trajectories.SWEEP_AMPLITUDE_RAD` by default).
        lighting: how each drawn cell is lit (:attr:`~export.cells.sampling.CellParams.
            lighting`): ``"ambient"`` (default; the ambient term alone, as every shipped
            chunk and model was made), ``"lit"`` (its two lights too) or ``"shadowed"``
            (lit, the lights casting shadows on a grain-textured table and floor); the
            cells drawn are the same either way.

    Raises:
        CellError: an unknown motion profile or lighting.
    """

    cells_per_chunk: int = 16
    motion_episodes: int = 2
    motion_frames: int = 32
    fps: float = 10.0
    width: int = 64
    height: int = 64
    face_budget: int | None = 8000
    segmentation: bool = True
    motion: str = "all_joints"
    sweep_amplitude_rad: tuple[float, float] = SWEEP_AMPLITUDE_RAD
    lighting: str = "ambient"

    def __post_init__(self) -> None:
        if self.lighting not in LIGHTINGS:
            raise CellError(f"lighting {self.lighting!r}: expected one of {list(LIGHTINGS)}")
        if self.motion not in MOTION_PROFILES:
            raise CellError(f"motion profile {self.motion!r}: expected one of "
                            f"{list(MOTION_PROFILES)}")
        lo, hi = (float(v) for v in self.sweep_amplitude_rad)
        if not 0.0 < lo <= hi <= 1.5:
            raise CellError(f"sweep amplitude {lo}-{hi} rad: expected 0 < low <= high <= 1.5")
        object.__setattr__(self, "sweep_amplitude_rad", (lo, hi))


class CellGenerator:
    """Renders cells into :class:`~edge.episode.Episode` objects, one scene per robot.

    Args:
        options: see :class:`GenerateOptions`.
    """

    def __init__(self, options: GenerateOptions | None = None):
        self.options = options or GenerateOptions()
        self._scenes: dict[str, CellScene] = {}
        self.frames_rendered = 0
        self.render_seconds = 0.0

    def scene(self, robot: str) -> CellScene:
        """The (cached) scene of ``robot``."""
        if robot not in self._scenes:
            o = self.options
            self._scenes[robot] = CellScene(robot, RenderSettings(
                o.width, o.height, o.face_budget))
        return self._scenes[robot]

    def close(self) -> None:
        """Release every scene's OpenGL context."""
        for s in self._scenes.values():
            s.close()
        self._scenes.clear()

    def __enter__(self) -> CellGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def render_episode(self, cell: CellParams, q_canon: np.ndarray, kind: str,
                       sweep: Iterable[SweepSegment] = ()) -> Episode:
        """Render joint positions ``q_canon`` float64 ``[T, n]`` (canonical order, rad).

        Actions, positions, DoF names and segments are expressed in the cell's controller
        convention; frames, end-effector pixels and robot masks are what the camera sees.
        """
        o = self.options
        spec = robot_spec(cell.robot)
        scene = self.scene(cell.robot)
        scene.apply_cell(cell)
        t_count = len(q_canon)
        frames = np.empty((t_count, o.height, o.width, 3), np.uint8)
        masks = np.zeros((t_count, o.height, o.width), bool) if o.segmentation else None
        ee = np.empty((t_count, 2), np.float32)
        t0 = time.perf_counter()
        for t in range(t_count):
            rgb, mask, ee[t] = scene.render(q_canon[t], segmentation=o.segmentation)
            frames[t] = rgb
            if masks is not None:
                masks[t] = mask
        self.render_seconds += time.perf_counter() - t0
        self.frames_rendered += t_count
        conv = cell.convention
        q_ctrl = conv.to_controller(q_canon)
        actions = np.zeros_like(q_ctrl, dtype=np.float32)
        actions[:-1] = np.diff(q_ctrl, axis=0)
        names = tuple(spec.dof_names[p] for p in conv.perm)
        channel_of = {p: c for c, p in enumerate(conv.perm)}
        segments = tuple(
            CalibrationSegment(dof=names[channel_of[s.joint]], start=s.start, stop=s.stop,
                               amplitude=float(s.amplitude_rad * conv.signs[channel_of[s.joint]]))
            for s in sweep)
        meta = EpisodeMetadata(
            cell_id=cell.cell_id, camera_id=cell.camera_id, robot_id=cell.robot_id,
            robot=cell.robot, dof_names=names, dof_units=("rad",) * spec.num_dof, fps=o.fps,
            kind=kind, source="mujoco", camera=cell.camera_json(), split=cell.split,
            segments=segments, extra={"cell": cell.to_json_dict(), "options": asdict(o)})
        return Episode(frames=frames, actions=actions,
                       timestamps=np.arange(t_count, dtype=np.float64) / o.fps, metadata=meta,
                       joint_positions=q_ctrl.astype(np.float64), ee_px=ee, robot_mask=masks)

    def cell_episodes(self, cell: CellParams) -> dict[str, Episode]:
        """Render a cell's calibration episode and its motion episodes.

        Returns:
            ``{"calibration": ..., "motion-00": ..., ...}``.
        """
        o = self.options
        spec = robot_spec(cell.robot)
        rng = np.random.default_rng(cell.seed)
        home = np.asarray(spec.home_rad)
        start = home + rng.uniform(-0.1, 0.1, size=spec.num_dof)
        q_cal, sweep = calibration_sweep(rng, spec, start, o.sweep_amplitude_rad)
        out = {"calibration": self.render_episode(cell, q_cal, "calibration", sweep)}
        for m in range(o.motion_episodes):
            q = motion_trajectory(rng, spec, o.motion_frames, o.motion)
            out[f"motion-{m:02d}"] = self.render_episode(cell, q, "motion")
        return out


def _check_same_options(manifest_path: Path, options: GenerateOptions) -> None:
    """A complete chunk is reused only if it was made with the same options.

    Raises:
        CellError: naming the manifest and each option that differs (found, wanted).
    """
    try:
        found = json.loads(manifest_path.read_text())["options"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CellError(f"{manifest_path}: unreadable chunk manifest ({exc}); remove the "
                        "chunk folder to regenerate it") from None
    # chunks made before an option existed
    found = {"motion": "all_joints", "sweep_amplitude_rad": list(SWEEP_AMPLITUDE_RAD),
             "lighting": "ambient", **found}
    wanted = json.loads(json.dumps(asdict(options)))
    diff = {k: (found.get(k), v) for k, v in wanted.items() if found.get(k) != v}
    if diff:
        detail = ", ".join(f"{k}: {a!r} there, {b!r} asked" for k, (a, b) in diff.items())
        raise CellError(f"{manifest_path}: chunk made with other options ({detail}); "
                        "use another --out or remove the chunk folder")


def generate_chunk(split: str, chunk: int, out_dir: str | os.PathLike[str],
                   options: GenerateOptions | None = None, command: str = "",
                   progress: Callable[[str], None] | None = None) -> Path:
    """Render one seeded chunk of ``split`` under ``out_dir``; skip it if already complete
    (made with the same options; a complete chunk made with other options is refused).

    Returns:
        The chunk's manifest path.
    Raises:
        CellError: bad split or options; RendererUnavailableError: no offscreen GL.
    """
    options = options or GenerateOptions()
    chunk_dir = Path(out_dir) / split / f"chunk-{chunk:04d}"
    manifest_path = chunk_dir / "manifest.json"
    if manifest_path.is_file():
        _check_same_options(manifest_path, options)
        log.info("%s exists: chunk complete, skipped", manifest_path)
        return manifest_path
    seed = chunk_seed(split, chunk)
    rng = np.random.default_rng(seed)
    files: dict[str, str] = {}
    cells = []
    t0 = time.perf_counter()
    with CellGenerator(options) as gen:
        for i in range(options.cells_per_chunk):
            cell = sample_cell(rng, split, f"{split}-{chunk:04d}-{i:03d}")
            if options.lighting != cell.lighting:
                cell = replace(cell, lighting=options.lighting)
            cells.append(cell.to_json_dict())
            for name, ep in gen.cell_episodes(cell).items():
                rel = f"{cell.cell_id}/{name}.npz"
                save_episode(ep, chunk_dir / rel)
                files[rel] = sha256_file(chunk_dir / rel)
            if progress:
                rate = gen.frames_rendered / max(gen.render_seconds, 1e-9)
                progress(f"{split} chunk {chunk}: cell {i + 1}/{options.cells_per_chunk} "
                         f"({cell.robot}), {gen.frames_rendered} frames, {rate:.0f} frames/s")
        frames = gen.frames_rendered
    manifest = {
        "version": CHUNK_MANIFEST_VERSION, "split": split, "chunk": chunk, "seed": seed,
        "options": asdict(options), "command": command, "cells": cells, "files": files,
        "frames": frames, "seconds": round(time.perf_counter() - t0, 3),
    }
    return write_json_atomic(manifest_path, manifest)
