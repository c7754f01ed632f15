"""The warp world model: a step predicts where the start frame's pixels go, not a new frame.

One file, read top to bottom. The arm is rigid links in front of a static scene, so every
predicted frame is the *start frame* resampled once (a temporal skip connection: frame t is
never made from frame t-1, so 16 steps blur nothing 16 times) and composited with a fill
taken from the start frame itself:

``frame_t = (1 - o_t) * warp(start, f_t) + o_t * warp(start, g_t)``

where ``f_t`` is the backward flow of the arm (px), ``g_t`` the flow that fills what the
arm uncovers from nearby background and ``o_t`` in [0, 1] the fill weight (the ideas of
Finn et al. 2016, "Unsupervised Learning for Physical Interaction through Video
Prediction", CDNA/DNA pixel transformations, and Ebert et al. 2017, "Self-Supervised Visual
Planning with Temporal Skip Connections"). The robot's mask is warped the same way.

The calibration (SyncWorld, Yang et al., arXiv 2609.09155) is read per action channel, as
before: channel c's own sweep segment is found from the actions, and the segment's rest
frame, its frame after the outward phase and the swept magnitude give the channel's token
maps: *where and how pixels move* when that channel moves. A step accumulates each
channel's physical angle ``theta_c`` in the direction of its calibration sweep
(``sign(amp_c) * sum a_c``) and forms the motion features

``m_t = sum_c sin(theta_c) * T_c + (1 - cos(theta_c)) * U_c``

(the two terms of a rigid rotation by ``theta_c``), which the decoder reads together with
the start frame's features. The tokens are read at the calibration's home pose; a rollout
need not start there. With ``start_offset`` the state also carries each channel's offset
``phi_c`` of the start pose from that home pose (rad, known on a cell from the joint
readings of the start and of the calibration episode), and the two terms become the change
of a rotation from ``phi_c`` to ``phi_c + theta_c``: ``sin(phi + theta) - sin(phi)`` and
``cos(phi) - cos(phi + theta)`` (Rodrigues' formula), still exactly zero at ``theta = 0``. Hence, by construction and in the exported graphs:

- zero actions give ``theta = 0``, ``m = 0``, zero flows and zero fill weight (the motion
  path of the decoder has no bias and only activations with ``act(0) = 0``), so the start
  frame comes back exactly;
- permuting and sign-flipping the calibration and the actions together changes nothing
  (the channel sum is order-free and ``theta`` is measured in the sweep's own direction).

:class:`WarpModel` with ``use_calibration=False`` replaces the tokens by learned ones per
channel index (the no-calibration, history-mode baseline: the start frame and the actions
only).

Runtime state (the "latent" of the ring-buffer contract, ``[C, h, w]`` with h = w = 16):
the start frame packed 4x4 into channels, the start frame's features, the per-channel
angles (one plane each), the motion features and a calibration summary; see
:class:`StateLayout`. All inputs are in SI units and uint8 frames; shapes are static so every
graph exports to ONNX. The warp runs inside the decoder graph: eager PyTorch uses
``F.grid_sample``; the exported graphs use :func:`bilinear_sample` (the same values, as
GatherElements of the four corners per channel, which ONNX Runtime's CPU provider runs 2-3
times as fast as its GridSample), see :attr:`WarpDecoder.sampler`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from export.models.latent import ResBlock

__all__ = ["WarpConfig", "StateLayout", "WarpModel", "WarpDecoder", "SAMPLERS", "COMPOSITES", "warp",
           "bilinear_sample", "warp_composite", "identity_grid", "plate_from_masks",
           "background_plate", "background_plates"]

#: how :class:`WarpDecoder` warps: ``grid_sample`` (``F.grid_sample``; ONNX GridSample) or
#: ``gather`` (:func:`bilinear_sample`; ONNX GatherElements), the same values
SAMPLERS = ("grid_sample", "gather")

#: how :class:`WarpDecoder` composites (:attr:`WarpConfig.composite`, :func:`warp_composite`)
COMPOSITES = ("blend", "layered")


@dataclass(frozen=True)
class WarpConfig:
    """Sizes of the warp model (all recorded in model.json)."""

    image_size: int = 64
    grid: int = 16  # h = w of the state and context
    max_dof: int = 7  # A = K
    segment_frames: int = 8  # L
    sweep_out_rows: tuple[int, int] = (0, 3)
    history: int = 1  # S: the state carries everything a step needs
    feat_channels: int = 32  # F: start-frame features in the state
    motion_channels: int = 32  # M: motion features (per token half)
    global_channels: int = 16  # of M, pooled over the grid (what this DoF is)
    summary_channels: int = 8  # calibration summary (where the robot moved)
    cal_width: int = 32
    dec_width: int = 32
    #: width of the per-DoF flow network of the step (0: none, the motion features only)
    joint_width: int = 0
    #: the state carries the start pose's joint offsets from the calibration's home pose
    #: (rad, channel order), and a step moves pixels by the change of each channel's rigid
    #: rotation terms from that offset (module docstring); False: the start is home
    start_offset: bool = False
    #: the per-DoF flow fields (``joint_width``) are computed once per rollout by
    #: :meth:`WarpModel.prepare` and carried in the state (block ``joint_fields``) instead of
    #: in every step: the same frames, one joint-network pass per rollout (the exported
    #: ``prepare_bB`` graphs); training leaves it off
    joint_fields_in_state: bool = False
    #: dilations of a residual branch after the per-DoF flow network's first layer (empty:
    #: none): a receptive field over the whole 16x16 grid, so a channel's field can be read
    #: from token maps made at the calibration's home pose several cells from where the
    #: links are at the start pose; its last layer starts at zero
    joint_dilations: tuple[int, ...] = ()
    #: key channels of the per-DoF flow network's attention (0: none): each start-frame cell
    #: looks up, in channel c's own calibration rest frame, the cells that look like it (keys
    #: made by the calibration reader, carried in the context) and reads channel c's token
    #: maps there, so a link's motion evidence follows the link from the calibration's home
    #: pose to wherever it is in the start frame
    joint_attention: int = 0
    #: how the decoder composites (:func:`warp_composite`): ``blend`` mixes the warped start
    #: frame with the fill everywhere; ``layered`` moves only the robot layer (the start
    #: frame's robot mask warped by the arm's flow) and keeps every other pixel from the
    #: start frame, fill-blended where the arm uncovers background
    composite: str = "blend"
    use_calibration: bool = True
    baseline_amplitude_rad: float = 0.3
    #: calibration sweep magnitudes the model was trained on, rad (model.json records them)
    sweep_amplitude_rad: tuple[float, float] = (0.2, 0.8)

    def __post_init__(self) -> None:
        if self.image_size != 4 * self.grid:
            raise ValueError(f"image_size ({self.image_size}) must be 4 * grid ({self.grid})")
        if not 0 <= self.global_channels < self.motion_channels:
            raise ValueError("global_channels must lie in [0, motion_channels)")
        if self.composite not in COMPOSITES:
            raise ValueError(f"composite {self.composite!r}: expected one of "
                             f"{', '.join(COMPOSITES)}")

    @property
    def calibration_frames(self) -> int:
        """K * L + 1."""
        return self.max_dof * self.segment_frames + 1

    @property
    def layout(self) -> StateLayout:
        """Channel layout of the state."""
        return StateLayout(self)

    @property
    def context_channels(self) -> int:
        """D = 2M + summary + keys + 1 (tokens T, U, summary evidence, the attention's keys
        (``joint_attention``, 0 without), sweep direction)."""
        return 2 * self.motion_channels + self.summary_channels + self.joint_attention + 1

    def to_dict(self) -> dict:
        """JSON-serialisable copy."""
        d = asdict(self)
        for key in ("start_offset", "joint_fields_in_state", "joint_dilations",
                    "joint_attention"):  # off in every earlier model
            if not d[key]:
                del d[key]
        if d["composite"] == "blend":  # every earlier model
            del d["composite"]
        if "joint_dilations" in d:
            d["joint_dilations"] = list(self.joint_dilations)
        d["sweep_out_rows"] = list(self.sweep_out_rows)
        d["sweep_amplitude_rad"] = list(self.sweep_amplitude_rad)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> WarpConfig:
        """Inverse of :meth:`to_dict`."""
        d = dict(d)
        d["sweep_out_rows"] = tuple(d["sweep_out_rows"])
        d["sweep_amplitude_rad"] = tuple(d["sweep_amplitude_rad"])
        if "joint_dilations" in d:
            d["joint_dilations"] = tuple(int(v) for v in d["joint_dilations"])
        return cls(**d)


class StateLayout:
    """Channel ranges of the state ``[C, h, w]`` (h = w = grid).

    ``pixels`` (48: the start frame /255, 4x4 space-to-depth), ``features`` (F),
    ``theta`` (K planes, each constant: the channel's accumulated angle, rad, in its
    calibration sweep's direction), ``motion`` (M), ``summary`` (the calibration summary)
    and, with ``joint_width``, ``joint_flow`` (2: the step's coarse flow, px at 64x64);
    with ``start_offset``, ``offset`` (K constant planes: the start pose's joint offset
    from the calibration's home pose, rad, controller channel order); with
    ``joint_fields_in_state``, ``joint_fields`` (4 K: each channel's flow fields for the
    ``sin`` and ``cos`` terms, px at 64x64, made once per rollout by the prepare graph).
    """

    def __init__(self, cfg: WarpConfig):
        sizes = [("pixels", 48), ("features", cfg.feat_channels), ("theta", cfg.max_dof),
                 ("motion", cfg.motion_channels), ("summary", cfg.summary_channels)]
        if cfg.joint_width:
            sizes.append(("joint_flow", 2))
        if cfg.start_offset:
            sizes.append(("offset", cfg.max_dof))
        if cfg.joint_width and cfg.joint_fields_in_state:
            sizes.append(("joint_fields", 4 * cfg.max_dof))
        self.ranges: dict[str, tuple[int, int]] = {}
        at = 0
        for name, n in sizes:
            self.ranges[name] = (at, at + n)
            at += n
        self.channels = at

    def slice(self, z: Tensor, name: str) -> Tensor:
        """``z[:, a:b]`` for the named block of a state batch ``[B, C, h, w]``."""
        a, b = self.ranges[name]
        return z[:, a:b]


def _act() -> nn.Module:
    return nn.SiLU()


def identity_grid(size: int) -> Tensor:
    """Sampling grid of the identity warp, ``[1, size, size, 2]`` (x, y) in [-1, 1] at pixel
    centres (``align_corners=False``)."""
    c = (torch.arange(size, dtype=torch.float32) * 2 + 1) / size - 1
    gy, gx = torch.meshgrid(c, c, indexing="ij")
    return torch.stack([gx, gy], -1)[None]


def warp(image: Tensor, flow: Tensor, base: Tensor) -> Tensor:
    """Backward warp: ``out(x) = image(x + flow(x))``, bilinear, border padding.

    Args:
        image: ``[B, C, H, W]``.
        flow: ``[B, 2, H, W]`` (dx, dy) in pixels.
        base: :func:`identity_grid` of H (= W).
    """
    size = image.shape[-1]
    grid = base + flow.permute(0, 2, 3, 1) * (2.0 / size)
    return F.grid_sample(image, grid, mode="bilinear", padding_mode="border",
                         align_corners=False)


def _bilinear_corners(grid: Tensor, h: int, w: int) -> tuple[Tensor, Tensor]:
    """The corners of :func:`bilinear_sample`'s positions in an ``h x w`` image: their flat
    pixel indices int32 ``[B, 1, G * 4 * Ho * Wo]`` (grid-major, then the corners nw, ne, sw,
    se) and their weights float32 ``[B, G, 2 (y0, y1), 2 (x0, x1), Ho, Wo]``."""
    b, g, _, ho, wo = grid.shape
    # grid_sample's unnormalisation (align_corners=False) and border clamp, in pixels
    x = ((grid[:, :, 0] + 1.0) * (w * 0.5) - 0.5).clamp(0.0, w - 1.0)
    y = ((grid[:, :, 1] + 1.0) * (h * 0.5) - 0.5).clamp(0.0, h - 1.0)
    x = torch.where(x == x, x, 0.0)  # NaN -> 0: an index in range whatever the input
    y = torch.where(y == y, y, 0.0)
    x0, y0 = torch.floor(x), torch.floor(y)
    wx, wy = x - x0, y - y0
    # the far corner at the last pixel has weight 0: clamped in range, as grid_sample drops it
    x1 = torch.clamp(x0 + 1.0, max=w - 1.0)
    y1 = torch.clamp(y0 + 1.0, max=h - 1.0)
    corner = torch.stack([y0, y1], 2)[:, :, :, None] * w + torch.stack([x0, x1], 2)[:, :, None]
    # grid_sample's weights: nw = (1 - wy)(1 - wx), ne = (1 - wy) wx, sw = wy (1 - wx), se = wy wx
    weights = (torch.stack([1.0 - wy, wy], 2)[:, :, :, None]
               * torch.stack([1.0 - wx, wx], 2)[:, :, None])
    return corner.to(torch.int32).reshape(b, 1, g * 4 * ho * wo), weights


def _sample_plane(plane: Tensor, index: Tensor, weights: Tensor, grids: int) -> Tensor:
    """One channel ``[B, 1, H, W]`` sampled at the first ``grids`` grids of
    :func:`_bilinear_corners`' ``index`` and ``weights``: ``[B, grids, Ho, Wo]``."""
    b, _, h, w = plane.shape
    ho, wo = weights.shape[-2:]
    n = grids * 4 * ho * wo
    values = torch.gather(plane.reshape(b, 1, h * w), 2, index[:, :, :n] if grids <
                          weights.shape[1] else index)
    return (values.reshape(b, grids, 2, 2, ho, wo) * weights[:, :grids]).sum((2, 3))


def _sample_channels(image: Tensor, index: Tensor, weights: Tensor, grids: int) -> Tensor:
    """Every channel of ``image`` ``[B, C, H, W]`` through :func:`_sample_plane`:
    ``[B, grids, C, Ho, Wo]``."""
    return torch.stack([_sample_plane(image[:, i:i + 1], index, weights, grids)
                        for i in range(image.shape[1])], 2)


def bilinear_sample(image: Tensor, grid: Tensor) -> Tensor:
    """``F.grid_sample(image, g, mode="bilinear", padding_mode="border",
    align_corners=False)`` at G grids at once, written with gathers of the four corners.

    The same values as ``grid_sample`` (to float32 rounding: the four weighted corners are
    summed in another order, about 2e-7 for values in [0, 1]; exact at integer positions),
    in operators every ONNX backend of this project runs: the corner indices and weights
    are computed once for all channels (Floor, Clip, Equal/Where, Cast to int32 and
    elementwise arithmetic), then each channel is one GatherElements of its corners, a Mul
    by the weights and a ReduceSum (opset 18; all in the TensorRT 10.3 and 11 parser table,
    :mod:`export.engine.ops`). ONNX Runtime's CPU provider runs the decoder's warps this
    way 2-3 times as fast as with its GridSample (``bench/bench_warp_sampler.py``); eager
    PyTorch runs ``F.grid_sample`` far faster than this, so only the exported graphs use it
    (:attr:`WarpDecoder.sampler`).

    Conventions of ``grid_sample`` with ``align_corners=False``: -1 and 1 are the outer
    edges of the first and last pixels, so pixel centre ``i`` is at ``(2 i + 1) / W - 1``.
    Border padding: a position outside the image takes the value of the nearest border
    pixel (the position is clamped to ``[0, W - 1] x [0, H - 1]`` pixel centres before
    interpolating); +-inf are clamped the same way; a NaN position samples the first
    column (x) or row (y), never an error (``grid_sample`` gives an unspecified border
    value there).

    Args:
        image: float32 ``[B, C, H, W]``, ``H * W`` at most 2^24 (every pixel index is
            exact in float32).
        grid: float32 ``[B, G, 2, Ho, Wo]``: G sampling grids, channel 0 the normalised x
            (width) and 1 the normalised y (height) of each output pixel. Channels-first,
            unlike ``grid_sample``'s ``[B, Ho, Wo, 2]``: ``grid[:, g].permute(0, 2, 3, 1)``
            is the ``grid_sample`` grid of output ``g``.

    Returns:
        float32 ``[B, G, C, Ho, Wo]``: output ``[:, g]`` is the image sampled at grid ``g``.

    Raises:
        ValueError: the shapes do not match, or the image has more than 2^24 pixels.
    """
    if image.dim() != 4 or grid.dim() != 5 or grid.shape[2] != 2 or \
            grid.shape[0] != image.shape[0]:
        raise ValueError(f"bilinear_sample: expected image [B, C, H, W] and grid "
                         f"[B, G, 2, Ho, Wo], got {tuple(image.shape)} and {tuple(grid.shape)}")
    h, w = image.shape[-2:]
    if h * w > 2 ** 24:
        raise ValueError(f"bilinear_sample: {h}x{w} image: at most 2^24 pixels (float32 "
                         "indices)")
    index, weights = _bilinear_corners(grid, h, w)
    return _sample_channels(image, index, weights, grid.shape[1])


def warp_composite(image: Tensor, mask: Tensor, flows: Tensor, o: Tensor, base: Tensor,
                   sampler: str = "grid_sample", composite: str = "blend",
                   plate: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The decoder's warp and compositing.

    With ``f`` the arm's backward flow, ``g`` the fill flow and ``o`` the fill weight:

    - ``blend``: ``frames = (1 - o) warp(image, f) + o warp(image, g)``, ``robot_mask =
      (1 - o) warp(mask, f)``; every pixel follows ``f``, so a flow that spreads past the
      arm drags the static scene with it;
    - ``layered``: the robot layer ``r = warp(mask, f)`` (the pixels whose source in the
      start frame is the robot) moves with ``f``; every other pixel is the start frame
      itself, blended with the fill where ``o`` says the arm uncovered background:
      ``frames = r warp(image, f) + (1 - r) ((1 - o) image + o warp(image, g))``,
      ``robot_mask = r``. The static scene cannot be dragged (the layers of a rigid arm
      in front of a static scene).

    Both give the start frame at zero flows and zero fill weight. With a background
    ``plate`` (what the scene behind the arm looks like, e.g. from calibration frames where
    the arm was elsewhere), the fill takes the plate wherever it is valid and
    ``warp(image, g)`` elsewhere.

    Args:
        image: float32 ``[B, 3, H, W]`` (the start frame, [0, 1]).
        mask: float32 ``[B, 1, H, W]`` (the start frame's robot mask, [0, 1]).
        flows: float32 ``[B, 4, H, W]``: the arm's backward flow ``f`` (dx, dy) and the fill
            flow ``g`` (dx, dy), px.
        o: float32 ``[B, 1, H, W]``, the fill weight in [0, 1].
        base: :func:`identity_grid` of H (= W).
        sampler: one of :data:`SAMPLERS`: ``grid_sample`` (three ``F.grid_sample`` calls) or
            ``gather`` (:func:`bilinear_sample`'s gathers: the corners of both flows once,
            then the image's channels at both and the mask at ``f``; the same values to
            about 2e-7).
        composite: one of :data:`COMPOSITES`.
        plate: float32 ``[B, 4, H, W]`` or None: the background plate's RGB in [0, 1] and its
            validity in [0, 1] (0 where no frame showed the background).

    Returns:
        ``(frames [B, 3, H, W], robot_mask [B, 1, H, W])``, float32.

    Raises:
        ValueError: an unknown ``sampler`` or ``composite``.
    """
    if composite not in COMPOSITES:
        raise ValueError(f"composite {composite!r}: expected one of {', '.join(COMPOSITES)}")
    if sampler == "grid_sample":
        flow, fill = flows[:, 0:2], flows[:, 2:4]
        arm, filled, moved = warp(image, flow, base), warp(image, fill, base), \
            warp(mask, flow, base)
    elif sampler == "gather":
        b, _, h, w = flows.shape
        # the grids of warp(): base + flow * 2 / size, channels-first, [B, 2 (f, g), 2, H, W]
        grid = base.permute(0, 3, 1, 2)[:, None] + flows.reshape(b, 2, 2, h, w) * (2.0 / w)
        index, weights = _bilinear_corners(grid, h, w)  # bilinear_sample, sharing the corners
        s = _sample_channels(image, index, weights, 2)  # (B, 2, 3, H, W)
        arm, filled = s[:, 0], s[:, 1]
        moved = _sample_plane(mask, index, weights, 1)  # the arm's flow only
    else:
        raise ValueError(f"warp sampler {sampler!r}: expected one of {', '.join(SAMPLERS)}")
    if plate is not None:
        valid = plate[:, 3:4]
        filled = valid * plate[:, 0:3] + (1.0 - valid) * filled
    if composite == "blend":
        return (1.0 - o) * arm + o * filled, (1.0 - o) * moved
    background = (1.0 - o) * image + o * filled
    return moved * arm + (1.0 - moved) * background, moved


class _ZeroRes(nn.Module):
    """A residual block of the motion path, modulated by static features ``s``.

    No biases and ``SiLU(0) = 0``: a zero input gives exactly zero, whatever ``s`` is.
    """

    def __init__(self, width: int, static: int):
        super().__init__()
        self.c1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.c2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.film = nn.Conv2d(static, width, 1)
        self.act = _act()

    def forward(self, h: Tensor, s: Tensor) -> Tensor:
        return h + self.c2(self.act(self.c1(self.act(h)) * (1.0 + self.film(s))))


class FrameEncoder(nn.Module):
    """uint8 frames ``[B, 3, 64, 64]`` -> state ``[B, C, 16, 16]`` (motion blocks zero)."""

    def __init__(self, cfg: WarpConfig):
        super().__init__()
        self.cfg = cfg
        w = cfg.feat_channels
        self.net = nn.Sequential(
            nn.Conv2d(3, w // 2, 3, padding=1), _act(),
            nn.Conv2d(w // 2, w, 4, stride=2, padding=1), _act(),
            nn.Conv2d(w, w, 4, stride=2, padding=1), _act(),
            ResBlock(w), ResBlock(w),
        )

    def forward(self, frames_u8: Tensor) -> Tensor:
        x = frames_u8.to(torch.float32) * (1.0 / 255.0)
        b = x.shape[0]
        lay = self.cfg.layout
        rest = lay.channels - 48 - self.cfg.feat_channels
        zeros = x.new_zeros(b, rest, self.cfg.grid, self.cfg.grid)
        return torch.cat([F.pixel_unshuffle(x, 4), self.net(x), zeros], 1)


class CalibrationReader(nn.Module):
    """Calibration states ``[K*L+1, C, h, w]``, actions ``[K*L+1, A]`` (rad), DoF mask ``[A]``
    -> context ``[A, D, h, w]``: per action channel its tokens T, U (M channels each), its
    summary evidence and its sweep direction plane (``sign(amp)``, 0 for absent channels).

    Channel c's segment is the one where ``|a[:, c]|`` over the outward rows is largest; its
    rest frame (the segment's first) and its frame after the outward phase, with the swept
    magnitude ``|amp_c|`` (rad), make the tokens. The frames and the magnitude do not depend on
    the controller's channel order or signs, so neither does the context (up to the order of
    its rows).
    """

    def __init__(self, cfg: WarpConfig):
        super().__init__()
        self.cfg = cfg
        w, m, g = cfg.cal_width, cfg.motion_channels, cfg.global_channels
        if cfg.use_calibration:
            self.net = nn.Sequential(
                nn.Conv2d(10, w // 2, 3, padding=1), _act(),
                nn.Conv2d(w // 2, w, 4, stride=2, padding=1), _act(),
                nn.Conv2d(w, w, 4, stride=2, padding=1), _act(),
                ResBlock(w), ResBlock(w),
            )
            self.local = nn.Conv2d(w, 2 * (m - g) + cfg.summary_channels, 1)
            self.glob = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                      nn.Linear(w, 2 * w), _act(), nn.Linear(2 * w, 2 * g))
            if cfg.joint_attention:
                self.key = nn.Conv2d(w, cfg.joint_attention, 1)
        else:
            k, h = cfg.max_dof, cfg.grid
            self.learned = nn.Parameter(torch.randn(k, 2 * m, h, h) * 0.02)

    def forward(self, cal_states: Tensor, cal_actions: Tensor, dof_mask: Tensor) -> Tensor:
        """Context of one calibration ``[A, D, h, w]``, or of a batch ``[N, A, D, h, w]``
        (inputs with a leading N)."""
        if cal_states.dim() == 4:
            return self.forward(cal_states[None], cal_actions[None], dof_mask[None])[0]
        cfg = self.cfg
        k, seg, m, g = cfg.max_dof, cfg.segment_frames, cfg.motion_channels, cfg.global_channels
        n, hh = cal_states.shape[0], cfg.grid
        o0, o1 = cfg.sweep_out_rows
        rows = cal_actions[:, : k * seg].reshape(n, k, seg, -1)  # (N, K, L, A)
        out = rows[:, :, o0:o1]
        energy = out.abs().sum(2)  # (N, K, A)
        onehot = (energy == energy.max(1, keepdim=True).values).to(torch.float32)
        onehot = onehot / onehot.sum(1, keepdim=True)
        amp = (out.sum(2) * onehot).sum(1)  # (N, A) signed swept amplitude, rad
        if not cfg.use_calibration:
            # history mode: the calibration is not read (its inputs enter with weight zero,
            # so the exported graph keeps the contract's inputs)
            valid = dof_mask + 0.0 * (amp + cal_states[:, :1, 0, 0, 0])
            tok = self.learned[None].expand(n, -1, -1, -1, -1) * valid[:, :, None, None, None]
            summ = tok.new_zeros(n, k, cfg.summary_channels + cfg.joint_attention, hh, hh)
            plane = valid[:, :, None, None, None].expand(n, k, 1, hh, hh)
            return torch.cat([tok, summ, plane], 2)
        valid = dof_mask * (amp.abs() > 1e-4).to(torch.float32)
        direction = torch.sign(amp) * valid  # (N, A)
        a, _ = cfg.layout.ranges["pixels"]
        pix = cal_states[:, :, a:a + 48]  # (N, K*L+1, 48, h, w)
        rest = pix[:, o0: k * seg: seg]  # (N, K, 48, h, w)
        peak = pix[:, o1: k * seg + 1: seg]
        rest_c = torch.einsum("nka,nkchw->nachw", onehot, rest).flatten(0, 1)
        peak_c = torch.einsum("nka,nkchw->nachw", onehot, peak).flatten(0, 1)
        r_img, p_img = F.pixel_shuffle(rest_c, 4), F.pixel_shuffle(peak_c, 4)  # (N*A, 3, H, W)
        mag = amp.abs().reshape(-1, 1, 1, 1).expand(-1, 1, *r_img.shape[-2:])
        x = torch.cat([r_img, p_img, (p_img - r_img) * 4.0, mag], 1)
        h = self.net(x)  # (N*A, w, h, w)
        loc = self.local(h)
        glob = self.glob(h)[:, :, None, None].expand(-1, -1, hh, hh)
        ml = m - g
        t_tok = torch.cat([loc[:, :ml], glob[:, :g]], 1)
        u_tok = torch.cat([loc[:, ml:2 * ml], glob[:, g:]], 1)
        summ = loc[:, 2 * ml:]
        parts = [t_tok, u_tok, summ]
        if cfg.joint_attention:
            parts.append(self.key(h))  # the rest frame's appearance, per cell
        tok = torch.cat(parts, 1).reshape(n, k, -1, hh, hh)
        tok = tok * valid[:, :, None, None, None]
        plane = direction[:, :, None, None, None].expand(n, k, 1, hh, hh)
        return torch.cat([tok, plane], 2)


class StateStep(nn.Module):
    """(history states ``[B, S, C, h, w]``, history actions ``[B, S, A]``, action ``[B, A]``
    (rad), context ``[A, D, h, w]`` (one for the whole batch, read without a per-candidate
    copy) or ``[B, A, D, h, w]``) -> next state ``[B, C, h, w]``.

    Only the newest history slot is read: the state carries the start frame and every
    channel's accumulated angle, so a step is the angle update and the motion features
    (module docstring). With ``joint_width`` the step also predicts, per action channel
    and with weights shared across channels, that channel's flow fields for ``sin theta``
    and ``1 - cos theta`` from its tokens and the start frame's features, and sums them:
    a coarse flow that is exactly zero at ``theta = 0`` and that each channel's own
    calibration evidence drives.
    """

    def __init__(self, cfg: WarpConfig):
        super().__init__()
        self.cfg = cfg
        if cfg.joint_width:
            jw = cfg.joint_width
            att_values = 16 if cfg.joint_attention else 0
            self.joint = nn.Sequential(
                nn.Conv2d(2 * cfg.motion_channels + cfg.feat_channels + att_values, jw, 1),
                _act(),
                nn.Conv2d(jw, jw, 3, padding=1), _act(),
                nn.Conv2d(jw, jw, 3, padding=1), _act(),
                nn.Conv2d(jw, 4, 3, padding=1),
            )
            if cfg.joint_attention:
                self.query = nn.Conv2d(cfg.feat_channels, cfg.joint_attention, 1)
                self.att_value = nn.Conv2d(2 * cfg.motion_channels, att_values, 1)
            if cfg.joint_dilations:
                layers: list[nn.Module] = []
                for i, dil in enumerate(cfg.joint_dilations):
                    if i:
                        layers.append(_act())
                    layers.append(nn.Conv2d(jw, jw, 3, padding=dil, dilation=dil))
                nn.init.zeros_(layers[-1].weight)  # type: ignore[arg-type]
                nn.init.zeros_(layers[-1].bias)  # type: ignore[arg-type]
                self.joint_wide = nn.Sequential(*layers)

    def forward(self, hist_states: Tensor, hist_actions: Tensor, action: Tensor,
                context: Tensor, fields: Tensor | None = None) -> Tensor:
        """``fields``: the channels' flow fields ``[B, A, 4, h, w]`` when the caller has
        already made them (:meth:`joint_fields` of the same state and context), else None."""
        cfg, lay = self.cfg, self.cfg.layout
        m, s = cfg.motion_channels, cfg.summary_channels
        z = hist_states[:, -1]
        # One context for the whole batch (the runtime's case) stays unbatched: the
        # channel sums below are then plain matrix products [B, A] x [A, D*h*w] and no
        # [B, A, D, h, w] copy of the context is made every step.
        shared = context.dim() == 4
        direction = context[..., -1, 0, 0]  # (A,) or (B, A)
        # The angles in the state already hold every past action: the contract's history
        # actions enter with weight zero (so the exported graph keeps the input; the
        # runtime only ever feeds finite actions).
        theta = (lay.slice(z, "theta")[:, :, 0, 0] + direction * action
                 + hist_actions[:, -1] * 0.0)  # (B, A) rad
        t_tok, u_tok = context[..., :m, :, :], context[..., m:2 * m, :, :]
        if cfg.start_offset:
            # a rotation by theta from offset phi changes a rigid point by
            # (sin(phi + theta) - sin phi) K p + (cos phi - cos(phi + theta)) K^2 p
            # (Rodrigues), so the tokens read at home apply at any start pose; both
            # coefficients are exactly zero at theta = 0
            phi = direction * lay.slice(z, "offset")[:, :, 0, 0]  # (B, A) rad
            c_sin = torch.sin(phi + theta) - torch.sin(phi)
            c_cos = torch.cos(phi) - torch.cos(phi + theta)
        else:
            c_sin, c_cos = torch.sin(theta), 1.0 - torch.cos(theta)
        if shared:
            n_ch = t_tok.shape[0]
            motion = (c_sin @ t_tok.reshape(n_ch, -1)
                      + c_cos @ u_tok.reshape(n_ch, -1)).reshape(z.shape[0], m, *z.shape[2:])
            summary = context[None, :, 2 * m:2 * m + s].sum(1).expand(z.shape[0], -1, -1, -1)
        else:
            motion = (torch.einsum("ba,badhw->bdhw", c_sin, t_tok)
                      + torch.einsum("ba,badhw->bdhw", c_cos, u_tok))
            summary = context[:, :, 2 * m:2 * m + s].sum(1)
        hh = cfg.grid
        planes = theta[:, :, None, None].expand(-1, -1, hh, hh)
        a, b = lay.ranges["features"]
        parts = [z[:, :b], planes, motion, summary]
        if cfg.joint_width:
            bsz, k = z.shape[0], theta.shape[1]
            if cfg.joint_fields_in_state:
                f = lay.slice(z, "joint_fields").reshape(bsz, k, 4, hh, hh)
            elif fields is not None:
                f = fields
            else:
                f = self.joint_fields(z, context)  # expands a shared context itself
            flow = (torch.einsum("ba,bachw->bchw", c_sin, f[:, :, :2])
                    + torch.einsum("ba,bachw->bchw", c_cos, f[:, :, 2:]))
            parts.append(flow)
        if cfg.start_offset:
            parts.append(lay.slice(z, "offset"))
        if cfg.joint_width and cfg.joint_fields_in_state:
            parts.append(lay.slice(z, "joint_fields"))
        return torch.cat(parts, 1)

    def joint_fields(self, z: Tensor, context: Tensor) -> Tensor:
        """Each channel's flow fields ``[B, A, 4, h, w]`` (px at 64x64: the ``sin`` term's
        dx, dy, then the ``cos`` term's) from its tokens and the start frame's features.
        Neither changes during a rollout, so the fields do not either.

        Args:
            z: states ``[B, C, h, w]`` (only the features block is read).
            context: ``[A, D, h, w]`` or ``[B, A, D, h, w]``.
        """
        cfg, lay = self.cfg, self.cfg.layout
        m, hh = cfg.motion_channels, cfg.grid
        if context.dim() == 4:
            context = context[None].expand(z.shape[0], *context.shape)
        t_tok, u_tok = context[:, :, :m], context[:, :, m:2 * m]
        bsz, k = t_tok.shape[:2]
        feat = lay.slice(z, "features")[:, None].expand(-1, k, -1, -1, -1)
        parts = [t_tok, u_tok, feat]
        if cfg.joint_attention:
            # scaled dot-product attention from each start cell (query) to every cell of the
            # channel's rest frame (keys), reading the channel's tokens there (values)
            kc, p = cfg.joint_attention, hh * hh
            s0 = 2 * m + cfg.summary_channels
            keys = context[:, :, s0:s0 + kc].reshape(bsz, k, kc, p)
            q = self.query(lay.slice(z, "features")).reshape(bsz, 1, kc, p)
            weights = torch.softmax(torch.matmul(q.transpose(2, 3), keys) * kc ** -0.5, -1)
            values = self.att_value(torch.cat([t_tok, u_tok], 2).flatten(0, 1))
            values = values.reshape(bsz, k, -1, p)
            parts.append(torch.matmul(values, weights.transpose(2, 3)).reshape(
                bsz, k, -1, hh, hh))
        x = torch.cat(parts, 2).flatten(0, 1)
        if cfg.joint_dilations:
            h = self.joint[1](self.joint[0](x))
            x = self.joint[2:](h + self.joint_wide(h))
        else:
            x = self.joint(x)
        return x.reshape(bsz, k, 4, hh, hh) * 4.0  # px at 64x64


class WarpDecoder(nn.Module):
    """State ``[B, C, 16, 16]`` -> frames float32 ``[B, 3, 64, 64]`` in [0, 1] and the robot
    mask float32 ``[B, 1, 64, 64]`` in [0, 1].

    Static features (start frame, its features, the calibration summary) steer a motion
    path that starts from the motion features and has no bias, so zero motion features give
    zero flows, zero fill weight and the start frame itself. The motion path runs at 16x16
    and 32x32; flows and the fill weight are upsampled to 64x64 (bilinear) and the warp
    samples the full-resolution start frame.

    ``sampler`` (one of :data:`SAMPLERS`, not part of the weights or the configuration)
    chooses how the warp is computed (:func:`warp_composite`): ``grid_sample`` for eager
    use and training, ``gather`` in the exported graphs (``export_warp_model`` sets it).

    Raises:
        ValueError: an unknown ``sampler``.
    """

    base: Tensor

    def __init__(self, cfg: WarpConfig, sampler: str = "grid_sample"):
        super().__init__()
        if sampler not in SAMPLERS:
            raise ValueError(f"warp sampler {sampler!r}: expected one of {', '.join(SAMPLERS)}")
        self.cfg = cfg
        self.sampler = sampler
        w, f, s = cfg.dec_width, cfg.feat_channels, cfg.summary_channels
        w32 = w // 2
        self.static16 = nn.Sequential(nn.Conv2d(f + s, w, 1), _act(), ResBlock(w))
        self.inp = nn.Conv2d(cfg.motion_channels + (2 if cfg.joint_width else 0), w, 1,
                             bias=False)
        self.blocks16 = nn.ModuleList([_ZeroRes(w, w) for _ in range(2)])
        self.flow16 = nn.Conv2d(w, 2, 3, padding=1, bias=False)
        self.static32 = nn.Sequential(nn.Conv2d(3, w32, 4, stride=2, padding=1), _act())
        self.up32 = nn.Conv2d(w, w32, 3, padding=1, bias=False)
        self.block32 = _ZeroRes(w32, w32)
        self.head = nn.Conv2d(w32, 5, 3, padding=1, bias=False)  # d flow (2), fill flow (2), o
        self.mask_static = nn.Conv2d(w, 4 * w32, 1)  # 16x16 -> w32 planes at 32x32
        self.mask_head = nn.Sequential(nn.Conv2d(2 * w32, w32, 3, padding=1), _act(),
                                       nn.Conv2d(w32, 1, 3, padding=1))
        self.register_buffer("base", identity_grid(cfg.image_size), persistent=False)

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        out = self.flows(z)
        return out["frames"], out["mask"]

    def _start_mask(self, s16: Tensor, s32: Tensor) -> Tensor:
        ms = F.pixel_shuffle(self.mask_static(s16), 2)  # (B, w32, 32, 32)
        return F.interpolate(torch.sigmoid(self.mask_head(torch.cat([ms, s32], 1))),
                             scale_factor=2.0, mode="bilinear", align_corners=False)

    def _static(self, z: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The start frame ``[B, 3, 64, 64]`` in [0, 1] and the static features at 16x16 and
        32x32 (what the motion path is steered by; no motion block is read)."""
        lay = self.cfg.layout
        img = F.pixel_shuffle(lay.slice(z, "pixels"), 4)
        s16 = self.static16(torch.cat([lay.slice(z, "features"), lay.slice(z, "summary")], 1))
        return img, s16, self.static32(img)

    def start_mask(self, z: Tensor) -> Tensor:
        """The start frame's robot mask float32 ``[B, 1, 64, 64]`` in [0, 1] of states ``[B,
        C, 16, 16]`` (only the pixels, features and summary blocks are read): the
        ``start_mask`` of :meth:`flows` without the motion path."""
        _, s16, s32 = self._static(z)
        return self._start_mask(s16, s32)

    def flows(self, z: Tensor, plate: Tensor | None = None) -> dict[str, Tensor]:
        """Every intermediate output: ``flow`` and ``fill`` (px, ``[B, 2, 64, 64]``), ``o``
        (fill weight), ``start_mask`` (the start frame's robot mask), ``frames``, ``mask``,
        ``start`` (the start frame in [0, 1]). ``plate``: a background plate for the fill
        (:func:`warp_composite`; not in the exported graphs)."""
        lay = self.cfg.layout
        img, s16, s32 = self._static(z)  # img (B, 3, 64, 64) in [0, 1]
        if self.cfg.joint_width:
            joint = lay.slice(z, "joint_flow")
            h = self.inp(torch.cat([lay.slice(z, "motion"), joint * 0.25], 1))
        else:
            h = self.inp(lay.slice(z, "motion"))
        for blk in self.blocks16:
            h = blk(h, s16)
        flow16 = self.flow16(h) * 4.0  # px at 64x64
        if self.cfg.joint_width:
            flow16 = flow16 + joint
        up = F.interpolate(h, scale_factor=2.0, mode="bilinear", align_corners=False)
        h32 = self.block32(self.up32(up), s32)
        head = self.head(h32)
        coarse = F.interpolate(flow16, scale_factor=2.0, mode="bilinear", align_corners=False)
        head = F.interpolate(torch.cat([coarse + head[:, 0:2], coarse + head[:, 2:4] * 4.0,
                                        head[:, 4:5]], 1),
                             scale_factor=2.0, mode="bilinear", align_corners=False)
        flow, fill = head[:, 0:2], head[:, 2:4]
        o = torch.clamp(head[:, 4:5], 0.0, 1.0)
        m0 = self._start_mask(s16, s32)
        frames, mask = warp_composite(img, m0, head[:, 0:4], o, self.base, self.sampler,
                                      self.cfg.composite, plate)
        return {"flow": flow, "fill": fill, "o": o, "start_mask": m0, "frames": frames,
                "mask": mask, "start": img}


def plate_from_masks(frames_u8: Tensor, robot: Tensor, threshold: float = 0.3,
                     margin_px: int = 2) -> Tensor:
    """A background plate from frames of one fixed camera and their robot masks: per
    pixel, the mean of the frames where no robot is within ``margin_px``.

    Args:
        frames_u8: uint8 ``[T, 3, H, W]``.
        robot: float32 ``[T, 1, H, W]`` robot-mask probabilities in [0, 1].
        threshold: probability above which a pixel is the robot's.
        margin_px: the robot's mask is grown by this many pixels before it is left out
            (the blurred edge of a link is not background).

    Returns:
        float32 ``[1, 4, H, W]``: RGB in [0, 1] and the validity (1 where at least one frame
        showed the background, else 0 and RGB 0), the ``plate`` of :func:`warp_composite`.

    Raises:
        ValueError: the frames and masks do not match in shape.
    """
    if frames_u8.dim() != 4 or robot.shape != (frames_u8.shape[0], 1, *frames_u8.shape[2:]):
        raise ValueError(f"plate_from_masks: expected frames [T, 3, H, W] and masks "
                         f"[T, 1, H, W], got {tuple(frames_u8.shape)} and {tuple(robot.shape)}")
    k = 2 * margin_px + 1
    grown = F.max_pool2d(robot.to(torch.float32), k, 1, margin_px) if margin_px else robot
    w = (grown < threshold).to(torch.float32)  # (T, 1, H, W)
    x = frames_u8.to(torch.float32) * (1.0 / 255.0)
    count = w.sum(0, keepdim=True)
    rgb = (w * x).sum(0, keepdim=True) / count.clamp(min=1.0)
    return torch.cat([rgb, (count > 0).to(torch.float32)], 1)


def background_plate(model: WarpModel, frames_u8: Tensor, threshold: float = 0.3,
                     margin_px: int = 2) -> Tensor:
    """:func:`plate_from_masks` with the masks of the model's own start-mask head (no
    recorded masks needed): e.g. of a cell's calibration episode, which moves the arm
    away from some of what it covers in a rollout's start frame.

    Args:
        model: a warp model (its encoder and the decoder's start-mask head are used).
        frames_u8: uint8 ``[T, 3, H, W]`` frames of one fixed camera.
        threshold, margin_px: as in :func:`plate_from_masks`.

    Returns:
        float32 ``[1, 4, H, W]`` (:func:`plate_from_masks`).
    """
    return background_plates(model, frames_u8[None], threshold, margin_px)


def background_plates(model: WarpModel, frames_u8: Tensor, threshold: float = 0.3,
                      margin_px: int = 2) -> Tensor:
    """:func:`background_plate` of N cells at once (one encoder and mask-head pass over
    every frame): uint8 ``[N, T, 3, H, W]`` -> float32 ``[N, 4, H, W]``."""
    n, t = frames_u8.shape[:2]
    with torch.no_grad():
        robot = model.decoder.start_mask(model.encoder(frames_u8.flatten(0, 1)))
        robot = robot.reshape(n, t, *robot.shape[1:])
        return torch.cat([plate_from_masks(f, m, threshold, margin_px)
                          for f, m in zip(frames_u8, robot, strict=True)])


class WarpModel(nn.Module):
    """Encoder, calibration reader, step and decoder of one warp model."""

    def __init__(self, cfg: WarpConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = FrameEncoder(cfg)
        self.calibration = CalibrationReader(cfg)
        self.step = StateStep(cfg)
        self.decoder = WarpDecoder(cfg)

    def prepare(self, start_state: Tensor, context: Tensor) -> Tensor:
        """The start state ``[B, C, h, w]`` made ready for the steps: with
        ``joint_fields_in_state``, its ``joint_fields`` block filled (once per rollout);
        otherwise returned as it is. ``context`` ``[A, D, h, w]`` or ``[B, A, D, h, w]``."""
        cfg = self.cfg
        if not (cfg.joint_width and cfg.joint_fields_in_state):
            return start_state
        a, b = cfg.layout.ranges["joint_fields"]
        f = self.step.joint_fields(start_state, context).flatten(1, 2)  # (B, 4A, h, w)
        return torch.cat([start_state[:, :a], f, start_state[:, b:]], 1)

    def with_offset(self, start_state: Tensor, offset: Tensor) -> Tensor:
        """The start state ``[B, C, h, w]`` with its ``offset`` block set to ``offset``
        ``[B, A]`` (rad, the start pose minus the calibration's home pose, channel order).

        Raises:
            ValueError: the model has no ``start_offset`` block.
        """
        if not self.cfg.start_offset:
            raise ValueError("with_offset: this model has no start-offset block "
                             "(WarpConfig.start_offset is False)")
        a, b = self.cfg.layout.ranges["offset"]
        planes = offset[:, :, None, None].to(start_state.dtype).expand(
            -1, -1, *start_state.shape[-2:])
        return torch.cat([start_state[:, :a], planes, start_state[:, b:]], 1)

    def state_at(self, start_state: Tensor, cum_actions: Tensor, context: Tensor,
                 fields: Tensor | None = None) -> Tensor:
        """The state after actions summing to ``cum_actions [B, A]`` (rad) from the start
        state ``[B, C, h, w]`` (made ready by :meth:`prepare`): one step with the sum (the
        step is additive in the angles). ``fields``: as in :meth:`StateStep.forward`."""
        return self.step(start_state[:, None], cum_actions[:, None], cum_actions, context,
                         fields)

    def rollout(self, start_state: Tensor, actions: Tensor, context: Tensor) -> Tensor:
        """States of frames 1..T ``[B, T, C, h, w]`` for actions ``[B, T, A]`` from the start
        state ``[B, C, h, w]`` (:meth:`prepare` is applied here)."""
        z, out = self.prepare(start_state, context), []
        for t in range(actions.shape[1]):
            z = self.step(z[:, None], actions[:, t:t + 1], actions[:, t], context)
            out.append(z)
        return torch.stack(out, 1)
