"""The calibration procedure on the virtual cell, step by step, with timings.

Usage: python bench/bench_calibrate.py [--out DIR] [--model DIR]

Runs plan -> record -> check -> store -> plan --motion -> validate -> verify (lighting
changed; camera turned 2 deg) through ``syncedge calibrate`` in-process, printing each
step's exit code and wall time, then the figures of docs/calibration.md from the reports.
Without --model it uses models/reference if present, else the tests' tiny synthetic model
(whose fidelity figures mean nothing).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.calib_cell_helpers import CELL, cli, model_dir  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--model", default=None)
    args = ap.parse_args()
    d = Path(args.out or tempfile.mkdtemp(prefix="bench-calibrate-"))
    m = args.model or str(model_dir())
    common = ["--model", m, "--cache-dir", str(d / "cache"), "--threads", "1"]

    def step(*a: str) -> None:
        t0 = time.perf_counter()
        rc = cli(*a)
        print(f"## rc={rc} {time.perf_counter() - t0:.2f} s: calibrate {' '.join(a)[:80]}",
              flush=True)

    step("plan", "--robot", CELL, "--seed", "5", "--out", str(d / "plan"))
    step("record", "--camera", CELL, "--joints", CELL, "--plan", str(d / "plan.json"), "--out",
         str(d / "cal.npz"), "--cell", "cell-3", "--model", m)
    step("check", str(d / "cal.npz"))
    step("store", str(d / "cal.npz"), *common)
    step("plan", "--robot", CELL, "--seed", "9", "--motion", "--frames", "24", "--out",
         str(d / "motion"))
    step("validate", "--cell", "cell-3", "--camera", CELL, "--joints", CELL, "--plan",
         str(d / "motion.json"), *common, "--out", str(d / "commission"))
    for q in ("&light=0.6", "&move_deg=2"):
        step("verify", "--camera", CELL + q, "--cell", "cell-3", *common[:4])
    r = json.loads((d / "cal.check" / "report.json").read_text())
    print("recording", r["recording"], "pair_error_max_s", r["pair_error_max_s"])
    print("swept/image motion", [(x["dof"], x["fraction_out"], x["image_motion"])
                                 for x in r["dofs"]])
    c = json.loads((d / "commission" / "report.json").read_text())
    print("fidelity", c["fidelity"])
    print(d)


if __name__ == "__main__":
    main()
