"""List the pre-check benchmark's keep-out misses and false refusals cell by cell.

    python scripts/precheck_misses.py DIR/precheck_cells.json [--row chain_poses ...]

Reads the per-cell file ``syncedge model eval-precheck --out DIR`` writes
(``precheck_cells.json``: per split, each cell's truth and each model row's verdicts) and
prints, per split and row, every candidate that truly enters the keep-out and is passed
(a miss) or truly stays out and is refused (a false refusal), with the most true arm pixels
inside at one step (``true``; it truly enters at >= 4) and the row's keep-out score
(``pred``: the pixels it puts inside), then the totals. Rows default to every chain row.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ENTER_PX = 4  # export.evaluation.precheck.ENTER_PX (not imported: this reads JSON only)


def misses(records: list[dict], row: str) -> tuple[list[str], int, int, int, int]:
    """``(lines, missed, entering, false_refusals, staying_out)`` of one row over the
    cells ``records`` (a split's list in ``precheck_cells.json``)."""
    lines: list[str] = []
    missed = entering = false = out = 0
    for rec in records:
        if row not in rec["rows"]:
            continue
        verdicts = rec["rows"][row]
        for k, (true, refused, score) in enumerate(zip(rec["true_inside_max"],
                                                       verdicts["refused"],
                                                       verdicts["score"], strict=True)):
            enters = true >= ENTER_PX
            entering += enters
            out += not enters
            if enters and not refused:
                missed += 1
                lines.append(f"  cell {rec['index']:3d} candidate {k}: missed "
                             f"(true {true}, pred {score})")
            elif refused and not enters:
                false += 1
                lines.append(f"  cell {rec['index']:3d} candidate {k}: refused, stays out "
                             f"(true {true}, pred {score})")
    return lines, missed, entering, false, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("cells", type=Path, help="precheck_cells.json of eval-precheck --out DIR")
    p.add_argument("--row", action="append",
                   help="model row(s) to list (default: every row whose name starts chain)")
    args = p.parse_args(argv)
    try:
        data = json.loads(args.cells.read_text())
    except (OSError, ValueError) as exc:
        print(f"precheck_misses: {args.cells}: cannot read it as JSON ({exc}); expected the "
              "precheck_cells.json that 'syncedge model eval-precheck --out DIR' writes",
              file=sys.stderr)
        return 2
    for split, records in data.items():
        rows = args.row or sorted({r for rec in records for r in rec["rows"]
                                   if r.startswith("chain")})
        for row in rows:
            lines, missed, entering, false, out = misses(records, row)
            print(f"{split} {row}: missed {missed} of {entering} entering, refused "
                  f"{false} of {out} staying out")
            print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
