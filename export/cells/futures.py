"""Candidate futures: M action sequences from one start state, each rendered by MuJoCo.

The ground truth that blur cannot fool: a prediction is scored by whether it is nearer its
own future than the other candidates' (futures retrieval, ``syncedge model eval``), and the
pre-check's verdicts are scored against the rendered robot masks and end-effector pixels.

A cell's futures are drawn from the split's own test-motion sampler
(:func:`~export.cells.trajectories.motion_trajectory`, either profile) starting at the
joint positions of the first frame of the cell's first motion episode, so the start frame
is that episode's first frame. They are cached next to the cells
(``<root>/<split>/futures/<cell_id>-<profile>-m<M>-t<T>-s<seed>.npz``, written atomically)
so every model is scored on the same futures.
"""

from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from export.cells.robots import robot_spec
from export.cells.trajectories import MOTION_PROFILES, motion_trajectory
from export.errors import CellError

__all__ = ["Futures", "draw_futures", "load_or_render_futures"]


@dataclass(frozen=True)
class Futures:
    """M rendered candidate futures of one start state.

    Attributes:
        frames: uint8 ``[M, T+1, H, W, 3]``; frame 0 is the shared start frame.
        actions: float32 ``[M, T, A]``: controller-convention actions (rad), the cell's A.
        robot_mask: bool ``[M, T+1, H, W]``.
        ee_px: float32 ``[M, T+1, 2]`` end-effector pixel (x, y).
        profile: the motion profile the candidates were drawn from.
    """

    frames: np.ndarray
    actions: np.ndarray
    robot_mask: np.ndarray
    ee_px: np.ndarray
    profile: str


def _seed(cell_id: str, profile: str, seed: int) -> int:
    h = hashlib.sha256(f"futures|{cell_id}|{profile}|{seed}".encode()).digest()
    return int.from_bytes(h[:8], "little")


def draw_futures(gen: object, params: object, q0_ctrl: np.ndarray, count: int, steps: int,
                 profile: str, seed: int = 0) -> Futures:
    """Draw and render ``count`` candidate futures of ``steps`` steps from ``q0_ctrl``.

    Args:
        gen: a :class:`~export.cells.generate.CellGenerator` (with segmentation).
        params: the cell's :class:`~export.cells.sampling.CellParams`.
        q0_ctrl: float64 ``[n]`` start joint positions, controller convention, rad.
        count: M >= 2; steps: T >= 1; profile: one of ``MOTION_PROFILES``.
        seed: extra seed (the draw is seeded by cell id, profile and this).

    Raises:
        CellError: bad count, steps or profile.
    """
    if count < 2 or steps < 1:
        raise CellError(f"futures: expected count >= 2 and steps >= 1, found {count}, {steps}")
    if profile not in MOTION_PROFILES:
        raise CellError(f"futures: unknown profile {profile!r}; expected {list(MOTION_PROFILES)}")
    conv = params.convention  # type: ignore[attr-defined]
    spec = robot_spec(params.robot)  # type: ignore[attr-defined]
    rng = np.random.default_rng(_seed(params.cell_id, profile, seed))  # type: ignore[attr-defined]
    q0 = conv.to_canonical(np.asarray(q0_ctrl, np.float64)[None])[0]
    frames, actions, masks, ee = [], [], [], []
    for _ in range(count):
        q = motion_trajectory(rng, spec, steps + 1, profile, start_rad=q0)
        q[0] = q0
        ep = gen.render_episode(params, q, "motion")  # type: ignore[attr-defined]
        if ep.robot_mask is None or ep.ee_px is None:
            raise CellError("futures need a generator with segmentation")
        frames.append(ep.frames)
        actions.append(ep.actions[:steps])
        masks.append(ep.robot_mask)
        ee.append(ep.ee_px)
    return Futures(np.stack(frames), np.stack(actions).astype(np.float32), np.stack(masks),
                   np.stack(ee).astype(np.float32), profile)


def load_or_render_futures(root: str | os.PathLike[str], split: str, cell_id: str,
                           gen_factory: object, params: object, q0_ctrl: np.ndarray,
                           count: int, steps: int, profile: str, seed: int = 0) -> Futures:
    """:func:`draw_futures`, cached under ``<root>/<split>/futures/`` (see the module doc).

    ``gen_factory()`` returns the generator; it is called only when the cache misses.
    """
    from edge.fileio import atomic_write

    path = Path(root) / split / "futures" / f"{cell_id}-{profile}-m{count}-t{steps}-s{seed}.npz"
    if path.is_file():
        with np.load(path, allow_pickle=False) as z:
            return Futures(z["frames"], z["actions"], z["robot_mask"], z["ee_px"], profile)
    fut = draw_futures(gen_factory(), params, q0_ctrl, count, steps, profile, seed)  # type: ignore[operator]
    buf = io.BytesIO()
    np.savez_compressed(buf, frames=fut.frames, actions=fut.actions,
                        robot_mask=fut.robot_mask, ee_px=fut.ee_px)
    atomic_write(path, lambda f: f.write(buf.getvalue()))
    return fut
