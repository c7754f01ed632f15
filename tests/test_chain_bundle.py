"""The chain model as a signed bundle: its model folder (``export chain-model``), the
manifest's refusals, and a device whose active slot holds it running ``simulate``,
``precheck`` and ``calibrate store``/``validate`` without ``--chain``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from edge.bundle.format import BundleError
from edge.bundle.install import install_bundle
from edge.bundle.keys import add_key
from edge.cli import main
from edge.fileio import sha256_file
from edge.manifest import (
    ChainModelManifest,
    ManifestError,
    is_chain_model_dir,
    load_chain_model_dir,
    load_manifest,
)
from edge.runtime.chain import CHAIN_MODEL_SHA256, load_chain_calibration
from export.bundle.build import build_bundle, generate_keypair, load_private_key, pack_bundle

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "cell_sample"
CHAIN = SAMPLE / "chain.npz"
SHIPPED = ROOT / "models" / "chain"


def test_the_shipped_chain_model_folder_is_what_its_command_writes(tmp_path):
    shipped = json.loads((SHIPPED / "model.json").read_text())
    assert sorted(p.name for p in SHIPPED.iterdir()) == ["model.json"]
    argv = shipped["provenance"]["command"].split()
    assert argv[:3] == ["syncedge", "export", "chain-model"]
    argv[argv.index("--out") + 1] = str(tmp_path / "chain")
    assert main(argv[1:]) == 0
    written = json.loads((tmp_path / "chain" / "model.json").read_text())
    assert written["provenance"].pop("command").endswith(str(tmp_path / "chain"))
    shipped["provenance"].pop("command")
    assert written == shipped
    m = load_chain_model_dir(SHIPPED)
    assert m.chain_model_sha256 == CHAIN_MODEL_SHA256 and m.variant == "numpy"
    assert m.recording_resolution == (256, 256)
    assert is_chain_model_dir(SHIPPED) and not is_chain_model_dir(ROOT / "models" / "reference")
    # written once: a second write is refused, nothing changed
    before = (tmp_path / "chain" / "model.json").read_bytes()
    assert main(argv[1:]) == 2
    assert (tmp_path / "chain" / "model.json").read_bytes() == before


@pytest.mark.parametrize(("flag", "value", "said"), [
    ("--recording-resolution", "250x256", "a whole multiple of the chain's 64 px grid"),
    ("--recording-resolution", "256x128", "expected a square size"),
    ("--recording-resolution", "100000x100000", "up to 4096"),
    ("--name", "", "expected a model name"),
    ("--name", "a/b", "without slashes"),
])
def test_export_chain_model_refuses_values_read_chain_cannot_use(tmp_path, capsys, flag,
                                                                 value, said):
    with pytest.raises(SystemExit) as e:
        main(["export", "chain-model", "--out", str(tmp_path / "chain"), flag, value])
    assert e.value.code == 2 and said in capsys.readouterr().err
    assert not (tmp_path / "chain").exists()


@pytest.mark.parametrize(("change", "key"), [
    ({"chain_model_sha256": "0" * 64}, "chain_model_sha256"),
    ({"chain_schema_versions": [1, 3]}, "chain_schema_versions"),
    ({"chain_schema_versions": []}, "chain_schema_versions"),
    ({"chain_format": "syncedge.chain_calibration_v9"}, "chain_format"),
    ({"variant": "fp32"}, "variant"),
    ({"recording_resolution": [256, 0]}, "recording_resolution[1]"),
    ({"schema_version": 3}, "schema_version"),
    ({"weights": "chain.onnx"}, "weights"),
])
def test_a_chain_model_manifest_refuses_a_value_naming_the_key(tmp_path, change, key):
    d = json.loads((SHIPPED / "model.json").read_text())
    d.update(change)
    (tmp_path / "model.json").write_text(json.dumps(d))
    with pytest.raises(ManifestError) as e:
        load_chain_model_dir(tmp_path)
    assert f"model.json:{key}" in str(e.value)


def test_onnx_only_paths_refuse_the_chain_folder_by_name(capsys):
    with pytest.raises(ManifestError, match="the chain model .*needs an ONNX model folder"):
        load_manifest(SHIPPED / "model.json")
    with pytest.raises(ManifestError, match="format: expected 'syncedge.chain_model'"):
        load_chain_model_dir(ROOT / "models" / "reference")
    assert main(["calibrate", "ingest", str(SAMPLE / "calibration_256.npz"), "--model",
                 str(SHIPPED), "--out", "unused.npz"]) == 2
    assert "the chain model" in capsys.readouterr().err


@pytest.fixture()
def device(tmp_path, monkeypatch):
    """A device (``SYNCEDGE_HOME``) whose active slot holds the shipped chain model's
    bundle, and the sample cell's chain calibration in its calibration cache."""
    monkeypatch.setenv("SYNCEDGE_HOME", str(tmp_path / "state"))
    priv, pub, _ = generate_keypair(tmp_path / "keys", "oem")
    root = tmp_path / "state" / "bundles"
    add_key(pub, root / "keys")
    bundle = tmp_path / "chain.bundle"
    m = build_bundle(SHIPPED, bundle, target="cpu", private_key_path=priv)
    assert [f.name for f in m.files] == ["model.json"] and m.model_variant == "numpy"
    assert m.created["parity"].startswith("not applicable")
    install_bundle(bundle, target="cpu", root=root)
    cache = str(tmp_path / "cache")
    assert main(["calibrate", "store", str(SAMPLE / "calibration_256.npz"), "--chain",
                 str(CHAIN), "--cache-dir", cache]) == 0
    return {"tmp": tmp_path, "cache": cache, "bundle": bundle, "key": priv, "root": root}


