"""Calibration cache: round trip, keys, deduplication, validation, LRU eviction, gc."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from edge.cache.store import CalibrationCache
from edge.cache.values import CacheKey, CacheKeyError, CacheValueError
from edge.episode import save_episode
from edge.errors import EdgeError
from tests.cache_helpers import blob_file, calibration, context, key, model_sha, put, report


@pytest.fixture
def cache(tmp_path: Path):
    with CalibrationCache(tmp_path / "cal", touch_interval_s=0.0) as c:
        yield c


def test_round_trip_returns_every_part(cache: CalibrationCache) -> None:
    k = key()
    ep = calibration(k)
    ctx = context(1)
    cache.put(k, ep, ctx, report(), ep.frames[0])
    e = cache.get(k)
    assert e is not None and e.key == k
    assert e.context.dtype == np.float32 and np.array_equal(e.context, ctx)
    assert np.array_equal(e.episode.frames, ep.frames)
    assert e.episode.metadata == ep.metadata
    assert e.report == report()
    assert e.reference_frame.dtype == np.uint8 and np.array_equal(e.reference_frame, ep.frames[0])
    assert e.info.context_shape == ctx.shape and e.info.reference_shape == (8, 10, 3)
    assert not e.info.forced and e.info.flags == ()
    got = cache.get_context(k.cell_id, k.camera_id, k.robot_id, k.model_sha256)
    assert got is not None and np.array_equal(got, ctx)
    layout = sorted(p.name for p in cache.root.iterdir())
    assert layout[:5] == ["blobs", "entries", "index.sqlite3", "index.sqlite3-shm",
                          "index.sqlite3-wal"]
    assert len(list((cache.root / "entries").glob("*.json"))) == 1  # the entry's record
    sha = e.info.context_sha256
    assert blob_file(cache, sha) == cache.root / "blobs" / sha[:2] / sha[2:]


def test_reopen_sees_entries_and_episode_path_accepted(tmp_path: Path) -> None:
    k = key()
    path = save_episode(calibration(k), tmp_path / "calibration.npz")
    with CalibrationCache(tmp_path / "c") as c:
        c.put(k, path, context(), report(), calibration(k).frames[0])
    with CalibrationCache(tmp_path / "c") as c:
        assert c.get(k) is not None
        assert [i.key for i in c.list()] == [k]


def test_missing_key_gives_none(cache: CalibrationCache) -> None:
    k = key()
    assert cache.get(k) is None and cache.info(k) is None
    assert cache.get_context(k.cell_id, k.camera_id, k.robot_id, k.model_sha256) is None
    assert not cache.remove(k)


def test_keys_are_separated_by_model_and_episode_stored_once(cache: CalibrationCache) -> None:
    k1, k2 = key(model="m1"), key(model="m2")
    ep = calibration(k1)
    cache.put(k1, ep, context(1), report(), ep.frames[0])
    cache.put(k2, ep, context(2), report(), ep.frames[0])
    c1 = cache.get_context(k1.cell_id, k1.camera_id, k1.robot_id, k1.model_sha256)
    c2 = cache.get_context(k2.cell_id, k2.camera_id, k2.robot_id, k2.model_sha256)
    assert np.array_equal(c1, context(1)) and np.array_equal(c2, context(2))
    i1, i2 = cache.info(k1), cache.info(k2)
    assert i1.episode_sha256 == i2.episode_sha256  # one episode blob for both models
    assert i1.context_sha256 != i2.context_sha256
    assert cache.get_context(k1.cell_id, k1.camera_id, k1.robot_id, model_sha("m3")) is None
    # removing one model's entry keeps the shared episode blob
    assert cache.remove(k1)
    assert blob_file(cache, i2.episode_sha256).is_file()
    assert not blob_file(cache, i1.context_sha256).exists()
    assert cache.get(k2) is not None


def test_put_replaces_entry_and_frees_old_blobs(cache: CalibrationCache) -> None:
    k = key()
    old = put(cache, k, seed=1).info
    new = put(cache, k, seed=2).info
    assert cache.list() == [cache.info(k)]
    assert not blob_file(cache, old.context_sha256).exists()
    assert not blob_file(cache, old.episode_sha256).exists()
    assert np.array_equal(cache.get(k).context, context(2))
    assert new.created_s >= old.created_s


def test_forced_entry_records_reason(cache: CalibrationCache) -> None:
    k = key()
    with pytest.raises(CacheValueError, match="forced=True needs a forced_reason"):
        put(cache, k, forced=True)
    assert cache.info(k) is None
    put(cache, k, forced=True, forced_reason="j2 swept 40% of the plan")
    info = cache.info(k)
    assert info.forced and info.forced_reason == "j2 swept 40% of the plan"
    assert info.flags == ("forced",)


def test_entry_without_context(cache: CalibrationCache) -> None:
    k = key()
    put(cache, k, ctx=None)
    assert cache.get(k).context is None
    assert cache.info(k).flags == ("no-context",)
    assert cache.get_context(k.cell_id, k.camera_id, k.robot_id, k.model_sha256) is None


@pytest.mark.parametrize("change, match", [
    (dict(context=np.zeros((2, 2), np.float64)), "expected a float32 array, found float64"),
    (dict(context=np.full((2,), np.nan, np.float32)), "expected finite values"),
    (dict(context=np.zeros((0,), np.float32)), "non-empty"),
    (dict(reference_frame=np.zeros((8, 10), np.uint8)), r"expected uint8 \[H, W, 3\]"),
    (dict(reference_frame=np.zeros((8, 10, 3), np.float32)), r"expected uint8 \[H, W, 3\]"),
    (dict(report=[1, 2]), "expected a JSON object"),
    (dict(report={"x": float("nan")}), "expected strict JSON"),
])
def test_put_refuses_bad_values(cache: CalibrationCache, change: dict, match: str) -> None:
    k = key()
    ep = calibration(k)
    args = dict(episode=ep, context=context(), report=report(), reference_frame=ep.frames[0])
    args.update(change)
    with pytest.raises(CacheValueError, match=match) as info:
        cache.put(k, **args)
    assert "cell-1/cam-1/robot-1/" in str(info.value)
    assert cache.list() == []


def test_put_refuses_episode_of_other_cell_or_kind(cache: CalibrationCache) -> None:
    k = key()
    other = calibration(key(cell="cell-2"))
    with pytest.raises(CacheValueError, match="expected metadata.cell_id 'cell-1'.*found 'cell-2'"):
        cache.put(k, other, context(), report(), other.frames[0])
    import dataclasses

    motion = calibration(k)
    motion = dataclasses.replace(motion, metadata=dataclasses.replace(motion.metadata,
                                                                      kind="motion"))
    with pytest.raises(CacheValueError, match="expected metadata.kind 'calibration'"):
        cache.put(k, motion, context(), report(), motion.frames[0])


def test_key_validation_and_find(cache: CalibrationCache) -> None:
    with pytest.raises(CacheKeyError, match="model_sha256: expected 64 lowercase hex"):
        CacheKey("c", "cam", "r", "ABC")
    with pytest.raises(CacheKeyError, match="without '/'"):
        CacheKey("a/b", "cam", "r", model_sha("m"))
    with pytest.raises(CacheKeyError, match="non-empty"):
        CacheKey("", "cam", "r", model_sha("m"))
    k = key()
    put(cache, k)
    assert cache.find(f"cell-1/cam-1/robot-1/{k.model_sha256[:6]}") == k
    assert cache.find(str(k)) == k
    with pytest.raises(CacheKeyError, match="found none"):
        cache.find("cell-9/cam-1/robot-1/abcd")
    with pytest.raises(CacheKeyError, match="expected CELL/CAMERA/ROBOT/MODEL_SHA256"):
        cache.find("cell-1/cam-1")
    assert isinstance(CacheKeyError("x"), EdgeError)


def test_ambiguous_prefix_lists_candidates(cache: CalibrationCache) -> None:
    a = CacheKey("cell-1", "cam-1", "robot-1", "abcd" + "0" * 60)
    b = CacheKey("cell-1", "cam-1", "robot-1", "abcd" + "1" * 60)
    put(cache, a)
    put(cache, b)
    with pytest.raises(CacheKeyError, match="expected one entry, found 2"):
        cache.find("cell-1/cam-1/robot-1/abcd")


def test_size_cap_evicts_lru_contexts_only(tmp_path: Path) -> None:
    keys = [key(cell=f"cell-{i}") for i in range(4)]
    shape = (8, 16, 8, 8)  # 32 KiB contexts, much larger than the tiny episodes
    with CalibrationCache(tmp_path / "c", touch_interval_s=0.0) as probe:
        infos = [put(probe, k, seed=i, ctx=context(i, shape)).info for i, k in enumerate(keys)]
    fixed = sum(i.total_bytes - i.context_bytes for i in infos)
    cap = fixed + int(3.5 * infos[0].context_bytes)  # room for three contexts, not four
    with CalibrationCache(tmp_path / "capped", size_cap_bytes=cap, touch_interval_s=0.0) as c:
        for i, k in enumerate(keys[:3]):
            put(c, k, seed=i, ctx=context(i, shape))
            time.sleep(0.01)
        # use entry 0 so entry 1 becomes the least recently used
        k0 = keys[0]
        assert c.get_context(k0.cell_id, k0.camera_id, k0.robot_id, k0.model_sha256) is not None
        put(c, keys[3], seed=3, ctx=context(3, shape))
        flags = {i.key.cell_id: i.flags for i in c.list()}
        assert flags == {"cell-0": (), "cell-1": ("evicted",), "cell-2": (), "cell-3": ()}
        assert c.total_bytes() <= cap
        k1 = keys[1]
        assert c.get_context(k1.cell_id, k1.camera_id, k1.robot_id, k1.model_sha256) is None
        e1 = c.get(k1)  # the episode, report and reference frame stay
        assert e1.context is None and e1.episode.num_frames == 9 and e1.report == report()
        assert not blob_file(c, infos[1].context_sha256).exists()
        # storing the context again (after re-encoding) brings it back
        c.put(k1, e1.episode, context(1, shape), e1.report, e1.reference_frame)
        assert c.get_context(k1.cell_id, k1.camera_id, k1.robot_id, k1.model_sha256) is not None


def test_tiny_cap_never_evicts_episodes_or_new_context(tmp_path: Path) -> None:
    with CalibrationCache(tmp_path / "c", size_cap_bytes=1, touch_interval_s=0.0) as c:
        a, b = key(cell="a"), key(cell="b")
        put(c, a)
        put(c, b)
        assert c.info(a).flags == ("evicted",) and c.info(b).flags == ()
        assert c.get(a).episode is not None


def test_gc_removes_orphans_and_old_temporaries(cache: CalibrationCache) -> None:
    k = key()
    put(cache, k)
    orphan, _ = cache.blobs.write(b"left over by an interrupted put")
    temp = cache.blobs.blob_dir / "ab" / ".cdef.123.tmp"
    temp.parent.mkdir(exist_ok=True)
    temp.write_bytes(b"half")
    rep = cache.gc()  # default grace: everything is too young to touch
    assert rep.removed_blobs == () and temp.exists()
    old = time.time() - 7200
    os.utime(temp, (old, old))
    os.utime(blob_file(cache, orphan), (old, old))
    rep = cache.gc()
    assert rep.removed_blobs == (orphan,) and rep.freed_bytes == 31
    assert rep.removed_temp_files == (str(temp),) and rep.integrity == "ok"
    assert cache.get(k) is not None  # referenced blobs stay, whatever their age


def test_close_then_context_manager(tmp_path: Path) -> None:
    c = CalibrationCache(tmp_path / "c")
    c.close()
    with CalibrationCache(tmp_path / "c", size_cap_bytes=10) as c2:
        assert c2.size_cap_bytes == 10
    with pytest.raises(CacheValueError, match="size_cap_bytes"):
        CalibrationCache(tmp_path / "c", size_cap_bytes=-1)
