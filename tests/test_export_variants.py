"""Export at smoke size: ``export onnx``, ``export quantise`` (INT8 QDQ, FP16), the
quantisation calibration set (training cells only) and the parity gates of ``export check``,
ending in ``bundle build`` accepting checked variants and refusing failed ones; for the
latent family (a 2-step smoke run) and the warp family (a tiny randomly initialised
``warp.pt`` on the same cells)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from export_helpers import (
    make_smoke_run,
    nudge_first_weight,
    perturb_model,
    poison_output,
    run_cli,
    whiten_output,
)
from onnx import TensorProto, numpy_helper

from edge.bundle.format import BundleError
from edge.manifest import load_model_dir, save_manifest
from export.errors import ExportError
from export.variants.quant_data import build_quant_calibration_set, load_quant_calibration_cells
from export.variants.quantise import REDUCED_PRECISION_OPS


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("export")
    data, run = make_smoke_run(root)
    paths = {"root": root, "data": data, "run": run, "fp32": root / "fp32",
             "int8": root / "int8", "fp16": root / "fp16"}
    assert run_cli("export", "onnx", "--run", str(run), "--out", str(paths["fp32"])) == 0
    for v in ("int8", "fp16"):
        assert run_cli("export", "quantise", str(paths["fp32"]), "--variant", v, "--data",
                       str(data), "--out", str(paths[v]), "--samples", "8") == 0
    return paths


def test_int8_says_when_fewer_training_cells_than_asked_set_its_scales(smoke, tmp_path,
                                                                        capsys) -> None:
    capsys.readouterr()
    assert run_cli("export", "quantise", str(smoke["fp32"]), "--variant", "int8", "--data",
                   str(smoke["data"]), "--out", str(tmp_path / "q"), "--samples", "2",
                   "--max-cells", "4") == 0
    out = capsys.readouterr().out
    assert "note: the INT8 scales come from 1 training cell (all under " in out
    assert "fewer than --max-cells 4" in out


def _graphs(folder: Path) -> dict[str, onnx.ModelProto]:
    man = load_model_dir(folder)
    return {k: onnx.load(str(folder / g.file)) for k, g in man.graphs.items()}


def _producers(m: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    return {o: n for n in m.graph.node for o in n.output}


def test_every_variant_passes_checker_and_strict_shape_inference(smoke) -> None:
    for v in ("fp32", "int8", "fp16"):
        man = load_model_dir(smoke[v])
        assert man.variant == v and 18 <= man.opset <= 20
        for key, m in _graphs(smoke[v]).items():
            onnx.checker.check_model(m, full_check=True)
            onnx.shape_inference.infer_shapes(m, strict_mode=True, check_type=True)
            ins = [(i.name, i.type.tensor_type.elem_type) for i in m.graph.input]
            want = [(t.name, TensorProto.UINT8 if t.dtype == "uint8" else TensorProto.FLOAT)
                    for t in man.graphs[key].inputs]
            assert ins == want, (v, key)
    fp32, int8 = load_model_dir(smoke["fp32"]), load_model_dir(smoke["int8"])
    assert all(int8.graphs[k].sha256 != g.sha256 for k, g in fp32.graphs.items())


def test_quantised_manifest_names_source_and_quantisation_calibration_set(smoke) -> None:
    man = load_model_dir(smoke["int8"])
    prov = man.provenance
    assert prov["source_model"]["variant"] == "fp32"
    assert prov["source_model"]["path"] == str(smoke["fp32"])
    qset = prov["quantisation"]["quantisation_calibration_set"]
    assert qset["split"] == "train" and qset["cells"] == ["train-0000-000"]
    assert qset["samples"]["step_b16"] == 8 and qset["samples"]["encoder"] == 8
    assert man.evaluation == {}


def test_quantisation_calibration_set_uses_training_cells_only(smoke, tmp_path) -> None:
    from edge.runtime.model import load_model

    with load_model(smoke["fp32"]) as wm:
        qset = build_quant_calibration_set(wm, smoke["data"], samples=4)
    assert qset.cell_ids == ("train-0000-000",)
    feeds = qset.for_graph("step_b16")[0]
    assert feeds["history_latents"].shape == (16, 4, 8, 16, 16)
    assert feeds["context"].shape == (7, 16, 16, 16)
    with pytest.raises(ExportError, match="split 'test_all' refused; the set is drawn from "
                                          "the training split 'train' only"):
        load_quant_calibration_cells(smoke["data"], split="test_all")
    # A held-out chunk copied into the training folder is recognised and refused.
    fake = tmp_path / "cells"
    shutil.copytree(smoke["data"] / "test_all", fake / "train")
    with pytest.raises(ExportError, match="records split 'test_all', expected 'train'"):
        load_quant_calibration_cells(fake)


def test_int8_is_symmetric_qdq_with_normalisation_in_float(smoke) -> None:
    fp32 = _graphs(smoke["fp32"])
    for key, m in _graphs(smoke["int8"]).items():
        inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
        qdq = [n for n in m.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
        assert qdq, key
        for n in qdq:
            zp = inits[n.input[2]]
            assert zp.dtype == np.int8 and not zp.any(), (key, n.name)
        assert not [n.op_type for n in m.graph.node if n.op_type.startswith("QLinear")
                    or n.op_type.endswith("Integer")]
        # every weight feeding a DequantizeLinear is int8
        assert {inits[n.input[0]].dtype for n in qdq if n.op_type == "DequantizeLinear"
                and n.input[0] in inits} == {np.dtype(np.int8)}
        # nodes other than Q/DQ are the FP32 graph's: nothing was replaced or removed
        kinds = [n.op_type for n in m.graph.node if n.op_type not in
                 ("QuantizeLinear", "DequantizeLinear")]
        assert sorted(kinds) == sorted(n.op_type for n in fp32[key].graph.node)
        prod = _producers(m)
        for n in m.graph.node:
            if n.op_type in (*REDUCED_PRECISION_OPS, "QuantizeLinear", "DequantizeLinear"):
                continue
            if n.op_type in ("Cast", "Div", "Where", "Equal", "ReduceMax", "Greater", "Abs"):
                # normalisation and the calibration graph's selection/division: float inputs
                assert all(prod.get(i) is None or prod[i].op_type != "DequantizeLinear"
                           for i in n.input), (key, n.name)
    enc = _graphs(smoke["int8"])["encoder"]
    cast = next(n for n in enc.graph.node if n.op_type == "Cast")
    assert cast.input[0] == "frames"  # uint8 -> float, then x/255 in float
    for key in ("decoder_b1", "step_b1"):  # outputs come from float ops (Sigmoid, Add)
        m = _graphs(smoke["int8"])[key]
        assert _producers(m)[m.graph.output[0].name].op_type in ("Sigmoid", "Add")


def test_fp16_keeps_io_and_normalisation_in_float32(smoke) -> None:
    for key, m in _graphs(smoke["fp16"]).items():
        inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
        types = {v.name: v.type.tensor_type.elem_type for v in
                 (*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output)}
        types.update({t.name: t.data_type for t in m.graph.initializer})
        assert all(o.type.tensor_type.elem_type == TensorProto.FLOAT for o in m.graph.output)
        convs = [n for n in m.graph.node if n.op_type in REDUCED_PRECISION_OPS]
        assert convs and all(types[n.input[1]] == TensorProto.FLOAT16 for n in convs), key
        for n in m.graph.node:
            if n.op_type in ("Div", "Where", "ReduceMax", "Sigmoid", "Einsum"):
                assert all(types.get(i) != TensorProto.FLOAT16 for i in n.input if i), \
                    (key, n.name)


def test_check_passes_records_parity_and_bundles(smoke, tmp_path, capsys) -> None:
    dirs = [str(smoke[v]) for v in ("fp32", "int8", "fp16")]
    out = tmp_path / "parity.json"
    assert run_cli("export", "check", *dirs, "--run", str(smoke["run"]), "--data",
                   str(smoke["data"]), "--out", str(out)) == 0
    text = capsys.readouterr().out
    assert "[int8]  PASSED" in text and "3 passed, 0 failed" in text
    records = json.loads(out.read_text())
    fp32 = records[dirs[0]]
    assert fp32["gate"]["passed"] and fp32["gate"]["value"] <= 1e-4
    assert set(fp32["one_step_max_abs"]) == {"encoder", "calibration", "step_b1", "step_b16",
                                             "decoder_b1", "decoder_b16"}
    assert len(fp32["rollout"]["psnr_loss_db"]) == 16
    assert fp32["cells"] == ["test_all-0000-000", "test_convention-0000-000"]
    for d in dirs:
        rec = load_model_dir(d).evaluation["parity"]
        assert rec["status"] == "passed" and (Path(d) / "parity.json").is_file()
    assert run_cli("bundle", "keygen", "--out", str(tmp_path / "keys")) == 0
    assert run_cli("bundle", "build", dirs[1], "--target", "cpu", "--key",
                   str(tmp_path / "keys" / "oem.key.pem"), "--out",
                   str(tmp_path / "int8.bundle")) == 0
    assert "parity passed" in capsys.readouterr().out


def test_check_refuses_the_training_split(smoke) -> None:
    with pytest.raises(ExportError, match="held-out cells only"):
        run_cli("export", "check", str(smoke["fp32"]), "--run", str(smoke["run"]),
                "--data", str(smoke["data"]), "--split", "train")


def test_perturbed_graphs_fail_their_gates_and_bundle_refuses(smoke, tmp_path,
                                                              capsys) -> None:
    bad32 = perturb_model(smoke["fp32"], tmp_path / "fp32-bad", lambda k: k == "step_b1",
                          nudge_first_weight)
    bad8 = perturb_model(smoke["int8"], tmp_path / "int8-bad",
                         lambda k: k.startswith("decoder"), whiten_output)
    nan16 = perturb_model(smoke["fp16"], tmp_path / "fp16-nan", lambda k: k == "decoder_b1",
                          poison_output)
    assert run_cli("export", "check", str(bad32), str(bad8), str(nan16), "--run",
                   str(smoke["run"]), "--data", str(smoke["data"])) == 1
    text = capsys.readouterr().out
    assert "0 passed, 3 failed (bundle build refuses" in text and "FAILED: NaN/inf" in text
    r16 = load_model_dir(nan16).evaluation["parity"]
    assert r16["status"] == "failed" and r16["gate"]["value"] is None
    assert r16["one_step_max_abs"]["decoder_b1"] is None
    r32 = load_model_dir(bad32).evaluation["parity"]
    assert r32["status"] == "failed" and r32["one_step_max_abs"]["step_b1"] > 1e-4
    assert r32["one_step_max_abs"]["step_b16"] <= 1e-4
    r8 = load_model_dir(bad8).evaluation["parity"]
    assert r8["status"] == "failed" and r8["gate"]["value"] > 0.5
    run_cli("bundle", "keygen", "--out", str(tmp_path / "keys"))
    key = str(tmp_path / "keys" / "oem.key.pem")
    for bad in (bad32, bad8):
        with pytest.raises(BundleError, match="evaluation.parity.status is 'failed'"):
            run_cli("bundle", "build", str(bad), "--target", "cpu", "--key", key, "--out",
                    str(tmp_path / "x.bundle"))
    assert not (tmp_path / "x.bundle").exists()


def test_quantise_refuses_bad_sources(smoke, tmp_path) -> None:
    with pytest.raises(ExportError, match="variant 'int8'; quantise the FP32 model folder"):
        run_cli("export", "quantise", str(smoke["int8"]), "--variant", "fp16", "--out",
                str(tmp_path / "x"))
    with pytest.raises(ExportError, match="--data: INT8 needs the cells root"):
        run_cli("export", "quantise", str(smoke["fp32"]), "--variant", "int8", "--out",
                str(tmp_path / "x"))
    with pytest.raises(ExportError, match="must differ from the source model folder"):
        run_cli("export", "quantise", str(smoke["fp32"]), "--variant", "fp16", "--out",
                str(smoke["fp32"]))


# -- the warp family -----------------------------------------------------------------------

WARP_SIZES = {"feat_channels": 8, "motion_channels": 8, "global_channels": 4,
              "summary_channels": 4, "cal_width": 8, "dec_width": 8}


@pytest.fixture(scope="module")
def warp(smoke, tmp_path_factory) -> dict[str, Path]:
    """A tiny randomly initialised warp model on the smoke cells: its run, FP32 folder and
    INT8/FP16 variants."""
    import torch

    from export.models.warp import WarpConfig, WarpModel
    from export.variants.warp_export import export_warp_model

    root = tmp_path_factory.mktemp("warp")
    run = root / "run"
    run.mkdir()
    torch.manual_seed(0)
    cfg = WarpConfig(**WARP_SIZES)
    torch.save({"model": WarpModel(cfg).state_dict(), "config": cfg.to_dict(), "step": 0,
                "options": {}, "history": [], "cells": 0}, run / "warp.pt")
    paths = {"run": run, "data": smoke["data"], "fp32": root / "fp32", "int8": root / "int8",
             "fp16": root / "fp16"}
    export_warp_model(str(run), str(paths["fp32"]))
    for v in ("int8", "fp16"):
        assert run_cli("export", "quantise", str(paths["fp32"]), "--variant", v, "--data",
                       str(smoke["data"]), "--out", str(paths[v]), "--samples", "8") == 0
    return paths


def test_warp_quantisation_feeds_are_fp32_rollout_states(warp) -> None:
    """The decoder and step feeds are states of the FP32 step graph rolled out over the
    training cell's motion actions (horizons 1..16), never the encoder's zero-motion state."""
    from edge.runtime.model import load_model
    from export.variants.quant_data import ROLLOUT_HORIZON, rollout_states

    (train,) = load_quant_calibration_cells(warp["data"])
    mo = train.motions[0]
    acts = mo.actions.copy()
    acts[:, train.num_dof:] = 0.0
    with load_model(warp["fp32"]) as wm:
        lay = wm.contract.state_layout
        qset = build_quant_calibration_set(wm, warp["data"], samples=4)
        cal_lat = np.stack([wm.encode(f) for f in train.cal_frames])
        ctx = wm.calibrate(cal_lat, train.cal_actions, train.dof_mask)
        # the episode's stretches: frames 0..16 and 16..19
        states = {0: rollout_states(wm, wm.encode(mo.frames[0]), acts[:ROLLOUT_HORIZON], ctx),
                  16: rollout_states(wm, wm.encode(mo.frames[16]), acts[16:19], ctx)}
    assert "rolled out" in qset.describe()["states"]
    a, b = lay["motion"]
    horizons: set[tuple[int, int]] = set()
    decs = [r for f in qset.for_graph("decoder_b16") + qset.for_graph("decoder_b1")
            for r in f["latents"]]
    assert len(decs) == 4 * 17
    for row in decs:
        assert np.abs(row[a:b]).max() > 0  # moved: never a start state (zero motion)
        hits = [(s, h) for s, z in states.items() for h in range(1, len(z))
                if np.allclose(row, z[h], atol=1e-6)]
        assert hits, "a decoder feed that is not a rolled-out state"
        horizons.add(hits[0])
    assert len(horizons) > 5  # several horizons, not one
    for f in qset.for_graph("step_b16"):
        for hist, act in zip(f["history_latents"], f["action"], strict=True):
            newest = hist[-1]
            hits = [(s, h) for s, z in states.items() for h in range(len(z) - 1)
                    if np.allclose(newest, z[h], atol=1e-6)
                    and np.allclose(act, acts[s + h])]
            assert hits, "a step window that is not on a rollout"
    # the calibration graph still reads encoder outputs: zero motion there
    assert not np.abs(qset.for_graph("calibration")[0]["calibration_latents"][:, a:b]).any()


def test_latent_quantisation_feeds_stay_encoder_latents(smoke) -> None:
    from edge.runtime.model import load_model

    (train,) = load_quant_calibration_cells(smoke["data"])
    with load_model(smoke["fp32"]) as wm:
        qset = build_quant_calibration_set(wm, smoke["data"], samples=2)
        z = np.stack([wm.encode(f) for f in train.motions[0].frames])
    assert qset.describe()["states"].startswith("encoder latents")
    for row in qset.for_graph("decoder_b16")[0]["latents"]:
        assert np.abs(z - row).reshape(len(z), -1).max(1).min() == 0.0


def test_warp_check_passes_in_the_motion_region_and_bundles(warp, smoke, tmp_path,
                                                           capsys) -> None:
    dirs = [str(warp[v]) for v in ("fp32", "int8", "fp16")]
    out = tmp_path / "parity.json"
    assert run_cli("export", "check", *dirs, "--run", str(warp["run"]), "--data",
                   str(warp["data"]), "--out", str(out)) == 0
    text = capsys.readouterr().out
    assert "3 passed, 0 failed" in text and "motion loss" in text
    records = json.loads(out.read_text())
    fp32 = records[dirs[0]]
    assert fp32["gate"]["passed"]
    assert {"decoder_b1.robot_mask", "decoder_b16.robot_mask"} <= set(fp32["one_step_max_abs"])
    assert fp32["run"] == str(warp["run"])
    for d in dirs[1:]:
        rec = records[d]
        ro = rec["rollout"]
        assert len(ro["motion_psnr_loss_db"]) == 16 and ro["motion_threshold"] == 8
        assert all(n == 2 for n in ro["motion_cells"])  # both cells move at every step
        assert 0 < min(ro["motion_fraction"]) and max(ro["motion_fraction"]) < 1
        regions = rec["gate"]["region_values"]
        assert regions["motion_region"] == pytest.approx(max(ro["motion_psnr_loss_db"]))
        assert rec["gate"]["value"] == max(regions.values())
        assert "motion region" in rec["gate"]["metric"]
    assert run_cli("bundle", "keygen", "--out", str(tmp_path / "keys")) == 0
    for d in dirs[1:]:
        assert run_cli("bundle", "build", d, "--target", "cpu", "--key",
                       str(tmp_path / "keys" / "oem.key.pem"), "--out",
                       str(tmp_path / f"{Path(d).name}.bundle")) == 0  # never overwritten
        assert "parity passed" in capsys.readouterr().out
    # a warp INT8 record without the motion region (an older check) is refused
    old = tmp_path / "int8-whole-frame-only"
    shutil.copytree(dirs[1], old)
    man = load_model_dir(old)
    rec = dict(man.evaluation["parity"])
    rec["gate"] = {k: v for k, v in rec["gate"].items() if k != "region_values"}
    save_manifest(dataclasses.replace(man, evaluation={"parity": rec}), old / "model.json")
    with pytest.raises(BundleError, match="must also be measured in the motion region"):
        run_cli("bundle", "build", str(old), "--target", "cpu", "--key",
                str(tmp_path / "keys" / "oem.key.pem"), "--out", str(tmp_path / "x.bundle"))


def test_check_refuses_mixed_families_and_a_run_of_the_other_family(warp, smoke) -> None:
    with pytest.raises(ExportError, match="different families"):
        run_cli("export", "check", str(smoke["fp32"]), str(warp["fp32"]), "--run",
                str(warp["run"]), "--data", str(smoke["data"]))
    with pytest.raises(ExportError, match="no warp checkpoint"):
        run_cli("export", "check", str(warp["fp32"]), "--run", str(smoke["run"]), "--data",
                str(smoke["data"]))
