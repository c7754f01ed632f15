"""Calibration cache: every corruption mode is quarantined, reported and never used."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from edge.cache.store import CalibrationCache
from edge.cache.values import CacheCorruptError, CacheIndexError
from tests.cache_helpers import blob_file, context, key, put


@pytest.fixture
def cache(tmp_path: Path):
    with CalibrationCache(tmp_path / "cal", touch_interval_s=0.0) as c:
        yield c


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-7])


def _delete(path: Path) -> None:
    path.unlink()


DAMAGE = {"flipped": (_flip, "bytes altered"), "truncated": (_truncate, "truncated"),
          "missing": (_delete, "is missing")}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("role", ["episode", "report", "reference"])
def test_damaged_blob_removes_entry(cache: CalibrationCache, role: str, damage: str) -> None:
    k = key()
    info = put(cache, k).info
    sha = getattr(info, f"{role}_sha256")
    path = blob_file(cache, sha)
    hurt, words = DAMAGE[damage]
    hurt(path)
    with pytest.raises(CacheCorruptError) as err:
        cache.get(k)
    msg = str(err.value)
    assert str(k) in msg and str(path) in msg and words in msg and role in msg
    assert "entry was removed" in msg
    assert err.value.key == k and err.value.role == role and err.value.file == path
    assert cache.get(k) is None  # never used afterwards
    [rec] = cache.quarantine()
    assert rec.key == k and rec.role == role and rec.sha256 == sha and words in rec.reason
    if damage == "missing":
        assert rec.file == ""
    else:
        assert Path(rec.file).parent == cache.root / "quarantine" and not path.exists()
    assert cache.gc(grace_s=0).quarantine == (rec,)


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_context_is_dropped_keeping_episode(cache: CalibrationCache, damage: str) -> None:
    k = key()
    info = put(cache, k).info
    path = blob_file(cache, info.context_sha256)
    DAMAGE[damage][0](path)
    with pytest.raises(CacheCorruptError, match="re-encode it from the cached calibration episode .*calibrate store --cell") as e:
        cache.get_context(k.cell_id, k.camera_id, k.robot_id, k.model_sha256)
    assert str(path) in str(e.value) and e.value.role == "context"
    assert cache.get_context(k.cell_id, k.camera_id, k.robot_id, k.model_sha256) is None
    entry = cache.get(k)
    assert entry.context is None and entry.info.flags == ("no-context",)
    assert [r.role for r in cache.quarantine()] == ["context"]


def test_damaged_context_detected_by_full_get(cache: CalibrationCache) -> None:
    k = key()
    info = put(cache, k).info
    _flip(blob_file(cache, info.context_sha256))
    with pytest.raises(CacheCorruptError, match="context blob failed verification"):
        cache.get(k)
    assert cache.get(k).context is None


def test_shared_episode_blob_quarantines_every_entry_using_it(cache: CalibrationCache) -> None:
    k1, k2 = key(model="m1"), key(model="m2")
    put(cache, k1)
    info = put(cache, k2).info
    _flip(blob_file(cache, info.episode_sha256))
    with pytest.raises(CacheCorruptError):
        cache.get(k1)
    assert cache.list() == []
    assert sorted(r.key.model_sha256 for r in cache.quarantine()) == sorted(
        [k1.model_sha256, k2.model_sha256])


def test_wrong_shape_recorded_for_context(cache: CalibrationCache) -> None:
    k = key()
    put(cache, k)
    with sqlite3.connect(cache.root / "index.sqlite3") as db:
        db.execute("UPDATE entries SET context_shape = '[3, 4, 4, 5]'")
    with pytest.raises(CacheCorruptError, match=r"expected float32 \(3, 4, 4, 5\), found "
                                                r"float32 \(3, 4, 4, 4\)"):
        cache.get_context(k.cell_id, k.camera_id, k.robot_id, k.model_sha256)


@pytest.mark.parametrize("column, value, words", [
    ("episode_sha256", "not-a-sha", "episode_sha256: expected 64 hex digits, found 'not-a-sha'"),
    ("context_shape", "{oops", "context_shape: expected a JSON list of sizes"),
    ("reference_shape", "[8, 10]", "reference_shape: expected [H, W, 3], found [8, 10]"),
    ("forced", 7, "forced: expected 0 or 1, found 7"),
    ("created_s", None, "created_s: expected a time in seconds, found None"),
    ("model_sha256", "XYZ", "model_sha256: expected 64 lowercase hex digits"),
])
def test_corrupt_index_row_quarantined(cache: CalibrationCache, column: str, value: object,
                                       words: str) -> None:
    k = key()
    put(cache, k)
    good = key(cell="cell-2")
    put(cache, good, seed=1)
    with sqlite3.connect(cache.root / "index.sqlite3") as db:
        db.execute(f"UPDATE entries SET {column} = ? WHERE cell_id = 'cell-1'", (value,))
    if column != "model_sha256":
        with pytest.raises(CacheCorruptError, match="row was quarantined") as err:
            cache.get(k)
        assert words in str(err.value) and "index.sqlite3" in str(err.value)
        assert err.value.role == "row"
        assert cache.get(k) is None
    else:
        assert [i.key for i in cache.list()] == [good]  # listed rows skip and quarantine it
    [rec] = cache.quarantine()
    assert rec.role == "row" and words in rec.reason and "cell-1" in rec.row_json
    assert cache.get(good) is not None
    rep = cache.gc(grace_s=0)  # the quarantined row's blobs are now unreferenced
    assert len(rep.removed_blobs) == 3  # its episode, context and reference (report shared)


def test_unreadable_index_is_a_clear_error(tmp_path: Path) -> None:
    root = tmp_path / "c"
    root.mkdir()
    (root / "index.sqlite3").write_bytes(b"this is not a database" * 100)
    with pytest.raises(CacheIndexError, match="index.sqlite3: expected a calibration-cache "
                                              "index.*'syncedge cache rebuild --root "):
        CalibrationCache(root)


def test_newer_index_schema_refused(tmp_path: Path) -> None:
    CalibrationCache(tmp_path / "c").close()
    with sqlite3.connect(tmp_path / "c" / "index.sqlite3") as db:
        db.execute("UPDATE meta SET value = '99' WHERE name = 'schema_version'")
    with pytest.raises(CacheIndexError, match="schema version 99 is newer.*upgrade syncedge"):
        CalibrationCache(tmp_path / "c")


def test_put_repairs_a_corrupt_shared_blob(cache: CalibrationCache) -> None:
    k1, k2 = key(cell="a"), key(cell="b")
    ctx = context(5)
    info = put(cache, k1, ctx=ctx).info
    _flip(blob_file(cache, info.context_sha256))
    put(cache, k2, ctx=ctx)  # same context bytes: the damaged file is rewritten, not reused
    got = cache.get_context(k1.cell_id, k1.camera_id, k1.robot_id, k1.model_sha256)
    assert np.array_equal(got, ctx)


def test_rebuild_keeps_a_healthy_index_in_place(tmp_path: Path, capsys) -> None:
    """A sound index (an empty one too) is rebuilt in place: no file is moved to
    quarantine and its quarantine records stay; an entry whose blob is damaged is left out
    and recorded; only a damaged index file is replaced."""
    from edge.cache.rebuild import rebuild_index
    from edge.commands import cache as cache_cmd
    from edge.commands.common import run_command

    empty = tmp_path / "empty"
    CalibrationCache(empty).close()
    rep = rebuild_index(empty)
    assert rep.in_place and rep.old_index is None and rep.restored == ()
    assert list((empty / "quarantine").iterdir()) == []
    root = tmp_path / "cal"
    k1, k2, k3 = key(model="m1"), key(model="m2"), key(cell="cell-2")
    with CalibrationCache(root) as c:
        for i, k in enumerate((k1, k2, k3)):
            put(c, k, seed=i)
        _flip(blob_file(c, c.info(k3).context_sha256))
        with pytest.raises(CacheCorruptError):  # one quarantine record before the rebuild
            c.get_context(k3.cell_id, k3.camera_id, k3.robot_id, k3.model_sha256)
        _flip(blob_file(c, c.info(k2).reference_sha256))
    moved_before = sorted(p.name for p in (root / "quarantine").iterdir())
    assert run_command("cache", cache_cmd.register, ["rebuild", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "restored 2 entries" in out and "rebuilt in place" in out
    assert f"skipped {k2.short}: reference blob failed verification" in out
    assert "moved the old index" not in out
    assert sorted(p.name for p in (root / "quarantine").iterdir()) == moved_before
    assert not list((root / "quarantine").glob("index-*"))
    with CalibrationCache(root) as c:
        assert [i.key for i in c.list()] == sorted([k1, k3])
        np.testing.assert_array_equal(c.get(k1).context, context(0))
        assert c.get(k3).context is None
        records = c.quarantine()
    assert [r.role for r in records] == ["context", "row"]  # the earlier one kept
    assert records[1].key == k2 and "left out by 'syncedge cache rebuild'" in records[1].reason
    # a damaged index file is still moved out of the way
    (root / "index.sqlite3").write_bytes(b"this is not a database" * 100)
    for side in ("index.sqlite3-wal", "index.sqlite3-shm"):
        (root / side).unlink(missing_ok=True)
    rep = rebuild_index(root)
    assert not rep.in_place and rep.old_index and "not a database" in rep.damage
    assert Path(rep.old_index).is_file() and {k.short for k in rep.restored} == \
        {k1.short, k3.short}
