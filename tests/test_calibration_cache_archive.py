"""Calibration archives (export/import) and the ``syncedge cache`` command."""

from __future__ import annotations

import argparse
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from edge.cache.archive import MANIFEST_NAME
from edge.cache.store import CalibrationCache
from edge.cache.values import CacheArchiveError, CacheConflictError, CacheCorruptError
from edge.commands import cache as cache_cmd
from tests.cache_helpers import blob_file, context, key, put


def _fill(root: Path) -> list:
    with CalibrationCache(root) as c:
        k1, k2, k3 = key(model="m1"), key(model="m2"), key(cell="cell-2")
        put(c, k1, seed=1)
        put(c, k2, seed=1, ctx=None, forced=True, forced_reason="j1 clipped at its limit")
        put(c, k3, seed=3)
    return [k1, k2, k3]


def test_export_import_round_trip(tmp_path: Path) -> None:
    k1, k2, _ = _fill(tmp_path / "a")
    with CalibrationCache(tmp_path / "a") as a:
        path = a.export([k1, k2], tmp_path / "cell-1.zip")
        src = {k: a.get(k) for k in (k1, k2)}
    with CalibrationCache(tmp_path / "b") as b:
        assert b.import_(path) == [k1, k2]
        for k, e in src.items():
            got = b.get(k)
            assert np.array_equal(got.episode.frames, e.episode.frames)
            assert got.report == e.report
            assert np.array_equal(got.reference_frame, e.reference_frame)
            assert (got.context is None) == (e.context is None)
            assert got.info.forced == e.info.forced and got.info.created_s == e.info.created_s
        assert np.array_equal(b.get(k1).context, context(1))
        assert b.info(k2).forced_reason == "j1 clipped at its limit"
        with pytest.raises(CacheConflictError, match="already cached.*--replace"):
            b.import_(path)
        assert b.import_(path, replace=True) == [k1, k2]


def _rewrite(src: Path, dst: Path, edit) -> Path:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for name in zin.namelist():
            data = edit(name, zin.read(name))
            if data is not None:
                zout.writestr(name, data)
    return dst


def _flip_blob(name: str, data: bytes) -> bytes:
    if name.startswith("blobs/") and len(data) > 1000:
        b = bytearray(data)
        b[len(b) // 2] ^= 1
        return bytes(b)
    return data


def _drop_blob(name: str, data: bytes) -> bytes | None:
    return None if name.startswith("blobs/") and len(data) > 1000 else data


def _bad_manifest(name: str, data: bytes) -> bytes:
    if name != MANIFEST_NAME:
        return data
    m = json.loads(data)
    m["entries"][0]["surprise"] = 1
    return json.dumps(m).encode()


def _other_cell(name: str, data: bytes) -> bytes:
    if name != MANIFEST_NAME:
        return data
    m = json.loads(data)
    m["entries"][0]["key"]["cell_id"] = "cell-9"
    return json.dumps(m).encode()


@pytest.mark.parametrize("edit, words", [
    (_flip_blob, "altered"),
    (_drop_blob, "missing"),
    (_bad_manifest, "expected keys"),
    (_other_cell, "expected metadata.cell_id 'cell-9'"),
])
def test_tampered_archive_refused(tmp_path: Path, edit, words: str) -> None:
    k1, _, _ = _fill(tmp_path / "a")
    with CalibrationCache(tmp_path / "a") as a:
        good = a.export(k1, tmp_path / "good.zip")
    bad = _rewrite(good, tmp_path / "bad.zip", edit)
    with CalibrationCache(tmp_path / "b") as b:
        with pytest.raises(CacheArchiveError, match=words) as err:
            b.import_(bad)
        assert str(bad) in str(err.value)
        assert b.list() == []


def test_damaged_archive_bytes_refused(tmp_path: Path) -> None:
    k1, _, _ = _fill(tmp_path / "a")
    with CalibrationCache(tmp_path / "a") as a:
        path = a.export(k1, tmp_path / "x.zip")
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF
    path.write_bytes(bytes(data))
    with CalibrationCache(tmp_path / "b") as b, pytest.raises(CacheArchiveError):
        b.import_(path)
    (tmp_path / "y.zip").write_bytes(b"nope")
    with CalibrationCache(tmp_path / "b") as b, \
            pytest.raises(CacheArchiveError, match="expected a readable zip archive"):
        b.import_(tmp_path / "y.zip")


def test_export_refuses_corrupt_entry(tmp_path: Path) -> None:
    k1, _, _ = _fill(tmp_path / "a")
    with CalibrationCache(tmp_path / "a") as a:
        blob_file(a, a.info(k1).reference_sha256).write_bytes(b"x")
        with pytest.raises(CacheCorruptError):
            a.export(k1, tmp_path / "x.zip")
    assert not (tmp_path / "x.zip").exists()


# ------------------------------------------------------------------------- CLI

def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="syncedge")
    sub = parser.add_subparsers(dest="command")
    cache_cmd.register(sub)
    args = parser.parse_args(list(argv))
    return args.func(args)


