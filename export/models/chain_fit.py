"""Reading a cell's kinematic chain from its calibration episode by fitting it.

The calibration episode sweeps each controller channel alone from the home pose and back
(``syncedge calibrate record``). Every robot pixel of the home frame is a 3-D point that the
swept joint turns about a fixed axis by a known angle (the channel's recorded joint
positions), so its image track over the sweep is the projection of a circular arc. The
fit finds, in the home frame's camera coordinates, one depth per robot pixel and each
channel's axis and pivot such that Rodrigues' rotation of the points, projected through
the pinhole, lands on the observed tracks. Because a distal point is turned by every
joint proximal to it, its depth is pinned down by several axes at once; the product of
exponentials (:func:`export.models.kinematics.compose_chain`) then moves the home points
to any joint offset, which is all a rollout needs:

- the start frame's robot pixels are the home points moved by the start's joint offset
  from the home pose (the controller's own joint readings);
- the target's are the same points moved by the offset plus the summed actions;
- the backward flow at the target is the start position minus the target position,
  splatted to the target (:func:`export.models.kinematics.splat_flow`), and the start frame
  warped by it; what the arm uncovers is taken from the calibration frames where the fit
  says no arm covers the pixel.

The depth scale is a gauge (scaling every depth and pivot together projects the same); it
is fixed by the median robot depth of 1 (the unit of :attr:`ChainFit.depth`). The camera's
pinhole (focal length and principal point, px) is an input.

Tracks come from :func:`sweep_tracks` (dense optical flow from the home frame, OpenCV DIS;
Kroeger et al. 2016, "Fast Optical Flow using Dense Inverse Search") or, to measure the fit
apart from tracking, from a cell's true geometry. Which home pixels are arm comes from
:func:`sweep_robot_mask` (the flow spreads a link's motion onto the still scene around it,
so the pixels it moves are several times the arm). :func:`refine_photometric` then refines
the fit against the calibration frames themselves, and :func:`read_chain` runs the whole
reading as a device would.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from edge.runtime.chain import (
    HOME_FRAME_TOLERANCE,
    JOINT_SCALE_MODES,
    MotionEpisodeError,
    frames_sha256,
    home_differences,
    sweep_segments,
)

__all__ = ["MotionEpisodeError", "ChainFit", "sweep_tracks", "sweep_robot_mask", "fit_chain", "refine_photometric",
           "read_chain", "chain_positions", "as_calibration", "calibration_background",
           "predict_frames", "camera_pinhole", "calibration_sweeps", "on_grid",
           "read_chain_calibration", "sweep_timing", "JOINT_SCALE_MODES", "MAX_SWEEP_RAD",
           "NOMINAL_SWEEP_RAD", "SCALE_STARTS", "anchor_chain_to_start", "ANCHOR_COPIES",
           "twin_candidates", "choose_twins", "TWIN_MIN_GAIN", "TWIN_BLUR_PX",
           "TWIN_CONFIRM_BLUR_PX", "motion_frames_to_use", "frame_noise_levels",
           "TRACK_STILL_NOISE", "MIN_CARRIED_PX"]

#: A channel whose turn per unit of reading is fitted (``fit_chain(scale_free=...)``)
#: starts from a sweep of this many rad (the planner sweeps 0.3-0.5 rad; 0.2-0.8 were
#: evaluated)...
NOMINAL_SWEEP_RAD = 0.5
#: ...and its restarts cycle through these offsets of the log scale (half, the nominal and
#: twice the nominal sweep).
SCALE_STARTS = (0.0, float(np.log(0.5)), float(np.log(2.0)))
#: A revolute channel's calibration sweep larger than this in its readings (a half turn)
#: cannot be in rad: the readings are degrees, counts or a normalised range, so
#: ``joint_scale="auto"`` fits every revolute channel's turn per unit.
MAX_SWEEP_RAD = float(np.pi)
#: ...but one whose widest revolute sweep, read as degrees, is at most this many rad (the
#: planner sweeps 0.2-0.8 rad: 11-46 degrees) is read as degrees exactly, 1 unit = pi/180
#: rad, as ``joint_scale="deg"`` does: fitting the turn from the frames trades it for lever
#: arm (held-out convention cells 8-15 read in degrees: retrieval@8 0.66 fitted against
#: 0.81 read in rad; README, "Readings in degrees, counts or a normalised range"). Encoder
#: counts (4096 a turn: 0.2 rad is 130) and tenths of a degree (0.2 rad is 115) lie above.
DEGREES_MAX_SWEEP_RAD = 1.0
#: A channel whose sweep moves fewer arm pixels than this (at its far end, or explained by
#: its turn once fitted) gets no axis: the chain does not model it (zero axis, carries
#: nothing; ``ChainFit.left_out`` and the calibration's ``info["unmodelled_channels"]``
#: say why).
MIN_CARRIED_PX = 3


@dataclass
class ChainFit:
    """A cell's chain as read from its calibration episode (home frame's camera
    coordinates: x right, y down, z forward; depth unit: the median robot depth).

    Attributes:
        robot: bool ``[H, W]``, the home frame's pixels that move in some sweep.
        depth: float64 ``[N]``, each robot pixel's depth (row-major order of ``robot``).
        axes: float64 ``[K, 3]``, each channel's unit axis: a positive change of the
            channel's joint reading turns the points right-handed about it (a prismatic
            channel: slides them along it).
        pivots: float64 ``[K, 3]``, a point on each axis.
        carried: float64 ``[K, N]`` in {0, 1}, which channels carry each point.
        rad_per_unit: float64 ``[K]``, the turn (rad) per unit of each channel's reading
            (0 for a prismatic channel).
        focal_px: focal length, px.
        centre_px: float64 ``[2]``, principal point, px (pixel i's centre at i + 0.5).
        residual_px: float64 ``[K]``, each channel's RMS track residual after the fit, px.
        travel_per_unit: float64 ``[K]``, a prismatic channel's slide (depth unit) per unit
            of its reading (m); 0 for a revolute channel. None: every channel revolute.
        left_out: ``{channel index: why}``, the channels :func:`fit_chain` gave no axis
            (fewer than :data:`MIN_CARRIED_PX` arm pixels moved with them); None where not
            recorded (a fit rebuilt from a calibration).
    """

    robot: np.ndarray
    depth: np.ndarray
    axes: np.ndarray
    pivots: np.ndarray
    carried: np.ndarray
    rad_per_unit: np.ndarray
    focal_px: float
    centre_px: np.ndarray
    residual_px: np.ndarray
    travel_per_unit: np.ndarray | None = None
    left_out: dict[int, str] | None = None

    def __post_init__(self) -> None:
        if self.travel_per_unit is None:
            self.travel_per_unit = np.zeros(len(self.axes))

    def points(self) -> np.ndarray:
        """The robot pixels' 3-D points float64 ``[N, 3]``."""
        ys, xs = np.nonzero(self.robot)
        z = self.depth
        return np.stack([(xs + 0.5 - self.centre_px[0]) * z / self.focal_px,
                         (ys + 0.5 - self.centre_px[1]) * z / self.focal_px, z], -1)


def _grid_ratio(frames: np.ndarray, size: tuple[int, int] | None, who: str
                ) -> tuple[int, int, int]:
    """``(H, W, r)``: the model's grid (``size``, or the frames' own) and how many
    calibration pixels one model pixel spans. Raises ValueError where the frames are not
    a whole multiple of it."""
    fh, fw = frames.shape[1:3]
    h, w = (fh, fw) if size is None else size
    if fh % h or fw % w or fh // h != fw // w:
        raise ValueError(f"{who}: calibration frames {fh}x{fw} are not a whole multiple of "
                         f"the model's {h}x{w}")
    return h, w, fh // h


def _neighbour_pairs(robot: np.ndarray) -> np.ndarray:
    """int ``[P, 2]``: indices (row-major order of ``robot``'s pixels) of horizontally and
    vertically neighbouring robot pixels."""
    h, w = robot.shape
    idx = np.full((h, w), -1)
    ys, xs = np.nonzero(robot)
    idx[ys, xs] = np.arange(len(ys))
    pairs = np.concatenate([np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()], 1),
                            np.stack([idx[:-1].ravel(), idx[1:].ravel()], 1)])
    return pairs[(pairs >= 0).all(1)]


def sweep_tracks(frames: np.ndarray, size: tuple[int, int] | None = None, upsample: int = 1,
                 preset: int | None = None, colour: bool | str = False
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Where every pixel of the home frame (frame 0) is in each calibration frame.

    Dense optical flow from frame 0 to every frame (OpenCV DIS on the grey frames,
    ``upsample`` times larger), checked forward-backward, then averaged onto the model's
    pixel grid ``size``: a calibration recorded at a higher resolution than the model runs
    at gives tracks to a fraction of a model pixel. The flow to frame i starts from the
    flow to frame i - 1 plus the flow between the two consecutive frames: a link swept
    far from home (tens of pixels, often without texture) is where the small steps lead,
    which DIS's own coarse-to-fine search from zero misses (on held-out robots' sweeps at
    256x256, the median error of the farthest quarter of the moving samples falls from
    3.9 to 1.2 model px). On a real camera's noise those steps drift where the picture is
    flat, and the drift grows from frame to frame (to 1e19 px on a held-out robot's sweep
    with noise of 3 levels and JPEG at 80): where a patch of frame i matches the home
    frame within the noise (:data:`TRACK_STILL_NOISE` times :func:`frame_noise_levels`),
    the pixel has not moved and its flow is zero. Rendered frames (no noise) are tracked
    as before.

    Args:
        frames: uint8 ``[T, h, w, 3]``, the calibration episode, home frame first.
        size: the model's ``(H, W)``; None: the frames' own. ``h`` and ``w`` must be whole
            multiples of it.
        upsample: the flow is computed on frames this many times larger.
        preset: a ``cv2.DISOPTICAL_FLOW_PRESET_*``; None: MEDIUM.
        colour: also flow on the two colour-opponent channels (CIELAB a* and b*) and keep,
            pixel by pixel, the flow whose colour match is clearly better
            (:func:`_colour_flow`): a saturated link over a background of the same
            brightness has no edge in grey. ``"fallback"``: the grey tracks, and the
            colour ones only where grey's fail the forward-backward check and colour's
            pass it (measured, not the default: docs/eval/experiments.md, "Colour only
            where grey fails").

    Returns:
        ``(tracks, valid)``: float32 ``[T, H, W, 2]`` forward displacement (model px) of each
        home pixel at frame t (zero at t = 0); bool ``[T, H, W]``, the forward-backward
        error under half a model pixel.

    Raises:
        ValueError: frames whose size is not a whole multiple of ``size``.
    """
    import cv2

    if colour == "fallback":
        tg, vg = sweep_tracks(frames, size, upsample, preset, colour=False)
        tc, vc = sweep_tracks(frames, size, upsample, preset, colour=True)
        use = ~vg & vc
        return np.where(use[..., None], tc, tg).astype(np.float32), vg | vc
    t, fh, fw, _ = frames.shape
    h, w, ratio = _grid_ratio(frames, size, "sweep_tracks")
    big = (fw * upsample, fh * upsample)
    grey = [cv2.cvtColor(f, cv2.COLOR_RGB2GRAY) for f in frames]
    noise = _grey_noise_levels(grey)
    if upsample != 1:
        grey = [cv2.resize(g, big, interpolation=cv2.INTER_CUBIC) for g in grey]
    make = cv2.DISOpticalFlow_create  # type: ignore[attr-defined]
    dis = make(cv2.DISOPTICAL_FLOW_PRESET_MEDIUM if preset is None else preset)
    if colour:
        lab = [cv2.cvtColor(f if upsample == 1 else cv2.resize(f, big,
                                                               interpolation=cv2.INTER_CUBIC),
                            cv2.COLOR_RGB2LAB) for f in frames]
        flow = _colour_flow(dis, grey, lab, (2 * upsample * ratio - 1,) * 2)
    else:
        def flow(i: int, j: int, init: np.ndarray | None) -> np.ndarray:
            return dis.calc(grey[i], grey[j], init)
    tracks = np.zeros((t, h, w, 2), np.float32)
    valid = np.ones((t, h, w), bool)
    gx, gy = np.meshgrid(np.arange(big[0], dtype=np.float32),
                         np.arange(big[1], dtype=np.float32))
    per_model_px = float(upsample * ratio)
    # where a patch of frame i shows what the home frame showed there, within the camera's
    # noise, nothing has moved from home: its flow is zero. The small steps carry a
    # far-swept link, but on a real camera's noise they drift where the picture is flat
    # (no texture corrects them), and the drift would grow from frame to frame
    still_below = TRACK_STILL_NOISE * noise
    patch = (2 * TRACK_STILL_PATCH * upsample + 1,) * 2
    home = grey[0].astype(np.float32)

    def still(g: np.ndarray) -> np.ndarray:
        if still_below <= 0:  # no noise: every pixel is tracked
            return np.zeros(g.shape + (1,), bool)
        return cv2.blur(np.abs(g.astype(np.float32) - home), patch)[..., None] < still_below

    fwd = np.zeros((big[1], big[0], 2), np.float32)
    bwd = np.zeros_like(fwd)
    for i in range(1, t):
        # the step from the previous frame, carried from where the previous estimate put
        # each home pixel, starts the flow from the home frame (DIS refines it coarse to
        # fine): a far-swept link is found where the small steps lead, not searched for
        at_home = still(grey[i])
        step = flow(i - 1, i, None)
        fwd = fwd + cv2.remap(step, gx + fwd[..., 0], gy + fwd[..., 1], cv2.INTER_LINEAR,
                              borderMode=cv2.BORDER_REPLICATE)
        fwd = np.where(at_home, 0.0, flow(0, i, np.ascontiguousarray(
            np.where(at_home, 0.0, fwd)))).astype(np.float32)
        # and the flow back to the home frame, started the same way from frame i's side
        step = flow(i, i - 1, None)
        bwd = step + cv2.remap(bwd, gx + step[..., 0], gy + step[..., 1], cv2.INTER_LINEAR,
                               borderMode=cv2.BORDER_REPLICATE)
        bwd = np.where(at_home, 0.0, flow(i, 0, np.ascontiguousarray(
            np.where(at_home, 0.0, bwd)))).astype(np.float32)
        back = cv2.remap(bwd, gx + fwd[..., 0], gy + fwd[..., 1], cv2.INTER_LINEAR,
                         borderMode=cv2.BORDER_REPLICATE)
        err = np.linalg.norm(fwd + back, axis=-1) / per_model_px
        tracks[i] = cv2.resize(fwd, (w, h), interpolation=cv2.INTER_AREA) / per_model_px
        valid[i] = cv2.resize(err, (w, h), interpolation=cv2.INTER_AREA) < 0.5
    return tracks, valid


#: :func:`_colour_flow`: a colour channel's flow replaces the grey one where its colour
#: match (mean CIELAB L1 over a patch, levels) is below this share of the grey flow's...
COLOUR_FLOW_BETTER = 0.8
#: ...and at least this many levels lower (flat regions tie; the grey flow stays there).
COLOUR_FLOW_MARGIN = 2.0
#: The colour-opponent channels' contrast is stretched this many times about their
#: neutral 128 before DIS (their range on ordinary scenes is a few tens of levels).
COLOUR_FLOW_GAIN = 3.0


def _colour_flow(dis: Any, grey: list[np.ndarray], lab: list[np.ndarray],
                 patch: tuple[int, int]):
    """``flow(i, j, init) -> float32 [H, W, 2]``: DIS from frame i to frame j on the grey
    frames and on the stretched CIELAB a* and b* channels (each from ``init`` where given),
    kept per pixel where its colour match is clearly the best (:data:`COLOUR_FLOW_BETTER`,
    :data:`COLOUR_FLOW_MARGIN`): brightness alone misses a saturated link over a
    background of the same brightness (a green forearm before a grey wall), where the
    colour channels see it. ``grey`` uint8 ``[H, W]`` and ``lab`` uint8 ``[H, W, 3]`` per
    frame; ``patch`` the match's window, px."""
    import cv2

    def opponent(img: np.ndarray, c: int) -> np.ndarray:
        v = (img[..., c].astype(np.float32) - 128.0) * COLOUR_FLOW_GAIN + 128.0
        return np.clip(v, 0, 255).astype(np.uint8)

    chans = [(g, opponent(f, 1), opponent(f, 2)) for g, f in zip(grey, lab, strict=True)]
    labf = [f.astype(np.float32) for f in lab]
    h, w = grey[0].shape
    gx, gy = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))

    def mismatch(i: int, j: int, f: np.ndarray) -> np.ndarray:
        warped = cv2.remap(labf[j], gx + f[..., 0], gy + f[..., 1], cv2.INTER_LINEAR,
                           borderMode=cv2.BORDER_REPLICATE)
        return cv2.blur(np.abs(warped - labf[i]).sum(-1), patch)

    def flow(i: int, j: int, init: np.ndarray | None) -> np.ndarray:
        best = dis.calc(chans[i][0], chans[j][0], None if init is None else init.copy())
        err = mismatch(i, j, best)
        for c in (1, 2):
            f = dis.calc(chans[i][c], chans[j][c], None if init is None else init.copy())
            e = mismatch(i, j, f)
            take = (e < COLOUR_FLOW_BETTER * err) & (e < err - COLOUR_FLOW_MARGIN)
            best = np.where(take[..., None], f, best)
            err = np.where(take, e, err)
        return best.astype(np.float32)

    return flow


