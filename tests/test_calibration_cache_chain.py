"""Calibration cache: chain calibrations as an entry's context, the index upgrade from
schema version 1, archives with and without chain entries."""

from __future__ import annotations

import json
import sqlite3
import zipfile
from pathlib import Path

import numpy as np
import pytest

from edge.cache import index as ix
from edge.cache.store import CalibrationCache
from edge.cache.values import CacheCorruptError
from edge.runtime.chain import ChainCalibration
from tests.cache_helpers import blob_file, calibration, context, key, put, report
from tests.test_chain_runtime import two_link_chain


def _same_chain(a: ChainCalibration, b: ChainCalibration) -> bool:
    return a.sha256() == b.sha256() and a.dof_names == b.dof_names


def test_a_chain_calibration_is_stored_and_read_back(tmp_path: Path) -> None:
    chain = two_link_chain()
    with CalibrationCache(tmp_path / "cal", touch_interval_s=0.0) as cache:
        k_chain, k_onnx = key(model="chain"), key(model="onnx")
        put(cache, k_onnx)
        e = put(cache, k_chain, ctx=chain)
        assert e.info.context_format == "chain" and e.info.context_shape == ()
        got = cache.get_context(k_chain.cell_id, k_chain.camera_id, k_chain.robot_id,
                                k_chain.model_sha256)
        assert isinstance(got, ChainCalibration) and _same_chain(got, chain)
        # the episode is stored once, the ONNX model's entry is untouched
        other = cache.get(k_onnx)
        assert other is not None and other.info.context_format == "npy"
        assert np.array_equal(other.context, context(0))
        assert other.info.episode_sha256 == e.info.episode_sha256
    # reopened: the row keeps its format
    with CalibrationCache(tmp_path / "cal") as cache:
        entry = cache.get(k_chain)
        assert entry is not None and _same_chain(entry.context, chain)


def test_a_damaged_chain_blob_is_quarantined_and_only_the_context_dropped(
        tmp_path: Path) -> None:
    with CalibrationCache(tmp_path / "cal", touch_interval_s=0.0) as cache:
        k = key(model="chain")
        e = put(cache, k, ctx=two_link_chain())
        path = blob_file(cache, e.info.context_sha256)
        path.chmod(0o644)
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        with pytest.raises(CacheCorruptError, match="context"):
            cache.get_context(k.cell_id, k.camera_id, k.robot_id, k.model_sha256)
        after = cache.get(k)
        assert after is not None and after.context is None  # the episode stays: re-read it
        assert after.info.flags == ("no-context",)


def test_the_hint_after_a_dropped_context_does_not_offer_that_context(tmp_path: Path) -> None:
    # after a damaged context was quarantined, the next run said "with contexts for
    # models <the very model whose context was dropped>"
    from types import SimpleNamespace

    from edge.commands.common import _other_models_hint

    with CalibrationCache(tmp_path / "cal", touch_interval_s=0.0) as cache:
        k = key(model="chain")
        e = put(cache, k, ctx=two_link_chain())
        args = SimpleNamespace(cell=k.cell_id, model=None, cache_dir=str(tmp_path / "cal"))
        assert f"with contexts for models {k.model_sha256[:12]}" in _other_models_hint(
            cache, args, k.camera_id, k.robot_id)
        path = blob_file(cache, e.info.context_sha256)
        path.chmod(0o644)
        path.write_bytes(path.read_bytes()[:-7] + b"damaged")
        with pytest.raises(CacheCorruptError):
            cache.get_context(k.cell_id, k.camera_id, k.robot_id, k.model_sha256)
        hint = _other_models_hint(cache, args, k.camera_id, k.robot_id)
        assert "no model's context" in hint and k.model_sha256[:12] not in hint
        assert "calibrate store --cell" in hint


def test_a_schema_1_index_is_upgraded_in_place(tmp_path: Path) -> None:
    root = tmp_path / "cal"
    k = key()
    with CalibrationCache(root) as cache:
        put(cache, k)
    # make it a version 1 index: no context_format column, schema_version 1
    conn = sqlite3.connect(root / ix.INDEX_NAME)
    conn.execute("ALTER TABLE entries DROP COLUMN context_format")
    conn.execute("UPDATE meta SET value = '1' WHERE name = 'schema_version'")
    conn.commit()
    conn.close()
    with CalibrationCache(root, touch_interval_s=0.0) as cache:
        e = cache.get(k)
        assert e is not None and e.info.context_format == "npy"
        assert np.array_equal(e.context, context(0))
        put(cache, key(model="chain"), ctx=two_link_chain())
    conn = sqlite3.connect(root / ix.INDEX_NAME)
    version = conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
    columns = {r[1] for r in conn.execute("PRAGMA table_info(entries)")}
    conn.close()
    assert version[0] == str(ix.INDEX_SCHEMA_VERSION) == "2" and "context_format" in columns