def test_cli_list_show_export_import_gc(tmp_path: Path, capsys) -> None:
    root = tmp_path / "a"
    k1, k2, k3 = _fill(root)
    assert _cli("cache", "list", "--root", str(root)) == 0
    out = capsys.readouterr().out
    assert "CELL" in out and "forced,no-context" in out and k1.model_sha256[:12] in out
    assert "3 entries" in out
    assert _cli("cache", "list", "--root", str(root), "--cell", "cell-2", "--json") == 0
    listed = json.loads(capsys.readouterr().out)
    assert [e["key"]["cell_id"] for e in listed["entries"]] == ["cell-2"]
    assert _cli("cache", "show", "--root", str(root), f"cell-1/cam-1/robot-1/{k1.model_sha256[:8]}",
                f"cell-1/cam-1/robot-1/{k2.model_sha256[:8]}") == 0
    out = capsys.readouterr().out
    assert "checksums  verified" in out and "FORCED     j1 clipped" in out
    assert "float32 (3, 4, 4, 4)" in out
    assert "  coverage   " in out and "the whole report: --json" in out
    assert _cli("cache", "list", "--root", str(root), "--cell", "cell-9") == 0
    assert "no calibration entries match cell cell-9 under" in capsys.readouterr().out
    archive = tmp_path / "cell-1.zip"
    assert _cli("cache", "export", "--root", str(root), "--cell", "cell-1", "--out",
                str(archive)) == 0
    assert "exported 2 entries" in capsys.readouterr().out
    other = tmp_path / "b"
    assert _cli("cache", "import", "--root", str(other), str(archive)) == 0
    assert capsys.readouterr().out.count("imported") == 2
    assert _cli("cache", "remove", "--root", str(other), str(k1)) == 0
    assert _cli("cache", "gc", "--root", str(other), "--grace-s", "0") == 0
    out = capsys.readouterr().out
    assert "index check: ok" in out and "removed 0 unreferenced" in out


def test_cli_import_and_list_name_what_was_given_and_make_no_cache_for_a_bad_file(
        tmp_path: Path, capsys) -> None:
    from edge.cli import main

    new_root = tmp_path / "new"
    (tmp_path / "dir.bundle").mkdir()
    assert main(["cache", "import", "--root", str(new_root), str(tmp_path / "dir.bundle")]) == 2
    assert "dir.bundle: a folder; expected an archive file" in capsys.readouterr().err
    png = tmp_path / "ref.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n")
    assert main(["cache", "import", "--root", str(new_root), str(png)]) == 2
    assert "not an archive of 'syncedge cache export'" in capsys.readouterr().err
    assert not new_root.exists()  # a failed import made no empty cache there
    assert main(["cache", "list", "--root", str(png)]) == 2
    assert f"--root {png}: a file; expected a calibration cache root" in \
        capsys.readouterr().err


