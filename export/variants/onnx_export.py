"""ONNX export of the reference model into a model folder (``syncedge export onnx``).

Writes ``encoder.onnx``, ``calibration.onnx``, ``step_b{B}.onnx`` and ``decoder_b{B}.onnx``
for each batch size (the warp family also ``prepare_b{B}.onnx``, run once per rollout),
``keypoint.onnx`` (the end-effector keypoint regressor used by
``calibrate validate``) and ``model.json`` (``edge.manifest``). Every graph has static
shapes, named inputs and outputs, embedded weights, opset 18 (what TensorRT 10.3 on
JetPack 6 parses), and passes the ONNX checker and strict shape inference.
"""

from __future__ import annotations

import json
import shlex
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from edge.fileio import check_folder_target, sha256_file, staged_folder
from edge.manifest import GraphSpec, ModelContract, ModelManifest, TensorSpec, save_manifest
from export.errors import ExportError
from export.evaluation.zero_shot import load_keypoint, load_world_model
from export.models.latent import ModelConfig, WorldModel
from export.provenance import git_commit

__all__ = ["OPSET", "ExportOptions", "contract_for", "eval_summary", "export_model",
           "git_commit", "graph_modules", "training_provenance"]

OPSET = 18
BATCH_SIZES = (1, 16)


@dataclass
class ExportOptions:
    """What to export."""

    run: str
    out: str
    batch_sizes: tuple[int, ...] = BATCH_SIZES
    name: str = "syncedge-reference"
    command: str = ""


class _Calibration(nn.Module):
    """The calibration network with the graph's input names (either model family)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.net: nn.Module = model.calibration  # type: ignore[assignment]

    def forward(self, calibration_latents: Tensor, calibration_actions: Tensor,
                dof_mask: Tensor) -> Tensor:
        return self.net(calibration_latents, calibration_actions, dof_mask)


class _Step(nn.Module):
    """The step network with the graph's input names (either model family)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.net: nn.Module = model.step  # type: ignore[assignment]

    def forward(self, history_latents: Tensor, history_actions: Tensor, action: Tensor,
                context: Tensor) -> Tensor:
        return self.net(history_latents, history_actions, action, context)


