"""``syncedge export ...``: the export group.

Subcommands are contributed by registrars listed in :data:`SUBCOMMANDS`: each takes the
group's subparsers object and adds one subcommand whose ``func`` takes the parsed
namespace and returns an exit code. To add a subcommand (e.g. ``onnx``, ``quantise``,
``check``), write its registrar and append it to the list; registration stays cheap
(heavy imports inside ``func``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from export.chain_model import register_chain_model
from export.variants.cli import register_check, register_onnx, register_quantise

__all__ = ["SUBCOMMANDS", "register", "register_engine", "register_check_ops", "register_onnx",
           "register_quantise", "register_check", "register_upgrade",
           "register_chain_model"]


def _run_engine(args: argparse.Namespace) -> int:
    from edge.bundle.device_target import cuda_compute_capability
    from edge.manifest import load_model_dir
    from edge.runtime.engine_cache import EngineCache
    from export.engine.builder import (
        EngineBuildError,
        TensorRT,
        build_model_engines,
        import_tensorrt,
    )

    load_model_dir(args.model_dir)  # a wrong folder is named before anything else
    trt = import_tensorrt()
    cc = cuda_compute_capability()
    if cc is None:
        raise EngineBuildError("CUDA device 0: no CUDA driver or GPU found; engines are built "
                               "on the NVIDIA device that runs them")
    rt = TensorRT(trt, f"{cc[0]}.{cc[1]}")
    cache = EngineCache(args.cache_dir)
    reports = build_model_engines(args.model_dir, rt, cache, precision=args.precision,
                                  graphs=args.graph, force=args.force,
                                  workspace_bytes=args.workspace_mib << 20)
    for r in reports:
        why = f" ({r.reason})" if r.reason else ""
        print(f"{r.graph}: {r.action}{why} -> {r.path}")
    return 0


def _run_upgrade(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from edge.fileio import atomic_write
    from edge.manifest import (
        ManifestError,
        load_model_dir,
        missing_manifest,
        upgrade_manifest_dict,
    )

    path = Path(args.model_dir) / "model.json"
    if (Path(args.model_dir) / "bundle.json").is_file():
        raise ManifestError(f"{args.model_dir}: an installed bundle slot (bundle.json beside "
                            f"model.json); its signed files are not edited: upgrade the model "
                            f"folder the bundle was built from on the build machine, then "
                            f"build, sign and install a new bundle")
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        raise missing_manifest(path) from None
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{path}: invalid JSON: {exc}") from None
    before = d.get("schema_version")
    new = upgrade_manifest_dict(d, str(path))
    if before == new["schema_version"]:
        print(f"{path}: already schema {before}; nothing to do")
        return 0
    text = json.dumps(new, indent=2, sort_keys=True, allow_nan=False) + "\n"
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))
    load_model_dir(args.model_dir)  # graphs still match
    print(f"{path}: schema {before} -> {new['schema_version']} (graphs unchanged; the model's "
          f"sha256 changed: re-encode cached calibrations with 'syncedge calibrate store "
          f"--cell ID --model {args.model_dir}' and rebuild bundles made from it)")
    return 0


def register_upgrade(sub: argparse._SubParsersAction) -> None:
    """Add ``export upgrade``: rewrite an older model.json in the current schema."""
    p = sub.add_parser("upgrade", help="rewrite a model folder's older model.json (schema 1) "
                                       "in the current schema; graphs unchanged",
                       description="Rewrite a schema-1 model.json (made before the warp "
                                   "model; the latent family) as schema 2: family latent, "
                                   "accepted calibration sweeps 0.3-0.5 rad, graphs "
                                   "unchanged. The model's sha256 changes: re-encode cached "
                                   "calibrations and rebuild bundles made from the folder.")
    p.add_argument("model_dir", help="model folder (model.json + graphs)")
    p.set_defaults(func=_run_upgrade)


def register_engine(sub: argparse._SubParsersAction) -> None:
    """Add ``export engine``: build TensorRT engines into the engine cache."""
    from export.engine.builder import PRECISIONS

    p = sub.add_parser("engine", help="build TensorRT engines on this NVIDIA device "
                                      "(cached by ONNX sha256, TensorRT, GPU, precision, shapes)")
    p.add_argument("model_dir", help="model folder (model.json + graphs), e.g. the active slot")
    p.add_argument("--precision", choices=PRECISIONS, default="typed",
                   help="typed: precision from the graph (default; the only mode on "
                        "TensorRT 11); flag-fp16: FP16 builder flag on an FP32 graph "
                        "(TensorRT 10 only)")
    p.add_argument("--graph", action="append", help="only this graph key (repeatable)")
    p.add_argument("--force", action="store_true", help="rebuild even when cached")
    p.add_argument("--workspace-mib", type=int, default=1024, help="builder workspace, MiB")
    p.add_argument("--cache-dir", help="engine cache (default: STATE_ROOT/engines; see syncedge --help)")
    p.set_defaults(func=_run_engine)


def _run_check_ops(args: argparse.Namespace) -> int:
    from pathlib import Path

    from export.engine.ops import OpsCheckError, check_model_dir, check_onnx
    from export.errors import ExportError

    versions = args.trt or ["10.3", "11"]
    path = Path(args.model)
    if path.is_file() and path.suffix != ".onnx":
        raise ExportError(f"{path}: neither a model folder (model.json) nor an .onnx file; "
                          "give one of those")
    found = (check_onnx(path, path.name, versions) if path.suffix == ".onnx"
             else check_model_dir(path, versions))
    if found:
        for v in found:
            print(v)
        raise OpsCheckError(f"{path}: {len(found)} unsupported operator use(s) for TensorRT "
                            f"{', '.join(versions)}; first: {found[0]}")
    print(f"{path}: every operator is supported by the TensorRT ONNX parser "
          f"{', '.join(versions)} (opset 18-20)")
    return 0


def register_check_ops(sub: argparse._SubParsersAction) -> None:
    """Add ``export check-ops``: check graphs against the TensorRT operator table."""
    p = sub.add_parser("check-ops", help="check ONNX graphs against the TensorRT ONNX "
                                         "parser's operator support (10.3 and 11.x)")
    p.add_argument("model", help="model folder (model.json) or one .onnx file")
    p.add_argument("--trt", action="append", choices=["10.3", "11"],
                   help="TensorRT line to check (repeatable; default both)")
    p.set_defaults(func=_run_check_ops)


#: Registrars of the ``export`` subcommands, in help order. Append new ones here.
SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    register_onnx,
    register_quantise,
    register_check,
    register_engine,
    register_check_ops,
    register_upgrade,
    register_chain_model,
]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``export`` group and every registrar in :data:`SUBCOMMANDS`."""
    p = subparsers.add_parser("export", help="ONNX export, quantisation, TensorRT engines")
    sub = p.add_subparsers(dest="export_command", metavar="SUBCOMMAND", required=True)
    for registrar in SUBCOMMANDS:
        registrar(sub)
