"""Evaluation that blur cannot fool (``syncedge model eval-frames``).

For every split, on the same cells and the same rendered futures, for each model family
(the latent reference model from its checkpoints, the warp model from its checkpoint) and
each variant (``calibrated``, ``zeroed``, ``other_cell``, ``mislabelled``,
``no_calibration`` where a model trained without calibration exists, ``copy_last``):

(a) **futures retrieval**: from one start frame, M candidates drawn from the split's own
    test-motion sampler (both profiles, :mod:`export.cells.futures`), each rendered by
    MuJoCo; a prediction counts if its own truth is strictly nearer (whole-frame MSE) than
    every other candidate's (ties count as misses). Top-1 at steps 4, 8 and 16, with the
    truth blurred by a 2 px Gaussian as the control.
(b) **zero-action fidelity**: a rollout of zero actions against its own start frame.
(c) **whole-frame PSNR** (uint8 MSE, peak 255, per frame, averaged over frames then cells;
    identical frames count as 100 dB) and **SSIM** per step, the motion-region PSNR (pixels
    whose truth differs from the start frame by more than 8 at that step) and the PSNR on
    the pixels the truth never changes over the horizon.
(d) **oracle-flow warp**: the start frame warped by OpenCV DIS optical flow measured from
    the true frame (no fill): a bound the warp family can be held against; where the split's
    geometry was rendered (``syncedge cells geometry``), also the **exact-flow warp**: the
    start frame warped by the exact backward flow of the robot's pixels
    (:func:`export.cells.geometry.true_backward_flow`; static pixels stay, no fill).
(e) **end-effector error**, reported beside the keypoint reader's own error on the truth.

Per-cell differences to ``calibrated`` have paired percentile-bootstrap 95% intervals.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edge.metrics import bootstrap_mean_ci, motion_mask, ssim
from export.errors import ExportError

__all__ = ["FramesEvalOptions", "frame_psnr", "retrieval_hits", "blur_control",
           "exact_flow_warp",
           "static_mask", "oracle_flow_warp", "evaluate_frames", "format_frames_table",
           "save_sheets", "write_frames_eval", "camera_degrade",
           "PSNR_CAP_DB", "RETRIEVAL_STEPS"]

#: PSNR of identical frames (dB), so that per-frame means stay finite.
PSNR_CAP_DB = 100.0
#: Steps at which futures retrieval is scored.
RETRIEVAL_STEPS = (4, 8, 16)
SPLITS = {"in_distribution": "val", "held_out_camera": "test_camera",
          "held_out_robot": "test_robot", "held_out_convention": "test_convention",
          "all_held_out": "test_all", "stress": "stress"}


def frame_psnr(pred: np.ndarray, truth: np.ndarray, mask: np.ndarray | None = None) -> float:
    """PSNR in dB of one uint8 frame pair ``[H, W, 3]`` (peak 255), over ``mask`` ``[H, W]``
    if given; :data:`PSNR_CAP_DB` for identical pixels, NaN for an empty mask."""
    d = pred.astype(np.float64) - truth.astype(np.float64)
    if mask is not None:
        if not mask.any():
            return float("nan")
        d = d[mask]
    mse = float(np.mean(d * d))
    if mse == 0.0:
        return PSNR_CAP_DB
    return min(PSNR_CAP_DB, 10.0 * math.log10(255.0 * 255.0 / mse))


def retrieval_hits(preds: np.ndarray, truths: np.ndarray) -> np.ndarray:
    """Futures retrieval at one step: bool ``[M]``, True where prediction i is strictly
    nearer (mean squared error over the whole frame) to truth i than to every other truth.

    Args:
        preds, truths: ``[M, H, W, 3]`` (any numeric dtype; compared as float64).

    Raises:
        ExportError: mismatched shapes or M < 2.
    """
    if preds.shape != truths.shape or preds.shape[0] < 2:
        raise ExportError(f"retrieval: expected two [M>=2, H, W, 3] stacks of one shape, found "
                          f"{list(preds.shape)} and {list(truths.shape)}")
    p = preds.reshape(len(preds), -1).astype(np.float64)
    t = truths.reshape(len(truths), -1).astype(np.float64)
    d = ((p[:, None, :] - t[None, :, :]) ** 2).mean(-1)  # (M pred, M truth)
    own = np.diag(d)
    others = d + np.diag(np.full(len(d), np.inf))
    return own < others.min(1)


def blur_control(truths: np.ndarray, sigma_px: float = 2.0) -> np.ndarray:
    """The truth blurred by a Gaussian of ``sigma_px`` (uint8 ``[..., H, W, 3]``), the
    control of futures retrieval: blur alone should not make retrieval fail."""
    import cv2

    flat = truths.reshape(-1, *truths.shape[-3:])
    out = np.stack([cv2.GaussianBlur(f, (0, 0), sigma_px) for f in flat])
    return out.reshape(truths.shape)


def camera_degrade(frames: np.ndarray, noise_levels: float = 0.0,
                   jpeg_quality: int | None = None, seed: int = 0) -> np.ndarray:
    """Frames as a real camera and its transport deliver them: sensor noise, then JPEG.

    Rendered frames are noise-free; a cell's camera adds read and shot noise per pixel and
    a ROS ``CompressedImage`` topic or an IP camera compresses every frame (the ROS image
    transport's JPEG quality defaults to 80). Each pixel and channel gets independent
    Gaussian noise of ``noise_levels`` (standard deviation, uint8 levels), is rounded and
    clipped to 0-255, and each frame is then encoded and decoded as JPEG at
    ``jpeg_quality`` (OpenCV, 4:2:0 chroma subsampling as libjpeg does by default).

    Args:
        frames: uint8 ``[..., H, W, 3]`` (RGB).
        noise_levels: the noise's standard deviation, levels (0: none).
        jpeg_quality: 1-100, or None: no compression.
        seed: the noise generator's seed (the same seed gives the same frames).

    Returns:
        uint8, the shape of ``frames``; a copy (the input is not changed).

    Raises:
        ValueError: frames that are not uint8 ``[..., H, W, 3]``, a negative or non-finite
            noise level, a quality outside 1-100.
    """
    import cv2

    frames = np.asarray(frames)
    if frames.dtype != np.uint8 or frames.ndim < 3 or frames.shape[-1] != 3:
        raise ValueError(f"camera_degrade: expected uint8 [..., H, W, 3] frames, found "
                         f"{frames.dtype} {list(frames.shape)}")
    if not math.isfinite(noise_levels) or noise_levels < 0:
        raise ValueError(f"camera_degrade: noise_levels must be finite and >= 0, found "
                         f"{noise_levels}")
    if jpeg_quality is not None and not 1 <= int(jpeg_quality) <= 100:
        raise ValueError(f"camera_degrade: jpeg_quality must be 1-100, found {jpeg_quality}")
    flat = frames.reshape(-1, *frames.shape[-3:])
    if noise_levels > 0:
        rng = np.random.default_rng(seed)
        noisy = flat.astype(np.float32) + rng.normal(0.0, noise_levels, flat.shape).astype(
            np.float32)
        flat = np.clip(np.rint(noisy), 0, 255).astype(np.uint8)
    else:
        flat = flat.copy()
    if jpeg_quality is not None:
        params = [cv2.IMWRITE_JPEG_QUALITY, int(jpeg_quality)]
        for i, f in enumerate(flat):
            ok, buf = cv2.imencode(".jpg", cv2.cvtColor(f, cv2.COLOR_RGB2BGR), params)
            if not ok:
                raise ValueError("camera_degrade: JPEG encoding failed")
            flat[i] = cv2.cvtColor(cv2.imdecode(buf, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    return flat.reshape(frames.shape)



def lens_distort(frames: np.ndarray, fovy_deg: float, k1: float, k2: float = 0.0
                 ) -> np.ndarray:
    """Frames as a lens with radial distortion shows them (rendered frames are a pinhole's).

    Brown's radial model as OpenCV uses it (``cv2.undistortPoints``; Brown 1966): a point
    at normalised pinhole coordinates ``(x, y)`` appears at ``(x, y) (1 + k1 r^2 + k2 r^4)``,
    ``r^2 = x^2 + y^2``, the principal point at the image centre and the focal length from
    ``fovy_deg`` and the frame's height. ``k1 < 0`` is barrel distortion (wide lenses;
    industrial 4-6 mm lenses around -0.1 to -0.3). Each output pixel samples the pinhole
    frame bilinearly at its undistorted position; where that lies outside the frame (the
    corners, for barrel distortion) the border is repeated.

    Args:
        frames: uint8 ``[..., H, W, 3]``.
        fovy_deg: the pinhole's vertical field of view, degrees (0-180).
        k1, k2: the radial coefficients.

    Returns:
        uint8, the shape of ``frames`` (a copy).

    Raises:
        ValueError: frames that are not uint8 ``[..., H, W, 3]``, a field of view outside
            (0, 180), non-finite coefficients.
    """
    import cv2

    frames = np.asarray(frames)
    if frames.dtype != np.uint8 or frames.ndim < 3 or frames.shape[-1] != 3:
        raise ValueError(f"lens_distort: expected uint8 [..., H, W, 3] frames, found "
                         f"{frames.dtype} {list(frames.shape)}")
    if not 0 < fovy_deg < 180 or not (math.isfinite(k1) and math.isfinite(k2)):
        raise ValueError(f"lens_distort: expected 0 < fovy_deg < 180 and finite k1, k2, "
                         f"found {fovy_deg}, {k1}, {k2}")
    h, w = frames.shape[-3:-1]
    f = (h / 2) / math.tan(math.radians(fovy_deg) / 2)
    cam = np.array([[f, 0, w / 2], [0, f, h / 2], [0, 0, 1]], np.float64)
    gx, gy = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)
    pts = np.stack([gx, gy], -1).reshape(-1, 1, 2)
    und = cv2.undistortPoints(pts, cam, np.array([k1, k2, 0.0, 0.0]),
                              criteria=(cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 40,
                                        1e-9)).reshape(h, w, 2)
    mx = (und[..., 0] * f + w / 2 - 0.5).astype(np.float32)
    my = (und[..., 1] * f + h / 2 - 0.5).astype(np.float32)
    flat = frames.reshape(-1, h, w, 3)
    out = np.stack([cv2.remap(fr, mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
                    for fr in flat])
    return out.reshape(frames.shape)


def static_mask(truth: np.ndarray, start: np.ndarray) -> np.ndarray:
    """bool ``[H, W]``: pixels whose truth equals the start frame at every step
    (``truth [T, H, W, 3]``, ``start [H, W, 3]``)."""
    return ~(truth != start[None]).any(-1).any(0)


def _remap(start: np.ndarray, flows: list[np.ndarray]) -> np.ndarray:
    """The start frame uint8 ``[H, W, 3]`` backward-warped by each flow float32
    ``[H, W, 2]`` (px; bilinear, border replicate): uint8 ``[T, H, W, 3]``."""
    import cv2

    h, w = start.shape[:2]
    gx, gy = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
    return np.stack([cv2.remap(start, gx + f[..., 0], gy + f[..., 1], cv2.INTER_LINEAR,
                               borderMode=cv2.BORDER_REPLICATE) for f in flows])


def oracle_flow_warp(start: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """The start frame warped by DIS optical flow measured from each true frame back to the
    start (an oracle; no fill): uint8 ``[T, H, W, 3]`` for ``truth [T, H, W, 3]``."""
    import cv2

    dis = cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_MEDIUM)  # type: ignore[attr-defined]
    g0 = cv2.cvtColor(start, cv2.COLOR_RGB2GRAY)
    return _remap(start, [dis.calc(cv2.cvtColor(f, cv2.COLOR_RGB2GRAY), g0, None)
                          for f in truth])


def exact_flow_warp(start: np.ndarray, geometry: dict[str, np.ndarray],
                    steps: int) -> np.ndarray:
    """The start frame (frame 0 of an episode) warped by the exact backward flow of the
    robot's pixels to each of frames 1..``steps`` (no fill; what the arm uncovers keeps the
    start frame): uint8 ``[steps, H, W, 3]``. ``geometry``: the episode's
    :func:`~export.cells.geometry.load_geometry`."""
    from export.cells.geometry import true_backward_flow

    g = geometry
    return _remap(start, [true_backward_flow(g["depth"][t], g["link"][t], g["poses"][t],
                                             g["poses"][0], g["camera"])[0].transpose(1, 2, 0)
                          for t in range(1, steps + 1)])


# -- predictors ---------------------------------------------------------------------------
class _Predictor:
    """A model family behind one interface: contexts per variant, rollouts to uint8."""

    variants: tuple[str, ...] = ()
    model: Any = None
    nocal: Any = None

    def _calibration_input(self, cell: Any) -> Any:
        """What the family's calibration network reads of a cell's calibration frames."""
        raise NotImplementedError

    def contexts(self, cells: list, rng: np.random.Generator) -> dict[str, list[Any]]:
        """Per variant, one context per cell (``other_cell``: the next cell's)."""
        import torch

        m = self.model
        out: dict[str, list[Any]] = {v: [] for v in self.variants}
        mis = _mislabelled(cells, rng)
        with torch.no_grad():
            for i, c in enumerate(cells):
                x = self._calibration_input(c)
                act = torch.from_numpy(c.cal_actions)
                mask = torch.from_numpy(c.dof_mask)
                out["calibrated"].append(m.calibration(x, act, mask))
                out["zeroed"].append(m.calibration(x, act, mask * 0))
                out["mislabelled"].append(m.calibration(x, torch.from_numpy(mis[i]), mask))
                if self.nocal is not None:
                    out["no_calibration"].append(self.nocal.calibration(x, act, mask))
        out["other_cell"] = out["calibrated"][1:] + out["calibrated"][:1]
        return out

    def rollout(self, variant: str, ctx: Any, start: np.ndarray,
                actions: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
        """start uint8 ``[H, W, 3]``, actions ``[M, T, A]`` -> uint8 ``[M, T, H, W, 3]``;
        ``offset`` float32 ``[A]``: the start pose minus the calibration's home pose (rad),
        read by models that take it."""
        raise NotImplementedError


def _mislabelled(cells: list, rng: np.random.Generator) -> list[np.ndarray]:
    from export.evaluation.zero_shot import _mislabelling
    from export.train.data import relabel

    return [relabel(c.cal_actions, _mislabelling(rng, c.num_dof)) for c in cells]


class _LatentPredictor(_Predictor):
    """The latent reference model (``export/models/latent.py``) from its run folder."""

    def __init__(self, run: str):
        import torch

        from export.evaluation.zero_shot import load_world_model

        self.torch = torch
        self.model = load_world_model(run, True)
        self.nocal = load_world_model(run, False) if (Path(run) / "dynamics_nocal.pt").is_file() \
            else None
        self.variants = ("calibrated", "zeroed", "other_cell", "mislabelled") + \
            (("no_calibration",) if self.nocal is not None else ())

    def _calibration_input(self, cell: Any) -> Any:
        return self.model.encode_frames(self.torch.from_numpy(cell.cal_frames))

    def rollout(self, variant: str, ctx: Any, start: np.ndarray,
                actions: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
        torch = self.torch
        from export.evaluation.zero_shot import _decode

        model = self.nocal if variant == "no_calibration" else self.model
        assert model is not None
        s = torch.from_numpy(np.repeat(start[None], len(actions), 0)).permute(0, 3, 1, 2)
        with torch.no_grad():
            z0 = model.encoder(s)
            z = model.rollout(z0, torch.from_numpy(actions.astype(np.float32)), ctx)
            return _decode(model, z, s, z0, False)


class _WarpPredictor(_Predictor):
    """The warp model (``export/models/warp.py``) from ``warp.pt`` (and ``warp_nocal.pt``)."""

    def __init__(self, run: str):
        import torch

        from export.variants.warp_export import load_warp_model

        self.torch = torch
        self.model = load_warp_model(run)
        self.nocal = load_warp_model(run, history=True) \
            if (Path(run) / "warp_nocal.pt").is_file() else None
        self.variants = ("calibrated", "zeroed", "other_cell", "mislabelled") + \
            (("no_calibration",) if self.nocal is not None else ())

    def _calibration_input(self, cell: Any) -> Any:
        from export.train.warp import calibration_states

        fr = self.torch.from_numpy(cell.cal_frames).permute(0, 3, 1, 2)[None]
        return calibration_states(self.model, fr)[0]

    def rollout(self, variant: str, ctx: Any, start: np.ndarray,
                actions: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
        torch = self.torch
        from export.evaluation.zero_shot import to_uint8

        model = self.nocal if variant == "no_calibration" else self.model
        assert model is not None
        m, t = actions.shape[:2]
        s = torch.from_numpy(start[None]).permute(0, 3, 1, 2)
        with torch.no_grad():
            z0 = model.encoder(s).expand(m, -1, -1, -1)
            if model.cfg.start_offset:
                off = np.zeros(actions.shape[-1], np.float32) if offset is None else offset
                z0 = model.with_offset(z0, torch.from_numpy(off[None].astype(np.float32))
                                       .expand(m, -1))
            z = model.rollout(z0, torch.from_numpy(actions.astype(np.float32)), ctx)
            frames, _ = model.decoder(z.flatten(0, 1))
        return to_uint8(frames).reshape(m, t, *start.shape)


class _CalibrationFlowPredictor(_Predictor):
    """The hand-made calibration reading (``export/models/calibration_flow.py``), no model file."""

    variants = ("calibrated", "zeroed")

    def contexts(self, cells: list, rng: np.random.Generator) -> dict[str, list[Any]]:
        from export.models.calibration_flow import CalibrationFlow

        cal = [CalibrationFlow(c.cal_frames, c.cal_actions * c.dof_mask) for c in cells]
        return {"calibrated": cal, "zeroed": [None] * len(cells)}

    def rollout(self, variant: str, ctx: Any, start: np.ndarray,
                actions: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
        if ctx is None:  # zeroed: nothing moves
            return np.repeat(np.repeat(start[None, None], actions.shape[1], 1),
                             actions.shape[0], 0)
        return ctx.rollout(start, actions)


def make_predictor(family: str, run: str) -> _Predictor:
    """``latent`` (checkpoints ae.pt, dynamics.pt, ...), ``warp`` (warp.pt) or ``calflow``
    (the hand-made calibration reading; ``run`` is ignored)."""
    if family == "latent":
        return _LatentPredictor(run)
    if family == "warp":
        return _WarpPredictor(run)
    if family == "calflow":
        return _CalibrationFlowPredictor()
    raise ExportError(f"model family {family!r}: expected latent, warp or calflow")


# -- evaluation ---------------------------------------------------------------------------
@dataclass
class FramesEvalOptions:
    """What to evaluate: ``models`` maps a label to ``(family, run folder)``."""

    data: str
    models: dict[str, tuple[str, str]]
    keypoint_run: str = "models/latent-checkpoints"
    splits: dict[str, str] = field(default_factory=lambda: dict(SPLITS))
    max_cells: int = 64
    horizon: int = 16
    candidates: int = 8
    profiles: tuple[str, ...] = ("all_joints", "two_joint")
    seed: int = 0
    retrieval_variants: tuple[str, ...] = ("calibrated", "zeroed", "mislabelled",
                                           "no_calibration", "copy_last")
    #: variants rolled out (besides copy_last); None: every variant a model has
    variants: tuple[str, ...] | None = None
    #: per model label, variants that replace ``variants`` for that model
    model_variants: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _progress(msg: str, t0: float) -> None:
    print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def _paired(a: list[float], b: list[float]) -> dict[str, float]:
    d = np.asarray(a, float) - np.asarray(b, float)
    mean, lo, hi = bootstrap_mean_ci(d)
    ok = np.isfinite(d)
    return {"mean_diff": mean, "ci95_low": lo, "ci95_high": hi,
            "win_rate": float((d[ok] > 0).mean()) if ok.any() else float("nan")}


def _frame_metrics(pred: np.ndarray, truth: np.ndarray, start: np.ndarray) -> dict[str, Any]:
    """Per-step metrics of one rollout (``pred``/``truth`` uint8 ``[T, H, W, 3]``)."""
    stat = static_mask(truth, start)
    t = len(truth)
    mm = motion_mask(truth, start)
    return {
        "psnr": [frame_psnr(pred[k], truth[k]) for k in range(t)],
        "ssim": [float(ssim(pred[k], truth[k])) for k in range(t)],
        "motion_psnr": [frame_psnr(pred[k], truth[k], mm[k]) for k in range(t)],
        "static_psnr": float(np.mean([frame_psnr(pred[k], truth[k], stat) for k in range(t)]))
        if stat.any() else float("nan"),
    }


def evaluate_frames(opts: FramesEvalOptions) -> dict[str, Any]:
    """Run the evaluation; returns the JSON-ready result (see the module docstring).

    Raises:
        ExportError: a split without cells, a model folder without its checkpoints.
    """
    import torch

    from export.cells.futures import load_or_render_futures
    from export.cells.sampling import CellParams
    from export.evaluation.zero_shot import load_keypoint
    from export.train.data import load_cells

    t0 = time.perf_counter()
    torch.manual_seed(opts.seed)
    preds = {label: make_predictor(fam, run) for label, (fam, run) in opts.models.items()}
    kp = load_keypoint(opts.keypoint_run)
    gen_holder: list[Any] = []

    def gen() -> Any:
        if not gen_holder:
            from export.cells.generate import CellGenerator, GenerateOptions

            gen_holder.append(CellGenerator(GenerateOptions()))
        return gen_holder[0]

    def keypoints(frames: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(frames.reshape(-1, *frames.shape[-3:])).permute(0, 3, 1, 2)
        with torch.no_grad():
            return kp(x).numpy().reshape(*frames.shape[:-3], 2)

    result: dict[str, Any] = {"options": {**asdict(opts), "models": {k: list(v) for k, v in
                                                                    opts.models.items()}},
                              "splits": {}}
    h = opts.horizon
    for name, split in opts.splits.items():
        root = Path(opts.data)
        if not (root / split).is_dir():
            _progress(f"{name}: no {root / split}, skipped", t0)
            continue
        from export.cells.geometry import GEOMETRY_MANIFEST

        with_geo = all((m.parent / GEOMETRY_MANIFEST).is_file()
                       for m in (root / split).glob("chunk-*/manifest.json"))
        cells = load_cells(root, [split], 7, 8, limit=opts.max_cells, with_geometry=with_geo)
        _progress(f"{name}: {len(cells)} cells" + (", with geometry" if with_geo else ""), t0)
        ctxs = {label: p.contexts(cells, np.random.default_rng(opts.seed))
                for label, p in preds.items()}
        per_cell: dict[str, dict[str, dict[str, list[Any]]]] = {}
        reader_err: list[float] = []
        oracle: dict[str, list[Any]] = {"psnr": [], "motion_psnr": []}
        exact: dict[str, list[Any]] = {"psnr": [], "motion_psnr": []}
        blur: dict[str, list[float]] = {f"{p}/{s}": [] for p in opts.profiles
                                        for s in RETRIEVAL_STEPS}
        sheets: list[np.ndarray] = []
        for i, cell in enumerate(cells):
            mo = cell.motions[0]
            if mo.ee_px is None or mo.joint_positions is None:
                raise ExportError(f"cell {cell.cell_id}: its motion episode lacks ee_px or "
                                  "joint_positions; evaluation needs generated cells")
            start, truth = mo.frames[0], mo.frames[1:h + 1]
            # the start pose's offset from the calibration's home pose (the futures start
            # there too); zeros where the calibration records no joint positions
            offset = ((mo.joint_positions[0] - cell.cal_home) * cell.dof_mask
                      if cell.cal_home is not None else None)
            acts = mo.actions[None, :h]
            ee_gt = mo.ee_px[1:h + 1]
            reader_err.append(float(np.linalg.norm(keypoints(truth[-1:])[0] - ee_gt[-1])))
            ow = oracle_flow_warp(start, truth)
            om = _frame_metrics(ow, truth, start)
            oracle["psnr"].append(om["psnr"])
            oracle["motion_psnr"].append(om["motion_psnr"])
            if mo.geometry is not None:
                em = _frame_metrics(exact_flow_warp(start, mo.geometry, h), truth, start)
                exact["psnr"].append(em["psnr"])
                exact["motion_psnr"].append(em["motion_psnr"])
            params = CellParams.from_json_dict(cell.params)
            futs = {p: load_or_render_futures(root, split, cell.cell_id, gen, params,
                                              mo.joint_positions[0, :cell.num_dof],
                                              opts.candidates, h, p, opts.seed)
                    for p in opts.profiles}
            for p, f in futs.items():
                ctrl = f.frames[:, 1:]
                bl = blur_control(ctrl)
                for s in RETRIEVAL_STEPS:
                    blur[f"{p}/{s}"].append(float(retrieval_hits(bl[:, s - 1],
                                                                 ctrl[:, s - 1]).mean()))
            zero = np.zeros((1, h, acts.shape[-1]), np.float32)
            for label, pr in preds.items():
                rows = per_cell.setdefault(label, {})
                want = opts.model_variants.get(label, opts.variants)
                chosen = tuple(v for v in pr.variants if want is None or v in want)
                for v in chosen + ("copy_last",):
                    r = rows.setdefault(v, {})
                    if v == "copy_last":
                        pred = np.repeat(start[None], h, 0)
                    else:
                        pred = pr.rollout(v, ctxs[label][v][i], start, acts, offset)[0]
                    fm = _frame_metrics(pred, truth, start)
                    for k, val in fm.items():
                        r.setdefault(k, []).append(val)
                    r.setdefault("ee_error_px", []).append(
                        float(np.linalg.norm(keypoints(pred[-1:])[0] - ee_gt[-1])))
                    if v == "calibrated":
                        zp = pr.rollout(v, ctxs[label][v][i], start, zero, offset)[0]
                        r.setdefault("zero_action_psnr", []).append(
                            [frame_psnr(zp[k], start) for k in range(h)])
                        r.setdefault("zero_action_max_abs", []).append(
                            int(np.abs(zp.astype(int) - start.astype(int)).max()))
                        if i < 8:
                            sheets.append(np.concatenate([start[None], truth[[3, 7, 11, 15]],
                                                          pred[[3, 7, 11, 15]]]))
                    if v in opts.retrieval_variants:
                        for p, f in futs.items():
                            if v == "copy_last":
                                fp = np.repeat(f.frames[:, :1], h, 1)
                            else:
                                fa = np.zeros((*f.actions.shape[:2], acts.shape[-1]),
                                              np.float32)
                                fa[..., :f.actions.shape[-1]] = f.actions
                                fp = pr.rollout(v, ctxs[label][v][i], start, fa, offset)
                            for s in RETRIEVAL_STEPS:
                                hits = retrieval_hits(fp[:, s - 1], f.frames[:, s])
                                r.setdefault(f"retrieval/{p}/{s}", []).append(float(hits.mean()))
            if (i + 1) % 8 == 0 or i + 1 == len(cells):
                _progress(f"{name}: cell {i + 1}/{len(cells)}", t0)
        result["splits"][name] = _summarise(split, cells, per_cell, reader_err, oracle, blur)
        if exact["psnr"]:
            result["splits"][name]["exact_flow_warp"] = {k: _mean_steps(v)
                                                         for k, v in exact.items()}
        result["splits"][name]["sheet_rows"] = len(sheets)
        if sheets:
            result.setdefault("_sheets", {})[name] = sheets
    for g in gen_holder:
        g.close()
    result["targets"] = _targets(result)
    return result


def _mean_steps(rows: list[list[float]]) -> list[float]:
    return np.nanmean(np.asarray(rows, float), 0).tolist()


def _summarise(split: str, cells: list, per_cell: dict[str, Any], reader_err: list[float],
               oracle: dict[str, list[Any]], blur: dict[str, list[float]]) -> dict[str, Any]:
    out: dict[str, Any] = {"split": split, "cells": len(cells),
                           "cell_ids": [c.cell_id for c in cells],
                           "ee_reader_error_on_truth_px": float(np.mean(reader_err)),
                           "oracle_flow_warp": {k: _mean_steps(v) for k, v in oracle.items()},
                           "blurred_truth_retrieval": {k: float(np.mean(v))
                                                       for k, v in blur.items()},
                           "models": {}}
    for label, rows in per_cell.items():
        summ: dict[str, Any] = {}
        for v, r in rows.items():
            s: dict[str, Any] = {}
            for k, vals in r.items():
                if k in ("psnr", "ssim", "motion_psnr", "zero_action_psnr"):
                    s[k] = _mean_steps(vals)
                else:
                    s[k] = float(np.nanmean(vals))
            summ[v] = s
        paired: dict[str, Any] = {}
        cal = rows["calibrated"]
        for v, r in rows.items():
            if v == "calibrated":
                continue
            pv: dict[str, Any] = {
                "psnr_step16": _paired([x[-1] for x in cal["psnr"]], [x[-1] for x in r["psnr"]]),
                "motion_psnr_step16": _paired([x[-1] for x in cal["motion_psnr"]],
                                              [x[-1] for x in r["motion_psnr"]]),
                "ee_error_px": _paired(r["ee_error_px"], cal["ee_error_px"]),
            }
            for k in cal:
                if k.startswith("retrieval/") and k in r:
                    pv[k] = _paired(cal[k], r[k])
            paired[v] = pv
        out["models"][label] = {"summary": summ, "paired": paired,
                                "per_cell": {v: {k: vals for k, vals in r.items()}
                                             for v, r in rows.items()}}
    return out


def _targets(result: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets per model and split (value and met)."""
    t: dict[str, Any] = {}
    for name, s in result["splits"].items():
        ob = s["oracle_flow_warp"]
        for label, m in s["models"].items():
            c, cl = m["summary"]["calibrated"], m["summary"]["copy_last"]
            tt: dict[str, Any] = {}
            tt["zero_action_max_abs_le_1"] = {"value": c["zero_action_max_abs"],
                                              "met": c["zero_action_max_abs"] <= 1}
            d_psnr = np.asarray(c["psnr"]) - np.asarray(cl["psnr"])
            d_ssim = np.asarray(c["ssim"]) - np.asarray(cl["ssim"])
            tt["psnr_ssim_ge_copy_last_every_step"] = {
                "min_psnr_gain": float(d_psnr.min()), "min_ssim_gain": float(d_ssim.min()),
                "met": bool(d_psnr.min() >= 0 and d_ssim.min() >= 0)}
            tt["psnr_step16_ge_copy_last_plus_2dB"] = {"value": float(d_psnr[-1]),
                                                      "met": bool(d_psnr[-1] >= 2)}
            mg = c["motion_psnr"][-1] - cl["motion_psnr"][-1]
            og = ob["motion_psnr"][-1] - cl["motion_psnr"][-1]
            tt["motion_psnr_step16_ge_copy_last_plus_3dB"] = {"value": mg, "met": mg >= 3}
            tt["motion_gain_ge_70pct_oracle"] = {"value": mg / og if og > 0 else float("nan"),
                                                 "oracle_gain": og,
                                                 "met": bool(og > 0 and mg >= 0.7 * og)}
            r8 = c.get("retrieval/all_joints/8", float("nan"))
            r16 = c.get("retrieval/all_joints/16", float("nan"))
            b8 = s["blurred_truth_retrieval"].get("all_joints/8", float("nan"))
            tt["retrieval_all_joints"] = {
                "step8": r8, "step16": r16, "blurred_truth_step8": b8,
                "met": bool(r8 >= 0.8 and r16 >= 0.6 and r8 >= 0.85 * b8)}
            for other in ("mislabelled", "zeroed"):
                pv = m["paired"].get(other, {}).get("retrieval/all_joints/8")
                if pv:
                    tt[f"retrieval_step8_minus_{other}_ge_0p30"] = {
                        "value": pv["mean_diff"], "ci95": [pv["ci95_low"], pv["ci95_high"]],
                        "met": bool(pv["mean_diff"] >= 0.3 and pv["ci95_low"] > 0)}
            t.setdefault(label, {})[name] = tt
    for label in t:
        base = result["splits"].get("in_distribution", {}).get("models", {}).get(label)
        if base is None:
            continue
        bp = np.mean(base["summary"]["calibrated"]["psnr"])
        br = base["summary"]["calibrated"].get("retrieval/all_joints/8", float("nan"))
        for name in ("held_out_robot", "stress"):
            s = result["splits"].get(name, {}).get("models", {}).get(label)
            if s is None:
                continue
            dp = bp - np.mean(s["summary"]["calibrated"]["psnr"])
            dr = br - s["summary"]["calibrated"].get("retrieval/all_joints/8", float("nan"))
            t[label][name]["within_3dB_and_0p15_of_in_distribution"] = {
                "psnr_drop": float(dp), "retrieval_drop": float(dr),
                "met": bool(dp <= 3 and dr <= 0.15)}
    return t


def format_frames_table(result: dict[str, Any]) -> str:
    """The evaluation as text: one block per split, one row per model and variant."""
    lines = []
    for name, s in result["splits"].items():
        ob = s["oracle_flow_warp"]
        lines.append(f"== {name} ({s['split']}, {s['cells']} cells)  EE reader error on truth "
                     f"{s['ee_reader_error_on_truth_px']:.2f} px; oracle-flow warp PSNR@16 "
                     f"{ob['psnr'][-1]:.2f} dB, motion@16 {ob['motion_psnr'][-1]:.2f} dB; "
                     "blurred-truth retrieval all_joints@8 "
                     f"{s['blurred_truth_retrieval'].get('all_joints/8', float('nan')):.2f}"
                     + (f"; exact-flow warp PSNR@16 {s['exact_flow_warp']['psnr'][-1]:.2f} dB, "
                        f"motion@16 {s['exact_flow_warp']['motion_psnr'][-1]:.2f} dB"
                        if "exact_flow_warp" in s else ""))
        lines.append(f"{'model':10} {'variant':15} {'PSNR@1':>7} {'PSNR@16':>8} {'meanPSNR':>8} "
                     f"{'SSIM@16':>7} {'mot@16':>7} {'static':>7} {'EE px':>6} "
                     f"{'ret@4':>6} {'ret@8':>6} {'ret@16':>6} {'2j@8':>6} {'zeroPSNR':>8}")
        for label, m in s["models"].items():
            for v, r in m["summary"].items():
                def g(k: str, r: dict[str, Any] = r) -> float:
                    return float(r.get(k, float("nan")))
                zp = r.get("zero_action_psnr")
                lines.append(
                    f"{label:10} {v:15} {r['psnr'][0]:7.2f} {r['psnr'][-1]:8.2f} "
                    f"{np.mean(r['psnr']):8.2f} {r['ssim'][-1]:7.3f} {r['motion_psnr'][-1]:7.2f} "
                    f"{g('static_psnr'):7.2f} {g('ee_error_px'):6.2f} "
                    f"{g('retrieval/all_joints/4'):6.2f} {g('retrieval/all_joints/8'):6.2f} "
                    f"{g('retrieval/all_joints/16'):6.2f} {g('retrieval/two_joint/8'):6.2f} "
                    f"{(min(zp) if zp else float('nan')):8.2f}")
    lines.append("PSNR@k: whole-frame PSNR at step k (dB, identical frames 100); meanPSNR over "
                 "steps 1-16; mot@16: motion-region PSNR at step 16; static: PSNR on pixels "
                 "the truth never changes; EE px: end-effector error at step 16; ret@k: "
                 "futures retrieval top-1 (all_joints, M=8; chance 0.125); 2j@8: two_joint "
                 "profile; zeroPSNR: worst step of a zero-action rollout against its start")
    lines.append("targets:")
    for label, per in result["targets"].items():
        for name, tt in per.items():
            for k, v in tt.items():
                lines.append(f"  {label} {name} {k}: {json.dumps(v)}")
    return "\n".join(lines)


def save_sheets(result: dict[str, Any], out: Path) -> list[Path]:
    """Contact sheets (start, truth at 4/8/12/16, calibrated prediction at the same steps)
    per split and model, from the rows the evaluation kept; returns the PNG paths."""
    import cv2

    from edge.visual import contact_sheet

    paths = []
    for name, rows in result.pop("_sheets", {}).items():
        labels = list(result["options"]["models"])
        n = len(labels)
        tiles = [r for r in rows]
        row_labels = [f"{labels[i % n]}" for i in range(len(tiles))]
        img = contact_sheet(tiles, row_labels=row_labels, tile_labels=[
            ["start", "gt 4", "gt 8", "gt 12", "gt 16", "pred 4", "pred 8", "pred 12",
             "pred 16"]] + [[]] * (len(tiles) - 1), scale=2)
        p = out / f"rollouts_{name}.png"
        cv2.imwrite(str(p), cv2.cvtColor(img, cv2.COLOR_RGB2BGR))
        paths.append(p)
    return paths


def write_frames_eval(result: dict[str, Any], out: Path) -> list[Path]:
    """Write an :func:`evaluate_frames` result as the folder ``out``: the contact sheets
    (:func:`save_sheets`), ``eval_frames.json`` and ``eval_frames.txt`` (the
    :func:`format_frames_table` table, also printed); returns every path written. The
    folder is built beside ``out`` and replaces it whole (an earlier result, a folder
    holding ``eval_frames.json``, or an empty one; :func:`edge.fileio.staged_folder`).

    Raises:
        FileExistsError: ``out`` is a file or a folder of other files.
    """
    from edge.fileio import staged_folder, write_json_atomic
    from export.variants.parity_gates import json_safe

    with staged_folder(out, "eval_frames.json") as stage:
        sheets = [out / p.name for p in save_sheets(result, stage)]
        table = format_frames_table(result)
        write_json_atomic(stage / "eval_frames.json", json_safe(result))
        (stage / "eval_frames.txt").write_text(table + "\n")
    print(table)
    return [out / "eval_frames.json", out / "eval_frames.txt", *sheets]
