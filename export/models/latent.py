"""The reference world model: a frame autoencoder and calibration-conditioned latent dynamics.

One file, read top to bottom:

- :class:`Encoder` / :class:`Decoder`: 64x64 RGB <-> a 16x16 latent grid (8 channels), so
  that one frame of arm motion (several pixels) moves the latent by about a cell.
- :class:`CalibrationNet`: reads a calibration episode (latents, actions, DoF mask) once and
  returns the context ``[K, D, h, w]``: one token map per action channel, found from the
  channel's own sweep segment and divided by its swept amplitude. The context is therefore
  the same whatever the controller's channel order and signs (relabelling-invariant by
  construction). This follows SyncWorld (Yang et al., arXiv 2609.09155): the model reads a
  visual calibration episode in context and then simulates the cell zero-shot.
- :class:`StepNet`: predicts the next latent from ``S`` history latents and actions, the next
  action and the context. Each action enters as an "intent" map
  ``sum_c a[c] * context[c]``; the network adds a residual to the newest latent.
- :class:`WorldModel` bundles them. With ``use_calibration=False`` the context is a learned
  constant instead (the no-calibration baseline with the same data, steps and history).

All inputs are in SI units and uint8 frames; normalisation happens inside (docs/
architecture.md, "Model contract"). Shapes are static so every piece exports to ONNX.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["ModelConfig", "Encoder", "Decoder", "CalibrationNet", "StepNet", "WorldModel",
           "KeypointNet"]


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of the reference model (all recorded in model.json)."""

    image_size: int = 64
    latent_channels: int = 8  # C
    latent_size: int = 16  # h = w
    ae_width: int = 32
    history: int = 4  # S
    max_dof: int = 7  # A = K
    segment_frames: int = 8  # L
    sweep_out_rows: tuple[int, int] = (0, 3)
    context_channels: int = 16  # D
    step_width: int = 64
    step_blocks: int = 3
    use_calibration: bool = True
    baseline_action_scale_rad: float = 0.3
    global_token_channels: int = 0  # G: learned token channels pooled over the whole grid

    def __post_init__(self) -> None:
        if self.context_channels <= self.latent_channels:
            raise ValueError(f"context_channels ({self.context_channels}) must exceed "
                             f"latent_channels ({self.latent_channels}): a token holds the "
                             f"latent displacement plus learned channels")
        if not 0 <= self.global_token_channels < self.context_channels - self.latent_channels:
            raise ValueError(f"global_token_channels ({self.global_token_channels}) must be "
                             f">= 0 and below context_channels - latent_channels "
                             f"({self.context_channels - self.latent_channels})")

    @property
    def calibration_frames(self) -> int:
        """K * L + 1."""
        return self.max_dof * self.segment_frames + 1

    def to_dict(self) -> dict:
        """JSON-serialisable copy."""
        d = asdict(self)
        d["sweep_out_rows"] = list(self.sweep_out_rows)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        """Inverse of :meth:`to_dict`; keys an older configuration lacks take their defaults."""
        d = dict(d)
        d["sweep_out_rows"] = tuple(d["sweep_out_rows"])
        return cls(**d)


def _act() -> nn.Module:
    return nn.SiLU()


class ResBlock(nn.Module):
    """Two 3x3 convolutions with a skip connection."""

    def __init__(self, width: int):
        super().__init__()
        self.c1 = nn.Conv2d(width, width, 3, padding=1)
        self.c2 = nn.Conv2d(width, width, 3, padding=1)
        self.act = _act()

    def forward(self, x: Tensor) -> Tensor:
        return x + self.c2(self.act(self.c1(self.act(x))))


