"""Options and steps shared by ``simulate`` and ``precheck``.

- model/backend options and loading;
- the calibration context from ``--calibration FILE`` (encoded) or ``--cell ID`` (the
  calibration cache, through :class:`~edge.runtime.context.ContextSource`);
- :class:`StagedOutput`: files are written into a hidden staging folder and moved under
  their final names only when everything succeeded, so nothing is written under a final
  output name on error.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from edge.episode import Episode, load_episode
from edge.runtime.backends import AUTO_ORDER, BACKEND_NAMES
from edge.runtime.context import (
    CalibrationContext,
    ContextSource,
    context_from_source,
    encode_calibration,
)
from edge.runtime.errors import ContextMismatchError, RuntimeInputError
from edge.runtime.inputs import (
    action_speed_warnings,
    episode_mismatch_warning,
    grey_image_note,
    start_joint_warnings,
    start_resize_warnings,
)
from edge.runtime.model import WorldModel, load_model
from edge.state import state_root

__all__ = ["ANCHOR_FROM_CACHE", "CHAIN_FROM_CACHE", "StagedOutput", "add_anchor_arg",
           "anchor_chain", "active_bundle_dir", "add_chain_arg", "say_light_change",
           "say_camera_moved", "agreement_warnings", "chain_start_mismatch",
           "add_context_args", "add_model_args", "cached_chain_key", "chain_mode",
           "chain_model_identity", "chain_rollout_rate",
           "chain_store_hint", "DEFAULT_CHAIN_RATE_HZ",
           "default_context_source", "describe_identity", "describe_model", "get_context",
           "model_dir_of",
           "model_identity", "non_negative_float", "open_chain", "open_model", "positive_int",
           "run_command",
           "use_chain_model",
           "store_command"]


def add_model_args(p: argparse.ArgumentParser) -> None:
    """``--model``, ``--backend``, ``--threads``."""
    p.add_argument("--model", metavar="DIR", help="model folder with model.json (default: "
                   "STATE_ROOT/bundles/active; see syncedge --help)")
    p.add_argument("--backend", default="cpu", choices=BACKEND_NAMES + ("auto",),
                   help=f"inference backend (default cpu; auto tries {', '.join(AUTO_ORDER)})")
    p.add_argument("--threads", type=positive_int, default=None, metavar="N",
                   help="ONNX Runtime intra-op threads (default: one per core)")
    p.add_argument("--candidate-workers", type=positive_int, default=None, metavar="N",
                   help="on the cpu backend, run the candidates of a batch as N groups at "
                        "the same time, each on threads/N ONNX Runtime threads (default: "
                        "one per thread, at most 4; 1 runs a batch in one session)")


def int_at_least(low: int) -> Callable[[str], int]:
    """argparse type: a whole number >= ``low``; the message names the bound."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a whole number >= {low}, found {text!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, found {v}")
        return v

    parse.__name__ = f"int_at_least_{low}"  # argparse names the type in some messages
    return parse


#: argparse type: a whole number >= 1 (``--threads``, ``--cells`` and the like).
positive_int = int_at_least(1)


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0 (a gate's limit, a tolerance); NaN, inf and
    negative values are refused with the value found."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a finite number >= 0, found {text!r}") from None
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, found {text}")
    return v


def motion_twins(twins: bool | None, has_motion: bool) -> bool:
    """Whether a chain read refined with a motion episode chooses between twins.

    ``twins`` is the three-state ``--twins`` / ``--no-twins`` flag (None: not given, which
    means yes); ``has_motion`` whether ``--motion`` named an episode.

    Raises:
        ValueError: ``--twins`` or ``--no-twins`` was given without ``--motion`` (the twins
            are chosen by the motion episode's frames); the message names the flag.
    """
    if twins is not None and not has_motion:
        raise ValueError(f"--{'' if twins else 'no-'}twins: only with --motion (the twins are "
                         "chosen by the motion episode's frames)")
    return twins is not False


def add_context_args(p: argparse.ArgumentParser) -> None:
    """``--cell`` | ``--calibration`` (neither: history mode) and the cache key options."""
    g = p.add_mutually_exclusive_group(required=False)
    g.add_argument("--cell", metavar="ID", help="take the context from the calibration cache")
    g.add_argument("--calibration", metavar="FILE",
                   help="encode this calibration episode (.npz) into the context; without "
                        "--cell or --calibration a history-mode model (trained without "
                        "calibration, e.g. models/reference-history) runs from the start "
                        "frame and the actions alone")
    p.add_argument("--camera-id", help="cache key with --cell (default: the start episode's, "
                                       "else the cell's one camera in the cache)")
    p.add_argument("--robot-id", help="cache key with --cell (default: the start episode's, "
                                      "else the cell's one robot in the cache)")
    p.add_argument("--dof", type=int, default=None,
                   help="controllable DoFs with --cell (default: those of the cell's cached "
                        "calibration episode)")
    p.add_argument("--cache-dir", metavar="DIR",
                   help="calibration cache root (default: STATE_ROOT/calibration; see syncedge --help)")


def active_bundle_dir() -> Path:
    """``STATE_ROOT/bundles/active``: the installed model every command defaults to."""
    return state_root() / "bundles" / "active"


def model_dir_of(args: argparse.Namespace) -> Path:
    """The model folder a command uses: ``--model`` if given, else the active bundle."""
    return Path(args.model) if getattr(args, "model", None) else active_bundle_dir()


def describe_model(args: argparse.Namespace, sha256: str) -> str:
    """How messages name the model in use: ``the active bundle PATH (model SHA12...)``
    without ``--model``, ``model PATH (SHA12...)`` with it."""
    if getattr(args, "model", None):
        return f"model {args.model} ({sha256[:12]}...)"
    return f"the active bundle {active_bundle_dir()} (model {sha256[:12]}...)"


def store_command(args: argparse.Namespace, cell: str, camera: str, robot: str) -> str:
    """The exact ``syncedge calibrate store --cell ...`` command that encodes a cell's cached
    calibration episode for the model in use (``--model`` and ``--cache-dir`` as given;
    without ``--model``, store uses the active bundle too)."""
    import shlex

    argv = ["syncedge", "calibrate", "store", "--cell", cell, "--camera-id", camera,
            "--robot-id", robot]
    if getattr(args, "model", None):
        argv += ["--model", str(args.model)]
    if getattr(args, "cache_dir", None):
        argv += ["--cache-dir", str(args.cache_dir)]
    return " ".join(shlex.quote(a) for a in argv)


