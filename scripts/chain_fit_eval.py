"""The calibration-fitted kinematic chain (``export.models.chain_fit``) on the futures.

    python scripts/chain_fit_eval.py --data data/cells --split test_convention \\
        [--cells 16] [--tracks dis|true|both] [--calibration-data data/cells256] \
        [--dis-robot cut|moved|true] [--photometric 128] [--json out.json] [--sheet out.png]

For each cell: the chain is fitted to the calibration episode's tracks (``dis``: OpenCV
DIS optical flow from the home frame on the arm cut from it, what a device has, optionally
refined against the calibration frames; ``true``: the home pixels' true positions from the
cell's geometry, to measure the fit apart from tracking), then every
candidate of the eval-frames futures (8 per cell from the first frame of the first motion
episode, both motion profiles) is predicted from the start frame, the start's joint
readings and the actions, and scored as ``oracle_retrieval.py`` scores its predictions
(futures retrieval, whole-frame and motion-region PSNR against copy-last). Printed: the
fit's axis error against the true home-pose axes (deg, over joints that move at least one
pixel) and its track residual. The camera's pinhole is the cell's own (an input of the
fit).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from oracle_retrieval import FuturesScore  # noqa: E402


def true_tracks(scene, params, home_ctrl: np.ndarray, q_ctrl: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The home frame's robot pixels' true displacement at every calibration frame:
    ``(tracks [T, H, W, 2], valid [T, H, W], robot [H, W])``."""
    from export.cells.geometry import NO_LINK, moved_robot_points, project_points

    conv = params.convention
    qh = conv.to_canonical(home_ctrl.astype(np.float64)[None])[0]
    d, lk, ps, cam = scene.render_geometry(qh)
    h, w = d.shape
    poses = np.stack([scene.link_poses(conv.to_canonical(q[None].astype(np.float64))[0])
                      for q in q_ctrl])
    ys, xs, moved = moved_robot_points(d, lk, ps, poses, cam)
    uv = project_points(moved, cam, w, h)  # (T, N, 2)
    tracks = np.zeros((len(q_ctrl), h, w, 2), np.float32)
    tracks[:, ys, xs, 0] = uv[..., 0] - (xs + 0.5)
    tracks[:, ys, xs, 1] = uv[..., 1] - (ys + 0.5)
    return np.nan_to_num(tracks), np.ones(tracks.shape[:3], bool), lk != NO_LINK


def smooth_noise(shape: tuple[int, ...], rms: float, seed: int) -> np.ndarray:
    """Gaussian noise float32 ``shape`` (``[T, H, W, 2]``), blurred over 2 px in space so
    that neighbouring pixels err together (as a tracker does), scaled to ``rms`` px."""
    import cv2

    rng = np.random.default_rng(seed)
    n = rng.normal(size=shape).astype(np.float32)
    for t in range(shape[0]):
        n[t] = cv2.GaussianBlur(n[t], (0, 0), 2.0)
    return n * (rms / max(float(n[1:].std()), 1e-12))


