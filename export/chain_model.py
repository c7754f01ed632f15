"""Write a chain model folder (``syncedge export chain-model``): the ``model.json`` that
lets a signed bundle carry the chain model (:class:`edge.manifest.ChainModelManifest`).

The chain model has no weights (each cell's chain calibration is its model for that
cell), so the folder is its manifest alone: which chain calibration format and cache
identity the runtime runs, and the size the calibration episode is recorded at. The file's
bytes depend only on the arguments and this syncedge, so the command reproduces a shipped
folder exactly.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from edge.manifest import (
    CHAIN_MODEL_FORMAT,
    ChainModelManifest,
    ManifestError,
    load_chain_model_dir,
    save_manifest,
)

__all__ = ["DEFAULT_NAME", "DEFAULT_RECORDING_RESOLUTION", "register_chain_model",
           "write_chain_model_dir"]

#: ``name`` of the shipped chain model.
DEFAULT_NAME = "syncedge-chain"
#: (H, W) px the chain's calibration episodes are recorded and read at (the size the
#: figures of the README were measured with).
DEFAULT_RECORDING_RESOLUTION = (256, 256)
#: side of the grid the shipped chain models are read on, px (``model read-chain --grid``):
#: a calibration episode is recorded at a square whole multiple of it.
CHAIN_GRID = 64
#: the largest recording side accepted, px.
MAX_RECORDING_SIDE = 4096


def write_chain_model_dir(out_dir: str | Path, *, name: str = DEFAULT_NAME,
                          recording_resolution: tuple[int, int] = DEFAULT_RECORDING_RESOLUTION,
                          command: str = "", overwrite: bool = False) -> ChainModelManifest:
    """Write ``out_dir/model.json`` for the chain model this syncedge runs.

    Args:
        out_dir: the folder (created); it must not hold a ``model.json`` unless
            ``overwrite``.
        name: the model's name (bundle listings show it).
        recording_resolution: (H, W) px, both >= 1.
        command: recorded as ``provenance.command``.
        overwrite: replace an existing ``model.json``.

    Returns:
        The manifest written (read back and checked).
    Raises:
        ManifestError: ``out_dir/model.json`` exists (without ``overwrite``), or a value the
            manifest refuses (naming the key).
    """
    from edge import __version__
    from edge.runtime.chain import CHAIN_FORMAT, CHAIN_MODEL_SHA256, CHAIN_SCHEMA_VERSIONS

    out = Path(out_dir)
    path = out / "model.json"
    if path.exists() and not overwrite:
        raise ManifestError(f"{path}: already exists; choose another --out or pass --overwrite")
    m = ChainModelManifest(
        format=CHAIN_MODEL_FORMAT, name=name, variant="numpy", chain_format=CHAIN_FORMAT,
        chain_schema_versions=tuple(CHAIN_SCHEMA_VERSIONS),
        chain_model_sha256=CHAIN_MODEL_SHA256,
        recording_resolution=(int(recording_resolution[0]), int(recording_resolution[1])),
        provenance={"command": command, "syncedge_version": __version__},
        evaluation={"figures": "README.md, 'The chain model'; docs/eval/chain_fit/"})
    ChainModelManifest.from_json_dict(m.to_json_dict(), where=str(path))  # before writing
    out.mkdir(parents=True, exist_ok=True)
    save_manifest(m, path)
    return load_chain_model_dir(out)


def _resolution(text: str) -> tuple[int, int]:
    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected HEIGHTxWIDTH like 256x256, found "
                                         f"{text!r}") from None
    if h != w or h < CHAIN_GRID or h % CHAIN_GRID or h > MAX_RECORDING_SIDE:
        raise argparse.ArgumentTypeError(
            f"expected a square size, a whole multiple of the chain's {CHAIN_GRID} px grid up "
            f"to {MAX_RECORDING_SIDE} (e.g. 256x256), found {text!r}: 'model read-chain' "
            "reads calibration episodes only at such sizes")
    return h, w


def _name(text: str) -> str:
    if not text.strip() or any(c in text for c in "/\\\n\r\t") or len(text) > 128:
        raise argparse.ArgumentTypeError(f"expected a model name of 1-128 characters without "
                                         f"slashes or line breaks, found {text!r}")
    return text


def _run(args: argparse.Namespace) -> int:
    argv = ["syncedge", "export", "chain-model", "--out", str(args.out)]
    if args.name != DEFAULT_NAME:
        argv += ["--name", args.name]
    if tuple(args.recording_resolution) != DEFAULT_RECORDING_RESOLUTION:
        argv += ["--recording-resolution", "x".join(map(str, args.recording_resolution))]
    m = write_chain_model_dir(args.out, name=args.name,
                              recording_resolution=args.recording_resolution,
                              command=" ".join(shlex.quote(a) for a in argv),
                              overwrite=args.overwrite)
    print(f"{Path(args.out) / 'model.json'}: chain model {m.name} (cache identity "
          f"{m.chain_model_sha256[:12]}..., calibration recorded at "
          f"{m.recording_resolution[0]}x{m.recording_resolution[1]}); bundle it with "
          f"'syncedge bundle build {args.out} ...'")
    return 0


def register_chain_model(sub: argparse._SubParsersAction) -> None:
    """Add ``export chain-model``: write a chain model folder for a bundle."""
    p = sub.add_parser(
        "chain-model", help="write the chain model's folder (model.json only) for a bundle",
        description="Write the chain model's model.json (format "
                    f"{CHAIN_MODEL_FORMAT}): the chain model has no graphs, so the folder "
                    "names which chain calibrations it runs. Bundled and installed, it makes "
                    "simulate, precheck and calibrate store/validate run the chain model "
                    "without --chain (each cell's chain calibration from the calibration "
                    "cache).")
    p.add_argument("--out", required=True, metavar="DIR", help="the model folder to write")
    p.add_argument("--name", type=_name, default=DEFAULT_NAME,
                   help=f"model name (default {DEFAULT_NAME})")
    p.add_argument("--recording-resolution", type=_resolution, metavar="HxW",
                   default=DEFAULT_RECORDING_RESOLUTION,
                   help="size the calibration episode is recorded at: square, a whole "
                        f"multiple of {CHAIN_GRID} (default 256x256; "
                        "calibrate record defaults to it while this model is active)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing model.json")
    p.set_defaults(func=_run)
