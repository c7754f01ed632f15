"""Parity gates (pass and fail of each) and the bundle's refusal of unchecked, failed or
foreign parity records, with the recorded ``--force-unchecked`` escape hatch. No torch."""

from __future__ import annotations

import dataclasses
import json
import math
import tarfile

import pytest
from export_helpers import run_cli
from tiny_model import make_tiny_model, parity_record

from edge.bundle.format import BundleError, BundleManifest
from edge.manifest import load_model_dir, save_manifest
from export.variants.parity_gates import Gates, ParityError, judge, record_parity, require_parity


def _figures(max_abs: float = 1e-6, loss: float = 0.0) -> dict:
    return {"one_step_max_abs": {"encoder": 1e-7, "step_b1": max_abs},
            "rollout": {"psnr_loss_db": [0.0] * 15 + [loss]}}


@pytest.mark.parametrize(("variant", "figures", "passed"), [
    ("fp32", _figures(max_abs=9e-5), True),
    ("fp32", _figures(max_abs=2e-4), False),
    ("fp32", _figures(max_abs=math.nan), False),
    ("int8", _figures(loss=0.49), True),
    ("int8", _figures(loss=0.51), False),
    ("fp16", _figures(loss=0.09), True),
    ("fp16", _figures(loss=0.2), False),
    ("int8", _figures(loss=math.inf), False),
])
def test_gate_pass_and_fail(variant, figures, passed) -> None:
    g = judge(variant, figures, Gates())
    assert g["passed"] is passed and g["name"] == variant


def test_gate_names_missing_figures_and_unknown_variants() -> None:
    with pytest.raises(ParityError, match="parity figures for int8: missing"):
        judge("int8", {"one_step_max_abs": {"encoder": 0.0}}, Gates())
    with pytest.raises(ParityError, match="expected fp32, int8 or fp16, found 'bf16'"):
        judge("bf16", _figures(), Gates())


def test_record_parity_writes_status_and_graph_digest(tmp_path) -> None:
    model = make_tiny_model(tmp_path / "m", parity=None)
    rec = {"variant": "fp32", "gate": judge("fp32", _figures(), Gates())}
    record_parity(model, rec)
    man = load_model_dir(model)
    assert require_parity(man)["status"] == "passed"
    record_parity(model, {"variant": "fp32", "gate": judge("fp32", _figures(1.0), Gates())})
    with pytest.raises(ParityError, match="status is 'failed'.*must not ship"):
        require_parity(load_model_dir(model))


def _build(model, tmp_path, *extra: str) -> int:
    if not (tmp_path / "keys").exists():
        run_cli("bundle", "keygen", "--out", str(tmp_path / "keys"))
    return run_cli("bundle", "build", str(model), "--target", "cpu", "--key",
                   str(tmp_path / "keys" / "oem.key.pem"), "--out",
                   str(tmp_path / "m.bundle"), *extra)


def _bundle_manifest(path) -> BundleManifest:
    with tarfile.open(path, "r:gz") as tar:
        return BundleManifest.from_bytes(tar.extractfile("bundle.json").read())


def test_bundle_refuses_unchecked_model_unless_forced(tmp_path) -> None:
    model = make_tiny_model(tmp_path / "m", parity=None)
    with pytest.raises(BundleError, match="refusing to bundle: .*evaluation.parity is missing"):
        _build(model, tmp_path)
    assert not (tmp_path / "m.bundle").exists()
    assert _build(model, tmp_path, "--force-unchecked") == 0
    created = _bundle_manifest(tmp_path / "m.bundle").created
    assert created["parity"].startswith("forced: built with --force-unchecked (")
    assert "evaluation.parity is missing" in created["parity"]


def test_bundle_refuses_failed_model_unless_forced(tmp_path) -> None:
    model = make_tiny_model(tmp_path / "m", parity="failed")
    with pytest.raises(BundleError, match="status is 'failed'"):
        _build(model, tmp_path)
    assert _build(model, tmp_path, "--force-unchecked") == 0
    assert "status is 'failed'" in _bundle_manifest(tmp_path / "m.bundle").created["parity"]


def test_bundle_refuses_a_record_that_passed_loosened_gates(tmp_path, capsys) -> None:
    model = make_tiny_model(tmp_path / "m", parity=None)
    record_parity(model, {"variant": "fp32", "gates": {"horizon": 16},
                          "gate": judge("fp32", _figures(1e-3), Gates(fp32_max_abs=1e-2))})
    with pytest.raises(BundleError, match=r"passed gates looser than the defaults \(limit "
                                          r"0\.01 where the default is 0\.0001\).*export check "
                                          rf"{model} --run"):
        _build(model, tmp_path)
    record_parity(model, {"variant": "fp32", "gates": {"horizon": 2},
                          "gate": judge("fp32", _figures(), Gates())})
    with pytest.raises(BundleError, match="horizon 2 steps where the default is 16"):
        _build(model, tmp_path)
    assert _build(model, tmp_path, "--force-unchecked") == 0
    assert _bundle_manifest(tmp_path / "m.bundle").created["parity"].startswith("forced")
    capsys.readouterr()
    assert run_cli("bundle", "verify", str(tmp_path / "m.bundle"), "--pubkey",
                   str(tmp_path / "keys" / "oem.pub.pem")) == 0
    assert "warning: parity not passed: forced: built with --force-unchecked" in \
        capsys.readouterr().out


