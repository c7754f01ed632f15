"""Training the reference model in three stages, on CPU cores or several processes (DDP).

Stages (``syncedge model train --stage ...``):

- ``ae``: encoder and decoder on frames of the training split; L1 plus a squared error
  weighted 8x on robot pixels (the robot mask is training data only), so motion survives.
- ``keypoint``: the end-effector keypoint regressor on ground-truth frames (evaluation only),
  a fraction of them degraded (blur, dimming, contrast, noise; ``--keypoint-augment``) so
  that it still finds the arm in predicted frames.
- ``dynamics``: calibration and step networks on latents of the frozen encoder (squared
  latent error weighted 10x on latent cells the robot covers), with
  SyncWorld's recipe scaled down (Yang et al., arXiv 2609.09155): random relabelling of the
  action channels (consistent across calibration, history and future actions; never a
  held-out convention), the calibration dropped in a fraction of samples (then with a full
  real history), the recent history masked in a fraction of samples (only the newest
  latent kept), optionally a fraction of windows started from one frame with the runtime's
  padding (``--single-frame-start``), and an unrolled multi-step loss so rollouts stay sharp.
  ``--no-calibration`` trains the baseline with a learned constant context instead.

Checkpoints (``OUT/<stage>.pt``) are written atomically every ``--checkpoint-every`` steps
and at the end; ``--resume`` continues from one. A checkpoint from another architecture or
configuration is refused by name. Run several processes with ``torchrun --standalone
--nproc_per_node N -m export.train.latent ...`` (gloo on CPUs, nccl on GPUs; on several hosts use
torchrun's rendezvous options instead of ``--standalone``); rank 0 writes. ``--device cuda``
trains on NVIDIA GPUs (one per process, ``LOCAL_RANK``; nccl between processes); batches are
still assembled on the CPU, and checkpoints hold CPU tensors so they load anywhere.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from edge.fileio import atomic_write
from export.errors import ExportError
from export.models.latent import KeypointNet, ModelConfig, WorldModel
from export.train.data import Cell, load_cells, relabel, sample_relabelling
from export.train.options import STAGES, TrainOptions, add_train_arguments, options_from_args

__all__ = ["ARCH", "TrainOptions", "train_stage", "load_checkpoint", "save_checkpoint", "main"]

log = logging.getLogger("syncedge.train")

ARCH = "syncedge-reference-v1"



# -- checkpoints ------------------------------------------------------------------------
def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write a checkpoint atomically (temporary file, fsync, rename)."""
    buf = io.BytesIO()
    torch.save(payload, buf)
    atomic_write(path, lambda f: f.write(buf.getvalue()))


def load_checkpoint(path: str | Path, cfg: ModelConfig | None = None) -> dict[str, Any]:
    """Load a checkpoint and check it was made by this architecture (and ``cfg``, if given).

    Raises:
        ExportError: naming the file and what differs.
    """
    path = Path(path)
    try:
        ck = torch.load(path, map_location="cpu", weights_only=False)
    except FileNotFoundError:
        raise ExportError(f"{path}: no such checkpoint") from None
    except Exception as exc:
        raise ExportError(f"{path}: not a readable checkpoint ({exc})") from None
    if not isinstance(ck, dict) or ck.get("arch") != ARCH:
        found = ck.get("arch") if isinstance(ck, dict) else type(ck).__name__
        raise ExportError(f"{path}: checkpoint of architecture {found!r}; expected {ARCH!r}")
    found_cfg = ModelConfig.from_dict(ck["config"]).to_dict() if "config" in ck else None
    if cfg is not None and found_cfg != cfg.to_dict():
        diff = {k: (v, cfg.to_dict().get(k)) for k, v in (found_cfg or {}).items()
                if cfg.to_dict().get(k) != v}
        raise ExportError(f"{path}: checkpoint configuration differs (checkpoint, wanted): {diff}")
    return ck