def test_an_active_chain_bundle_runs_simulate_precheck_and_validate_without_chain(
        device, capsys, monkeypatch):
    tmp, cache = device["tmp"], device["cache"]
    start = ["--start", str(SAMPLE / "test.npz")]
    assert main(["simulate", "--cell", "sample-cell", "--cache-dir", cache, *start,
                 "--out", str(tmp / "bundle")]) == 0
    printed = capsys.readouterr().out
    assert "model syncedge-chain numpy" in printed and "from bundle slot a" in printed
    assert main(["simulate", "--chain", str(CHAIN), *start, "--out", str(tmp / "file")]) == 0
    a = np.load(tmp / "bundle" / "prediction.npz")["frames"]
    b = np.load(tmp / "file" / "prediction.npz")["frames"]
    assert np.array_equal(a, b)
    ident = json.loads((tmp / "bundle" / "metrics.json").read_text())["model_id"]
    assert ident["bundle_slot"] == "a" and ident["name"] == "syncedge-chain"
    assert ident["sha256"] == sha256_file(SHIPPED / "model.json")
    assert ident["chain_sha256"] == load_chain_calibration(CHAIN).sha256()
    assert ident["chain"] == "cache:sample-cell/sample-cell-cam/sample-cell-kinova3"
    # without --cell the chain model has no calibration to run: said before any work
    capsys.readouterr()
    assert main(["simulate", *start, "--out", str(tmp / "nocell")]) == 2
    err = capsys.readouterr().err
    assert "is the chain model" in err and "--cell ID" in err
    assert not (tmp / "nocell").exists()
    # an ONNX model's calibration is not the chain model's
    assert main(["simulate", *start, "--calibration", str(SAMPLE / "calibration.npz"),
                 "--out", str(tmp / "cal")]) == 2
    assert "--calibration: not with the chain model" in capsys.readouterr().err
    # the pre-check kit from the cache, through the active chain model
    monkeypatch.chdir(ROOT)
    kit = ROOT / "samples" / "precheck"
    assert main(["precheck", "--cell", "sample-cell", "--cache-dir", cache, *start,
                 "--actions", str(kit / "candidates.json"), "--rules", str(kit / "rules.yaml"),
                 "--out", str(tmp / "pc")]) == 0
    rep = json.loads((tmp / "pc" / "report.json").read_text())
    assert rep["chosen"] == "reach" and rep["model_id"]["bundle_slot"] == "a"
    # commissioning: the cached chain on the held-out episode
    assert main(["calibrate", "validate", "--cell", "sample-cell", "--episode",
                 str(SAMPLE / "test.npz"), "--cache-dir", cache,
                 "--out", str(tmp / "val")]) == 0
    fid = json.loads((tmp / "val" / "report.json").read_text())["fidelity"]
    assert fid["gain_over_copy_last"]["psnr_db"] > 5.0
    # an explicit ONNX model still runs beside the active chain bundle
    assert main(["simulate", "--model", str(ROOT / "models" / "reference"), "--calibration",
                 str(SAMPLE / "calibration.npz"), *start, "--out", str(tmp / "onnx")]) == 0
    onnx = json.loads((tmp / "onnx" / "metrics.json").read_text())["model_id"]
    assert onnx["name"] == "syncedge-warp" and onnx["bundle_slot"] is None


