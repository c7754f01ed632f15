"""Training of the warp world model (:mod:`export.models.warp`).

One step draws a few cells; for each, several (start, target) pairs from its motion
episodes, 1..16 frames apart, so every horizon is trained directly (a frame is the start
frame warped once; the step is additive in the accumulated angles, so the state after
t steps is one step with the summed actions). Losses, per pair:

- photometric L1 on the whole frame plus a heavier L1 on the moving region (pixels of the
  robot at the start or the target);
- the robot mask (BCE) at the start and the target;
- the fill weight (BCE) against the pixels the arm uncovers (robot at the start, not at the
  target), so the fill never erases what the model is unsure of;
- the arm flow against OpenCV DIS optical flow measured from the true target to the start
  (an oracle only at training time, weighted by how well it explains the target), which
  gives the flow a signal where the photometric gradient of a bilinear warp is too local;
  its weight decays over training;
- or, with ``--true-flow-weight`` and cells whose geometry was rendered (``syncedge cells
  geometry``), the arm flow against the *exact* backward flow of every robot pixel
  (:func:`export.cells.geometry.true_backward_flow`) and zero on the static scene, both at
  64x64 and, for the per-DoF fields of the step, on the coarse 16x16 flow. On 64x64 frames
  of a textureless arm DIS finds almost none of the arm's motion (its end-point error on
  the robot is about the true flow's own size), so the DIS target pulls the arm's flow
  toward zero;
- with ``--dof-field-weight`` (cells whose geometry carries the per-DoF poses, geometry
  version 2), each action channel's own flow fields of the step (the ``sin`` and ``1 -
  cos`` fields of ``StateStep.joint_fields``) against that channel's true fields at the
  start frame (:func:`export.cells.geometry.true_dof_fields`, in the channel's sweep
  direction, as backward flow, averaged over each 16x16 cell's robot pixels): the reading
  of the calibration is supervised channel by channel, not only through the sum of the
  fields.

Checkpoints (``warp.pt``: weights, optimizer, step, loss history, config, options) are
written atomically every ``--save-every`` steps and at the end; ``--resume`` continues
from one. Runs on the CPU (``--device cpu``, optional ``--bf16`` autocast) or a GPU
(``--device cuda``: the frame pool lives on the GPU and batches are assembled there).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from export.errors import ExportError

__all__ = ["WarpTrainOptions", "PairSet", "batch_forward", "true_flow_loss", "dof_field_loss",
           "train_warp", "add_arguments", "options_from_args", "main"]


@dataclass
class WarpTrainOptions:
    """Options of one training run (recorded in the checkpoint)."""

    data: list[str]
    out: str
    steps: int = 3000
    cells_per_batch: int = 6
    pairs_per_cell: int = 6
    lr: float = 2e-3
    horizon: int = 16
    seed: int = 0
    device: str = "cpu"
    threads: int = 0
    bf16: bool = False
    resume: bool = False
    save_every: int = 200
    flow_weight: float = 0.05
    mask_weight: float = 0.1
    fill_weight: float = 0.0
    flow_floor: float = 0.1
    no_calibration: bool = False
    max_cells: int | None = None
    init: str | None = None
    joint_width: int = 0
    contrast_weight: float = 0.0
    start_offset: bool = False
    true_flow_weight: float = 0.0
    joint_dilations: tuple[int, ...] = ()
    joint_attention: int = 0
    #: how the decoder composites (``WarpConfig.composite``: blend or layered)
    composite: str = "blend"
    #: the fill takes a background plate from each cell's calibration frames
    plate: bool = False
    #: stop (with a checkpoint) after this many minutes of training; None: run to ``steps``
    max_minutes: float | None = None
    #: weight of the per-DoF field loss (:func:`dof_field_loss`; 0: off)
    dof_field_weight: float = 0.0


class PairSet:
    """The training cells as tensors, and (start, target) pair batches drawn from them.

    Args:
        cells: :class:`export.train.data.Cell` list (with robot masks).
        device: where the frame pool lives.
    """

    def __init__(self, cells: list, device: Any):
        import torch

        if not cells:
            raise ExportError("no training cells")
        self.device = device
        self.cal_frames = torch.from_numpy(np.stack([c.cal_frames for c in cells])).permute(
            0, 1, 4, 2, 3).contiguous().to(device)  # (N, K*L+1, 3, H, W) uint8
        self.cal_actions = torch.from_numpy(np.stack([c.cal_actions for c in cells])).to(device)
        self.dof_mask = torch.from_numpy(np.stack([c.dof_mask for c in cells])).to(device)
        self.motions: list[list[tuple[Any, Any, Any, Any]]] = []
        #: each cell's episodes' geometry (None where an episode has none)
        self.geometry: list[list[dict[str, np.ndarray] | None]] = [
            [m.geometry for m in c.motions] for c in cells]
        for c in cells:
            eps = []
            home = c.cal_home if c.cal_home is not None else np.zeros(len(c.dof_mask),
                                                                    np.float32)
            for m in c.motions:
                if m.robot_mask is None:
                    raise ExportError(f"{m.path}: no robot mask; generate cells without "
                                      "--no-segmentation")
                # the start pose's offset from the calibration's home pose, per frame (zero
                # where either pose is unknown)
                off = (m.joint_positions - home if m.joint_positions is not None
                       and c.cal_home is not None else np.zeros_like(m.actions))
                eps.append((torch.from_numpy(m.frames).permute(0, 3, 1, 2).contiguous(),
                            torch.from_numpy(np.cumsum(m.actions, 0)),
                            torch.from_numpy(m.robot_mask),
                            torch.from_numpy(off.astype(np.float32) * c.dof_mask)))
            self.motions.append(eps)
        #: each cell's controller convention (channel c drives canonical joint perm[c] with
        #: sign signs[c]), for the per-DoF field targets
        self.conventions = [c.convention for c in cells]
        self.n = len(cells)
        self._flow: Any = None

    def batch(self, rng: np.random.Generator, cells: int, pairs: int,
              horizon: int, shared_start: bool = False,
              flow_target: str = "dis", dof_fields: bool = False) -> dict[str, Any]:
        """A batch: ``cell`` index per pair ``[P]``, ``start``/``target`` uint8
        ``[P, 3, H, W]``, ``cum`` float32 ``[P, A]`` (summed actions from start to target,
        rad), ``offset`` float32 ``[P, A]`` (the start frame's joint offset from the
        calibration's home pose, rad), ``mask0``/``mask`` float32 ``[P, 1, H, W]``, ``dis`` float32 ``[P, 2, H, W]``
        (DIS flow from target to start, px) and the calibration tensors of the chosen cells.
        With ``shared_start`` a cell's pairs share one episode and start frame (distinct
        targets), for the contrastive loss. ``flow_target`` ``true`` puts the exact backward
        flow (``true_flow`` float32 ``[P, 2, H, W]``, px, zero off the robot) and where it is
        known (``true_flow_valid`` float32 ``[P, 1, H, W]``: the robot at the target and the
        static scene, not what the arm uncovers) in place of ``dis``; the pair draws are the
        same. ``dof_fields`` adds each channel's true flow fields at the start frame
        (:meth:`start_dof_fields`): ``dof_fields`` float32 ``[P, A, 4, h, w]`` and
        ``dof_cover`` float32 ``[P, 1, h, w]``.

        Raises:
            ExportError: ``flow_target`` ``true`` or ``dof_fields`` for an episode without
                geometry (or, for ``dof_fields``, without per-DoF poses).
        """
        import cv2
        import torch

        from export.cells.geometry import true_backward_flow

        idx = rng.choice(self.n, size=cells, replace=False)
        st, tg, cum, m0, m1, dis, owner, offs = [], [], [], [], [], [], [], []
        valid: list[Any] = []
        dof: list[tuple[Any, Any]] = []
        dof_at: dict[tuple[int, int, int], tuple[Any, Any]] = {}
        if self._flow is None:  # made once: a DIS estimator holds no state between calls
            self._flow = cv2.DISOpticalFlow_create(  # type: ignore[attr-defined]
                cv2.DISOPTICAL_FLOW_PRESET_MEDIUM)
        flow_est = self._flow
        for j, ci in enumerate(idx):
            eps = self.motions[ci]
            if shared_start:  # (drawn only then: the independent draws stay as they were)
                e_shared = int(rng.integers(len(eps)))
                shared = eps[e_shared]
                s0 = int(rng.integers(0, shared[0].shape[0] - horizon))
                ds = rng.choice(np.arange(1, horizon + 1), size=pairs, replace=False)
            for k in range(pairs):
                e = e_shared if shared_start else int(rng.integers(len(eps)))
                fr, cs, mk, of = eps[e]
                t_count = fr.shape[0]
                if shared_start:
                    s, d = s0, int(ds[k])
                else:
                    d = int(rng.integers(1, min(horizon, t_count - 1) + 1))
                    s = int(rng.integers(0, t_count - d))
                t = s + d
                st.append(fr[s])
                tg.append(fr[t])
                # cumsum row r holds actions[0..r]; actions[s..t-1] move frame s to frame t
                cum.append(cs[t - 1] - (cs[s - 1] if s > 0 else 0.0))
                m0.append(mk[s])
                offs.append(of[s])
                m1.append(mk[t])
                owner.append(j)
                if dof_fields:
                    key = (int(ci), e, s)
                    if key not in dof_at:
                        dof_at[key] = self.start_dof_fields(int(ci), e, s)
                    dof.append(dof_at[key])
                if flow_target == "true":
                    geo = self.geometry[ci][e]
                    if geo is None:
                        raise ExportError("true-flow loss: a training episode has no geometry; "
                                          "render it with 'syncedge cells geometry'")
                    f, on = true_backward_flow(geo["depth"][t], geo["link"][t],
                                               geo["poses"][t], geo["poses"][s], geo["camera"])
                    dis.append(torch.from_numpy(f))
                    static = ~(mk[s].numpy() | mk[t].numpy())
                    valid.append(torch.from_numpy((on | static).astype(np.float32))[None])
                    continue
                g0 = cv2.cvtColor(fr[s].permute(1, 2, 0).numpy(), cv2.COLOR_RGB2GRAY)
                g1 = cv2.cvtColor(fr[t].permute(1, 2, 0).numpy(), cv2.COLOR_RGB2GRAY)
                dis.append(torch.from_numpy(flow_est.calc(g1, g0, None)).permute(2, 0, 1))
        dev = self.device
        idx_t = torch.from_numpy(idx).to(dev)
        flows = ({"true_flow": torch.stack(dis).to(dev),
                  "true_flow_valid": torch.stack(valid).to(dev)}
                 if flow_target == "true" else {"dis": torch.stack(dis).to(dev)})
        if dof_fields:
            flows["dof_fields"] = torch.stack([f for f, _ in dof]).to(dev)
            flows["dof_cover"] = torch.stack([c for _, c in dof]).to(dev)
        return {**flows,
            "owner": torch.tensor(owner, device=dev),
            "start": torch.stack(st).to(dev), "target": torch.stack(tg).to(dev),
            "cum": torch.stack(cum).to(torch.float32).to(dev),
            "offset": torch.stack(offs).to(dev),
            "mask0": torch.stack(m0)[:, None].to(torch.float32).to(dev),
            "mask": torch.stack(m1)[:, None].to(torch.float32).to(dev),
            "cal_frames": self.cal_frames[idx_t], "cal_actions": self.cal_actions[idx_t],
            "dof_mask": self.dof_mask[idx_t],
        }

    def start_dof_fields(self, cell: int, episode: int, frame: int,
                         grid: int = 16) -> tuple[Any, Any]:
        """Each action channel's true flow fields at one frame of a training episode, as the
        step's per-DoF fields are written (``StateStep.joint_fields``): float32 ``[A, 4,
        grid, grid]`` (``sin`` term dx, dy, then ``1 - cos`` term dx, dy; px at 64x64) and
        the robot's cover of each grid cell float32 ``[1, grid, grid]`` in [0, 1].

        Controller channel c turns canonical joint ``perm[c]`` by ``signs[c]`` times its
        action (:class:`~export.cells.sampling.Convention`), so its ``sin`` fields are that
        joint's times ``signs[c]`` and its ``1 - cos`` fields are the joint's; both are
        negated (a backward flow) and averaged over the robot pixels of each cell (zero
        where a cell sees no robot). Channels past the cell's DoF are zero. The model's
        angles run in each channel's *sweep* direction, so the loss multiplies the ``sin``
        fields by the channel's sweep direction (:func:`dof_field_loss`).

        Raises:
            ExportError: the episode has no geometry, or geometry without per-DoF poses
                (rendered before geometry version 2).
        """
        import torch

        from export.cells.geometry import true_dof_fields

        geo = self.geometry[cell][episode]
        if geo is None or "dof_poses" not in geo:
            raise ExportError("per-DoF field loss: a training episode has no per-DoF poses; "
                              "render its geometry again with 'syncedge cells geometry' "
                              "(geometry version 2)")
        fields, on = true_dof_fields(geo["depth"][frame], geo["link"][frame],
                                     geo["poses"][frame], geo["dof_poses"][frame],
                                     geo["camera"], float(geo["dof_step"]))
        conv = self.conventions[cell]
        n, h, w = len(conv.perm), *on.shape
        k = self.motions[cell][episode][3].shape[-1]  # A, the padded channel count
        out = np.zeros((k, 4, h, w), np.float32)
        signs = np.asarray(conv.signs, np.float32)
        out[:n] = fields[list(conv.perm)]
        out[:n, 0:2] *= signs[:, None, None, None]
        cell_px = h // grid
        robot = on.astype(np.float32)
        cover = robot.reshape(grid, cell_px, grid, cell_px).mean((1, 3))
        summed = (-out * robot).reshape(k, 4, grid, cell_px, grid, cell_px).sum((3, 5))
        pooled = summed / np.maximum(cover * cell_px * cell_px, 1.0)
        return torch.from_numpy(pooled.astype(np.float32)), torch.from_numpy(cover[None])


def calibration_states(model: Any, cal_frames: Any) -> Any:
    """States of calibration frames for the calibration reader, which reads only their
    pixel block: uint8 ``[N, T, 3, H, W]`` -> float32 ``[N, T, C, h, w]`` (features zero;
    the exported graphs feed the encoder's full states, identical in the pixel block)."""
    import torch
    import torch.nn.functional as F

    n, t = cal_frames.shape[:2]
    cfg = model.cfg
    x = cal_frames.flatten(0, 1).to(torch.float32) * (1.0 / 255.0)
    pix = F.pixel_unshuffle(x, 4)
    rest = x.new_zeros(n * t, cfg.layout.channels - 48, cfg.grid, cfg.grid)
    return torch.cat([pix, rest], 1).reshape(n, t, -1, cfg.grid, cfg.grid)


def batch_forward(model: Any, b: dict[str, Any], plate: bool = False,
                  keep: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """One batch of :meth:`PairSet.batch` through the model: the state at each target
    ``[P, C, h, w]`` and the decoder's outputs (``WarpDecoder.flows``: flows, fill weight,
    masks, frames). ``plate``: the fill takes each cell's background plate from its
    calibration frames (:func:`export.models.warp.background_plates`, no gradient).
    ``keep``: a dict that receives the pairs' ``context`` ``[P, A, D, h, w]`` and, for a
    model with a per-DoF flow network whose fields are not carried in the state, their
    ``fields`` ``[P, A, 4, h, w]`` (``StateStep.joint_fields``, made once and used by the
    step)."""
    ctx = model.calibration(calibration_states(model, b["cal_frames"]), b["cal_actions"],
                            b["dof_mask"])  # (N, A, D, h, w)
    ctx = ctx[b["owner"]]  # (P, A, D, h, w)
    z0 = model.encoder(b["start"])
    if model.cfg.start_offset:
        z0 = model.with_offset(z0, b["offset"])
    z0 = model.prepare(z0, ctx)
    fields = None
    if keep is not None:
        keep["context"] = ctx
        if model.cfg.joint_width and not model.cfg.joint_fields_in_state:
            fields = keep["fields"] = model.step.joint_fields(z0, ctx)
    z = model.state_at(z0, b["cum"], ctx, fields)
    if not plate:
        return z, model.decoder.flows(z)
    from export.models.warp import background_plates

    plates = background_plates(model, b["cal_frames"])  # (N, 4, H, W)
    return z, model.decoder.flows(z, plates[b["owner"]])


def true_flow_loss(flow: Any, coarse: Any, b: dict[str, Any]) -> Any:
    """The exact-flow loss of one batch: smooth L1 (px) of the arm's flow ``flow``
    ``[P, 2, 64, 64]`` against ``b["true_flow"]``, the mean over the robot pixels of the
    target plus the mean over the static scene; plus the same on the step's coarse flow
    ``coarse`` ``[P, 2, 16, 16]`` (the per-DoF fields' sum; None: none) against the true
    flow averaged over each 4x4 cell that sees the robot at the target in at least half
    its pixels."""
    import torch.nn.functional as F

    valid = b["true_flow_valid"]
    robot = b["mask"] * valid
    static = valid - robot
    err = F.smooth_l1_loss(flow, b["true_flow"], reduction="none").sum(1, True)
    loss = ((err * robot).sum() / robot.sum().clamp(min=1.0)
            + (err * static).sum() / static.sum().clamp(min=1.0))
    if coarse is not None:
        cover = F.avg_pool2d(robot, 4)
        target = F.avg_pool2d(b["true_flow"] * robot, 4) / cover.clamp(min=1e-6)
        keep = (cover >= 0.5).to(cover.dtype)
        cerr = F.smooth_l1_loss(coarse, target, reduction="none").sum(1, True)
        loss = loss + (cerr * keep).sum() / keep.sum().clamp(min=1.0)
    return loss


def dof_field_loss(fields: Any, context: Any, b: dict[str, Any]) -> tuple[Any, Any]:
    """The per-DoF field loss of one batch: smooth L1 (px) of each action channel's flow
    fields of the step (``fields`` ``[P, A, 4, h, w]``, ``StateStep.joint_fields``; kept
    by :func:`batch_forward`) against ``b["dof_fields"]`` (:meth:`PairSet.start_dof_fields`,
    the ``sin`` fields turned into the channel's sweep direction, read from the direction
    plane of ``context`` ``[P, A, D, h, w]``), the mean over the grid cells the robot covers
    at least half of and the channels the cell has.

    Returns:
        ``(loss, error)``: the loss (a scalar tensor) and the mean end-point error of the
        fields (px per unit of ``sin``/``1 - cos``, no gradient) over the same cells.
    """
    import torch
    import torch.nn.functional as F

    direction = context[:, :, -1, 0, 0]  # (P, A): sign of the sweep, 0 for absent channels
    turn = torch.stack([direction, direction, torch.ones_like(direction),
                        torch.ones_like(direction)], 2)[..., None, None]
    target = b["dof_fields"] * turn
    keep = ((b["dof_cover"] >= 0.5).to(fields.dtype)[:, None]
            * (direction != 0).to(fields.dtype)[:, :, None, None, None])  # (P, A, 1, h, w)
    err = F.smooth_l1_loss(fields, target, reduction="none").sum(2, True)
    count = keep.sum().clamp(min=1.0)
    with torch.no_grad():
        d = fields - target
        epe = (torch.linalg.vector_norm(d[:, :, 0:2], dim=2, keepdim=True)
               + torch.linalg.vector_norm(d[:, :, 2:4], dim=2, keepdim=True)) * 0.5
        epe = (epe * keep).sum() / count
    return (err * keep).sum() / count, epe


def losses(model: Any, b: dict[str, Any], flow_weight: float, mask_weight: float = 0.1,
           fill_weight: float = 0.0, contrast_weight: float = 0.0,
           pairs: int = 1, true_flow_weight: float = 0.0, plate: bool = False,
           dof_field_weight: float = 0.0) -> tuple[Any, dict[str, float]]:
    """Total loss and its parts for one batch (see the module docstring); with
    ``true_flow_weight`` the batch carries ``true_flow`` (not ``dis``) and
    :func:`true_flow_loss` takes the DIS loss's place; ``plate``: as in
    :func:`batch_forward`; with ``dof_field_weight`` the batch carries ``dof_fields`` and
    :func:`dof_field_loss` is added."""
    import torch
    import torch.nn.functional as F

    from export.models.warp import warp

    keep: dict[str, Any] = {}
    z, out = batch_forward(model, b, plate, keep)
    truth = b["target"].to(torch.float32) * (1.0 / 255.0)
    region = torch.clamp(b["mask0"] + b["mask"], 0, 1)
    region = F.max_pool2d(region, 5, 1, 2)
    err = (out["frames"] - truth).abs().mean(1, keepdim=True)
    photo = err.mean() + 4.0 * (err * region).sum() / region.sum().clamp(min=1.0)
    mask_loss = (F.binary_cross_entropy(out["mask"].clamp(1e-4, 1 - 1e-4), b["mask"])
                 + F.binary_cross_entropy(out["start_mask"].clamp(1e-4, 1 - 1e-4), b["mask0"]))
    if "true_flow" in b:
        coarse = (model.cfg.layout.slice(z, "joint_flow") if model.cfg.joint_width else None)
        flow_loss = true_flow_loss(out["flow"], coarse, b)
        flow_weight = true_flow_weight
    else:
        with torch.no_grad():
            dis_err = (warp(out["start"], b["dis"], model.decoder.base)
                       - truth).abs().mean(1, True)
            conf = torch.exp(-dis_err / 0.03) * torch.clamp(b["mask"] + b["mask0"], 0, 1)
        flow_loss = (F.smooth_l1_loss(out["flow"], b["dis"], reduction="none").sum(1, True)
                     * conf).sum() / conf.sum().clamp(min=1.0)
    # the fill weight may only be used where the arm uncovers background (robot at the
    # start, not at the target): without this the model erases what it is unsure of
    uncover = b["mask0"] * (1.0 - b["mask"])
    fill_loss = F.binary_cross_entropy(out["o"].clamp(1e-4, 1 - 1e-4), uncover)
    total = (photo + mask_weight * mask_loss + flow_weight * flow_loss
             + fill_weight * fill_loss)
    contrast = torch.zeros(())
    if contrast_weight and pairs > 1:
        # futures retrieval as a loss: within one start, each prediction must be nearer its
        # own target than the other targets (mean squared error over the moving region)
        p = out["frames"].reshape(-1, pairs, *out["frames"].shape[1:])
        tr = truth.reshape(p.shape)
        reg = region.reshape(-1, pairs, 1, *region.shape[2:]).amax(1, keepdim=True)
        dist = (((p[:, :, None] - tr[:, None]) ** 2) * reg[:, :, None]).flatten(3).sum(-1)
        dist = dist / reg.flatten(2).sum(-1)[:, :, None].clamp(min=1.0)
        logits = -dist / 0.002
        target = torch.arange(pairs, device=logits.device).expand(logits.shape[0], -1)
        contrast = F.cross_entropy(logits.flatten(0, 1), target.flatten())
        total = total + contrast_weight * contrast
    dof_loss, dof_epe = torch.zeros(()), torch.zeros(())
    if dof_field_weight and "dof_fields" in b:
        dof_loss, dof_epe = dof_field_loss(keep["fields"], keep["context"], b)
        total = total + dof_field_weight * dof_loss
    return total, {"photo": float(photo.detach()), "mask": float(mask_loss.detach()),
                   "flow": float(flow_loss.detach()), "fill": float(fill_loss.detach()),
                   "contrast": float(contrast.detach()), "dof": float(dof_epe)}


def _warm_start(model: Any, path: str) -> None:
    """Copy every tensor of another warp checkpoint that fits (where an input width grew,
    its first channels); a new per-DoF flow network starts with a zero last layer, so the
    warm-started model begins exactly where the checkpoint was."""
    import torch

    src = torch.load(path, map_location="cpu", weights_only=False)["model"]
    own = model.state_dict()
    copied = 0
    with torch.no_grad():
        for k, v in own.items():
            w = src.get(k)
            if w is None:
                continue
            if w.shape == v.shape:
                v.copy_(w)
            elif w.dim() == v.dim() and all(a <= b for a, b in zip(w.shape, v.shape, strict=True)):
                v.zero_()
                v[tuple(slice(0, n) for n in w.shape)] = w
            else:
                continue
            copied += 1
        if getattr(model.step, "joint", None) is not None and "step.joint.6.weight" not in src:
            model.step.joint[-1].weight.zero_()
            model.step.joint[-1].bias.zero_()
    print(f"warm start from {path}: {copied} of {len(own)} tensors", file=sys.stderr)


def _save(path: Path, payload: dict[str, Any]) -> None:
    import torch

    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    tmp.replace(path)


def train_warp(opts: WarpTrainOptions, cfg: Any = None) -> Path:
    """Train (or resume) a warp model; returns the checkpoint path.

    Raises:
        ExportError: no data, a checkpoint that does not fit, a non-resumable output.
    """
    import torch

    from export.models.warp import WarpConfig, WarpModel
    from export.train.data import load_cells

    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "warp_nocal.pt" if opts.no_calibration else "warp.pt"
    ckpt_path = out / name
    if opts.threads:
        torch.set_num_threads(opts.threads)
    device = torch.device(opts.device)
    cfg = cfg or WarpConfig(use_calibration=not opts.no_calibration,
                            joint_width=opts.joint_width, start_offset=opts.start_offset,
                            joint_dilations=tuple(opts.joint_dilations),
                            joint_attention=opts.joint_attention,
                            composite=opts.composite)
    if opts.dof_field_weight and not cfg.joint_width:
        raise ExportError("--dof-field-weight needs the step's per-DoF flow network "
                          "(--joint-width > 0)")
    model = WarpModel(cfg).to(device)
    if opts.init and not ckpt_path.exists():
        _warm_start(model, opts.init)
    optim = torch.optim.AdamW(model.parameters(), lr=opts.lr, weight_decay=1e-4)
    step0, history = 0, []
    if ckpt_path.exists():
        if not opts.resume:
            raise ExportError(f"{ckpt_path} exists; pass --resume to continue it or another "
                              "--out")
        ck = torch.load(ckpt_path, map_location=device, weights_only=False)
        if ck["config"] != cfg.to_dict():
            raise ExportError(f"{ckpt_path}: trained with another model configuration")
        model.load_state_dict(ck["model"])
        optim.load_state_dict(ck["optim"])
        step0, history = int(ck["step"]), list(ck["history"])
        if step0 >= opts.steps:
            print(f"{ckpt_path}: already at step {step0} >= --steps {opts.steps}",
                  file=sys.stderr)
            return ckpt_path
    cells = []
    for root in opts.data:
        cells += load_cells(root, ["train"], cfg.max_dof, cfg.segment_frames,
                            limit=opts.max_cells,
                            with_geometry=opts.true_flow_weight > 0 or opts.dof_field_weight > 0)
    pairs = PairSet(cells, device)
    print(f"{len(cells)} training cells from {', '.join(opts.data)}", file=sys.stderr,
          flush=True)
    rng = np.random.default_rng(opts.seed + step0)

    def lr_at(step: int) -> float:
        warm = 100
        if step < warm:
            return opts.lr * (step + 1) / warm
        p = (step - warm) / max(1, opts.steps - warm)
        return opts.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(p, 1.0))))

    def payload(step: int) -> dict[str, Any]:
        return {"model": model.state_dict(), "optim": optim.state_dict(), "step": step,
                "history": history, "config": cfg.to_dict(), "options": asdict(opts),
                "cells": len(cells)}

    t0, seen = time.perf_counter(), 0
    model.train()
    for step in range(step0, opts.steps):
        for g in optim.param_groups:
            g["lr"] = lr_at(step)
        b = pairs.batch(rng, min(opts.cells_per_batch, pairs.n), opts.pairs_per_cell,
                        opts.horizon, shared_start=opts.contrast_weight > 0,
                        flow_target="true" if opts.true_flow_weight > 0 else "dis",
                        dof_fields=opts.dof_field_weight > 0)
        fw = opts.flow_weight * max(opts.flow_floor, 1.0 - step / max(1, opts.steps))
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=opts.bf16):
            loss, parts = losses(model, b, fw, opts.mask_weight, opts.fill_weight,
                                 opts.contrast_weight, opts.pairs_per_cell,
                                 opts.true_flow_weight, opts.plate, opts.dof_field_weight)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        seen += b["start"].shape[0]
        history.append([step, float(loss.detach()), parts["photo"], parts["mask"], parts["flow"],
                        parts["fill"]])
        if (step + 1) % 20 == 0 or step == step0:
            el = time.perf_counter() - t0
            print(f"step {step + 1}/{opts.steps} loss {float(loss.detach()):.4f} photo "
                  f"{parts['photo']:.4f} mask {parts['mask']:.4f} flow {parts['flow']:.3f} "
                  f"fill {parts['fill']:.3f} contrast {parts['contrast']:.3f} "
                  + (f"dof {parts['dof']:.2f}px " if opts.dof_field_weight else "") +
                  f"lr {lr_at(step):.2e} {seen / el:.1f} pairs/s", file=sys.stderr, flush=True)
        if (step + 1) % opts.save_every == 0:
            _save(ckpt_path, payload(step + 1))
        if opts.max_minutes is not None and time.perf_counter() - t0 > 60 * opts.max_minutes:
            _save(ckpt_path, payload(step + 1))
            print(f"stopped after {opts.max_minutes:g} minutes at step {step + 1} of "
                  f"{opts.steps}; --resume continues it", file=sys.stderr, flush=True)
            return ckpt_path
    _save(ckpt_path, payload(opts.steps))
    return ckpt_path


