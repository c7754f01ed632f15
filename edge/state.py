"""The device state root: one folder holding bundle slots, the calibration cache and the
engine cache.

Resolution order: ``SYNCEDGE_HOME`` if set; ``/var/lib/syncedge`` if it exists (a flashed
device); otherwise ``$XDG_DATA_HOME/syncedge`` (default ``~/.local/share/syncedge``).

Layout::

    ROOT/bundles/{a,b,active,keys/}    device bundle slots and trusted public keys
    ROOT/calibration/                  calibration cache (SQLite index, blobs, entry records)
    ROOT/engines/                      TensorRT engine cache
    ROOT/checks/<episode name>/        'calibrate check' reports written without --out
                                       (<episode name>-<hash>/ for another file of that name)
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["check_dir", "claim_check_dir", "state_root", "subdir"]

#: The file in a checks folder naming the episode (resolved path) whose sheets it holds.
CHECK_OWNER = "EPISODE"

DEVICE_ROOT = Path("/var/lib/syncedge")


def state_root() -> Path:
    """The state root folder (not created)."""
    env = os.environ.get("SYNCEDGE_HOME")
    if env:
        return Path(env).expanduser()
    if DEVICE_ROOT.is_dir():
        return DEVICE_ROOT
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "syncedge"


def _owner(episode: str | os.PathLike[str]) -> str:
    return str(Path(episode).expanduser().resolve())


def check_dir(episode: str | os.PathLike[str]) -> Path:
    """Where ``calibrate check`` (without ``--out``) and ``calibrate store --chain`` write
    their sheets for ``episode``: ``STATE_ROOT/checks/<episode name without .npz>`` (never
    beside the episode, which may sit in a read-only or shared folder); not created.

    Two files of one name (``cell_a/cal.npz``, ``cell_b/cal.npz``) must not overwrite each
    other's sheets: a folder claimed (:func:`claim_check_dir`) by another file goes to
    ``<name>-<first 8 hex digits of the sha256 of the episode's resolved path>`` instead.
    """
    name = Path(episode).name.removesuffix(".npz")
    base = state_root() / "checks" / name
    try:
        owner = (base / CHECK_OWNER).read_text(encoding="utf-8").strip()
    except OSError:  # free, or written before folders were claimed
        return base
    me = _owner(episode)
    if owner == me:
        return base
    return base.with_name(f"{name}-{hashlib.sha256(me.encode()).hexdigest()[:8]}")


def claim_check_dir(folder: str | os.PathLike[str], episode: str | os.PathLike[str]) -> None:
    """Record in ``folder`` (from :func:`check_dir`, after writing into it) that it holds the
    sheets of ``episode``; a folder already claimed is left as it is."""
    marker = Path(folder) / CHECK_OWNER
    if not marker.exists():
        marker.write_text(_owner(episode) + "\n", encoding="utf-8")


def subdir(name: str) -> Path:
    """``state_root() / name``, created if missing."""
    p = state_root() / name
    p.mkdir(parents=True, exist_ok=True)
    return p
