"""Shared builders for the export tests: a smoke-size run, the CLI through argparse, and
graph perturbations that keep model.json's sha256 in step."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from edge.manifest import load_model_dir, save_manifest

SMOKE_SPLITS = ("train", "test_all", "test_convention")


def make_smoke_run(root: Path) -> tuple[Path, Path]:
    """Generate one cell per split needed here and train 2 steps; returns (data, run)."""
    from export.cells.generate import GenerateOptions, generate_chunk
    from export.train.latent import TrainOptions, train_stage

    data, run = root / "cells", root / "run"
    opts = GenerateOptions(cells_per_chunk=1, motion_episodes=1, motion_frames=20)
    for split in SMOKE_SPLITS:
        generate_chunk(split, 0, data, opts)
    for stage in ("ae", "dynamics"):
        train_stage(TrainOptions(stage=stage, data=str(data), out=str(run), steps=2, batch=4,
                                 rollout=3, log_every=1, threads=1))
    return data, run


def run_cli(*argv: str) -> int:
    """``syncedge export ...`` / ``syncedge bundle ...`` through their registrars."""
    from export.bundle.cli import register as register_bundle
    from export.cli import register as register_export

    parser = argparse.ArgumentParser(prog="syncedge")
    sub = parser.add_subparsers(dest="command")
    register_export(sub)
    register_bundle(sub)
    args = parser.parse_args(list(argv))
    return args.func(args)


def perturb_model(src: Path, dst: Path, keys: Callable[[str], bool],
                  edit: Callable[[onnx.ModelProto], None]) -> Path:
    """Copy a model folder, apply ``edit`` to the graphs whose key matches, and update
    their sha256 in model.json (so only the numbers, not the checksums, are wrong)."""
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    man = load_model_dir(dst)
    graphs = dict(man.graphs)
    for key, g in graphs.items():
        if not keys(key):
            continue
        path = dst / g.file
        m = onnx.load(str(path))
        edit(m)
        onnx.save(m, str(path))
        graphs[key] = dataclasses.replace(g, sha256=hashlib.sha256(path.read_bytes()).hexdigest())
    save_manifest(dataclasses.replace(man, graphs=graphs, evaluation={}), dst / "model.json")
    return dst


def nudge_first_weight(m: onnx.ModelProto, delta: float = 1e-3) -> None:
    """Add ``delta`` to the first float initializer with more than one value."""
    for t in m.graph.initializer:
        a = numpy_helper.to_array(t)
        if a.dtype == np.float32 and a.size > 1:
            t.CopyFrom(numpy_helper.from_array(a + np.float32(delta), t.name))
            return
    raise AssertionError("no float weight to nudge")




def whiten_output(m: onnx.ModelProto) -> None:
    """Decoder surgery: every frame pure white (``frames * 0 + 1``), an error that even an
    untrained smoke-size decoder cannot beat."""
    out = m.graph.output[0].name
    prod = next(n for n in m.graph.node if out in n.output)
    prod.output[list(prod.output).index(out)] = "frames_clean"
    m.graph.initializer.extend([numpy_helper.from_array(np.float32(0.0), "zero"),
                                numpy_helper.from_array(np.float32(1.0), "one")])
    m.graph.node.extend([helper.make_node("Mul", ["frames_clean", "zero"], ["frames_zero"]),
                         helper.make_node("Add", ["frames_zero", "one"], [out])])


def poison_output(m: onnx.ModelProto) -> None:
    """Graph surgery: multiply the first output by NaN."""
    out = m.graph.output[0].name
    prod = next(n for n in m.graph.node if out in n.output)
    prod.output[list(prod.output).index(out)] = "clean"
    m.graph.initializer.append(numpy_helper.from_array(np.float32(np.nan), "nan"))
    m.graph.node.append(helper.make_node("Mul", ["clean", "nan"], [out]))
