"""Provenance helpers shared by the export commands (no torch)."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["BUILD_COMMIT_FILE", "git_commit", "source_tree_commit"]


#: The file ``setup.py`` writes into an installed (not editable) package: the commit it was
#: built from, as :func:`git_commit` gives it in the source tree.
BUILD_COMMIT_FILE = "_build_commit.txt"


def source_tree_commit(root: Path) -> str | None:
    """The git commit of the source tree ``root`` (with ``-dirty`` for uncommitted changes
    to tracked files), or None when ``root`` is not the top of a git work tree (an
    installed package under some other repository's folder is not ours to name)."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=root,
                             capture_output=True, text=True, check=True).stdout.strip()
        if not top or Path(top).resolve() != root.resolve():
            return None
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return rev + ("-dirty" if dirty else "")


def git_commit() -> str:
    """The commit of the code that runs: the source tree's (a clone or an editable
    install, with ``-dirty``), else the one recorded when the package was built
    (:data:`BUILD_COMMIT_FILE`), else ``"unknown"``."""
    here = Path(__file__).resolve().parent.parent
    if (here / "setup.py").is_file():
        rev = source_tree_commit(here)
        if rev is not None:
            return rev
    recorded = Path(__file__).with_name(BUILD_COMMIT_FILE)
    try:
        return recorded.read_text(encoding="utf-8").strip() or "unknown"
    except OSError:
        return "unknown"