_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _ddp(backend: str = "gloo") -> tuple[int, int]:
    """Join the process group torchrun describes (``WORLD_SIZE`` > 1) over ``backend``
    (``gloo`` for CPU training, ``nccl`` for GPUs); (rank, world size).

    With gloo and every process on this host (``MASTER_ADDR`` a loopback address), gloo's
    pairs are bound to the loopback interface (``GLOO_SOCKET_IFNAME``, unless already set)
    instead of whatever address the host name resolves to, so single-host runs do not depend
    on the host's name resolution.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not torch.distributed.is_initialized():
        if (backend == "gloo" and os.environ.get("MASTER_ADDR", "") in _LOOPBACK
                and "GLOO_SOCKET_IFNAME" not in os.environ):
            loopback = _loopback_interface()
            if loopback:
                os.environ["GLOO_SOCKET_IFNAME"] = loopback
        torch.distributed.init_process_group(backend)
    rank = torch.distributed.get_rank() if world > 1 else 0
    return rank, world


def _training_device(name: str) -> torch.device:
    """The device this process trains on: ``cpu``, or ``cuda`` (the GPU numbered by torchrun's
    ``LOCAL_RANK``, 0 without torchrun).

    Raises:
        ExportError: ``cuda`` asked for where PyTorch finds no CUDA GPU, or an unknown name.
    """
    if name == "cpu":
        return torch.device("cpu")
    if name != "cuda":
        raise ExportError(f"--device: unknown device {name!r}; expected 'cpu' or 'cuda'")
    if not torch.cuda.is_available():
        raise ExportError("--device cuda: PyTorch finds no CUDA GPU here (use --device cpu)")
    index = int(os.environ.get("LOCAL_RANK", "0"))
    if index >= torch.cuda.device_count():
        raise ExportError(f"--device cuda: LOCAL_RANK {index} but only "
                          f"{torch.cuda.device_count()} GPU(s) here")
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def _cpu_tree(obj: Any) -> Any:
    """``obj`` (nested dicts and lists, e.g. an optimizer state) with tensors on the CPU."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _cpu_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu_tree(v) for v in obj)
    return obj


def _loopback_interface() -> str | None:
    """Name of this host's loopback network interface (``lo`` on Linux), or None."""
    import socket
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    return "lo" if "lo" in names else next((n for n in names if n.startswith("lo")), None)