def open_model(args: argparse.Namespace) -> WorldModel:
    """Load and verify the model named by ``--model`` (default: the active bundle) with
    ``--backend``/``--threads``.

    Raises:
        RuntimeInputError: the folder has no ``model.json`` (without ``--model``: no bundle
            is installed), naming the folder and what to do.
    """
    model_dir = model_dir_of(args)
    if not (model_dir / "model.json").is_file():
        if not getattr(args, "model", None):
            raise RuntimeInputError(
                f"no --model given and no active bundle at {model_dir}: install one with "
                f"'syncedge bundle install BUNDLE', or pass --model DIR (a model folder with "
                f"model.json, e.g. models/reference)")
        if model_dir.is_file() or not model_dir.exists():
            from edge.manifest import missing_manifest

            raise RuntimeInputError(str(missing_manifest(model_dir / "model.json")))
        raise RuntimeInputError(f"{model_dir}: no model.json here; expected a model folder "
                                f"(e.g. models/reference): pass --model DIR")
    from edge.bundle.install import check_slot_identity

    check_slot_identity(model_dir)
    workers = getattr(args, "candidate_workers", None)
    args.setup_warnings = say_warnings(thread_warnings(args))
    return load_model(model_dir, backend=args.backend, intra_op_num_threads=args.threads,
                      candidate_workers=workers)


def model_identity(model: WorldModel) -> dict:
    """Which model ran: ``name`` and ``variant`` (from ``model.json``), ``sha256`` (of
    ``model.json``, the model's identity), ``bundle_slot`` (``"a"``/``"b"`` when the folder
    is an installed bundle slot, e.g. ``STATE_ROOT/bundles/active``; else None) and
    ``folder`` (as given). Call on an activated model."""
    return {"name": model.manifest.name, "variant": model.manifest.variant,
            "sha256": model.sha256, "bundle_slot": _bundle_slot(model.model_dir),
            "folder": str(model.model_dir)}


def _bundle_slot(model_dir: Path) -> str | None:
    """``"a"``/``"b"`` when ``model_dir`` is an installed bundle slot (e.g.
    ``STATE_ROOT/bundles/active``), else None."""
    real = Path(model_dir).resolve()
    return real.name if real.name in ("a", "b") and (real.parent / "active").is_symlink() \
        else None


def describe_identity(ident: dict) -> str:
    """One line for :func:`model_identity`'s result, e.g. ``model syncedge-warp fp32
    2a89b44ab772 from bundle slot a (/var/lib/syncedge/bundles/active)``."""
    where = (f"from bundle slot {ident['bundle_slot']} ({ident['folder']})"
             if ident["bundle_slot"] else f"from {ident['folder']} (not an installed bundle)")
    chain = (f", chain calibration {ident['chain']} ({ident['chain_sha256'][:12]})"
             if ident.get("chain") and ident["chain"] != ident["folder"] else "")
    return f"model {ident['name']} {ident['variant']} {ident['sha256'][:12]} {where}{chain}"


def default_context_source(cache_dir: str | None) -> ContextSource:
    """The device's calibration cache as a :class:`ContextSource`.

    Uses ``edge.cache.store.CalibrationCache(root)``; raises
    :class:`RuntimeInputError` if that module is not part of this build, or for a
    ``cache_dir`` (``--cache-dir``) that is not a folder: reading from the cache never
    creates one where a path was mistyped.
    """
    root = Path(cache_dir) if cache_dir else state_root() / "calibration"
    if cache_dir and not root.is_dir():
        raise RuntimeInputError(f"--cache-dir {cache_dir}: no such folder; expected the "
                                "calibration cache root that `syncedge calibrate store "
                                "--cache-dir DIR` wrote (default: STATE_ROOT/calibration)")
    try:
        mod = importlib.import_module("edge.cache.store")
        source = mod.CalibrationCache(root)
    except (ImportError, AttributeError) as exc:
        raise RuntimeInputError(f"--cell: the calibration cache is not available in this "
                                f"build ({exc}); pass --calibration FILE instead") from None
    if not isinstance(source, ContextSource):
        raise RuntimeInputError("--cell: edge.cache.store.CalibrationCache has no "
                                "get_context(cell_id, camera_id, robot_id, model_sha256)")
    return source


def get_context(args: argparse.Namespace, model: WorldModel, start_episode: Episode | None,
                source: ContextSource | None = None) -> CalibrationContext:
    """The context from ``--calibration`` or ``--cell`` (with ``source`` or the device cache).

    Raises:
        RuntimeInputError: missing cache key parts, no cached context, a bad episode.
        ContextMismatchError: the cached context does not fit the model.
    """
    history_dof = args.dof if args.dof is not None else \
        (start_episode.num_dof if start_episode is not None else None)
    if model.contract.calibration_mode == "history" and (args.calibration or args.cell):
        import sys

        given = f"--calibration {args.calibration}" if args.calibration else f"--cell {args.cell}"
        print(f"history mode: {model.model_dir.name} was trained without calibration and does "
              f"not read one; {given} is ignored", file=sys.stderr)
        return history_context(model, history_dof)
    if args.calibration:
        episode = load_episode(args.calibration)
        ctx = encode_calibration(model, episode, where=str(args.calibration))
        m = episode.metadata
        mismatch = episode_mismatch_warning(
            start_episode.metadata if start_episode is not None else None,
            {"cell_id": m.cell_id, "camera_id": m.camera_id, "robot_id": m.robot_id},
            str(args.start), str(args.calibration))
        return replace(ctx, warnings=(mismatch,)) if mismatch else ctx
    if not args.cell:
        return history_context(model, history_dof)
    meta = start_episode.metadata if start_episode is not None else None
    camera = args.camera_id or (meta.camera_id if meta else None)
    robot = args.robot_id or (meta.robot_id if meta else None)
    src = source or default_context_source(args.cache_dir)
    camera, robot = cached_camera_robot(src, args.cell, camera, robot)
    try:
        ctx = context_from_source(src, model, args.cell, camera, robot)
    except ContextMismatchError:
        raise  # a context is cached, but not one this model reads: said as it is
    except RuntimeInputError:
        hint = _other_models_hint(src, args, camera, robot)
        if not hint:
            raise
        raise RuntimeInputError(f"calibration cache: no context for cell {args.cell!r}, camera "
                                f"{camera!r}, robot {robot!r} and "
                                f"{describe_model(args, model.sha256)}; {hint}") from None
    cached = _cached_dof(src, args.cell, camera, robot, model.sha256)
    if args.dof is not None and cached is not None and int(args.dof) != cached:
        raise RuntimeInputError(f"--dof {args.dof}: the cached calibration of cell "
                                f"{args.cell!r} (camera {camera!r}, robot {robot!r}) has "
                                f"{cached} DoFs; drop --dof or pass --dof {cached}")
    num_dof = int(args.dof) if args.dof is not None else cached
    mismatch = episode_mismatch_warning(meta, {"cell_id": args.cell, "camera_id": camera,
                                               "robot_id": robot},
                                        str(getattr(args, "start", None) or "the start"),
                                        f"cached for --cell {args.cell}")
    return CalibrationContext(ctx.values, ctx.model_sha256, num_dof, ctx.source,
                              warnings=(mismatch,) if mismatch else ())