def test_bundle_refuses_a_record_made_for_other_graphs_or_variant(tmp_path) -> None:
    model = make_tiny_model(tmp_path / "m")
    other = load_model_dir(make_tiny_model(tmp_path / "other", seed=1))
    man = load_model_dir(model)
    save_manifest(dataclasses.replace(man, evaluation={"parity": parity_record(other)}),
                  model / "model.json")
    with pytest.raises(BundleError, match="recorded for other graphs"):
        _build(model, tmp_path)
    rec = {**parity_record(man), "variant": "int8"}
    save_manifest(dataclasses.replace(man, evaluation={"parity": rec}), model / "model.json")
    with pytest.raises(BundleError, match="parity is for variant 'int8', the model is 'fp32'"):
        _build(model, tmp_path)


def test_checked_model_bundles_with_parity_passed(tmp_path) -> None:
    model = make_tiny_model(tmp_path / "m")
    assert _build(model, tmp_path) == 0
    m = _bundle_manifest(tmp_path / "m.bundle")
    assert m.created["parity"] == "passed"
    json.dumps(dict(m.created))


NO_TORCH = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'mujoco'):
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
sys.path.insert(0, 'tests')
from pathlib import Path
from tiny_model import make_tiny_model
from export.variants.quantise import QuantiseOptions, quantise_model
from export.bundle.build import build_bundle, generate_keypair
import export.cli, export.variants.cli, export.variants.parity_gates, export.variants.quant_data
tmp = Path(sys.argv[1])
src = make_tiny_model(tmp / 'm')
quantise_model(QuantiseOptions(str(src), 'fp16', str(tmp / 'h'), command='t'))
priv, _, _ = generate_keypair(tmp / 'k')
build_bundle(src, tmp / 'b.bundle', target='cpu', private_key_path=priv)
print('ok')
"""


def test_quantise_and_bundle_build_need_no_torch(tmp_path) -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", NO_TORCH, str(tmp_path)], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")


def test_parity_table_names_its_columns_and_prints_no_negative_zero() -> None:
    from export.variants.parity_gates import format_parity_table

    rec = {"variant": "int8", "gate": judge("int8", _figures(), Gates()),
           "one_step_max_abs": {"encoder": 1e-7},
           "rollout": {"reference_psnr_db": [30.0, 29.0], "psnr_db": [30.0, 29.0001],
                       "psnr_loss_db": [0.0, -0.0001], "psnr_vs_fp32_db": [45.0, 44.0],
                       "latent_max_abs": [1e-3, 2e-3]}}
    text = format_parity_table({"m-int8": rec})
    assert "PSNR torch  PSNR int8" in text and "vs torch dB" in text
    assert "-0.000" not in text and "   0.000" in text and "44.00" in text


def _motion_figures(whole: float, motion: list[float | None]) -> dict:
    return {"rollout": {"psnr_loss_db": [whole] * len(motion), "motion_psnr_loss_db": motion}}


@pytest.mark.parametrize(("variant", "motion", "passed"), [
    ("int8", [0.1, 0.49, None], True),  # None: a step without moving pixels
    ("int8", [0.1, 0.51, None], False),  # the whole frame passes, the moving region fails
    ("fp16", [0.0, 0.11, 0.0], False),
    ("int8", [0.1, math.nan, 0.0], False),  # a broken rollout fails
])
def test_gate_covers_the_motion_region(variant, motion, passed) -> None:
    g = judge(variant, _motion_figures(0.05, motion), Gates())
    assert g["passed"] is passed
    assert "motion region" in g["metric"]
    assert g["region_values"]["whole_frame"] == 0.05
    if passed:
        assert g["value"] == g["region_values"]["motion_region"] == max(
            v for v in motion if v is not None)


def test_bundle_requires_the_motion_region_of_warp_records_only(tmp_path) -> None:
    latent = make_tiny_model(tmp_path / "m", variant="int8", parity=None)
    rec = {"variant": "int8", "gates": {"horizon": 16},
           "gate": judge("int8", _figures(loss=0.1), Gates())}
    record_parity(latent, rec)
    assert require_parity(load_model_dir(latent))["status"] == "passed"  # latent: as before
    man = load_model_dir(latent)
    warp = dataclasses.replace(man, contract=dataclasses.replace(
        man.contract, family="warp", state_layout={"pixels": (0, 2)}))
    with pytest.raises(ParityError, match="a warp-family int8 gate must also be measured in "
                                          "the motion region"):
        require_parity(warp)
    rec["gate"] = judge("int8", _motion_figures(0.1, [0.2] * 16), Gates())
    record_parity(latent, rec)
    man = load_model_dir(latent)
    assert require_parity(dataclasses.replace(man, contract=warp.contract))["status"] == "passed"