#: :func:`sweep_tracks` holds a pixel's flow at zero (not moved from home) in frames where
#: the mean absolute grey difference from the home frame over a patch around it is below
#: this many times the camera's noise level (:func:`frame_noise_levels`; on 10 held-out
#: robot, stress and convention sweeps with noise of 1 or 3 levels and JPEG at 80 the
#: tracks' median error on the moving arm stayed at the clean sweeps' 0.7 model px,
#: where without it they drifted to 1e19 px on the flat background and the arm's error
#: rose to 0.84-1.06 px)...
TRACK_STILL_NOISE = 1.5
#: ...the patch's half-size in the frames' own px.
TRACK_STILL_PATCH = 3


def frame_noise_levels(frames: np.ndarray) -> float:
    """The camera's per-pixel noise (standard deviation, grey levels) seen in an episode.

    Most of a calibration sweep's picture is still from frame to frame, so the grey
    differences of two consecutive frames are mostly the camera's noise (twice its
    variance): for each pair the largest tenth (the arm's motion) is left out and the
    truncation corrected for (a normal variable within its central 90% keeps 0.623 of its
    variance). A pair in which the whole view changed (a light flickered, the exposure
    stepped) says nothing about the noise, so the estimate is a low pair's: the tenth
    percentile over the pairs (the lower value, not interpolated). Rendered frames give 0.

    Args:
        frames: uint8 ``[T, H, W, 3]`` (T >= 2; fewer give 0).

    Returns:
        float, levels.
    """
    import cv2

    return _grey_noise_levels([cv2.cvtColor(f, cv2.COLOR_RGB2GRAY) for f in frames])


def _grey_noise_levels(grey: list[np.ndarray]) -> float:
    """:func:`frame_noise_levels` of frames already in grey (uint8 ``[H, W]`` each)."""
    if len(grey) < 2:
        return 0.0
    per_pair = []
    for a, b in zip(grey[:-1], grey[1:], strict=True):
        d = np.abs(b.astype(np.float32) - a).ravel()
        kept = d[d <= np.percentile(d, 90)]
        per_pair.append(float(np.sqrt(np.mean(kept ** 2) / 0.623 / 2.0)) if kept.size else 0.0)
    return float(np.percentile(per_pair, 10, method="lower"))


def sweep_robot_mask(frames: np.ndarray, size: tuple[int, int] | None = None,
                     change: float = 20.0, iterations: int = 5) -> np.ndarray:
    """The home frame's pixels on the moving arm, segmented from the calibration sweep.

    Dense optical flow spreads a link's motion onto the still background around it, so
    "the pixels the flow moves" is several times the arm. Instead the home frame is cut
    into arm and scene by colour (GrabCut: Rother et al. 2004, "GrabCut: interactive
    foreground extraction using iterated graph cuts"; OpenCV's ``grabCut``), seeded from
    the sweep: pixels whose colour never changes in any frame, and are not next to one that
    does, are surely scene; a ring of unchanged pixels around the changed ones is probably
    scene; pixels that change are probably arm. The cut gives a changed pixel to the scene
    where its home colour is the scene's (the arm only passed over it). No pixel is held as
    surely arm: seeds taken from the flow (pixels whose colour the flow finds again where
    it carries them) held a halo of plain scene the flow had smeared the motion onto, which
    the cut could then not give back (on 8 cells of each evaluation split, 36-51% of the
    cut was arm with such seeds, 94-97% without, at the same recall).

    A lamp's shadow moves with the arm and changes the scene it falls on; those changes
    (the home colour scaled alike in every channel by one factor over the changed pixels
    around, :func:`_shading_changes`) are not counted as the arm's, or the cut took the
    shadow and the surface under it for arm (16 held-out robot and 16 convention cells
    rendered with shadows: mean IoU with the true arm 0.60 -> 0.79 and 0.68 -> 0.83;
    docs/eval/experiments.md). Only on frames read as recorded: on a noisy camera's
    smoothed frames every change counts, as before. GrabCut's colour models
    start from OpenCV's random generator, seeded (:data:`GRABCUT_SEED`) so that a sweep
    always gives the same cut. A part of the cut (connected) whose colour the sweep hardly
    ever replaces by another hue is given back to the scene (:func:`_replaced_parts`): a
    box beside the arm that the arm's shadow crosses, its soft shadow missed by the shading
    test, changes without ever showing something else.

    Args:
        frames: uint8 ``[T, h, w, 3]``, the calibration episode, home frame first.
        size: the model's ``(H, W)``; None: the frames' own (``h``, ``w`` whole multiples).
        change: the colour change (sum over RGB, 0-765) that counts as changed; on frames
            with camera noise (:func:`frame_noise_levels` above :data:`MASK_NOISE_FROM`)
            judged on frames smoothed by
            :data:`MASK_NOISE_BLUR_PX` and raised by :data:`MASK_NOISE_CHANGE` times the
            noise level (rendered frames: as given).
        iterations: GrabCut's.

    Returns:
        bool ``[H, W]``: model pixels at least half of whose calibration pixels are arm
        (where every part of the view changes, as when the camera moved or the light
        changed during the recording, the changed pixels themselves: there is no scene to
        cut against).

    Raises:
        ValueError: frames whose size is not a whole multiple of ``size``.
    """
    import cv2

    _, fh, fw, _ = frames.shape
    h, w, _ = _grid_ratio(frames, size, "sweep_robot_mask")
    noise = frame_noise_levels(frames)
    home = frames[0]
    if noise > MASK_NOISE_FROM:
        # a real camera's noise: "changed" is judged on frames smoothed by a Gaussian of
        # MASK_NOISE_BLUR_PX and above the noise that survives it, or the noise alone
        # would change some pixel of every patch in one of the sweep's frames (on 12
        # held-out robot, stress and convention cells with noise of 3 levels and JPEG at
        # 80 the cut's IoU with the true arm went from 0.73 to 0.78, clean 0.85; at 6
        # levels from 0.05 to 0.76; docs/eval/experiments.md)
        frames = np.stack([cv2.GaussianBlur(f, (0, 0), MASK_NOISE_BLUR_PX) for f in frames])
        change = change + MASK_NOISE_CHANGE * noise
    img = frames.astype(np.float32)
    diff = np.abs(img[1:] - img[:1]).sum(-1) > change  # (T-1, h, w)
    changed = diff.any(0)
    if not changed.any():
        return np.zeros((h, w), bool)
    # a shadow the arm casts changes the scene it falls on, and moves with the sweep: such
    # changes are the home colour scaled alike in every channel, by one factor over the
    # changed pixels around (a lamp's shadow on a surface), where the arm passing brings
    # its own colours and shading; a pixel whose changes are mostly that is not changed by
    # the arm itself: surely scene away from the arm's changes, and its colours count
    # neither as arm nor as scene (a dark link and a shadow on a grey floor share them).
    # Told apart on frames read as recorded only: on a noisy camera's smoothed frames the
    # tolerances the noise needs also let a plain link pass for a shadow (the cut of the
    # sample cell's sweep with noise of 6 levels and JPEG at 80 fell from IoU 0.92 to
    # 0.75), so there every change counts, as before.
    hsv = _hsv(frames)  # for the shading test and the parts the sweep replaced
    if noise > MASK_NOISE_FROM:
        by_arm = diff
    else:
        by_arm = diff & ~_shading_changes(img, diff, noise, hsv)
    moved = by_arm.any(0)
    seeds = np.full((fh, fw), cv2.GC_BGD, np.uint8)
    seeds[cv2.dilate(moved.astype(np.uint8), np.ones((9, 9), np.uint8)) > 0] = cv2.GC_PR_BGD
    # a changed pixel is probably arm where its home colour is more likely among the
    # colours changed pixels take when they change (mostly the arm passing over scene)
    # than among the pixels that never change (scene); else probably scene
    seeds[moved & _armlike(frames, by_arm, moved, ~changed)] = cv2.GC_PR_FGD
    if not (seeds == cv2.GC_BGD).any():  # the whole view changed: nothing to cut against
        return cv2.resize(changed.astype(np.float32), (w, h),
                          interpolation=cv2.INTER_AREA) >= 0.5
    bgd, fgd = np.zeros((1, 65)), np.zeros((1, 65))
    # GrabCut starts its colour models from k-means on OpenCV's global random generator:
    # seeded, the same calibration gives the same cut whatever ran before it in the process
    cv2.setRNGSeed(GRABCUT_SEED)
    # the cut reads the home frame as recorded (smoothed, it gave the arm's rim away)
    cv2.grabCut(np.ascontiguousarray(home[..., ::-1]), seeds, (0, 0, fw, fh), bgd, fgd,
                iterations, cv2.GC_INIT_WITH_MASK)
    arm = (seeds == cv2.GC_FGD) | (seeds == cv2.GC_PR_FGD)
    # the arm leaves its place in the sweep: a part of the cut whose colour the sweep's
    # changes hardly ever replace is a surface the arm's shadow crossed
    arm = _replaced_parts(hsv, by_arm, arm)
    return cv2.resize(arm.astype(np.float32), (w, h), interpolation=cv2.INTER_AREA) >= 0.5


#: The seed :func:`sweep_robot_mask` gives OpenCV's random generator before each cut (0:
#: the state a fresh process starts in, ``cv::RNG`` takes 0 as 0xFFFFFFFF: the first cut
#: of a process is the cut it was before the seed was set).
GRABCUT_SEED = 0
#: :func:`sweep_robot_mask` on frames with camera noise above this many grey levels
#: (:func:`frame_noise_levels`; below it, noise alone does not pass ``change`` in a sweep:
#: at 0.25 levels, noise of 1 level and JPEG at 80, the cut as on clean frames kept IoU
#: 0.80 with the true arm, the smoothed one 0.76)...
MASK_NOISE_FROM = 1.0
#: ...smooths them by a Gaussian of this many px (of the calibration's frames)...
MASK_NOISE_BLUR_PX = 1.0
#: ...and counts a pixel as changed above ``change`` plus this many times the noise level.
MASK_NOISE_CHANGE = 6.0


def _colour_hist(colours: np.ndarray, weights: np.ndarray | None = None, bins: int = 16
                 ) -> np.ndarray:
    """A normalised RGB histogram ``[bins]*3`` of uint8 colours ``[M, 3]``, smoothed by one
    bin."""
    q = (colours.astype(np.int64) * bins) // 256
    idx = (q[:, 0] * bins + q[:, 1]) * bins + q[:, 2]
    h = np.bincount(idx, weights, bins ** 3).reshape(bins, bins, bins)
    for ax in range(3):  # a [1, 2, 1] / 4 kernel along each colour axis
        h = np.moveaxis(h, ax, 0)
        p = np.pad(h, ((1, 1), (0, 0), (0, 0)))
        h = np.moveaxis(0.25 * p[:-2] + 0.5 * p[1:-1] + 0.25 * p[2:], 0, ax)
    return h / max(float(h.sum()), 1e-12)


def _shading_changes(img: np.ndarray, diff: np.ndarray, noise: float = 0.0,
                     hsv: np.ndarray | None = None) -> np.ndarray:
    """The changes of a calibration sweep that are a shadow moving over the scene, as bool
    ``[T-1, h, w]``, from frames float32 ``[T, h, w, 3]`` (home first), where each frame
    changed against home, bool ``[T-1, h, w]``, and the frames' noise (grey levels, of the
    frames as given: smoothed ones where :func:`sweep_robot_mask` smoothed them); ``hsv``:
    the frames' :func:`_hsv` where the caller has it.

    A pixel's change is shading where its chromaticity stays (:data:`SHADING_CHROMA`), or
    on a coloured surface its hue (:func:`_hue_kept`: a shadow that takes a shiny surface's
    highlight with it moves the chromaticity towards the surface's own colour), and its
    brightness's log ratio to home is shared, within twice :data:`SHADING_RATIO_SPREAD`,
    by at least :data:`SHADING_AGREEMENT` of the changed pixels within
    :data:`SHADING_WINDOW_PX` (the unchanged ones left out, so a shadow's own edge does not
    count against it; a shared level, not one over the whole window, so that two lamps'
    shadows side by side, each flat, pass): a lamp's shadow scales the surface it falls on
    by one factor, where a link passing brings its own colours and its own shading. A
    change on a shadow's soft rim, or where two faces a shadow dims by two factors meet,
    mixes two levels: it is shading too where its ratio lies between two levels its
    neighbours show (a flat shading neighbour's, or no change), at least
    :data:`SHADING_STEP` tolerances apart.
    Between two greys (both less saturated than :data:`SHADING_SATURATION`),
    where the hue says nothing, the surface's own texture must also show through
    (:data:`SHADING_TEXTURE`): a grey link over a plain grey floor is not a shadow, and a
    shadow on a plain grey floor is left to the cut. A pixel is given to the shadow only
    where at least :data:`SHADING_SHARE` of its changes are shading. Camera noise widens
    both tolerances by what it moves a pixel's log ratio and chromaticity
    (:data:`SHADING_NOISE_SPAN` times the noise over the pixel's level). Figures:
    docs/eval/experiments.md, "The arm's shadow cut as arm".
    """
    import cv2

    eps = 4.0
    big = 1e3  # no level in the window
    k = (SHADING_WINDOW_PX, SHADING_WINDOW_PX)
    home_sum = img[0].sum(-1) + 3 * eps
    home_chroma = (img[0] + eps) / home_sum[..., None]
    home_log = np.log(home_sum)
    if hsv is None:
        hsv = _hsv(img)
    like = np.zeros_like(diff)
    r = SHADING_WINDOW_PX // 2
    hh, ww = diff.shape[1:]
    for t in range(len(diff)):
        d = diff[t]
        if not d.any():
            continue
        frame_sum = img[t + 1].sum(-1) + 3 * eps
        # what the noise moves a log ratio or a chromaticity, from the darker side
        slack = SHADING_NOISE_SPAN * 3.0 * noise / np.minimum(frame_sum, home_sum)
        chroma = (img[t + 1] + eps) / frame_sum[..., None]
        same_hue = ((np.abs(chroma - home_chroma).sum(-1) < SHADING_CHROMA + slack)
                    | _hue_kept(hsv[0], hsv[t + 1]))
        ratio = np.log(frame_sum) - home_log  # the brightness's log ratio to home
        w = d.astype(np.float32)
        n = np.maximum(cv2.blur(w, k), 1e-6)
        mean = cv2.blur(ratio * w, k) / n
        spread = np.sqrt(np.maximum(cv2.blur(ratio * ratio * w, k) / n - mean * mean, 0.0))
        home_mean = cv2.blur(home_log * w, k) / n
        texture = np.sqrt(np.maximum(cv2.blur(home_log * home_log * w, k) / n
                                     - home_mean * home_mean, 0.0))
        # between greys the hue says nothing (a grey link over a grey floor keeps it): there
        # the surface's own texture must show through, more than the factor varies
        grey = np.maximum(np.abs(chroma - 1 / 3).sum(-1),
                          np.abs(home_chroma - 1 / 3).sum(-1)) < SHADING_SATURATION
        through = (texture >= SHADING_TEXTURE + slack) & (spread < 0.5 * texture)
        # the factor is one where most changed neighbours share it (within twice the
        # spread allowed): a shadow of two lamps has a few levels side by side, each flat
        agree = np.zeros(d.shape, np.float32)
        total = np.zeros(d.shape, np.float32)
        rp = np.pad(ratio, r)
        dp = np.pad(d, r)
        tol = 2.0 * (SHADING_RATIO_SPREAD + slack)
        for dy in range(2 * r + 1):
            for dx in range(2 * r + 1):
                if dy == r and dx == r:
                    continue
                near = dp[dy:dy + hh, dx:dx + ww]
                total += near
                agree += near & (np.abs(rp[dy:dy + hh, dx:dx + ww] - ratio) < tol)
        flat = agree >= SHADING_AGREEMENT * np.maximum(total, 1.0)
        shading = d & same_hue & (~grey | through)
        # a pixel on a shadow's soft edge, or on the edge of two faces a shadow dims by two
        # factors, mixes two levels: its factor lies between levels its neighbours show
        # (no change counting as one where a neighbour did not change), and it is shading
        # when a flat shading neighbour is among them
        levels = shading & flat
        lo = np.where(levels, ratio, big).astype(np.float32)
        hi = np.where(levels, ratio, -big).astype(np.float32)
        lo[~d], hi[~d] = 0.0, 0.0
        square = np.ones((2 * r + 1, 2 * r + 1), np.uint8)
        lo, hi = cv2.erode(lo, square), cv2.dilate(hi, square)
        near_level = cv2.dilate(levels.astype(np.uint8), square).astype(bool)
        between = (near_level & (hi - lo >= SHADING_STEP * tol)
                   & (ratio >= lo - tol) & (ratio <= hi + tol))
        like[t] = shading & (flat | between)
    count = diff.sum(0)
    shadow = (count > 0) & (like.sum(0) >= SHADING_SHARE * count)
    return diff & shadow[None]


