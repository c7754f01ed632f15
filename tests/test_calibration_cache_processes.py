"""Calibration cache with real processes: two writers at once, and writers killed mid-put."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from edge.cache import blobs as cache_blobs
from edge.cache import index as cache_index
from edge.cache.store import CalibrationCache
from tests.cache_helpers import calibration, context, key, put, report

FORK = mp.get_context("fork")
SHARED = key(cell="shared")


def _writer(root: str, wid: int, n: int, cap: int | None) -> None:
    with CalibrationCache(root, size_cap_bytes=cap, touch_interval_s=0.0,
                          busy_timeout_s=30.0) as c:
        for i in range(n):
            k = key(cell=f"w{wid}-{i}")
            put(c, k, seed=10 * wid + i)
            put(c, SHARED, seed=wid)  # both writers replace one key over and over
            got = c.get_context(k.cell_id, k.camera_id, k.robot_id, k.model_sha256)
            assert got is None or np.array_equal(got, context(10 * wid + i))
            assert c.get(SHARED) is not None


def _assert_consistent(root: Path) -> dict[str, object]:
    """Every listed entry verifies, nothing was quarantined, and after gc the blob files
    are exactly the referenced blobs (no half entries, no orphans, no temporaries)."""
    with CalibrationCache(root, touch_interval_s=0.0) as c:
        entries = {i.key.cell_id: c.get(i.key) for i in c.list()}
        assert all(e is not None for e in entries.values())
        assert c.quarantine() == []
        rep = c.gc(grace_s=0)
        assert rep.integrity == "ok"
        referenced = {sha for i in c.list() for sha in i.blobs().values()}
        on_disk = [sha for sha, _, _ in c.blobs.scan()]
        assert sorted(on_disk) == sorted(referenced), "unreferenced or temporary files left"
    return entries


@pytest.mark.parametrize("cap", [None, 12_000])
def test_two_writer_processes_and_a_reader(tmp_path: Path, cap: int | None) -> None:
    root = tmp_path / "cal"
    CalibrationCache(root).close()
    n = 6
    procs = [FORK.Process(target=_writer, args=(str(root), w, n, cap)) for w in (1, 2)]
    for p in procs:
        p.start()
    seen = 0
    with CalibrationCache(root, touch_interval_s=0.0) as reader:
        while any(p.is_alive() for p in procs):
            got = reader.get_context(SHARED.cell_id, SHARED.camera_id, SHARED.robot_id,
                                     SHARED.model_sha256)
            if got is not None:
                assert np.array_equal(got, context(1)) or np.array_equal(got, context(2))
                seen += 1
            time.sleep(0.002)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    entries = _assert_consistent(root)
    assert len(entries) == 2 * n + 1
    if cap is not None:
        assert any(e.context is None for e in entries.values())  # the cap evicted some


# ------------------------------------------------------------------ killed writers

def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _half_written_blob(path, write, mode=0o666):  # stands in for atomic_write
    import io
    import tempfile

    buf = io.BytesIO()
    write(buf)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, _ = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.write(fd, buf.getvalue()[: len(buf.getvalue()) // 2])
    _die()


def _killed_put(root: str, point: str) -> None:
    if point == "mid-blob":
        cache_blobs.atomic_write = _half_written_blob
    elif point == "after-episode-blob":
        cache_blobs.BlobStore.write = lambda self, data: _die()
    elif point == "in-transaction":
        original = cache_index.upsert_entry

        def upsert_then_die(conn, info):
            original(conn, info)
            _die()

        cache_index.upsert_entry = upsert_then_die
    elif point == "after-commit":
        CalibrationCache._unlink_unreferenced = lambda self, shas: _die()
    c = CalibrationCache(root, touch_interval_s=0.0)
    k = key()
    ep = calibration(k, seed=2)
    c.put(k, ep, context(2), report(), ep.frames[0])


@pytest.mark.parametrize("point, survivor", [
    ("mid-blob", 1), ("after-episode-blob", 1), ("in-transaction", 1), ("after-commit", 2)])
def test_writer_killed_at_each_step_leaves_old_or_new_entry(tmp_path: Path, point: str,
                                                            survivor: int) -> None:
    root = tmp_path / "cal"
    with CalibrationCache(root) as c:
        put(c, key(), seed=1)
    p = FORK.Process(target=_killed_put, args=(str(root), point))
    p.start()
    p.join(30)
    assert p.exitcode == -signal.SIGKILL
    entries = _assert_consistent(root)
    assert list(entries) == ["cell-1"]
    assert np.array_equal(entries["cell-1"].context, context(survivor))


def _put_forever(root: str) -> None:
    c = CalibrationCache(root, touch_interval_s=0.0, size_cap_bytes=8_000)
    i = 0
    while True:
        put(c, key(cell=f"cell-{i % 5}"), seed=i)
        i += 1


def test_writer_killed_at_random_moments(tmp_path: Path) -> None:
    root = tmp_path / "cal"
    CalibrationCache(root).close()
    rng = random.Random(0)
    for _ in range(5):
        p = FORK.Process(target=_put_forever, args=(str(root),))
        p.start()
        time.sleep(rng.uniform(0.05, 0.2))
        os.kill(p.pid, signal.SIGKILL)
        p.join(10)
        _assert_consistent(root)