DESCRIPTION = ("Train the warp world model (export/models/warp.py) on generated cells; writes "
               "OUT/warp.pt (OUT/warp_nocal.pt with --no-calibration) every --save-every "
               "steps; --resume continues it.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``syncedge model train-warp``."""
    p.add_argument("--data", action="append", required=True,
                   help="a cells folder with a train split (repeat for several)")
    p.add_argument("--out", required=True, help="run folder")
    p.add_argument("--steps", type=int, default=3000, help="optimizer steps in all")
    p.add_argument("--cells-per-batch", type=int, default=6, help="cells per optimizer step")
    p.add_argument("--pairs-per-cell", type=int, default=6,
                   help="(start, target) pairs per cell, 1-16 frames apart")
    p.add_argument("--lr", type=float, default=2e-3,
                   help="peak learning rate (100 warm-up steps, then cosine to 5%%)")
    p.add_argument("--seed", type=int, default=0, help="seed of the batch draws")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    p.add_argument("--resume", action="store_true",
                   help="continue OUT's checkpoint (the schedule is recomputed for --steps)")
    p.add_argument("--save-every", type=int, default=200, help="checkpoint every N steps")
    p.add_argument("--max-minutes", type=float, default=None,
                   help="stop with a checkpoint after this many minutes of training (the "
                        "schedule stays the one of --steps; --resume continues it)")
    p.add_argument("--flow-weight", type=float, default=0.05,
                   help="weight of the DIS-flow loss at the start (decays linearly to "
                        "--flow-floor times it)")
    p.add_argument("--flow-floor", type=float, default=0.1,
                   help="the DIS-flow weight at the last step, as a fraction of --flow-weight")
    p.add_argument("--true-flow-weight", type=float, default=0.0,
                   help="weight of the exact-flow loss (the data's geometry, 'syncedge cells "
                        "geometry'), which replaces the DIS-flow loss (0: off)")
    p.add_argument("--dof-field-weight", type=float, default=0.0,
                   help="weight of the per-DoF field loss: each channel's flow fields of the "
                        "step against its true fields at the start frame (needs the data's "
                        "geometry, version 2, and --joint-width; 0: off)")
    p.add_argument("--mask-weight", type=float, default=0.1, help="robot-mask BCE weight")
    p.add_argument("--fill-weight", type=float, default=0.0,
                   help="weight of the fill-weight BCE against the uncovered pixels")
    p.add_argument("--no-calibration", action="store_true",
                   help="the history-mode baseline: learned tokens per channel index")
    p.add_argument("--max-cells", type=int, default=None,
                   help="at most this many training cells per --data folder")
    p.add_argument("--init", help="warm start from another warp checkpoint (tensors that fit)")
    p.add_argument("--joint-width", type=int, default=0,
                   help="width of the step's per-DoF flow network (0: none)")
    p.add_argument("--joint-dilations", default="",
                   help="comma-separated dilations of a residual branch of the per-DoF flow "
                        "network, e.g. 2,4,8 (WarpConfig.joint_dilations; default none)")
    p.add_argument("--joint-attention", type=int, default=0,
                   help="key channels of the per-DoF flow network's attention from the start "
                        "frame to each channel's calibration rest frame "
                        "(WarpConfig.joint_attention; default 0: none)")
    p.add_argument("--composite", choices=("blend", "layered"), default="blend",
                   help="how the decoder composites (WarpConfig.composite): blend (every pixel "
                        "follows the arm's flow, mixed with the fill) or layered (only the "
                        "robot layer moves; the static scene stays the start frame's)")
    p.add_argument("--plate", action="store_true",
                   help="the fill takes a background plate from each cell's calibration frames "
                        "where the model's start-mask head sees no robot (PyTorch only; the "
                        "exported graphs do not carry a plate)")
    p.add_argument("--start-offset", action="store_true",
                   help="give the model the start pose's joint offsets from the calibration's "
                        "home pose (WarpConfig.start_offset)")
    p.add_argument("--contrast-weight", type=float, default=0.0,
                   help="weight of the futures-retrieval loss: a cell's pairs share one start "
                        "and each prediction must be nearest its own target (0: off, pairs "
                        "drawn independently)")


def options_from_args(args: argparse.Namespace) -> WarpTrainOptions:
    """:class:`WarpTrainOptions` from parsed :func:`add_arguments` options."""
    return WarpTrainOptions(data=args.data, out=args.out, steps=args.steps,
                            cells_per_batch=args.cells_per_batch,
                            pairs_per_cell=args.pairs_per_cell, lr=args.lr, seed=args.seed,
                            device=args.device, threads=args.threads, bf16=args.bf16,
                            resume=args.resume, save_every=args.save_every,
                            no_calibration=args.no_calibration, max_cells=args.max_cells,
                            flow_weight=args.flow_weight, flow_floor=args.flow_floor,
                            mask_weight=args.mask_weight, fill_weight=args.fill_weight,
                            init=args.init, joint_width=args.joint_width,
                            contrast_weight=args.contrast_weight,
                            start_offset=args.start_offset,
                            true_flow_weight=args.true_flow_weight,
                            joint_dilations=tuple(int(v) for v in args.joint_dilations.split(",")
                                                  if v.strip()),
                            joint_attention=args.joint_attention,
                            composite=args.composite, plate=args.plate,
                            max_minutes=args.max_minutes,
                            dof_field_weight=args.dof_field_weight)


def main(argv: list[str] | None = None) -> int:
    """Entry point (``python -m export.train.warp``); prints the checkpoint path."""
    p = argparse.ArgumentParser(prog="python -m export.train.warp", description=DESCRIPTION)
    add_arguments(p)
    print(json.dumps({"checkpoint": str(train_warp(options_from_args(p.parse_args(argv))))}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
