"""The shipped artefacts: the reference model, its variants and the sample cell, as the
README's main-job command uses them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge.cli import main
from edge.fileio import sha256_file
from edge.manifest import is_chain_model_dir, load_model_dir

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
SAMPLE = ROOT / "samples" / "cell_sample"


def test_sample_cell_matches_its_manifest() -> None:
    man = json.loads((SAMPLE / "manifest.json").read_text())
    assert man["split"] == "test_all"
    assert man["command"] == "syncedge cells sample --out samples/cell_sample"  # runnable here
    for name, entry in man["files"].items():
        assert sha256_file(SAMPLE / name) == entry["sha256"], name


FOLDERS = sorted(p.name for p in MODELS.iterdir() if (p / "model.json").is_file())
#: The ONNX model folders (the chain model's folder has no graphs: tests/test_chain_bundle.py).
SHIPPED = [n for n in FOLDERS if not is_chain_model_dir(MODELS / n)]


def test_the_shipped_model_folders_are_the_documented_ones() -> None:
    assert {"reference", "reference-history", "latent-reference"} <= set(SHIPPED)
    assert set(FOLDERS) - set(SHIPPED) == {"chain"}


@pytest.mark.parametrize("variant", SHIPPED)
def test_shipped_models_verify_and_passed_their_gates(variant: str) -> None:
    folder = MODELS / variant
    man = load_model_dir(folder)
    assert man.contract.resolution == (64, 64) and man.contract.max_dof == 7
    assert man.provenance["command"].startswith("syncedge export")
    if man.variant != "fp32":
        assert man.evaluation["parity"]["status"] == "passed"
    family = "latent" if variant.startswith("latent") else "warp"
    assert man.contract.family == family
    mode = "history" if variant == "reference-history" else "calibration"
    assert man.contract.calibration_mode == mode


def test_readme_main_job_runs_on_the_shipped_model(tmp_path: Path) -> None:
    out = tmp_path / "simulate"
    code = main(["simulate", "--model", str(MODELS / "reference"), "--calibration",
                 str(SAMPLE / "calibration.npz"), "--start", str(SAMPLE / "test.npz"),
                 "--out", str(out)])
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert (out / "prediction.mp4").stat().st_size > 1000
    assert (out / "contact_sheet.png").stat().st_size > 1000
    text = json.dumps(metrics)
    assert "psnr" in text.lower()


CHECKPOINTS = MODELS / "latent-checkpoints"
WARP_CHECKPOINTS = MODELS / "reference-checkpoints"


@pytest.mark.parametrize("folder,checkpoint", [("reference", "warp.pt"),
                                               ("reference-history", "warp_nocal.pt")])
def test_warp_checkpoints_match_their_manifest_and_the_shipped_graphs(folder: str,
                                                                      checkpoint: str) -> None:
    """The committed warp checkpoints are the ones the shipped warp models were exported
    from: same configuration, and every FP32 graph gives the checkpoint's outputs."""
    import numpy as np
    import onnxruntime as ort

    torch = pytest.importorskip("torch", reason="the checkpoints need torch "
                                "(pip install '.[train]')")
    from export.variants.warp_export import load_warp_model, warp_graph_modules

    man = json.loads((WARP_CHECKPOINTS / "manifest.json").read_text())
    assert {"warp.pt", "warp_nocal.pt", "keypoint.pt"} <= set(man["files"])
    for name, entry in man["files"].items():
        assert sha256_file(WARP_CHECKPOINTS / name) == entry["sha256"], name
        assert entry["command"].startswith("syncedge model train")
    # as exported: the per-DoF flow fields made once per rollout (prepare_bB graphs)
    model = load_warp_model(WARP_CHECKPOINTS, history=checkpoint == "warp_nocal.pt",
                            joint_fields_in_state=True)
    shipped = load_model_dir(MODELS / folder)
    assert shipped.provenance["config"] == model.cfg.to_dict()
    cal = np.load(SAMPLE / "calibration.npz")
    with torch.no_grad():
        cal_states = torch.cat([model.encoder(torch.from_numpy(f[None]).permute(0, 3, 1, 2))
                                for f in cal["frames"]])
    start = torch.from_numpy(cal["frames"][:1]).permute(0, 3, 1, 2)
    with torch.no_grad():
        ctx = model.calibration(cal_states, torch.from_numpy(cal["actions"]),
                                torch.ones(7))
        z0 = model.encoder(start)
        zp = model.prepare(z0, ctx)
        z = model.step(zp[:, None], torch.zeros(1, 1, 7), torch.full((1, 7), 0.2), ctx)
    inputs = {
        "encoder": {"frames": start.numpy().copy()},
        "calibration": {"calibration_latents": cal_states.numpy(),
                        "calibration_actions": cal["actions"],
                        "dof_mask": np.ones(7, np.float32)},
        "step_b1": {"history_latents": z[:, None].numpy(),
                    "history_actions": np.zeros((1, 1, 7), np.float32),
                    "action": np.full((1, 7), 0.1, np.float32), "context": ctx.numpy()},
        "decoder_b1": {"latents": z.numpy()},
        "prepare_b1": {"start_latents": z0.numpy(), "context": ctx.numpy()},
    }
    assert set(inputs) == set(warp_graph_modules(model, batch_sizes=(1,)))
    for graph, (module, specs, _) in warp_graph_modules(model, batch_sizes=(1,)).items():
        sess = ort.InferenceSession(str(MODELS / folder / f"{graph}.onnx"),
                                    providers=["CPUExecutionProvider"])
        got = sess.run(None, inputs[graph])
        with torch.no_grad():
            want = module.eval()(*(torch.from_numpy(inputs[graph][s.name]) for s in specs))
        want = want if isinstance(want, tuple) else (want,)
        for g, w in zip(got, want, strict=True):
            assert np.abs(g - w.numpy()).max() < 1e-4, graph


