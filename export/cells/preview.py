"""Contact sheets of cells: many random cells at a glance, or one cell's episodes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edge.episode import Episode
from edge.visual import contact_sheet
from export.cells.robots import robot_spec
from export.cells.sampling import SPLITS, sample_cell

__all__ = ["episodes_sheet", "load_cell_dir", "random_cells_sheet"]


def random_cells_sheet(count: int = 16, seed: int = 0, columns: int = 4, size_px: int = 64,
                       scale: int = 3) -> np.ndarray:
    """Render ``count`` random cells (all splits, at a random pose each) as one grid.

    Returns:
        uint8 RGB image; each tile is labelled ``robot/split``.
    """
    from export.cells.generate import CellGenerator, GenerateOptions
    from export.cells.trajectories import random_trajectory

    rng = np.random.default_rng(seed)
    tiles = []
    opts = GenerateOptions(width=size_px, height=size_px, segmentation=False)
    with CellGenerator(opts) as gen:
        for i in range(count):
            split = SPLITS[i % len(SPLITS)]
            cell = sample_cell(rng, split, f"preview-{i:02d}")
            q = random_trajectory(rng, robot_spec(cell.robot), 2)
            scene = gen.scene(cell.robot)
            scene.apply_cell(cell)
            rgb, _, _ = scene.render(q[0], segmentation=False)
            tiles.append((rgb, f"{cell.robot}/{split}"))
    rows = []
    labels = []
    for r in range(0, count, columns):
        chunk = tiles[r:r + columns]
        rows.append(np.stack([t for t, _ in chunk]))
        labels.append([name for _, name in chunk])
    return contact_sheet(rows, tile_labels=labels, scale=scale)


def episodes_sheet(episodes: dict[str, Episode], max_columns: int = 24,
                   scale: int = 2) -> np.ndarray:
    """One row per episode (frames subsampled to at most ``max_columns``), labelled.

    Calibration episodes get one label per DoF segment (the DoF name and its sweep sign).
    """
    rows, row_labels, tile_labels = [], [], []
    for name, ep in episodes.items():
        t = ep.num_frames
        idx = np.unique(np.linspace(0, t - 1, min(t, max_columns)).round().astype(int))
        rows.append(ep.frames[idx])
        m = ep.metadata
        row_labels.append(f"{name} {m.robot} {m.kind}")
        labels = [""] * len(idx)
        for s in m.segments:
            j = int(np.argmin(np.abs(idx - s.start)))
            if j > 0:
                labels[j] = f"{s.dof}{'+' if s.amplitude > 0 else '-'}"
        tile_labels.append(labels)
    return contact_sheet(rows, row_labels=row_labels, tile_labels=tile_labels, scale=scale)


def _is_chain_calibration(path: Path) -> bool:
    """Whether ``path`` is a chain calibration file (``model read-chain``; its arrays
    ``header_json`` and ``axes``), not an episode."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            keys = set(npz.files)
    except (OSError, ValueError):
        return False
    return {"header_json", "axes"} <= keys and "metadata_json" not in keys


def load_cell_dir(path: Path) -> dict[str, Episode]:
    """Load every ``*.npz`` episode in a cell folder (or one file), calibration first.

    In a folder, chain calibration files (``chain.npz``, from ``model read-chain``) are
    not episodes and are left out; a chain calibration given as the file is refused by
    :func:`edge.episode.load_episode`.

    Raises:
        edge.errors.EpisodeError: a missing path, or an episode file that does not load.
    """
    from edge.episode import load_episode
    from edge.errors import EpisodeError

    if not path.exists():
        raise EpisodeError("no such episode file or cell folder", path=path)
    files = [path] if path.is_file() else sorted(q for q in path.glob("*.npz")
                                                 if not _is_chain_calibration(q))
    files.sort(key=lambda p: (p.stem != "calibration", p.name))
    return {p.stem: load_episode(p) for p in files}



