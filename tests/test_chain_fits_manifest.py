"""The kept chain reads of the evaluations (bench/chain_fits/*) match their manifests, and
the manifest check names a changed, missing or unlisted file."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import chain_fits_manifest as cfm  # noqa: E402

FOLDERS = sorted(p for p in (ROOT / "bench" / "chain_fits").rglob("manifest.json"))


@pytest.mark.parametrize("manifest", FOLDERS, ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_committed_chain_reads_match_their_manifest(manifest: Path) -> None:
    assert cfm.check(manifest.parent) == []


def test_the_check_names_changed_missing_and_unlisted_files(tmp_path: Path) -> None:
    for name in ("a.npz", "b.npz"):
        (tmp_path / name).write_bytes(name.encode())
    assert cfm.main([str(tmp_path), "--command", "make a and b"]) == 0
    assert cfm.check(tmp_path) == []
    (tmp_path / "a.npz").write_bytes(b"changed")
    (tmp_path / "b.npz").unlink()
    (tmp_path / "c.npz").write_bytes(b"new")
    problems = cfm.check(tmp_path)
    assert [p.split(": ", 1)[1] for p in problems] == [
        "sha256 differs from the manifest's", "listed in the manifest but missing",
        "not in the manifest"]
    assert cfm.main([str(tmp_path), "--check"]) == 1
    # writing again keeps the earlier run and adds this one
    assert cfm.main([str(tmp_path), "--command", "again"]) == 0
    import json

    runs = json.loads((tmp_path / "manifest.json").read_text())["runs"]
    assert [r["command"] for r in runs] == ["make a and b", "again"]
