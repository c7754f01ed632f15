"""The PyTorch FP32 reference of ``syncedge export check``, for every model family.

A model folder's ``contract.family`` names the family; :data:`REFERENCES` maps it to the
torch model of the run folder the folder was exported from:

- ``latent``: ``ae.pt`` + ``dynamics.pt`` (:func:`export.evaluation.zero_shot.load_world_model`);
- ``warp``: ``warp.pt`` (``warp_nocal.pt`` for ``calibration_mode: history``;
  :func:`export.variants.warp_export.load_warp_model`). Its decoder also predicts the robot mask,
  which the one-step comparison of the decoder graphs covers too.

Each is wrapped as a :class:`TorchReference` (encoder, calibration, step and decoder with
the graphs' inputs and outputs), from which :func:`reference_case` makes one held-out
cell's :class:`ReferenceCase`: the calibration latents and context, a ``horizon``-step
open-loop rollout (history padded with the start latent and zero actions, as the runtime
does), the step inputs of every step and the decoded frames.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from export.errors import ExportError
from export.evaluation.zero_shot import load_world_model, to_uint8
from export.variants.warp_export import load_warp_model

__all__ = ["REFERENCES", "ReferenceCase", "TorchReference", "load_reference", "reference_case"]


@dataclass
class ReferenceCase:
    """One held-out cell and the PyTorch FP32 reference on it (NumPy arrays).

    Shapes: ``start [H, W, 3]`` uint8, ``actions [T, A]`` rad, ``truth [T, H, W, 3]`` uint8,
    ``cal_frames [K*L+1, H, W, 3]``, ``cal_actions [K*L+1, A]``, ``dof_mask [A]``,
    ``start_latent [C, h, w]`` (the encoder's), ``prepared_latent [C, h, w]`` (after the
    prepare graph; the start latent itself for a model without one),
    ``cal_latents [K*L+1, C, h, w]``, ``context [K, D, h, w]``,
    ``hist_latents [T, S, C, h, w]``, ``hist_actions [T, S, A]`` (the step inputs of each
    step), ``latents [T, C, h, w]`` (predicted), ``decoded [T, 3, H, W]`` (decoder output,
    [0, 1]), ``frames [T, H, W, 3]`` uint8, ``decoded_mask [T, 1, H, W]`` (the decoder's
    ``robot_mask`` output, [0, 1]; None for a decoder without one).
    """

    cell_id: str
    num_dof: int
    start: np.ndarray
    actions: np.ndarray
    truth: np.ndarray
    cal_frames: np.ndarray
    cal_actions: np.ndarray
    dof_mask: np.ndarray
    start_latent: np.ndarray
    cal_latents: np.ndarray
    context: np.ndarray
    hist_latents: np.ndarray
    hist_actions: np.ndarray
    latents: np.ndarray
    decoded: np.ndarray
    frames: np.ndarray  # residual decoding: start + dec(z_t) - dec(z_0)
    frames_plain: np.ndarray  # plain decoding: dec(z_t)
    decoded_mask: np.ndarray | None = None
    prepared_latent: np.ndarray | None = None


class TorchReference:
    """A family's torch model behind the graphs' interface.

    Attributes:
        family: ``contract.family`` of the folders it is the reference of.
        cfg: the model configuration (``to_dict()`` must equal the folder's
            ``provenance.config``; ``history``, ``max_dof``, ``segment_frames``).
        module: the torch model (eval mode).
        encoder, calibration, step: the torch modules of those graphs (the same inputs
            and outputs as the graphs).
    """

    def __init__(self, family: str, module: Any, cfg: Any):
        self.family, self.module, self.cfg = family, module, cfg
        self.encoder: Callable[[Tensor], Tensor] = module.encoder
        self.calibration: Callable[[Tensor, Tensor, Tensor], Tensor] = module.calibration
        self.step: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor] = module.step
        #: start latents ``[B, C, h, w]`` and context -> the latents the steps start from
        self.prepare: Callable[[Tensor, Tensor], Tensor] = getattr(
            module, "prepare", lambda z, ctx: z)

    def encode_frames(self, frames_hwc: Tensor) -> Tensor:
        """uint8 ``[N, H, W, 3]`` -> latents ``[N, C, h, w]``."""
        return torch.cat([self.encoder(frames_hwc[i:i + 256].permute(0, 3, 1, 2))
                          for i in range(0, len(frames_hwc), 256)])

    def decode(self, z: Tensor) -> tuple[Tensor, Tensor | None]:
        """Latents ``[B, C, h, w]`` -> (frames ``[B, 3, H, W]``, robot mask
        ``[B, 1, H, W]`` or None)."""
        return self.module.decoder(z), None


class _LatentReference(TorchReference):
    def encode_frames(self, frames_hwc: Tensor) -> Tensor:
        return self.module.encode_frames(frames_hwc)  # the checkpoints' own batching


class _WarpReference(TorchReference):
    def decode(self, z: Tensor) -> tuple[Tensor, Tensor | None]:
        frames, mask = self.module.decoder(z)
        return frames, mask


def _load_latent(run: str, calibration_mode: str) -> TorchReference:
    model = load_world_model(run, calibrated=True)
    return _LatentReference("latent", model, model.cfg)


def _load_warp(run: str, calibration_mode: str) -> TorchReference:
    # as exported: the per-DoF flow fields made once per rollout (the prepare graphs)
    model = load_warp_model(run, history=calibration_mode == "history",
                            joint_fields_in_state=True)
    return _WarpReference("warp", model, model.cfg)


#: ``contract.family`` -> loader ``(run folder, contract.calibration_mode) -> reference``.
REFERENCES: dict[str, Callable[[str, str], TorchReference]] = {
    "latent": _load_latent,
    "warp": _load_warp,
}


def load_reference(run: str | Path, family: str = "latent",
                   calibration_mode: str = "calibration") -> TorchReference:
    """The torch reference of ``family`` from run folder ``run``.

    Raises:
        ExportError: an unknown family, or the run lacks the family's checkpoints.
    """
    if family not in REFERENCES:
        raise ExportError(f"contract.family {family!r}: no PyTorch reference for parity; "
                          f"expected one of {sorted(REFERENCES)}")
    return REFERENCES[family](str(run), calibration_mode)


@torch.no_grad()
def reference_case(model: TorchReference, cell: Any, horizon: int) -> ReferenceCase:
    """The reference on ``cell`` (an :class:`export.train.data.Cell`): its first motion episode's
    start frame and first ``horizon`` actions, and its calibration episode.

    Raises:
        ExportError: the episode is shorter than ``horizon + 1`` frames.
    """
    motion = cell.motions[0]
    if len(motion.frames) < horizon + 1:
        raise ExportError(f"{motion.path}: {len(motion.frames)} frames; the parity rollout "
                          f"needs {horizon + 1}")
    s = model.cfg.history
    acts = motion.actions[:horizon].astype(np.float32).copy()  # (T, A)
    acts[:, cell.num_dof:] = 0.0
    start = motion.frames[0]
    x0 = torch.from_numpy(np.ascontiguousarray(start.transpose(2, 0, 1)[None]))
    z0 = model.encoder(x0)  # (1, C, h, w)
    cal_lat = model.encode_frames(torch.from_numpy(cell.cal_frames))
    ctx = model.calibration(cal_lat, torch.from_numpy(cell.cal_actions),
                            torch.from_numpy(cell.dof_mask))  # (K, D, h, w)
    zp = model.prepare(z0, ctx)  # (1, C, h, w), what the steps start from
    hist_l = zp[:, None].expand(1, s, *zp.shape[1:])
    hist_a = torch.zeros(1, s, acts.shape[1])
    a = torch.from_numpy(acts)
    hl, ha, preds = [], [], []
    for t in range(horizon):
        hl.append(hist_l[0])
        ha.append(hist_a[0])
        nxt = model.step(hist_l, hist_a, a[t:t + 1], ctx)
        preds.append(nxt[0])
        hist_l = torch.cat([hist_l[:, 1:], nxt[:, None]], 1)
        hist_a = torch.cat([hist_a[:, 1:], a[t:t + 1, None]], 1)
    z = torch.stack(preds)  # (T, C, h, w)
    dec, mask = model.decode(z)  # (T, 3, H, W), (T, 1, H, W) or None
    offset = x0.to(torch.float32) / 255.0 - model.decode(z0)[0]
    return ReferenceCase(
        cell.cell_id, cell.num_dof, start, acts, motion.frames[1:horizon + 1],
        cell.cal_frames, cell.cal_actions, cell.dof_mask, z0[0].numpy(), cal_lat.numpy(),
        ctx.numpy(), torch.stack(hl).numpy(), torch.stack(ha).numpy(), z.numpy(),
        dec.numpy(), to_uint8(dec + offset), to_uint8(dec),
        None if mask is None else mask.numpy(), zp[0].numpy())