class _Prepare(nn.Module):
    """The warp model's once-per-rollout preparation of the start states (graph names)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, start_latents: Tensor, context: Tensor) -> Tensor:
        return self.model.prepare(start_latents, context)  # type: ignore[operator]


def contract_for(cfg: ModelConfig, frame_rate_hz: float = 10.0,
                 residual_decoding: bool = False) -> ModelContract:
    """The :class:`~edge.manifest.ModelContract` of a model configuration."""
    h = cfg.latent_size
    return ModelContract(
        resolution=(cfg.image_size, cfg.image_size),
        latent_shape=(cfg.latent_channels, h, h), history_length=cfg.history,
        max_dof=cfg.max_dof, calibration_segments=cfg.max_dof,
        segment_frames=cfg.segment_frames, sweep_out_rows=cfg.sweep_out_rows,
        frame_rate_hz=frame_rate_hz, action_units="rad (m for prismatic joints)",
        context_shape=(cfg.max_dof, cfg.context_channels, h, h),
        residual_decoding=residual_decoding,
        action_normalisation=("calibrated: divided by the swept amplitude of the channel's "
                              "segment inside the calibration graph" if cfg.use_calibration
                              else f"divided by {cfg.baseline_action_scale_rad} rad"))


def contract_graphs(modules: dict[str, nn.Module], c: int, h: int, s: int, a: int, hw: int,
                    tc: int, d: int, unit: str, batch_sizes: tuple[int, ...],
                    robot_mask: bool = False
                    ) -> dict[str, tuple[nn.Module, tuple[TensorSpec, ...], tuple[TensorSpec, ...]]]:
    """Graph name -> (module, input specs, output specs) of the graph roles.

    Args:
        modules: ``encoder``, ``calibration``, ``step`` and ``decoder`` modules, and
            optionally ``prepare`` (start latents and context -> the latents the steps
            start from, run once per rollout: graphs ``prepare_b{B}``).
        c, h: latent channels and grid size (h = w); s: history slots S; a: action width A;
            hw: frame size; tc: calibration frames K*L+1; d: context channels D.
        unit: what the latent is (the ``unit`` of its specs).
        batch_sizes: the step and decoder batch sizes.
        robot_mask: the decoder also outputs ``robot_mask`` float32 ``[B, 1, H, W]``.
    """
    ctx = TensorSpec("context", (a, d, h, h), "float32", "context per action channel")
    out: dict[str, Any] = {
        "encoder": (modules["encoder"],
                    (TensorSpec("frames", (1, 3, hw, hw), "uint8", "uint8 RGB", (0, 255)),),
                    (TensorSpec("latents", (1, c, h, h), "float32", unit),)),
        "calibration": (modules["calibration"],
                        (TensorSpec("calibration_latents", (tc, c, h, h), "float32", unit),
                         TensorSpec("calibration_actions", (tc, a), "float32", "rad"),
                         TensorSpec("dof_mask", (a,), "float32", "1 controllable, 0 absent",
                                    (0, 1))),
                        (ctx,)),
    }
    for b in batch_sizes:
        out[f"step_b{b}"] = (
            modules["step"],
            (TensorSpec("history_latents", (b, s, c, h, h), "float32", unit),
             TensorSpec("history_actions", (b, s, a), "float32", "rad"),
             TensorSpec("action", (b, a), "float32", "rad"), ctx),
            (TensorSpec("next_latent", (b, c, h, h), "float32", unit),))
        outs: tuple[TensorSpec, ...] = (
            TensorSpec("frames", (b, 3, hw, hw), "float32", "RGB in [0, 1]", (0, 1)),)
        if robot_mask:
            outs += (TensorSpec("robot_mask", (b, 1, hw, hw), "float32", "robot probability",
                                (0, 1)),)
        out[f"decoder_b{b}"] = (modules["decoder"],
                                (TensorSpec("latents", (b, c, h, h), "float32", unit),), outs)
        if "prepare" in modules:
            out[f"prepare_b{b}"] = (
                modules["prepare"],
                (TensorSpec("start_latents", (b, c, h, h), "float32", unit), ctx),
                (TensorSpec("latents", (b, c, h, h), "float32", unit),))
    return out


def graph_modules(model: WorldModel, batch_sizes: tuple[int, ...] = BATCH_SIZES
                  ) -> dict[str, tuple[nn.Module, tuple[TensorSpec, ...], tuple[TensorSpec, ...]]]:
    """Graph name -> (module, input specs, output specs) for every graph of the contract."""
    cfg = model.cfg
    mods = {"encoder": model.encoder, "calibration": _Calibration(model), "step": _Step(model),
            "decoder": model.decoder}
    return contract_graphs(mods, cfg.latent_channels, cfg.latent_size, cfg.history,
                           cfg.max_dof, cfg.image_size, cfg.calibration_frames,
                           cfg.context_channels, "latent", batch_sizes)


def _example(spec: TensorSpec) -> Tensor:
    if spec.dtype == "uint8":
        return torch.zeros(spec.shape, dtype=torch.uint8)
    if spec.name == "dof_mask":
        return torch.ones(spec.shape)
    return torch.randn(spec.shape) * 0.1


def _export_graph(module: nn.Module, inputs: tuple[TensorSpec, ...],
                  outputs: tuple[TensorSpec, ...], path: Path) -> None:
    import onnx

    args = tuple(_example(x) for x in inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), args, str(path), dynamo=False, opset_version=OPSET,
                          input_names=[x.name for x in inputs],
                          output_names=[x.name for x in outputs], do_constant_folding=True)
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto, full_check=True)
    onnx.shape_inference.infer_shapes(proto, strict_mode=True, check_type=True)
    for spec, value in zip(outputs, proto.graph.output, strict=True):
        dims = tuple(d.dim_value for d in value.type.tensor_type.shape.dim)
        if dims != tuple(spec.shape):
            raise ExportError(f"{path}: output {spec.name} has shape {dims}, expected "
                              f"{spec.shape}")




def eval_summary(path: str | Path) -> dict[str, Any]:
    """The part of an ``eval.json`` that goes into ``model.json``: per split the autoencoder
    ceiling, the mean of every metric per variant, the probe and the paired statistics, and
    the targets (per-cell rows stay in eval.json).

    Raises:
        ExportError: if the file is missing or not an evaluation result.
    """
    import json

    try:
        result = json.loads(Path(path).read_text())
        splits = {
            name: {k: r[k] for k in ("split", "cells", "ae_ceiling", "summary", "probe",
                                     "paired")}
            for name, r in result["splits"].items()}
        return {"source": str(path), "options": result["options"], "splits": splits,
                "targets": result["targets"]}
    except (OSError, ValueError, KeyError) as exc:
        raise ExportError(f"{path}: not an evaluation result from 'syncedge model eval' "
                          f"({type(exc).__name__}: {exc})") from None


def training_provenance(run: str | Path) -> dict[str, Any]:
    """Per training stage: options (data, seed, steps, ...) and step count, from checkpoints;
    under ``data``, per training data folder: its chunks, the stages that used it, the
    commands that made it and the generation options."""
    from export.train.latent import load_checkpoint

    out: dict[str, Any] = {}
    for name in ("ae", "keypoint", "dynamics", "dynamics_nocal"):
        p = Path(run) / f"{name}.pt"
        if p.is_file():
            ck = load_checkpoint(p)
            opts = {k: v for k, v in ck.get("options", {}).items()}
            out[name] = {"step": ck["step"], "options": opts,
                         "final_loss": ck["history"][-1]["loss"] if ck.get("history") else None}
    # every data set a stage trained on: stages may use different ones (e.g. the autoencoder
    # on one motion profile, the dynamics on another)
    out["data"] = {}
    for stage in list(out):
        path = out[stage].get("options", {}).get("data") if stage != "data" else None
        if not path or path in out["data"]:
            continue
        chunks = sorted(Path(path).glob("train/chunk-*/manifest.json"))
        mans = [json.loads(c.read_text()) for c in chunks]
        out["data"][path] = {
            "split": "train", "chunks": len(mans),
            "stages": [k for k, v in out.items() if k != "data"
                       and v.get("options", {}).get("data") == path],
            "commands": sorted({m.get("command", "") for m in mans}),
            "chunk_seeds": "export.cells.sampling.chunk_seed('train', i)",
            "options": mans[0]["options"] if mans else None}
    return out


def export_model(opts: ExportOptions, model: WorldModel | None = None,
                 provenance: dict[str, Any] | None = None,
                 evaluation: dict[str, Any] | None = None) -> Path:
    """Export a trained run (or ``model``) into ``opts.out``; returns the model.json path.

    The folder is written beside ``opts.out`` and replaces it as a whole once every graph
    has passed the checker (:func:`edge.fileio.staged_folder`).

    Raises:
        FileExistsError: ``opts.out`` is a file or a folder of other files (before any
            work).
        ExportError: missing checkpoints, or a graph failing the checker or shape inference.
    """
    final = Path(opts.out)
    check_folder_target(final, "model.json")
    with staged_folder(final, "model.json") as out:
        if model is None:
            model = load_world_model(opts.run, calibrated=True)
        graphs: dict[str, GraphSpec] = {}
        for name, (module, ins, outs) in graph_modules(model, opts.batch_sizes).items():
            path = out / f"{name}.onnx"
            _export_graph(module, ins, outs, path)
            batch = ins[0].shape[0] if name.startswith(("step", "decoder", "encoder")) else 1
            graphs[name] = GraphSpec(path.name, sha256_file(path), batch, ins, outs)
        extra: dict[str, Any] = {}
        kp_path = Path(opts.run) / "keypoint.pt"
        if kp_path.is_file():
            kp = load_keypoint(opts.run)
            hw = model.cfg.image_size
            ins = (TensorSpec("frames", (1, 3, hw, hw), "uint8", "uint8 RGB", (0, 255)),)
            outs = (TensorSpec("ee_px", (1, 2), "float32", "pixel x, y"),)
            path = out / "keypoint.onnx"
            _export_graph(kp, ins, outs, path)
            extra["keypoint"] = {"file": path.name, "sha256": sha256_file(path),
                                 "purpose": "end-effector keypoint regressor (evaluation only)"}
        prov = {"command": opts.command or "syncedge " + " ".join(shlex.quote(a)
                                                                  for a in sys.argv[1:]),
                "git_commit": git_commit(), "config": model.cfg.to_dict(),
                "run": str(Path(opts.run).resolve()) if Path(opts.run).is_dir() else None,
                "training": training_provenance(opts.run) if Path(opts.run).is_dir() else {},
                "torch": torch.__version__, **(provenance or {})}
        manifest = ModelManifest(name=opts.name, variant="fp32", opset=OPSET,
                                 contract=contract_for(model.cfg), graphs=graphs,
                                 provenance=prov, evaluation=evaluation or {}, extra=extra)
        save_manifest(manifest, out / "model.json")
    return final / "model.json"
