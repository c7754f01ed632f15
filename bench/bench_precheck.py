"""Pre-check verdicts measured against ground truth rendered by MuJoCo.

    python bench/bench_precheck.py [--cells 64] [--split all_held_out ...] \
        [--chain [--chain-fits DIR]] [--out bench/results/precheck.json]

A command line over :mod:`export.evaluation.precheck` (what it draws, runs and reports is
described there); ``syncedge model eval-precheck`` runs the same evaluation and writes the
same figures, with the table and contact sheets beside them. Needs MuJoCo
(``pip install '.[train]'``). Prints a table and writes JSON. On 2 shared CPU cores 64
cells per split took about 7 minutes (20 minutes for the three splits).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from export.evaluation.precheck import (  # noqa: E402
    DEFAULT_SPLITS,
    SPLITS,
    PrecheckEvalOptions,
    dump_json,
    evaluate_precheck,
    print_table,
)


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--cells", type=int, default=64, help="cells per split (default 64)")
    p.add_argument("--split", action="append", choices=sorted(SPLITS),
                   help="split(s) to run (default: the three held-out splits; "
                        "in_distribution, the training cameras and robots, on request)")
    p.add_argument("--model", default=str(ROOT / "models" / "reference"))
    p.add_argument("--history-model", default=str(ROOT / "models" / "reference-history"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--chain", action="store_true",
                   help="also run the chain model, read from each cell's calibration "
                        "rendered at --chain-size (needs torch; about 80 s per cell)")
    p.add_argument("--chain-size", type=int, default=256)
    p.add_argument("--chain-fits", metavar="DIR",
                   help="keep each cell's chain calibration here and reuse it")
    p.add_argument("--keep-out-margin", type=float, action="append", metavar="PX",
                   help="with --chain, also the chain's keep-out with the region grown by "
                        "PX pixels (row chain_margin_<PX>px); repeatable")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "precheck.json"))
    args = p.parse_args(argv)
    command = "python bench/bench_precheck.py " + " ".join(
        sys.argv[1:] if argv is None else argv)
    result = evaluate_precheck(PrecheckEvalOptions(
        model=args.model, history_model=args.history_model, cells=args.cells,
        splits=tuple(args.split or DEFAULT_SPLITS), threads=args.threads, command=command,
        chain=args.chain, chain_size=args.chain_size, chain_fits=args.chain_fits,
        keep_out_margins=tuple(args.keep_out_margin or ())))
    print_table(result)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(dump_json(result))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