class Encoder(nn.Module):
    """uint8 frames ``[B, 3, H, W]`` -> latents float32 ``[B, C, h, w]`` (h = H / 4)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        w = cfg.ae_width
        self.net = nn.Sequential(
            nn.Conv2d(3, w, 3, padding=1), _act(),
            nn.Conv2d(w, w, 4, stride=2, padding=1), _act(),
            nn.Conv2d(w, 2 * w, 3, padding=1), _act(),
            nn.Conv2d(2 * w, 2 * w, 4, stride=2, padding=1),
            ResBlock(2 * w), _act(),
            nn.Conv2d(2 * w, cfg.latent_channels, 1),
        )

    def forward(self, frames_u8: Tensor) -> Tensor:
        x = frames_u8.to(torch.float32) * (1.0 / 255.0)  # (B, 3, H, W) in [0, 1]
        return self.net(x)


class Decoder(nn.Module):
    """latents ``[B, C, h, w]`` -> frames float32 ``[B, 3, H, W]`` in [0, 1]."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        w = cfg.ae_width
        self.net = nn.Sequential(
            nn.Conv2d(cfg.latent_channels, 2 * w, 3, padding=1),
            ResBlock(2 * w), _act(),
            nn.ConvTranspose2d(2 * w, w, 4, stride=2, padding=1), _act(),
            nn.Conv2d(w, w, 3, padding=1), _act(),
            nn.ConvTranspose2d(w, w, 4, stride=2, padding=1), _act(),
            nn.Conv2d(w, 3, 3, padding=1), nn.Sigmoid(),
        )

    def forward(self, z: Tensor) -> Tensor:
        return self.net(z)


