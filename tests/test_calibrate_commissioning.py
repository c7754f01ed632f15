"""The technician's commissioning flow: the active bundle as the default model, where the
check writes, a validation that is really out of sample, a camera in another mode, and a
calibration cache whose index was lost."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from edge.cache.store import CalibrationCache
from edge.cache.values import CacheKey
from edge.calibrate.verify import compare_frames
from edge.episode import save_episode
from edge.manifest import model_sha256
from tests.calib_cell_helpers import cli, sweep_episode

ROOT = Path(__file__).resolve().parents[1]
FP32 = ROOT / "models" / "reference"
INT8 = ROOT / "models" / "reference-int8"
SIM = "sim://cell?split=test_all&seed=3&drop=0"
needs_mujoco = pytest.mark.skipif(importlib.util.find_spec("mujoco") is None,
                                  reason="the virtual cell needs MuJoCo")


def _context(model: Path) -> np.ndarray:
    shape = json.loads((model / "model.json").read_text())["contract"]["context_shape"]
    return np.zeros(shape, np.float32)


def _activate(home: Path, model: Path) -> Path:
    """A device state root whose active bundle is ``model`` (slot a)."""
    bundles = home / "bundles"
    bundles.mkdir(parents=True)
    os.symlink(model, bundles / "a")
    os.symlink("a", bundles / "active")
    return bundles / "active"


def _sim_frame(query: str = "") -> np.ndarray:
    from edge.calibrate.camera import open_camera

    cam = open_camera(SIM + query)
    try:
        return cam.read()[0]
    finally:
        cam.close()


# ------------------------------------------------------------------ the active bundle


@needs_mujoco
def test_verify_with_an_active_bundle_uses_the_cells_reference_and_names_the_model(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """The reference frame is the cell's: verify serves it whichever model encoded the
    context, and says which model is active and how to encode the context for it."""
    monkeypatch.setenv("SYNCEDGE_HOME", str(tmp_path / "home"))
    active = _activate(tmp_path / "home", INT8)
    cache = tmp_path / "cache"
    with CalibrationCache(cache) as c:
        c.put(CacheKey("cell-1", "cam-1", "robot-1", model_sha256(FP32)), sweep_episode(),
              _context(FP32), {"verdict": "pass"}, _sim_frame())
    assert cli("verify", "--camera", SIM, "--cell", "cell-1", "--cache-dir", str(cache),
               "--warmup", "0") == 0
    out = capsys.readouterr()
    assert out.out.startswith("VALID")
    assert f"active bundle {active}" in out.err and model_sha256(INT8)[:12] in out.err
    assert (f"'syncedge calibrate store --cell cell-1 --camera-id cam-1 --robot-id robot-1 "
            f"--cache-dir {cache}'") in out.err


def test_validate_without_model_names_the_active_bundle_and_the_exact_command(
        tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("SYNCEDGE_HOME", str(tmp_path / "home"))
    active = _activate(tmp_path / "home", INT8)
    cache = tmp_path / "cache"
    with CalibrationCache(cache) as c:
        c.put(CacheKey("cell-1", "cam-1", "robot-1", model_sha256(FP32)), sweep_episode(),
              _context(FP32), {"verdict": "pass"}, sweep_episode().frames[0])
    val = save_episode(sweep_episode("validation"), tmp_path / "val.npz")
    assert cli("validate", "--cell", "cell-1", "--episode", str(val), "--cache-dir",
               str(cache), "--threads", "1", "--out", str(tmp_path / "v")) == 2
    err = capsys.readouterr().err
    assert f"the active bundle {active} (model {model_sha256(INT8)[:12]}" in err
    assert "--model DIR" not in err
    cmd = re.search(r"'(syncedge calibrate store [^']*)'", err)
    assert cmd, err
    # the offered command works as given, then validate does
    argv = shlex.split(cmd.group(1))[2:]
    assert cli(*argv, "--threads", "1") == 0
    assert cli("validate", "--cell", "cell-1", "--episode", str(val), "--cache-dir",
               str(cache), "--threads", "1", "--out", str(tmp_path / "v")) == 0


def test_no_model_and_no_active_bundle_says_both(tmp_path: Path, monkeypatch,
                                                 capsys) -> None:
    monkeypatch.setenv("SYNCEDGE_HOME", str(tmp_path / "home"))
    ep = save_episode(sweep_episode(), tmp_path / "cal.npz")
    assert cli("store", str(ep), "--cache-dir", str(tmp_path / "cache")) == 2
    err = capsys.readouterr().err
    assert "no --model given and no active bundle" in err
    assert "syncedge bundle install BUNDLE" in err and "--model DIR" in err


def test_record_takes_its_resolution_from_the_active_bundle(tmp_path: Path,
                                                            monkeypatch) -> None:
    import argparse

    from edge.commands.calibrate import _resolution

    monkeypatch.setenv("SYNCEDGE_HOME", str(tmp_path / "home"))
    assert _resolution(argparse.Namespace(model=None, size=None)) == (64, 64)
    _activate(tmp_path / "home", FP32)
    assert _resolution(argparse.Namespace(model=None, size=None)) == \
        tuple(json.loads((FP32 / "model.json").read_text())["contract"]["resolution"])
    # WIDTHxHEIGHT, as the camera URL's size= gives it: (H, W) back
    assert _resolution(argparse.Namespace(model=None, size="128x96")) == (96, 128)


# ------------------------------------------------------------------ check


def test_check_writes_under_the_state_root_not_beside_its_input(tmp_path: Path,
                                                                monkeypatch, capsys) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("SYNCEDGE_HOME", str(home))
    src = tmp_path / "samples"
    src.mkdir()
    ep = save_episode(sweep_episode(), src / "cal.npz")
    assert cli("check", str(ep)) == 0
    assert sorted(p.name for p in src.iterdir()) == ["cal.npz"]
    report = home / "checks" / "cal" / "report.json"
    assert json.loads(report.read_text())["verdict"] == "pass"
    assert str(report) in capsys.readouterr().out


def test_check_on_a_validation_episode_prints_the_one_real_reason(tmp_path: Path,
                                                                   monkeypatch,
                                                                   capsys) -> None:
    monkeypatch.setenv("SYNCEDGE_HOME", str(tmp_path / "home"))
    ep = sweep_episode()
    val = save_episode(dataclasses.replace(ep, metadata=dataclasses.replace(
        ep.metadata, kind="validation")), tmp_path / "val.npz")
    assert cli("check", str(val), "--out", str(tmp_path / "chk")) == 1
    out = capsys.readouterr()
    assert out.err.count("FAIL") == 1 and "FAIL not_calibration" in out.err
    assert "planned" not in out.out and "j0" not in out.out
    report = json.loads((tmp_path / "chk" / "report.json").read_text())
    assert [r["code"] for r in report["reasons"]] == ["not_calibration"]
    assert report["dofs"] == []


# ------------------------------------------------------------------ validate


def test_validate_refuses_the_calibration_episode_itself(tmp_path: Path, monkeypatch,
                                                         capsys) -> None:
    monkeypatch.setenv("SYNCEDGE_HOME", str(tmp_path / "home"))
    model = ["--model", str(FP32), "--cache-dir", str(tmp_path / "cache"), "--threads", "1"]
    cal = save_episode(sweep_episode(), tmp_path / "cal.npz")
    assert cli("store", str(cal), *model) == 0
    capsys.readouterr()
    assert cli("validate", "--cell", "cell-1", "--episode", str(cal), *model, "--out",
               str(tmp_path / "v")) == 2
    err = capsys.readouterr().err
    assert "a calibration episode" in err and "in-sample" in err
    assert "calibrate plan --motion" in err and not (tmp_path / "v").exists()
    # relabelled as validation, it is still the calibration's own frames
    ep = sweep_episode()
    same = save_episode(dataclasses.replace(ep, metadata=dataclasses.replace(
        ep.metadata, kind="validation")), tmp_path / "same.npz")
    assert cli("validate", "--cell", "cell-1", "--episode", str(same), *model, "--out",
               str(tmp_path / "v")) == 2
    assert "the cached calibration's own frames" in capsys.readouterr().err
    assert not (tmp_path / "v").exists()
    # one frame: nothing to predict (it said "max_horizon: expected >= 1, found 0")
    one = dataclasses.replace(ep, frames=ep.frames[:1], actions=ep.actions[:1],
                              timestamps=ep.timestamps[:1],
                              joint_positions=ep.joint_positions[:1],
                              metadata=dataclasses.replace(ep.metadata, kind="validation",
                                                           segments=()))
    one_path = save_episode(one, tmp_path / "one.npz")
    assert cli("validate", "--cell", "cell-1", "--episode", str(one_path), *model, "--out",
               str(tmp_path / "v")) == 2
    err = capsys.readouterr().err
    assert f"{one_path}: 1 frame: a validation episode needs at least 2" in err, err
    assert not (tmp_path / "v").exists()


def test_validate_fits_an_episode_at_the_cameras_size_and_refuses_another_rate(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """An imported validation episode keeps the camera's own size: validate centre-crops
    and resizes it as a recording is (it used to refuse the start frame); one at another
    frame rate than the model steps at is refused by name before any rollout. A
    calibration episode of another cell is named as a calibration episode."""
    from edge.calibrate.camera import fit_frame

    monkeypatch.setenv("SYNCEDGE_HOME", str(tmp_path / "home"))
    model = ["--model", str(FP32), "--cache-dir", str(tmp_path / "cache"), "--threads", "1"]
    assert cli("store", str(save_episode(sweep_episode(), tmp_path / "cal.npz")), *model) == 0
    val = sweep_episode("validation")
    big = np.stack([np.kron(f, np.ones((2, 3, 1), np.uint8)) for f in val.frames[::-1]])
    wide = dataclasses.replace(val, frames=big)  # 128x192: another aspect, another size
    path = save_episode(wide, tmp_path / "wide.npz")
    capsys.readouterr()
    assert cli("validate", "--cell", "cell-1", "--episode", str(path), *model, "--out",
               str(tmp_path / "v")) == 0
    out = capsys.readouterr().out
    assert "frames of 192x128 px centre-cropped and resized to the model's 64x64" in out
    report = json.loads((tmp_path / "v" / "report.json").read_text())
    assert report["validation_episode"]["fitted_from_hw"] == [128, 192]
    assert fit_frame(big[0], (64, 64)).shape == (64, 64, 3)
    fast = dataclasses.replace(val, metadata=dataclasses.replace(val.metadata, fps=30.0))
    path = save_episode(fast, tmp_path / "fast.npz")
    assert cli("validate", "--cell", "cell-1", "--episode", str(path), *model, "--out",
               str(tmp_path / "v30")) == 2
    err = capsys.readouterr().err
    assert "recorded at 30 Hz, but the model steps at 10 Hz" in err
    assert not (tmp_path / "v30").exists()
    ep = sweep_episode()
    other = dataclasses.replace(ep, frames=ep.frames[::-1].copy(), metadata=dataclasses.replace(
        ep.metadata, cell_id="cell-9"))
    path = save_episode(other, tmp_path / "other.npz")
    assert cli("validate", "--cell", "cell-1", "--episode", str(path), *model, "--out",
               str(tmp_path / "v9")) == 2
    assert "a calibration episode (kind 'calibration')" in capsys.readouterr().err


# ------------------------------------------------------------------ verify


def test_verify_says_the_resolution_differs() -> None:
    import cv2

    rng = np.random.default_rng(0)
    small = cv2.resize(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8), (128, 96),
                       interpolation=cv2.INTER_CUBIC)
    for w, h in ((640, 480), (160, 96), (96, 96)):
        live = cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)
        r = compare_frames(small, live)
        assert not r["valid"] and r["resolution_differs"]
        assert r["reasons"][0] == (f"resolution differs: the camera gives {w}x{h} px, the "
                                   f"calibration's reference frame is 128x96 px (another "
                                   f"camera mode or camera): set the camera to 128x96 or "
                                   f"recalibrate the cell")
        assert r["live_size"] == [h, w] and r["size"] == [96, 128]
    same = compare_frames(small, small.copy())
    assert same["valid"] and not same["resolution_differs"]


@needs_mujoco
def test_verify_cli_names_another_camera_mode(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("SYNCEDGE_HOME", str(tmp_path / "home"))
    cache = tmp_path / "cache"
    with CalibrationCache(cache) as c:
        c.put(CacheKey("cell-1", "cam-1", "robot-1", model_sha256(FP32)), sweep_episode(),
              _context(FP32), {"verdict": "pass"}, _sim_frame())
    assert cli("verify", "--camera", SIM + "&size=160x96", "--cell", "cell-1", "--model",
               str(FP32), "--cache-dir", str(cache), "--warmup", "0") == 1
    out = capsys.readouterr().out
    assert out.startswith("STALE: resolution differs: the camera gives 160x96 px, the "
                          "calibration's reference frame is 128x96 px")


# ------------------------------------------------------------------ cache rebuild


def _cache_with_entries(root: Path) -> dict[CacheKey, tuple]:
    ep = sweep_episode()
    other = dataclasses.replace(ep, metadata=dataclasses.replace(ep.metadata,
                                                                 cell_id="cell-2"))
    rng = np.random.default_rng(1)
    out = {}
    with CalibrationCache(root) as c:
        for i, (e, model) in enumerate(((ep, FP32), (ep, INT8), (other, FP32))):
            key = CacheKey(e.metadata.cell_id, "cam-1", "robot-1", model_sha256(model))
            ctx = rng.normal(size=_context(model).shape).astype(np.float32)
            ref = rng.integers(0, 256, (96, 128, 3), dtype=np.uint8)
            c.put(key, e, ctx, {"verdict": "pass", "n": i}, ref, forced=i == 2,
                  forced_reason="limit stop" if i == 2 else "")
            out[key] = (ctx, ref, i)
    return out


def test_cache_rebuild_restores_every_entry_from_the_blobs(tmp_path: Path, capsys) -> None:
    root = tmp_path / "cache"
    entries = _cache_with_entries(root)
    (root / "index.sqlite3").write_bytes(b"this is not a database" * 100)
    for side in ("index.sqlite3-wal", "index.sqlite3-shm"):
        (root / side).unlink(missing_ok=True)
    assert cli_cache("list", "--root", str(root)) == 2
    assert "syncedge cache rebuild" in capsys.readouterr().err
    assert cli_cache("rebuild", "--root", str(root)) == 0
    out = capsys.readouterr().out
    assert "restored 3 entries" in out and "moved the old index to" in out
    with CalibrationCache(root) as c:
        assert {i.key for i in c.list()} == set(entries)
        for key, (ctx, ref, i) in entries.items():
            e = c.get(key)
            np.testing.assert_array_equal(e.context, ctx)
            np.testing.assert_array_equal(e.reference_frame, ref)
            assert e.report["n"] == i and e.episode.metadata.cell_id == key.cell_id
            assert e.info.forced == (i == 2)
    assert list((root / "quarantine").glob("index-*.sqlite3"))
    # on a sound index, rebuilding changes nothing
    assert cli_cache("rebuild", "--root", str(root)) == 0
    assert "restored 3 entries" in capsys.readouterr().out
    with CalibrationCache(root) as c:
        assert {i.key for i in c.list()} == set(entries)


def test_cache_rebuild_skips_damaged_entries_and_keeps_evicted_contexts_out(
        tmp_path: Path, capsys) -> None:
    root = tmp_path / "cache"
    entries = _cache_with_entries(root)
    keys = sorted(entries)
    with CalibrationCache(root) as c:
        damaged = c.info(keys[0])
        evicted = c.info(keys[1])
    # damage the report of the first entry; drop the context of the second
    c_path = root / "blobs" / damaged.report_sha256[:2] / damaged.report_sha256[2:]
    c_path.write_bytes(b"{}")
    ctx = root / "blobs" / evicted.context_sha256[:2] / evicted.context_sha256[2:]
    ctx.unlink()
    (root / "index.sqlite3").unlink()
    for side in ("index.sqlite3-wal", "index.sqlite3-shm"):
        (root / side).unlink(missing_ok=True)
    assert cli_cache("list", "--root", str(root)) == 0  # opens a new, empty index
    assert (f"3 entry record(s) under {root}/entries are not in the index (a lost or "
            f"replaced index?): run 'syncedge cache rebuild --root {root}'") in \
        capsys.readouterr().out
    assert cli_cache("rebuild", "--root", str(root)) == 0
    out = capsys.readouterr().out
    assert "restored 2 entries" in out and f"skipped {keys[0].short}: report blob" in out
    with CalibrationCache(root) as c:
        assert {i.key for i in c.list()} == set(keys[1:])
        assert c.get(keys[1]).context is None  # re-encode it: calibrate store --cell
        np.testing.assert_array_equal(c.get(keys[2]).context, entries[keys[2]][0])


def cli_cache(*argv: str) -> int:
    from edge.commands import cache
    from edge.commands.common import run_command

    return run_command("cache", cache.register, list(argv))