def cached_camera_robot(source: Any, cell: str, camera: str | None, robot: str | None,
                        model_prefix: str | None = None) -> tuple[str, str]:
    """The camera and robot ids of ``--cell``'s cache key: those given (``--camera-id``,
    ``--robot-id`` or the start episode's metadata), the missing ones from the cache where
    its entries of the cell (for ``model_prefix``, or any model) name one camera and robot.

    Raises:
        RuntimeInputError: an id is missing and the cache holds no entry of the cell, or
            entries with several cameras or robots (naming them).
    """
    if camera and robot:
        return camera, robot
    lister = getattr(source, "list", None)
    infos = lister(cell_id=cell, camera_id=camera, robot_id=robot,
                   model_prefix=model_prefix) if lister is not None else []
    pairs = sorted({(i.key.camera_id, i.key.robot_id) for i in infos})
    if len(pairs) == 1:
        return pairs[0]
    where = f"cell {cell!r} (camera {camera or 'any'}, robot {robot or 'any'})"
    if pairs:
        found = ", ".join(f"{c}/{r}" for c, r in pairs)
        raise RuntimeInputError(f"--cell: the calibration cache holds {where} with several "
                                f"cameras or robots ({found}); pass --camera-id and "
                                "--robot-id")
    raise RuntimeInputError(f"--cell: the calibration cache holds no entry of {where}; store "
                            "the cell's calibration first (syncedge calibrate store EPISODE), "
                            "or pass --camera-id and --robot-id")


def history_context(model: WorldModel, num_dof: int | None) -> CalibrationContext:
    """History mode: the context of a model trained without calibration (SyncWorld's
    fallback when no calibration exists), from its calibration graph on an empty episode
    (the graph reads only the DoF mask). Prints one line saying so.

    Raises:
        RuntimeInputError: the model reads a calibration (``contract.calibration_mode`` is
            ``calibration``), or the DoF count is unknown or above the model's.
    """
    import sys

    import numpy as np

    c = model.contract
    if c.calibration_mode != "history":
        raise RuntimeInputError(
            f"{model.model_dir}: no --calibration or --cell given, and this model reads a "
            f"cell's calibration (model.json contract.calibration_mode 'calibration'); pass "
            f"one, or run history mode with a model trained without calibration "
            f"(--model models/reference-history)")
    n = c.max_dof if num_dof is None else int(num_dof)
    if not 1 <= n <= c.max_dof:
        raise RuntimeInputError(f"--dof {n}: expected 1..{c.max_dof} (the model's max DoF)")
    ch, h, w = c.latent_shape
    t = c.calibration_frames
    mask = np.zeros(c.max_dof, np.float32)
    mask[:n] = 1.0
    values = model.calibrate(np.zeros((t, ch, h, w), np.float32),
                             np.zeros((t, c.max_dof), np.float32), mask)
    print(f"history mode: no calibration; {model.model_dir.name} predicts from the start frame "
          f"and the actions alone ({n} DoFs), without this cell's camera, robot or channel "
          f"convention", file=sys.stderr)
    return CalibrationContext(values=np.ascontiguousarray(values, np.float32),
                              model_sha256=model.sha256, num_dof=n, source="history mode")


def _cached_dof(source: ContextSource, cell: str, camera: str, robot: str,
                model_sha256: str) -> int | None:
    """The cell's DoF count from its cached calibration episode (None if the source does
    not keep episodes)."""
    from edge.cache.values import CacheKey

    get = getattr(source, "get", None)
    if get is None:
        return None
    entry = get(CacheKey(cell, camera, robot, model_sha256))
    return None if entry is None else int(entry.episode.num_dof)


def _other_models_hint(source: ContextSource, args: argparse.Namespace, camera: str,
                       robot: str) -> str:
    """When the cache holds the cell's episode but no context for this model: how to add it."""
    lister = getattr(source, "list", None)
    if lister is None:
        return ""
    entries = lister(cell_id=args.cell, camera_id=camera, robot_id=robot)
    if not entries:
        return ""
    # an entry whose context was dropped (evicted, or quarantined as damaged) keeps its
    # episode but has no context to offer
    shas = ", ".join(sorted(i.key.model_sha256[:12] for i in entries
                            if getattr(i, "context_sha256", "") is not None))
    held = f"with contexts for models {shas}" if shas else "no model's context"
    return (f"the cache holds this cell's calibration episode ({held}): encode the context "
            f"for this model with '{store_command(args, args.cell, camera, robot)}'")


def thread_warnings(args: argparse.Namespace) -> list[str]:
    """What ``--threads`` and ``--candidate-workers`` warn about: more threads than this
    machine's cores, more candidate groups than threads. :func:`open_model` and
    :func:`open_chain` print them and keep them as ``args.setup_warnings`` for the
    outputs' ``warnings``."""
    cores = os.cpu_count() or 1
    threads = args.threads or cores
    workers = getattr(args, "candidate_workers", None)
    out = []
    if threads > cores:
        out.append(f"--threads {threads}: more than this machine's {cores} cores (the "
                   "threads will share them)")
    if workers and workers > threads:
        out.append(f"--candidate-workers {workers}: more groups than the {threads} "
                   "threads; each group runs on 1 thread and the CPU is oversubscribed")
    return out


def say_warnings(lines: Sequence[str]) -> list[str]:
    """Print each line on stderr as ``warning: ...``; returns them (for the report's
    ``warnings``)."""
    for line in lines:
        print(f"warning: {line}", file=sys.stderr)
    return list(lines)


def chain_start_mismatch(args: argparse.Namespace, chain: Any, episode: Episode | None
                         ) -> str | None:
    """The warning when the start episode was recorded in another cell, camera or robot
    than the episode ``chain`` was read from
    (:func:`edge.runtime.inputs.episode_mismatch_warning`), or None."""
    cal = chain.info.get("calibration") or {}
    return episode_mismatch_warning(episode.metadata if episode is not None else None, cal,
                                    str(args.start), str(cal.get("file") or "of the chain"))


