"""ONNX export of the warp model (``syncedge export onnx --run RUN`` with ``RUN/warp.pt``).

The same four graph roles and tensor names as the latent family (docs/architecture.md,
"Model contract"), so the runtime, the ring buffer and the kernels are unchanged; the
"latent" is the warp model's state (:class:`~export.models.warp.StateLayout`, recorded in
``contract.state_layout``). Warping and compositing run inside the decoder graph, which also
outputs the robot mask: bilinear, border padding, ``align_corners=0``, written by default as
GatherElements of the four corners per channel (:func:`export.models.warp.bilinear_sample`,
the values of GridSample to about 2e-7 and 2-3 times as fast in ONNX Runtime's CPU provider;
``warp_sampler="grid_sample"`` exports ONNX GridSample as before; model.json's
``provenance.warp_sampler`` says which). Opset 18, static shapes, embedded weights.
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from edge.fileio import check_folder_target, sha256_file, staged_folder
from edge.manifest import GraphSpec, ModelContract, ModelManifest, TensorSpec, save_manifest
from export.errors import ExportError
from export.models.warp import SAMPLERS, WarpConfig, WarpModel

__all__ = ["load_warp_checkpoint", "load_warp_model", "warp_contract", "warp_graph_modules", "export_warp_model"]


def load_warp_checkpoint(run: str | Path, history: bool = False,
                         joint_fields_in_state: bool = False
                         ) -> tuple[WarpModel, dict[str, Any]]:
    """The warp model of a run folder and its checkpoint dictionary: ``warp.pt``
    (``warp_nocal.pt`` with ``history``). ``joint_fields_in_state``: build it with the
    per-DoF flow fields carried in the state (``WarpConfig.joint_fields_in_state``; the
    same weights and frames), as it is exported.

    Raises:
        ExportError: the checkpoint is missing, or is not a readable warp checkpoint (a
            damaged file, another architecture's checkpoint), naming the file.
    """
    path = Path(run) / ("warp_nocal.pt" if history else "warp.pt")
    if not path.is_file():
        raise ExportError(f"{path}: no warp checkpoint; train one with 'syncedge model "
                          f"train-warp --out {run}{' --no-calibration' if history else ''}'")
    try:
        ck = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # torch raises many kinds for a damaged file
        raise ExportError(f"{path}: not a readable checkpoint ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else ''}); expected a "
                          "warp.pt written by 'syncedge model train-warp'") from None
    try:
        cfg = WarpConfig.from_dict(ck["config"])
        if joint_fields_in_state and cfg.joint_width:
            cfg = dataclasses.replace(cfg, joint_fields_in_state=True)
        model = WarpModel(cfg)
        model.load_state_dict(ck["model"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise ExportError(f"{path}: not a warp checkpoint of this version "
                          f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                          "); expected a warp.pt written by 'syncedge model train-warp'") from None
    return model.eval(), ck


def load_warp_model(run: str | Path, history: bool = False,
                    joint_fields_in_state: bool = False) -> WarpModel:
    """The warp model of a run folder (:func:`load_warp_checkpoint` without the rest)."""
    return load_warp_checkpoint(run, history, joint_fields_in_state)[0]


def warp_contract(cfg: WarpConfig, frame_rate_hz: float = 10.0) -> ModelContract:
    """The :class:`~edge.manifest.ModelContract` of a warp configuration."""
    h = cfg.grid
    history = not cfg.use_calibration
    return ModelContract(
        resolution=(cfg.image_size, cfg.image_size),
        latent_shape=(cfg.layout.channels, h, h), history_length=cfg.history,
        max_dof=cfg.max_dof, calibration_segments=cfg.max_dof,
        segment_frames=cfg.segment_frames, sweep_out_rows=cfg.sweep_out_rows,
        frame_rate_hz=frame_rate_hz, action_units="rad (m for prismatic joints)",
        context_shape=(cfg.max_dof, cfg.context_channels, h, h), residual_decoding=False,
        action_normalisation=("none: each channel's accumulated action, in the direction of "
                              "its calibration sweep, enters as sin and 1 - cos"
                              if not history else "none: learned tokens per channel index"),
        frame_normalisation="x / 255 inside the encoder; the state carries the start frame",
        family="warp", calibration_mode="history" if history else "calibration",
        warping="decoder_graph", calibration_amplitude_rad=cfg.sweep_amplitude_rad,
        state_layout=cfg.layout.ranges, decoder_outputs=("frames", "robot_mask"))


def warp_graph_modules(model: WarpModel, batch_sizes: tuple[int, ...] = (1, 16)
                       ) -> dict[str, tuple[nn.Module, tuple[TensorSpec, ...],
                                            tuple[TensorSpec, ...]]]:
    """Graph name -> (module, input specs, output specs) for every graph of the contract
    (:func:`export.variants.onnx_export.contract_graphs`; the decoder also outputs the robot mask)."""
    from export.variants.onnx_export import _Calibration, _Prepare, _Step, contract_graphs

    cfg = model.cfg
    mods: dict[str, nn.Module] = {"encoder": model.encoder, "calibration": _Calibration(model),
                                  "step": _Step(model), "decoder": model.decoder}
    if cfg.joint_width and cfg.joint_fields_in_state:
        mods["prepare"] = _Prepare(model)
    return contract_graphs(mods, cfg.layout.channels, cfg.grid, cfg.history, cfg.max_dof,
                           cfg.image_size, cfg.calibration_frames, cfg.context_channels,
                           "warp state (contract.state_layout)", batch_sizes, robot_mask=True)


def export_warp_model(run: str, out_dir: str, batch_sizes: tuple[int, ...] = (1, 16),
                      name: str = "syncedge-warp", command: str = "", history: bool = False,
                      evaluation: dict[str, Any] | None = None,
                      warp_sampler: str = "gather") -> Path:
    """Export a warp run into ``out_dir``; returns the model.json path.

    ``warp_sampler``: how the decoder graphs warp (:data:`export.models.warp.SAMPLERS`):
    ``gather`` (GatherElements, the default) or ``grid_sample`` (ONNX GridSample); the
    same frames to about 2e-7 (recorded in ``provenance.warp_sampler``).

    Raises:
        FileExistsError: the output folder is a file or a folder of other files (before
            any work; the folder is written beside it and replaces it whole,
            :func:`edge.fileio.staged_folder`).
        ExportError: a missing checkpoint, an unknown ``warp_sampler``, or a graph failing
            the checker or shape inference.
    """
    from export.variants.onnx_export import OPSET, _export_graph, git_commit

    if warp_sampler not in SAMPLERS:
        raise ExportError(f"warp sampler {warp_sampler!r}: expected one of "
                          f"{', '.join(SAMPLERS)}")
    check_folder_target(Path(out_dir), "model.json")
    model, ck = load_warp_checkpoint(run, history, joint_fields_in_state=True)
    model.decoder.sampler = warp_sampler
    if model.cfg.start_offset:
        raise ExportError(f"{run}: a model trained with --start-offset reads the start pose's "
                          "joint offsets from the calibration's home pose, which the runtime "
                          "contract does not carry yet; export a model trained without it")
    final = Path(out_dir)
    with staged_folder(final, "model.json") as out:
        graphs: dict[str, GraphSpec] = {}
        for gname, (module, ins, outs) in warp_graph_modules(model, batch_sizes).items():
            path = out / f"{gname}.onnx"
            _export_graph(module, ins, outs, path)
            batch = ins[0].shape[0] if gname.startswith(("step", "decoder", "encoder", "prepare")) \
                else 1
            graphs[gname] = GraphSpec(path.name, sha256_file(path), batch, ins, outs)
        extra: dict[str, Any] = {}
        prov = {"command": command or "syncedge " + " ".join(shlex.quote(x) for x in sys.argv[1:]),
                "git_commit": git_commit(), "config": model.cfg.to_dict(),
                "training": {"step": ck["step"], "options": ck["options"], "cells": ck.get("cells"),
                             "final_loss": ck["history"][-1][1] if ck["history"] else None},
                "torch": torch.__version__, "warp_sampler": warp_sampler}
        kp = Path(run) / "keypoint.pt"
        if kp.is_file():
            from export.evaluation.zero_shot import load_keypoint

            net = load_keypoint(run)
            hw = model.cfg.image_size
            path = out / "keypoint.onnx"
            _export_graph(net, (TensorSpec("frames", (1, 3, hw, hw), "uint8", "uint8 RGB",
                                           (0, 255)),),
                          (TensorSpec("ee_px", (1, 2), "float32", "pixel x, y"),), path)
            extra["keypoint"] = {"file": path.name, "sha256": sha256_file(path),
                                 "purpose": "end-effector keypoint regressor (evaluation only)"}
        manifest = ModelManifest(name=name, variant="fp32", opset=OPSET,
                                 contract=warp_contract(model.cfg), graphs=graphs, provenance=prov,
                                 evaluation=evaluation or {}, extra=extra)
        save_manifest(manifest, out / "model.json")
    return final / "model.json"