# -- batches ------------------------------------------------------------------------------
def _frame_pool(cells: list[Cell]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    frames, masks, ee = [], [], []
    for c in cells:
        for m in c.motions:
            frames.append(m.frames)
            masks.append(m.robot_mask if m.robot_mask is not None
                         else np.zeros(m.frames.shape[:3], bool))
            ee.append(m.ee_px if m.ee_px is not None
                      else np.full((len(m.frames), 2), np.nan, np.float32))
        frames.append(c.cal_frames)
        masks.append(np.zeros(c.cal_frames.shape[:3], bool))
        ee.append(np.full((len(c.cal_frames), 2), np.nan, np.float32))
    return np.concatenate(frames), np.concatenate(masks), np.concatenate(ee)


def _motion_weights(mask: np.ndarray | None, size: int) -> torch.Tensor:
    """Per-frame latent-cell loss weights ``[T, 1, size, size]``: 1, or 1 + 9 on cells the
    robot covers in this frame or the previous one (dilated by one cell), so the loss is
    not dominated by the static background. Robot masks are training data only."""
    if mask is None:
        return torch.ones(0)
    m = torch.from_numpy(mask).to(torch.float32)[:, None]  # (T, 1, H, W)
    m = torch.maximum(m, torch.cat([m[:1], m[:-1]]))
    cells = F.adaptive_max_pool2d(m, size)
    cells = F.max_pool2d(cells, 3, stride=1, padding=1)
    return 1.0 + 9.0 * cells


class LatentSet:
    """Every cell's calibration and motion latents, encoded once by the frozen encoder (on
    the model's device) and kept on the CPU, where batches are assembled."""

    def __init__(self, cells: list[Cell], model: WorldModel):
        self.cells = cells
        cal_latents: list[torch.Tensor] = []
        self.motion_latents = []
        self.motion_weights = []
        size = model.cfg.latent_size
        with torch.no_grad():
            for c in cells:
                cal_latents.append(
                    model.encode_frames(torch.from_numpy(c.cal_frames)).cpu())
                self.motion_latents.append([model.encode_frames(torch.from_numpy(m.frames)).cpu()
                                            for m in c.motions])
                self.motion_weights.append([_motion_weights(m.robot_mask, size)
                                            for m in c.motions])
        self.cal_store = torch.stack(cal_latents)  # (cells, K*L+1, C, h, w)

    @property
    def cal_latents(self) -> list[torch.Tensor]:
        """Each cell's calibration latents ``[K*L+1, C, h, w]`` (views of ``cal_store``)."""
        return list(self.cal_store.unbind(0))

    def batch(self, rng: np.random.Generator, size: int, cfg: ModelConfig, rollout: int,
              opts: TrainOptions | None = None) -> dict[str, torch.Tensor]:
        """A training batch of windows with augmentation (see the module docstring).

        The calibration latents are not copied into the batch: ``cal_index`` (int64 ``[B]``)
        names each sample's cell, whose latents are ``cal_store[cal_index]`` (gathered where
        the store lives, e.g. once on the GPU, instead of copying ~0.5 MB per sample)."""
        s = cfg.history
        hl, ha, fa, tgt, cl, ca, dm, wt = [], [], [], [], [], [], [], []
        for _ in range(size):
            i = int(rng.integers(len(self.cells)))
            cell = self.cells[i]
            j = int(rng.integers(len(cell.motions)))
            z = self.motion_latents[i][j]
            a = cell.motions[j].actions
            t_count = len(z)
            drop = opts is not None and rng.random() < opts.calibration_dropout
            lo = s - 1 if drop else 0  # dropped calibration: force a full real history
            t0 = int(rng.integers(lo, t_count - rollout))
            idx = np.arange(t0 - s + 1, t0 + 1)
            lat = z[np.clip(idx, 0, None)]
            act = np.where((idx >= 1)[:, None], a[np.clip(idx - 1, 0, None)], 0.0)
            if (opts is not None and opts.single_frame_start > 0 and not drop
                    and rng.random() < opts.single_frame_start):
                lat = z[t0][None].expand(s, *z.shape[1:])  # the runtime's padding
                act = np.zeros_like(act)
            cal_a = cell.cal_actions
            fut = a[t0:t0 + rollout]
            if opts is not None:
                r = sample_relabelling(rng, cell.convention)
                act, cal_a, fut = relabel(act, r), relabel(cal_a, r), relabel(fut, r)
                if rng.random() < opts.history_mask:
                    lat = lat.clone()
                    lat[:-1] = 0.0
            mask = cell.dof_mask * (0.0 if drop else 1.0)
            hl.append(lat)
            ha.append(torch.from_numpy(np.asarray(act, np.float32)))
            fa.append(torch.from_numpy(np.asarray(fut, np.float32)))
            tgt.append(z[t0 + 1:t0 + 1 + rollout])
            weights = self.motion_weights[i][j]
            wt.append(weights[t0 + 1:t0 + 1 + rollout] if len(weights)
                      else torch.ones(rollout, 1, *z.shape[-2:]))
            cl.append(i)
            ca.append(torch.from_numpy(np.asarray(cal_a, np.float32)))
            dm.append(torch.from_numpy(np.asarray(mask, np.float32)))
        return {"hist_latents": torch.stack(hl), "hist_actions": torch.stack(ha),
                "actions": torch.stack(fa), "targets": torch.stack(tgt),
                "cal_index": torch.tensor(cl, dtype=torch.int64), "cal_actions": torch.stack(ca),
                "dof_mask": torch.stack(dm), "weights": torch.stack(wt)}


# -- stages -------------------------------------------------------------------------------
def _ae_loss(model: WorldModel, frames: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    x = frames.permute(0, 3, 1, 2)
    target = x.to(torch.float32) / 255.0
    rec = model.decoder(model.encoder(x))
    w = 1.0 + 7.0 * masks[:, None].to(torch.float32)
    return (rec - target).abs().mean() + ((rec - target) ** 2 * w).mean() * 4.0


def _dyn_loss(model: WorldModel, b: dict[str, torch.Tensor]) -> torch.Tensor:
    ctx = model.calibration(b["cal_latents"], b["cal_actions"], b["dof_mask"])
    start = b["hist_latents"][:, -1]
    pred = model.rollout(start, b["actions"], ctx, b["hist_latents"], b["hist_actions"])
    w = b["weights"]  # (B, R, 1, h, w)
    return (((pred - b["targets"]) ** 2) * w).mean() / w.mean()


def degrade_frames(frames: torch.Tensor, rng: np.random.Generator,
                   fraction: float) -> torch.Tensor:
    """Degrade a random ``fraction`` of uint8 frames ``[B, H, W, 3]`` the way predicted
    frames differ from rendered ones: Gaussian blur (sigma 0.5-2.5 px), lower contrast
    (x0.5-1.0 about the frame mean), dimming (x0.6-1.0) and noise (sigma up to 6/255).
    Returns new uint8 frames of the same shape; labels (keypoints) stay valid, since none of
    these moves anything."""
    import cv2

    pick: np.ndarray | list[int] = (np.flatnonzero(rng.random(len(frames)) < fraction)
                                    if fraction > 0 else [])
    if not len(pick):
        return frames
    out = frames.numpy().copy()
    for i in pick:
        img = cv2.GaussianBlur(out[i].astype(np.float32) / 255.0, (0, 0),
                               float(rng.uniform(0.5, 2.5)), borderType=cv2.BORDER_REPLICATE)
        mean = img.mean()
        img = ((img - mean) * rng.uniform(0.5, 1.0) + mean) * rng.uniform(0.6, 1.0)
        img = img + rng.normal(0.0, rng.uniform(0.0, 6 / 255), img.shape)
        out[i] = np.clip(img * 255 + 0.5, 0, 255).astype(np.uint8)
    return torch.from_numpy(out)


def _kp_loss(net: KeypointNet, frames: torch.Tensor, ee: torch.Tensor) -> torch.Tensor:
    return F.smooth_l1_loss(net(frames.permute(0, 3, 1, 2)), ee)


class _StageLoss(torch.nn.Module):
    """The trainable networks of a stage with the loss as ``forward``, so that
    ``DistributedDataParallel`` can wrap it (gradients averaged across processes)."""

    def __init__(self, stage: str, model: WorldModel, keypoint: KeypointNet | None):
        super().__init__()
        self.stage = stage
        self.model = model
        self.keypoint = keypoint

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.stage == "ae":
            return _ae_loss(self.model, batch["frames"], batch["masks"])
        if self.stage == "keypoint":
            assert self.keypoint is not None
            return _kp_loss(self.keypoint, batch["frames"], batch["ee"])
        return _dyn_loss(self.model, batch)


def train_stage(opts: TrainOptions, cfg: ModelConfig | None = None,
                progress: Any = None) -> Path:
    """Run one training stage; returns the checkpoint path.

    Raises:
        ExportError: unknown stage, missing data or earlier stage, or a mismatched checkpoint.
    """
    if opts.stage not in STAGES:
        raise ExportError(f"unknown stage {opts.stage!r}; expected one of {list(STAGES)}")
    if opts.threads:
        torch.set_num_threads(opts.threads)
    device = _training_device(opts.device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # shapes are fixed for the whole run
    rank, world = _ddp("nccl" if device.type == "cuda" else "gloo")
    if cfg is None:
        try:
            cfg = ModelConfig(use_calibration=not opts.no_calibration,
                              global_token_channels=(0 if opts.no_calibration
                                                     else opts.global_token_channels))
        except ValueError as exc:
            raise ExportError(f"--global-token-channels: {exc}") from None
    out = Path(opts.out)
    name = {"ae": "ae", "keypoint": "keypoint",
            "dynamics": "dynamics" if cfg.use_calibration else "dynamics_nocal"}[opts.stage]
    ck_path = out / f"{name}.pt"
    torch.manual_seed(opts.seed)
    rng = np.random.default_rng([opts.seed, rank])
    cells = load_cells(opts.data, ["train"], cfg.max_dof, cfg.segment_frames,
                       limit=opts.limit_cells)
    model = WorldModel(cfg)
    keypoint = KeypointNet(image_size=cfg.image_size) if opts.stage == "keypoint" else None
    net: torch.nn.Module
    if keypoint is not None:
        net = keypoint
    elif opts.stage == "dynamics":
        ae = load_checkpoint(out / "ae.pt")
        model.encoder.load_state_dict(ae["encoder"])
        model.decoder.load_state_dict(ae["decoder"])
        for p in [*model.encoder.parameters(), *model.decoder.parameters()]:
            p.requires_grad_(False)
        net = torch.nn.ModuleDict({"calibration": model.calibration, "step": model.step})
    else:
        net = torch.nn.ModuleDict({"encoder": model.encoder, "decoder": model.decoder})
    model.to(device)
    if keypoint is not None:
        keypoint.to(device)
    opt = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=opts.lr,
                            weight_decay=1e-4)
    step0 = 0
    history: list[dict[str, float]] = []
    if opts.resume and ck_path.is_file():
        ck = load_checkpoint(ck_path, cfg)
        for key, sd in ck["weights"].items():
            net[key].load_state_dict(sd) if isinstance(net, torch.nn.ModuleDict) \
                else net.load_state_dict(sd)
        opt.load_state_dict(ck["optimizer"])
        step0, history = ck["step"], ck.get("history", [])
        rng = np.random.default_rng([opts.seed, rank, step0])
        log.info("resumed %s at step %d", ck_path, step0)
    trained = {id(p) for p in net.parameters()}
    for p in model.parameters():  # only this stage's networks take gradients (DDP needs it)
        p.requires_grad_(id(p) in trained and p.requires_grad)
    loss_module: torch.nn.Module = _StageLoss(opts.stage, model, keypoint)
    if world > 1:
        loss_module = torch.nn.parallel.DistributedDataParallel(
            loss_module, device_ids=[device.index] if device.type == "cuda" else None)
    if opts.stage in ("ae", "keypoint"):
        frames, masks, ee = _frame_pool(cells)
        if opts.stage == "keypoint":
            ok = np.isfinite(ee).all(1) & (ee >= 0).all(1) & (ee < cfg.image_size).all(1)
            frames, masks, ee = frames[ok], masks[ok], ee[ok]
    else:
        latents = LatentSet(cells, model)
        cal_store = latents.cal_store.to(device)

    def payload(step: int) -> dict[str, Any]:
        # every tensor on the CPU, so checkpoints load anywhere
        weights = ({k: _cpu_tree(v.state_dict()) for k, v in net.items()}
                   if isinstance(net, torch.nn.ModuleDict)
                   else {"keypoint": _cpu_tree(net.state_dict())})
        return {"arch": ARCH, "config": cfg.to_dict(), "stage": opts.stage, "step": step,
                "weights": weights, "optimizer": _cpu_tree(opt.state_dict()),
                "history": history, "options": vars(opts), "data_seed": opts.seed,
                **({"encoder": _cpu_tree(model.encoder.state_dict()),
                    "decoder": _cpu_tree(model.decoder.state_dict())}
                   if opts.stage == "ae" else {})}

    t0 = time.perf_counter()
    running = torch.zeros((), device=device)  # summed on the device: no sync per step
    for step in range(step0, opts.steps):
        lr = opts.lr * 0.5 * (1 + math.cos(math.pi * step / max(opts.steps, 1)))
        for g in opt.param_groups:
            g["lr"] = lr
        if opts.stage in ("ae", "keypoint"):
            idx = rng.integers(len(frames), size=opts.batch)
            picked = torch.from_numpy(frames[idx])
            if opts.stage == "keypoint":
                picked = degrade_frames(picked, rng, opts.keypoint_augment)
            batch = {"frames": picked,
                     "masks": torch.from_numpy(masks[idx]), "ee": torch.from_numpy(ee[idx])}
        else:
            batch = latents.batch(rng, opts.batch, cfg, opts.rollout, opts)
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        if "cal_index" in batch:
            batch["cal_latents"] = cal_store[batch.pop("cal_index")]
        loss = loss_module(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        running += loss.detach()
        done = step + 1
        if rank == 0 and (done % opts.log_every == 0 or done == opts.steps):
            rate = (done - step0) / (time.perf_counter() - t0)
            avg = float(running) / (opts.log_every if done % opts.log_every == 0
                                    else done % opts.log_every or 1)
            history.append({"step": done, "loss": avg, "lr": lr})
            msg = (f"{opts.stage} step {done}/{opts.steps} loss {avg:.5f} lr {lr:.2e} "
                   f"{rate:.2f} steps/s eta {(opts.steps - done) / max(rate, 1e-9) / 60:.1f} min")
            (progress or log.info)(msg)
            running.zero_()
        if rank == 0 and (done % opts.checkpoint_every == 0 or done == opts.steps):
            save_checkpoint(ck_path, payload(done))
    if world > 1:
        torch.distributed.barrier()
    return ck_path


def build_parser() -> argparse.ArgumentParser:
    """Parser of ``syncedge model train`` (also ``python -m export.train.latent``)."""
    p = argparse.ArgumentParser(prog="syncedge model train", description=__doc__.split("\n\n")[0])
    add_train_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point for ``python -m export.train.latent`` (and torchrun)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    args = build_parser().parse_args(argv)
    try:
        path = train_stage(options_from_args(args))
    finally:
        # leave the process group before exiting, so no rank's transport outlives a peer's
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    print(json.dumps({"checkpoint": str(path)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
