"""Write the small reference policy used by ``syncedge precheck --policy`` (onnx.helper only).

The policy drives every joint towards a target pose with a proportional gain, nudged by
the mean brightness of the frame it sees (so it reacts to the predicted frames), and
clips each step to a bound:

    action = clip(gain * (target - joint_state) + beta * (mean(frame) / 255 - 0.5),
                  -bound, bound)

Inputs: ``frame`` uint8 [1, H, W, 3] (RGB), ``joint_state`` float32 [1, A] (rad|m).
Output: ``action`` float32 [1, A] (rad|m per step).

Usage (the command that made samples/policies/reference/):

    python scripts/make_reference_policy.py --height 64 --width 64 --dof 7 \
        --out samples/policies/reference
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 18


def build_policy(height: int, width: int, dof: int, gain: float = 0.2, beta: float = 0.02,
                 bound: float = 0.05, target: Sequence[float] | None = None) -> onnx.ModelProto:
    """The policy graph for frames ``[1, height, width, 3]`` and ``dof`` joints."""
    tgt = np.zeros((1, dof), np.float32) if target is None else \
        np.asarray(target, np.float32).reshape(1, dof)

    def c(name: str, v: object) -> onnx.TensorProto:
        return numpy_helper.from_array(np.require(np.asarray(v, np.float32), requirements="C"),
                                       name)

    nodes = [
        helper.make_node("Sub", ["target", "joint_state"], ["err"]),
        helper.make_node("Mul", ["err", "gain"], ["p"]),
        helper.make_node("Cast", ["frame"], ["ff"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMean", ["ff"], ["m"], keepdims=0),
        helper.make_node("Div", ["m", "k255"], ["mn"]),
        helper.make_node("Sub", ["mn", "half"], ["mc"]),
        helper.make_node("Mul", ["mc", "beta"], ["nudge"]),
        helper.make_node("Add", ["p", "nudge"], ["raw"]),
        helper.make_node("Clip", ["raw", "lo", "hi"], ["action"]),
    ]
    graph = helper.make_graph(
        nodes, "reference_policy",
        [helper.make_tensor_value_info("frame", TensorProto.UINT8, [1, height, width, 3]),
         helper.make_tensor_value_info("joint_state", TensorProto.FLOAT, [1, dof])],
        [helper.make_tensor_value_info("action", TensorProto.FLOAT, [1, dof])],
        [c("target", tgt), c("gain", gain), c("k255", 255.0), c("half", 0.5), c("beta", beta),
         c("lo", -bound), c("hi", bound)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="syncedge-reference-policy")
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def write_policy(out_dir: str | Path, height: int, width: int, dof: int,
                 command: str = "") -> Path:
    """Write ``policy.onnx`` and ``policy.json`` (sha256, shapes, command) into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = build_policy(height, width, dof).SerializeToString()
    (out / "policy.onnx").write_bytes(data)
    manifest = {
        "schema_version": 1, "file": "policy.onnx", "sha256": hashlib.sha256(data).hexdigest(),
        "opset": OPSET, "command": command,
        "inputs": {"frame": ["uint8", [1, height, width, 3]],
                   "joint_state": ["float32", [1, dof]]},
        "outputs": {"action": ["float32", [1, dof]]},
        "formula": "clip(0.2 * (0 - joint_state) + 0.02 * (mean(frame)/255 - 0.5), "
                   "-0.05, 0.05)",
    }
    (out / "policy.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n",
                                     encoding="utf-8")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Command line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--height", type=int, default=64)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--dof", type=int, default=7)
    ap.add_argument("--out", default="samples/policies/reference")
    args = ap.parse_args(argv)
    cmd = (f"python scripts/make_reference_policy.py --height {args.height} --width "
           f"{args.width} --dof {args.dof} --out {args.out}")
    print(write_policy(args.out, args.height, args.width, args.dof, cmd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