class CalibrationNet(nn.Module):
    """Calibration episode -> context ``[K, D, h, w]`` (one token map per action channel).

    Inputs: ``cal_latents [K*L+1, C, h, w]``, ``cal_actions [K*L+1, A]`` (rad), ``dof_mask [A]``
    (1 controllable, 0 absent). Segment k spans action rows ``[k*L, (k+1)*L)``; its outward
    phase is ``sweep_out_rows``. Channel c's segment is the one where ``|a[:, c]|`` summed over
    the outward rows is largest; its token is computed from that segment's latents (rest pose
    and displacement, out and back averaged) and divided by the channel's signed swept
    amplitude. A token's first C channels are the segment's latent displacement itself, the
    rest are learned from the rest pose and the displacement: per latent cell, and, if
    ``global_token_channels`` G > 0, G of them pooled over the whole grid (the same value in
    every cell: what this DoF is, wherever its motion shows). Channels that are masked or
    never swept get a zero token.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        c, d = cfg.latent_channels, cfg.context_channels
        if cfg.use_calibration:
            # A token is the segment's raw latent displacement (C channels: a first-order
            # picture of what a unit of this channel's action does) plus D - C learned ones.
            g = cfg.global_token_channels
            self.token = nn.Sequential(
                nn.Conv2d(2 * c, 2 * d, 3, padding=1), _act(),
                nn.Conv2d(2 * d, 2 * d, 3, padding=1), _act(),
                nn.Conv2d(2 * d, d - c - g, 1),
            )
            if g:
                self.token_global = nn.Sequential(
                    nn.Conv2d(2 * c, 32, 3, stride=2, padding=1), _act(),
                    nn.Conv2d(32, 32, 3, stride=2, padding=1), _act(),
                    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, g),
                )
        else:
            k, h = cfg.max_dof, cfg.latent_size
            self.learned = nn.Parameter(torch.zeros(k, d, h, h))

    def forward(self, cal_latents: Tensor, cal_actions: Tensor, dof_mask: Tensor) -> Tensor:
        """Context of one calibration (``[K, D, h, w]``) or of a batch (``[N, K, D, h, w]``).

        Shapes: ``cal_latents [(N,) K*L+1, C, h, w]``, ``cal_actions [(N,) K*L+1, A]``,
        ``dof_mask [(N,) A]``.
        """
        if cal_latents.dim() == 4:
            return self.forward(cal_latents[None], cal_actions[None], dof_mask[None])[0]
        cfg = self.cfg
        k, seg = cfg.max_dof, cfg.segment_frames
        n = cal_latents.shape[0]
        if not cfg.use_calibration:
            ctx = self.learned * (1.0 / cfg.baseline_action_scale_rad)
            return ctx[None].expand(n, *ctx.shape)
        o0, o1 = cfg.sweep_out_rows
        rows = cal_actions[:, : k * seg].reshape(n, k, seg, -1)  # (N, K, L, A)
        out = rows[:, :, o0:o1]  # (N, K, n_out, A)
        energy = out.abs().sum(2)  # (N, K, A)
        onehot = (energy == energy.max(1, keepdim=True).values).to(torch.float32)
        onehot = onehot / onehot.sum(1, keepdim=True)  # (N, K, A)
        amp = (out.sum(2) * onehot).sum(1)  # (N, A) signed swept amplitude
        swept = (amp.abs() > 1e-4).to(torch.float32)
        valid = dof_mask * swept  # (N, A)
        safe = torch.where(amp.abs() > 1e-4, amp, torch.ones_like(amp))
        z = cal_latents[:, : k * seg + 1]  # (N, K*L+1, C, h, w)
        starts = z[:, 0: k * seg: seg]  # (N, K, C, h, w) rest pose of each segment
        z_out = z[:, o1: k * seg + 1: seg]  # after the outward phase
        back = z[:, o1 + 1: k * seg + 1: seg]  # start of the return phase
        end = z[:, seg: k * seg + 1: seg]  # back at rest
        disp = 0.5 * ((z_out - starts) + (back - end))  # (N, K, C, h, w)
        feat = torch.cat([starts, disp], 2).flatten(0, 1)  # (N*K, 2C, h, w)
        learned = self.token(feat)
        if cfg.global_token_channels:
            pooled = self.token_global(feat)[:, :, None, None]
            learned = torch.cat([learned, pooled.expand(-1, -1, *feat.shape[-2:])], 1)
        learned = learned.reshape(n, k, cfg.context_channels - cfg.latent_channels,
                                  *disp.shape[-2:])
        tokens = torch.cat([disp, learned], 2)  # (N, K, D, h, w)
        per_channel = torch.einsum("nka,nkdhw->nadhw", onehot, tokens)  # (N, A, D, h, w)
        scale = valid / safe  # (N, A): 1 / amplitude, 0 for absent channels
        return per_channel * scale[:, :, None, None, None]


class StepNet(nn.Module):
    """(history latents, history actions, action, context) -> next latent ``[B, C, h, w]``.

    ``hist_latents [B, S, C, h, w]`` oldest first, ``hist_actions [B, S, A]`` (the action that
    led to each history latent), ``action [B, A]`` (rad), ``context [K, D, h, w]`` (shared)
    or ``[B, K, D, h, w]`` (one per sample, in training).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        s, c, d, w = cfg.history, cfg.latent_channels, cfg.context_channels, cfg.step_width
        self.inp = nn.Conv2d(s * c + s * d + d + c, w, 3, padding=1)
        self.blocks = nn.Sequential(*[ResBlock(w) for _ in range(cfg.step_blocks)])
        self.out = nn.Sequential(_act(), nn.Conv2d(w, c, 3, padding=1))

    def forward(self, hist_latents: Tensor, hist_actions: Tensor, action: Tensor,
                context: Tensor) -> Tensor:
        b, s, c, h, w = hist_latents.shape
        if context.dim() == 4:  # one cell's context, shared by the batch (the runtime)
            hist_intent = torch.einsum("bsa,adhw->bsdhw", hist_actions, context)
            intent = torch.einsum("ba,adhw->bdhw", action, context)  # (B, D, h, w)
        else:  # one context per sample (training)
            hist_intent = torch.einsum("bsa,badhw->bsdhw", hist_actions, context)
            intent = torch.einsum("ba,badhw->bdhw", action, context)
        newest = hist_latents[:, -1]  # (B, C, h, w)
        velocity = newest - hist_latents[:, -2]
        x = torch.cat([hist_latents.reshape(b, s * c, h, w),
                       hist_intent.reshape(b, -1, h, w), intent, velocity], 1)
        return newest + self.out(self.blocks(self.inp(x)))


