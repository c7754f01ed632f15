"""The warp step reads one context for the whole batch without copying it per candidate:
the channel sums are matrix products ``[B, A] x [A, D*h*w]`` (``StateStep.forward``), the
exported step graphs hold no tensor of batch x context size, and the frames equal those of
a context given per candidate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "reference"


def _largest_tensor(path: Path, feeds: dict[str, np.ndarray]) -> tuple[int, str]:
    """(elements, name) of the largest intermediate tensor of one run of the graph (every
    node output made a graph output, so the sizes are the ones ONNX Runtime computes)."""
    import onnxruntime as ort

    model = onnx.load(str(path))
    known = {o.name for o in model.graph.output}
    for node in model.graph.node:
        for out in node.output:
            if out and out not in known:
                model.graph.output.append(onnx.ValueInfoProto(name=out))
                known.add(out)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    values = sess.run(None, feeds)
    return max((np.asarray(v).size, n) for n, v in zip(names, values, strict=True))


def test_the_step_graph_holds_no_per_candidate_copy_of_the_context():
    man = json.loads((MODEL / "model.json").read_text())
    spec = man["graphs"]["step_b16"]
    ctx = spec["inputs"][3]
    assert ctx["name"] == "context" and len(ctx["shape"]) == 4
    feeds = {i["name"]: np.zeros(i["shape"], np.float32) for i in spec["inputs"]}
    state, context = (int(np.prod(spec["outputs"][0]["shape"])), int(np.prod(ctx["shape"])))
    size, name = _largest_tensor(MODEL / "step_b16.onnx", feeds)
    # nothing larger than the state it writes or the context it reads; a per-candidate
    # copy of the context is 16 x 7 x 73 x 16 x 16 (3.3x the state)
    assert size <= max(state, context), (name, size)
    assert 16 * context > max(state, context)


def test_a_shared_context_steps_as_the_same_context_per_candidate():
    torch = pytest.importorskip("torch", reason="the eager step needs torch")
    from export.variants.warp_export import load_warp_model

    model = load_warp_model(ROOT / "models" / "reference-checkpoints",
                            joint_fields_in_state=True).eval()
    cfg = model.cfg
    g = torch.Generator().manual_seed(0)
    b, a = 5, cfg.max_dof
    z = torch.randn(b, 1, cfg.layout.channels, cfg.grid, cfg.grid, generator=g)
    hist = torch.zeros(b, 1, a)
    act = torch.randn(b, a, generator=g) * 0.3
    ctx = torch.randn(a, cfg.context_channels, cfg.grid, cfg.grid, generator=g)
    with torch.inference_mode():
        shared = model.step(z, hist, act, ctx)
        per_candidate = model.step(z, hist, act, ctx[None].expand(b, *ctx.shape).clone())
        # a batch of different contexts: each row steps with its own
        ctxs = torch.randn(b, *ctx.shape, generator=g)
        rows = torch.cat([model.step(z[i:i + 1], hist[i:i + 1], act[i:i + 1], ctxs[i])
                          for i in range(b)])
        batched = model.step(z, hist, act, ctxs)
    assert shared.shape == (b, cfg.layout.channels, cfg.grid, cfg.grid)
    assert (shared - per_candidate).abs().max() < 1e-5
    assert (rows - batched).abs().max() < 1e-5
    assert (shared - batched).abs().max() > 1e-2  # the context matters
