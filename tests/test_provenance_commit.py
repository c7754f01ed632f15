"""``export.provenance.git_commit``: the commit of the code that runs, in a clone and in an
installed copy, never that of another repository the copy happens to sit in."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

from export.provenance import BUILD_COMMIT_FILE, git_commit, source_tree_commit

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(cwd: Path, *argv: str) -> str:
    return subprocess.run(["git", *argv], cwd=cwd, capture_output=True, text=True,
                          check=True).stdout.strip()


def _repo(path: Path) -> str:
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q")
    (path / "f.txt").write_text("x")
    _git(path, "add", "f.txt")
    _git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c")
    return _git(path, "rev-parse", "HEAD")


def _installed_copy(site: Path, recorded: str | None):
    """``export/provenance.py`` as an installed package under ``site``, with the commit
    file ``setup.py`` writes (or none); returns its ``git_commit``."""
    pkg = site / "export"
    pkg.mkdir(parents=True)
    shutil.copy(ROOT / "export" / "provenance.py", pkg / "provenance.py")
    if recorded is not None:
        (pkg / BUILD_COMMIT_FILE).write_text(recorded + "\n")
    spec = importlib.util.spec_from_file_location("provenance_copy", pkg / "provenance.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.git_commit


def test_the_source_tree_names_its_own_commit() -> None:
    if source_tree_commit(ROOT) is None:
        pytest.skip("not run from a git clone")
    assert git_commit().split("-")[0] == _git(ROOT, "rev-parse", "HEAD")


def test_an_installed_copy_inside_another_repository_names_the_recorded_commit(
        tmp_path: Path) -> None:
    other = _repo(tmp_path / "project")
    site = tmp_path / "project" / ".venv" / "site-packages"
    assert _installed_copy(site, "abc123")() == "abc123"  # not the project's commit
    assert source_tree_commit(site) is None
    assert source_tree_commit(tmp_path / "project") == other


def test_an_installed_copy_without_a_record_says_unknown(tmp_path: Path) -> None:
    assert _installed_copy(tmp_path / "site", None)() == "unknown"


def test_setup_py_records_the_commit_in_the_built_package(tmp_path: Path) -> None:
    import sys

    if source_tree_commit(ROOT) is None:
        pytest.skip("not run from a git clone")
    subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib",
                    str(tmp_path)], cwd=ROOT, capture_output=True, text=True, check=True)
    recorded = (tmp_path / "export" / BUILD_COMMIT_FILE).read_text().strip()
    assert recorded == source_tree_commit(ROOT)
    assert (tmp_path / "export" / "provenance.py").is_file()
