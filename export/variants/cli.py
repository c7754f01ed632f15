"""``syncedge export onnx|quantise|check``: the FP32 export, its INT8/FP16 variants and their
parity gates (docs/export.md). Registrars for :data:`export.cli.SUBCOMMANDS`; heavy imports
(torch, onnxruntime) happen inside the commands."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

__all__ = ["register_onnx", "register_quantise", "register_check", "run_family"]


def _command() -> str:
    return "syncedge " + " ".join(shlex.quote(a) for a in sys.argv[1:])


#: What ``--run`` holds, for the messages about it.
_RUN_HELP = ("a training run folder: warp.pt (the warp model) or ae.pt and dynamics.pt (the "
             "latent model); the shipped model's run: models/reference-checkpoints")


def run_family(run: str, history: bool = False) -> str:
    """``"warp"`` or ``"latent"``: the model family of the training run folder ``run``.

    Raises:
        ExportError: ``run`` is missing, a file, a model folder, or holds neither family's
            checkpoints; the message names it and what ``--run`` takes.
    """
    from export.errors import ExportError

    p = Path(run)
    if not p.exists():
        raise ExportError(f"--run {run}: no such folder; expected {_RUN_HELP}")
    if not p.is_dir():
        raise ExportError(f"--run {run}: a file; expected {_RUN_HELP}")
    if (p / "warp.pt").exists() or history:
        return "warp"
    if (p / "dynamics.pt").exists() or (p / "ae.pt").exists():
        return "latent"
    if (p / "model.json").is_file():
        raise ExportError(f"--run {run}: a model folder (model.json), not a training run; "
                          f"expected {_RUN_HELP}")
    raise ExportError(f"--run {run}: no warp.pt, ae.pt or dynamics.pt there; expected "
                      f"{_RUN_HELP}")


def _run_onnx(args: argparse.Namespace) -> int:
    from export.errors import require_torch

    require_torch("syncedge export onnx")

    from export.variants.onnx_export import ExportOptions, eval_summary, export_model

    warp = run_family(args.run, args.history) == "warp"
    if warp:
        import json

        from export.variants.warp_export import export_warp_model

        evaluation = json.loads(Path(args.eval).read_text()) if args.eval else None
        path = export_warp_model(args.run, args.out, tuple(args.batch_sizes),
                                 name=args.name if args.name != "syncedge-reference" else
                                 ("syncedge-warp-history" if args.history else "syncedge-warp"),
                                 command=_command(), history=args.history,
                                 evaluation=evaluation, warp_sampler=args.warp_sampler)
    else:
        evaluation = eval_summary(args.eval) if args.eval else None
        path = export_model(ExportOptions(run=args.run, out=args.out,
                                          batch_sizes=tuple(args.batch_sizes), name=args.name,
                                          command=_command()), evaluation=evaluation)
    print(f"{path}: fp32 {'warp' if warp else 'latent'} model, graphs checked (ONNX checker, "
          f"strict shape inference)")
    return 0


def register_onnx(sub: argparse._SubParsersAction) -> None:
    """Add ``export onnx``: a trained run -> an FP32 model folder."""
    from edge.commands.common import positive_int

    p = sub.add_parser("onnx", help="export a trained run to an FP32 model folder "
                                    "(model.json + ONNX graphs, opset 18, static shapes)",
                       description="Export a trained run to an FP32 model folder: model.json "
                                   "and the encoder, calibration, step_bB and decoder_bB "
                                   "graphs (opset 18, static shapes, ONNX checker and strict "
                                   "shape inference). A run with warp.pt gives the warp model "
                                   "(with prepare_bB graphs that make its per-DoF flow fields "
                                   "once per rollout; --history: its warp_nocal.pt, the "
                                   "history-mode model); "
                                   "one with ae.pt and dynamics.pt the latent model.")
    p.add_argument("--run", required=True,
                   help="training run folder: warp.pt (the warp model) or ae.pt and "
                        "dynamics.pt (the latent model)")
    p.add_argument("--history", action="store_true",
                   help="export the run's warp_nocal.pt as the history-mode model")
    p.add_argument("--out", required=True, help="model folder to write")
    p.add_argument("--batch-sizes", type=positive_int, nargs="+", default=[1, 16],
                   help="batch sizes of the step and decoder graphs (default 1 16)")
    p.add_argument("--name", default="syncedge-reference", help="model name in model.json")
    p.add_argument("--warp-sampler", choices=("gather", "grid_sample"), default="gather",
                   help="warp: how the decoder graphs warp the start frame: gather "
                        "(GatherElements of the four corners per channel, the default; 2-3x "
                        "as fast in ONNX Runtime's CPU provider) or grid_sample (ONNX "
                        "GridSample); the same frames to about 2e-7")
    p.add_argument("--eval", help="latent: eval.json from 'syncedge model eval' (its tables and "
                                  "targets go into model.json's evaluation); warp: a JSON "
                                  "summary of 'syncedge model eval-frames' stored as it is")
    p.set_defaults(func=_run_onnx)


def _run_quantise(args: argparse.Namespace) -> int:
    from export.variants.quantise import QuantiseOptions, quantise_model

    path = quantise_model(QuantiseOptions(
        model_dir=args.model_dir, variant=args.variant, out=args.out, data=args.data,
        max_cells=args.max_cells, samples=args.samples, seed=args.seed, command=_command()))
    print(f"{path}: {args.variant} model; next: syncedge export check {path.parent} "
          f"--run RUN --data DATA")
    if args.variant == "int8":
        from edge.manifest import load_manifest

        qset = load_manifest(path).provenance["quantisation"]["quantisation_calibration_set"]
        used = len(qset.get("cells") or [])
        if used < args.max_cells:
            print(f"note: the INT8 scales come from {used} training cell"
                  f"{'s' if used != 1 else ''} (all under {Path(args.data) / 'train'}), "
                  f"fewer than --max-cells {args.max_cells}")
    return 0


def register_quantise(sub: argparse._SubParsersAction) -> None:
    """Add ``export quantise``: an FP32 model folder -> its INT8 or FP16 variant."""
    from edge.commands.common import positive_int

    p = sub.add_parser("quantise", help="make the INT8 (symmetric QDQ) or FP16 variant of an "
                                        "FP32 model folder")
    p.add_argument("model_dir", help="the FP32 model folder (from 'export onnx')")
    p.add_argument("--variant", required=True, choices=["int8", "fp16"])
    p.add_argument("--data", help="cells root; the INT8 quantisation calibration set is "
                                  "drawn from DATA/train only (required for int8)")
    p.add_argument("--out", required=True, help="model folder to write")
    p.add_argument("--max-cells", type=positive_int, default=16,
                   help="training cells in the quantisation calibration set (default 16)")
    p.add_argument("--samples", type=positive_int, default=32,
                   help="quantisation calibration inputs per graph (default 32)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the draw of the quantisation calibration inputs (default 0; "
                        "the same seed and cells give the same INT8 scales)")
    p.set_defaults(func=_run_quantise)


def _run_check(args: argparse.Namespace) -> int:
    from edge.fileio import write_json_atomic
    from export.variants.parity import (
        PARITY_SPLITS,
        CheckOptions,
        check_variant,
        folders_family,
        reference_cases,
    )
    from export.variants.parity_gates import Gates, format_parity_table, record_parity

    if args.out:  # refused before the check's minutes of work, not after them
        from edge.fileio import check_file_target

        check_file_target(args.out)
    run_family(args.run)
    gates = Gates(fp32_max_abs=args.fp32_max_abs, int8_psnr_loss_db=args.int8_loss_db,
                  fp16_psnr_loss_db=args.fp16_loss_db, horizon=args.horizon)
    family, mode = folders_family(args.model_dir)
    opts = CheckOptions(run=args.run, data=args.data, splits=tuple(args.split or PARITY_SPLITS),
                        max_cells=args.max_cells, gates=gates, family=family,
                        calibration_mode=mode)
    model, cases = reference_cases(opts)
    records = {}
    for d in args.model_dir:
        rec = check_variant(d, model, cases, opts)
        records[d] = rec
        write_json_atomic(Path(d) / "parity.json", rec)
        if not args.no_record:
            record_parity(d, rec)
    print(format_parity_table(records))
    if args.out:
        write_json_atomic(args.out, records)
    failed = [d for d, r in records.items() if not r["gate"]["passed"]]
    where = "model.json evaluation.parity" if not args.no_record else "parity.json only"
    print(f"recorded in {where}; {len(records) - len(failed)} passed, {len(failed)} failed"
          + (f" (bundle build refuses: {', '.join(failed)})" if failed else ""))
    return 1 if failed else 0


def register_check(sub: argparse._SubParsersAction) -> None:
    """Add ``export check``: parity gates of model folders against the PyTorch run."""
    from edge.commands.common import non_negative_float, positive_int

    p = sub.add_parser("check", help="parity gates: each model folder against PyTorch on "
                                     "held-out cells (one step per graph, 16-step rollout)",
                       description="Exit code 0 when every folder passes its gate, 1 when "
                                   "one fails (its model.json records the failure and "
                                   "'bundle build' refuses it).")
    p.add_argument("model_dir", nargs="+", help="model folders (fp32, int8, fp16)")
    p.add_argument("--run", required=True, help="the training run the model came from "
                                                "(ae.pt + dynamics.pt, or warp.pt for the "
                                                "warp family)")
    p.add_argument("--data", required=True, help="cells root")
    p.add_argument("--split", action="append", default=None,
                   help="held-out split (repeatable; default test_all and test_convention)")
    p.add_argument("--max-cells", type=positive_int, default=8,
                   help="cells per split (default 8)")
    p.add_argument("--horizon", type=positive_int, default=16, help="rollout steps (default 16)")
    loosen = ("; a limit looser than the default is recorded, and 'bundle build' then "
              "refuses the folder")
    p.add_argument("--fp32-max-abs", type=non_negative_float, default=1e-4, metavar="X",
                   help="FP32 gate: largest absolute difference of any graph output from "
                        "PyTorch (default 1e-4)" + loosen)
    p.add_argument("--int8-loss-db", type=non_negative_float, default=0.5, metavar="DB",
                   help="INT8 gate: largest PSNR loss against the FP32 rollout at any step, "
                        "dB (default 0.5)" + loosen)
    p.add_argument("--fp16-loss-db", type=non_negative_float, default=0.1, metavar="DB",
                   help="FP16 gate: the same for FP16 (default 0.1)" + loosen)
    p.add_argument("--out", help="also write every record to this JSON file")
    p.add_argument("--no-record", action="store_true",
                   help="do not write the verdict into model.json (parity.json only)")
    p.set_defaults(func=_run_check)