def test_a_newer_index_is_refused_by_name(tmp_path: Path) -> None:
    root = tmp_path / "cal"
    with CalibrationCache(root) as cache:
        put(cache, key())
    conn = sqlite3.connect(root / ix.INDEX_NAME)
    conn.execute("UPDATE meta SET value = '3' WHERE name = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(Exception, match="schema version 3 is newer"):
        CalibrationCache(root)


def _manifest(path: Path) -> dict:
    with zipfile.ZipFile(path) as zf:
        return json.loads(zf.read("calibration-archive.json"))


def test_archives_carry_chain_entries_and_stay_version_1_without_them(tmp_path: Path) -> None:
    chain = two_link_chain()
    with CalibrationCache(tmp_path / "a", touch_interval_s=0.0) as a:
        k_onnx, k_chain = key(model="onnx"), key(model="chain")
        put(a, k_onnx)
        put(a, k_chain, ctx=chain)
        only_onnx = a.export(k_onnx, tmp_path / "onnx.zip")
        both = a.export([k_onnx, k_chain], tmp_path / "both.zip")
    assert _manifest(only_onnx)["schema_version"] == 1  # readable by every syncedge
    m = _manifest(both)
    assert m["schema_version"] == 2
    assert sorted(e["context_format"] for e in m["entries"]) == ["chain", "npy"]
    with CalibrationCache(tmp_path / "b", touch_interval_s=0.0) as b:
        assert sorted(b.import_(both)) == sorted([k_onnx, k_chain])
        got = b.get(k_chain)
        assert got is not None and _same_chain(got.context, chain)
    with CalibrationCache(tmp_path / "c") as c:
        assert c.import_(only_onnx) == [k_onnx]


def test_put_refuses_an_inconsistent_chain(tmp_path: Path) -> None:
    import dataclasses

    bad = dataclasses.replace(two_link_chain(), dof_names=["a", "a"])
    with CalibrationCache(tmp_path / "cal") as cache:
        k = key(model="chain")
        ep = calibration(k)
        with pytest.raises(Exception, match="dof_names"):
            cache.put(k, ep, bad, report(), ep.frames[0])
        assert cache.get(k) is None


def test_put_refuses_a_context_of_another_model_kind(tmp_path: Path) -> None:
    from edge.cache.values import CacheValueError

    with CalibrationCache(tmp_path / "cal") as cache:
        k_chain, k_onnx = key(model="chain"), key(model="onnx")
        with pytest.raises(CacheValueError, match=r"expected a chain calibration: model "
                                                  r"\w+\.\.\. is the chain model; found a "
                                                  r"float32 \.npy array"):
            put(cache, k_chain, ctx=context(0))
        with pytest.raises(CacheValueError, match="expected a float32 .npy array .* is not "
                                                  "the chain model .* found a chain "
                                                  "calibration"):
            put(cache, k_onnx, ctx=two_link_chain())
        assert cache.list() == []


def _mismatched(root: Path) -> tuple:
    """A cache whose chain entry's row names the ONNX entry's float32 context (and the
    other way round), as a mismatched import left them: the blobs themselves are sound."""
    k_chain, k_onnx = key(model="chain"), key(model="onnx")
    with CalibrationCache(root) as cache:
        onnx = put(cache, k_onnx).info
        chain = put(cache, k_chain, ctx=two_link_chain()).info
    with sqlite3.connect(root / ix.INDEX_NAME) as db:
        for k, src in ((k_chain, onnx), (k_onnx, chain)):
            db.execute("UPDATE entries SET context_sha256 = ?, context_bytes = ?, "
                       "context_shape = ?, context_format = ? WHERE model_sha256 = ?",
                       (src.context_sha256, src.context_bytes,
                        json.dumps(list(src.context_shape)), src.context_format,
                        k.model_sha256))
    return k_chain, k_onnx, onnx, chain


def test_a_context_of_another_model_kind_is_dropped_from_its_entry_on_read(
        tmp_path: Path) -> None:
    root = tmp_path / "cal"
    k_chain, k_onnx, onnx, chain = _mismatched(root)
    with CalibrationCache(root) as cache:
        with pytest.raises(CacheCorruptError, match="expected a float32 .npy array") as err:
            cache.get_context(k_onnx.cell_id, k_onnx.camera_id, k_onnx.robot_id,
                              k_onnx.model_sha256)
        assert "--model DIR" in str(err.value)
        with pytest.raises(CacheCorruptError, match="expected a chain calibration") as err:
            cache.get(k_chain)
        assert "--chain'" in str(err.value)
        # only the rows lost the context; the blobs stay where they are
        for k in (k_onnx, k_chain):
            got = cache.get(k)
            assert got is not None and got.context is None and got.info.flags == ("no-context",)
        assert blob_file(cache, onnx.context_sha256).is_file()
        assert blob_file(cache, chain.context_sha256).is_file()
        assert sorted(r.role for r in cache.quarantine()) == ["context", "context"]


def test_simulate_chain_on_a_mismatched_cached_context_says_one_line(
        tmp_path: Path, capsys) -> None:
    from edge.cli import main

    root = tmp_path / "cal"
    k_chain, *_ = _mismatched(root)
    code = main(["simulate", "--cell", k_chain.cell_id, "--camera-id", k_chain.camera_id,
                 "--robot-id", k_chain.robot_id, "--chain", "--cache-dir", str(root),
                 "--start", str(tmp_path / "start.png"), "--out", str(tmp_path / "sim")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "context blob is not one its key's model reads" in err
    assert "expected a chain calibration" in err and "found a float32 .npy array" in err
    assert "Traceback" not in err and not (tmp_path / "sim").exists()