def chain_input_warnings(args: argparse.Namespace, chain: Any, episode: Episode | None,
                         q0: Any, actions: Any, actions_from: str, joints_flag: str,
                         joints: str | None) -> list[str]:
    """What ``simulate --chain`` and ``precheck --chain`` warn about: a start episode
    recorded in another cell, camera or robot than the chain's calibration, start readings
    more than a full turn from the calibration's home pose (given as ``joints_flag`` with
    the value ``joints``, else the start episode's), and actions faster than any arm
    (:mod:`edge.runtime.inputs`). Printed on stderr; returned for the report."""
    lines = [*start_resize_warnings(episode, str(args.start)),
             *getattr(args, "start_notes", [])]
    mismatch = chain_start_mismatch(args, chain, episode)
    if mismatch:
        lines.append(mismatch)
    where = joints_flag if joints else f"{args.start} (first joint_positions)"
    lines += start_joint_warnings(q0, chain.home_joint_positions, chain.dof_names, where,
                                  chain.rad_per_unit)
    # the actions are per frame of the start episode where one is given (any rate), else of
    # the calibration
    fps, _ = chain_rollout_rate(chain, episode, str(args.start))
    lines += action_speed_warnings(actions, fps, chain.dof_names, actions_from,
                                   chain.rad_per_unit, chain.prismatic)
    moving = unmoved_channel_warning(chain, actions, actions_from)
    if moving:
        lines.append(moving)
    return say_warnings(lines)


def unmoved_channel_warning(chain: Any, actions: Any, actions_from: str) -> str | None:
    """One line naming the channels the chain does not model
    (:func:`edge.runtime.chain.unmodelled_channels`) that the actions ``[N, T, K]`` (from
    ``actions_from``) move: their motion is not predicted; None where they move none."""
    import numpy as np

    from edge.runtime.chain import unmodelled_channels

    a = np.asarray(actions)
    if a.ndim != 3 or not a.size:
        return None
    rows = [r for r in unmodelled_channels(chain)
            if r["index"] < a.shape[2] and np.any(a[:, :, r["index"]] != 0)]
    if not rows:
        return None
    named = ", ".join(f"{r['channel']} [{r['index']}]" for r in rows)
    whys = "; ".join(f"{r['channel']}: {r['why']}" for r in rows)
    return (f"{actions_from}: the actions move {named}, which the chain calibration does "
            f"not model ({whys}): that motion is not predicted (the arm is drawn as if "
            "those channels stood still, and keep-out rules cannot fire for them); sweep "
            "them over a wider range and read the chain again")


#: The rollout rate of the chain model (Hz) where neither the start nor the chain's
#: calibration records one.
DEFAULT_CHAIN_RATE_HZ = 10.0


def chain_rollout_rate(chain: Any, episode: Episode | None, start: str) -> tuple[float, str]:
    """The frame rate of a chain rollout and where it comes from: ``(fps Hz, text)``.

    The actions are per frame of the start episode, so its ``metadata.fps`` where the start
    is an episode (``start`` names it); the chain calibration's episode's rate
    (:attr:`edge.runtime.chain.ChainCalibration.frame_rate_hz`) only where the start is a
    bare frame; else :data:`DEFAULT_CHAIN_RATE_HZ`. ``simulate --chain`` writes its
    ``prediction.mp4`` and ``step_times_s`` at it, ``precheck --chain`` its
    ``step_times_s``, and the speed warnings judge the actions per frame of it.
    """
    if episode is not None:
        return float(episode.metadata.fps), f"the start episode's, {start} metadata.fps"
    if chain.frame_rate_hz:
        return float(chain.frame_rate_hz), ("the chain's calibration episode's, "
                                            "info.calibration.fps: the start is a frame")
    return DEFAULT_CHAIN_RATE_HZ, ("assumed: the start is a frame and the chain records no "
                                   "calibration rate")


#: The record :class:`StagedOutput` keeps in an output folder: which command wrote it and
#: which files (JSON ``{"command", "files"}``).
OUTPUTS_RECORD = ".syncedge-outputs.json"


