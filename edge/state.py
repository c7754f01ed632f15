"""The device state root: one folder holding bundle slots, the calibration cache and the
engine cache.

Resolution order: ``SYNCEDGE_HOME`` if set; ``/var/lib/syncedge`` if it exists (a flashed
device); otherwise ``$XDG_DATA_HOME/syncedge`` (default ``~/.local/share/syncedge``).

Layout::

    ROOT/bundles/{a,b,active,keys/}    device bundle slots and trusted public keys
    ROOT/calibration/                  calibration cache (SQLite index, blobs, entry records)
    ROOT/engines/                      TensorRT engine cache
    ROOT/checks/<episode name>/        'calibrate check' reports written without --out
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["check_dir", "state_root", "subdir"]

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


def check_dir(episode: str | os.PathLike[str]) -> Path:
    """Where ``calibrate check`` (without ``--out``) and ``calibrate store --chain`` write
    their sheets for ``episode``: ``STATE_ROOT/checks/<episode name without .npz>`` (never
    beside the episode, which may sit in a read-only or shared folder); not created."""
    return state_root() / "checks" / Path(episode).name.removesuffix(".npz")


def subdir(name: str) -> Path:
    """``state_root() / name``, created if missing."""
    p = state_root() / name
    p.mkdir(parents=True, exist_ok=True)
    return p