#: :func:`_shading_changes`: a change keeps the pixel's chromaticity below this (L1 of the
#: normalised RGB; shadows on 8 held-out cells moved it by 0.01-0.08, a lamp's colour
#: against the ambient's)...
SHADING_CHROMA = 0.1
#: ...and its brightness's log ratio to home is within twice this of the ratio of at
#: least a share of...
SHADING_RATIO_SPREAD = 0.05
SHADING_AGREEMENT = 0.6
#: ...the changed pixels in a window of this many px (of the calibration's frames)...
SHADING_WINDOW_PX = 5
#: ...and a pixel is shadow where at least this share of its changes are so.
SHADING_SHARE = 0.8
#: A change between two levels its neighbours show is shading where the levels are this
#: many tolerances apart (a shadow's step; a link's own shading, across a turning
#: cylinder, varies by less from one window to the next).
SHADING_STEP = 3.0
#: Between colours less saturated than this (L1 of the chromaticity from grey)...
SHADING_SATURATION = 0.1
#: ...a change is shading only on a surface whose log brightness varies by at least this
#: (standard deviation over the window's changed pixels), twice the factor's spread.
SHADING_TEXTURE = 0.03
#: Both tolerances widen by this many times the frames' noise over a pixel's level.
SHADING_NOISE_SPAN = 3.0


def _hsv(rgb: np.ndarray) -> np.ndarray:
    """OpenCV's HSV of RGB colours (any shape ``[..., 3]``, 0-255): float32, hue in degrees
    (0-360), saturation and value 0-1."""
    import cv2

    flat = np.ascontiguousarray(rgb.reshape(-1, 1, 3), np.float32) / 255.0
    return cv2.cvtColor(flat, cv2.COLOR_RGB2HSV_FULL).reshape(np.shape(rgb))


def _hue_kept(home: np.ndarray, seen: np.ndarray, saturation_step: float | None = None
              ) -> np.ndarray:
    """Where a coloured pixel changed from ``home`` to ``seen`` (HSV, :func:`_hsv`,
    broadcast together) keeps its hue (within :data:`HUE_KEPT_DEG`) and about its
    saturation (within :data:`HUE_KEPT_SATURATION_STEP`), both at least
    :data:`HUE_KEPT_COLOURED` saturated and :data:`HUE_KEPT_CHROMA` from grey: a shade of
    the same surface, as a shadow makes it even where it takes a shiny surface's highlight
    with it (which moves the chromaticity towards the surface's own colour, and past
    :data:`SHADING_CHROMA`). ``saturation_step``: another limit on the saturation's change
    (1.0: none)."""
    step = HUE_KEPT_SATURATION_STEP if saturation_step is None else saturation_step
    turn = np.abs(seen[..., 0] - home[..., 0])
    turn = np.minimum(turn, 360.0 - turn)
    # the chroma (saturation times value): a dark pixel's hue and saturation are noise
    least = np.minimum(seen[..., 1] * seen[..., 2], home[..., 1] * home[..., 2])
    return ((turn < HUE_KEPT_DEG)
            & (np.abs(seen[..., 1] - home[..., 1]) < step)
            & (np.minimum(seen[..., 1], home[..., 1]) >= HUE_KEPT_COLOURED)
            & (least >= HUE_KEPT_CHROMA))


def _replaced_parts(hsv: np.ndarray, by_arm: np.ndarray, cut: np.ndarray) -> np.ndarray:
    """The parts of a cut the sweep replaced: bool ``[h, w]``, the connected parts (8-way)
    of ``cut`` (bool ``[h, w]``) at least :data:`CUT_REPLACED_SHARE` of whose pixels took,
    in some frame, a colour of another hue (or a grey; :func:`_hue_kept`) by a change the
    shading test left to the arm (``by_arm``, bool ``[T-1, h, w]``; ``hsv``: float32
    ``[T, h, w, 3]``, the frames' :func:`_hsv`, home first).

    A link leaves its place when its joint or one before it sweeps, and the scene behind it
    shows through; a box beside the arm that the arm's shadow crosses changes in every frame
    too, but keeps its hue, its shaded faces only darker or lighter (a shiny face's
    highlight coming and going changes its saturation, not its hue). Where the shading test
    misses such changes (a soft shadow's rim several pixels wide, one face of the box in
    shadow at home), the cut took the box for arm; its part of the cut is then one the
    sweep never replaced (a user's own scene, rendered clean and with camera noise: 4-6% of
    the box's part replaced; the arm's parts there, in the user's recording and on a held-out
    cell 55-100%; docs/eval/experiments.md, "A box the arm's shadow crosses"). A part
    touching the arm in the image is judged with it.
    """
    import cv2

    if not cut.any():
        return cut
    replaced = np.zeros(cut.shape, bool)
    for t in np.nonzero(by_arm.any((1, 2)))[0]:
        # another hue, or grey: a shiny surface's shade may change its saturation
        replaced |= by_arm[t] & ~_hue_kept(hsv[0], hsv[t + 1], saturation_step=1.0)
    count, parts = cv2.connectedComponents(cut.astype(np.uint8), connectivity=8)
    size = np.bincount(parts.ravel(), minlength=count)
    share = np.bincount(parts.ravel(), weights=replaced.ravel(), minlength=count)
    keep = share >= CUT_REPLACED_SHARE * np.maximum(size, 1)
    keep[0] = False  # the label of the pixels outside the cut
    return keep[parts]


#: :func:`_replaced_parts`: a part of the cut is the arm's where at least this share of its
#: pixels took another hue in the sweep.
CUT_REPLACED_SHARE = 0.25


#: :func:`_hue_kept`: a change that turns a pixel's hue by less than this (degrees, HSV)...
HUE_KEPT_DEG = 15.0
#: ...and moves its saturation (HSV, 0-1) by less than this...
HUE_KEPT_SATURATION_STEP = 0.2
#: ...between two colours at least this saturated...
HUE_KEPT_COLOURED = 0.2
#: ...and this far from grey (chroma, HSV saturation times value, 0-1: 20 of 255 levels),
#: is a shade of the same surface.
HUE_KEPT_CHROMA = 0.08


def _armlike(frames: np.ndarray, diff: np.ndarray, changed: np.ndarray, still: np.ndarray,
             bins: int = 16) -> np.ndarray:
    """Which changed pixels' home colour looks like arm: more likely under the colours the
    changed pixels take when they change (mostly arm passing over scene) than under the
    colours of pixels that never change (scene). ``diff``: bool ``[T-1, h, w]``, which
    pixels each frame changed against home; ``changed``: bool ``[h, w]``, the pixels
    judged; ``still``: bool ``[h, w]``, the pixels that never change."""
    ys, xs = np.nonzero(changed)
    d = diff[:, ys, xs]  # (T-1, M)
    cnt = np.maximum(d.sum(0), 1)
    into = frames[1:][:, ys, xs][d]  # colours when changed
    w_into = (np.broadcast_to(1.0 / cnt, d.shape))[d]
    h_into = _colour_hist(into, w_into, bins)
    h_static = _colour_hist(frames[0][still], None, bins)
    q = (frames[0][ys, xs].astype(np.int64) * bins) // 256
    p_in = h_into[q[:, 0], q[:, 1], q[:, 2]]
    p_st = h_static[q[:, 0], q[:, 1], q[:, 2]]
    out = np.zeros(changed.shape, bool)
    out[ys, xs] = p_in > p_st
    return out


def _carried_from_tracks(moves: np.ndarray) -> np.ndarray:
    """Hierarchical carried sets: channel c carries a point if the point moves in c's
    sweep, or if c carries every point some other channel moves (a proximal joint
    carries whatever its distal joints carry). ``moves`` bool ``[K, N]``."""
    k = len(moves)
    car = moves.copy()
    counts = moves.sum(1)
    for c in range(k):
        for d in range(k):
            if c == d or not moves[d].any():
                continue
            # c is proximal to d when c moves most of what d moves and more besides
            shared = (moves[c] & moves[d]).sum() / max(moves[d].sum(), 1)
            if shared > 0.6 and counts[c] > counts[d]:
                car[c] |= moves[d]
    return car


#: :func:`_fill_undecided`: the cost of stepping from an arm pixel to its neighbour is 1
#: plus their colour difference (CIELAB, OpenCV's 8-bit scale) over this many levels: a
#: point takes its membership from the nearest point that shows it along the same link's
#: surface rather than across an edge to another link.
FILL_COLOUR_LEVELS = 2.0


def _fill_undecided(decided: np.ndarray, value: np.ndarray, robot: np.ndarray,
                    home: np.ndarray | None) -> np.ndarray:
    """A channel's membership where its sweep shows nothing, from the points that show it.

    A link without texture, or one that leaves the view, gives its inner points no valid
    track in a sweep (the flow's forward-backward check fails where nothing anchors it),
    and no track is no evidence: such a point is not "standing still". Each undecided
    region of area (a 4-connected region of undecided points holding at least one whose
    3x3 neighbourhood is all undecided arm; a pixel on the frame's edge is never such a
    one) takes, point by point, the value of the decided point nearest over the arm's
    pixels, a step costing 1 plus the colour difference of the two pixels over
    :data:`FILL_COLOUR_LEVELS` (a geodesic distance on the home frame: the same surface
    first; equal distances go to the left or upper source). Undecided regions no wider
    than 2 pixels anywhere (the arm cut's rim, a still pixel the moving link hid for the
    sweep's frames) and points no decided point reaches keep ``value``, the tracks' own
    answer (for a point without any valid track, "not carried"). A thin strip joined to a
    region of area is part of that region.

    Args:
        decided: bool ``[N]``, the points whose own tracks decide (row-major order of
            ``robot``).
        value: bool ``[N]``, the membership read from the tracks.
        robot: bool ``[H, W]``, the arm pixels.
        home: uint8 ``[H, W, 3]`` RGB, the home frame on the same grid, or None (every
            step costs 1).

    Returns:
        bool ``[N]``: ``value`` where decided or left as read, the nearest decided point's
        in the regions filled.
    """
    import cv2

    robot = np.asarray(robot, bool)
    if decided.all() or not decided.any():
        return value.copy()
    h, w = robot.shape
    ys, xs = np.nonzero(robot)
    undecided = np.zeros((h, w), np.uint8)
    undecided[ys[~decided], xs[~decided]] = 1
    inner = cv2.erode(undecided, np.ones((3, 3), np.uint8), borderValue=0).astype(bool)
    count, regions = cv2.connectedComponents(undecided, connectivity=4)
    areal = np.zeros(count, bool)
    areal[np.unique(regions[inner])] = True
    areal[0] = False  # the label of decided and non-arm pixels
    in_area = areal[regions[ys, xs]]
    if not in_area.any():  # only thin strips undecided: nothing to fill
        return value.copy()
    cost_r = np.full((h, w - 1), np.inf)  # between (y, x) and (y, x + 1)
    cost_d = np.full((h - 1, w), np.inf)  # between (y, x) and (y + 1, x)
    if home is not None:
        lab = cv2.cvtColor(np.ascontiguousarray(home, np.uint8),
                           cv2.COLOR_RGB2LAB).astype(np.float64)
        diff_r = np.linalg.norm(lab[:, 1:] - lab[:, :-1], axis=-1)
        diff_d = np.linalg.norm(lab[1:] - lab[:-1], axis=-1)
    else:
        diff_r, diff_d = np.zeros((h, w - 1)), np.zeros((h - 1, w))
    both_r = robot[:, 1:] & robot[:, :-1]
    both_d = robot[1:] & robot[:-1]
    cost_r[both_r] = 1.0 + diff_r[both_r] / FILL_COLOUR_LEVELS
    cost_d[both_d] = 1.0 + diff_d[both_d] / FILL_COLOUR_LEVELS
    dist = np.full((h, w), np.inf)
    label = np.zeros((h, w), bool)
    dist[ys[decided], xs[decided]] = 0.0
    label[ys, xs] = value
    # Bellman-Ford relaxation over the grid: each pass lets every pixel take a cheaper
    # path through one of its four neighbours; it ends when no distance falls
    for _ in range(h * w):
        changed = False
        for axis, cost in ((1, cost_r), (0, cost_d)):
            a = (slice(None), slice(None, -1)) if axis == 1 else (slice(None, -1), slice(None))
            b = (slice(None), slice(1, None)) if axis == 1 else (slice(1, None), slice(None))
            for src, dst in ((a, b), (b, a)):
                cand = dist[src] + cost
                better = cand < dist[dst] - 1e-12
                if better.any():
                    changed = True
                    dist[dst] = np.where(better, cand, dist[dst])
                    label[dst] = np.where(better, label[src], label[dst])
        if not changed:
            break
    fill = in_area & np.isfinite(dist[ys, xs])
    return np.where(fill, label[ys, xs], value)


