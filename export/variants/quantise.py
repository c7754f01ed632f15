"""INT8 and FP16 variants of an exported FP32 model folder (``syncedge export quantise``).

- **INT8**: static symmetric quantisation in QDQ form (``QuantizeLinear`` /
  ``DequantizeLinear`` pairs, signed int8 activations and weights, zero points 0,
  per-channel weight scales, float biases), the form both ONNX Runtime and TensorRT 10/11
  (strongly typed) accept. Scales come from the quantisation calibration set
  (:mod:`export.variants.quant_data`, training cells only) with min/max calibration.
- **FP16**: ``onnxruntime.transformers.float16.convert_float_to_float16`` with the graph
  inputs and outputs kept float32 (``keep_io_types``).

In both variants only ``Conv``, ``ConvTranspose`` and ``MatMul`` run in reduced
precision (:data:`REDUCED_PRECISION_OPS`); everything else stays float32: the encoder's
uint8 -> x/255 normalisation, the calibration graph's segment selection
(``ReduceMax``/``Equal``), its division by the swept amplitude and ``Where``, the sigmoids,
the step's residual path (``newest + delta``) and the action/context ``Einsum``.

The output is a complete model folder: the graphs, any extra files of the source (e.g. the
keypoint regressor, copied unchanged) and a ``model.json`` with the new variant, the new
sha256 of every graph and provenance naming the source model and the quantisation
calibration set. Its ``evaluation`` is empty until ``syncedge export check`` records the
parity gates.
"""

from __future__ import annotations

import logging
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from edge.fileio import check_folder_target, sha256_file, staged_folder
from edge.manifest import (
    GraphSpec,
    ModelManifest,
    Variant,
    load_model_dir,
    model_sha256,
    save_manifest,
)
from export.errors import ExportError
from export.variants.quant_data import QuantCalibrationSet, build_quant_calibration_set

__all__ = ["QUANT_VARIANTS", "REDUCED_PRECISION_OPS", "QuantiseOptions", "quantise_model",
           "quantise_int8", "convert_fp16", "float_kept_nodes"]

QUANT_VARIANTS = ("int8", "fp16")
#: The only operators that run in INT8/FP16; every other node stays float32.
REDUCED_PRECISION_OPS = ("Conv", "ConvTranspose", "MatMul")


@dataclass
class QuantiseOptions:
    """What to quantise.

    Attributes:
        model_dir: the FP32 model folder (``syncedge export onnx``).
        variant: ``"int8"`` or ``"fp16"``.
        data: cells root; the quantisation calibration set reads ``DATA/train`` only
            (INT8; FP16 needs no data and ignores it).
        out: the model folder to write (must differ from ``model_dir``).
        max_cells: training cells in the quantisation calibration set.
        samples: feeds per graph in the quantisation calibration set.
        seed: chooses the samples.
        command: the command line, for provenance (default: ``sys.argv``).
    """

    model_dir: str
    variant: str
    out: str
    data: str | None = None
    max_cells: int = 16
    samples: int = 32
    seed: int = 0
    command: str = ""


def _named(model: Any) -> Any:
    """Give every node a unique name (the block/exclude lists refer to names)."""
    seen: set[str] = set()
    for i, node in enumerate(model.graph.node):
        if not node.name or node.name in seen:
            node.name = f"{node.op_type}_{i}"
        seen.add(node.name)
    return model


def float_kept_nodes(model: Any) -> list[str]:
    """Names of the nodes of ``model`` (an ``onnx.ModelProto``) that stay float32.

    Every node whose op type is not in :data:`REDUCED_PRECISION_OPS`.
    """
    return [n.name for n in _named(model).graph.node if n.op_type not in REDUCED_PRECISION_OPS]


