"""The warp model's per-DoF flow fields are made once per rollout (the ``prepare_bB``
graphs) instead of in every step: the step graph runs no convolution, the frames equal the
eager model that computes the fields every step, and model.json's prepare graphs must
cover the step batch sizes. Run on the shipped model and the sample cell."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from edge.episode import load_episode
from edge.manifest import ManifestError, ModelManifest
from edge.runtime.context import encode_calibration
from edge.runtime.model import load_model
from edge.runtime.rollout import Rollout

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "reference"
SAMPLE = ROOT / "samples" / "cell_sample"


def _ops(path: Path) -> list[str]:
    return [n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node]


def test_the_step_graph_runs_no_convolution_and_prepare_does():
    man = json.loads((MODEL / "model.json").read_text())
    assert {"prepare_b1", "prepare_b16"} <= set(man["graphs"])
    assert "joint_fields" in man["contract"]["state_layout"]
    for b in (1, 16):
        assert "Conv" not in _ops(MODEL / f"step_b{b}.onnx")
        assert _ops(MODEL / f"prepare_b{b}.onnx").count("Conv") == 4


def test_prepared_rollout_gives_the_frames_of_fields_made_every_step():
    torch = pytest.importorskip("torch", reason="the eager reference needs torch")
    from export.evaluation.zero_shot import to_uint8
    from export.train.warp import calibration_states
    from export.variants.warp_export import load_warp_model

    cal = load_episode(SAMPLE / "calibration.npz")
    start = load_episode(SAMPLE / "test.npz").frames[0]
    acts = np.random.default_rng(0).normal(0, 0.1, (3, 8, 7)).astype(np.float32)
    acts[:, :, cal.num_dof:] = 0.0
    with load_model(MODEL, intra_op_num_threads=1) as m:
        assert m.has_prepare
        ctx = encode_calibration(m, cal)
        frames = Rollout(m, ctx, max_horizon=8, max_candidates=3).run(start, acts)
    eager = load_warp_model(ROOT / "models" / "reference-checkpoints")  # fields every step
    assert not eager.cfg.joint_fields_in_state
    with torch.no_grad():
        from edge.runtime.calibration_input import prepare_calibration

        cf, ca, mask = prepare_calibration(cal, 7, 8)
        x = torch.from_numpy(cf).permute(0, 3, 1, 2)[None]
        c = eager.calibration(calibration_states(eager, x)[0], torch.from_numpy(ca),
                              torch.from_numpy(mask))
        z0 = eager.encoder(torch.from_numpy(start).permute(2, 0, 1)[None]).expand(3, -1, -1, -1)
        z = eager.rollout(z0, torch.from_numpy(acts), c)
        ref = to_uint8(eager.decoder(z.flatten(0, 1))[0]).reshape(3, 8, *start.shape)
    diff = np.abs(frames.astype(int) - ref.astype(int))
    assert diff.max() <= 1 and (diff > 0).mean() < 1e-3


def test_prepare_graphs_must_cover_the_step_batch_sizes():
    d = json.loads((MODEL / "model.json").read_text())
    ModelManifest.from_json_dict(d, "m/model.json")  # as shipped: fine
    sizes = sorted(int(k[len("step_b"):]) for k in d["graphs"] if k.startswith("step_b"))
    assert sizes == [1, 8, 16]
    del d["graphs"]["prepare_b16"]
    with pytest.raises(ManifestError, match=r"m/model.json:graphs.*prepare_bN.*"
                                            r"\[1, 8, 16\].*found \[1, 8\]"):
        ModelManifest.from_json_dict(d, "m/model.json")