def test_latent_checkpoints_match_their_manifest_and_the_shipped_graphs() -> None:
    """The committed training checkpoints are the ones models/latent-reference was
    exported from: same configuration, and every FP32 graph gives the checkpoint's
    outputs."""
    import numpy as np
    import onnxruntime as ort

    torch = pytest.importorskip("torch", reason="the checkpoints need torch "
                                "(pip install '.[train]')")
    from export.evaluation.zero_shot import load_world_model
    from export.variants.onnx_export import graph_modules

    man = json.loads((CHECKPOINTS / "manifest.json").read_text())
    assert set(man["files"]) == {"ae.pt", "keypoint.pt", "dynamics.pt", "dynamics_nocal.pt"}
    for name, entry in man["files"].items():
        assert sha256_file(CHECKPOINTS / name) == entry["sha256"], name
        assert entry["command"].startswith("syncedge model train")
    model = load_world_model(CHECKPOINTS)
    shipped = load_model_dir(MODELS / "latent-reference")
    assert shipped.provenance["config"] == model.cfg.to_dict()
    cal = np.load(SAMPLE / "calibration.npz")
    with torch.no_grad():
        cal_latents = model.encoder(torch.from_numpy(cal["frames"]).permute(0, 3, 1, 2))
    rng = np.random.default_rng(0)
    inputs = {
        "encoder": {"frames": cal["frames"][:1].transpose(0, 3, 1, 2).copy()},
        "calibration": {"calibration_latents": cal_latents.numpy(),
                        "calibration_actions": cal["actions"],
                        "dof_mask": np.ones(7, np.float32)},
    }
    graphs = graph_modules(model, batch_sizes=(1,))
    for graph, (module, specs, _) in graphs.items():
        feed = inputs.get(graph) or {
            s.name: (0.3 * rng.standard_normal(s.shape)).astype(np.float32) for s in specs}
        sess = ort.InferenceSession(str(MODELS / "latent-reference" / f"{graph}.onnx"),
                                    providers=["CPUExecutionProvider"])
        (got,) = sess.run(None, feed)
        with torch.no_grad():
            want = module.eval()(*(torch.from_numpy(feed[s.name]) for s in specs)).numpy()
        assert np.abs(got - want).max() < 1e-4, graph


def test_experiment_checkpoints_match_their_manifests_and_load() -> None:
    """Every committed experiment checkpoint (models/experiments/*/) is the file its manifest
    names, at the step and configuration it records, and loads into the warp model."""
    torch = pytest.importorskip("torch", reason="the checkpoints need torch "
                                "(pip install '.[train]')")
    from export.models.warp import WarpConfig, WarpModel

    manifests = sorted((MODELS / "experiments").glob("*/manifest.json"))
    assert manifests
    for mpath in manifests:
        man = json.loads(mpath.read_text())
        assert man["what"].startswith("an experiment, not shipped") and man["data"]
        for name, entry in man["files"].items():
            path = mpath.parent / name
            assert sha256_file(path) == entry["sha256"], path
            assert entry["command"].startswith("syncedge model train-warp")
            ck = torch.load(path, map_location="cpu", weights_only=False)
            assert ck["step"] == entry["step"] and ck["config"] == entry["config"]
            WarpModel(WarpConfig.from_dict(ck["config"])).load_state_dict(ck["model"])