class _HushPreprocessAdvice(logging.Filter):
    """Drops the quantiser's advice to run its pre-processing (our graphs are already
    shape-inferred and constant-folded at export)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-process" not in record.getMessage()


class _Reader:
    """An ``onnxruntime.quantization.CalibrationDataReader`` over a list of feeds."""

    def __init__(self, feeds: list[dict[str, Any]]):
        self._it = iter(feeds)

    def get_next(self) -> dict[str, Any] | None:
        return next(self._it, None)


def quantise_int8(src: Path, dst: Path, feeds: list[dict[str, Any]]) -> None:
    """Write the symmetric INT8 QDQ version of graph ``src`` to ``dst``.

    Args:
        src: FP32 ONNX graph.
        dst: output ONNX file.
        feeds: quantisation calibration inputs for this graph (input name -> array).

    Raises:
        ExportError: no feeds, or ONNX Runtime's quantiser failed (naming the graph).
    """
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    if not feeds:
        raise ExportError(f"{src.name}: no quantisation calibration inputs")
    model = _named(onnx.load(str(src)))
    reader = type("Reader", (_Reader, CalibrationDataReader), {})(feeds)
    root = logging.getLogger()
    hush = _HushPreprocessAdvice()
    root.addFilter(hush)
    with tempfile.TemporaryDirectory(prefix="syncedge-quant-") as tmp:
        named = Path(tmp) / src.name
        onnx.save(model, str(named))
        try:
            quantize_static(
                str(named), str(dst), reader, quant_format=QuantFormat.QDQ,
                op_types_to_quantize=list(REDUCED_PRECISION_OPS), per_channel=True,
                reduce_range=False, activation_type=QuantType.QInt8,
                weight_type=QuantType.QInt8, nodes_to_exclude=float_kept_nodes(model),
                calibrate_method=CalibrationMethod.MinMax,
                extra_options={"ActivationSymmetric": True, "WeightSymmetric": True,
                               "QuantizeBias": False},
                calibration_providers=["CPUExecutionProvider"])
        except Exception as exc:  # the quantiser raises untyped errors
            raise ExportError(f"{src}: INT8 quantisation failed: {exc}") from exc
        finally:
            root.removeFilter(hush)


def convert_fp16(src: Path, dst: Path) -> None:
    """Write the FP16 version of graph ``src`` (inputs/outputs stay float32) to ``dst``."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = _named(onnx.load(str(src)))
    half = convert_float_to_float16(model, keep_io_types=True,
                                    node_block_list=float_kept_nodes(model))
    onnx.save(_toposort(_fold_round_trip_casts(half)), str(dst))


def _cast_to(node: Any) -> int | None:
    return next((a.i for a in node.attribute if a.name == "to"), None) \
        if node.op_type == "Cast" else None


def _fold_round_trip_casts(model: Any) -> Any:
    """Replace float32 -> float16 -> float32 cast chains by an Identity of the float32 tensor.

    The converter casts every float32 graph input to float16 and back for the nodes kept in
    float32 (and likewise before outputs); folding the round trip keeps their full precision.
    """
    import onnx
    from onnx import TensorProto

    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type
             for v in (*g.value_info, *g.input, *g.output)}
    types.update({t.name: t.data_type for t in g.initializer})
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    for node in graph.node:
        if _cast_to(node) != TensorProto.FLOAT:
            continue
        first = producer.get(node.input[0])
        if first is not None and _cast_to(first) == TensorProto.FLOAT16 \
                and types.get(first.input[0]) == TensorProto.FLOAT:
            node.op_type = "Identity"
            del node.attribute[:]
            node.input[0] = first.input[0]
    outputs = {o.name for o in graph.output}
    alias = {n.output[0]: n.input[0] for n in graph.node
             if n.op_type == "Identity" and n.output[0] not in outputs}
    for node in list(graph.node):
        if node.op_type == "Identity" and node.output[0] in alias:
            graph.node.remove(node)
            continue
        for k, name in enumerate(node.input):
            while name in alias:
                name = alias[name]
            node.input[k] = name
    while True:  # drop casts nobody reads any more
        used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
        dead = [n for n in graph.node if n.op_type == "Cast" and not set(n.output) & used]
        if not dead:
            return model
        for n in dead:
            graph.node.remove(n)


def _toposort(model: Any) -> Any:
    """Order the graph's nodes topologically (the converter appends the casts it adds)."""
    graph = model.graph
    ready = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    pending, ordered = list(graph.node), []
    while pending:
        rest = [n for n in pending if not all(i in ready for i in n.input)]
        done = [n for n in pending if all(i in ready for i in n.input)]
        if not done:
            raise ExportError(f"graph {graph.name}: a cycle or a missing input among "
                              f"{[n.name for n in rest[:3]]}")
        for n in done:
            ordered.append(n)
            ready.update(n.output)
        pending = rest
    copies = [type(n)() for n in ordered]
    for c, n in zip(copies, ordered, strict=True):
        c.CopyFrom(n)
    del graph.node[:]
    graph.node.extend(copies)
    return model