def fit_chain(tracks: np.ndarray, valid: np.ndarray, joint_positions: np.ndarray,
              segments: list[tuple[int, int]], focal_px: float, centre_px: np.ndarray,
              robot: np.ndarray | None = None, moving_px: float = 0.5,
              restarts: int = 16, steps: int = 300, refine_steps: int = 600,
              smooth: float = 2.0, seed: int = 0,
              prismatic: np.ndarray | None = None,
              scale_free: np.ndarray | None = None, home: np.ndarray | None = None,
              log=None) -> ChainFit:
    """Fit depths, axes and pivots to a calibration sweep's tracks (module docstring).

    Args:
        tracks: float32 ``[T, H, W, 2]``, forward displacement of each home pixel at each
            frame, px (:func:`sweep_tracks`).
        valid: bool ``[T, H, W]``, which track samples to trust.
        joint_positions: float ``[T, K]``, each frame's joint readings (controller order
            and unit; frame 0 is the home pose).
        segments: ``[(start, stop)]`` per channel, the frames of its sweep (stop
            exclusive); channel c's sweep moves only channel c.
        focal_px, centre_px: the camera's pinhole, px.
        robot: bool ``[H, W]``, the home frame's robot pixels; None: every pixel that moves
            more than ``moving_px`` in some frame.
        moving_px: the displacement (px) above which a pixel counts as moved by a sweep.
        restarts: initial axis directions tried per channel.
        steps, refine_steps: Adam steps per restart and for the joint refinement.
        smooth: weight of the depth smoothness prior (squared log-depth difference of
            neighbouring robot pixels: a link's surface is smooth), against the mean
            Huber track residual (px).
        seed: of the initial directions.
        prismatic: bool ``[K]``, the channels that slide (a reading in m: a linear axis or a
            gripper) instead of turning; each gets a direction and a travel per unit (a
            point p moves to ``p + dq v``) in place of an axis line and a turn. None: none.
        scale_free: bool ``[K]``, the revolute channels whose turn per unit of reading is
            unknown (a controller reporting degrees, encoder counts or a normalised range):
            each gets a fitted ``rad_per_unit``, started from a sweep of
            :data:`NOMINAL_SWEEP_RAD` and tried at half and twice that, then refined with
            the rest. None or False: the readings are rad (``rad_per_unit`` 1).
        home: uint8 ``[H, W, 3]`` RGB, the home frame on the grid: a region of points
            whose tracks say nothing of whether a channel moves them (none valid at the
            sweep's far end; after the axes are fitted, none valid in the sweep's frames
            off home) takes the nearest decided points' answers along its own link's
            colour (:func:`_fill_undecided`). None: along the arm regardless of colour.
        log: called with a line of progress per channel and for the joint refinement, or
            None.

    Returns:
        :class:`ChainFit`.

    Raises:
        ValueError: shapes that do not match, a segment outside the episode, or a
            prismatic channel marked ``scale_free`` (its travel per unit is fitted anyway).
    """
    import torch

    from export.models.kinematics import rotate_about_axis

    say = log or (lambda _line: None)
    t_all, h, w, _ = tracks.shape
    q = np.asarray(joint_positions, np.float64)
    k = q.shape[1]
    if valid.shape != (t_all, h, w) or q.shape[0] != t_all or len(segments) != k:
        raise ValueError(f"fit_chain: tracks {tracks.shape}, valid {valid.shape}, joint "
                         f"positions {q.shape}, {len(segments)} segments: expected [T, H, W, "
                         "2], [T, H, W], [T, K] and K segments")
    for a, b in segments:
        if not 0 <= a < b <= t_all:
            raise ValueError(f"fit_chain: segment ({a}, {b}) outside the {t_all} frames")
    if home is not None and (np.shape(home) != (h, w, 3)
                             or np.asarray(home).dtype != np.uint8):
        raise ValueError(f"fit_chain: home {np.asarray(home).dtype} {list(np.shape(home))}: "
                         f"expected uint8 [{h}, {w}, 3], the home frame on the tracks' grid")
    slide = (np.zeros(k, bool) if prismatic is None
             else np.asarray(prismatic, bool).reshape(-1))
    if len(slide) != k:
        raise ValueError(f"fit_chain: prismatic has {len(slide)} entries, expected {k}")
    free = (np.zeros(k, bool) if scale_free is None
            else np.asarray(scale_free, bool).reshape(-1))
    if len(free) != k or (free & slide).any():
        raise ValueError(f"fit_chain: scale_free {free.tolist()}: expected {k} entries, none "
                         f"on a prismatic channel")
    ls0 = np.zeros(k)  # log rad per unit where the scale is fitted, from a nominal sweep
    for c, (a, b) in enumerate(segments):
        if free[c]:
            ls0[c] = np.log(NOMINAL_SWEEP_RAD / max(float(np.abs(q[a:b, c] - q[0, c]).max()),
                                                    1e-12))
    mag = np.linalg.norm(tracks, axis=-1) * valid  # (T, H, W)
    if robot is None:
        robot = mag.max(0) > moving_px
    ys, xs = np.nonzero(robot)
    n = len(ys)
    moves = np.zeros((k, n), bool)
    for c, (a, b) in enumerate(segments):  # moved at the sweep's far end
        far = np.abs(q[a:b, c] - q[0, c])
        peak = far >= 0.75 * far.max() if far.max() > 0 else np.zeros(b - a, bool)
        if n and peak.any():
            moves[c] = mag[a:b][peak][:, ys, xs].mean(0) > moving_px
            # a point tracked at none of the far end's frames shows nothing
            tracked = valid[a:b][peak][:, ys, xs].any(0)
            moves[c] = _fill_undecided(tracked, moves[c], robot, home)
            if moves[c].sum() < MIN_CARRIED_PX:
                # too few points tracked at the far end to read an axis from: a sweep that
                # carries a tightly framed arm out of view. A point tracked in none of the
                # far end's frames moved where the frames that saw it on the way out show
                # it moving (only here: where the far end reads enough points, reads stay
                # as they were)
                lost = ~tracked
                out_leg = mag[a:a + int(np.argmax(peak)) + 1][:, ys, xs]  # to the far end
                moves[c] |= lost & (out_leg.max(0) > moving_px)
    moved_px = moves.sum(1)  # (K,) arm pixels each sweep moved at its far end
    swept = np.array([np.abs(q[a:b, c] - q[0, c]).max() > 0
                      for c, (a, b) in enumerate(segments)])
    carried = _carried_from_tracks(moves)
    pairs = torch.from_numpy(_neighbour_pairs(robot))
    dt = torch.float64
    uv0 = torch.tensor(np.stack([xs + 0.5, ys + 0.5], -1), dtype=dt)  # (N, 2)
    cen = torch.tensor(np.asarray(centre_px, np.float64), dtype=dt)
    f = float(focal_px)
    ray = torch.cat([(uv0 - cen) / f, torch.ones(n, 1, dtype=dt)], 1)  # (N, 3)

    def project(p):
        return p[..., :2] / p[..., 2:3].clamp(min=1e-3) * f + cen

    obs, seen, ang = [], [], []
    for c, (a, b) in enumerate(segments):
        obs.append(torch.tensor(tracks[a:b][:, ys, xs], dtype=dt) + uv0)  # (L, N, 2)
        seen.append(torch.tensor(valid[a:b][:, ys, xs], dtype=dt))
        ang.append(torch.tensor(q[a:b, c] - q[0, c], dtype=dt))
    ok: list = []

    def set_carried(car):
        ok[:] = [seen[c] * torch.tensor(car[c], dtype=dt)[None] for c in range(k)]

    set_carried(carried)

    def moved(c, p, axis, pivot, ls=None):
        """Points ``p`` ``[N, 3]`` at channel c's sweep frames ``[L, N, 3]``: turned about
        the unit ``axis`` through ``pivot`` (by the reading times ``exp(ls)`` rad per unit
        where the scale is fitted), or (prismatic) slid by the reading times the vector
        ``axis``."""
        if slide[c]:
            return p[None] + ang[c][:, None, None] * axis[None, None, :]
        wv = axis / axis.norm()
        turn = ang[c] * ls.exp() if ls is not None and free[c] else ang[c]
        return rotate_about_axis(p[None].expand(len(ang[c]), -1, -1),
                                 wv[None].expand(len(ang[c]), -1),
                                 pivot[None].expand(len(ang[c]), -1), turn)

    def channel_loss(c, axis, pivot, logz, sel=None, ls=None):
        p = ray * logz.exp()[:, None]
        if sel is not None:
            p, o, m = p[sel], obs[c][:, sel], ok[c][:, sel]
        else:
            o, m = obs[c], ok[c]
        turned = moved(c, p, axis, pivot, ls)
        r = (project(turned) - o).norm(dim=-1)
        hub = torch.where(r < 1.0, 0.5 * r ** 2, r - 0.5)
        return (hub * m).sum() / m.sum().clamp(min=1.0)

    def smoothness(logz, keep=None):
        pr = pairs if keep is None else pairs[keep[pairs].all(1)]
        if not len(pr):
            return logz.sum() * 0.0
        return smooth * ((logz[pr[:, 0]] - logz[pr[:, 1]]) ** 2).mean()

    # channel by channel, proximal (most carried) first: a channel's points whose depth an
    # earlier channel fixed keep it, so every axis is read in one consistent depth (a
    # channel fitted alone can land in the depth-mirrored twin of its motion)
    rng = np.random.default_rng(seed)
    axes = np.zeros((k, 3))
    pivots = np.zeros((k, 3))
    log_scale = ls0.copy()
    known = np.zeros(n, bool)
    logz_known = np.zeros(n)
    order = [int(c) for c in np.argsort(-carried.sum(1), kind="stable")
             if carried[c].sum() >= MIN_CARRIED_PX]
    for done, c in enumerate(order):
        t_channel = time.perf_counter()
        sel_np = np.nonzero(carried[c])[0]
        sel = torch.from_numpy(sel_np)
        fixed = torch.from_numpy(known[sel_np])
        base = torch.tensor(logz_known[sel_np], dtype=dt)
        start_z = float(logz_known[known].mean()) if known.any() else 0.0
        best_loss = np.inf
        best: tuple[np.ndarray, np.ndarray, np.ndarray, float] = (
            np.zeros(3), np.zeros(3), np.zeros(len(sel_np)), float(ls0[c]))
        dirs = rng.normal(size=(restarts, 3))
        dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
        if slide[c]:  # a slide vector of the size that moves the points as far as seen
            a, b = segments[c]
            reach = max(float(np.abs(q[a:b, c] - q[0, c]).max()), 1e-9)
            seen_px = float(np.median(mag[a:b][:, ys[sel_np], xs[sel_np]].max(0)))
            dirs *= max(seen_px, moving_px) * np.exp(start_z) / (f * reach)
        keep = torch.zeros(n, dtype=torch.bool)
        keep[sel] = True
        for i, d in enumerate(dirs):
            axis = torch.tensor(d, dtype=dt, requires_grad=True)
            pivot = (ray[sel].mean(0) * np.exp(start_z)).clone().requires_grad_(True)
            depth_free = torch.full((len(sel),), start_z, dtype=dt, requires_grad=True)
            ls = torch.tensor(ls0[c] + SCALE_STARTS[i % len(SCALE_STARTS)] * free[c],
                              dtype=dt, requires_grad=bool(free[c]))
            opt = torch.optim.Adam([axis, pivot, depth_free] + ([ls] if free[c] else []),
                                   lr=0.03)
            for _ in range(steps):
                opt.zero_grad()
                lz = torch.where(fixed, base, depth_free)
                full = torch.zeros(n, dtype=dt).index_put((sel,), lz)
                loss = channel_loss(c, axis, pivot, full, sel, ls) + smoothness(full, keep)
                if not known.any():
                    loss = loss + 1e-2 * lz.mean() ** 2
                loss.backward()
                opt.step()
            if loss.item() < best_loss:
                best_loss = loss.item()
                best = (axis.detach().numpy().copy(), pivot.detach().numpy().copy(),
                        torch.where(fixed, base, depth_free).detach().numpy(), ls.item())
        a_, p_, lz_best, log_scale[c] = best
        axes[c] = a_ / np.linalg.norm(a_)
        pivots[c] = p_
        logz_known[sel_np] = lz_best
        known[sel_np] = True
        say(f"channel {c}: axis fitted to its sweep's tracks from {restarts} starts in "
            f"{time.perf_counter() - t_channel:.0f} s ({done + 1} of {len(order)} channels)")

    # joint refinement: one depth per point shared by every channel that turns it
    axis_t = torch.tensor(axes, dtype=dt, requires_grad=True)
    pivot_t = torch.tensor(pivots, dtype=dt, requires_grad=True)
    logz_t = torch.tensor(np.where(known, logz_known, logz_known[known].mean()
                                   if known.any() else 0.0), dtype=dt, requires_grad=True)
    ls_t = torch.tensor(log_scale, dtype=dt, requires_grad=bool(free.any()))
    active = [c for c in range(k) if carried[c].sum() >= MIN_CARRIED_PX]
    first_active = set(active)

    def refine(nsteps):
        opt = torch.optim.Adam([axis_t, pivot_t, logz_t] + ([ls_t] if free.any() else []),
                               lr=0.01)
        for _ in range(nsteps):
            opt.zero_grad()
            loss = sum(channel_loss(c, axis_t[c], pivot_t[c], logz_t, ls=ls_t[c])
                       for c in active) \
                / max(len(active), 1) + 1e-2 * logz_t.mean() ** 2 + smoothness(logz_t)
            loss.backward()
            opt.step()

    t_refine = time.perf_counter()
    refine(refine_steps)
    say(f"channels refined together in {time.perf_counter() - t_refine:.0f} s")
    # carried again: a point moves with a channel where the channel's turn explains its
    # track better than standing still does; then refined with those sets
    with torch.no_grad():
        moves = np.zeros((k, n), bool)
        p = ray * logz_t.exp()[:, None]
        for c in active:
            turned = moved(c, p, axis_t[c], pivot_t[c], ls_t[c])
            r_rot = (((project(turned) - obs[c]) ** 2).sum(-1) * seen[c]).sum(0)
            r_static = (((uv0[None] - obs[c]) ** 2).sum(-1) * seen[c]).sum(0)
            moves[c] = (r_rot < r_static).numpy()
            # a point tracked in none of the sweep's frames off home is decided by its
            # neighbours (one seen moving but little keeps its own answer: near the
            # axis, where it is decided by small differences, a neighbour's answer moved
            # the points of exact tracks wrongly at poses past the sweep)
            off_home = (ang[c].abs() > 0).to(dt)[:, None]
            telling = (seen[c] * off_home).sum(0) > 0
            moves[c] = _fill_undecided(telling.numpy(), moves[c], robot, home)
    carried = _carried_from_tracks(moves)
    set_carried(carried)
    active = [c for c in range(k) if carried[c].sum() >= MIN_CARRIED_PX]
    refine(refine_steps // 2)
    left_out = {}
    for c in range(k):
        if c in active:
            continue
        if not swept[c]:
            why = "its joint reading did not change in its sweep segment"
        elif c not in first_active:
            why = (f"its sweep moved {int(moved_px[c])} arm pixels of {n}, fewer than the "
                   f"{MIN_CARRIED_PX} an axis is read from")
        else:
            why = (f"its sweep moved {int(moved_px[c])} arm pixels, but its fitted turn "
                   f"explained the tracks of fewer than {MIN_CARRIED_PX} of them")
        left_out[c] = why
        say(f"channel {c}: not modelled: {why}")
    with torch.no_grad():
        logz = logz_t - logz_t.median()  # gauge: median depth 1
        scale = float(torch.exp(-logz_t.median()))
        norm = axis_t.norm(dim=1, keepdim=True)
        axes = torch.where(norm > 0, axis_t / norm.clamp(min=1e-12), 0.0).numpy()
        pivots = (pivot_t * scale).numpy()
        # a slide vector's length is its travel per unit, in the gauged depth unit
        travel = np.where(slide, norm[:, 0].numpy() * scale, 0.0)
        for c in range(k):
            if c not in active:  # a channel whose sweep moves nothing the home frame shows
                axes[c] = 0.0
                pivots[c] = 0.0
                travel[c] = 0.0
                carried[c] = False
            elif slide[c]:
                pivots[c] = 0.0
        res = np.zeros(k)
        for c in active:
            p = ray * logz.exp()[:, None]
            vec = torch.tensor(axes[c] * (travel[c] if slide[c] else 1.0))
            turned = moved(c, p, vec, torch.tensor(pivots[c]), ls_t[c])
            r2 = ((project(turned) - obs[c]) ** 2).sum(-1)
            res[c] = torch.sqrt((r2 * ok[c]).sum() / ok[c].sum().clamp(min=1.0)).item()
        rad_per_unit = np.where(slide, 0.0, np.where(free, np.exp(ls_t.detach().numpy()), 1.0))
    return ChainFit(robot, logz.exp().numpy(), axes, pivots, carried.astype(np.float64),
                    rad_per_unit, f, np.asarray(centre_px, np.float64), res,
                    travel_per_unit=travel, left_out=left_out)


def chain_positions(fit: ChainFit, offsets: np.ndarray, upsample: int = 1
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Where the home points land under joint offsets ``[S, K]`` from the home pose:
    ``(uv [S, M, 2] px, z [S, M])``, ``M = N * upsample**2``
    (:func:`edge.runtime.chain.chain_positions`, the runtime's own)."""
    from edge.runtime.chain import chain_positions as positions

    return positions(fit, offsets, upsample)


def as_calibration(fit: ChainFit, home: np.ndarray, home_joint_positions: np.ndarray,
                   background: tuple[np.ndarray, np.ndarray] | None = None,
                   dof_names: list[str] | None = None, info: dict | None = None):
    """The fit as the runtime's :class:`edge.runtime.chain.ChainCalibration`.

    Args:
        fit: :class:`ChainFit`.
        home: uint8 ``[H, W, 3]``, the calibration's home frame on the fit's grid.
        home_joint_positions: float ``[K]``, the home pose's joint readings.
        background: :func:`calibration_background`'s ``(background, seen)``, or None
            (nothing seen: a rollout keeps the start frame where the arm leaves).
        dof_names: the channels' names; None: ``dof0..``.
        info: provenance stored with it.

    Raises:
        edge.runtime.chain.ChainFileError: fields that do not fit together.
    """
    from edge.runtime.chain import ChainCalibration

    h, w = fit.robot.shape
    bg, seen = background if background is not None else (
        np.zeros((h, w, 3), np.float32), np.zeros((h, w), bool))
    k = len(fit.axes)
    chain = ChainCalibration(
        robot=fit.robot.astype(bool), depth=np.asarray(fit.depth, np.float64),
        axes=np.asarray(fit.axes, np.float64), pivots=np.asarray(fit.pivots, np.float64),
        carried=np.asarray(fit.carried, np.float64),
        rad_per_unit=np.asarray(fit.rad_per_unit, np.float64), focal_px=float(fit.focal_px),
        centre_px=np.asarray(fit.centre_px, np.float64),
        residual_px=np.asarray(fit.residual_px, np.float64),
        home_frame=np.ascontiguousarray(home, np.uint8),
        home_joint_positions=np.asarray(home_joint_positions, np.float64),
        background=np.asarray(bg, np.float32), background_seen=np.asarray(seen, bool),
        dof_names=list(dof_names) if dof_names else [f"dof{i}" for i in range(k)],
        info=dict(info or {}),
        travel_per_unit=np.asarray(fit.travel_per_unit, np.float64))
    chain.validate("chain fit")
    return chain


def calibration_background(fit: ChainFit, frames: np.ndarray, joint_positions: np.ndarray,
                           upsample: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """The static scene behind the arm, from the calibration frames: each pixel's mean
    over the frames where the fitted arm does not cover it (dilated by one pixel).

    Args:
        fit: :class:`ChainFit` of this episode.
        frames: uint8 ``[T, H, W, 3]`` on the fit's grid.
        joint_positions: float ``[T, K]``, frame 0 the home pose.
        upsample: each arm pixel as ``upsample**2`` samples.

    Returns:
        ``(background float32 [H, W, 3], seen bool [H, W])``: seen where some frame shows
        the pixel uncovered.
    """
    import cv2

    from edge.runtime.chain import arm_cover

    q = np.asarray(joint_positions, np.float64)
    cover = arm_cover(fit, q - q[0], upsample)
    kernel = np.ones((3, 3), np.uint8)
    free = np.stack([cv2.dilate(c.astype(np.uint8), kernel) == 0 for c in cover])
    acc = (frames.astype(np.float64) * free[..., None]).sum(0)
    cnt = free.sum(0)
    bg = acc / np.maximum(cnt, 1)[..., None]
    return bg.astype(np.float32), cnt > 0


def predict_frames(fit: ChainFit, start: np.ndarray, start_offset: np.ndarray,
                   actions: np.ndarray, home: np.ndarray | None = None,
                   background: tuple[np.ndarray, np.ndarray] | None = None,
                   upsample: int = 2, depth_scale: float = 0.01,
                   visible_tol: float = 0.02, edge_px: int = 2) -> np.ndarray:
    """A rollout of the fit (:func:`edge.runtime.chain.chain_rollout`, the runtime's own).

    Args:
        fit: :class:`ChainFit` of the cell's calibration episode.
        start: uint8 ``[H, W, 3]``.
        start_offset: float ``[K]``, the start's joint readings minus the calibration's
            home pose (controller order and unit).
        actions: float ``[S, K]`` or ``[N, S, K]``, joint-position deltas.
        home: uint8 ``[H, W, 3]``, the calibration's home frame (colours of what the start
            hides), or None (the start frame stands in).
        background: :func:`calibration_background`, or None (what the arm uncovers keeps
            the start frame's look).
        upsample, depth_scale, visible_tol, edge_px: as ``chain_rollout``.

    Returns:
        uint8 ``[S, H, W, 3]`` or ``[N, S, H, W, 3]``.
    """
    from edge.runtime.chain import chain_rollout

    k = len(fit.axes)
    chain = as_calibration(fit, start if home is None else home, np.zeros(k), background)
    return chain_rollout(chain, start, start_offset, actions, fill=background is not None,
                         upsample=upsample, depth_scale=depth_scale, visible_tol=visible_tol,
                         edge_px=edge_px)


class _PhotometricScene:
    """The home frame's robot samples and the recorded frames that
    :func:`refine_photometric` and :func:`choose_twins` render and compare.

    ``fit``'s robot pixels are sampled ``r x r`` times (``r`` the frames' multiple of its
    grid), each sample with the home frame's colour; ``render`` moves them by the chain to
    the frames' joint readings and splats them (softmax by depth). Raises ValueError for
    frames off the fit's grid or joint readings of another shape."""

    def __init__(self, fit: ChainFit, frames: np.ndarray, joint_positions: np.ndarray,
                 who: str):
        import torch

        t_all, fh, fw, _ = frames.shape
        _, _, r = _grid_ratio(frames, fit.robot.shape, who)
        q = np.asarray(joint_positions, np.float64)
        if q.shape != (t_all, len(fit.axes)):
            raise ValueError(f"{who}: joint positions {q.shape}, expected "
                             f"({t_all}, {len(fit.axes)})")
        dt = self.dt = torch.float64
        ys, xs = np.nonzero(fit.robot)
        self.n, self.r, self.t_all, self.size = len(ys), r, t_all, (fh, fw)
        oy, ox = np.meshgrid(np.arange(r), np.arange(r), indexing="ij")
        hy = (ys[:, None] * r + oy.reshape(1, -1)).reshape(-1)
        hx = (xs[:, None] * r + ox.reshape(1, -1)).reshape(-1)
        self.m = len(hy)
        self.parent = torch.from_numpy(np.repeat(np.arange(self.n), r * r))
        uv_model = torch.tensor(np.stack([(hx + 0.5) / r, (hy + 0.5) / r], -1), dtype=dt)
        self.cen = torch.tensor(fit.centre_px, dtype=dt)
        self.f = float(fit.focal_px)
        self.ray = torch.cat([(uv_model - self.cen) / self.f,
                              torch.ones(len(hy), 1, dtype=dt)], 1)
        self.obs = torch.tensor(frames, dtype=torch.float32).permute(0, 3, 1, 2) / 255.0
        self.colour = self.obs[0, :, hy, hx].T.to(dt)  # (M, 3)
        self.car = torch.tensor(fit.carried, dtype=dt)[:, self.parent]  # (K, M)
        self.ang = torch.tensor((q - q[0]) * fit.rad_per_unit[None], dtype=dt)
        self.off = torch.tensor(q - q[0], dtype=dt)
        self.slide = torch.tensor(np.asarray(fit.travel_per_unit) > 0)
        self.active = torch.tensor(fit.carried.sum(1) >= 3)
        self.pairs = torch.from_numpy(_neighbour_pairs(fit.robot))

    def render(self, sel, logz, axes, pivots, opacity, travel, scale):
        """``(values [S, 3, h, w], density [S, 1, h, w] <= 1)`` at the frames ``sel``, for
        per-pixel log depths ``logz [N]``, axes and pivots ``[K, 3]``, opacity logits
        ``[M]``, slides ``[K]`` and turn scales ``[K]`` (tensors, float64)."""
        import torch

        from export.models.kinematics import compose_chain, splat_values

        s = len(sel)
        pts = self.ray * logz.exp()[self.parent][:, None]
        norm = axes.norm(dim=1, keepdim=True).clamp(min=1e-9)
        ax = torch.where(self.active[:, None], axes / norm, torch.zeros_like(axes))
        moved = compose_chain(pts[None].expand(s, -1, -1), ax[None].expand(s, -1, -1),
                              pivots[None].expand(s, -1, -1), self.ang[sel] * scale[None],
                              self.car[None].expand(s, -1, -1),
                              travel=self.off[sel] * torch.where(self.slide, travel, 0.0)[None])
        z = moved[..., 2].clamp(min=1e-3)
        uv = (moved[..., :2] / z[..., None] * self.f + self.cen) * self.r
        val, dens = splat_values(uv, self.colour[None].expand(s, -1, -1), self.size,
                                 weight=torch.sigmoid(opacity)[None].expand(s, -1),
                                 depth=z, depth_scale=0.01)
        return val, dens.clamp(max=1.0)

    def background(self, render):
        """float64 ``[3, h, w]``: each pixel's mean over the frames where ``render`` (a
        function of frame indices, as :meth:`render`) leaves it uncovered; the first
        frame's colour where none does."""
        import torch

        return self.background_of(torch.cat([
            render(torch.arange(i, min(i + 8, self.t_all)))[1]
            for i in range(0, self.t_all, 8)]))

    def background_of(self, cover):
        """:meth:`background` from the arm's density in every frame, ``cover [T, 1, h,
        w]``."""
        import torch
        import torch.nn.functional as F

        r = self.r
        free = F.max_pool2d(cover, 2 * r + 1, 1, r) < 0.05  # (T, 1, h, w)
        cnt = free.sum(0)
        bg = (self.obs.double() * free).sum(0) / cnt.clamp(min=1)
        return torch.where(cnt > 0, bg, self.obs[0].double())

    @staticmethod
    def blur(img, sigma):
        """``img [B, C, h, w]`` blurred by a separable Gaussian of ``sigma`` px."""
        import torch
        import torch.nn.functional as F

        rad = max(1, int(3 * sigma))
        x = torch.arange(-rad, rad + 1, dtype=img.dtype)
        k1 = torch.exp(-0.5 * (x / sigma) ** 2)
        k1 = k1 / k1.sum()
        c = img.shape[1]
        img = F.conv2d(F.pad(img, (rad, rad, 0, 0), mode="replicate"),
                       k1.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)
        return F.conv2d(F.pad(img, (0, 0, rad, rad), mode="replicate"),
                        k1.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)


#: :func:`choose_twins` takes a twin only when it lowers the photometric loss by more than
#: this share of the loss (a twin equal up to noise keeps the read's choice).
TWIN_MIN_GAIN = 0.05
#: The blur (px at the photometric size) at which :func:`choose_twins` compares twins: the
#: coarsest level of the refinement that follows, where an unrefined twin is not punished
#: for misplacing an edge by a pixel or two.
TWIN_BLUR_PX = 4.0
#: The finer blurs (px at the photometric size) at which a twin that wins at
#: :data:`TWIN_BLUR_PX` must save :data:`TWIN_MIN_GAIN` too before :func:`choose_twins`
#: keeps it. A twin that is truly the right reading wins at every scale (on 5 held-out
#: robot reads: 7-20% at 4, 2 and 1 px); one that only looks better through the blur does
#: not (a synthetic two-link arm's wrong elbow twin: 8.2% at 4 px, 2.9% at 2 px, 0.9% at 1).
TWIN_CONFIRM_BLUR_PX = (2.0, 1.0)
#: Adam steps (at :data:`TWIN_BLUR_PX`) each twin and the current fit are refined for
#: before :func:`choose_twins` compares them with ``refine_steps`` on. A twin reflected
#: through a plane is exact only under a distant camera; under perspective it misplaces
#: what it carries until its depths and pivot settle, so compared as drawn the right twin
#: often loses: the twin a greedy round takes after 60 steps (the largest saving refined)
#: put the channel's axis nearer the truth by more than 30 deg on 5 of 7 held-out robot
#: reads with a motion episode and further off on none, while as drawn none was kept.
TWIN_REFINE_STEPS = 60
#: With ``refine_steps``, a twin is refined only when, as drawn, it costs less than this
#: share of the current loss (on 7 held-out robot reads: 27 of 30 right twins within it,
#: 17 of 48 wrong ones).
TWIN_SCREEN_LOSS = 0.05
#: With ``refine_steps``, the share of the refined current fit's loss a refined twin must
#: save at :data:`TWIN_BLUR_PX` (and save some at every finer confirmation blur).
TWIN_REFINED_MIN_GAIN = 0.01


def _mirrored(fit: ChainFit, chans, c0: np.ndarray, mirror: np.ndarray,
              depth: np.ndarray) -> ChainFit:
    """``fit`` with the channels ``chans`` reflected by ``mirror`` (3x3) through the plane
    through ``c0``, and ``depth`` as its depths (:func:`twin_candidates`)."""
    slide = np.asarray(fit.travel_per_unit) > 0
    axes, pivots = fit.axes.copy(), fit.pivots.copy()
    for d in chans:
        axes[d] = mirror @ fit.axes[d] if slide[d] else -(mirror @ fit.axes[d])
        if not slide[d]:
            pivots[d] = c0 + mirror @ (fit.pivots[d] - c0)
    return ChainFit(fit.robot, depth, axes, pivots, fit.carried.copy(),
                    fit.rad_per_unit.copy(), fit.focal_px, fit.centre_px.copy(),
                    fit.residual_px.copy(),
                    travel_per_unit=np.asarray(fit.travel_per_unit).copy())


def twin_candidates(fit: ChainFit) -> list[tuple[str, int, ChainFit]]:
    """The depth-mirrored twins of each channel of a fit, for :func:`choose_twins`.

    Under a camera far from the arm (orthographic projection along the view direction n),
    turning points that lie in a plane normal to n about an axis w through a pivot looks
    the same as turning them about ``-M w`` through the mirrored pivot, where ``M = I - 2 n
    n^T`` reflects through that plane (conjugating a rotation by a reflection; the
    "depth-reversal" ambiguity of motion under orthographic projection, Ullman 1979, "The
    Interpretation of Visual Motion"). A channel swept alone from the home pose therefore
    fits either way about equally; the composition with the other channels does not. Two
    twins per channel c, reflected through the plane through the centroid of the points c
    carries, normal to its viewing ray:

    - ``"alone"``: channel c's axis and pivot mirrored, everything else kept (exact for
      c's own sweep when its points lie in the plane);
    - ``"distal"``: c and every channel whose points c carries (the links beyond it)
      mirrored together, with the depths of c's points mirrored along their rays (the
      same motion for every sweep of those channels and for any pose of them together;
      only the composition with the channels proximal to c changes).

    A prismatic channel's slide direction mirrors as ``M v``.

    Args:
        fit: :class:`ChainFit`.

    Returns:
        ``[(kind, channel, fit)]``: an ``"alone"`` and a ``"distal"`` twin for every
        channel that carries at least 3 points, in channel order.
    """
    pts = fit.points()
    ray = pts / pts[:, 2:3]
    carried = np.asarray(fit.carried) > 0
    active = carried.sum(1) >= 3
    out: list[tuple[str, int, ChainFit]] = []
    for c in np.nonzero(active)[0]:
        c0 = pts[carried[c]].mean(0)
        nrm = c0 / np.linalg.norm(c0)
        mirror = np.eye(3) - 2.0 * np.outer(nrm, nrm)

        out.append(("alone", int(c), _mirrored(fit, [c], c0, mirror, fit.depth.copy())))
        group = [d for d in np.nonzero(active)[0]
                 if not (carried[d] & ~carried[c]).any()]
        depth = fit.depth.copy()
        sel = carried[c]
        mirrored = 2.0 * float(c0 @ nrm) / (ray[sel] @ nrm) - fit.depth[sel]
        depth[sel] = np.maximum(mirrored, 0.05 * float(np.median(fit.depth)))
        out.append(("distal", int(c), _mirrored(fit, group, c0, mirror, depth)))
    return out


def photometric_losses(scene: _PhotometricScene, fit: ChainFit, blur_px: float,
                       target=None):
    """float64 ``[T]``: each frame's robust photometric loss (as :func:`refine_photometric`
    minimises it, without the priors) of ``fit`` drawn over its own background, both
    images blurred by ``blur_px``; ``target`` the blurred frames if already computed."""
    import torch

    dt = scene.dt
    logz = torch.tensor(np.log(fit.depth), dtype=dt)
    axes = torch.tensor(fit.axes, dtype=dt)
    pivots = torch.tensor(fit.pivots, dtype=dt)
    opacity = torch.full((scene.m,), 3.0, dtype=dt)
    travel = torch.tensor(fit.travel_per_unit, dtype=dt)
    scale = torch.ones(len(fit.axes), dtype=dt)
    with torch.no_grad():  # every frame drawn once: its density gives the background too
        drawn = [scene.render(torch.arange(i, min(i + 8, scene.t_all)), logz, axes, pivots,
                              opacity, travel, scale) for i in range(0, scene.t_all, 8)]
        val = torch.cat([v for v, _ in drawn])
        dens = torch.cat([d for _, d in drawn])
        bg = scene.background_of(dens)
        if target is None:
            target = scene.blur(scene.obs.double(), blur_px)
        diff = scene.blur(val * dens + bg[None] * (1 - dens), blur_px) - target
        return (torch.sqrt(diff ** 2 + 1e-6).mean((1, 2, 3)) * 100.0).numpy()


def choose_twins(fit: ChainFit, frames: np.ndarray, joint_positions: np.ndarray,
                 blur_px: float = TWIN_BLUR_PX, min_gain: float = TWIN_MIN_GAIN,
                 log=None, confirm_blur_px: tuple[float, ...] = TWIN_CONFIRM_BLUR_PX,
                 refine_steps: int = 0) -> tuple[ChainFit, dict]:
    """Swap channels for their depth-mirrored twins where the frames say so.

    A calibration sweeps one channel at a time, so a read can land on a channel's twin
    (:func:`twin_candidates`) and compose the chain wrongly when several channels turn
    together: on 8 held-out-robot cells read from sweeps of 0.2-0.8 rad, 11 of 25 channels
    swept 0.5 rad or more were read more than 90 deg off their true axis. Gradient steps
    cannot cross from one twin to the other; a frame with several channels away from home
    (the rollout's start frame, a motion episode) tells them apart. Greedily, each round
    scores every twin of the current fit over ``frames`` by the mean photometric loss
    (:func:`photometric_losses`) at ``blur_px`` and keeps the lowest among those that beat
    the current fit by enough there and at every blur of ``confirm_blur_px``; it stops
    when none does (at most once per channel).

    Compared as drawn (``refine_steps`` 0), a twin must save ``min_gain`` at every blur.
    The confirmation at finer blurs is what lets a motion episode choose by default: a
    synthetic two-link arm whose axes are ~9 deg off had its right elbow swapped for its
    twin (8.2% lower loss at 4 px, but 2.9% at 2 px and 0.9% at 1 px) and the refined chain
    landed further from the truth; the twins kept on held-out robot reads saved 7-20% at
    all three. Measured on the futures of held-out cells (README, "Choosing between
    twins"): anchored at the futures' start (``anchor_chain_to_start(twins=True)``) it kept
    a twin on 6 of 32 held-out robot reads of the planner's sweep, and those lost 0.13
    retrieval@8 (paired, 95% 0.06 to 0.19) against the same anchoring without it; one frame
    with several channels away from home is too little to choose by, so anchoring does not
    choose by default. Before the refinement with a motion episode of 32 frames it kept a
    twin on 5 of 32 held-out robot reads and made all 5 better (retrieval@8 +0.38, 95% 0.20
    to 0.63); it kept none on 16 held-out convention reads.

    The reflection is exact only under a distant camera: under perspective a twin as drawn
    misplaces what it carries until its depths and pivot settle, so the right twin often
    loses as drawn. With ``refine_steps`` > 0 each round first drops the twins that as
    drawn cost more than :data:`TWIN_SCREEN_LOSS` of the current loss, then refines the
    current fit and each remaining twin for ``refine_steps`` Adam steps at ``blur_px``
    (:func:`refine_photometric`, the same frame draws for all) and compares them refined: a
    twin is kept when it saves :data:`TWIN_REFINED_MIN_GAIN` of the refined current fit's
    loss at ``blur_px`` and some at every finer blur, and the refined twin becomes the
    current fit. Each refinement takes ``refine_steps`` steps' time (60 steps: about 8 s
    on 2 idle cores at 128 px with about 90 frames); a motion refinement of a held-out
    robot read took 107-301 s with it, 49-70 s without.

    Args:
        fit: :class:`ChainFit`.
        frames: uint8 ``[T, h, w, 3]``, home frame first, at a whole multiple of the fit's
            grid (as :func:`refine_photometric`).
        joint_positions: float ``[T, K]``.
        blur_px: the blur (px of ``frames``) at which losses are compared.
        min_gain: the share of the loss a twin compared as drawn must save.
        log: called with a line per kept twin, or None.
        confirm_blur_px: the finer blurs at which a twin must save loss too.
        refine_steps: Adam steps each twin is refined for before the comparison; 0:
            compared as drawn.

    Returns:
        ``(fit, record)``: the chosen fit (the input where no twin wins) and
        ``{"kept": [{"kind", "channel", "loss"}], "loss_before", "loss_after",
        "candidates_scored", "refused_finer": [{"kind", "channel", "gain"}]}``, losses at
        ``blur_px``; ``refused_finer`` lists the twins that won at ``blur_px`` but not at a
        finer blur (``gain``: the share saved at each blur, ``blur_px`` first). With
        ``refine_steps`` also ``"refine_steps"``, ``"candidates_refined"`` and
        ``"refined": [{"kind", "channel", "gain"}]`` (every refined twin's gains per round);
        there ``loss``, ``loss_before`` and ``loss_after`` are of the refined fits.

    Raises:
        ValueError: as :func:`refine_photometric`.
    """
    scene = _PhotometricScene(fit, frames, joint_positions, "choose_twins")
    blurs = (blur_px, *confirm_blur_px)
    targets = {b: scene.blur(scene.obs.double(), b) for b in blurs}

    def loss_of(f: ChainFit, b: float) -> float:
        return float(photometric_losses(scene, f, b, targets[b]).mean())

    def settled(f: ChainFit) -> ChainFit:
        if not refine_steps:
            return f
        return refine_photometric(f, frames, joint_positions, steps=(refine_steps,),
                                  blur_px=(blur_px,))[0]

    need = TWIN_REFINED_MIN_GAIN if refine_steps else min_gain
    finer_need = 0.0 if refine_steps else min_gain
    record: dict = {"kept": [], "candidates_scored": 0, "refused_finer": []}
    if refine_steps:
        record.update(refine_steps=int(refine_steps), candidates_refined=0, refined=[])
    used: set[int] = set()
    while True:
        now = settled(fit)
        current = {blur_px: loss_of(now, blur_px)}  # the finer blurs only once a twin wins
        drawn = loss_of(fit, blur_px) if refine_steps else current[blur_px]
        record.setdefault("loss_before", round(current[blur_px], 5))
        winners = []
        for kind, c, cand in twin_candidates(fit):
            if c in used:
                continue
            record["candidates_scored"] += 1
            if refine_steps:
                if loss_of(cand, blur_px) > drawn * (1.0 + TWIN_SCREEN_LOSS):
                    continue
                cand = settled(cand)
                record["candidates_refined"] += 1
            loss = loss_of(cand, blur_px)
            if refine_steps:
                record["refined"].append({"kind": kind, "channel": int(c), "round": len(used),
                                          "gain": round(1.0 - loss / current[blur_px], 4)})
            if loss < current[blur_px] * (1.0 - need):
                winners.append((loss, kind, c, cand))
        found = None
        if winners:
            current.update((b, loss_of(now, b)) for b in confirm_blur_px)
        for loss, kind, c, cand in sorted(winners, key=lambda w: w[0]):
            gains = [1.0 - loss / current[blur_px]] + [1.0 - loss_of(cand, b) / current[b]
                                                       for b in confirm_blur_px]
            if all(g > finer_need for g in gains[1:]):
                found = (loss, kind, c, cand)
                break
            record["refused_finer"].append({"kind": kind, "channel": int(c),
                                            "gain": [round(g, 4) for g in gains]})
            if log is not None:
                log(f"twin of channel {c} ({kind}) not kept: saves "
                    + ", ".join(f"{100 * g:.1f}%" for g in gains)
                    + f" at {', '.join(f'{b:g}' for b in blurs)} px")
        if found is None:
            record["loss_after"] = round(current[blur_px], 5)
            break
        loss, kind, c, fit = found
        used.add(c)
        record["kept"].append({"kind": kind, "channel": int(c), "loss": round(loss, 5)})
        if log is not None:
            log(f"twin of channel {c} ({kind}) kept: loss {loss:.4f}")
    return fit, record


#: :func:`refine_photometric` says how far a level has come at most this often (s), so a
#: refinement slowed by other work still shows it is alive.
PROGRESS_EVERY_S = 15.0


def refine_photometric(fit: ChainFit, frames: np.ndarray, joint_positions: np.ndarray,
                       steps: tuple[int, ...] = (150, 150, 150),
                       blur_px: tuple[float, ...] = (4.0, 2.0, 1.0), lr: float = 0.003,
                       smooth: float = 2.0, frames_per_step: int = 16,
                       seed: int = 0, log=None, scale_free: np.ndarray | None = None
                       ) -> tuple[ChainFit, np.ndarray]:
    """Refine a fit against the calibration frames themselves (analysis by synthesis).

    The home frame's robot pixels, at the calibration's own resolution (one sample per
    calibration pixel inside each of the fit's robot pixels, each with its colour and an
    opacity), are moved by the chain to every calibration frame's joint readings,
    splatted (softmax by depth) over the static background, and compared with the
    recorded frame; depths, axes, pivots and the opacities follow the photometric error,
    coarse to fine (both images blurred by ``blur_px`` in turn). Tracks measured by
    optical flow err most where a link has no texture; the frames do not, and the
    silhouette of every link in every frame constrains the chain.

    Args:
        fit: :class:`ChainFit` to start from (e.g. :func:`fit_chain` on
            :func:`sweep_tracks`); its robot pixels and carried sets are kept.
        frames: uint8 ``[T, h, w, 3]``, the calibration episode (home frame first), at a
            whole multiple ``r`` of the fit's grid.
        joint_positions: float ``[T, K]``.
        steps: Adam steps at each blur level.
        blur_px: the Gaussian blur (calibration px) of each level.
        lr: Adam's step size.
        smooth: weight of the depth smoothness prior (as :func:`fit_chain`).
        frames_per_step: calibration frames drawn for each step.
        seed: of the frame draws.
        log: called with a line of progress per level, or None.
        scale_free: bool ``[K]``, revolute channels whose ``rad_per_unit`` is refined too
            (:func:`fit_chain`'s ``scale_free``); None: kept as the fit has it.

    Returns:
        ``(fit, opacity)``: a new :class:`ChainFit` (``residual_px`` from the input fit);
        float64 ``[N]``, each robot pixel's mean opacity (low: the frames say the pixel is
        not on the arm).

    Raises:
        ValueError: frames that are not a whole multiple of the fit's grid, or a joint
            array of another length.
    """
    import torch

    scene = _PhotometricScene(fit, frames, joint_positions, "refine_photometric")
    t_all, n, dt, obs = scene.t_all, scene.n, scene.dt, scene.obs
    slide, active, pairs = scene.slide, scene.active, scene.pairs
    logz = torch.tensor(np.log(fit.depth), dtype=dt, requires_grad=True)
    axes = torch.tensor(fit.axes, dtype=dt, requires_grad=True)
    pivots = torch.tensor(fit.pivots, dtype=dt, requires_grad=True)
    opacity = torch.full((scene.m,), 3.0, dtype=dt, requires_grad=True)
    travel = torch.tensor(fit.travel_per_unit, dtype=dt, requires_grad=True)
    scaled = torch.tensor(np.zeros(len(fit.axes), bool) if scale_free is None
                          else np.asarray(scale_free, bool).reshape(-1) & ~slide.numpy())
    log_scale = torch.zeros(len(fit.axes), dtype=dt, requires_grad=bool(scaled.any()))

    def render(sel):
        return scene.render(sel, logz, axes, pivots, opacity, travel,
                            torch.where(scaled, log_scale.exp(), 1.0))

    with torch.no_grad():  # the static scene: each pixel where the arm leaves it
        bg = scene.background(render)
    blur = scene.blur
    parent = scene.parent
    r = scene.r

    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam([{"params": [logz, axes, pivots], "lr": lr},
                            {"params": [travel], "lr": lr * float(travel.detach().abs().max().clamp(
                                min=1e-3))},
                            {"params": [opacity], "lr": 0.05},
                            {"params": [log_scale], "lr": 0.01}])
    params = [logz, axes, pivots, travel, opacity, log_scale]
    saved = [p.detach().clone() for p in params]
    diverged = False
    said = time.perf_counter()
    for level, (nsteps, sigma) in enumerate(zip(steps, blur_px, strict=True)):
        total, done = 0.0, 0
        target = blur(obs.double(), sigma)  # every frame once per level
        for i in range(nsteps):
            if log is not None and time.perf_counter() - said > PROGRESS_EVERY_S:
                said = time.perf_counter()  # a loaded machine: say it is alive
                log(f"photometric level {level} (blur {sigma} px): step {i} of {nsteps}")
            sel = torch.from_numpy(np.sort(rng.choice(np.arange(1, t_all), min(
                frames_per_step, t_all - 1), replace=False)))
            opt.zero_grad()
            val, dens = render(sel)
            img = val * dens + bg[None] * (1 - dens)
            diff = blur(img, sigma) - target[sel]
            loss = torch.sqrt(diff ** 2 + 1e-6).mean() * 100.0
            if len(pairs):
                loss = loss + smooth * ((logz[pairs[:, 0]] - logz[pairs[:, 1]]) ** 2).mean()
            loss = loss + 1e-2 * logz.mean() ** 2
            loss.backward()
            if not torch.isfinite(loss) or not all(bool(torch.isfinite(p.grad).all())
                                                   for p in params if p.grad is not None):
                diverged = True  # keep the last parameters that rendered finitely
                break
            saved = [p.detach().clone() for p in params]
            opt.step()
            total += loss.item()
            done += 1
        if log is not None:
            log(f"photometric level {level} (blur {sigma} px): mean loss "
                f"{total / max(done, 1):.4f}" + (" (not finite: stopped)" if diverged else ""))
        if diverged:
            with torch.no_grad():
                for p, v in zip(params, saved, strict=True):
                    p.copy_(v)
            break
    with torch.no_grad():
        med = logz.median()
        scale = float(torch.exp(-med))
        norm = axes.norm(dim=1, keepdim=True)
        ax = torch.where((norm > 0) & active[:, None], axes / norm.clamp(min=1e-12), 0.0)
        piv = torch.where(active[:, None] & ~slide[:, None], pivots * scale, 0.0)
        # a slide refined past zero keeps its length and turns its direction round
        trav = torch.where(slide & active, travel * scale, 0.0)
        ax = torch.where((trav < 0)[:, None], -ax, ax)
        depth = (logz - med).exp()
        alpha = torch.zeros(n, dtype=dt).index_add(0, parent, torch.sigmoid(opacity)) / (r * r)
        rad_per_unit = fit.rad_per_unit * torch.where(scaled, log_scale.exp(), 1.0).numpy()
    return ChainFit(fit.robot, depth.numpy(), ax.numpy(), piv.numpy(), fit.carried.copy(),
                    rad_per_unit, fit.focal_px, fit.centre_px.copy(),
                    fit.residual_px.copy(), travel_per_unit=trav.abs().numpy()), alpha.numpy()


def read_chain(frames: np.ndarray, joint_positions: np.ndarray,
               segments: list[tuple[int, int]], focal_px: float, centre_px: np.ndarray,
               size: tuple[int, int], photometric_size: int | None = 128,
               fit_options: dict | None = None, refine_options: dict | None = None,
               log=None, prismatic: np.ndarray | None = None,
               scale_free: np.ndarray | None = None, colour_tracks: bool = True) -> ChainFit:
    """A cell's chain read from its calibration episode alone, as a device would: the arm
    cut from the home frame (:func:`sweep_robot_mask`), its pixels tracked through the
    sweep (:func:`sweep_tracks`, on grey and colour-opponent flows), the chain fitted to
    the tracks (:func:`fit_chain`) and refined against the frames
    (:func:`refine_photometric`).

    Args:
        frames: uint8 ``[T, h, w, 3]``, the calibration episode (home frame first), at a
            whole multiple of the model's ``size``.
        joint_positions: float ``[T, K]``, each frame's joint readings.
        segments: ``[(start, stop)]`` per channel (stop exclusive).
        focal_px, centre_px: the camera's pinhole on the model's grid, px.
        size: the model's ``(H, W)``.
        photometric_size: the side (px) the frames are resized to for the photometric
            refinement, a whole multiple of the model's; None: no refinement.
        fit_options, refine_options: keyword arguments of :func:`fit_chain` and
            :func:`refine_photometric` (steps, restarts, ...), or None (their defaults).
        log: called with a line per stage, or None.
        prismatic: bool ``[K]``, the channels that slide (:func:`fit_chain`); None: none.
        scale_free: bool ``[K]``, revolute channels whose turn per unit of reading is
            fitted and refined (:func:`fit_chain`); None: the readings are rad.
        colour_tracks: :func:`sweep_tracks` ``colour`` (default True).

    Returns:
        :class:`ChainFit` on the model's grid.

    Raises:
        ValueError: as the stages raise (sizes, shapes, segments).
    """
    import cv2

    say = log or (lambda _line: None)
    robot = sweep_robot_mask(frames, size=size)
    say(f"arm: {int(robot.sum())} of {size[0] * size[1]} model pixels")
    t_track = time.perf_counter()
    tracks, valid = sweep_tracks(frames, size=size, colour=colour_tracks)
    say(f"arm tracked through the {len(frames)} frames in {time.perf_counter() - t_track:.0f} s")
    fit = fit_chain(tracks, valid, joint_positions, segments, focal_px, centre_px,
                    robot=robot, prismatic=prismatic, scale_free=scale_free,
                    home=on_grid(frames[:1], size)[0], log=log, **(fit_options or {}))
    say(f"fit to the tracks: residual {np.round(fit.residual_px, 2).tolist()} px")
    if scale_free is not None and np.any(scale_free):
        say(f"turn per unit of reading (rad): {np.round(fit.rad_per_unit, 5).tolist()}")
    if photometric_size:
        small = np.stack([cv2.resize(f, (photometric_size, photometric_size),
                                     interpolation=cv2.INTER_AREA) for f in frames])
        left_out = fit.left_out
        fit, _ = refine_photometric(fit, small, joint_positions, log=log,
                                    scale_free=scale_free, **(refine_options or {}))
        fit = replace(fit, left_out=left_out)
    return fit


def camera_pinhole(episode, size: tuple[int, int], fovy_deg: float | None = None
                   ) -> tuple[float, np.ndarray, str]:
    """The camera's pinhole on the model's grid, from ``fovy_deg`` or the episode's
    ``metadata.camera`` (``fovy_deg``: vertical field of view, degrees; the principal
    point at the image centre).

    Returns:
        ``(focal_px, centre_px [2], where)``; ``where`` says which source gave it.

    Raises:
        ValueError: no field of view given or recorded, or one outside (1, 179) degrees.
    """
    h, w = size
    where = "--fovy-deg"
    if fovy_deg is None:
        cam = dict(episode.metadata.camera or {})
        if "fovy_deg" not in cam:
            raise ValueError("the calibration's metadata.camera has no 'fovy_deg' (the "
                             "camera's vertical field of view, degrees): pass --fovy-deg")
        fovy_deg, where = cam["fovy_deg"], "metadata.camera.fovy_deg"
    try:
        fovy = float(fovy_deg)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: expected a number of degrees, found {fovy_deg!r}") from None
    if not 1.0 < fovy < 179.0:
        raise ValueError(f"{where}: expected a vertical field of view in (1, 179) degrees, "
                         f"found {fovy}")
    focal = 0.5 * h / np.tan(np.radians(fovy) / 2.0)
    return float(focal), np.array([w / 2.0, h / 2.0]), where


#: Each channel's sweep in a calibration episode (:func:`edge.runtime.chain.sweep_segments`).
calibration_sweeps = sweep_segments


def on_grid(frames: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """uint8 frames ``[T, h, w, 3]`` reduced to the model's grid ``size`` by area averaging
    (returned as they are when already on it)."""
    import cv2

    h, w = size
    if frames.shape[1:3] == (h, w):
        return frames
    return np.stack([cv2.resize(f, (w, h), interpolation=cv2.INTER_AREA) for f in frames])


def sweep_timing(episode):
    """A calibration episode in the timing the chain is read in: each channel's sweep as
    the 8 frames at the planner's poses (home, 0.25 A, 0.75 A, A, A, 0.75 A, 0.25 A, home;
    :func:`edge.calibrate.ingest.ingest_calibration`, at the recorded resolution and frame
    rate). An episode already in it is returned as it is.

    A sweep recorded slower, at another camera rate, in another order, with other signs
    or pauses shows the same poses in more frames: reading all of them costs time in
    proportion (a 30 Hz sweep of 2 s per phase is about 17 times the planner's frames) for
    no other pose, so the chain is read from the same frames at any timing.

    Returns:
        ``(episode, report)``: the report of ingest (``normalised``, ``recorded_frames``,
        ``recorded_frame_rate_hz``, per sweep its frames and amplitude).

    Raises:
        ValueError: the sweeps cannot be found in the joint readings (ingest's refusal,
            naming the channel and the frames: never swept, two channels at once, no
            return, a pose no frame shows).
    """
    from edge.calibrate.ingest import IngestError, at_sweep_poses

    try:
        return at_sweep_poses(episode)
    except IngestError as exc:
        raise ValueError(f"the calibration's sweeps: {exc}") from None


#: Adam steps per blur level of the refinement against motion episodes, and the levels'
#: Gaussian blur (px at the photometric size).
MOTION_REFINE_STEPS = (100, 100, 100)
MOTION_REFINE_BLUR_PX = (4.0, 2.0, 1.0)
#: Most frames taken from one motion episode (evenly spaced over it): each frame is one
#: more pose the chain must explain, and the refinement keeps every frame in memory at
#: the photometric size (a 30 Hz policy run of minutes adds no composition a few dozen of
#: its poses do not show).
MOTION_MAX_FRAMES = 64
#: Largest change of every joint reading from the frame before (rad; m: a tenth of it) for
#: a frame to count as held (:func:`motion_frames_to_use`).
MOTION_HOLD_TOLERANCE = 1e-3
#: Fewest held poses for :func:`motion_frames_to_use` to read only the held frames.
MOTION_MIN_HELD_POSES = 8


def motion_frames_to_use(q: np.ndarray, units) -> tuple[np.ndarray, bool]:
    """Which frames of a motion episode :func:`refine_chain_with_motion` reads.

    Where the joints were held at some poses (``edge.calibrate.plan.plan_poses``: the
    controller eases to each pose and holds it), the middle frame of each hold: there the
    picture is settled whatever the camera's exposure, and a camera early or late against
    the joint readings by up to half the hold still shows the pose read. A hold is a
    frame and the run of frames after it whose every reading is within
    :data:`MOTION_HOLD_TOLERANCE` of the frame before (on a recorded cell its last frame
    may already show the next move starting: frames are not taken at the program's
    knots); with at least
    :data:`MOTION_MIN_HELD_POSES` holds those frames are used, else (ordinary continuous
    motion, a policy run) frames evenly spaced over the episode. At most
    :data:`MOTION_MAX_FRAMES` either way, evenly spaced.

    Args:
        q: float64 ``[T, K]`` joint readings per frame, rad|m.
        units: ``K`` channel units, ``"rad"`` or ``"m"``.

    Returns:
        ``(indices, held)``: int64 ascending frame indices, and whether they are the
        middle frames of holds.
    """
    q = np.asarray(q, np.float64)
    tol = np.array([MOTION_HOLD_TOLERANCE / 10 if u == "m" else MOTION_HOLD_TOLERANCE
                    for u in units])
    still = np.zeros(len(q), bool)
    if len(q) > 1:
        still[1:] = (np.abs(np.diff(q, axis=0)) <= tol).all(axis=1)
    ends = np.flatnonzero(still & ~np.append(still[1:], False))
    starts = np.flatnonzero(still & ~np.insert(still[:-1], 0, False)) - 1
    middles = (starts + ends + 1) // 2
    held = len(middles) >= MOTION_MIN_HELD_POSES
    frames = middles if held else np.arange(len(q))
    keep = np.unique(np.linspace(0, len(frames) - 1, min(len(frames), MOTION_MAX_FRAMES))
                     .round().astype(int))
    return frames[keep].astype(np.int64), bool(held)


#: Least joint travel (rad; m for a channel in metres: a tenth of it) a motion episode must
#: show on some channel from its first frame for it to add anything to the chain.
MOTION_MIN_TRAVEL = 0.05


def fit_of_calibration(chain) -> ChainFit:
    """The geometry of an :class:`edge.runtime.chain.ChainCalibration` as a
    :class:`ChainFit` (what :func:`refine_photometric` refines); the home frame,
    background and provenance stay with the calibration."""
    return ChainFit(np.asarray(chain.robot, bool), np.asarray(chain.depth, np.float64),
                    np.asarray(chain.axes, np.float64), np.asarray(chain.pivots, np.float64),
                    np.asarray(chain.carried, np.float64),
                    np.asarray(chain.rad_per_unit, np.float64), float(chain.focal_px),
                    np.asarray(chain.centre_px, np.float64),
                    np.asarray(chain.residual_px, np.float64),
                    travel_per_unit=np.asarray(chain.travel_per_unit, np.float64))


def _check_motion(motion, where: str, names: list[str], units: list[str],
                  shape: tuple[int, int], cell_id: str) -> np.ndarray:
    """A motion episode's joint readings float64 ``[T, K]`` once it is fit to refine
    with; raises :class:`MotionEpisodeError` naming ``where`` and the field otherwise."""
    bad = MotionEpisodeError
    meta = motion.metadata
    if meta.kind == "calibration":
        raise bad(f"{where}: metadata.kind 'calibration': expected an episode of ordinary "
                  "motion (several channels moving together, e.g. the commissioning episode "
                  "of `calibrate validate`); the sweep itself is already read")
    if list(meta.dof_names) != names:
        raise bad(f"{where}: dof_names {list(meta.dof_names)}: expected the calibration's "
                  f"{names} (the same controller, in its order)")
    if motion.joint_positions is None:
        raise bad(f"{where}: no joint_positions: the refinement compares each frame with the "
                  "chain moved to that frame's joint readings")
    fh, fw = motion.frames.shape[1:3]
    if (fh, fw) != tuple(shape):
        raise bad(f"{where}: frames {fw}x{fh}: expected the calibration's {shape[1]}x"
                  f"{shape[0]} (the same camera at the same resolution)")
    if cell_id and meta.cell_id and meta.cell_id != cell_id:
        raise bad(f"{where}: metadata.cell_id '{meta.cell_id}': expected the calibration's "
                  f"'{cell_id}' (an episode of the same cell)")
    q = np.asarray(motion.joint_positions, np.float64)[:, :len(names)]
    scale = np.array([10.0 if u == "m" else 1.0 for u in units])
    travel = (np.abs(q - q[:1]) * scale).max(0)
    if len(q) < 2 or travel.max() < MOTION_MIN_TRAVEL:
        raise bad(f"{where}: the joints travel at most {travel.max():.3f} (rad, or 0.1 m) "
                  f"from its first frame: expected at least {MOTION_MIN_TRAVEL}; record "
                  "motion that moves the arm")
    return q


def refine_chain_with_motion(chain, episode, motions, photometric_size: int = 128,
                             steps: tuple[int, ...] | None = None,
                             blur_px: tuple[float, ...] | None = None, log=None,
                             twins: bool = True):
    """Refine a chain calibration against episodes of ordinary motion on the same cell.

    A calibration sweeps one channel at a time, so a channel whose carried points lie at
    about one depth is read up to its depth-mirrored twin (the axis reflected through the
    image plane moves those points the same to first order): each channel on its own
    explains its sweep either way, but the chain composes them wrongly when several
    channels turn together. An episode in which the joints move together (the
    commissioning episode of ``calibrate validate``, any recorded policy run) shows the
    composition. Its frames join the calibration's at the sweep's poses in
    :func:`refine_photometric` (analysis by synthesis from the home frame, coarse to fine),
    so the chain is refined to explain both. On the futures of held-out robots and
    conventions (docs/eval/experiments.md) one motion episode of 32 frames raised
    retrieval@8 and whole-frame PSNR; the commissioning report must then be run on
    another episode (``calibrate validate`` refuses one the chain was refined with).

    Args:
        chain: :class:`edge.runtime.chain.ChainCalibration` read from ``episode``.
        episode: the calibration :class:`edge.episode.Episode` it was read from (any
            recorded timing: brought to the sweep's poses by :func:`sweep_timing`).
        motions: a list of ``(episode, where)``: :class:`edge.episode.Episode` of ordinary
            motion with joint readings, same channels and resolution as the calibration;
            ``where`` names it in messages and in ``info["motion"]``.
        photometric_size: the side (px) all frames are resized to, a whole multiple of the
            chain's grid.
        steps: Adam steps at each blur level (None: :data:`MOTION_REFINE_STEPS`).
        blur_px: the levels' Gaussian blur (px at ``photometric_size``), one per ``steps``
            (None: :data:`MOTION_REFINE_BLUR_PX`).
        log: called with a line per stage, or None.
        twins: first swap channels for their depth-mirrored twins where the frames say so
            (:func:`choose_twins` with ``refine_steps=TWIN_REFINE_STEPS``: each twin
            refined before the comparison; recorded in ``info["twins"]``, absent with
            False); 1-4 min more on 2 cores. On by default: compared as drawn it kept a
            twin on 5 of 32 held-out robot reads and made all 5 better (retrieval@8
            +0.38), on 16 held-out convention reads none; compared refined, on 16 other
            held-out robot reads (cells 16-31) it kept one on 11 (as drawn: 2), channels
            more than 90 deg off the true axis 14 of 95 against 21, retrieval@8 +0.04
            (95% -0.02 to +0.12), motion-region PSNR@16 +0.43 dB (+0.02 to +0.93).

    Returns:
        a new :class:`edge.runtime.chain.ChainCalibration` (same home frame and channels;
        axes, pivots, depths, slides, background and the turns per unit the read fitted
        (``info["joint_scale"]["fitted"]``) refined; ``info["motion"]`` lists
        each episode's ``where``, frame count, frames used (:func:`motion_frames_to_use`:
        the middle frame of each hold where the joints were held at poses, else evenly
        spaced; at most :data:`MOTION_MAX_FRAMES`), whether they were holds
        (``held_poses``) and frames' sha256).

    Raises:
        edge.runtime.chain.MotionEpisodeError: no motion episode; a motion episode of kind
            ``calibration``, other channels, another resolution, another cell, without
            joint readings or that barely moves.
        ValueError: a calibration whose sweeps ingest cannot find, or other channels than
            the chain's; a photometric size that is not a whole multiple of the grid.
    """
    say = log or (lambda _line: None)
    steps = MOTION_REFINE_STEPS if steps is None else steps
    blur_px = MOTION_REFINE_BLUR_PX if blur_px is None else blur_px
    if not motions:
        raise MotionEpisodeError("refine_chain_with_motion: no motion episode given")
    names = list(chain.dof_names)
    cal, qc, small = _sweep_to_refine(chain, episode, photometric_size,
                                      "refine_chain_with_motion")
    shape = tuple(cal.frames.shape[1:3])
    units = list(cal.metadata.dof_units)
    frames, joints, used = [small(cal.frames)], [qc], []
    for motion, where in motions:
        q = _check_motion(motion, str(where), names, units, shape, cal.metadata.cell_id)
        pick, held = motion_frames_to_use(q, units)
        frames.append(small(motion.frames[pick]))
        joints.append(q[pick])
        used.append({"episode": str(where), "frames": int(len(q)), "frames_used": int(len(pick)),
                     "held_poses": held, "frames_sha256": frames_sha256(motion.frames)})
    say(f"refining against {sum(len(q) for q in joints[1:])} frames of motion beside the "
        f"sweep's {len(qc)}")
    out, seconds = _refined_with(chain, cal, frames, joints, steps, blur_px, log, twins,
                                 twin_refine_steps=TWIN_REFINE_STEPS)
    out.info["motion"] = used
    out.info["motion_refine_seconds"] = seconds
    say(f"refined with motion in {seconds} s")
    return out


def _sweep_to_refine(chain, episode, photometric_size: int, who: str):
    """``(cal, qc, small)`` for refining ``chain`` against its calibration ``episode``:
    the episode at the sweep's poses (:func:`sweep_timing`), its joint readings float64
    ``[T, K]``, and a function resizing uint8 frames ``[T, h, w, 3]`` by area to
    ``photometric_size``. Raises ValueError (``who`` names the caller) for other channels
    than the chain's, frames off the chain's grid, or a photometric size that is not a
    whole multiple of it."""
    import cv2

    names = list(chain.dof_names)
    cal, _ = sweep_timing(episode)
    if list(cal.metadata.dof_names) != names:
        raise ValueError(f"the calibration's dof_names {list(cal.metadata.dof_names)}: "
                         f"expected the chain's {names}")
    _grid_ratio(cal.frames, chain.resolution, who)
    if photometric_size % chain.resolution[0] or photometric_size % chain.resolution[1]:
        raise ValueError(f"photometric size {photometric_size}: expected a whole multiple of "
                         f"the chain's grid {chain.resolution}")
    side = (photometric_size, photometric_size)

    def small(frames: np.ndarray) -> np.ndarray:
        return np.stack([cv2.resize(f, side, interpolation=cv2.INTER_AREA) for f in frames])

    return cal, np.asarray(cal.joint_positions, np.float64)[:, :len(names)], small


def _refined_with(chain, cal, frames: list[np.ndarray], joints: list[np.ndarray],
                  steps: tuple[int, ...], blur_px: tuple[float, ...], log,
                  twins: bool = False, twin_refine_steps: int = 0):
    """``(chain, seconds)``: ``chain`` refined by :func:`refine_photometric` against the
    concatenated ``frames`` (the sweep's first, at the photometric size) at ``joints``,
    its background redrawn from the calibration ``cal`` (at the sweep's poses); the info
    is a copy of the chain's. With ``twins``, :func:`choose_twins` first swaps channels for
    their twins where those frames say so (``refine_steps=twin_refine_steps``; recorded in
    ``info["twins"]``)."""
    t0 = time.perf_counter()
    names = list(chain.dof_names)
    qc = np.asarray(cal.joint_positions, np.float64)[:, :len(names)]
    # a turn per unit the read fitted (readings not in rad) is refined with the rest
    fitted = set((chain.info.get("joint_scale") or {}).get("fitted") or ())
    seen, at = np.concatenate(frames), np.concatenate(joints)
    start, record = fit_of_calibration(chain), None
    if twins:
        start, record = choose_twins(start, seen, at, log=log,
                                     refine_steps=twin_refine_steps)
    fit, _ = refine_photometric(start, seen, at, steps=steps, blur_px=blur_px,
                                log=log, scale_free=np.array([n in fitted for n in names]))
    grid = on_grid(cal.frames, chain.resolution)
    background = calibration_background(fit, grid, qc)
    info = dict(chain.info)
    if record is not None:
        info["twins"] = record
    return (as_calibration(fit, chain.home_frame, chain.home_joint_positions, background,
                           names, info),
            round(time.perf_counter() - t0, 1))


#: How many times the start frame is repeated among the sweep's frames when a chain is
#: anchored at it (:func:`anchor_chain_to_start`): the refinement draws 16 frames a step
#: from about 60, so 8 copies put the start in about two of them.
ANCHOR_COPIES = 8


def anchor_chain_to_start(chain, episode, start: np.ndarray,
                          start_joint_positions: np.ndarray, photometric_size: int = 128,
                          copies: int = ANCHOR_COPIES, steps: tuple[int, ...] | None = None,
                          blur_px: tuple[float, ...] | None = None, log=None,
                          twins: bool = False, twin_refine_steps: int = 0):
    """Refine a chain calibration so that it also explains the start frame of a rollout.

    A rollout starts wherever the arm is, often far from the calibration's home pose (the
    futures of held-out robots start 1.4-3.7 rad of summed joint offset away): the chain
    carries the home frame's points there through every channel at once, so an axis read
    a little off from single-channel sweeps puts the links in the wrong place before the
    first action (on 24 held-out-robot cells, the share of the predicted arm that lies on
    the true arm at the start was under 0.3 on the four cells where the rollout was worst).
    The start frame shows where the arm is at known joint readings: it joins the sweep's
    frames in :func:`refine_photometric` (``copies`` times, so that most steps see it),
    and the chain is refined to explain both, as :func:`refine_chain_with_motion` does with
    a motion episode. The start frame is only an input, like the calibration: nothing of
    the future is used.

    Args:
        chain: :class:`edge.runtime.chain.ChainCalibration` read from ``episode``.
        episode: the calibration :class:`edge.episode.Episode` it was read from (any
            recorded timing).
        start: uint8 ``[H, W, 3]``, the rollout's start frame on the chain's grid (it is
            resized, bilinearly, to the photometric size).
        start_joint_positions: float ``[K]``, the controller's readings at the start
            (controller order and unit).
        photometric_size: the side (px) all frames are resized to, a whole multiple of the
            chain's grid.
        copies: how many times the start frame joins the sweep's frames.
        steps, blur_px: as :func:`refine_chain_with_motion` (None: its defaults).
        log: called with a line per stage, or None.
        twins: first swap channels for their depth-mirrored twins where the start frame
            and the sweep say so (:func:`choose_twins`; ``info["twins"]``). Off by
            default: measured, compared as drawn it made the futures worse (retrieval@8
            -0.13 over 32 held-out robot reads), compared refined it changed nothing on
            balance (-0.01 over 16 others, at 3-5 times the time).
        twin_refine_steps: with ``twins``, the ``refine_steps`` of :func:`choose_twins`
            (0: each twin compared as drawn).

    A light changed since the calibration is measured from the start frame
    (:func:`edge.runtime.chain.match_light`) and the start frame is refined against in the
    sweep's light.

    Returns:
        a new :class:`edge.runtime.chain.ChainCalibration`; ``info["anchor"]`` records the
        start frame's sha256, the joint readings, ``copies``, the seconds taken and the
        light's change (``LightMatch.summary()``).

    Raises:
        ValueError: a calibration whose sweeps ingest cannot find, with other channels
            than the chain's, or not the one the chain was read from (its first joint
            readings or frame differ from the chain's home pose and frame); a start frame
            not on the chain's grid or readings not of its channels; a photometric size
            that is not a whole multiple of the grid.
    """
    import cv2

    from edge.runtime.chain import checked_start, match_light

    say = log or (lambda _line: None)
    steps = MOTION_REFINE_STEPS if steps is None else steps
    blur_px = MOTION_REFINE_BLUR_PX if blur_px is None else blur_px
    h, w = chain.resolution
    start, q0 = checked_start(chain, start, start_joint_positions, error=ValueError)
    if copies < 1:
        raise ValueError(f"copies {copies}: expected at least 1")
    cal, qc, small = _sweep_to_refine(chain, episode, photometric_size,
                                      "anchor_chain_to_start")
    joints_ok, diff = home_differences(chain, qc[0], on_grid(cal.frames[:1], (h, w))[0])
    if not joints_ok:
        raise ValueError(f"the calibration's first joint readings {np.round(qc[0], 4).tolist()}:"
                         " expected the chain's home_joint_positions "
                         f"{np.round(chain.home_joint_positions, 4).tolist()} (the chain was "
                         "read from another calibration episode)")
    if diff > HOME_FRAME_TOLERANCE:
        raise ValueError(f"the calibration's first frame differs from the chain's home_frame by "
                         f"{diff:.1f} levels on average (expected at most "
                         f"{HOME_FRAME_TOLERANCE:g}): the chain was read from another "
                         "calibration episode, or the camera moved")
    side = (photometric_size, photometric_size)
    # a light changed since the calibration: the start frame in the sweep's light, so that
    # the refinement moves the arm, not the colours
    light = match_light(chain, start, q0)
    big = cv2.resize(light.invert(start), side, interpolation=cv2.INTER_LINEAR)
    say(f"anchoring the chain at the start frame ({copies} copies beside the sweep's "
        f"{len(qc)} frames)")
    out, seconds = _refined_with(chain, cal, [small(cal.frames), np.repeat(big[None], copies, 0)],
                                 [qc, np.repeat(q0[None], copies, 0)], steps, blur_px, log,
                                 twins, twin_refine_steps)
    out.info["anchor"] = {"start_sha256": frames_sha256(start[None]),
                          "start_joint_positions": [round(float(x), 6) for x in q0],
                          "copies": int(copies), "seconds": seconds,
                          "light": light.summary()}
    say(f"anchored in {seconds} s")
    return out


def read_chain_calibration(episode, size: tuple[int, int] = (64, 64),
                           fovy_deg: float | None = None, photometric_size: int | None = 128,
                           log=None, motions=None, joint_scale: str = "auto",
                           motion_twins: bool = True, colour_tracks: bool = True):
    """Read a calibration episode into the chain model's encoded calibration.

    Brings the episode into the planner's timing (:func:`sweep_timing`), runs
    :func:`read_chain` on its frames (recorded at a whole multiple of
    ``size``; a higher resolution tracks the links to a fraction of a model pixel), then
    the home frame and the static background on the model's grid (frames reduced by area
    averaging), and packs them with the camera's pinhole (:func:`camera_pinhole`) as an
    :class:`edge.runtime.chain.ChainCalibration`.

    Args:
        episode: :class:`edge.episode.Episode` of kind ``calibration`` (segments: one sweep
            per channel, each channel in rad).
        size: the model's grid ``(H, W)``.
        fovy_deg: the camera's vertical field of view; None: from the episode's metadata.
        photometric_size: as :func:`read_chain` (None: no refinement).
        log: called with a line per stage, or None.
        motions: ``[(episode, where)]`` of ordinary motion on the same cell to refine the
            chain with afterwards (:func:`refine_chain_with_motion`, at
            ``photometric_size`` or 128; checked before the read), or None.
        motion_twins: with ``motions``, choose each channel's depth-mirrored twin first
            (``refine_chain_with_motion(twins=...)``; on by default).
        colour_tracks: track the sweep on the grey frames and the colour-opponent
            channels (:func:`sweep_tracks` ``colour``; the default); False: on grey alone,
            as every chain read before it (``info["tracks"]`` records which).
        joint_scale: one of :data:`JOINT_SCALE_MODES`: ``rad`` (the revolute readings are
            rad), ``fit`` (fit every revolute channel's turn per unit of reading: a
            controller reporting degrees, encoder counts or a normalised range, e.g.
            LeRobot's -100..100), ``deg`` (the revolute readings are degrees: 1 unit =
            pi/180 rad exactly), ``auto`` (when some revolute channel's sweep exceeds
            :data:`MAX_SWEEP_RAD` in its readings, which rad cannot: ``deg`` if the widest
            sweep is at most :data:`DEGREES_MAX_SWEEP_RAD` as degrees, else ``fit``;
            otherwise ``rad``). The chain's ``rad_per_unit`` carries the result, so a
            rollout takes actions and joint readings in the controller's own units;
            ``info["joint_scale"]`` records the mode, the largest sweep, the channels
            fitted and (where any) those read as degrees.

    Returns:
        :class:`edge.runtime.chain.ChainCalibration`.

    Raises:
        ValueError: not a calibration episode, a channel without a sweep segment, frames
            that are not a whole multiple
            of ``size``, no field of view, sweeps that cannot be found in the joint
            readings (:func:`sweep_timing`); a motion episode
            :func:`refine_chain_with_motion` refuses; an unknown ``joint_scale``.
    """
    say = log or (lambda _line: None)
    if joint_scale not in JOINT_SCALE_MODES:
        raise ValueError(f"joint_scale {joint_scale!r}: expected one of {list(JOINT_SCALE_MODES)}")
    meta = episode.metadata
    if meta.kind != "calibration":
        raise ValueError(f"expected a calibration episode (kind 'calibration': each channel "
                         f"swept in turn), found kind '{meta.kind}'")
    names = list(meta.dof_names)
    k = len(names)
    # a channel in m (a linear axis, a gripper) slides its links; one in rad turns them
    prismatic = np.array([u == "m" for u in meta.dof_units], bool)
    if episode.joint_positions is None:
        raise ValueError("the calibration episode has no joint_positions: the chain is fitted "
                         "to the joint readings recorded with each frame")
    for motion, where in motions or ():  # refused before minutes of reading, not after
        _check_motion(motion, str(where), names, list(meta.dof_units),
                      tuple(episode.frames.shape[1:3]), meta.cell_id)
    recorded = episode.num_frames
    episode, ingest = sweep_timing(episode)
    if ingest["normalised"]:
        say(f"calibration of {recorded} frames at {ingest.get('recorded_frame_rate_hz')} Hz: "
            f"read at its {episode.num_frames} frames at the sweep's poses (ingest)")
    segments = calibration_sweeps(episode)
    t = episode.num_frames
    focal, centre, where = camera_pinhole(episode, size, fovy_deg)
    frames = episode.frames
    q = np.asarray(episode.joint_positions, np.float64)[:, :k]
    sweeps = np.array([np.abs(q[a:b, c] - q[0, c]).max() for c, (a, b) in enumerate(segments)])
    widest = float(sweeps[~prismatic].max()) if (~prismatic).any() else 0.0
    not_rad = joint_scale == "auto" and widest > MAX_SWEEP_RAD
    as_degrees = ~prismatic & (joint_scale == "deg" or (
        not_rad and np.radians(widest) <= DEGREES_MAX_SWEEP_RAD))
    fitted = ~prismatic & ~as_degrees & (joint_scale == "fit" or not_rad)
    if as_degrees.any():
        say(f"readings of {int(as_degrees.sum())} channel(s) read as degrees "
            f"({joint_scale}: the widest sweep is {widest:.4g} in the readings"
            + (f", {np.radians(widest):.3g} rad as degrees" if joint_scale == "auto" else "")
            + "; --joint-scale fit fits each channel's turn per unit instead)")
    if fitted.any():
        say(f"turn per unit of reading fitted for {int(fitted.sum())} channel(s) "
            f"({joint_scale}: the widest sweep is {widest:.4g} in the readings"
            + (f", more than {MAX_SWEEP_RAD:.4g} rad" if joint_scale == "auto" else "") + ")")
    t0 = time.perf_counter()
    # degrees are read as rad (the same sweep), then 1 unit = pi/180 rad in the chain, so
    # that actions and readings stay in the controller's unit
    per_unit = np.where(as_degrees, np.pi / 180.0, 1.0)
    fit = read_chain(frames, q * per_unit[None], segments, focal, centre, size,
                     photometric_size=photometric_size, log=log, prismatic=prismatic,
                     scale_free=fitted if fitted.any() else None,
                     colour_tracks=colour_tracks)
    if as_degrees.any():
        fit = replace(fit, rad_per_unit=fit.rad_per_unit * per_unit)
    h, w = size
    grid = on_grid(frames, size)
    background = calibration_background(fit, grid, q)
    say(f"read in {time.perf_counter() - t0:.1f} s; background seen at "
        f"{int(background[1].sum())} of {h * w} pixels")
    info = {"calibration": {"cell_id": meta.cell_id, "camera_id": meta.camera_id,
                            "robot_id": meta.robot_id, "robot": meta.robot,
                            "frames": int(t), "resolution": list(frames.shape[1:3]),
                            "fps": float(meta.fps), "recorded_frames": int(recorded),
                            "normalised": bool(ingest["normalised"])},
            "pinhole_from": where, "photometric_size": photometric_size,
            "tracks": "colour" if colour_tracks else "grey",
            "prismatic": [n for n, m in zip(names, prismatic, strict=True) if m],
            "joint_scale": {"mode": joint_scale, "widest_sweep": round(widest, 6),
                            "fitted": [n for n, m in zip(names, fitted, strict=True) if m],
                            **({"degrees": [n for n, m in zip(names, as_degrees, strict=True)
                                            if m]} if as_degrees.any() else {})},
            "arm_pixels": int(fit.robot.sum()), "seconds": round(time.perf_counter() - t0, 1)}
    chain = as_calibration(fit, grid[0], q[0], background, names, info)
    from edge.runtime.chain import unmodelled_channels

    # the channels it gives no axis, and why (read-chain, calibrate store and the rollouts
    # name them)
    chain.info["unmodelled_channels"] = unmodelled_channels(chain, fit.left_out)
    if motions:
        chain = refine_chain_with_motion(chain, episode, motions, photometric_size or 128,
                                         log=log, twins=motion_twins)
    return chain
