"""Training and evaluation data: generated cells loaded into memory, windows and augmentation.

A :class:`Cell` holds one cell's calibration episode (padded to the model's K*L+1 frames
and A channels, with its DoF mask) and its motion episodes. :func:`relabel` is the channel
relabelling augmentation (SyncWorld's recipe: a random permutation plus sign flips of the
action channels, applied consistently to the calibration, history and future actions, never
to the video) and never yields a held-out convention.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge.episode import load_episode
from edge.runtime.calibration_input import prepare_calibration
from export.cells.sampling import Convention, is_held_out_convention
from export.errors import ExportError

__all__ = ["Cell", "Motion", "load_cells", "relabel", "sample_relabelling"]


@dataclass
class Motion:
    """One motion episode: frames uint8 ``[T, H, W, 3]``, actions float32 ``[T, A]`` (padded)."""

    frames: np.ndarray
    actions: np.ndarray
    ee_px: np.ndarray | None = None
    robot_mask: np.ndarray | None = None
    joint_positions: np.ndarray | None = None
    path: str = ""
    #: the episode's rendered geometry (:func:`export.cells.geometry.load_geometry`), or None
    geometry: dict[str, np.ndarray] | None = None


@dataclass
class Cell:
    """A cell's calibration (padded) and motion episodes, plus its convention."""

    cell_id: str
    split: str
    robot: str
    num_dof: int
    convention: Convention
    cal_frames: np.ndarray  # (K*L+1, H, W, 3) uint8
    cal_actions: np.ndarray  # (K*L+1, A) float32
    dof_mask: np.ndarray  # (A,) float32
    motions: list[Motion] = field(default_factory=list)
    params: dict = field(default_factory=dict)
    #: float32 ``[A]``: the calibration's home pose (its first frame's joint positions,
    #: controller order, padded), rad; None where the episode records no joint positions
    cal_home: np.ndarray | None = None


def _pad_actions(a: np.ndarray, width: int) -> np.ndarray:
    out = np.zeros((len(a), width), np.float32)
    out[:, : a.shape[1]] = a
    return out


def load_cells(root: str | os.PathLike[str], splits: list[str], max_dof: int = 7,
               segment_frames: int = 8, limit: int | None = None,
               with_masks: bool = True, with_geometry: bool = False) -> list[Cell]:
    """Load every complete chunk of ``splits`` under ``root`` (``OUT/<split>/chunk-*/``).

    With ``with_geometry`` every motion episode's geometry is loaded too (``syncedge cells
    geometry``), for the true-flow loss.

    Raises:
        ExportError: if a split has no complete chunk, or (``with_geometry``) a chunk has
            no geometry.
    """
    from export.cells.geometry import GEOMETRY_MANIFEST, load_geometry

    root = Path(root)
    if root.exists() and not root.is_dir():
        raise ExportError(f"{root}: a file; expected the cells folder (one folder per split, "
                          "as 'syncedge cells generate --out DIR' writes)")
    cells: list[Cell] = []
    for split in splits:
        manifests = sorted((root / split).glob("chunk-*/manifest.json"))
        if not manifests:
            raise ExportError(f"{root / split}: no complete chunk (no chunk-*/manifest.json); "
                              f"generate it with 'syncedge cells generate --split {split} --out {root}'")
        for mpath in manifests:
            if with_geometry and not (mpath.parent / GEOMETRY_MANIFEST).is_file():
                raise ExportError(f"{mpath.parent}: no {GEOMETRY_MANIFEST}; render it with "
                                  f"'syncedge cells geometry --data {root} --split {split}'")
            man = json.loads(mpath.read_text())
            by_cell: dict[str, list[str]] = {}
            for rel in sorted(man["files"]):
                by_cell.setdefault(rel.split("/")[0], []).append(rel)
            params = {c["cell_id"]: c for c in man["cells"]}
            for cell_id, rels in by_cell.items():
                cal = load_episode(mpath.parent / f"{cell_id}/calibration.npz")
                frames, actions, mask = prepare_calibration(cal, max_dof, segment_frames)
                conv = params[cell_id]["convention"]
                home = (_pad_actions(cal.joint_positions[:1], max_dof)[0]
                        if cal.joint_positions is not None else None)
                cell = Cell(cell_id, split, cal.metadata.robot, cal.num_dof,
                            Convention(tuple(conv["perm"]), tuple(conv["signs"])), frames,
                            actions, mask, params=params[cell_id], cal_home=home)
                for rel in rels:
                    if rel.endswith("calibration.npz"):
                        continue
                    ep = load_episode(mpath.parent / rel)
                    cell.motions.append(Motion(
                        ep.frames, _pad_actions(ep.actions, max_dof), ep.ee_px,
                        ep.robot_mask if with_masks else None,
                        _pad_actions(ep.joint_positions, max_dof)
                        if ep.joint_positions is not None else None, str(mpath.parent / rel),
                        load_geometry(mpath.parent / rel) if with_geometry else None))
                cells.append(cell)
                if limit is not None and len(cells) >= limit:
                    return cells
    return cells


def sample_relabelling(rng: np.random.Generator, cell_convention: Convention,
                       max_tries: int = 1000) -> Convention:
    """Draw a relabelling r of the cell's n channels such that ``r o convention`` is not held out.

    Raises:
        ExportError: if no admissible relabelling was found (cannot happen for n >= 2).
    """
    n = len(cell_convention.perm)
    for _ in range(max_tries):
        r = Convention(tuple(int(i) for i in rng.permutation(n)),
                       tuple(int(s) for s in rng.choice([-1, 1], size=n)))
        if not is_held_out_convention(r.compose(cell_convention)):
            return r
    raise ExportError(f"no admissible relabelling found for {cell_convention}")


def relabel(actions: np.ndarray, r: Convention) -> np.ndarray:
    """Apply relabelling ``r`` to the first ``len(r.perm)`` channels of ``actions [..., A]``."""
    n = len(r.perm)
    out = actions.copy()
    out[..., :n] = r.to_controller(actions[..., :n])
    return out
