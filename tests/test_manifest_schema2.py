"""model.json schema 2: value types and allowed values are checked, schema 1 is refused with
the upgrade command, and the upgrade rewrites it without touching the graphs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from edge.cli import main
from edge.manifest import (
    MANIFEST_SCHEMA_VERSION,
    ManifestError,
    ModelManifest,
    load_model_dir,
    upgrade_manifest_dict,
)
from edge.runtime.model import load_model

ROOT = Path(__file__).resolve().parent.parent
LATENT = ROOT / "models" / "latent-reference"
NEW_KEYS = ("family", "calibration_mode", "warping", "calibration_amplitude_rad",
            "state_layout", "decoder_outputs")


def _manifest() -> dict:
    return json.loads((LATENT / "model.json").read_text())


def _schema1(d: dict) -> dict:
    d = json.loads(json.dumps(d))
    d["schema_version"] = 1
    for k in NEW_KEYS:
        d["contract"].pop(k, None)
    return d


@pytest.mark.parametrize("key,value,message", [
    ("residual_decoding", "no", "expected true or false"),
    ("history_length", "4", "expected an integer"),
    ("history_length", True, "expected an integer"),
    ("uint8_conversion", "round", "expected one of"),
    ("family", "diffusion", "expected one of"),
    ("calibration_amplitude_rad", [0.5, 0.2], "above high"),
    ("frame_rate_hz", 0, "expected a number > 0"),
    ("decoder_outputs", ["robot_mask"], "expected \\['frames'\\]"),
    ("latent_shape", [8, 16], "a list of 3 integers"),
])
def test_contract_values_are_type_checked(key: str, value: object, message: str) -> None:
    d = _manifest()
    d["contract"][key] = value
    with pytest.raises(ManifestError, match=f"contract.{key}.*{message}"):
        ModelManifest.from_json_dict(d, "m/model.json")


def test_the_shipped_latent_manifest_parses() -> None:
    man = ModelManifest.from_json_dict(_manifest())
    assert man.contract.family == "latent" and man.contract.residual_decoding is False


def test_a_warp_contract_needs_its_state_layout() -> None:
    d = _manifest()
    d["contract"]["family"] = "warp"
    with pytest.raises(ManifestError, match="state_layout"):
        ModelManifest.from_json_dict(d)


def test_schema1_is_refused_with_the_upgrade_command() -> None:
    with pytest.raises(ManifestError, match=r"syncedge export upgrade models/x"):
        ModelManifest.from_json_dict(_schema1(_manifest()), "models/x/model.json")


def test_upgrade_fills_the_latent_defaults() -> None:
    up = upgrade_manifest_dict(_schema1(_manifest()))
    assert up["schema_version"] == MANIFEST_SCHEMA_VERSION
    c = up["contract"]
    assert (c["family"], c["warping"], c["calibration_amplitude_rad"]) == \
        ("latent", "none", [0.3, 0.5])
    assert upgrade_manifest_dict(up) == up


def test_upgrade_command_rewrites_an_old_folder_the_runtime_then_loads(tmp_path: Path,
                                                                       capsys) -> None:
    folder = tmp_path / "old"
    shutil.copytree(LATENT, folder)
    (folder / "model.json").write_text(json.dumps(_schema1(_manifest())))
    assert main(["simulate", "--model", str(folder), "--calibration",
                 str(ROOT / "samples/cell_sample/calibration.npz"), "--start",
                 str(ROOT / "samples/cell_sample/test.npz"), "--out", str(tmp_path / "s")]) == 2
    assert f"syncedge export upgrade {folder}" in capsys.readouterr().err
    assert main(["export", "upgrade", str(folder)]) == 0
    assert "schema 1 -> 2" in capsys.readouterr().out
    assert load_model_dir(folder).contract.family == "latent"
    model = load_model(folder)
    model.deactivate()


def test_a_schema1_bundle_names_the_folder_it_was_built_from_not_a_temporary_one(
        tmp_path: Path, capsys, monkeypatch) -> None:
    from edge.bundle.keys import add_key
    from export.bundle.build import generate_keypair, load_private_key, pack_bundle

    folder = tmp_path / "old"
    shutil.copytree(LATENT, folder)
    (folder / "model.json").write_text(json.dumps(_schema1(_manifest())))
    priv, pub, _kid = generate_keypair(tmp_path / "keys", "oem")
    bundle = tmp_path / "old.bundle"
    pack_bundle({p.name: p for p in folder.iterdir() if p.is_file()}, bundle, target="cpu",
                model_name=_manifest()["name"], model_variant=_manifest()["variant"],
                private_key=load_private_key(priv))
    monkeypatch.setenv("SYNCEDGE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SYNCEDGE_TARGET", "cpu")
    add_key(pub, tmp_path / "home" / "bundles" / "keys")
    for argv in (["bundle", "verify", str(bundle), "--pubkey", str(pub)],
                 ["bundle", "install", str(bundle)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "schema_version 1 is an older model schema" in err, err
        assert ("on the build machine upgrade the model folder this bundle was built from "
                "('syncedge export upgrade MODEL_DIR')") in err
        assert "syncedge-verify" not in err and ".partial" not in err and str(tmp_path / "home") not in err
