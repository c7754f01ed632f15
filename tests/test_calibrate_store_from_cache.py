"""``calibrate store --cell ID``: which cached calibration episode is encoded again, when a
cell's entries hold episodes of different resolutions (an ONNX model's 64x64, the chain
model's 256x256)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from edge.cache.store import CalibrationCache
from edge.cache.values import CacheKey
from edge.episode import Episode, save_episode
from edge.manifest import model_sha256
from edge.runtime.chain import CHAIN_MODEL_SHA256
from tests.cache_helpers import model_sha
from tests.calib_cell_helpers import cli, sweep_episode
from tests.test_chain_runtime import two_link_chain

ROOT = Path(__file__).resolve().parents[1]
FP32 = ROOT / "models" / "reference"
INT8 = ROOT / "models" / "reference-int8"
SAMPLE = ROOT / "samples" / "cell_sample"
IDS = ("cell-1", "cam-1", "robot-1")

pytestmark = pytest.mark.skipif(not (FP32 / "model.json").is_file() or
                                not (INT8 / "model.json").is_file(),
                                reason="needs the shipped reference models")


def _upscaled(ep: Episode, k: int = 4) -> Episode:
    """The same sweep recorded at ``k`` times the resolution."""
    return dataclasses.replace(ep, frames=np.repeat(np.repeat(ep.frames, k, 1), k, 2))


def _brighter(ep: Episode) -> Episode:
    """Another recording of the sweep at the same resolution (other frame bytes)."""
    return dataclasses.replace(ep, frames=(ep.frames.astype(np.int16) + 3)
                               .clip(0, 255).astype(np.uint8))


def _store(*argv: str) -> int:
    return cli("store", *argv, "--threads", "1")


def test_store_cell_encodes_the_models_own_episode_not_another_entrys(
        tmp_path: Path, capsys) -> None:
    cache = tmp_path / "cache"
    ep = sweep_episode()
    cal = save_episode(ep, tmp_path / "cal.npz")
    assert _store(str(cal), "--model", str(FP32), "--cache-dir", str(cache)) == 0
    own = CacheKey(*IDS, model_sha256(FP32))
    with CalibrationCache(cache) as c:
        before = c.get(own)
        # the chain model's entry of the cell: the same sweep recorded at 256x256 (its key
        # sorts before the reference model's)
        big = _upscaled(ep)
        c.put(CacheKey(*IDS, CHAIN_MODEL_SHA256), big, two_link_chain(),
              {"verdict": "pass"}, big.frames[0])
    assert CHAIN_MODEL_SHA256 < own.model_sha256
    capsys.readouterr()
    assert _store("--cell", "cell-1", "--model", str(FP32), "--cache-dir", str(cache)) == 0
    out = capsys.readouterr().out
    with CalibrationCache(cache) as c:
        after = c.get(own)
        chain = c.get(CacheKey(*IDS, CHAIN_MODEL_SHA256))
    assert after.episode.resolution == (64, 64)
    assert after.info.episode_sha256 == before.info.episode_sha256
    np.testing.assert_array_equal(after.episode.frames, before.episode.frames)
    np.testing.assert_array_equal(after.reference_frame, before.reference_frame)
    np.testing.assert_allclose(after.context, before.context, rtol=0, atol=1e-6)
    assert chain.episode.resolution == (256, 256)  # the other entry is left as it was
    assert f"stored {own.short} from its own cached episode (64x64 px)" in out


def test_store_cell_for_a_new_model_says_which_episode_or_asks(tmp_path: Path,
                                                                capsys) -> None:
    cache = tmp_path / "cache"
    ep = sweep_episode()
    big = _upscaled(ep)
    chain_key = CacheKey(*IDS, CHAIN_MODEL_SHA256)
    new = CacheKey(*IDS, model_sha256(INT8))
    with CalibrationCache(cache) as c:
        c.put(chain_key, big, two_link_chain(), {"verdict": "pass"}, big.frames[0])
    # one episode in the cell: encoded, brought to the model's resolution, and said so
    assert _store("--cell", "cell-1", "--model", str(INT8), "--cache-dir", str(cache)) == 0
    out = capsys.readouterr().out
    with CalibrationCache(cache) as c:
        got = c.get(new)
        assert got.episode.resolution == (64, 64) and got.report["ingest"]["normalised"]
        assert c.get(chain_key).episode.resolution == (256, 256)
    assert (f"stored {new.short} from the cached episode of {chain_key.short} (256x256 px), "
            f"brought to the model's 64x64 px") in out
    with CalibrationCache(cache) as c:
        c.remove(new)
        # a 64x64 episode beside it: the one at the model's resolution is chosen
        c.put(CacheKey(*IDS, model_sha("a")), ep, np.ones((2, 3), np.float32),
              {"verdict": "pass"}, ep.frames[0])
    assert _store("--cell", "cell-1", "--model", str(INT8), "--cache-dir", str(cache)) == 0
    out = capsys.readouterr().out
    assert (f"from the cached episode of cell-1/cam-1/robot-1/{model_sha('a')[:12]} "
            f"(64x64 px; the cell holds 1 other episode: --from-model SHA picks another)"
            ) in out
    with CalibrationCache(cache) as c:
        np.testing.assert_array_equal(c.get(new).episode.frames, ep.frames)
        c.remove(new)
        # two different recordings at the model's resolution: the technician chooses
        other = _brighter(ep)
        c.put(CacheKey(*IDS, model_sha("b")), other, np.ones((2, 3), np.float32),
              {"verdict": "pass"}, other.frames[0])
    assert _store("--cell", "cell-1", "--model", str(INT8), "--cache-dir", str(cache)) == 2
    err = capsys.readouterr().err
    assert "holds several calibration episodes" in err and "--from-model SHA" in err
    assert f"64x64 px of {model_sha('a')[:12]}" in err
    assert f"64x64 px of {model_sha('b')[:12]}" in err
    assert len(err.strip().splitlines()) == 1
    with CalibrationCache(cache) as c:
        assert c.info(new) is None  # nothing stored
    assert _store("--cell", "cell-1", "--model", str(INT8), "--cache-dir", str(cache),
                  "--from-model", model_sha("b")[:8]) == 0
    assert "(64x64 px, --from-model)" in capsys.readouterr().out
    with CalibrationCache(cache) as c:
        np.testing.assert_array_equal(c.get(new).episode.frames, other.frames)


def test_store_cell_chain_reads_the_chain_entrys_own_episode(tmp_path: Path,
                                                              capsys) -> None:
    """A chain file checked against the cached episode: the chain entry's own 256x256
    episode, not the 64x64 one another model's entry (sorting first) holds."""
    from edge.cli import main
    from edge.episode import load_episode

    cache = tmp_path / "cache"
    small, big = load_episode(SAMPLE / "calibration.npz"), \
        load_episode(SAMPLE / "calibration_256.npz")
    m = small.metadata
    ids = (m.cell_id, m.camera_id, m.robot_id)
    first = CacheKey(*ids, "0" * 64)  # sorts before the chain model's identity
    assert main(["calibrate", "store", str(SAMPLE / "calibration_256.npz"), "--chain",
                 str(SAMPLE / "chain.npz"), "--cache-dir", str(cache)]) == 0
    with CalibrationCache(cache) as c:
        c.put(first, small, np.ones((2, 3), np.float32), {"verdict": "pass"},
              small.frames[0])
    capsys.readouterr()
    assert main(["calibrate", "store", "--cell", m.cell_id, "--chain",
                 str(SAMPLE / "chain.npz"), "--cache-dir", str(cache)]) == 0
    err = capsys.readouterr().err
    with CalibrationCache(cache) as c:
        got = c.get(CacheKey(*ids, CHAIN_MODEL_SHA256))
    assert got.episode.resolution == (256, 256)
    np.testing.assert_array_equal(got.episode.frames, big.frames)
    assert "calibration episode: its own cached episode (256x256 px)" in err
