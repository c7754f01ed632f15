"""Every config and manifest format goes through the one strict reader: for each of
model.json, bundle.json/bundle.sig, pre-check rules, robot specs and episode metadata a wrong
type and a value outside the allowed ones are refused, naming the file and the key path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edge.bundle.format import BundleError, BundleFile, BundleManifest, BundleSignature
from edge.calibrate.errors import PlanError
from edge.calibrate.spec import load_robot_spec, robot_spec_from_dict
from edge.episode import EpisodeMetadata, load_episode, save_episode
from edge.errors import ConfigError, EpisodeError
from edge.manifest import ManifestError, ModelManifest, load_manifest
from edge.precheck.rules import load_rules
from edge.runtime.errors import RulesError
from tests.helpers import make_episode

ROOT = Path(__file__).resolve().parent.parent
LATENT = ROOT / "models" / "latent-reference"


def _message(error: type[Exception], call, *args) -> str:
    with pytest.raises(error) as info:
        call(*args)
    assert isinstance(info.value, ConfigError), type(info.value).__mro__
    return str(info.value)


# model.json ------------------------------------------------------------------------------

def _model() -> dict:
    return json.loads((LATENT / "model.json").read_text())


def _model_message(d: dict) -> str:
    return _message(ManifestError, ModelManifest.from_json_dict, d, "m/model.json")


def test_model_json_residual_decoding_no_is_refused(tmp_path: Path) -> None:
    d = _model()
    d["contract"]["residual_decoding"] = "no"
    (tmp_path / "model.json").write_text(json.dumps(d))
    msg = _message(ManifestError, load_manifest, tmp_path / "model.json")
    assert msg == (f"{tmp_path / 'model.json'}:contract.residual_decoding: expected true or "
                   f"false, found 'no'")


@pytest.mark.parametrize("where, value, message", [
    (("opset",), "18", "m/model.json:opset: expected an integer, found '18'"),
    (("name",), 5, "m/model.json:name: expected a string, found 5"),
    (("graphs", "encoder", "batch"), "1",
     "m/model.json:graphs.encoder.batch: expected an integer, found '1'"),
    (("graphs", "encoder", "sha256"), None,
     "m/model.json:graphs.encoder.sha256: expected a string, found null"),
    (("contract", "history_length"), "4",
     "m/model.json:contract.history_length: expected an integer, found '4'"),
    (("provenance",), [], "m/model.json:provenance: expected a mapping, found []"),
])
def test_model_json_wrong_type(where: tuple[str, ...], value: object, message: str) -> None:
    d = _model()
    node = d
    for k in where[:-1]:
        node = node[k]
    node[where[-1]] = value
    assert _model_message(d) == message


def test_model_json_value_outside_the_allowed_ones() -> None:
    d = _model()
    d["variant"] = "bf16"
    assert _model_message(d) == ("m/model.json:variant: expected one of ['fp32', 'int8', "
                                 "'fp16'], found 'bf16'")
    d = _model()
    d["contract"]["uint8_conversion"] = "round"
    assert _model_message(d) == ("m/model.json:contract.uint8_conversion: expected one of "
                                 "['clip01_round_half_up_nan_error'], found 'round'")
    d = _model()
    d["graphs"]["encoder"]["inputs"][0]["dtype"] = "float64"
    assert _model_message(d).startswith("m/model.json:graphs.encoder.inputs[0].dtype: expected "
                                        "one of ['float32', ")


def test_model_json_unknown_and_missing_keys() -> None:
    d = _model()
    d["colour"] = "red"
    assert _model_message(d).startswith("m/model.json:colour: unknown key; expected one of "
                                        "['contract', ")
    d = _model()
    del d["contract"]["max_dof"]
    assert _model_message(d) == "m/model.json:contract.max_dof: missing key; expected an integer"


# bundle.json and bundle.sig ----------------------------------------------------------------

def _bundle() -> dict:
    m = BundleManifest(target="cpu", model_name="m", model_variant="fp32",
                       model_sha256="0" * 64, files=(BundleFile("model.json", "1" * 64, 9),),
                       created={"utc": "2026-01-01T00:00:00Z"}, key_id="2" * 16)
    return json.loads(m.to_bytes())


def _bundle_message(d: dict) -> str:
    return _message(BundleError, BundleManifest.from_bytes, json.dumps(d).encode(),
                    "a.bundle:bundle.json")


def test_bundle_manifest_wrong_type() -> None:
    d = _bundle()
    d["files"]["model.json"]["size"] = "9"
    assert _bundle_message(d) == ("a.bundle:bundle.json:files.model.json.size: expected an "
                                  "integer, found '9'")
    d = _bundle()
    d["created"]["utc"] = 2026
    assert _bundle_message(d) == "a.bundle:bundle.json:created.utc: expected a string, found 2026"
    d = _bundle()
    d["model"] = ["m"]
    assert _bundle_message(d) == "a.bundle:bundle.json:model: expected a mapping, found ['m']"


def test_bundle_manifest_value_outside_the_allowed_ones() -> None:
    d = _bundle()
    d["model"]["variant"] = "bf16"
    assert _bundle_message(d) == ("a.bundle:bundle.json:model.variant: expected one of "
                                  "['fp32', 'int8', 'fp16', 'numpy'], found 'bf16'")
    d = _bundle()
    d["target"] = "gpu"
    assert _bundle_message(d).startswith("a.bundle:bundle.json:target: unknown target 'gpu'; "
                                         "expected one of ['cpu', ")


def test_bundle_manifest_unknown_and_missing_keys() -> None:
    d = _bundle()
    d["model"]["colour"] = "red"
    assert _bundle_message(d) == ("a.bundle:bundle.json:model.colour: unknown key; expected "
                                  "one of ['model_json_sha256', 'name', 'variant']")
    d = _bundle()
    del d["key_id"]
    assert _bundle_message(d) == "a.bundle:bundle.json:key_id: missing key; expected a string"


def test_bundle_signature_wrong_type_and_unknown_algorithm() -> None:
    good = json.loads(BundleSignature("2" * 16, b"\0" * 64).to_bytes())
    bad = dict(good, key_id=16)
    assert _message(BundleError, BundleSignature.from_bytes, json.dumps(bad).encode(),
                    "a.bundle:bundle.sig") == ("a.bundle:bundle.sig:key_id: expected a string, "
                                               "found 16")
    bad = dict(good, algorithm="rsa")
    assert _message(BundleError, BundleSignature.from_bytes, json.dumps(bad).encode(),
                    "a.bundle:bundle.sig") == ("a.bundle:bundle.sig:algorithm: expected one of "
                                               "['ed25519'], found 'rsa'")


# pre-check rules ----------------------------------------------------------------------------

_RULES = ("keep_out:\n  motion_threshold: 20\n  regions:\n"
          "    - {name: belt, polygon: [[0, 0], [0.5, 0], [0.5, 1]]}\n")


def _rules_message(tmp_path: Path, text: str) -> str:
    p = tmp_path / "rules.yaml"
    p.write_text(text)
    return _message(RulesError, load_rules, p).replace(str(p), "rules.yaml")


def test_rules_wrong_type(tmp_path: Path) -> None:
    assert _rules_message(tmp_path, _RULES.replace("belt", "5")) == \
        "rules.yaml:keep_out.regions[0].name: expected a string, found 5"
    assert _rules_message(tmp_path, "keep_out:\n") == \
        "rules.yaml:keep_out: expected a mapping, found null"
    assert _rules_message(tmp_path, "goal: {image: g.npy, min_ssim: high}\n") == \
        "rules.yaml:goal.min_ssim: expected a finite number, found 'high'"


def test_rules_value_outside_the_allowed_ones(tmp_path: Path) -> None:
    assert _rules_message(tmp_path, _RULES + "  basis: pixels\n") == \
        ("rules.yaml:keep_out.basis: expected one of ['auto', 'robot_mask', 'motion'], "
         "found 'pixels'")


def test_rules_unknown_and_missing_keys(tmp_path: Path) -> None:
    assert _rules_message(tmp_path, _RULES + "  colour: red\n").startswith(
        "rules.yaml:keep_out.colour: unknown key; expected one of ['basis', ")
    assert _rules_message(tmp_path, "goal: {image: g.npy}\n") == \
        "rules.yaml:goal.min_ssim: missing key; expected a finite number"


# robot specs --------------------------------------------------------------------------------

def _spec(**over) -> dict:
    d = {"robot": "toy", "frame_rate_hz": 10, "dofs": [
        {"name": "a", "lower": -1.0, "upper": 1.0, "home": 0.0, "sweep_max": 0.5}]}
    d.update(over)
    return d


def _spec_message(d: dict) -> str:
    return _message(PlanError, robot_spec_from_dict, d, "r.yaml")


def test_robot_spec_wrong_type() -> None:
    assert _spec_message(_spec(segment_frames=8.0)) == \
        "r.yaml:segment_frames: expected an integer, found 8.0"
    d = _spec()
    d["dofs"][0]["home"] = "0"
    assert _spec_message(d) == "r.yaml:dofs[0].home: expected a finite number, found '0'"
    assert _spec_message(_spec(robot=["toy"])) == "r.yaml:robot: expected a string, found ['toy']"


def test_robot_spec_value_outside_the_allowed_ones() -> None:
    d = _spec()
    d["dofs"][0]["unit"] = "deg"
    assert _spec_message(d) == "r.yaml:dofs[0].unit: expected one of ['rad', 'm'], found 'deg'"


def test_robot_spec_unknown_and_missing_keys(tmp_path: Path) -> None:
    d = _spec()
    d["dofs"][0]["colour"] = "red"
    assert _spec_message(d).startswith("r.yaml:dofs[0].colour: unknown key; expected one of "
                                       "['home', ")
    d = _spec()
    del d["dofs"][0]["home"]
    assert _spec_message(d) == "r.yaml:dofs[0].home: missing key; expected a finite number"
    p = tmp_path / "toy.yaml"
    p.write_text("robot: toy\ndofs: []\n")
    assert _message(PlanError, load_robot_spec, p) == \
        f"{p}:frame_rate_hz: missing key; expected a finite number"


def test_robot_spec_refuses_a_key_given_twice(tmp_path) -> None:
    p = tmp_path / "toy.yaml"
    p.write_text("robot: toy\nframe_rate_hz: 10\nframe_rate_hz: 30\ndofs: []\n")
    assert "the key 'frame_rate_hz' is given twice (first at line 2)" in \
        _message(PlanError, load_robot_spec, p)
    j = tmp_path / "toy.json"
    j.write_text('{"robot": "toy", "robot": "other", "frame_rate_hz": 10, "dofs": []}')
    assert "the key 'robot' is given twice" in _message(PlanError, load_robot_spec, j)


def test_robot_spec_reads_its_numbers_as_floats() -> None:
    d = _spec(frame_rate_hz=10)
    d["dofs"][0]["home"] = 0
    spec = robot_spec_from_dict(d)
    assert type(spec.frame_rate_hz) is float and type(spec.dofs[0].home) is float


# episode metadata ---------------------------------------------------------------------------

def _episode_with(tmp_path: Path, **over) -> Path:
    path = save_episode(make_episode(kind="calibration"), tmp_path / "e.npz")
    with np.load(path) as npz:
        data = {k: npz[k] for k in npz.files}
    meta = json.loads(data["metadata_json"].tobytes())
    meta.update(over)
    data["metadata_json"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez_compressed(path, **data)
    return path


def _episode_error(path: Path) -> EpisodeError:
    with pytest.raises(EpisodeError) as info:
        load_episode(path)
    assert isinstance(info.value, ConfigError)
    return info.value


@pytest.mark.parametrize("over, field, message", [
    (dict(dof_names="j0j"), "metadata.dof_names", "expected a list of strings, found 'j0j'"),
    (dict(fps="10"), "metadata.fps", "expected a finite number, found '10'"),
    (dict(camera=[]), "metadata.camera", "expected a mapping, found []"),
    (dict(split=3), "metadata.split", "expected a string or null, found 3"),
    (dict(segments=[{"dof": "j0", "start": "0", "stop": 2, "amplitude": 0.3}]),
     "metadata.segments[0].start", "expected an integer, found '0'"),
])
def test_episode_metadata_wrong_type(tmp_path: Path, over: dict, field: str,
                                     message: str) -> None:
    path = _episode_with(tmp_path, **over)
    err = _episode_error(path)
    assert str(err) == f"{path}: field '{field}': {message}"
    assert err.field == field


def test_episode_metadata_value_outside_the_allowed_ones(tmp_path: Path) -> None:
    path = _episode_with(tmp_path, dof_units=["rad", "rad", "deg"])
    err = _episode_error(path)
    assert str(err) == f"{path}: field 'metadata.dof_units[2]': expected one of ['rad', 'm'], " \
                       f"found 'deg'"
    path = _episode_with(tmp_path, kind="training")
    assert str(_episode_error(path)) == (f"{path}: field 'metadata.kind': expected one of "
                                         f"['calibration', 'motion', 'validation'], found "
                                         f"'training'")


def test_episode_metadata_in_memory_keeps_the_field_format() -> None:
    d = make_episode().metadata.to_json_dict()
    d["segments"] = [{"dof": "j0", "start": 0, "stop": 2, "amplitude": 0.3, "colour": 1}]
    with pytest.raises(EpisodeError) as info:
        EpisodeMetadata.from_json_dict(d)
    assert str(info.value) == ("field 'metadata.segments[0]': unknown key(s) ['colour']; "
                               "expected only ['amplitude', 'dof', 'start', 'stop']")
