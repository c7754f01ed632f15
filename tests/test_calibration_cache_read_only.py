"""A calibration cache in a folder this process cannot write (a read-only mount, or its
permissions): reads work, writes are refused naming the folder, the index is left as it
is."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edge.cache import index as ix
from edge.cache.store import CalibrationCache
from edge.cache.values import CacheReadOnlyError
from edge.commands import cache as cache_cmd
from edge.commands.common import default_context_source, run_command
from tests.cache_helpers import blob_file, context, key, put

READ_ONLY = r"calibration cache folder .* is read-only"


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` with the sha256 of its bytes."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _filled(root: Path) -> list:
    k1, k2 = key(model="m1"), key(model="m2")
    with CalibrationCache(root) as c:
        put(c, k1, seed=1)
        put(c, k2, seed=2)
    return [k1, k2]


@pytest.fixture(params=["permissions", "probe"])
def read_only(request, tmp_path: Path, monkeypatch) -> Iterator[Path]:
    """A filled cache whose folder cannot be written: by its permissions (a real check,
    which root's privileges make ineffective), or by the writability probe reporting a
    read-only mount."""
    root = tmp_path / "cal"
    _filled(root)
    if request.param == "probe":
        monkeypatch.setattr(ix, "folder_writable", lambda folder: False)
        yield root
        return
    modes = {p: p.stat().st_mode for p in [root, *root.rglob("*")]}
    for p in modes:
        p.chmod(stat.S_IMODE(modes[p]) & ~0o222)
    try:
        if os.access(root, os.W_OK):
            pytest.skip("this process writes any folder (root): permissions cannot make "
                        "one read-only")
        yield root
    finally:
        for p, mode in modes.items():
            p.chmod(stat.S_IMODE(mode))


def _cache_cli(*argv: str) -> int:
    return run_command("cache", cache_cmd.register, list(argv))


def test_a_read_only_cache_reads_and_refuses_writes_by_name(read_only: Path,
                                                             capsys) -> None:
    root = read_only
    k1, k2 = key(model="m1"), key(model="m2")
    before = _tree(root)
    with CalibrationCache(root, touch_interval_s=0.0) as c:
        assert c.read_only
        assert [i.key for i in c.list()] == sorted([k1, k2])
        entry = c.get(k1)
        np.testing.assert_array_equal(entry.context, context(1))
        np.testing.assert_array_equal(c.get_context(k2.cell_id, k2.camera_id, k2.robot_id,
                                                    k2.model_sha256), context(2))
        for write in (lambda: put(c, key(model="m3")), lambda: c.remove(k1),
                      lambda: c.gc(grace_s=0), lambda: c.import_(root / "x.zip")):
            with pytest.raises(CacheReadOnlyError, match=READ_ONLY) as err:
                write()
            assert str(root) in str(err.value) and "--cache-dir DIR" in str(err.value)
        assert c.quarantine() == []
    # simulate --cell reads its context through the same source
    src = default_context_source(str(root))
    np.testing.assert_array_equal(src.get_context(k1.cell_id, k1.camera_id, k1.robot_id,
                                                  k1.model_sha256), context(1))
    src.close()
    assert _cache_cli("list", "--root", str(root)) == 0
    assert "2 entries" in capsys.readouterr().out
    assert _cache_cli("show", "--root", str(root), f"{k1.cell_id}/{k1.camera_id}/"
                      f"{k1.robot_id}/{k1.model_sha256[:8]}") == 0
    assert "checksums  verified" in capsys.readouterr().out
    for verb in (["remove", str(k1)], ["gc"], ["rebuild"]):
        assert _cache_cli(verb[0], "--root", str(root), *verb[1:]) == 2
        err = capsys.readouterr().err
        assert "is read-only" in err and str(root) in err and "unreadable" not in err
        assert len(err.strip().splitlines()) == 1
    assert _tree(root) == before  # the index was neither changed nor quarantined


def test_a_damaged_blob_in_a_read_only_cache_is_reported_and_left_in_place(
        tmp_path: Path, monkeypatch) -> None:
    from edge.cache.values import CacheCorruptError

    root = tmp_path / "cal"
    k1, _ = _filled(root)
    with CalibrationCache(root) as c:
        path = blob_file(c, c.info(k1).context_sha256)
    path.write_bytes(b"junk")
    monkeypatch.setattr(ix, "folder_writable", lambda folder: False)
    before = _tree(root)
    with CalibrationCache(root) as c:
        with pytest.raises(CacheCorruptError, match="is read-only, so nothing was moved"):
            c.get_context(k1.cell_id, k1.camera_id, k1.robot_id, k1.model_sha256)
    assert _tree(root) == before


def test_a_read_only_cache_sees_entries_not_yet_merged_from_the_wal(
        tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "cal"
    writer = CalibrationCache(root)
    try:
        k = key(model="m9")
        put(writer, k, seed=9)  # committed, still in index.sqlite3-wal while it is open
        assert (root / "index.sqlite3-wal").stat().st_size > 0
        monkeypatch.setattr(ix, "folder_writable", lambda folder: False)
        with CalibrationCache(root) as reader:
            assert reader.read_only and [i.key for i in reader.list()] == [k]
    finally:
        writer.close()


def test_a_read_only_folder_without_an_index_reads_as_empty(tmp_path: Path,
                                                            monkeypatch) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    monkeypatch.setattr(ix, "folder_writable", lambda folder: False)
    with CalibrationCache(root) as c:
        assert c.list() == [] and c.get(key()) is None
    assert list(root.iterdir()) == []


def test_calibrate_store_into_a_read_only_cache_is_refused_before_any_work(
        read_only: Path, tmp_path: Path, capsys) -> None:
    from edge.episode import save_episode
    from tests.calib_cell_helpers import cli, model_dir, sweep_episode

    before = _tree(read_only)
    cal = save_episode(sweep_episode(), tmp_path / "cal.npz")
    for argv in ([str(cal)], ["--cell", "cell-1"]):
        assert cli("store", *argv, "--model", str(model_dir()), "--cache-dir",
                   str(read_only), "--threads", "1") == 2
        err = capsys.readouterr().err
        assert f"calibration cache folder {read_only} is read-only" in err
        assert "storing a calibration" in err and len(err.strip().splitlines()) == 1
    assert _tree(read_only) == before