def axis_errors(fit, scene, params, home_ctrl: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Angle (deg) between each channel's fitted axis and the true one at the home pose
    (in camera coordinates, sign from the convention); NaN where the fit has no axis.
    Second: the same against the true axis or its depth-mirrored twin, whichever is
    nearer (``(-x, -y, z)``: the chain reflected through a plane parallel to the image
    projects the same under an orthographic camera, so a chain mirrored as a whole
    predicts nearly the same frames)."""
    import torch

    from export.cells.geometry import dof_link_poses, true_joint_axes
    from export.models.kinematics import camera_frame

    conv = params.convention
    qh = conv.to_canonical(home_ctrl.astype(np.float64)[None])[0]
    _, _, _, cam = scene.render_geometry(qh)
    axes_w, _, _ = true_joint_axes(scene.link_poses(qh), dof_link_poses(scene.link_poses, qh))
    rot, _, _ = camera_frame(torch.from_numpy(cam), 64, 64)
    rot = rot.numpy()
    out = np.full(len(conv.perm), np.nan)
    mirror = out.copy()
    for c, (j, s) in enumerate(zip(conv.perm, conv.signs, strict=True)):
        if fit.carried[c].sum() < 3 or not axes_w[j].any():
            continue
        true = s * (rot @ axes_w[j])
        out[c] = np.degrees(np.arccos(np.clip(true @ fit.axes[c], -1, 1)))
        twin = true * np.array([-1.0, -1.0, 1.0])
        mirror[c] = min(out[c], np.degrees(np.arccos(np.clip(twin @ fit.axes[c], -1, 1))))
    return out, mirror


def mislabelled_fit(fit, rng: np.random.Generator):
    """The fit as read from a calibration whose channels were relabelled (channel j holds
    what was channel ``perm[j]``, its reading sign-flipped where ``signs[j]`` is -1; a
    permutation without fixed points, at least one flip: the eval-frames mislabelling)
    while the actions keep their true labels. Returns a copy with the channel fields
    permuted and flipped."""
    import copy

    from export.evaluation.zero_shot import _mislabelling

    k = len(fit.axes)
    conv = _mislabelling(rng, k)
    perm, signs = np.asarray(conv.perm), np.asarray(conv.signs, np.float64)
    out = copy.copy(fit)
    out.axes = fit.axes[perm] * signs[:, None]
    out.pivots = fit.pivots[perm]
    out.carried = fit.carried[perm]
    out.rad_per_unit = fit.rad_per_unit[perm]
    out.residual_px = fit.residual_px[perm]
    return out


_GEN256: list = []


def renderer_256():
    """The one 256x256 :class:`CellGenerator` (no segmentation) the timing variants and the
    rendered motion share, made on first use."""
    from export.cells.generate import CellGenerator, GenerateOptions

    if not _GEN256:
        _GEN256.append(CellGenerator(GenerateOptions(width=256, height=256,
                                                     segmentation=False)))
    return _GEN256[0]


def timed_chain(args, variant, cell, params, cal, index: int, motion=None, anchor=None):
    """The cell's chain read by :func:`read_chain_calibration` from its calibration sweep
    rendered at 256x256 at ``variant``'s timing (kept in ``args.fits``); with ``motion``
    (``(episode, where)``) also that read refined with it by
    :func:`refine_chain_with_motion` (kept as ``..._motion.npz``); with ``anchor``
    (``(start frame uint8 [H, W, 3], joint readings float64 [K])``) also that read anchored
    at the start by :func:`anchor_chain_to_start` against the same sweep (kept as
    ``..._anchor.npz``): ``(chain, refined, anchored)``, None for what was not asked."""
    from dataclasses import replace

    from edge.runtime.chain import load_chain_calibration, save_chain_calibration
    from export.cells.robots import robot_spec
    from export.evaluation.calibration_timing import _variant_sweeps, retimed_positions
    from export.models.chain_fit import (
        anchor_chain_to_start,
        read_chain_calibration,
        refine_chain_with_motion,
    )

    saved = (Path(args.fits) / f"{cell.cell_id}_timing_{variant.name}.npz"
             if args.fits else None)
    kept = {k: (saved.with_name(f"{saved.stem}{k}.npz") if saved is not None else None)
            for k in ("", "_motion", "_anchor")}
    if args.twins and saved is not None:  # anchored with the twin choice: kept apart
        kept["_anchor"] = saved.with_name(f"{saved.stem}_anchor_twins.npz")
    wanted = {"": True, "_motion": motion is not None, "_anchor": anchor is not None}
    out = {k: (load_chain_calibration(kept[k]) if want and kept[k] is not None
               and kept[k].is_file() else None) for k, want in wanted.items()}
    if all(out[k] is not None for k, want in wanted.items() if want):
        return out[""], out["_motion"], out["_anchor"]
    conv = params.convention
    limits = np.asarray(robot_spec(params.robot).limits_rad, np.float64)
    rng = np.random.default_rng(args.seed + 7919 * index)
    q = retimed_positions(np.asarray(cal.joint_positions[0], np.float64),
                          _variant_sweeps(cal, conv, limits, variant, rng), variant)
    ep = renderer_256().render_episode(params, conv.to_canonical(q), "calibration")
    ep = replace(ep, timestamps=np.arange(len(q), dtype=np.float64) / variant.rate_hz,
                 ee_px=None, robot_mask=None,
                 metadata=replace(ep.metadata, fps=float(variant.rate_hz), segments=()))
    t0 = time.perf_counter()
    if out[""] is None:
        out[""] = read_chain_calibration(ep, size=cal.frames.shape[1:3])
        print(f"  {cell.cell_id}: {variant.name} sweep of {len(q)} frames read in "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    if wanted["_motion"] and out["_motion"] is None:
        out["_motion"] = refine_chain_with_motion(out[""], ep, [motion])
    if wanted["_anchor"] and out["_anchor"] is None:
        out["_anchor"] = anchor_chain_to_start(out[""], ep, *anchor, twins=args.twins)
        print(f"  {cell.cell_id}: {variant.name} read anchored at the start in "
              f"{out['_anchor'].info['anchor']['seconds']:.0f} s", file=sys.stderr, flush=True)
    if saved is not None:
        saved.parent.mkdir(parents=True, exist_ok=True)
        for k, want in wanted.items():
            if want and not kept[k].is_file():
                save_chain_calibration(kept[k], out[k])
    return out[""], out["_motion"], out["_anchor"]


def composition_episode(params, q_home, count: int, amplitude: float, seed: int,
                        planned: bool = False, poses: bool = False, latency_frames: int = 0):
    """:func:`export.evaluation.motion_programs.composition_episode` rendered at 256x256
    (``--composition``)."""
    from export.evaluation.motion_programs import composition_episode as render

    return render(renderer_256(), params, q_home, count, amplitude, seed, planned=planned,
                  poses=poses, latency_frames=latency_frames)


def anchored_stats(cell_id: str, chain, scene, params, home_q) -> dict:
    """One row of the JSON's ``fit.<read>_anchor``: an anchored chain's axis errors against
    the cell's true axes (and their twins), residuals, arm pixels, anchoring seconds and
    the twins its anchoring kept (None without ``--twins``)."""
    err, err_mirror = axis_errors(chain, scene, params, home_q)
    return {"cell": cell_id, "axis_error_deg": err.tolist(),
            "axis_error_or_twin_deg": err_mirror.tolist(),
            "residual_px": chain.residual_px.tolist(), "robot_px": int(chain.robot.sum()),
            "seconds": float(chain.info["anchor"]["seconds"]),
            "twins": chain.info.get("twins")}


def high_calibration(cache: dict, hi_dir: Path | None, cal):
    """The cell's calibration episode at ``--calibration-data``'s resolution (from
    ``hi_dir``; None: ``cal`` itself), read once per ``cache`` (one dict per cell)."""
    from edge.episode import load_episode

    if "cal" not in cache:
        cache["cal"] = load_episode(hi_dir / "calibration.npz") if hi_dir is not None else cal
    return cache["cal"]


KEPT_COMPOSITION_AMPLITUDE = 0.5
"""rad: the --composition-amplitude whose kept refinements carry no amplitude in their names
(the default; files kept before the amplitude was named were all made at it)."""


def motion_tag(kind: str, count: int, amplitude: float, latency_frames: int = 0) -> str:
    """The part of a kept motion refinement's name that says which motion refined it:
    ``""`` for the cell's motion-01 episode (``count`` 0), else ``_<kind><count>``, then
    ``_amp<R>rad`` where the amplitude differs from :data:`KEPT_COMPOSITION_AMPLITUDE` and
    ``_lat<L>`` where the frames lag the readings (``kind`` one of ``comp``, ``plan``,
    ``poses``; ``amplitude`` in rad). Two runs that differ in any of these never share a
    kept file."""
    if not count:
        return ""
    tag = f"_{kind}{count}"
    if amplitude != KEPT_COMPOSITION_AMPLITUDE:
        tag += f"_amp{amplitude:g}rad"
    if latency_frames:
        tag += f"_lat{latency_frames}"
    return tag


#: ``--controller-units``: how a controller reports the joints: ``deg`` (degrees) or
#: ``range`` (each joint's limits mapped to -100..100, as LeRobot's normalised range does).
CONTROLLER_UNITS = ("deg", "range")


def controller_factors(units: str, limits_ctrl: np.ndarray) -> np.ndarray:
    """Readings per rad of each controller channel ``[K]`` for ``units``
    (:data:`CONTROLLER_UNITS`); ``limits_ctrl`` float64 ``[K, 2]``, rad, controller order."""
    if units == "deg":
        return np.full(len(limits_ctrl), 180.0 / np.pi)
    return 200.0 / np.abs(limits_ctrl[:, 1] - limits_ctrl[:, 0])


def units_chain(args, cell, hi, factors: np.ndarray, size: tuple[int, int]):
    """The cell's chain read by :func:`read_chain_calibration` (``joint_scale="auto"``, as a
    device does, on the model's grid ``size``) from its 256x256 calibration episode ``hi``
    with the readings in
    ``args.controller_units`` (rad times ``factors``), kept in ``args.fits`` as
    ``<cell>_units_<U>.npz``; returned in rad (``rad_per_unit`` times ``factors``, the home
    readings divided by them) so that it rolls out the futures' rad actions, with each
    channel's fitted turn per unit over the true one."""
    from dataclasses import replace

    from edge.runtime.chain import load_chain_calibration, save_chain_calibration
    from export.models.chain_fit import read_chain_calibration

    saved = (Path(args.fits) / f"{cell.cell_id}_units_{args.controller_units}.npz"
             if args.fits else None)
    if saved is not None and saved.is_file():
        chain = load_chain_calibration(saved)
    else:
        t0 = time.perf_counter()
        ep = replace(hi, joint_positions=np.asarray(hi.joint_positions, np.float64)
                     * np.concatenate([factors, np.ones(hi.num_dof - len(factors))]))
        chain = read_chain_calibration(ep, size=size, joint_scale="auto")
        print(f"  {cell.cell_id}: read in {args.controller_units} in "
              f"{time.perf_counter() - t0:.0f} s, turn per unit over the truth "
              f"{np.round(chain.rad_per_unit * factors, 3).tolist()}", file=sys.stderr,
              flush=True)
        if saved is not None:
            saved.parent.mkdir(parents=True, exist_ok=True)
            save_chain_calibration(saved, chain)
    ratio = chain.rad_per_unit * factors
    in_rad = replace(chain, rad_per_unit=ratio,
                     home_joint_positions=np.asarray(chain.home_joint_positions) / factors)
    return in_rad, ratio


def fovy_chain(args, cell, hi, fovy_deg: float, factor: float, size: tuple[int, int]):
    """The cell's chain read by :func:`read_chain_calibration` (as a device does, on the
    model's grid ``size``) from its 256x256 calibration episode ``hi`` with the camera's
    vertical field of view ``fovy_deg`` given wrong: ``tan(fovy/2)`` times ``factor``. Kept
    in ``args.fits`` as ``<cell>_fovy_<factor>.npz``; rolled out with the focal length it
    was read with, as a device given that field of view would."""
    from edge.runtime.chain import load_chain_calibration, save_chain_calibration
    from export.models.chain_fit import read_chain_calibration

    saved = (Path(args.fits) / f"{cell.cell_id}_fovy_{factor:g}.npz" if args.fits else None)
    if saved is not None and saved.is_file():
        return load_chain_calibration(saved)
    given = float(np.degrees(2.0 * np.arctan(np.tan(np.radians(fovy_deg) / 2.0) * factor)))
    t0 = time.perf_counter()
    chain = read_chain_calibration(hi, size=size, fovy_deg=given)
    print(f"  {cell.cell_id}: read with fovy {given:.2f} deg (true {fovy_deg:.2f}) in "
          f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    if saved is not None:
        saved.parent.mkdir(parents=True, exist_ok=True)
        save_chain_calibration(saved, chain)
    return chain


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="cells folder")
    p.add_argument("--split", required=True)
    p.add_argument("--cells", type=int, default=16, help="N cells (default 16)")
    p.add_argument("--skip", type=int, default=0,
                   help="start after this many cells of the split (default 0: the first)")
    p.add_argument("--tracks", choices=("dis", "true", "both", "none"), default="both",
                   help="the fit's tracks; none: no fit (with --warp-model: that model and "
                        "copy-last only)")
    p.add_argument("--calibration-data", help="read each cell's calibration episode for "
                                              "tracking from this cells folder instead "
                                              "(the same cells rendered at a higher "
                                              "resolution, --size of cells generate)")
    p.add_argument("--track-noise", type=float, default=0.0,
                   help="add spatially smooth noise of this RMS (px, per axis) to the true "
                        "tracks (how exact a tracker must be)")
    p.add_argument("--colour-tracks", choices=("on", "off", "fallback"), default="on",
                   help="DIS on the grey frames and the colour-opponent channels, the best "
                        "colour match kept per pixel, as read_chain does (default), or on "
                        "grey alone (every read kept before this option), or colour only "
                        "where grey's tracks fail the forward-backward check (fallback)")
    p.add_argument("--dis-robot", choices=("cut", "moved", "true"), default="cut",
                   help="which home pixels the DIS fit reads: the arm cut from the home "
                        "frame by sweep_robot_mask (default), those DIS moves by more than "
                        "half a pixel, or the cell's true moving robot pixels (to measure "
                        "the mask apart from the tracks)")
    p.add_argument("--photometric", type=int, default=0, metavar="SIZE",
                   help="refine the DIS fit against the calibration frames resized to "
                        "SIZE x SIZE (refine_photometric; 0: no refinement)")
    p.add_argument("--warp-model", metavar="DIR",
                   help="also score this exported model (e.g. models/reference, ONNX Runtime "
                        "on the CPU) with each cell's calibration episode, on the same futures")
    p.add_argument("--fits", metavar="DIR",
                   help="keep each cell's fitted chain here (<cell>_<tracks>.npz, the "
                        "runtime's chain calibration) and reuse it when present: scoring "
                        "other rollouts of the same fits takes seconds per cell")
    p.add_argument("--mislabelled", action="store_true",
                   help="also score each fit read as if the calibration's channels were "
                        "relabelled (a permutation without fixed points and sign flips, "
                        "the eval-frames mislabelling) while the actions keep theirs")
    p.add_argument("--other-cell", action="store_true",
                   help="also score each cell with another cell's chain calibration (the next "
                        "cell of the split with as many channels, from --fits, where every "
                        "cell's fit must already be), rolled out by the runtime as a user "
                        "who stored the wrong cell's calibration would")
    p.add_argument("--calibration-timing", metavar="VARIANT",
                   help="also read each cell's chain, as a device does "
                        "(read_chain_calibration), from its calibration sweep rendered "
                        "again at 256x256 at this timing of the calibration-timing matrix "
                        "(export.evaluation.calibration_timing.DEFAULT_MATRIX, e.g. "
                        "30Hz-2s-all, or ONE_CHANGE_VARIANTS, e.g. 30Hz-2s-amp), scored as "
                        "timing_<VARIANT> (kept in --fits as <cell>_timing_<VARIANT>.npz)")
    p.add_argument("--motion-refine", action="store_true",
                   help="also refine each DIS read (and --calibration-timing read) with the "
                        "cell's second motion episode (motion-01 of --calibration-data: "
                        "ordinary motion, not the episode the futures start from) by "
                        "refine_chain_with_motion, scored as chain_dis_motion (and "
                        "timing_<VARIANT>_motion); kept in --fits as <read>_motion.npz")
    p.add_argument("--controller-units", choices=CONTROLLER_UNITS,
                   help="also read each cell's chain, as a device does (read_chain_calibration, "
                        "--joint-scale auto), from its 256x256 calibration with the joint "
                        "readings as a controller in these units reports them: deg, or range "
                        "(each joint's limits mapped to -100..100, as LeRobot's normalised "
                        "range); scored as units_<U> on the same rad futures, with each "
                        "channel's fitted turn per unit over the true one (kept in --fits as "
                        "<cell>_units_<U>.npz)")
    p.add_argument("--fovy-error", type=float, action="append", metavar="FACTOR",
                   help="also read each cell's chain, as a device does (read_chain_calibration), "
                        "from its 256x256 calibration with a field of view given wrong: "
                        "tan(fovy/2) times FACTOR (0.8: a focal length 25%% longer than the "
                        "camera's); repeatable; scored as fovy_<FACTOR> (kept in --fits as "
                        "<cell>_fovy_<FACTOR>.npz)")
    p.add_argument("--candidates", type=int, default=8)
    p.add_argument("--horizon", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--sheet", help="contact sheet (PNG): the first 4 cells' first "
                                   "all-joints candidate at steps 4, 8, 16")
    p.add_argument("--anchor", action="store_true",
                   help="also anchor each DIS read (and its --motion-refine read) at the "
                        "futures' start frame with the 256x256 calibration "
                        "(anchor_chain_to_start, as simulate/precheck --anchor do), scored as "
                        "chain_dis_anchor (and chain_dis_motion_anchor; a "
                        "--calibration-timing read against its own sweep, as "
                        "timing_<VARIANT>_anchor); kept in --fits as "
                        "<read>_anchor.npz")
    p.add_argument("--anchor-at", choices=("start", "other"), default="start",
                   help="with --anchor, the frame each read is anchored at: the futures' "
                        "start frame (default), or the first frame of the cell's other "
                        "motion episode (another pose, as a frame taken once at "
                        "commissioning would be; kept as <read>_anchor_other.npz) while the "
                        "futures still start from the first episode's start")
    p.add_argument("--twins", action="store_true",
                   help="with --anchor (--motion-refine), let the anchoring (the "
                        "refinement with motion) first swap channels for their "
                        "depth-mirrored twins where its frames and the sweep say so "
                        "(twins=True, choose_twins); kept as <read>_anchor[_other]_twins.npz "
                        "(<cell>_dis_motion_twins.npz), the kept twins in the JSON's "
                        "fit.<read>[].twins; with --motion-refine this is what "
                        "read-chain --motion FILE does by default, without it what "
                        "--no-twins does)")
    p.add_argument("--composition", type=int, default=0, metavar="N",
                   help="with --motion-refine: refine with N poses of every joint turned "
                        "together about the calibration's home pose (rendered here, "
                        "composition_episode) instead of the cell's motion-01 episode; "
                        "kept as <cell>_dis_motion_compN[_amp<R>rad][_twins].npz")
    p.add_argument("--composition-amplitude", type=float, default=0.5, metavar="RAD",
                   help="with --composition: each joint's largest offset from home (rad; "
                        "default 0.5; another amplitude is named in the kept files, _amp<R>rad)")
    p.add_argument("--composition-plan", action="store_true",
                   help="with --composition N: the N episode frames of the planner's "
                        "validation motion (calibrate plan --motion, plan_motion, "
                        "half range --composition-amplitude) instead of independent poses; "
                        "kept as <cell>_dis_motion_planN[_amp<R>rad][_twins].npz")
    p.add_argument("--composition-poses", action="store_true",
                   help="with --composition N: every frame of the planner's held-poses "
                        "program (calibrate plan --poses N, plan_poses, half range "
                        "--composition-amplitude; the refinement reads the holds' middle "
                        "frames); kept as <cell>_dis_motion_posesN[_amp<R>rad][_latL][_twins].npz")
    p.add_argument("--motion-latency-frames", type=int, default=0, metavar="L",
                   help="with --composition: the rendered frames lag the joint readings by "
                        "L frames (a camera late against the controller); default 0")
    p.add_argument("--anchor-twin-refine-steps", type=int, default=0, metavar="N",
                   help="with --anchor --twins, refine each twin and the current fit N "
                        "steps before comparing them at the anchoring (choose_twins "
                        "refine_steps; 0, the default: compared as drawn); kept as "
                        "<read>_anchor[_other]_twins_rN.npz")
    p.add_argument("--carry-rim", action="store_true",
                   help="roll the chain out carrying the arm's rim with it "
                        "(chain_rollout(carry_rim=True); docs/eval/experiments.md, "
                        "\"Carrying the arm's rim\")")
    p.add_argument("--camera-noise", type=float, default=None, metavar="LEVELS",
                   help="read every cell's calibration episode as a real camera delivers it: "
                        "Gaussian sensor noise of this standard deviation (uint8 levels; "
                        "export.evaluation.frames.camera_degrade) on the --calibration-data "
                        "frames, reduced to the model's grid by area averaging as a device "
                        "does (on_grid); the futures' start frame and truth stay as "
                        "rendered (0: no noise, the control: the grid reduced from the "
                        "--calibration-data frames alone). Needs --fits of its own "
                        "(camera.json there records the setting)")
    p.add_argument("--camera-jpeg", type=int, default=None, metavar="QUALITY",
                   help="... and each calibration frame JPEG-compressed at this quality "
                        "(1-100; ROS image transport's default is 80)")
    p.add_argument("--light", type=float, default=None, metavar="SCALE",
                   help="the light changed since the cell was calibrated: the futures' "
                        "start frame and truth rendered with the cell's lights scaled by "
                        "SCALE (CellParams.with_light; the calibration as recorded), cached "
                        "under FITS/futures_light<SCALE>/; anchoring reads the lit start. "
                        "Needs --fits of its own (camera.json there records the setting; "
                        "copy the clean reads <cell>_dis.npz there to score them)")
    p.add_argument("--light-only", type=int, default=None, metavar="I",
                   help="with --light: scale only the cell's light I (0 or 1; the ambient "
                        "stays): one lamp dimmed or off, unevenly across the picture")
    p.add_argument("--lens-k1", type=float, default=None, metavar="K1",
                   help="every frame as a lens with radial distortion K1 shows it "
                        "(export.evaluation.frames.lens_distort, the cell's own field of view; "
                        "barrel below 0): the 256x256 calibration before it is reduced to "
                        "the grid, the futures' start frame, truth and robot mask at the "
                        "grid; the chain is read and rolled out as a pinhole. Needs --fits of "
                        "its own (camera.json)")
    p.add_argument("--light-ramp", type=float, default=None, metavar="LOW",
                   help="light that changed unevenly since the calibration: the futures' "
                        "start frame and truth multiplied by a ramp from LOW at the left edge "
                        "to 1 at the right (the calibration as recorded); needs --fits of its "
                        "own (camera.json)")
    args = p.parse_args(argv)
    if args.light_only is not None and args.light is None:
        p.error("--light-only needs --light")
    camera = None
    if (args.camera_noise is not None or args.camera_jpeg is not None or args.light is not None
            or args.lens_k1 is not None or args.light_ramp is not None):
        camera = {"noise_levels": args.camera_noise or 0.0, "jpeg_quality": args.camera_jpeg}
        if args.lens_k1 is not None:
            camera["lens_k1"] = args.lens_k1
        if args.light_ramp is not None:
            camera["light_ramp"] = args.light_ramp
        if args.light is not None:
            camera["light"] = args.light
            if args.light_only is not None:
                camera["light_only"] = args.light_only
        if not args.calibration_data:
            p.error("--camera-noise/--camera-jpeg/--light need --calibration-data")
        if not args.fits:
            p.error("--camera-noise/--camera-jpeg/--light need --fits DIR of their own "
                    "(reads of degraded calibrations, anchorings at a relit start, are kept "
                    "apart from clean ones)")
        kept = Path(args.fits) / "camera.json"
        if kept.is_file():
            if json.loads(kept.read_text()) != camera:
                p.error(f"{kept} records {kept.read_text().strip()}, not {camera}: "
                        "use another --fits folder for another camera setting")
        elif (Path(args.fits).is_dir() and any(Path(args.fits).glob("*.npz"))
              and args.light is None and args.lens_k1 is None and args.light_ramp is None):
            p.error(f"--fits {args.fits} holds reads without camera.json (clean reads?): "
                    "use another folder for degraded calibrations")
        else:
            Path(args.fits).mkdir(parents=True, exist_ok=True)
            kept.write_text(json.dumps(camera) + "\n")
    elif args.fits and (Path(args.fits) / "camera.json").is_file():
        p.error(f"--fits {args.fits} holds reads of degraded calibrations (camera.json): "
                "pass the same --camera-noise/--camera-jpeg, or another folder")
    os.environ.setdefault("MUJOCO_GL", "egl")
    import cv2
    import torch

    from edge.episode import load_episode
    from edge.runtime.chain import (
        AUTO_ANCHOR_BELOW,
        chain_rollout,
        load_chain_calibration,
        save_chain_calibration,
        start_agreement,
    )

    if args.carry_rim:
        chain_rollout = functools.partial(chain_rollout, carry_rim=True)
    from export.cells.futures import load_or_render_futures
    from export.cells.generate import CellGenerator, GenerateOptions
    from export.cells.sampling import CellParams
    from export.models.chain_fit import (
        as_calibration,
        calibration_background,
        fit_chain,
        predict_frames,
        refine_photometric,
        sweep_robot_mask,
        sweep_tracks,
    )
    from export.models.kinematics import camera_frame
    from export.train.data import load_cells

    torch.set_num_threads(int(os.environ.get("SYNCEDGE_THREADS", "2")))
    kinds = {"both": ("dis", "true"), "none": ()}.get(args.tracks, (args.tracks,))
    preds_names = (["copy_last"] + [f"fit_{k}" for k in kinds] + [f"fit_{k}_fill" for k in kinds]
                   + [f"fit_{k}_fill_rim0" for k in kinds])
    if args.mislabelled:
        preds_names += [f"fit_{k}_fill_mislabelled" for k in kinds]
    variant = None
    if args.calibration_timing:
        from export.evaluation.calibration_timing import DEFAULT_MATRIX, ONE_CHANGE_VARIANTS

        by_name = {v.name: v for v in DEFAULT_MATRIX + ONE_CHANGE_VARIANTS}
        if args.calibration_timing not in by_name:
            p.error(f"--calibration-timing {args.calibration_timing}: expected one of "
                    f"{', '.join(by_name)}")
        variant = by_name[args.calibration_timing]
    if args.motion_refine and ("dis" not in kinds or not args.calibration_data):
        p.error("--motion-refine needs --tracks dis (or both) and --calibration-data")
    if args.anchor and ("dis" not in kinds or not args.calibration_data):
        p.error("--anchor needs --tracks dis (or both) and --calibration-data")
    if args.twins and not (args.anchor or args.motion_refine):
        p.error("--twins needs --anchor or --motion-refine")
    if args.composition and not args.motion_refine:
        p.error("--composition needs --motion-refine")
    if (args.composition_poses or args.motion_latency_frames) and not args.composition:
        p.error("--composition-poses and --motion-latency-frames need --composition N")
    if args.composition_poses and args.composition_plan:
        p.error("--composition-plan and --composition-poses: expected one of them")
    if args.motion_latency_frames < 0:
        p.error(f"--motion-latency-frames {args.motion_latency_frames}: expected 0 or more")
    if args.composition < 0 or args.composition_amplitude <= 0:
        p.error("--composition N and --composition-amplitude RAD: expected positive values")
    if args.anchor_twin_refine_steps and not (args.anchor and args.twins):
        p.error("--anchor-twin-refine-steps needs --anchor --twins")
    if args.anchor_twin_refine_steps < 0:
        p.error(f"--anchor-twin-refine-steps {args.anchor_twin_refine_steps}: expected 0 or more")
    if args.anchor_at != "start" and (not args.anchor or variant is not None):
        p.error("--anchor-at other needs --anchor, and is not taken with "
                "--calibration-timing (whose read is anchored at the start)")
    if args.controller_units and not args.calibration_data:
        p.error("--controller-units needs --calibration-data (the 256x256 calibrations)")
    if args.fovy_error and not args.calibration_data:
        p.error("--fovy-error needs --calibration-data (the 256x256 calibrations)")
    if any(not 0.2 <= f <= 5.0 for f in args.fovy_error or ()):
        p.error(f"--fovy-error {args.fovy_error}: expected factors in [0.2, 5]")
    if (variant is not None or args.motion_refine or args.controller_units
            or args.anchor or args.fovy_error) and "dis" in kinds:
        # the runtime's rollout of the planner-timing read, beside the reads compared with it
        preds_names += ["chain_dis"]
    if variant is not None:
        preds_names += [f"timing_{variant.name}"]
    if args.motion_refine:
        preds_names += ["chain_dis_motion"]
        if variant is not None:
            preds_names += [f"timing_{variant.name}_motion"]
    if args.anchor:
        preds_names += ["chain_dis_anchor"] + (["chain_dis_motion_anchor"]
                                               if args.motion_refine else [])
        if variant is not None:
            preds_names += [f"timing_{variant.name}_anchor"]
    if args.controller_units:
        preds_names += [f"units_{args.controller_units}"]
        fit_stats_units: list[dict] = []
    fit_stats_fovy: dict[str, list[dict]] = {}
    for factor in args.fovy_error or ():
        preds_names += [f"fovy_{factor:g}"]
        fit_stats_fovy[f"fovy_{factor:g}"] = []
    if args.other_cell:
        if not args.fits:
            p.error("--other-cell needs --fits (every cell's fit, read first)")
        preds_names += [f"fit_{k}_other_cell" for k in kinds]
    warp = None
    if args.warp_model:
        from edge.runtime.context import encode_calibration
        from edge.runtime.model import load_model
        from edge.runtime.rollout import Rollout

        warp = load_model(args.warp_model, intra_op_num_threads=2)
        preds_names.append("warp")
    from dataclasses import replace as _replace

    from export.evaluation.frames import (
        blur_control,
        camera_degrade,
        lens_distort,
        oracle_flow_warp,
    )
    from export.models.chain_fit import on_grid

    # the futures' start frame and truth are not the rendered episode's (anchoring reads
    # the start from them)
    futures_altered = (args.light is not None or args.lens_k1 is not None
                       or args.light_ramp is not None)

    t0 = time.perf_counter()
    cells = load_cells(args.data, [args.split], 7, 8,
                       limit=args.skip + args.cells)[args.skip:]
    gen = CellGenerator(GenerateOptions())
    score = FuturesScore()
    fit_stats: dict[str, list] = {k: [] for k in kinds}
    if variant is not None:
        fit_stats[f"timing_{variant.name}"] = []
    track_err: list[float] = []
    track_err_far: list[float] = []  # the farthest quarter of the moving samples
    # per chain calibration row: the share of the arm it draws at the start (zero actions)
    # that lies on the true robot mask (where the rollout begins, before any action)
    start_precision: dict[str, list[float]] = {}
    start_estimate: dict[str, list[float]] = {}  # the same read from the background alone
    auto_anchored: list[bool] = []  # per cell: the default (chain_auto) anchored it
    sheet_rows: list[np.ndarray] = []
    other_of: dict[tuple[str, str], object] = {}
    if args.other_cell:
        for kind in kinds:
            chains = []
            for cell in cells:
                path = Path(args.fits) / f"{cell.cell_id}_{kind}.npz"
                if not path.is_file():
                    p.error(f"--other-cell: {path} missing; run once without --other-cell "
                            "and with --fits to fit every cell first")
                chains.append(load_chain_calibration(path))
            for i, cell in enumerate(cells):
                others = [chains[(i + j) % len(cells)] for j in range(1, len(cells))
                          if chains[(i + j) % len(cells)].num_dof == chains[i].num_dof]
                if not others:
                    p.error(f"--other-cell: no other cell with {chains[i].num_dof} channels")
                other_of[(cell.cell_id, kind)] = others[0]
    for i, cell in enumerate(cells):
        params = CellParams.from_json_dict(cell.params)
        scene = gen.scene(params.robot)
        scene.apply_cell(params)
        mo = cell.motions[0]
        cal = load_episode(Path(mo.path).parent / "calibration.npz")
        n = cal.num_dof
        qc = np.asarray(cal.joint_positions, np.float64)[:, :n]
        names = list(cal.metadata.dof_names)
        segments = [None] * n
        for sgm in cal.metadata.segments:
            segments[names.index(sgm.dof)] = (sgm.start, sgm.stop + 1)
        q0 = mo.joint_positions[0, :n].astype(np.float64)
        hi_dir = (Path(args.calibration_data) / os.path.relpath(
            Path(mo.path).parent.resolve(), Path(args.data).resolve())
            if args.calibration_data else None)
        hi_cache: dict = {}

        # the futures as rendered, or (--light) with the cell's lights scaled, cached apart
        lit = (params.with_light(args.light, args.light_only) if args.light is not None
               else None)
        fut_root = (Path(args.fits) / (f"futures_light{args.light:g}" + (
            f"_only{args.light_only}" if args.light_only is not None else ""))
            if lit is not None else args.data)

        fut_of_cell: dict[str, object] = {}  # profile -> this cell's futures, read once

        def futures_of(prof, cell=cell, view=lit or params, q0=q0, root=fut_root,
                       done=fut_of_cell):
            if prof in done:
                return done[prof]
            fut = load_or_render_futures(root, args.split, cell.cell_id, lambda: gen, view,
                                         q0, args.candidates, args.horizon, prof, args.seed)
            if args.lens_k1 is not None:  # as the lens shows them
                fovy = view.fovy_deg
                mask = lens_distort(np.repeat(fut.robot_mask[..., None].astype(np.uint8)
                                              * 255, 3, -1), fovy, args.lens_k1)[..., 0]
                fut = _replace(fut, frames=lens_distort(fut.frames, fovy, args.lens_k1),
                               robot_mask=mask >= 128)
            if args.light_ramp is not None:  # dimmer towards the left edge
                ramp = np.linspace(args.light_ramp, 1.0, fut.frames.shape[-2])[:, None]
                fut = _replace(fut, frames=np.clip(np.rint(fut.frames * ramp), 0, 255)
                               .astype(np.uint8))
            done[prof] = fut
            return fut
        if camera is not None and (camera["noise_levels"] or camera["jpeg_quality"]
                                   or args.lens_k1 is not None):
            # the calibration as the cell's camera and its transport deliver it (a seed
            # per cell)
            hi0 = high_calibration({}, hi_dir, cal)
            seen = hi0.frames
            if args.lens_k1 is not None:
                seen = lens_distort(seen, params.fovy_deg, args.lens_k1)
            hi_cache["cal"] = _replace(hi0, frames=camera_degrade(
                seen, camera["noise_levels"], camera["jpeg_quality"],
                zlib.crc32(cell.cell_id.encode())))
            # the model's grid from the same recording, as a device reduces it
            cal = _replace(cal, frames=on_grid(hi_cache["cal"].frames, cal.frames.shape[1:3]))
        elif params.lighting in ("lit", "shadowed") and hi_dir is not None:
            # a lit (or shadowed) cell's 64 px render and its 256 px render reduced differ
            # by 2-3 levels on average (aliasing at shaded edges; under 1 level ambient): the
            # chain's home frame from the same recording as the sweep it anchors with, as on
            # a device
            cal = _replace(cal, frames=on_grid(high_calibration(hi_cache, hi_dir, cal).frames,
                                               cal.frames.shape[1:3]))
        d0, _, _, cam = scene.render_geometry(
            params.convention.to_canonical(qc[:1])[0])
        _, f, c = camera_frame(torch.from_numpy(cam), 64, 64)
        truth_tracks = true_tracks(scene, params, qc[0], qc) if kinds else None
        fits = {}
        calibrations = {}  # kind -> the runtime's chain calibration of that fit
        for kind in kinds:
            tf = time.perf_counter()
            saved = Path(args.fits) / f"{cell.cell_id}_{kind}.npz" if args.fits else None
            if saved is not None and saved.is_file():
                chain = load_chain_calibration(saved)
                err, err_mirror = axis_errors(chain, scene, params, qc[0])
                fits[kind] = (chain, (chain.background, chain.background_seen))
                calibrations[kind] = chain
                fit_stats[kind].append({"cell": cell.cell_id, "axis_error_deg": err.tolist(),
                                        "axis_error_or_twin_deg": err_mirror.tolist(),
                                        "residual_px": chain.residual_px.tolist(),
                                        "robot_px": int(chain.robot.sum()),
                                        "seconds": float(chain.info.get("seconds", np.nan))})
                continue
            if kind == "true":
                tracks, valid, robot = truth_tracks
                if args.track_noise > 0:
                    tracks = tracks + smooth_noise(tracks.shape, args.track_noise,
                                                   args.seed + i)
            else:
                hi = high_calibration(hi_cache, hi_dir, cal)
                tracks, valid = sweep_tracks(hi.frames, size=cal.frames.shape[1:3],
                                             colour={"on": True, "off": False}.get(args.colour_tracks, args.colour_tracks))
                tt, _, rb = truth_tracks
                if args.dis_robot == "true":
                    robot = rb & (np.linalg.norm(tt, axis=-1).max(0) > 0.5)
                elif args.dis_robot == "cut":
                    robot = sweep_robot_mask(hi.frames, size=cal.frames.shape[1:3])
                else:
                    robot = None
                err = np.linalg.norm(tracks - tt, axis=-1)[1:, rb]
                shift = np.linalg.norm(tt, axis=-1)[1:, rb]
                moving = shift > 0.5
                track_err.append(float(np.median(err[moving])))
                far = shift > np.percentile(shift[moving], 75) if moving.any() else moving
                track_err_far.append(float(np.median(err[far])) if far.any() else np.nan)
            fit = fit_chain(tracks, valid, qc, segments, float(f), c.numpy(), robot=robot,
                            home=None if kind == "true" else on_grid(
                                hi.frames[:1], cal.frames.shape[1:3])[0])
            if kind == "dis" and args.photometric:
                size = (args.photometric, args.photometric)
                photo = np.stack([cv2.resize(x, size, interpolation=cv2.INTER_AREA)
                                  for x in hi.frames])
                fit, _ = refine_photometric(fit, photo, qc)
            err, err_mirror = axis_errors(fit, scene, params, qc[0])
            fits[kind] = (fit, calibration_background(fit, cal.frames, qc))
            fit_stats[kind].append({"cell": cell.cell_id, "axis_error_deg": err.tolist(),
                                    "axis_error_or_twin_deg": err_mirror.tolist(),
                                    "residual_px": fit.residual_px.tolist(),
                                    "robot_px": int(fit.robot.sum()),
                                    "seconds": time.perf_counter() - tf})
            calibrations[kind] = as_calibration(fit, cal.frames[0], qc[0], fits[kind][1],
                                                names, {"seconds": time.perf_counter() - tf})
            if saved is not None:
                saved.parent.mkdir(parents=True, exist_ok=True)
                save_chain_calibration(saved, calibrations[kind])
        motion = refined = None
        comp_tag = ""
        if args.motion_refine:
            from export.models.chain_fit import refine_chain_with_motion

            comp_kind = ("plan" if args.composition_plan else "poses"
                         if args.composition_poses else "comp")
            if args.composition:
                comp_what = {"plan": "planned motion", "poses": "held poses",
                             "comp": "composition"}[comp_kind]
                motion = (composition_episode(params, qc[0], args.composition,
                                              args.composition_amplitude,
                                              args.seed + zlib.crc32(cell.cell_id.encode()),
                                              planned=args.composition_plan,
                                              poses=args.composition_poses,
                                              latency_frames=args.motion_latency_frames),
                          f"{comp_what} of {args.composition} frames")
            else:
                motion = (load_episode(hi_dir / "motion-01.npz"), hi_dir / "motion-01.npz")
            comp_tag = motion_tag(comp_kind, args.composition, args.composition_amplitude,
                                  args.motion_latency_frames)
            saved_m = (Path(args.fits) / f"{cell.cell_id}_dis_motion{comp_tag}"
                       f"{'_twins' if args.twins else ''}.npz" if args.fits else None)
            if saved_m is not None and saved_m.is_file():
                refined = load_chain_calibration(saved_m)
            else:
                tm = time.perf_counter()
                refined = refine_chain_with_motion(
                    calibrations["dis"], high_calibration(hi_cache, hi_dir, cal), [motion],
                    twins=args.twins)
                print(f"  {cell.cell_id}: refined with motion in "
                      f"{time.perf_counter() - tm:.0f} s", file=sys.stderr, flush=True)
                if saved_m is not None:
                    save_chain_calibration(saved_m, refined)
            fit_stats.setdefault("dis_motion", [])
            err, err_mirror = axis_errors(refined, scene, params, qc[0])
            fit_stats["dis_motion"].append({
                "cell": cell.cell_id, "axis_error_deg": err.tolist(),
                "axis_error_or_twin_deg": err_mirror.tolist(),
                "residual_px": refined.residual_px.tolist(), "robot_px": int(refined.robot.sum()),
                "seconds": float(refined.info.get("motion_refine_seconds", np.nan)),
                "twins": refined.info.get("twins")})
        anchored: dict[str, object] = {}
        # the futures' start frame, read once for every anchored read
        start0 = load_episode(mo.path).frames[0] if args.anchor else None
        if futures_altered and args.anchor:
            start0 = futures_of("all_joints").frames[0, 0]
        anchor_frame, anchor_q, anchor_tag = start0, q0, ""
        if args.anchor and args.anchor_at == "other":
            others = [m for m in cell.motions if m.path != mo.path]
            if not others:
                p.error(f"--anchor-at other: {cell.cell_id} has one motion episode")
            anchor_frame = load_episode(others[0].path).frames[0]
            anchor_q = others[0].joint_positions[0, :n].astype(np.float64)
            anchor_tag = "_other"
        if args.anchor:
            from export.models.chain_fit import anchor_chain_to_start

            for name, base in (("chain_dis_anchor", calibrations["dis"]),
                               ("chain_dis_motion_anchor", refined)):
                if base is None:
                    continue
                read = "dis" if name == "chain_dis_anchor" else "dis_motion"
                twin_tag = (("_twins" + (f"_r{args.anchor_twin_refine_steps}"
                                          if args.anchor_twin_refine_steps else ""))
                            if args.twins else "")
                # a read refined with rendered motion is kept apart from motion-01's
                of = f"{read}{comp_tag}" if read == "dis_motion" else read
                saved_a = (Path(args.fits)
                           / f"{cell.cell_id}_{of}_anchor{anchor_tag}{twin_tag}.npz"
                           if args.fits else None)
                if saved_a is not None and saved_a.is_file():
                    anchored[name] = load_chain_calibration(saved_a)
                    continue
                anchored[name] = anchor_chain_to_start(
                    base, high_calibration(hi_cache, hi_dir, cal), anchor_frame, anchor_q,
                    twins=args.twins, twin_refine_steps=args.anchor_twin_refine_steps)
                print(f"  {cell.cell_id}: {read} anchored at the "
                      f"{'other episode' if anchor_tag else 'futures'}' start in "
                      f"{anchored[name].info['anchor']['seconds']:.0f} s",
                      file=sys.stderr, flush=True)
                if saved_a is not None:
                    save_chain_calibration(saved_a, anchored[name])
            for name, chain_a in anchored.items():
                read = "dis" if name == "chain_dis_anchor" else "dis_motion"
                fit_stats.setdefault(f"{read}_anchor", []).append(
                    anchored_stats(cell.cell_id, chain_a, scene, params, qc[0]))
        in_units = None
        if args.controller_units:
            from export.cells.robots import robot_spec

            lim = np.asarray(robot_spec(params.robot).limits_rad, np.float64)
            lim_ctrl = lim[list(params.convention.perm)]
            in_units, ratio = units_chain(args, cell, high_calibration(hi_cache, hi_dir, cal),
                                          controller_factors(args.controller_units, lim_ctrl),
                                          cal.frames.shape[1:3])
            err, err_mirror = axis_errors(in_units, scene, params, qc[0])
            fit_stats_units.append({"cell": cell.cell_id, "axis_error_deg": err.tolist(),
                                    "axis_error_or_twin_deg": err_mirror.tolist(),
                                    "scale_over_truth": ratio.tolist(),
                                    "joint_scale": in_units.info.get("joint_scale")})
        wrong_fovy = {}
        for factor in args.fovy_error or ():
            tag = f"fovy_{factor:g}"
            wrong_fovy[tag] = fovy_chain(args, cell, high_calibration(hi_cache, hi_dir, cal),
                                         params.fovy_deg, factor, cal.frames.shape[1:3])
            err, err_mirror = axis_errors(wrong_fovy[tag], scene, params, qc[0])
            fit_stats_fovy[tag].append({"cell": cell.cell_id, "axis_error_deg": err.tolist(),
                                        "axis_error_or_twin_deg": err_mirror.tolist()})
        timed = timed_refined = timed_anchored = None
        if variant is not None:
            timed, timed_refined, timed_anchored = timed_chain(
                args, variant, cell, params, cal, i, motion,
                (start0, q0) if args.anchor else None)
            err, err_mirror = axis_errors(timed, scene, params, qc[0])
            fit_stats[f"timing_{variant.name}"].append({
                "cell": cell.cell_id, "axis_error_deg": err.tolist(),
                "axis_error_or_twin_deg": err_mirror.tolist(),
                "residual_px": timed.residual_px.tolist(), "robot_px": int(timed.robot.sum()),
                "seconds": float(timed.info.get("seconds", np.nan))})
            if timed_anchored is not None:
                fit_stats.setdefault(f"timing_{variant.name}_anchor", []).append(
                    anchored_stats(cell.cell_id, timed_anchored, scene, params, qc[0]))
        ctx = encode_calibration(warp, cal) if warp is not None else None
        auto: bool | None = None  # chain_auto anchors this cell (decided on its start)
        for prof in ("all_joints", "two_joint"):
            fut = futures_of(prof)
            start, truth = fut.frames[0, 0], fut.frames[:, 1:]
            preds: dict[str, np.ndarray] = {"copy_last": np.repeat(start[None, None],
                                                                   len(truth), 0).repeat(
                args.horizon, 1)}
            for kind, (fit, bg) in fits.items():
                acts = fut.actions[:, :, :n]
                preds[f"fit_{kind}"] = np.stack([predict_frames(fit, start, q0 - qc[0], a,
                                                                home=cal.frames[0])
                                                 for a in acts])
                preds[f"fit_{kind}_fill"] = np.stack([predict_frames(fit, start, q0 - qc[0], a,
                                                                     home=cal.frames[0],
                                                                     background=bg)
                                                      for a in acts])
                # without drawing the start's arm rim the cut left out as background
                preds[f"fit_{kind}_fill_rim0"] = np.stack([predict_frames(
                    fit, start, q0 - qc[0], a, home=cal.frames[0], background=bg, edge_px=0)
                    for a in acts])
                if args.other_cell:
                    preds[f"fit_{kind}_other_cell"] = chain_rollout(
                        other_of[(cell.cell_id, kind)], start, q0, acts)
                if args.mislabelled:
                    mis = mislabelled_fit(fit, np.random.default_rng(args.seed + 1000 * i))
                    preds[f"fit_{kind}_fill_mislabelled"] = np.stack([predict_frames(
                        mis, start, q0 - qc[0], a, home=cal.frames[0], background=bg)
                        for a in acts])
            if in_units is not None:
                preds[f"units_{args.controller_units}"] = chain_rollout(
                    in_units, start, q0, fut.actions[:, :, :n])
            for tag, chain_f in wrong_fovy.items():
                preds[tag] = chain_rollout(chain_f, start, q0, fut.actions[:, :, :n])
            if (refined is not None or timed is not None or in_units is not None
                    or anchored or wrong_fovy) \
                    and "dis" in calibrations:
                preds["chain_dis"] = chain_rollout(calibrations["dis"], start, q0,
                                                   fut.actions[:, :, :n])
            if refined is not None:
                preds["chain_dis_motion"] = chain_rollout(refined, start, q0,
                                                          fut.actions[:, :, :n])
            for name, chain_a in anchored.items():
                preds[name] = chain_rollout(chain_a, start, q0, fut.actions[:, :, :n])
            if "chain_dis_anchor" in preds and not anchor_tag:
                # what simulate / precheck do by default (edge.commands.common.anchor_chain):
                # anchored where the start agreement is below AUTO_ANCHOR_BELOW; both
                # profiles start from the same frame, so it is decided once per cell
                if auto is None:
                    share = start_agreement(calibrations["dis"], start, q0)["arm_on_arm"]
                    auto = share is not None and share < AUTO_ANCHOR_BELOW
                    auto_anchored.append(auto)
                preds["chain_auto"] = preds["chain_dis_anchor" if auto else "chain_dis"]
            if timed_refined is not None:
                preds[f"timing_{variant.name}_motion"] = chain_rollout(
                    timed_refined, start, q0, fut.actions[:, :, :n])
            if timed is not None:
                preds[f"timing_{variant.name}"] = chain_rollout(timed, start, q0,
                                                                fut.actions[:, :, :n])
            if timed_anchored is not None:
                preds[f"timing_{variant.name}_anchor"] = chain_rollout(
                    timed_anchored, start, q0, fut.actions[:, :, :n])
            if prof == "all_joints":  # the bound: the start warped by DIS flow from the truth
                preds["oracle_flow"] = np.stack([oracle_flow_warp(start, tr) for tr in truth])
            # the retrieval control: the truth blurred by 2 px (eval-frames' blur_control)
            preds["blurred_truth"] = blur_control(truth)
            if warp is not None:
                a = np.zeros(fut.actions.shape[:2] + (warp.contract.max_dof,), np.float32)
                a[..., :n] = fut.actions[:, :, :n]
                roll = Rollout(warp, ctx, max_horizon=args.horizon, max_candidates=len(a))
                preds["warp"] = roll.run(start, a)
            if prof == "all_joints" and len(sheet_rows) < 4:
                row = [start]
                for s in (4, 8, 16):
                    row += [truth[0, s - 1]] + [preds[k][0, s - 1] for k in preds_names[1:]]
                sheet_rows.append(np.stack(row))
            if prof == "all_joints":
                rows = {"chain_dis": calibrations.get("dis") if "chain_dis" in preds
                        else None, "chain_dis_motion": refined, **anchored}
                if variant is not None:
                    rows[f"timing_{variant.name}"] = timed
                    rows[f"timing_{variant.name}_anchor"] = timed_anchored
                true0 = fut.robot_mask[0, 0] > 0
                for name, chain_r in rows.items():
                    if chain_r is None:
                        continue
                    _, cov0 = chain_rollout(chain_r, start, q0, np.zeros((1, n)),
                                            with_cover=True)
                    start_precision.setdefault(name, []).append(
                        float((cov0[0] & true0).sum() / max(int(cov0[0].sum()), 1)))
                    est = start_agreement(chain_r, start, q0)["arm_on_arm"]
                    start_estimate.setdefault(name, []).append(
                        float("nan") if est is None else est)
            score.add(prof, start, truth, preds)
        print(f"[{time.perf_counter() - t0:6.1f}s] cell {i + 1}/{len(cells)} "
              + " ".join(f"{k}: axis err median {np.nanmedian(fit_stats[k][-1]['axis_error_deg']):.1f} deg"
                         for k in kinds), file=sys.stderr, flush=True)
    gen.close()
    if args.sheet:
        from edge.visual import contact_sheet, write_png

        labels = ["start"]
        for s in (4, 8, 16):
            labels += [f"truth {s}"] + [f"{k[4:] if k.startswith('fit_') else k} {s}"
                                        for k in preds_names[1:]]
        write_png(args.sheet, contact_sheet(
            sheet_rows, row_labels=[c.cell_id for c in cells[:len(sheet_rows)]],
            tile_labels=[labels] + [[]] * (len(sheet_rows) - 1), scale=3,
            note=f"{args.split}: the chain fitted to the calibration, first all-joints "
                 "candidate"))
    r, ps = score.summary()
    stats = {}
    for k, rows in fit_stats.items():
        errs = np.asarray([e for row in rows for e in row["axis_error_deg"]], float)
        twin = np.asarray([e for row in rows for e in row["axis_error_or_twin_deg"]], float)
        stats[k] = {"axis_error_deg_median": float(np.nanmedian(errs)),
                    "axis_error_or_twin_deg_median": float(np.nanmedian(twin)),
                    "axis_error_deg_p90": float(np.nanpercentile(errs, 90)),
                    "channels_read": int(np.isfinite(errs).sum()),
                    "channels_over_90_deg_off": int((errs > 90).sum()),
                    "channels_over_90_deg_off_twin_too": int((twin > 90).sum()),
                    "residual_px_median": float(np.nanmedian(
                        [x for row in rows for x in row["residual_px"]])),
                    "fit_seconds_mean": float(np.mean([row["seconds"] for row in rows])),
                    "cells": rows}
    if args.controller_units:
        ratios = np.asarray([x for row in fit_stats_units for x in row["scale_over_truth"]])
        live = ratios[ratios > 0]
        errs = np.asarray([e for row in fit_stats_units for e in row["axis_error_deg"]], float)
        stats[f"units_{args.controller_units}"] = {
            "axis_error_deg_median": float(np.nanmedian(errs)),
            "axis_error_deg_p90": float(np.nanpercentile(errs, 90)),
            "scale_over_truth_median": float(np.median(live)),
            "scale_error_abs_median": float(np.median(np.abs(np.log(live)))),
            "scale_error_abs_p90": float(np.percentile(np.abs(np.log(live)), 90)),
            "cells": fit_stats_units}
        print(f"read in {args.controller_units}: turn per unit over the truth median "
              f"{np.median(live):.3f}, |log ratio| median "
              f"{stats[f'units_{args.controller_units}']['scale_error_abs_median']:.3f} (p90 "
              f"{stats[f'units_{args.controller_units}']['scale_error_abs_p90']:.3f}); axis "
              f"error median {np.nanmedian(errs):.1f} deg")
    for tag, rows in fit_stats_fovy.items():
        errs = np.asarray([e for row in rows for e in row["axis_error_deg"]], float)
        stats[tag] = {"axis_error_deg_median": float(np.nanmedian(errs)),
                      "axis_error_deg_p90": float(np.nanpercentile(errs, 90)),
                      "channels_over_90_deg_off": int((errs > 90).sum()), "cells": rows}
        print(f"read with {tag}: axis error median {np.nanmedian(errs):.1f} deg (p90 "
              f"{np.nanpercentile(errs, 90):.1f})")
    print(f"{args.split}, {len(cells)} cells, M = {args.candidates}")
    if track_err:
        print(f"dis tracks: median error {np.median(track_err):.2f} px on the moving robot "
              f"pixels, {np.nanmedian(track_err_far):.2f} px on the farthest-moved quarter "
              "of them (per cell, then median)")
    for k in fit_stats:
        print(f"fit on {k} tracks: axis error median {stats[k]['axis_error_deg_median']:.1f} "
              f"deg (p90 {stats[k]['axis_error_deg_p90']:.1f}; against the true axis or its "
              f"mirrored twin {stats[k]['axis_error_or_twin_deg_median']:.1f}), residual median "
              f"{stats[k]['residual_px_median']:.2f} px, {stats[k]['fit_seconds_mean']:.1f} s "
              "per cell")
    for name, vals in start_precision.items():
        print(f"{name}: share of the arm drawn at the start that is on the true arm, median "
              f"{np.median(vals):.2f} (lowest {np.min(vals):.2f}; per cell in the JSON)")
    # chain_auto (the runtime's default choice per cell) in the table, not on the sheet
    score.print_table(preds_names + (["chain_auto"] if args.anchor and args.anchor_at == "start"
                                     else []))
    print("retrieval control, the truth blurred by 2 px: @4 / @8 / @16 "
          + " / ".join(f"{r[f'blurred_truth/all_joints/{s}']:.2f}" for s in (4, 8, 16))
          + f", two-joint@8 {r['blurred_truth/two_joint/8']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"split": args.split, "cells": len(cells),
                                               "camera": camera,
                                               "carry_rim": bool(args.carry_rim),
                                               "anchor_at": args.anchor_at if args.anchor
                                               else None,
                                               "twins": bool(args.twins),
                                               "anchor_twin_refine_steps":
                                                   args.anchor_twin_refine_steps,
                                               "composition": args.composition,
                                               "composition_plan": args.composition_plan,
                                               "composition_poses": args.composition_poses,
                                               "motion_latency_frames":
                                                   args.motion_latency_frames,
                                               "composition_amplitude":
                                                   args.composition_amplitude,
                                               "retrieval": r, "psnr_at_step": ps,
                                               "fit": stats,
                                               "dis_track_error_px": track_err,
                                               "dis_track_error_far_px": track_err_far,
                                               "start_arm_precision": start_precision,
                                               "start_arm_on_arm_estimate": start_estimate,
                                               "auto_anchored": auto_anchored,
                                               "per_cell": {
                                                   "cells": [c.cell_id for c in cells],
                                                   "retrieval": score.hits,
                                                   "psnr_at_16": {
                                                       k: [v[-1] for v in vals] for k, vals
                                                       in score.psnr.items()}}},
                                              indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
