"""``syncedge cells ...``: generate, preview and inspect MuJoCo-rendered robot cells."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from export.cells.sampling import LIGHTINGS
from export.cells.trajectories import MOTION_PROFILES

__all__ = ["register", "parse_chunks", "write_sample_cell"]

SAMPLE_DIR = Path("samples") / "cell_sample"


def parse_chunks(text: str) -> list[int]:
    """Parse ``"3"``, ``"0-9"`` or ``"0-3,8"`` into chunk indices.

    Raises:
        CellError: for anything else, quoting the expected form.
    """
    from export.errors import CellError

    out: list[int] = []
    try:
        for part in text.split(","):
            if "-" in part:
                a, b = (int(x) for x in part.split("-", 1))
                if b < a:
                    raise ValueError
                out.extend(range(a, b + 1))
            else:
                out.append(int(part))
    except ValueError:
        raise CellError(f"--chunks {text!r}: expected N, A-B or a comma list such as 0-3,8") from None
    if any(c < 0 for c in out):
        raise CellError(f"--chunks {text!r}: chunk indices must be >= 0")
    return out


def _parse_range(text: str, flag: str) -> tuple[float, float]:
    """``"LO-HI"`` (two positive numbers) -> ``(lo, hi)``; CellError naming ``flag``."""
    from export.errors import CellError

    parts = text.split("-")
    try:
        lo, hi = (float(p) for p in parts)
    except ValueError:
        raise CellError(f"{flag} {text!r}: expected LOW-HIGH in rad, e.g. 0.2-0.8") from None
    return lo, hi


def _command_line() -> str:
    return "syncedge " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _each_chunk(items: list[Any], work: Callable[..., Any],
                arguments: Callable[[Any], tuple[Any, ...]], workers: int,
                name: Callable[[Any], str]) -> None:
    """``work(*arguments(item))`` for every chunk item, in ``workers`` processes when there
    are several (a line per finished chunk on stderr), else in turn with ``work``'s own
    progress lines."""
    t0 = time.perf_counter()

    def progress(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", file=sys.stderr, flush=True)

    if workers > 1 and len(items) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(workers) as pool:
            futures = [pool.submit(work, *arguments(it)) for it in items]
            for it, f in zip(items, futures, strict=True):
                progress(f"{name(it)} done: {f.result()}")
    else:
        for it in items:
            work(*arguments(it), progress=progress)


def _run_generate(args: argparse.Namespace) -> int:
    from export.cells.generate import GenerateOptions, generate_chunk

    opts = GenerateOptions(cells_per_chunk=args.cells_per_chunk,
                           motion_episodes=args.motion_episodes,
                           motion_frames=args.motion_frames, fps=args.fps,
                           width=args.size, height=args.size,
                           face_budget=None if args.no_decimate else args.face_budget,
                           segmentation=not args.no_segmentation, motion=args.motion,
                           sweep_amplitude_rad=_parse_range(args.sweep_amplitude,
                                                            "--sweep-amplitude"),
                           lighting=args.lighting)
    chunks = parse_chunks(args.chunks)
    cmd = _command_line()
    _each_chunk(chunks, generate_chunk, lambda c: (args.split, c, args.out, opts, cmd),
                args.workers, lambda c: f"chunk {c}")
    print(f"{len(chunks)} chunk(s) of {args.split} under {args.out}")
    return 0


def _run_geometry(args: argparse.Namespace) -> int:
    from export.cells.geometry import render_chunk_geometry

    root = Path(args.data) / args.split
    if args.chunks is None:
        dirs = sorted(p.parent for p in root.glob("chunk-*/manifest.json"))
    else:
        dirs = [root / f"chunk-{c:04d}" for c in parse_chunks(args.chunks)]
    if not dirs:
        print(f"error: {root}: no complete chunk (chunk-*/manifest.json); generate it with "
              f"'syncedge cells generate --split {args.split} --out {args.data}'",
              file=sys.stderr)
        return 2
    cmd = _command_line()
    _each_chunk(dirs, render_chunk_geometry, lambda d: (d, cmd), args.workers,
                lambda d: d.name)
    print(f"geometry of {len(dirs)} chunk(s) of {args.split} under {args.data}")
    return 0


def write_sample_cell(out: Path, motion_frames: int = 40,
                      commissioning_frames: int = 32) -> Path:
    """Render the shipped sample cell (held-out robot, held-out camera) into ``out``.

    Writes ``calibration.npz``, ``test.npz``, ``calibration_256.npz`` (the same calibration
    episode rendered at 256x256, as a camera recording at a higher resolution than the
    model's 64x64 would give it: what ``syncedge model read-chain`` reads the chain from),
    ``commissioning_256.npz`` (another episode of ordinary motion at 256x256, drawn apart
    from the test episode: what ``read-chain --motion`` refines the chain with) and
    ``manifest.json`` (checksums, seed and the command that regenerates it). Returns the
    manifest path.
    """
    import numpy as np

    from edge.episode import save_episode
    from edge.fileio import sha256_file, write_json_atomic
    from export.cells.generate import CellGenerator, GenerateOptions
    from export.cells.robots import robot_spec
    from export.cells.sampling import chunk_seed, sample_cell
    from export.cells.scene import require_mujoco
    from export.cells.trajectories import motion_trajectory

    mujoco = require_mujoco()

    seed = chunk_seed("test_all", 0)
    cell = sample_cell(np.random.default_rng(seed), "test_all", "sample-cell")
    opts = GenerateOptions(motion_episodes=0, motion_frames=motion_frames)
    with CellGenerator(opts) as gen:
        eps = gen.cell_episodes(cell)
        rng = np.random.default_rng(cell.seed + 1)
        q = motion_trajectory(rng, robot_spec(cell.robot), motion_frames, opts.motion)
        eps["test"] = gen.render_episode(cell, q, "validation")
    hi_opts = GenerateOptions(motion_episodes=0, motion_frames=motion_frames, width=256,
                              height=256)
    with CellGenerator(hi_opts) as gen:
        eps["calibration_256"] = gen.cell_episodes(cell)["calibration"]
        rng = np.random.default_rng(cell.seed + 2)  # apart from the test episode's draw
        q = motion_trajectory(rng, robot_spec(cell.robot), commissioning_frames, hi_opts.motion)
        eps["commissioning_256"] = gen.render_episode(cell, q, "validation")
    files = {}
    for name, ep in eps.items():
        p = save_episode(ep, out / f"{name}.npz")
        files[p.name] = {"sha256": sha256_file(p), "bytes": p.stat().st_size,
                         "frames": ep.num_frames, "kind": ep.metadata.kind}
    manifest: dict[str, Any] = {
        "what": "sample cell: held-out robot, held-out camera band, held-out convention "
                "(split test_all); a calibration episode, a test episode with ground truth "
                "and a commissioning episode of other motion at 256x256",
        "command": f"syncedge cells sample --out {out}",
        "split": "test_all", "seed": seed, "cell": cell.to_json_dict(),
        "options": {"width": opts.width, "height": opts.height, "fps": opts.fps,
                    "test_frames": motion_frames, "commissioning_frames": commissioning_frames,
                    "face_budget": opts.face_budget,
                    "motion": opts.motion},
        "renderer": {"mujoco": mujoco.__version__},
        "files": files,
    }
    return write_json_atomic(out / "manifest.json", manifest)


def _run_sample(args: argparse.Namespace) -> int:
    path = write_sample_cell(Path(args.out))
    print(f"sample cell written: {path}")
    return 0


def _run_preview(args: argparse.Namespace) -> int:
    from edge.fileio import check_file_target
    from edge.visual import write_png

    if args.out:  # before the rendering, not after it
        check_file_target(args.out, overwrite=True)

    if args.episode:
        from export.cells.preview import episodes_sheet, load_cell_dir

        eps = load_cell_dir(Path(args.episode))
        if not eps:
            from export.errors import CellError

            raise CellError(f"{args.episode}: no episode files (*.npz) found")
        first = next(iter(eps.values())).frames.shape[1:3]  # the calibration's, if any
        other = [k for k, e in eps.items() if e.frames.shape[1:3] != first]
        if other:  # one sheet holds one resolution (a cell folder may keep a 256 px copy)
            print(f"left out at another resolution than {first[1]}x{first[0]}: "
                  f"{', '.join(other)} (give one of them as --episode to see it)")
            eps = {k: e for k, e in eps.items() if k not in other}
        img = episodes_sheet(eps)
        out = Path(args.out or "cell_preview.png")
    else:
        from export.cells.preview import random_cells_sheet

        img = random_cells_sheet(args.count, args.seed)
        out = Path(args.out or "cells_preview.png")
    write_png(out, img)
    print(f"contact sheet written: {out} ({img.shape[1]}x{img.shape[0]} px)")
    return 0


def _run_show(args: argparse.Namespace) -> int:
    from edge.episode import load_episode

    ep = load_episode(args.episode)
    m = ep.metadata
    info = {
        "file": str(args.episode), "frames": ep.num_frames, "resolution": list(ep.resolution),
        "dof": ep.num_dof, "fps": m.fps, "kind": m.kind, "robot": m.robot, "split": m.split,
        "cell_id": m.cell_id, "camera_id": m.camera_id, "robot_id": m.robot_id,
        "dof_names": list(m.dof_names), "segments": len(m.segments),
        "duration_s": float(ep.timestamps[-1] - ep.timestamps[0]),
    }
    print(json.dumps(info, indent=2))
    return 0


#: The smallest frame side ``cells generate --size`` renders, px.
MIN_SIZE_PX = 16


def register(subparsers: Any) -> None:
    """Add ``cells`` and its subcommands to the ``syncedge`` parser."""
    from edge.commands.common import int_at_least, positive_int

    p = subparsers.add_parser(
        "cells", help="generate and preview MuJoCo-rendered robot cells",
        description="Render robot cells (robot, camera, lights, colours, controller "
                    "convention) into episode files, preview them, inspect episodes.")
    sub = p.add_subparsers(dest="cells_command", metavar="SUBCOMMAND", required=True)

    g = sub.add_parser("generate", help="render seeded chunks of a split",
                       description="Render cells of one split in seeded chunks; a chunk "
                                   "regenerates identically and a complete chunk is skipped.")
    g.add_argument("--split", required=True,
                   choices=["train", "val", "test_camera", "test_robot", "test_convention",
                            "test_all", "stress"],
                   help="train, val (in-distribution), or a held-out split: test_camera, "
                        "test_robot, test_convention (controller conventions no training cell "
                        "uses), test_all (all three held out), stress (a robot, camera and "
                        "light outside every other split's)")
    g.add_argument("--chunks", default="0", help="chunk indices: N, A-B or a list (default 0)")
    g.add_argument("--out", default="data/cells", help="output folder (default data/cells)")
    g.add_argument("--cells-per-chunk", type=positive_int, default=16,
                   help="cells rendered per chunk (default 16)")
    g.add_argument("--motion-episodes", type=positive_int, default=2,
                   help="per cell (default 2)")
    g.add_argument("--motion-frames", type=int_at_least(2), default=32,
                   help="per episode, at least 2 (default 32)")
    g.add_argument("--motion", choices=MOTION_PROFILES, default="all_joints",
                   help="motion-episode profile: all_joints (every joint at once; default, the "
                        "reference model's data) or two_joint (two joints move at a time)")
    g.add_argument("--sweep-amplitude", default="0.3-0.5",
                   help="LOW-HIGH magnitude of each DoF's calibration sweep, rad (default "
                        "0.3-0.5; the warp model trains on 0.2-0.8)")
    g.add_argument("--fps", type=float, default=10.0, help="frame rate, Hz (default 10)")
    g.add_argument("--size", type=int_at_least(MIN_SIZE_PX), default=64,
                   help=f"image width = height, px, at least {MIN_SIZE_PX} (default 64)")
    g.add_argument("--face-budget", type=positive_int, default=8000,
                   help="decimate each robot's meshes to this many faces in all (default 8000)")
    g.add_argument("--no-decimate", action="store_true", help="render the original meshes")
    g.add_argument("--no-segmentation", action="store_true",
                   help="skip the robot mask (evaluation-only data)")
    g.add_argument("--lighting", choices=LIGHTINGS, default="ambient",
                   help="ambient (default; the ambient light alone, flat shading: how every "
                        "shipped chunk and model was made), lit (each cell's two lights "
                        "too: links shade as they turn, as under a real cell's lamps) or "
                        "shadowed (lit, both lights casting shadows, the table and floor "
                        "grain-textured: the arm's shadow moves over the scene); the same "
                        "cells are drawn either way")
    g.add_argument("--workers", type=positive_int, default=1, help="processes (default 1)")
    g.set_defaults(func=_run_generate)

    ge = sub.add_parser(
        "geometry", help="render the true robot-pixel geometry of generated motion episodes",
        description="Replay every motion episode of generated chunks and write, next to "
                    "each episode, the depth and link of every robot pixel, each link's pose, "
                    "each link's pose with every joint alone turned by +-0.35 rad, and the "
                    "camera (motion-NN.geometry.npz; a chunk's geometry.json, written last, "
                    "lists them; a chunk of an older geometry version is rendered again). "
                    "'model train-warp --true-flow-weight' trains the warp model's flow "
                    "against the exact backward flow they give, '--dof-field-weight' its "
                    "per-DoF fields against each joint's own motion fields.")
    ge.add_argument("--data", default="data/cells", help="cells folder (default data/cells)")
    ge.add_argument("--split", required=True, help="the split's folder under --data")
    ge.add_argument("--chunks", help="chunk indices: N, A-B or a list (default: every "
                                     "complete chunk)")
    ge.add_argument("--workers", type=positive_int, default=1, help="processes (default 1)")
    ge.set_defaults(func=_run_geometry)

    pv = sub.add_parser("preview", help="contact sheet of random cells or of a cell's episodes",
                        description="Without --episode: render COUNT random cells from every "
                                    "split into one PNG. With --episode: lay out the frames "
                                    "of an episode file or of every episode in a cell folder.")
    pv.add_argument("--episode", help="an episode file or a cell folder (e.g. "
                                      f"{SAMPLE_DIR})")
    pv.add_argument("--count", type=positive_int, default=16,
                    help="random cells on the sheet, without --episode (default 16)")
    pv.add_argument("--seed", type=int, default=0)
    pv.add_argument("--out", help="PNG to write (default cell_preview.png with --episode, "
                                  "else cells_preview.png; an existing PNG is replaced)")
    pv.set_defaults(func=_run_preview)

    s = sub.add_parser("sample", help="render the shipped sample cell",
                       description="Regenerate the sample cell shipped for the README demo.")
    s.add_argument("--out", default=str(SAMPLE_DIR),
                   help=f"folder to write it to (default {SAMPLE_DIR})")
    s.set_defaults(func=_run_sample)

    sh = sub.add_parser("show", help="validate an episode file and print a summary")
    sh.add_argument("episode", help="an episode file (.npz)")
    sh.set_defaults(func=_run_show)
