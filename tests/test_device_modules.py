"""The PyTorch stand-ins for the engines in the GPU check (bench/bench_device_rollout.py)
take the shipped model's state as exported: with a prepare graph, the per-DoF flow fields
ride in the latent, so the step and decoder modules must be built with them (CPU only)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]


def test_device_modules_match_the_shipped_graphs_and_the_prepared_start_latent():
    from bench.bench_device_rollout import _cpu_reference, device_modules
    from edge.runtime.model import load_model

    ref = _cpu_reference(ROOT / "models/reference", 1, 2)
    c, b = ref["contract"], ref["batch"]
    mods = device_modules(ROOT / "models/reference", ROOT / "models/reference-checkpoints", b)
    step = mods[f"step_b{b}"][0].eval()
    z = np.repeat(ref["z0"], b, axis=0).reshape(b, *c.latent_shape).astype(np.float32)
    feeds = {"history_latents": z[:, None],
             "history_actions": np.zeros((b, c.history_length, c.max_dof), np.float32),
             "action": np.repeat(ref["actions"][:, 0], b, axis=0), "context": ref["context"]}
    model = load_model(ROOT / "models/reference")
    try:
        want = model.step(b, feeds, np.empty_like(z))
        # the start latent is the prepared one: the flow-field channels are filled
        assert model.has_prepare
        enc = model.encode(ref["start"]).reshape(c.latent_shape)
        assert np.abs(z[0] - enc).max() > 1e-3
    finally:
        model.deactivate()
    with torch.inference_mode():
        got = step(*(torch.from_numpy(feeds[k]) for k in
                     ("history_latents", "history_actions", "action", "context"))).numpy()
    assert got.shape == want.shape == (b, *c.latent_shape)
    np.testing.assert_allclose(got, want, atol=1e-4)



@pytest.mark.parametrize("batches", [["64"], ["1", "17"], ["0"]])
def test_device_rollout_benchmark_refuses_a_batch_no_step_graph_holds(tmp_path, capsys,
                                                                      batches):
    from bench.bench_device_rollout import main

    out = tmp_path / "bench.json"
    assert main(["--batches", *batches, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "step graphs for batches [1, 8, 16]" in err and "from 1 to 16" in err
    assert not out.exists()


@pytest.mark.gpu
def test_torch_executor_refuses_an_output_of_another_shape():
    from bench.torch_executor import TorchExecutor

    if not torch.cuda.is_available():
        pytest.skip("the executor wraps CUDA device pointers")
    buf = torch.zeros(2, 3, device="cuda")
    ex = TorchExecutor(torch.nn.Identity(), [("x", (2, 4))], [("y", (2, 3))])
    x = torch.zeros(2, 4, device="cuda")
    with pytest.raises(ValueError, match="output 'y'"):
        ex.enqueue({"x": x.data_ptr()}, {"y": buf.data_ptr()},
                   torch.cuda.current_stream().cuda_stream)