def test_store_under_an_active_chain_bundle_reads_the_chain(device, capsys, monkeypatch):
    """``calibrate store EPISODE`` without ``--chain`` reads the chain (as ``--chain``
    alone) when the active model is the chain model; the read is replaced here by the
    sample's chain (a real read takes minutes)."""
    from edge.commands import calibrate_chain

    calls = []

    def read(episode, where, args):
        calls.append(where)
        return load_chain_calibration(CHAIN), 0.0

    monkeypatch.setattr(calibrate_chain, "_read_chain", read)
    cache = str(device["tmp"] / "cache2")
    assert main(["calibrate", "store", str(SAMPLE / "calibration_256.npz"),
                 "--cache-dir", cache]) == 0
    assert calls == [str(SAMPLE / "calibration_256.npz")]
    assert "chain calibration: " in capsys.readouterr().out
    # calibrate record's default size is the chain model's recording resolution
    from edge.commands.calibrate import _resolution

    assert _resolution(argparse.Namespace(model=None, size=None)) == (256, 256)


def test_a_bundle_of_a_chain_model_another_runtime_wrote_is_refused(device):
    d = json.loads((SHIPPED / "model.json").read_text())
    d["chain_model_sha256"] = "f" * 64
    src = device["tmp"] / "other" / "model.json"
    src.parent.mkdir()
    src.write_text(json.dumps(d))
    bundle = device["tmp"] / "other.bundle"
    pack_bundle({"model.json": src}, bundle, target="cpu", model_name=d["name"],
                model_variant="numpy", private_key=load_private_key(device["key"]))
    active = (device["root"] / "active").resolve()
    with pytest.raises(BundleError, match="chain_model_sha256"):
        install_bundle(bundle, target="cpu", root=device["root"])
    assert (device["root"] / "active").resolve() == active
    assert isinstance(load_chain_model_dir(active), ChainModelManifest)


def test_verify_under_an_active_chain_bundle_finds_the_chain_entry(device, capsys):
    """The chain model's cache entries are keyed by the chain identity, not by the folder's
    model.json: ``calibrate verify`` finds the cell's entry without a note about a missing
    context."""
    import cv2

    from edge.episode import load_episode
    from edge.manifest import cache_identity, model_sha256

    assert cache_identity(SHIPPED) == CHAIN_MODEL_SHA256
    ref = ROOT / "models" / "reference"
    assert cache_identity(ref) == model_sha256(ref)
    frame = load_episode(SAMPLE / "calibration_256.npz").frames[0]
    video = device["tmp"] / "camera.avi"
    w = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 10, (256, 256))
    for _ in range(30):
        w.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    w.release()
    capsys.readouterr()
    assert main(["calibrate", "verify", "--camera", str(video), "--cell", "sample-cell",
                 "--cache-dir", device["cache"]]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("VALID") and "note:" not in out.err


def test_verify_under_a_chain_bundle_without_its_entry_says_how_to_store_the_chain(
        device, capsys):
    """The cell cached only for an ONNX model: the reference frame comes from that entry,
    and the note names the chain model and the chain's store command (not an ONNX
    context's, under an id the bundle list does not show)."""
    import cv2

    from edge.episode import load_episode

    cache = str(device["tmp"] / "cache-onnx")
    assert main(["calibrate", "store", str(SAMPLE / "calibration.npz"), "--model",
                 str(ROOT / "models" / "reference"), "--cache-dir", cache]) == 0
    frame = load_episode(SAMPLE / "calibration.npz").frames[0]
    video = device["tmp"] / "camera64.avi"
    w = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 10, frame.shape[1::-1])
    for _ in range(30):
        w.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    w.release()
    capsys.readouterr()
    assert main(["calibrate", "verify", "--camera", str(video), "--cell", "sample-cell",
                 "--cache-dir", cache]) == 0
    err = capsys.readouterr().err
    assert "is the chain model and the cache holds no chain calibration of cell " \
           "'sample-cell' yet" in err
    assert f"'syncedge calibrate store CALIBRATION.npz --chain --cache-dir {cache}'" in err
