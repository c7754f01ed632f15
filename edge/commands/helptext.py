"""Command help built from module docstrings (no reStructuredText markup on the terminal)."""

from __future__ import annotations

import re

__all__ = ["STATE_ROOT_HELP", "plain"]

STATE_ROOT_HELP = ("STATE_ROOT is $SYNCEDGE_HOME if set, else /var/lib/syncedge on a flashed "
                   "device, else $XDG_DATA_HOME/syncedge (~/.local/share/syncedge); it holds "
                   "bundles/, calibration/, engines/ and checks/.")


def plain(doc: str | None) -> str:
    """``doc`` (a module docstring) without reStructuredText roles and literal quotes (``x`` -> x)."""
    return re.sub(r":\w+:`~?([^`]*)`", r"\1", doc or "").replace("``", "").strip()
