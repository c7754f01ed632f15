"""``syncedge calibrate store --chain``: the chain model's encoded calibration in the cache.

The chain model (:mod:`edge.runtime.chain`) encodes a cell's calibration episode as a
*chain calibration* (the arm's pixels and depths, each channel's axis, pivot and carried
pixels, the camera's pinhole, the home frame and the background), read by
:func:`export.models.chain_fit.read_chain_calibration` (torch, 1-3 minutes on 2 CPU
cores). ``calibrate store EPISODE --chain`` reads it and stores it in the calibration cache
beside the episode, its coverage report and reference frame, under the chain model's
identity (:data:`edge.runtime.chain.CHAIN_MODEL_SHA256`); ``--chain FILE`` stores one read
elsewhere (``syncedge model read-chain`` on a workstation), after checking that it was
read from this episode; ``--cell ID --chain`` reads the episode the cache already holds for
the cell. ``simulate --cell ID --chain`` and ``precheck --cell ID --chain`` then run from
the cache, offline, without torch, and ``calibrate validate --cell ID --chain --episode
FILE`` writes the commissioning report of the cached chain. ``--motion FILE`` refines a
chain read at store with an episode of ordinary motion on the cell
(:func:`export.models.chain_fit.refine_chain_with_motion`); ``validate`` refuses to
commission the chain on an episode it was refined with.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from edge.calibrate.errors import CalibrateError
from edge.runtime.chain import HOME_FRAME_TOLERANCE, home_differences

__all__ = ["CHAIN_READ", "check_chain_matches", "commissioning_verdict", "fitted_for_chain", "on_grid", "run_store", "run_store_chain", "run_validate",
           "run_validate_chain"]

#: ``calibrate store --chain`` without a FILE: read the chain from the episode now.
CHAIN_READ = "@read"


def check_chain_matches(chain: Any, episode: Any, where: str, episode_where: str) -> None:
    """Refuse a chain calibration that was not read from ``episode``.

    Args:
        chain: :class:`edge.runtime.chain.ChainCalibration`.
        episode: the calibration :class:`edge.episode.Episode` it is stored with.
        where, episode_where: the chain's and the episode's names, for messages.

    Raises:
        CalibrateError: sweeps calibration ingest cannot find; other channel names or
            order; home joint readings more than :data:`HOME_JOINTS_TOLERANCE_RAD` from
            the first of the episode at its sweep poses (:func:`edge.calibrate.ingest.at_sweep_poses`, what the chain is read
            from); a home frame that differs from that first frame (reduced by area to the
            chain's grid) by more than 2 levels on average (said as a resolution other
            than the one the chain was read from, ``info.calibration.resolution``, where it
            is one: naming both and the episode to store).
    """
    from edge.calibrate.ingest import IngestError, at_sweep_poses

    names = list(episode.metadata.dof_names)
    try:  # the chain was read at the sweep's poses (any recorded timing)
        episode, _ = at_sweep_poses(episode)
    except IngestError as exc:
        raise CalibrateError(f"{episode_where}: the calibration's sweeps: {exc}; a chain "
                             "cannot have been read from it") from None
    if names != list(chain.dof_names):
        raise CalibrateError(f"{where}: dof_names {chain.dof_names}: expected the episode's "
                             f"{names} ({episode_where}); read the chain from this episode")
    q0 = np.asarray(episode.joint_positions[0], np.float64) \
        if episode.joint_positions is not None else None
    joints_ok, diff = home_differences(
        chain, q0, on_grid(episode.frames[:1], chain.resolution, episode_where)[0])
    if not joints_ok:
        raise CalibrateError(f"{where}: home_joint_positions "
                             f"{np.round(chain.home_joint_positions, 4).tolist()}: expected "
                             f"the first joint readings of {episode_where} "
                             f"{None if q0 is None else np.round(q0, 4).tolist()}; it was "
                             "read from another calibration episode")
    if diff > HOME_FRAME_TOLERANCE:
        cal = chain.info.get("calibration") or {}
        read_hw = tuple(int(x) for x in cal.get("resolution") or ())
        here_hw = tuple(int(x) for x in episode.frames.shape[1:3])
        if len(read_hw) == 2 and read_hw != here_hw:  # the same sweep at another resolution
            rh, rw = read_hw
            raise CalibrateError(
                f"{where}: read from a {rw}x{rh} calibration ({cal.get('file') or 'its info'}"
                f"), but {episode_where} is {here_hw[1]}x{here_hw[0]}: its first frame "
                f"differs from the chain's home_frame by {diff:.1f} levels on average "
                f"(expected at most {HOME_FRAME_TOLERANCE:g}; a sweep rendered at another "
                f"resolution differs on shaded edges); store the episode the chain was read "
                f"from (the {rw}x{rh} one), or read the chain from this one")
        raise CalibrateError(f"{where}: home_frame differs from the first frame of "
                             f"{episode_where} by {diff:.1f} levels on average (expected at "
                             f"most {HOME_FRAME_TOLERANCE:g}): it was read from another "
                             "calibration episode")


def _read_chain(episode: Any, where: str, args: argparse.Namespace) -> tuple[Any, float]:
    """Read the chain from ``episode`` (torch, ``--threads`` threads, default 2); progress
    lines on stderr."""
    from edge.plugins import load

    grid = args.grid
    try:
        import torch

        read_chain_calibration = load("syncedge.chain_readers", "chain",
                                      "reading a chain calibration")
    except ImportError as exc:  # MissingDependencyError is one
        raise CalibrateError(
            f"reading a chain calibration needs torch ({exc}): install it with "
            "pip install '.[train]', or read the chain on another machine with "
            "'syncedge model read-chain --calibration EPISODE --out CHAIN.npz' and store "
            "it here with '--chain CHAIN.npz'") from None
    from edge.commands.common import motion_twins
    from edge.episode import load_episode
    from edge.runtime.chain import MotionEpisodeError

    motions = []
    for path in getattr(args, "motion", None) or ():
        try:
            motions.append((load_episode(path), path))
        except FileNotFoundError:
            raise CalibrateError(f"--motion {path}: no such file; expected an episode (.npz) "
                                 "of ordinary motion recorded on this cell") from None
    torch.set_num_threads(args.threads or 2)
    fh, fw = episode.frames.shape[1:3]
    if min(fh, fw) < 2 * grid:
        print(f"warning: {where}: frames {fw}x{fh} for a {grid}x{grid} grid: the sweep is "
              "tracked to whole pixels only (on the sample cell, a chain read from its 64x64 "
              "calibration predicted its 39 steps at 23.6 dB, from the same sweep at 256x256 "
              "at 30.0 dB); record the calibration at 4x the grid", file=sys.stderr)
    print(f"reading the chain from {where} (1-3 minutes on 2 idle CPU cores; longer beside "
          "other work) ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    try:
        chain = read_chain_calibration(
            episode, size=(grid, grid), fovy_deg=args.fovy_deg,
            photometric_size=args.photometric or None,
            log=lambda line: print(f"  [{time.perf_counter() - t0:6.1f} s] {line}",
                                   file=sys.stderr, flush=True),
            joint_scale=getattr(args, "joint_scale", "auto"),
            colour_tracks=getattr(args, "tracks", "colour") == "colour",
            **({"motions": motions,
                 "motion_twins": motion_twins(getattr(args, "twins", None), True)}
               if motions else {}))
    except MotionEpisodeError as exc:  # names its episode itself
        raise CalibrateError(f"--motion {exc}") from None
    except ValueError as exc:
        raise CalibrateError(f"{where}: {exc}") from None
    return chain, time.perf_counter() - t0


def _camera_of(path: str) -> dict[str, Any]:
    """An episode file's ``metadata.camera`` read alone (no frames), or ``{}`` where it
    cannot be (the full load then names what is wrong)."""
    import json

    try:
        with np.load(path, allow_pickle=False) as npz:
            camera = json.loads(npz["metadata_json"].tobytes().decode("utf-8")).get("camera")
    except Exception:  # noqa: BLE001 - any fault is reported by the full load after this
        return {}
    return camera if isinstance(camera, dict) else {}


def _chain_for(args: argparse.Namespace, episode: Any, where: str) -> tuple[Any, float, str]:
    """The chain calibration to store: ``--chain FILE`` (checked against ``episode``) or
    read now. Returns ``(chain, read seconds, source text)``."""
    from edge.runtime.chain import load_chain_calibration

    if args.chain == CHAIN_READ:
        if args.photometric < 0 or (args.photometric and (args.photometric < args.grid
                                                           or args.photometric % args.grid)):
            raise CalibrateError(f"--photometric {args.photometric}: expected 0 (no "
                                 f"refinement) or a whole multiple of --grid {args.grid}")
        chain, read_s = _read_chain(episode, where, args)
        return chain, read_s, "read at store"
    if getattr(args, "motion", None):
        raise CalibrateError("--motion: only when the chain is read at store ('--chain' "
                             "without FILE); refine a chain read elsewhere with 'syncedge "
                             "model read-chain --motion FILE'")
    chain = load_chain_calibration(args.chain)
    check_chain_matches(chain, episode, str(args.chain), where)
    return chain, 0.0, str(args.chain)


def run_store_chain(args: argparse.Namespace) -> int:
    """``calibrate store ... --chain [FILE]`` (see the module docstring)."""
    from edge.cache.store import CalibrationCache, check_writable, default_root
    from edge.cache.values import CacheKey
    from edge.runtime.chain import (
        CHAIN_MODEL_SHA256,
        arm_at_edge_note,
        unmodelled_channels,
        unmodelled_note,
    )

    if args.model:
        raise CalibrateError("--model: not with --chain (the chain calibration is the chain "
                             "model's encoded calibration; no model folder is used)")
    root = args.cache_dir or default_root()
    if getattr(args, "from_model", None) and not args.cell:
        raise CalibrateError("--from-model: only with --cell (it picks which cached episode "
                             "to read)")
    if args.cell:
        if args.episode or args.force or args.reference:
            raise CalibrateError("store: pass an EPISODE file, or --cell to read a cached "
                                 "episode, not both (--force and --reference go with EPISODE)")
        with CalibrationCache(root) as cache:
            cache.require_writable("storing the chain calibration")
            picked = _cached_chain_source(cache, args)
        entry = picked.entry
        src = entry.key
        print(f"calibration episode: {picked.why}", file=sys.stderr)
        episode, reference = entry.episode, entry.reference_frame
        report = dict(entry.report)
        forced, reason = entry.info.forced, entry.info.forced_reason
        where = f"cache:{src.cell_id}/{src.camera_id}/{src.robot_id}"
    else:
        if not args.episode:
            taken = (f" (--chain took {args.chain} as its FILE: write the episode first, "
                     f"'calibrate store {args.chain} --chain')"
                     if args.chain != CHAIN_READ else "")
            raise CalibrateError("store --chain: pass an EPISODE file, or --cell ID to read "
                                 f"the cell's cached episode{taken}")
        from edge.commands.calibrate_cell import checked_episode

        if args.chain == CHAIN_READ and args.fovy_deg is None \
                and "fovy_deg" not in _camera_of(args.episode):
            raise CalibrateError(f"{args.episode}: metadata.camera has no 'fovy_deg' (the "
                                 f"camera's vertical field of view, degrees), which reading "
                                 f"the chain needs: pass --fovy-deg DEG (from the camera's "
                                 f"datasheet or its calibration: 2 atan(height / (2 fy)); "
                                 f"'calibrate import' takes it from a bag's CameraInfo)")
        check_writable(root, "storing the chain calibration")  # before the read (minutes)
        episode, report, reference, _ = checked_episode(args)
        forced, reason = bool(args.force), args.force or ""
        where = str(args.episode)
        episode = _fitted_for_chain(args, episode, where)
    chain, read_s, source = _chain_for(args, episode, where)
    meta = episode.metadata
    key = CacheKey(meta.cell_id, meta.camera_id, meta.robot_id, CHAIN_MODEL_SHA256)
    report["stored"] = {"model": "chain", "model_sha256": CHAIN_MODEL_SHA256,
                        "chain_sha256": chain.sha256(), "chain": source,
                        "read_s": round(read_s, 1), "forced": forced, "forced_reason": reason,
                        "stored_at_s": round(time.time(), 3)}
    with CalibrationCache(root) as cache:
        replaced = cache.info(key) is not None
        cache.put(key, episode, chain, report, reference, forced=forced, forced_reason=reason)
    unmodelled = unmodelled_channels(chain)
    if unmodelled:
        print(f"warning: {unmodelled_note(unmodelled, f'chain calibration ({source})')}",
              file=sys.stderr, flush=True)
    at_edge = arm_at_edge_note(chain.robot, f"chain calibration ({source})")
    if at_edge:
        print(f"warning: {at_edge}", file=sys.stderr, flush=True)
    fit = chain.residual_px
    print(f"stored {key.cell_id}/{key.camera_id}/{key.robot_id}/{key.model_sha256[:12]} "
          f"(chain calibration: {int(chain.robot.sum())} arm pixels, {chain.num_dof} channels, "
          f"track residual at most {float(np.max(fit)) if fit.size else 0.0:.2f} px "
          f"(the worst channel); "
          f"{'read in ' + format(read_s, '.0f') + ' s' if read_s else 'from ' + source}"
          f"{', FORCED: ' + reason if forced else ''})"
          f"{'; replaced the entry stored before under this key' if replaced else ''}")
    sheet = _write_fit_sheet(chain, episode, args, key, where)
    if sheet is not None:
        print(f"the fit, to look at: {sheet} (recorded sweep peaks above the chain's "
              f"redrawing; {sheet.with_suffix('.json').name}: the figures)")
    print(f"run it: syncedge simulate --cell {key.cell_id} --camera-id {key.camera_id} "
          f"--robot-id {key.robot_id} --chain --start START.npz"
          f"{' --cache-dir ' + str(args.cache_dir) if args.cache_dir else ''}")
    return 0


def _write_fit_sheet(chain: Any, episode: Any, args: argparse.Namespace, key: Any,
                     where: str) -> Path | None:
    """``chain.png`` and ``chain.json`` (the chain redrawing each channel's sweep peak,
    :func:`edge.runtime.chain.fit_sheet`) in ``STATE_ROOT/checks/<episode name>/`` (``<cell
    id>`` for ``--cell``), where ``calibrate check`` writes its sheets; None (said on stderr)
    where the sweep cannot be drawn. The entry is stored either way."""
    from edge.fileio import write_json_atomic
    from edge.runtime.chain import fit_sheet, unmodelled_channels
    from edge.state import check_dir, claim_check_dir
    from edge.visual import write_png

    folder = check_dir(args.episode or key.cell_id)
    try:
        sheet, rows = fit_sheet(chain, episode, f"{where}: fit residual "
                                                f"{np.median(chain.residual_px):.2f} px median")
    except ValueError as exc:
        print(f"note: no fit sheet: {exc}", file=sys.stderr)
        return None
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / "chain.json", {
        "cell": [key.cell_id, key.camera_id, key.robot_id], "chain_sha256": chain.sha256(),
        "residual_px": dict(zip(chain.dof_names, np.round(chain.residual_px, 4).tolist(),
                                strict=True)), "sweep_peaks": rows,
        "unmodelled_channels": unmodelled_channels(chain)})
    path = write_png(folder / "chain.png", sheet)
    claim_check_dir(folder, args.episode or key.cell_id)
    return path


def _fitted_for_chain(args: argparse.Namespace, episode: Any, where: str) -> Any:
    """The episode at a square whole multiple of the chain's grid (``--grid``, or the given
    chain file's): one at the camera's own size is centre-cropped and resized, and said so
    (:func:`edge.calibrate.camera.fit_for_chain`); the fitted episode is what is stored.

    Raises:
        CalibrateError: frames smaller than the grid.
    """
    from edge.runtime.chain import load_chain_calibration

    grid = args.grid if args.chain == CHAIN_READ else \
        load_chain_calibration(args.chain).resolution[0]
    try:
        return fitted_for_chain(episode, grid, where)
    except ValueError as exc:
        raise CalibrateError(f"{where}: {exc}") from None


def fitted_for_chain(episode: Any, grid: int, where: str) -> Any:
    """:func:`edge.calibrate.camera.fit_for_chain`, said on stderr (naming ``where``) when
    the frames were cropped and resized; ``calibrate store --chain`` and ``model
    read-chain``.

    Raises:
        ValueError: frames smaller than the grid.
    """
    from edge.calibrate.camera import fit_for_chain

    episode, fitted = fit_for_chain(episode, grid)
    if fitted:
        (h, w), (s, _) = fitted["from_hw"], fitted["to_hw"]
        print(f"note: {where}: frames of {w}x{h} px centre-cropped to a square and resized "
              f"to {s}x{s} for the chain's {grid}x{grid} grid, as a recording is "
              f"(extra.fitted_for_chain)", file=sys.stderr)
    return episode


def _cached_chain_source(cache: Any, args: argparse.Namespace) -> Any:
    """The cached entry whose calibration episode ``store --cell ID --chain`` reads: the
    chain entry's own, else one whose frames are a whole multiple of the grid (and, with
    ``--chain FILE``, the episode that chain was read from), preferring one recorded at 4x
    the grid or more (:func:`edge.commands.calibrate_source.cached_source`)."""
    from edge.commands.calibrate_cell import _key
    from edge.commands.calibrate_source import cached_source
    from edge.runtime.chain import CHAIN_MODEL_SHA256, load_chain_calibration

    given = load_chain_calibration(args.chain) if args.chain != CHAIN_READ else None
    gh, gw = tuple(given.resolution) if given is not None else (args.grid, args.grid)

    def accepts(entry: Any) -> str | None:
        h, w = entry.episode.resolution
        if h % gh or w % gw:
            return (f"frames of {w}x{h} px, expected a whole multiple of the chain's "
                    f"{gw}x{gh} grid")
        if given is not None:
            try:
                check_chain_matches(given, entry.episode, str(args.chain),
                                    f"cache:{entry.key.short}")
            except CalibrateError as exc:
                return str(exc)
        return None

    def preferred(entry: Any) -> bool:
        h, w = entry.episode.resolution
        return h >= 4 * gh and w >= 4 * gw

    return cached_source(cache, args, _key(cache, args, None), CHAIN_MODEL_SHA256,
                         "the chain model", accepts, preferred)


def on_grid(frames: np.ndarray, hw: tuple[int, int], where: str) -> np.ndarray:
    """Frames uint8 ``[T, H', W', 3]`` reduced by area to the chain's grid ``hw``; frames
    that are not a square whole multiple of it (the camera's own size) are centre-cropped
    and resized as a recording is (:func:`edge.calibrate.camera.fit_frame`, said on
    stderr, naming ``where``)."""
    import cv2

    from edge.calibrate.camera import fit_frame

    h, w = hw
    fh, fw = frames.shape[1:3]
    if (fh, fw) == (h, w):
        return frames
    if fh % h or fw % w or fh // h != fw // w:  # the camera's own size: as a recording is
        print(f"note: {where}: frames of {fw}x{fh} px centre-cropped and resized to the "
              f"chain's {w}x{h} grid, as a recording is", file=sys.stderr)
        return np.stack([fit_frame(f, (h, w)) for f in frames])
    return np.stack([cv2.resize(f, (w, h), interpolation=cv2.INTER_AREA) for f in frames])


def _refuse_refined_on(chain: Any, episode: Any, where: str) -> None:
    """Refuse to commission a chain on an episode it was refined with
    (``chain.info["motion"]``, by the frames' sha256): the report would measure the fit,
    not how the chain predicts the cell.

    Raises:
        CalibrateError: naming the episode and what to do.
    """
    from edge.runtime.chain import frames_sha256

    used = {m.get("frames_sha256"): m.get("episode") for m in chain.info.get("motion", ())
            if isinstance(m, dict)}
    if not used:
        return
    digest = frames_sha256(episode.frames)
    if digest in used:
        raise CalibrateError(f"{where}: the cell's chain was refined with this episode "
                             f"(read as {used[digest]}); a report on it would measure the fit, "
                             "not the cell: validate on another recorded episode")


def run_validate_chain(args: argparse.Namespace) -> int:
    """``calibrate validate --chain``: the commissioning report of the cell's cached chain
    calibration on a validation episode of ordinary motion: the chain's rollout from the
    episode's first frame and joint readings, against the truth, beside copying the start
    frame (the chain has no zeroed calibration to compare with)."""
    from edge.calibrate.validate import fidelity
    from edge.commands.calibrate_cell import (
        _cache,
        _check_validation_episode,
        _key,
        commissioning_calibration,
    )
    from edge.commands.common import (
        StagedOutput,
        agreement_warnings,
        anchor_chain,
        chain_store_hint,
        check_out_dir,
    )
    from edge.episode import load_episode
    from edge.fileio import write_json_atomic
    from edge.runtime.chain import CHAIN_MODEL_SHA256, chain_rollout
    from edge.runtime.errors import RuntimeInputError
    from edge.visual import contact_sheet, write_png

    if args.model:
        raise CalibrateError("--model: not with --chain (the cell's cached chain calibration "
                             "is the model)")
    if not args.episode:
        raise CalibrateError("validate --chain: pass --episode FILE (a recorded validation "
                             "episode with joint readings)")
    if getattr(args, "anchor", None) and getattr(args, "no_anchor", False):
        raise CalibrateError("--anchor and --no-anchor: give one of the two")
    check_out_dir(args.out, "syncedge calibrate validate")  # before any work
    ep = load_episode(args.episode)
    with _cache(args) as cache:
        if not cache.list(cell_id=args.cell, camera_id=args.camera_id, robot_id=args.robot_id,
                          model_prefix=CHAIN_MODEL_SHA256):
            raise CalibrateError(f"calibration cache: no chain calibration for cell "
                                 f"{args.cell!r}; {chain_store_hint(args.cell, args.cache_dir)}")
        key = _key(cache, args, CHAIN_MODEL_SHA256)
        entry = cache.get(key)
    if entry is None or entry.context is None:
        raise CalibrateError(f"calibration cache: the chain calibration of {key.short} is "
                             "gone (evicted or dropped as damaged); store it again with "
                             f"'syncedge calibrate store --cell {key.cell_id} --chain'")
    chain = entry.context
    _check_validation_episode(ep, str(args.episode), key, entry.episode)
    _refuse_refined_on(chain, ep, str(args.episode))
    if ep.joint_positions is None:
        raise CalibrateError(f"{args.episode}: no joint_positions: the chain model starts "
                             "from the controller's joint readings at the first frame")
    frames = on_grid(ep.frames, chain.resolution, str(args.episode))
    start, truth = frames[0], frames[1:]
    acts = ep.actions[:-1].astype(np.float64)[:, :chain.num_dof]
    q0 = np.asarray(ep.joint_positions[0, :chain.num_dof], np.float64)
    # as simulate decides, says and records it: the start's agreement with the chain (a
    # light changed since the calibration, a camera moved), anchored at the start frame
    # with the cached calibration episode where it is low (--anchor / --no-anchor decide)
    where = f"cache:{key.cell_id}/{key.camera_id}/{key.robot_id}"
    try:
        chain, source, agreement = anchor_chain(args, chain, where, start, q0,
                                                calibration=(entry.episode, where))
    except RuntimeInputError as exc:
        raise CalibrateError(str(exc)) from None
    t0 = time.perf_counter()
    pred = {"calibrated": chain_rollout(chain, start, q0, acts),
            "copy_last": np.repeat(start[None], len(acts), 0)}
    rollout_s = time.perf_counter() - t0
    fid = {k: fidelity(v, truth, start) for k, v in pred.items()}
    gain = {m: (None if fid["calibrated"][m] is None or fid["copy_last"][m] is None
                else round(fid["calibrated"][m] - fid["copy_last"][m], 4))
            for m in ("psnr_db", "ssim", "motion_psnr_db")}
    verdict, failing = commissioning_verdict(gain, str(args.episode))
    warnings = agreement_warnings(agreement)
    warnings += failing
    report = {
        "cell": {"cell_id": key.cell_id, "camera_id": key.camera_id,
                 "robot_id": key.robot_id, "robot": entry.episode.metadata.robot},
        "model": {"dir": None, "family": "chain", "sha256": chain.sha256(),
                  "backend": "numpy", "chain": source},
        "validation_episode": {"source": str(args.episode), "frames": ep.num_frames,
                               "kind": ep.metadata.kind, "fps": ep.metadata.fps},
        "fidelity": {**fid, "gain_over_copy_last": gain},
        "verdict": verdict,
        "start_agreement": agreement,
        "warnings": warnings,
        "control_probe": {"available": False,
                          "reason": "the chain model places the arm itself; no probe"},
        **commissioning_calibration(entry, ep),
        "timings_s": {"rollouts": round(rollout_s, 4)},
    }
    report["calibration"]["track_residual_px"] = [round(float(r), 3)
                                                  for r in chain.residual_px]
    cols = np.unique(np.linspace(0, len(truth) - 1, min(10, len(truth))).round().astype(int))
    sheet = contact_sheet([truth[cols], pred["calibrated"][cols], pred["copy_last"][cols]],
                          ["truth", "chain", "copy-last"], [[f"t{c + 1}" for c in cols]] * 3,
                          scale=max(2, 128 // start.shape[0]))
    with StagedOutput(args.out, "syncedge calibrate validate") as out:
        write_json_atomic(out.path("report.json"), report)
        write_png(out.path("report.png"), sheet)
        paths = out.commit()
    c, z = fid["calibrated"], fid["copy_last"]
    print(f"chain: PSNR {c['psnr_db']} dB, motion PSNR {c['motion_psnr_db']} dB, SSIM "
          f"{c['ssim']}; copy-last: PSNR {z['psnr_db']} dB, motion PSNR "
          f"{z['motion_psnr_db']} dB over {c['steps']} steps")
    for line in failing:
        print(f"FAIL: {line}", file=sys.stderr)
    for p in paths:
        print(p)
    return 0 if verdict == "pass" else 1


def commissioning_verdict(gain: dict[str, float | None], where: str
                          ) -> tuple[str, list[str]]:
    """The chain's commissioning verdict from its gains over copying the start frame
    (``gain``: ``psnr_db``, ``ssim``, ``motion_psnr_db``, chain minus copy-last, None where
    not measured): ``("pass", [])`` when the chain predicts the validation episode
    (``where``) better than holding its start frame, whole frame (PSNR) and in the moving
    region; else ``("fail", [why])``: a model that loses to a still picture should not be
    trusted with the cell's pre-checks."""
    why = []
    for key, what in (("psnr_db", "whole-frame PSNR"), ("motion_psnr_db",
                                                        "motion-region PSNR")):
        g = gain.get(key)
        if g is not None and g <= 0:
            why.append(f"{where}: the chain's {what} is {g:+.2f} dB over copying the start "
                       "frame (no gain): it does not predict this cell's motion; look at "
                       "report.png and the chain's sweep sheet (chain.png) for channels "
                       "read wrong or not at all, record the calibration again (or refine "
                       "it with a motion episode: calibrate store --chain --motion), then "
                       "validate again")
    return ("fail" if why else "pass"), why


def run_store(args: argparse.Namespace) -> int:
    """``calibrate store``: the chain model's with ``--chain`` or when the model in use is
    the chain model (:func:`edge.commands.common.use_chain_model`: then the chain is read
    from the episode, as ``--chain`` alone), else an ONNX model's
    (:func:`edge.commands.calibrate_cell.run_store`)."""
    from edge.commands import calibrate_cell
    from edge.commands.common import motion_twins, use_chain_model

    chain = use_chain_model(args, CHAIN_READ)
    try:
        motion_twins(getattr(args, "twins", None), bool(getattr(args, "motion", None)))
    except ValueError as exc:
        raise CalibrateError(str(exc)) from None
    if getattr(args, "motion", None) and not chain:
        raise CalibrateError("--motion: only with --chain (it refines the chain model's "
                             "calibration; an ONNX model's context reads the sweep alone)")
    return run_store_chain(args) if chain else calibrate_cell.run_store(args)


def run_validate(args: argparse.Namespace) -> int:
    """``calibrate validate``: the chain model's with ``--chain`` or when the model in use
    is the chain model (:func:`edge.commands.common.use_chain_model`), else an ONNX
    model's (:func:`edge.commands.calibrate_cell.run_validate`)."""
    from edge.commands import calibrate_cell
    from edge.commands.common import use_chain_model

    if use_chain_model(args, True):
        return run_validate_chain(args)
    for flag, given in (("--anchor", getattr(args, "anchor", None)),
                        ("--no-anchor", getattr(args, "no_anchor", False))):
        if given:
            raise CalibrateError(f"{flag}: only with --chain (anchoring refines the chain "
                                 "model's calibration at the start frame)")
    return calibrate_cell.run_validate(args)
