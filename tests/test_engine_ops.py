"""ONNX operator support check against the TensorRT parser table (10.3 and 11.x)."""

from __future__ import annotations

import argparse

import onnx
import pytest
from onnx import TensorProto, helper
from tiny_model import make_tiny_model

from export.cli import register
from export.engine.ops import OpsCheckError, check_model_dir, check_onnx, support_table


def _graph(nodes, opset=19, extra_opsets=()):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    g = helper.make_graph(nodes, "g", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), *extra_opsets])


def test_table_rows_cite_known_sources():
    table = support_table()
    assert set(table["versions"]) == {"10.3", "11"}
    ops = [r["op"] for r in table["operators"]]
    assert len(ops) == len(set(ops)) > 100
    for row in table["operators"]:
        assert row["sources"] and set(row["sources"]) <= set(table["sources"]), row
        assert not (row["trt_10_3"] and not row["trt_11"]), row
    for needed in ("Conv", "ConvTranspose", "MatMul", "Softmax", "LayerNormalization",
                   "QuantizeLinear", "DequantizeLinear", "Cast", "ReduceMean", "Expand"):
        assert needed in ops


def test_tiny_model_passes(tmp_path):
    assert check_model_dir(make_tiny_model(tmp_path / "m")) == []


def test_unsupported_op_names_graph_node_and_op():
    m = _graph([helper.make_node("Relu", ["x"], ["r"], name="act"),
                helper.make_node("Det", ["r"], ["y"], name="det0")])
    found = check_onnx(m, "step_b1.onnx")
    assert len(found) == 1
    assert str(found[0]).startswith("step_b1.onnx: node 'det0' (Det): not in the TensorRT ONNX "
                                    "parser support table for TensorRT 10.3, 11")


def test_operator_newer_than_10_3():
    m = _graph([helper.make_node("Gelu", ["x"], ["y"], name="g")], opset=20)
    assert check_onnx(m, "enc.onnx", ["11"]) == []
    (v,) = check_onnx(m, "enc.onnx", ["10.3", "11"])
    assert v.op == "Gelu" and "TensorRT 10.3" in v.reason and "11" not in v.reason.split("10.3")[1]


def test_custom_domain_and_opset_outside_range():
    m = _graph([helper.make_node("FusedThing", ["x"], ["y"], name="f", domain="com.acme")],
               opset=17, extra_opsets=[helper.make_opsetid("com.acme", 1)])
    found = [str(v) for v in check_onnx(m, "x.onnx")]
    assert any("default-domain opset 17 is outside 18-20" in s for s in found)
    assert any("com.acme::FusedThing" in s and "plugin" in s for s in found)


def test_subgraph_bodies_are_checked():
    then = helper.make_graph([helper.make_node("Unique", ["x"], ["t"], name="inner")], "then",
                             [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, [4])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else",
                              [], [helper.make_tensor_value_info("e", TensorProto.FLOAT, [4])])
    c = onnx.numpy_helper.from_array(__import__("numpy").array(True), "c")
    m = _graph([helper.make_node("Constant", [], ["c"], value=c),
                helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then,
                                 else_branch=other)])
    (v,) = check_onnx(m, "cal.onnx")
    assert v.node == "branch/then_branch/inner" and v.op == "Unique"


def test_check_ops_cli(tmp_path, capsys):
    model = make_tiny_model(tmp_path / "m")
    parser = argparse.ArgumentParser(prog="syncedge")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["export", "check-ops", str(model)])
    assert args.func(args) == 0
    assert "every operator is supported" in capsys.readouterr().out
    bad = tmp_path / "bad.onnx"
    onnx.save(_graph([helper.make_node("Det", ["x"], ["y"], name="d")]), bad)
    args = parser.parse_args(["export", "check-ops", str(bad), "--trt", "10.3"])
    with pytest.raises(OpsCheckError, match=r"bad\.onnx: 1 unsupported .* node 'd' \(Det\)"):
        args.func(args)
