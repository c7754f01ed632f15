"""Check ONNX graphs against the TensorRT ONNX parser's operator support (no TensorRT needed).

The table ``trt_onnx_ops.json`` (next to this module) lists, per operator, whether the
parser of TensorRT 10.3 (JetPack 6) and 11.x supports it, with the source of each fact
(the onnx-tensorrt ``docs/operators.md`` support matrices and release notes). An operator
not in the table, or not supported by a requested TensorRT line, fails the check; so does
an operator from a non-default domain (custom ops need plugins) and a default-domain
opset outside 18-20. Subgraphs (If/Loop/Scan bodies) and model-local functions are
checked too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from export.errors import ExportError

__all__ = ["TABLE_PATH", "OPSETS", "OpsCheckError", "Violation", "support_table",
           "check_onnx", "check_model_dir"]

TABLE_PATH = Path(__file__).with_name("trt_onnx_ops.json")
OPSETS = (18, 19, 20)
_DEFAULT_DOMAINS = ("", "ai.onnx")


class OpsCheckError(ExportError, ValueError):
    """A graph uses operators or an opset the TensorRT ONNX parser does not support."""


@dataclass(frozen=True)
class Violation:
    """One unsupported thing: the graph file, node name (or ``<model>``), operator and why."""

    graph: str
    node: str
    op: str
    reason: str

    def __str__(self) -> str:
        return f"{self.graph}: node {self.node!r} ({self.op}): {self.reason}"


@lru_cache(maxsize=1)
def support_table() -> Mapping[str, Any]:
    """The parsed operator table (``versions``: label -> column, ``operators``: rows)."""
    return json.loads(TABLE_PATH.read_text(encoding="utf-8"))


def _supported(versions: Sequence[str]) -> dict[str, set[str]]:
    table = support_table()
    cols = table["versions"]
    unknown = [v for v in versions if v not in cols]
    if unknown:
        raise OpsCheckError(f"TensorRT version {unknown[0]!r}: expected one of {sorted(cols)}")
    return {v: {r["op"] for r in table["operators"] if r[cols[v]]} for v in versions}


def _nodes(graph: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    import onnx

    for i, node in enumerate(graph.node):
        name = prefix + (node.name or f"#{i}")
        yield name, node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _nodes(attr.g, f"{name}/{attr.name}/")
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for j, g in enumerate(attr.graphs):
                    yield from _nodes(g, f"{name}/{attr.name}[{j}]/")


def check_onnx(model: Any, label: str, versions: Sequence[str] = ("10.3", "11")) -> list[Violation]:
    """Check one ONNX model (``onnx.ModelProto`` or a path).

    Args:
        model: the model or its file (loaded without external weights).
        label: the graph's name in messages (usually its file name).
        versions: TensorRT lines to check against (keys of the table's ``versions``).
    Returns:
        Every violation, in node order (empty when the graph passes).
    Raises:
        ExportError: a path that is a folder, missing, or not a readable ONNX model.
    """
    import onnx

    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if path.is_dir():
            raise ExportError(f"{path}: a folder; expected an .onnx file")
        try:
            model = onnx.load(str(path), load_external_data=False)
        except FileNotFoundError:
            raise ExportError(f"{path}: no such .onnx file") from None
        except Exception as exc:  # protobuf's DecodeError and the like: a damaged file
            raise ExportError(f"{path}: not a readable ONNX model ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''}); expected an "
                              "ONNX graph written by 'syncedge export onnx'") from None
    supported = _supported(versions)
    out: list[Violation] = []
    opsets = {o.domain: o.version for o in model.opset_import}
    default = next((opsets[d] for d in _DEFAULT_DOMAINS if d in opsets), None)
    if default not in OPSETS:
        out.append(Violation(label, "<model>", "opset", f"default-domain opset {default} is "
                             f"outside {OPSETS[0]}-{OPSETS[-1]}"))
    functions = {(f.domain, f.name): f for f in model.functions}
    seen_fn: set[tuple[str, str]] = set()
    todo: list[tuple[str, Any]] = [("", model.graph)]
    while todo:
        prefix, graph = todo.pop(0)
        for name, node in _nodes(graph, prefix):
            fn_key = (node.domain, node.op_type)
            if fn_key in functions:
                if fn_key not in seen_fn:
                    seen_fn.add(fn_key)
                    todo.append((f"{name}/{node.op_type}()/", functions[fn_key]))
                continue
            if node.domain not in _DEFAULT_DOMAINS:
                out.append(Violation(label, name, f"{node.domain}::{node.op_type}",
                                     f"operator of domain {node.domain!r} needs a TensorRT "
                                     f"plugin; only the default ONNX domain is allowed"))
                continue
            missing = [v for v in versions if node.op_type not in supported[v]]
            if missing:
                out.append(Violation(label, name, node.op_type,
                                     "not in the TensorRT ONNX parser support table for "
                                     f"TensorRT {', '.join(missing)} (export/engine/"
                                     f"{TABLE_PATH.name})"))
    return out


def check_model_dir(model_dir: str | os.PathLike[str],
                    versions: Sequence[str] = ("10.3", "11")) -> list[Violation]:
    """Check every graph listed in a model folder's ``model.json``.

    Raises:
        edge.manifest.ManifestError: the folder's manifest or graphs do not verify.
    """
    from edge.manifest import load_model_dir

    model_dir = Path(model_dir)
    manifest = load_model_dir(model_dir, verify=True)
    out: list[Violation] = []
    for g in manifest.graphs.values():
        out.extend(check_onnx(model_dir / g.file, g.file, versions))
    return out