def test_cli_gc_reports_quarantine_and_default_root(tmp_path: Path, capsys,
                                                   monkeypatch) -> None:
    monkeypatch.setenv("SYNCEDGE_HOME", str(tmp_path / "home"))
    root = tmp_path / "home" / "calibration"
    k1, _, _ = _fill(root)
    with CalibrationCache(root) as c:
        blob_file(c, c.info(k1).context_sha256).write_bytes(b"junk")
    from edge.cache.values import CacheError

    with pytest.raises(CacheError, match="context blob failed verification"):
        _cli("cache", "show", str(k1))
    assert _cli("cache", "gc") == 0
    out = capsys.readouterr().out
    assert "1 quarantine record(s)" in out and "context" in out and "quarantine/" in out


def test_cli_errors_are_one_line_exit_2(tmp_path: Path, capsys, monkeypatch) -> None:
    from edge import cli

    monkeypatch.setattr(cli, "entries", lambda group: {"cache": "edge.commands.cache:register"})
    assert cli.main(["cache", "show", "--root", str(tmp_path), "nope/x/y/abcd"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("syncedge cache: error: key 'nope/x/y/abcd': expected a cached entry")
    assert len(err.strip().splitlines()) == 1
    assert cli.main(["cache", "import", "--root", str(tmp_path), str(tmp_path / "no.zip")]) == 2
    assert capsys.readouterr().err.strip().endswith("no.zip: no such archive file")


@pytest.mark.parametrize("verb", [["list"], ["show", "cell-1/cam-1/robot-1/abcd"],
                                  ["export", "--cell", "cell-1", "--out", "x.zip"],
                                  ["remove", "cell-1/cam-1/robot-1/abcd"], ["gc"]])
def test_a_mistyped_root_is_refused_not_made_into_an_empty_cache(tmp_path: Path, verb) -> None:
    from edge.cache.values import CacheError

    typo = tmp_path / "calibraton"
    with pytest.raises(CacheError, match=r"--root .*calibraton: no such folder; expected a "
                                         r"calibration cache root"):
        _cli("cache", verb[0], "--root", str(typo), *verb[1:])
    assert not typo.exists()


def test_cell_camera_and_robot_come_from_the_cache_when_they_are_unique(tmp_path: Path) -> None:
    """``simulate --cell ID`` with a start image needs no --camera-id / --robot-id when the
    cache holds one camera and robot for the cell; several are named."""
    from edge.commands.common import cached_camera_robot
    from edge.runtime.errors import RuntimeInputError

    with CalibrationCache(tmp_path / "a") as c:
        put(c, key(cell="cell-1", model="m1"), seed=1)
        put(c, key(cell="cell-1", model="m2"), seed=1)  # the same camera, another model
        assert cached_camera_robot(c, "cell-1", None, None) == ("cam-1", "robot-1")
        assert cached_camera_robot(c, "cell-1", None, "robot-1") == ("cam-1", "robot-1")
        assert cached_camera_robot(c, "cell-1", "given", "ids") == ("given", "ids")
        with pytest.raises(RuntimeInputError, match=r"holds no entry of cell 'cell-1' \(camera "
                                                    r"any, robot robot-9\); store"):
            cached_camera_robot(c, "cell-1", None, "robot-9")
        put(c, key(cell="cell-1", model="m1", camera="cam-2"), seed=2)
        with pytest.raises(RuntimeInputError, match=r"several cameras or robots \(cam-1/robot-1, "
                                                    r"cam-2/robot-1\); pass --camera-id"):
            cached_camera_robot(c, "cell-1", None, None)
        assert cached_camera_robot(c, "cell-1", "cam-2", None) == ("cam-2", "robot-1")
        m2 = key(model="m2").model_sha256
        assert cached_camera_robot(c, "cell-1", None, None, m2) == ("cam-1", "robot-1")


# ------------------------------------------------ archives the cache must not take


def _with_manifest(src: Path, dst: Path, edit) -> Path:
    def rewrite(name: str, data: bytes) -> bytes:
        if name != MANIFEST_NAME:
            return data
        m = json.loads(data)
        edit(m)
        return json.dumps(m).encode()

    return _rewrite(src, dst, rewrite)


@pytest.mark.parametrize("moved, to, expected, found", [
    ("m1", "chain", "expected a chain calibration", "found a float32 .npy array"),
    ("chain", "m1", "expected a float32 .npy array", "found a chain calibration"),
])
def test_import_refuses_a_context_of_another_model_kind(tmp_path: Path, moved: str, to: str,
                                                        expected: str, found: str) -> None:
    from tests.test_chain_runtime import two_link_chain

    with CalibrationCache(tmp_path / "a") as a:
        put(a, key(model=moved), ctx=two_link_chain() if moved == "chain" else context(1))
        good = a.export(key(model=moved), tmp_path / "good.zip")
        ctx_sha = a.info(key(model=moved)).context_sha256

    def rekey(m: dict) -> None:
        m["entries"][0]["key"]["model_sha256"] = key(model=to).model_sha256

    bad = _with_manifest(good, tmp_path / "bad.zip", rekey)
    with CalibrationCache(tmp_path / "b") as b:
        with pytest.raises(CacheArchiveError) as err:
            b.import_(bad)
        assert b.list() == []
    text = str(err.value)
    assert str(bad) in text and f"member blobs/{ctx_sha}" in text
    assert expected in text and found in text and key(model=to).short in text
    assert len(text.splitlines()) == 1


def test_import_refuses_a_key_listed_twice_before_storing_anything(tmp_path: Path,
                                                                    capsys) -> None:
    k1, k2, _ = _fill(tmp_path / "a")
    with CalibrationCache(tmp_path / "a") as a:
        good = a.export([k1, k2], tmp_path / "good.zip")

    def twice(m: dict) -> None:  # the second entry under the first one's key
        m["entries"][1]["key"] = dict(m["entries"][0]["key"])

    dup = _with_manifest(good, tmp_path / "dup.zip", twice)
    with CalibrationCache(tmp_path / "b") as b:
        with pytest.raises(CacheArchiveError, match=r"entries\[0\] and entries\[1\]: expected "
                                                    r"each key once, found .* twice") as err:
            b.import_(dup)
        assert str(k1) in str(err.value)
        assert b.list() == []
    from edge.commands.common import run_command

    assert run_command("cache", cache_cmd.register,
                       ["import", "--root", str(tmp_path / "c"), str(dup)]) == 2
    captured = capsys.readouterr()
    assert "imported" not in captured.out and "twice" in captured.err
    with CalibrationCache(tmp_path / "c") as c:
        assert c.list() == []


def test_export_refuses_an_existing_archive_unless_overwrite(tmp_path: Path,
                                                              capsys) -> None:
    from edge.commands.common import run_command

    k1, _, _ = _fill(tmp_path / "a")
    out = tmp_path / "cell-1.zip"
    out.write_bytes(b"an earlier archive")
    with CalibrationCache(tmp_path / "a") as a:
        with pytest.raises(CacheConflictError, match="already exists.*overwrite"):
            a.export(k1, out)
        assert out.read_bytes() == b"an earlier archive"
        assert run_command("cache", cache_cmd.register,
                           ["export", "--root", str(tmp_path / "a"), "--cell", "cell-1",
                            "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"export --out {out}: already exists" in err and "--overwrite" in err
        assert out.read_bytes() == b"an earlier archive"
        assert run_command("cache", cache_cmd.register,
                           ["export", "--root", str(tmp_path / "a"), "--cell", "cell-1",
                            "--out", str(out), "--overwrite"]) == 0
    assert "exported 2 entries" in capsys.readouterr().out
    with CalibrationCache(tmp_path / "b") as b:
        assert len(b.import_(out)) == 2
