"""Small builders shared by tests."""

from __future__ import annotations

import numpy as np

from edge.episode import CalibrationSegment, Episode, EpisodeMetadata


def make_episode(t: int = 6, a: int = 3, h: int = 8, w: int = 10, seed: int = 0,
                 kind: str = "motion", with_extras: bool = True) -> Episode:
    """A small valid episode with random frames and consistent positions/actions."""
    rng = np.random.default_rng(seed)
    q = np.cumsum(rng.normal(0, 0.1, size=(t, a)), axis=0)
    actions = np.zeros((t, a), np.float32)
    actions[:-1] = np.diff(q, axis=0)
    segs = (CalibrationSegment(dof="j0", start=0, stop=min(2, t), amplitude=0.3),) \
        if kind == "calibration" else ()
    meta = EpisodeMetadata(
        cell_id="cell-1", camera_id="cam-1", robot_id="robot-1", robot="toy",
        dof_names=tuple(f"j{i}" for i in range(a)), dof_units=("rad",) * (a - 1) + ("m",),
        fps=10.0, kind=kind, source="test", camera={"fovy_deg": 45.0}, split="train",
        segments=segs, extra={"note": "x"})
    return Episode(
        frames=rng.integers(0, 256, size=(t, h, w, 3), dtype=np.uint8), actions=actions,
        timestamps=np.arange(t, dtype=np.float64) / 10.0, metadata=meta,
        joint_positions=q if with_extras else None,
        ee_px=rng.uniform(0, w, size=(t, 2)).astype(np.float32) if with_extras else None,
        robot_mask=rng.random((t, h, w)) > 0.5 if with_extras else None)


def precheck_kit_argv(out, chain) -> list[str]:
    """The README's `syncedge precheck` command on the shipped kit, as arguments for
    ``edge.cli.main``, run with the chain model ``chain`` (a path) instead of the warp
    model, writing to ``out``."""
    import re
    import shlex
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    m = re.search(r"^(syncedge precheck --model models/reference .*?)(?<!\\)$", text,
                  re.M | re.S)
    assert m
    argv = shlex.split(m.group(1).replace("\\\n", " "))[1:]
    for flag in ("--model", "--calibration"):
        i = argv.index(flag)
        del argv[i:i + 2]
    argv[argv.index("--out") + 1] = str(out)
    return [*argv, "--chain", str(chain)]

