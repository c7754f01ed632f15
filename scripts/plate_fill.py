"""How much a background plate from the calibration frames adds to a warp model's fill.

The fill of the warp model takes what the arm uncovers from the start frame itself
(``warp(start, g)``). A cell's calibration episode sweeps every DoF, so it shows much of
the background the arm covers in the start frame. This evaluates a model twice on the
same cells and futures: as it is (``calibrated``) and with its fill taking a plate built
from the calibration frames where the model's own start-mask head sees no robot
(``plate``; :func:`export.models.warp.background_plate`), everything else the same.
PyTorch only; the exported graphs do not carry a plate.

    python scripts/plate_fill.py --model runs/lay --data data/cells --split held_out_convention \\
        --max-cells 32 --out runs/plate

Prints the eval-frames table and writes eval_frames.json / .txt and the rollout sheets to
--out. Exits 2 on a missing model or data folder.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from export.evaluation import frames as ef
from export.evaluation.frames import SPLITS, FramesEvalOptions, evaluate_frames


class _PlatePredictor(ef._WarpPredictor):
    """The warp predictor with a ``plate`` variant: the calibrated context and the cell's
    background plate."""

    def __init__(self, run: str):
        super().__init__(run)
        self.nocal = None  # the history model has no plate variant here
        # contexts() fills these; the evaluation rolls out only calibrated and plate
        self.variants = ("calibrated", "zeroed", "mislabelled", "plate")

    def contexts(self, cells: list, rng: np.random.Generator) -> dict[str, list[Any]]:
        import torch

        from export.models.warp import background_plates

        out = super().contexts(cells, rng)
        frames = torch.from_numpy(np.stack([c.cal_frames for c in cells])).permute(
            0, 1, 4, 2, 3).contiguous()
        plates = background_plates(self.model, frames)
        out["plate"] = [(ctx, plates[i:i + 1]) for i, ctx in enumerate(out["calibrated"])]
        return out

    def rollout(self, variant: str, ctx: Any, start: np.ndarray,
                actions: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
        if variant != "plate":
            return super().rollout(variant, ctx, start, actions, offset)
        import torch

        from export.evaluation.zero_shot import to_uint8

        context, plate = ctx
        model = self.model
        m, t = actions.shape[:2]
        s = torch.from_numpy(start[None]).permute(0, 3, 1, 2)
        with torch.no_grad():
            z0 = model.encoder(s).expand(m, -1, -1, -1)
            z = model.rollout(z0, torch.from_numpy(actions.astype(np.float32)), context)
            out = model.decoder.flows(z.flatten(0, 1), plate.expand(m * t, -1, -1, -1))
        return to_uint8(out["frames"]).reshape(m, t, *start.shape)


def main(argv: list[str] | None = None) -> int:
    """Entry point; see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="run folder with warp.pt")
    p.add_argument("--data", default="data/cells", help="generated evaluation cells")
    p.add_argument("--split", action="append", required=True,
                   help="split (table name or data folder); repeatable")
    p.add_argument("--max-cells", type=int, default=32)
    p.add_argument("--out", required=True, help="output folder")
    args = p.parse_args(argv)
    if not (Path(args.model) / "warp.pt").is_file():
        print(f"plate_fill: {args.model}/warp.pt: no warp checkpoint", file=sys.stderr)
        return 2
    if not Path(args.data).is_dir():
        print(f"plate_fill: {args.data}: no such data folder", file=sys.stderr)
        return 2
    by_folder = {v: k for k, v in SPLITS.items()}
    splits = {}
    for s in args.split:
        name = s if s in SPLITS else by_folder.get(s)
        if name is None:
            print(f"plate_fill: --split {s!r}: expected one of {', '.join(SPLITS)}",
                  file=sys.stderr)
            return 2
        splits[name] = SPLITS[name]
    original = ef.make_predictor
    ef.make_predictor = lambda family, run: (_PlatePredictor(run) if family == "plate"
                                             else original(family, run))
    try:
        opts = FramesEvalOptions(data=args.data, models={"model": ("plate", args.model)},
                                 max_cells=args.max_cells, splits=splits,
                                 variants=("calibrated", "plate"),
                                 retrieval_variants=("calibrated", "plate", "copy_last"))
        result = evaluate_frames(opts)
    finally:
        ef.make_predictor = original
    paths = ef.write_frames_eval(result, Path(args.out))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