class WorldModel(nn.Module):
    """Encoder, decoder, calibration and step networks of one model."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        self.calibration = CalibrationNet(cfg)
        self.step = StepNet(cfg)

    @torch.no_grad()
    def encode_frames(self, frames_hwc: Tensor, batch: int = 256) -> Tensor:
        """uint8 ``[N, H, W, 3]`` -> latents ``[N, C, h, w]`` in chunks, on the model's device
        (frames are moved there chunk by chunk)."""
        device = next(self.encoder.parameters()).device
        out = [self.encoder(frames_hwc[i:i + batch].to(device).permute(0, 3, 1, 2))
               for i in range(0, len(frames_hwc), batch)]
        return torch.cat(out)

    def rollout(self, start_latent: Tensor, actions: Tensor, context: Tensor,
                hist_latents: Tensor | None = None, hist_actions: Tensor | None = None
                ) -> Tensor:
        """Open-loop rollout in latent space.

        Args:
            start_latent: ``[B, C, h, w]`` latent of the start frame.
            actions: ``[B, T, A]``; ``actions[:, t]`` moves frame t to frame t+1.
            context: ``[K, D, h, w]``.
            hist_latents, hist_actions: optional initial history (default: the start latent
                repeated with zero actions, the runtime's padding).

        Returns:
            ``[B, T, C, h, w]`` predicted latents of frames 1..T.
        """
        b, t_count, a = actions.shape
        s = self.cfg.history
        if hist_latents is None:
            hist_latents = start_latent[:, None].expand(b, s, *start_latent.shape[1:])
            hist_actions = actions.new_zeros(b, s, a)
        assert hist_actions is not None
        preds = []
        for t in range(t_count):
            nxt = self.step(hist_latents, hist_actions, actions[:, t], context)
            preds.append(nxt)
            hist_latents = torch.cat([hist_latents[:, 1:], nxt[:, None]], 1)
            hist_actions = torch.cat([hist_actions[:, 1:], actions[:, t][:, None]], 1)
        return torch.stack(preds, 1)


class KeypointNet(nn.Module):
    """End-effector keypoint regressor: uint8 frames ``[B, 3, H, W]`` -> pixel (x, y) ``[B, 2]``.

    A small convolutional network with a spatial soft-argmax head, used only for evaluation
    (control measured on predicted frames), never as a model input.
    """

    # pixel coordinates of the soft-argmax grid (buffers registered in __init__)
    xs: Tensor
    ys: Tensor

    def __init__(self, width: int = 32, image_size: int = 64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1), _act(),
            nn.Conv2d(width, width, 3, padding=1), _act(),
            nn.Conv2d(width, 2 * width, 4, stride=2, padding=1), _act(),
            nn.Conv2d(2 * width, 2 * width, 3, padding=2, dilation=2), _act(),
            nn.Conv2d(2 * width, 2 * width, 3, padding=4, dilation=4), _act(),
            nn.Conv2d(2 * width, 1, 1),
        )
        n = image_size // 2
        coords = (torch.arange(n, dtype=torch.float32) + 0.5) * (image_size / n)
        self.register_buffer("xs", coords.repeat(n), persistent=False)
        self.register_buffer("ys", coords.repeat_interleave(n), persistent=False)

    def forward(self, frames_u8: Tensor) -> Tensor:
        logits = self.net(frames_u8.to(torch.float32) * (1.0 / 255.0)).flatten(1)  # (B, n*n)
        p = F.softmax(logits, dim=1)
        return torch.stack([(p * self.xs).sum(1), (p * self.ys).sum(1)], 1)
