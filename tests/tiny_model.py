"""A tiny model folder without torch: four ONNX graphs made with ``onnx.helper`` and a
``model.json`` written with :mod:`edge.manifest`, following the model contract at tiny
sizes (H = W = 8, C = 2, h = w = 2, S = 2, A = 2, K = 2, L = 8, D = 2, batch 1)."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edge.manifest import GraphSpec, ModelContract, ModelManifest, TensorSpec, save_manifest

H = W = 8
C, LH, LW = 2, 2, 2
S, A, K, L, D = 2, 2, 2, 8, 2
OPSET = 19

_ONNX_DTYPE = {"float32": TensorProto.FLOAT, "uint8": TensorProto.UINT8}


def _vi(spec: TensorSpec) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(spec.name, _ONNX_DTYPE[spec.dtype], list(spec.shape))


def _model(name: str, nodes: list, inputs: tuple[TensorSpec, ...],
           outputs: tuple[TensorSpec, ...], inits: list) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, [_vi(s) for s in inputs],
                              [_vi(s) for s in outputs], initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                          producer_name="syncedge-tests")
    m.ir_version = 9
    onnx.checker.check_model(m, full_check=True)
    return m


def _f32(name: str, a: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(a, np.float32), name)


def _i64(name: str, a: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(a, np.int64), name)


def tiny_graphs(seed: int = 0) -> dict[str, tuple[onnx.ModelProto, int]]:
    """The four graphs: key -> (ModelProto, batch)."""
    rng = np.random.default_rng(seed)
    lat = TensorSpec("latents", (1, C, LH, LW), "float32", "latent")
    enc_in = (TensorSpec("frames", (1, 3, H, W), "uint8", "uint8 RGB", (0, 255)),)
    enc = _model("encoder", [
        helper.make_node("Cast", ["frames"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["f", "scale"], ["x"]),
        helper.make_node("Conv", ["x", "w"], ["latents"], strides=[4, 4]),
    ], enc_in, (lat,), [_f32("scale", np.array(1 / 255)),
                        _f32("w", rng.normal(0, 0.1, (C, 3, 4, 4)))])
    n = K * L + 1
    cal_in = (TensorSpec("calibration_latents", (n, C, LH, LW), "float32", "latent"),
              TensorSpec("calibration_actions", (n, A), "float32", "rad"),
              TensorSpec("dof_mask", (A,), "float32", "mask", (0, 1)))
    ctx = TensorSpec("context", (K, D, LH, LW), "float32", "context")
    cal = _model("calibration", [
        helper.make_node("ReduceMean", ["calibration_latents", "ax0"], ["m"], keepdims=1),
        helper.make_node("Expand", ["m", "ctx_shape"], ["context"]),
    ], cal_in, (ctx,), [_i64("ax0", [0]), _i64("ctx_shape", [K, D, LH, LW])])
    step_in = (TensorSpec("history_latents", (1, S, C, LH, LW), "float32", "latent"),
               TensorSpec("history_actions", (1, S, A), "float32", "rad"),
               TensorSpec("action", (1, A), "float32", "rad"), ctx)
    nxt = TensorSpec("next_latent", (1, C, LH, LW), "float32", "latent")
    step = _model("step_b1", [
        helper.make_node("ReduceMean", ["history_latents", "ax1"], ["h"], keepdims=0),
        helper.make_node("ReduceMean", ["context", "ax0"], ["c"], keepdims=1),
        helper.make_node("Add", ["h", "c"], ["next_latent"]),
    ], step_in, (nxt,), [_i64("ax1", [1]), _i64("ax0", [0])])
    frames = TensorSpec("frames", (1, 3, H, W), "float32", "[0,1] RGB", (0, 1))
    dec = _model("decoder_b1", [
        helper.make_node("ConvTranspose", ["latents", "w"], ["y"], strides=[4, 4]),
        helper.make_node("Sigmoid", ["y"], ["frames"]),
    ], (lat,), (frames,), [_f32("w", rng.normal(0, 0.1, (C, 3, 4, 4)))])
    return {"encoder": (enc, 1), "calibration": (cal, 1), "step_b1": (step, 1),
            "decoder_b1": (dec, 1)}


def parity_record(manifest: ModelManifest, passed: bool = True) -> dict:
    """A parity record for ``manifest``'s graphs as ``syncedge export check`` writes it."""
    from export.parity_gates import graphs_digest

    gate = {"name": manifest.variant, "metric": "tests", "value": 0.0 if passed else 1.0,
            "limit": 0.5, "unit": "dB", "passed": passed}
    return {"variant": manifest.variant, "gate": gate, "graphs_sha256": graphs_digest(manifest),
            "status": "passed" if passed else "failed"}


def make_tiny_model(out_dir: Path, seed: int = 0, name: str = "tiny",
                    variant: str = "fp32", parity: str | None = "passed") -> Path:
    """Write the tiny model folder (``model.json`` + four ``.onnx``) and return it.

    ``parity``: ``"passed"`` or ``"failed"`` writes such a parity record into
    ``evaluation.parity`` (bundles need a passed one); None writes none.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    graphs = {}
    for key, (m, batch) in tiny_graphs(seed).items():
        data = m.SerializeToString()
        (out_dir / f"{key}.onnx").write_bytes(data)
        ins = tuple(TensorSpec(i.name, tuple(d.dim_value for d in i.type.tensor_type.shape.dim),
                               "uint8" if i.type.tensor_type.elem_type == TensorProto.UINT8
                               else "float32") for i in m.graph.input)
        outs = tuple(TensorSpec(o.name, tuple(d.dim_value for d in o.type.tensor_type.shape.dim),
                                "float32") for o in m.graph.output)
        graphs[key] = GraphSpec(file=f"{key}.onnx", sha256=hashlib.sha256(data).hexdigest(),
                                batch=batch, inputs=ins, outputs=outs)
    contract = ModelContract(resolution=(H, W), latent_shape=(C, LH, LW), history_length=S,
                             max_dof=A, calibration_segments=K, segment_frames=L,
                             sweep_out_rows=(0, 3), frame_rate_hz=10.0, action_units="rad",
                             context_shape=(K, D, LH, LW), residual_decoding=True)
    manifest = ModelManifest(name=name, variant=variant, opset=OPSET, contract=contract,
                             graphs=graphs, provenance={"command": "tests", "seed": seed})
    if parity is not None:
        manifest = dataclasses.replace(manifest, evaluation={
            "parity": parity_record(manifest, parity == "passed")})
    save_manifest(manifest, out_dir / "model.json")
    return out_dir