def _check_graph(path: Path, spec: GraphSpec) -> int:
    """ONNX checker, strict shape inference and the I/O specs; returns the opset."""
    import onnx

    proto = onnx.load(str(path))
    try:
        onnx.checker.check_model(proto, full_check=True)
        onnx.shape_inference.infer_shapes(proto, strict_mode=True, check_type=True)
    except Exception as exc:  # onnx raises several untyped errors
        raise ExportError(f"{path}: the converted graph fails the ONNX checker: {exc}") from exc
    for specs, values in ((spec.inputs, proto.graph.input), (spec.outputs, proto.graph.output)):
        found = [(v.name, tuple(d.dim_value for d in v.type.tensor_type.shape.dim))
                 for v in values]
        want = [(s.name, tuple(s.shape)) for s in specs]
        if found != want:
            raise ExportError(f"{path}: inputs/outputs {found}, expected {want} (model.json)")
    return next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))




def quantise_model(opts: QuantiseOptions,
                   calibration_set: QuantCalibrationSet | None = None) -> Path:
    """Write the INT8 or FP16 variant of an FP32 model folder; returns its model.json path.

    Args:
        opts: :class:`QuantiseOptions`.
        calibration_set: a ready quantisation calibration set (default: drawn from
            ``opts.data`` with the source model's graphs).

    Raises:
        FileExistsError: the output folder is a file or a folder of other files (before
            any work; the folder is written beside it and replaces it whole,
            :func:`edge.fileio.staged_folder`).
        ExportError: unknown variant, a source that is not FP32, ``out`` equal to the
            source, INT8 without ``data``, or a graph failing conversion or the checker.
        edge.manifest.ManifestError: the source folder is invalid (naming the file).
    """
    from edge.runtime.model import load_model
    from export.provenance import git_commit

    if opts.variant not in QUANT_VARIANTS:
        raise ExportError(f"--variant: expected one of {list(QUANT_VARIANTS)}, found "
                          f"{opts.variant!r}")
    src, out = Path(opts.model_dir), Path(opts.out)
    source = load_model_dir(src, verify=True)
    if source.variant != "fp32":
        raise ExportError(f"{src / 'model.json'}: variant {source.variant!r}; quantise the "
                          f"FP32 model folder made by 'syncedge export onnx'")
    if out.resolve() == src.resolve():
        raise ExportError(f"--out {out}: must differ from the source model folder")
    check_folder_target(out, "model.json")  # before the quantisation calibration set
    quant: dict[str, Any] = {"variant": opts.variant,
                             "reduced_precision_ops": list(REDUCED_PRECISION_OPS)}
    if opts.variant == "int8":
        if calibration_set is None:
            if not opts.data:
                raise ExportError("--data: INT8 needs the cells root for the quantisation "
                                  "calibration set (training cells, DATA/train)")
            with load_model(src, candidate_workers=1) as fp32:
                calibration_set = build_quant_calibration_set(
                    fp32, opts.data, max_cells=opts.max_cells, samples=opts.samples,
                    seed=opts.seed)
        quant.update(method="static QDQ, symmetric signed int8 activations and weights "
                            "(zero point 0), per-channel weight scales, float biases, "
                            "min/max calibration",
                     quantisation_calibration_set=calibration_set.describe())
    else:
        quant.update(method="float16 weights and compute; inputs and outputs float32")
    final = out
    with staged_folder(final, "model.json") as out:
        graphs: dict[str, GraphSpec] = {}
        opsets = set()
        for key, g in source.graphs.items():
            dst = out / g.file
            if opts.variant == "int8":
                assert calibration_set is not None
                quantise_int8(src / g.file, dst, calibration_set.for_graph(key))
            else:
                convert_fp16(src / g.file, dst)
            opsets.add(_check_graph(dst, g))
            graphs[key] = replace(g, sha256=sha256_file(dst))
        if len(opsets) != 1:
            raise ExportError(f"{final}: graphs have different opsets {sorted(opsets)}")
        extra = {}
        for name, entry in source.extra.items():
            if isinstance(entry, dict) and "file" in entry:
                shutil.copyfile(src / entry["file"], out / entry["file"])
            extra[name] = entry
        import onnxruntime

        command = opts.command or "syncedge " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        prov = {**source.provenance, "command": command, "git_commit": git_commit(),
                "onnxruntime": onnxruntime.__version__,
                "source_model": {"path": str(src), "name": source.name, "variant": source.variant,
                                 "model_json_sha256": model_sha256(src),
                                 "command": source.provenance.get("command", "")},
                "quantisation": quant}
        variant = cast(Variant, opts.variant)  # one of QUANT_VARIANTS, checked above
        manifest = ModelManifest(name=source.name, variant=variant, opset=opsets.pop(),
                                 contract=source.contract, graphs=graphs, provenance=prov,
                                 evaluation={}, extra=extra)
        save_manifest(manifest, out / "model.json")
    return final / "model.json"