def _outputs_record(folder: Path) -> dict | None:
    """The :data:`OUTPUTS_RECORD` of ``folder``, or None (none, or unreadable)."""
    try:
        rec = json.loads((folder / OUTPUTS_RECORD).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(rec, dict) and isinstance(rec.get("command"), str) \
        and isinstance(rec.get("files"), list)
    return rec if ok else None


def check_out_dir(out_dir: str | os.PathLike[str], command: str | None = None) -> Path:
    """``--out``: a folder to (over)write; refuse, before any work, an existing file and
    (with ``command``) a folder that holds another command's outputs.

    A folder holds one command's outputs: rerunning ``syncedge simulate --out DIR``
    replaces them, while ``syncedge simulate --out DIR`` into the folder of a ``syncedge
    precheck`` is refused rather than leaving its ``report.json`` beside new
    ``metrics.json`` (the record: :data:`OUTPUTS_RECORD`).

    Raises:
        RuntimeInputError: ``out_dir`` (or a parent) is an existing file, or ``out_dir``
            holds the outputs of another command than ``command``.
    """
    p = Path(out_dir)
    for q in (p, *p.parents):
        if q.exists() and not q.is_dir():
            raise RuntimeInputError(f"{q}: an existing file; --out takes a folder (give "
                                    f"another path, or remove the file)")
    rec = _outputs_record(p) if command is not None else None
    if rec is not None and rec["command"] != command:
        files = ", ".join(str(f) for f in rec["files"][:4]) + (", ..." if len(rec["files"]) > 4
                                                              else "")
        raise RuntimeInputError(f"--out {p}: holds the outputs of `{rec['command']}` ({files}); "
                                f"give `{command}` another folder, or remove that one (one "
                                f"folder holds one command's outputs, never a mix)")
    return p


class StagedOutput:
    """Write several files, then publish them all under their final names at once.

    Args:
        out_dir: the final folder (created on :meth:`commit`).
        command: the command writing it (``"syncedge simulate"``); with it the folder
            keeps a record of the command and its files (:data:`OUTPUTS_RECORD`), another
            command's folder is refused (:func:`check_out_dir`), and a rerun removes the
            files of the earlier run that it does not write again.

    Use as a context manager: :meth:`path` gives a staging path for a file name; on
    normal exit call :meth:`commit`; on an exception the staging folder is removed and
    nothing appears under ``out_dir``.
    """

    def __init__(self, out_dir: str | os.PathLike[str], command: str | None = None):
        self.out_dir = check_out_dir(out_dir, command)
        self.command = command
        self._stage: Path | None = None
        self._names: list[str] = []

    def __enter__(self) -> StagedOutput:
        try:
            self.out_dir.parent.mkdir(parents=True, exist_ok=True)
            self._stage = Path(tempfile.mkdtemp(prefix=f".{self.out_dir.name}.staging-",
                                                dir=self.out_dir.parent))
        except OSError as exc:
            raise self._cannot_write(exc) from None
        return self

    def _cannot_write(self, exc: OSError) -> RuntimeInputError:
        """The one-line error for a failed write: the user's folder, not the staging one."""
        why = (exc.strerror or str(exc)).lower()
        return RuntimeInputError(f"{self.out_dir}: cannot write the output there ({why}); "
                                 "give --out a folder you can write to (nothing was written)")

    def path(self, name: str) -> Path:
        """Staging path for the final file ``out_dir / name``."""
        assert self._stage is not None
        self._names.append(name)
        return self._stage / name

    def commit(self) -> list[Path]:
        """Move every staged file under its final name; returns the final paths."""
        assert self._stage is not None
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._cannot_write(exc) from None
        before = _outputs_record(self.out_dir) if self.command is not None else None
        done = []
        for name in self._names:
            os.replace(self._stage / name, self.out_dir / name)
            done.append(self.out_dir / name)
        if self.command is not None:
            for old in (before or {}).get("files", []):  # the earlier run's leftovers
                stale = self.out_dir / str(old)
                if str(old) not in self._names and stale.parent == self.out_dir \
                        and stale.is_file():
                    stale.unlink()
            record = self._stage / OUTPUTS_RECORD
            record.write_text(json.dumps({"command": self.command, "files": self._names}))
            os.replace(record, self.out_dir / OUTPUTS_RECORD)
        return done

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        stage, self._stage = self._stage, None
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
        # a write into the staging folder failed (no space, no permission): say it of --out
        if (isinstance(exc, OSError) and stage is not None and exc.filename
                and str(exc.filename).startswith(str(stage))):
            raise self._cannot_write(exc) from None


def run_command(name: str,
                register: Callable[[argparse._SubParsersAction], argparse.ArgumentParser],
                argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (without the command name) for subcommand ``name`` and run it, like
    ``edge.cli.main`` does.

    Project errors and file errors print one line on stderr and give exit code 2.
    """
    parser = argparse.ArgumentParser(prog="syncedge")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    register(sub)
    from edge.cli import join_negative_values, run_parsed

    args = parser.parse_args(join_negative_values([name, *(sys.argv[1:] if argv is None
                                                           else argv)]))

    return run_parsed(args)


#: ``--chain`` given without a FILE: the cell's chain calibration from the calibration cache.
CHAIN_FROM_CACHE = "@cache"
#: ``--anchor`` without EPISODE: the calibration episode the cache holds with the chain.
ANCHOR_FROM_CACHE = "@cache"


def add_chain_arg(p: argparse.ArgumentParser, extra: str = "") -> None:
    """``--chain [FILE]`` of ``simulate`` and ``precheck``."""
    p.add_argument("--chain", metavar="FILE", nargs="?", const=CHAIN_FROM_CACHE,
                   help="run the chain model with this chain calibration (.npz from "
                        "`syncedge model read-chain`) instead of an ONNX model; without FILE, "
                        "with --cell: the cell's chain calibration from the calibration cache "
                        "(`syncedge calibrate store EPISODE --chain`); implied when the model "
                        "in use (--model DIR, else the active bundle) is the chain model "
                        "(`syncedge export chain-model`)" + extra)


def add_anchor_arg(p: argparse.ArgumentParser) -> None:
    """``--anchor [EPISODE]`` and ``--no-anchor`` of ``simulate`` and ``precheck`` (chain
    model only)."""
    from edge.runtime.chain import AUTO_ANCHOR_BELOW

    p.add_argument("--anchor", metavar="EPISODE", nargs="?", const=ANCHOR_FROM_CACHE,
                   help="with the chain model: refine the chain at the start frame before the "
                        "rollout, so that it puts the arm where the start frame shows it "
                        "(about 30 s on 2 idle CPU cores; needs torch). It needs the "
                        "calibration episode the chain was read from: without EPISODE, the "
                        "one the calibration cache holds with the cell's chain (--chain "
                        "alone, --cell ID); with a chain FILE, give that episode. Without "
                        "--anchor or --no-anchor, a chain from the cache is anchored when it "
                        f"puts less than {AUTO_ANCHOR_BELOW * 100:.0f}%% of the arm it draws at the "
                        "start where the start frame shows something in front of the "
                        "background (its start agreement, recorded in the outputs)")
    p.add_argument("--no-anchor", action="store_true",
                   help="with the chain model: never anchor at the start frame (the start "
                        "agreement is still measured and reported)")


def use_chain_model(args: argparse.Namespace, default: Any) -> bool:
    """Whether the command runs the chain model: ``--chain`` was given, or the model in use
    (``--model DIR``, else the active bundle) is a chain model folder
    (:class:`edge.manifest.ChainModelManifest`, installed from a chain bundle). In the
    latter case the folder is checked (a chain format this runtime does not run is refused
    by name), ``args.chain`` is set to ``default`` (what ``--chain`` alone means to the
    command), ``args.model`` is cleared and ``args.chain_model`` records the folder, its
    manifest and its bundle slot (:func:`chain_model_identity`).

    Raises:
        edge.manifest.ManifestError: the chain model folder's ``model.json`` is refused.
    """
    from edge.manifest import is_chain_model_dir, load_chain_model_dir, model_sha256

    d = model_dir_of(args)
    if not is_chain_model_dir(d):
        return bool(getattr(args, "chain", None))
    from edge.bundle.install import check_slot_identity

    check_slot_identity(d)
    manifest = load_chain_model_dir(d)
    args.chain_model = {"name": manifest.name, "variant": manifest.variant,
                        "sha256": model_sha256(d), "bundle_slot": _bundle_slot(d),
                        "folder": str(d)}
    args.model = None
    if not getattr(args, "chain", None):
        args.chain = default
    return True


def chain_mode(args: argparse.Namespace) -> str:
    """How refusals name the chain model's mode: ``--chain``, or ``the chain model FOLDER``
    when the model in use is a chain model folder (:func:`use_chain_model`)."""
    cm = getattr(args, "chain_model", None)
    return f"the chain model {cm['folder']}" if cm else "--chain"


def chain_model_identity(args: argparse.Namespace, chain: Any, source: str) -> dict:
    """``model_id`` of a chain rollout's report: the chain model folder's name, variant,
    sha256, bundle slot and folder when it came from one (:func:`use_chain_model`), else
    ``syncedge-chain``; ``chain_sha256`` and ``chain`` (the chain calibration's sha256 and
    where it came from) either way."""
    ident = dict(getattr(args, "chain_model", None) or
                 {"name": "syncedge-chain", "variant": "numpy", "sha256": chain.sha256(),
                  "bundle_slot": None, "folder": source})
    ident.update({"chain_sha256": chain.sha256(), "chain": source})
    return ident


def chain_store_hint(cell: str, cache_dir: str | None) -> str:
    """How to put a cell's chain calibration into the cache."""
    root = f" --cache-dir {cache_dir}" if cache_dir else ""
    return (f"store one with 'syncedge calibrate store CALIBRATION.npz --chain{root}' (reads "
            f"it; or '--chain CHAIN.npz' for one read elsewhere), or, when the cache holds "
            f"the cell's calibration episode, 'syncedge calibrate store --cell {cell} "
            f"--chain{root}'")


def cached_chain_key(args: argparse.Namespace):
    """The cache key of the chain calibration for ``--cell`` (camera and robot ids from the
    flags, else the start episode's metadata)."""
    from edge.cache.values import CacheKey
    from edge.runtime.chain import CHAIN_MODEL_SHA256

    if not args.cell:
        cm = getattr(args, "chain_model", None)
        lead = (f"{cm['folder']} is the chain model (model {cm['name']}), which reads the "
                f"cell's chain calibration from the calibration cache" if cm else
                "--chain without FILE reads the cell's chain calibration from the "
                "calibration cache")
        raise RuntimeInputError(f"{lead}: give --cell ID (or --chain FILE)")
    meta = None
    if str(args.start).lower().endswith(".npz"):
        meta = load_episode(args.start).metadata
    camera = args.camera_id or (meta.camera_id if meta else None)
    robot = args.robot_id or (meta.robot_id if meta else None)
    if not camera or not robot:
        camera, robot = cached_camera_robot(default_context_source(args.cache_dir), args.cell,
                                            camera, robot, CHAIN_MODEL_SHA256)
    return CacheKey(args.cell, camera, robot, CHAIN_MODEL_SHA256)


def _cached_chain(args: argparse.Namespace):
    """The chain calibration the cache holds for ``--cell``; returns ``(chain, source
    text)``."""
    key = cached_chain_key(args)
    src = default_context_source(args.cache_dir)
    chain = src.get_context(key.cell_id, key.camera_id, key.robot_id, key.model_sha256)
    if chain is None:
        why = _chain_miss_why(args, key)
        raise RuntimeInputError(f"calibration cache: no chain calibration for cell "
                                f"{key.cell_id!r}, camera {key.camera_id!r}, robot "
                                f"{key.robot_id!r}{why}"
                                + ("" if DROPPED_CHAIN in why else
                                   f"; {chain_store_hint(key.cell_id, args.cache_dir)}"))
    return chain, f"cache:{key.cell_id}/{key.camera_id}/{key.robot_id}"


#: What :func:`_chain_miss_why` says of an entry whose chain calibration was dropped.
DROPPED_CHAIN = "the cache's entry for it holds the calibration episode but no chain calibration"


def _chain_miss_why(args: argparse.Namespace, key: Any) -> str:
    """What a chain lookup that missed may have got wrong: a start episode recorded in
    another cell than ``--cell``, and the chain calibrations the local cache does hold."""
    from edge.cache.store import CalibrationCache, default_root
    from edge.runtime.chain import CHAIN_MODEL_SHA256

    why = ""
    if str(args.start).lower().endswith(".npz"):
        recorded = load_episode(args.start).metadata.cell_id
        if recorded and recorded != key.cell_id:
            why += (f" (the start episode {args.start} was recorded in cell {recorded!r}, "
                    f"its metadata says, not in --cell {key.cell_id!r})")
    root = Path(args.cache_dir or default_root())
    if (root / "index.sqlite3").is_file():  # never create a cache to say it is empty
        try:
            with CalibrationCache(root) as cache:
                held = list(cache.list(model_prefix=CHAIN_MODEL_SHA256))
        except Exception:  # noqa: BLE001 - a hint only: the miss is reported regardless
            held = None
        if held is not None:
            mine = [e for e in held if (e.key.cell_id, e.key.camera_id, e.key.robot_id)
                    == (key.cell_id, key.camera_id, key.robot_id)]
            with_chain = [e.key for e in held if e.context_sha256 is not None]
            if mine and mine[0].context_sha256 is None:
                # the entry is there, its chain is not: dropped (damaged, or evicted)
                why += (f"; {DROPPED_CHAIN} (dropped as damaged or evicted: 'syncedge cache "
                        "list' shows it): read it again from the cached episode with "
                        f"'syncedge calibrate store --cell {key.cell_id} --camera-id "
                        f"{key.camera_id} --robot-id {key.robot_id} --chain'")
            else:
                why += ("; the cache holds chain calibrations for " + ", ".join(
                    f"{k.cell_id}/{k.camera_id}/{k.robot_id}" for k in with_chain[:8])
                    + (f" and {len(with_chain) - 8} more" if len(with_chain) > 8 else "")
                    if with_chain else "; the cache holds no chain calibration")
    return why


def _anchor_episode(args: argparse.Namespace, anchor: str,
                    calibration: tuple[Episode, str] | None = None) -> tuple[Episode, str]:
    """The calibration episode to anchor with: ``anchor`` is :data:`ANCHOR_FROM_CACHE`
    (``calibration`` where the caller holds it, else the cache's, with the cached chain)
    or a file (the refinement checks that the chain was read from it)."""
    if anchor == ANCHOR_FROM_CACHE and calibration is not None:
        return calibration
    if anchor == ANCHOR_FROM_CACHE:
        if args.chain != CHAIN_FROM_CACHE:
            raise RuntimeInputError(f"--anchor: with --chain {args.chain}, give the "
                                    "calibration episode that chain was read from "
                                    "(--anchor EPISODE); --anchor alone takes the cached "
                                    "episode of --cell's chain")
        from edge.cache.store import CalibrationCache, default_root

        key = cached_chain_key(args)
        with CalibrationCache(args.cache_dir or default_root()) as cache:
            entry = cache.get(key)
        if entry is None:
            raise RuntimeInputError(f"calibration cache: entry of cell {key.cell_id!r} "
                                    "vanished; try again")
        return entry.episode, f"cache:{key.cell_id}/{key.camera_id}/{key.robot_id}"
    from edge.errors import EpisodeError

    try:
        episode = load_episode(anchor)
    except EpisodeError as exc:  # names the file and the field
        raise RuntimeInputError(f"--anchor: {exc} (expected the calibration episode the "
                                "chain was read from)") from None
    return episode, str(anchor)


def say_light_change(light: dict[str, Any] | None) -> None:
    """Say on stderr that the chain's drawing was matched to a light changed since the
    calibration (``light``: :meth:`edge.runtime.chain.LightMatch.summary`, as
    ``start_agreement`` returns it); nothing when no match was applied."""
    if not light or not light.get("applied"):
        return
    diff = light["background_difference_levels"]
    print(f"note: the light changed since the calibration (the background differs from the "
          f"start frame by {diff['before']:g} levels, {diff['after']:g} once matched; gain "
          f"{'/'.join(f'{g:.2f}' for g in light['gain'])}): the calibration's background and "
          "arm are drawn in the start frame's light", file=sys.stderr, flush=True)


def say_camera_moved(camera: dict[str, Any] | None, differs_share: float = 0.0
                     ) -> str | None:
    """Say on stderr that the start frame does not show the calibration's scene
    (``camera["scene_matched"]`` False; ``differs_share``: the share of the frame that
    differs from the calibration's background), or that its scene is shifted from the
    calibration's (``camera``: :func:`edge.runtime.chain.camera_shift`, as
    ``start_agreement`` returns it): the camera may have moved, and the rollout draws the
    calibration's background and arm off by the shift; nothing when neither. Returns the
    warning (for the outputs' ``warnings``), or None."""
    from edge.runtime.chain import SCENE_MIN_RESPONSE

    if camera and camera.get("scene_matched") is False:
        return say_warnings([
            f"the start frame does not show the calibration's scene: its static scene "
            f"matches the calibration's home frame with a correlation of "
            f"{camera['response']:.2f} (below {SCENE_MIN_RESPONSE}) and {differs_share:.0%} "
            f"of the frame differs from the calibration's background: another camera (a wrist "
            f"camera's frame for a fixed camera's calibration), a camera pointed elsewhere, "
            f"or another cell; the prediction would draw this calibration's arm over "
            f"another view. Give a start frame from the calibrated camera (check it with "
            f"`syncedge calibrate verify`)"])[0]
    if not camera or not camera.get("moved"):
        return None
    dx, dy = camera["shift_px"]
    return say_warnings([
        f"the start frame's scene is shifted {camera['shift']:.1f} px from the "
        f"calibration's ({dx:+.1f}, {dy:+.1f} px on the chain's grid): the camera may have "
        "moved since the calibration, and the prediction draws the calibration's "
        "background and arm off by that much; check with `syncedge calibrate verify` and "
        "record the calibration again if it says STALE"])[0]


def agreement_warnings(decided: dict[str, Any]) -> list[str]:
    """The warnings of :func:`anchor_chain`'s decision for the outputs' ``warnings`` (a
    moved camera, then a low start agreement), each already said on stderr."""
    return [w for w in (decided.get("camera_warning"), decided.get("warning")) if w]


def anchor_chain(args: argparse.Namespace, chain: Any, source: str, start: Any, q0: Any,
                 calibration: tuple[Episode, str] | None = None,
                 refuse_moved: Callable[[list[str]], None] | None = None
                 ) -> tuple[Any, str, dict[str, Any]]:
    """``(chain, source, decision)``: the chain refined at the start frame (the reader
    plug-in ``syncedge.chain_readers`` ``anchor``,
    :func:`export.models.chain_fit.anchor_chain_to_start`; progress on stderr) and the
    source text saying so, or both as given; ``decision`` says what was decided and why
    (the outputs' ``start_agreement``). Call it once the inputs are checked: anchoring
    takes about 30 s.

    Anchored with ``--anchor``; never with ``--no-anchor``; otherwise when the chain's
    start agreement (:func:`edge.runtime.chain.start_agreement`: the share of the arm it
    draws at the start that lies where the start frame shows something in front of the
    calibration's background) is below :data:`edge.runtime.chain.AUTO_ANCHOR_BELOW` and
    the calibration episode is at hand (a chain from the cache, or ``calibration``:
    ``(episode, where)``, the cached episode ``calibrate validate --chain`` holds); with a
    chain file, said with the option that would anchor. ``simulate``, ``precheck`` and
    ``calibrate validate`` with the chain model all decide here. A start agreement below
    :data:`edge.runtime.chain.LOW_START_AGREEMENT` after that is warned about
    (``decision["warning"]``): measured on 64 held-out robot cells, such starts kept little
    over copying the start frame. ``refuse_moved``: called with the moved-camera warning
    before anything is anchored where the shift is at least
    :data:`edge.runtime.chain.CAMERA_SHIFT_REFUSE_PX`, or where the start frame does not
    show the calibration's scene (``scene_matched`` False) (``precheck`` refuses there);
    it raises to refuse.

    Raises:
        RuntimeInputError: ``--anchor`` with ``--no-anchor``; as :func:`_anchor_episode`;
            torch missing; an episode the refinement refuses.
    """
    import importlib.util

    from edge.runtime.chain import (
        AUTO_ANCHOR_BELOW,
        CAMERA_SHIFT_REFUSE_PX,
        LOW_START_AGREEMENT,
        start_agreement,
    )

    given = getattr(args, "anchor", None)
    if given and getattr(args, "no_anchor", False):
        raise RuntimeInputError("--anchor and --no-anchor: give one of the two")
    before = start_agreement(chain, start, q0)
    if (before.get("camera") or {}).get("scene_matched") is not False:
        say_light_change(before.get("light"))  # else no light explains another view
    frame_px = int(chain.robot.size)
    moved = say_camera_moved(before.get("camera"), before["differs_px"] / max(frame_px, 1))
    if moved and refuse_moved is not None and (
            before["camera"]["shift"] >= CAMERA_SHIFT_REFUSE_PX
            or before["camera"].get("scene_matched") is False):
        refuse_moved([moved])  # before anchoring's 30 s, which cannot undo it
    share = before["arm_on_arm"]
    decided: dict[str, Any] = {"before": before, "anchored": False, "why": None,
                               "after": None, "warning": None, "camera_warning": moved}
    episode = given  # the episode to anchor with, or None
    low = share is not None and share < AUTO_ANCHOR_BELOW
    said = (f"the chain puts {share:.0%} of the arm it draws at the start where the start "
            f"frame shows the arm (below {AUTO_ANCHOR_BELOW:.0%})") if low else ""
    if given:
        decided["why"] = "--anchor"
    elif getattr(args, "no_anchor", False):
        decided["why"] = "--no-anchor: not anchored"
    elif not low:
        decided["why"] = ("no pixel of the arm drawn at the start lies on known background"
                          if share is None else
                          f"start agreement {share:.0%}, not below {AUTO_ANCHOR_BELOW:.0%}: "
                          "not anchored")
    elif importlib.util.find_spec("torch") is None:
        decided["why"] = f"{said}, but anchoring needs torch: not anchored"
        print(f"note: {said}; anchoring it there needs torch (pip install '.[train]'), not "
              "installed", file=sys.stderr, flush=True)
    elif calibration is not None or args.chain == CHAIN_FROM_CACHE:
        episode = ANCHOR_FROM_CACHE
        decided["why"] = f"{said}: anchored (--no-anchor skips it)"
        print(f"{said}: anchoring it at the start frame first (--no-anchor skips this)",
              file=sys.stderr, flush=True)
    else:
        decided["why"] = f"{said}, but the calibration episode is not at hand: not anchored"
        print(f"note: {said}; --anchor EPISODE (the calibration episode the chain was read "
              "from) refines it at the start frame first", file=sys.stderr, flush=True)
    if episode:
        chain, source = _anchored(args, episode, chain, source, start, q0, calibration)
        decided["anchored"] = True
        decided["after"] = start_agreement(chain, start, q0)
    final = (decided["after"] or before)["arm_on_arm"]
    if final is not None and final < LOW_START_AGREEMENT:
        decided["warning"] = say_warnings([
            f"the chain puts only {final:.0%} of the arm it draws at the start where the "
            "start frame shows the arm: either the start joint readings are not the pose "
            "the start frame shows (another time, another unit or channel order; check "
            "them) or its axes or links are read wrong for this pose, so the prediction "
            "may gain little over the start frame itself (check the calibration's fit "
            "sheet; a motion episode, calibrate store --chain --motion, refines it)"])[0]
    return chain, source, decided


def _anchored(args: argparse.Namespace, anchor: str, chain: Any, source: str, start: Any,
              q0: Any, calibration: tuple[Episode, str] | None = None) -> tuple[Any, str]:
    """The chain refined at the start frame with the episode ``anchor`` names (a file, or
    :data:`ANCHOR_FROM_CACHE`: ``calibration`` where given), and the source text saying so
    (:func:`anchor_chain`)."""
    import time

    from edge.plugins import load

    t0 = time.perf_counter()

    episode, where = _anchor_episode(args, anchor, calibration)
    try:
        import torch

        anchor = load("syncedge.chain_readers", "anchor", "anchoring a chain at the start")
    except ImportError as exc:
        raise RuntimeInputError(f"--anchor needs torch ({exc}): install it with pip install "
                                "'.[train]', or leave --anchor out") from None
    torch.set_num_threads(args.threads or 2)
    print(f"anchoring the chain at the start frame with {where} (about 30 s on 2 idle CPU "
          "cores) ...", file=sys.stderr, flush=True)
    try:
        anchored = anchor(chain, episode, start, q0,
                          log=lambda line: print(f"  [{time.perf_counter() - t0:6.1f} s] "
                                                 f"{line}", file=sys.stderr, flush=True))
    except ValueError as exc:  # another episode, channels, sizes
        raise RuntimeInputError(f"--anchor {where}: {exc}") from None
    from edge.runtime.chain import frames_sha256

    # which episode it was refined with (a file or the cache entry), and its frames' digest
    anchored.info["anchor"].update(episode=where,
                                   episode_frames_sha256=frames_sha256(episode.frames))
    return anchored, f"{source}, anchored at the start frame"


def open_chain(args: argparse.Namespace, joints_flag: str, joints: str | None):
    """What ``simulate --chain`` and ``precheck --chain`` start from: the chain calibration
    (``--chain FILE``, or with ``--chain`` alone the one the calibration cache holds for
    ``--cell``), the start frame and episode (``--start``) and the controller's joint
    readings at the start (``joints``, given as ``joints_flag``, else the start episode's
    first ``joint_positions``). The chain model runs in NumPy/OpenCV on the CPU: another
    ``--backend`` is refused and ``--threads`` goes to OpenCV.

    Returns:
        ``(chain, start uint8 [H, W, 3], episode or None, q0 float64 [K], source)``;
        ``source`` is the chain file's path or ``cache:CELL/CAMERA/ROBOT``.

    Raises:
        RuntimeInputError: another backend; ``--cell`` with a chain FILE, or ``--chain``
            alone without ``--cell``; no chain calibration cached for the cell; the chain
            file's errors; a start of another size; a start episode recorded with other
            channel names or order; no joint readings, or not K of them. (A start episode
            at another frame rate than the calibration is taken: the chain places the arm
            at each step's joint readings, whatever the time between steps.)
    """
    import cv2
    import numpy as np

    from edge.runtime.chain import load_chain_calibration
    from edge.runtime.inputs import load_joint_state, load_start

    if args.backend not in ("cpu", "auto"):
        raise RuntimeInputError(f"--backend {args.backend}: the chain model runs on the CPU "
                                "(NumPy and OpenCV); leave --backend out or give cpu")
    if getattr(args, "candidate_workers", None):
        raise RuntimeInputError("--candidate-workers: not with --chain (the chain model moves "
                                "every candidate in one NumPy pass; --threads sets OpenCV's "
                                "threads)")
    if args.threads:
        cv2.setNumThreads(args.threads)
    args.setup_warnings = say_warnings(thread_warnings(args))
    if args.chain == CHAIN_FROM_CACHE:
        chain, source = _cached_chain(args)
    else:
        if args.cell:
            raise RuntimeInputError(f"--cell: not with --chain {args.chain} (the chain file is "
                                    "the cell's encoded calibration); give --chain alone to "
                                    "read the cell's chain calibration from the cache")
        chain, source = load_chain_calibration(args.chain), str(args.chain)
    k = chain.num_dof
    args.start_notes = []
    start, episode = load_start(args.start, chain.resolution, args.start_notes)
    grey = grey_image_note(start, chain.home_frame, args.start, "the start frame",
                           "the calibration's home frame")
    if grey:
        args.start_notes.append(grey)
    if episode is not None:
        names_ep = list(episode.metadata.dof_names)
        if names_ep[:k] != chain.dof_names:
            raise RuntimeInputError(
                f"{args.start}: metadata.dof_names {names_ep}: expected the chain "
                f"calibration's channels in its order, {chain.dof_names} (record the "
                "start with the controller the cell was calibrated with)")
    if joints:
        q0 = load_joint_state(joints, joints_flag)
    elif episode is not None and episode.joint_positions is not None:
        q0 = np.asarray(episode.joint_positions[0, :k], np.float64)
    else:
        raise RuntimeInputError(f"{joints_flag}: required with --chain when --start is a "
                                "frame or an episode without joint_positions (the "
                                "controller's joint readings at the start frame)")
    if q0.shape != (k,):
        raise RuntimeInputError(f"{joints_flag}: expected {k} values "
                                f"({', '.join(chain.dof_names)}), found {q0.size}")
    return chain, start, episode, q0, source
