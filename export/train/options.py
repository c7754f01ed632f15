"""Options of ``syncedge model train`` (no torch import: the CLI registers them cheaply)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

__all__ = ["STAGES", "TrainOptions", "add_train_arguments", "options_from_args"]

STAGES = ("ae", "keypoint", "dynamics")


@dataclass
class TrainOptions:
    """Options of one training stage (see ``syncedge model train --help``)."""

    stage: str
    data: str
    out: str
    steps: int
    batch: int = 32
    lr: float = 2e-3
    seed: int = 0
    rollout: int = 6
    calibration_dropout: float = 0.15
    history_mask: float = 0.15
    no_calibration: bool = False
    resume: bool = False
    checkpoint_every: int = 200
    log_every: int = 25
    threads: int = 0
    limit_cells: int | None = None
    keypoint_augment: float = 0.0
    single_frame_start: float = 0.0
    global_token_channels: int = 0
    device: str = "cpu"


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    """Add the training options to ``p``."""
    p.add_argument("--stage", required=True, choices=STAGES,
                   help="ae: frame autoencoder; keypoint: end-effector keypoint regressor "
                        "(needs OUT/ae.pt); dynamics: calibration network and step network "
                        "on the frozen autoencoder's latents (needs OUT/ae.pt)")
    p.add_argument("--data", default="data/cells", help="generated cells (default data/cells)")
    p.add_argument("--out", default="runs/reference",
                   help="checkpoint folder; the stage writes OUT/<stage>.pt, the model without "
                        "calibration OUT/dynamics_nocal.pt (default runs/reference)")
    p.add_argument("--steps", type=int, required=True,
                   help="optimizer steps in all (with --resume: the total, not more steps); "
                        "the cosine learning-rate schedule ends at this step")
    p.add_argument("--batch", type=int, default=32,
                   help="samples per step in each process (default 32)")
    p.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (default 2e-3)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of sampling, augmentation and initialisation (default 0)")
    p.add_argument("--rollout", type=int, default=6,
                   help="dynamics stage: unrolled steps of the loss (default 6)")
    p.add_argument("--calibration-dropout", type=float, default=0.15,
                   help="dynamics stage: fraction of samples whose calibration is zeroed, "
                        "with a full real history instead (default 0.15)")
    p.add_argument("--history-mask", type=float, default=0.15,
                   help="dynamics stage: fraction of samples whose recent history latents "
                        "are masked, so frames cannot just be copied (default 0.15)")
    p.add_argument("--no-calibration", action="store_true",
                   help="train the baseline without calibration (learned constant context)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/<stage>.pt")
    p.add_argument("--checkpoint-every", type=int, default=200,
                   help="steps between checkpoints (written atomically; default 200)")
    p.add_argument("--log-every", type=int, default=25,
                   help="steps between progress lines (default 25)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    p.add_argument("--single-frame-start", type=float, default=0.0,
                   help="dynamics stage: fraction of training windows that start from one "
                        "frame with the runtime's padding (that frame repeated, zero actions), "
                        "as a rollout from a start frame does; the calibration is then the "
                        "only evidence of how the actions move the arm (default 0)")
    p.add_argument("--global-token-channels", type=int, default=0,
                   help="dynamics stage: learned calibration-token channels pooled over the "
                        "whole latent grid, G of the context's learned channels (default 0)")
    p.add_argument("--keypoint-augment", type=float, default=0.0,
                   help="keypoint stage: fraction of training frames degraded (blur, dimming, "
                        "lower contrast, noise) so the regressor also reads predicted frames, "
                        "which are blurrier and dimmer than rendered ones (default 0)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                   help="where the networks train: cpu (default) or cuda (an NVIDIA GPU; with "
                        "torchrun, each process takes the GPU numbered by its LOCAL_RANK and "
                        "the processes talk over nccl); batches are assembled on the CPU")
    p.add_argument("--limit-cells", type=int, default=None, help="use only the first N cells")


def options_from_args(args: argparse.Namespace) -> TrainOptions:
    """Turn parsed arguments into :class:`TrainOptions`."""
    keys = TrainOptions.__dataclass_fields__
    return TrainOptions(**{k: getattr(args, k) for k in keys if hasattr(args, k)})


