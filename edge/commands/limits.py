"""Size limits of one ``simulate`` or ``precheck`` call (docs/runtime.md, "Limits").

Checked as soon as the candidate count and step count are known, before the rollout
runs, so a call past a limit ends at once with one line instead of running for minutes
and failing in the video encoder or the metrics:

- at most :data:`MAX_CANDIDATES` candidates (256);
- at most :data:`MAX_HORIZON` steps (256: 25.6 s at the shipped model's 10 Hz; its
  published figures are for 16-step rollouts);
- at most :data:`MAX_PREDICTED_FRAMES` candidates x steps (8192 predicted frames: about
  100 MB of 64x64 frames held at once, the rollout's preallocated output).
"""

from __future__ import annotations

from edge.runtime.errors import RuntimeInputError

__all__ = ["MAX_CANDIDATES", "MAX_HORIZON", "MAX_PREDICTED_FRAMES", "check_horizon",
           "check_rollout_size"]

MAX_CANDIDATES = 256
MAX_HORIZON = 256
MAX_PREDICTED_FRAMES = 8192

_SEE = "see docs/runtime.md, \"Limits\""


def check_horizon(horizon: int, where: str = "--horizon") -> int:
    """``horizon`` (steps) if it is 1..:data:`MAX_HORIZON`.

    Raises:
        RuntimeInputError: naming ``where`` (e.g. ``--horizon 300: expected 1..256 steps``).
    """
    if not 1 <= int(horizon) <= MAX_HORIZON:
        raise RuntimeInputError(f"{where} {horizon}: expected 1..{MAX_HORIZON} steps per call "
                                f"({_SEE})")
    return int(horizon)


def check_rollout_size(n: int, horizon: int, where: str) -> None:
    """Refuse ``n`` candidates of ``horizon`` steps past the limits of one call.

    Args:
        n: candidate count.
        horizon: steps per candidate.
        where: the input that set them (a file path), named in the message.

    Raises:
        RuntimeInputError: ``n`` > :data:`MAX_CANDIDATES`, ``horizon`` > :data:`MAX_HORIZON`
            or ``n * horizon`` > :data:`MAX_PREDICTED_FRAMES`, saying how to split the work.
    """
    if n > MAX_CANDIDATES:
        raise RuntimeInputError(f"{where}: {n} candidates; at most {MAX_CANDIDATES} run in one "
                                f"call: split them over several files ({_SEE})")
    if horizon > MAX_HORIZON:
        raise RuntimeInputError(f"{where}: {horizon} steps; at most {MAX_HORIZON} per call: "
                                f"simulate a shorter horizon, then start again from its last "
                                f"frame ({_SEE})")
    if n * horizon > MAX_PREDICTED_FRAMES:
        raise RuntimeInputError(f"{where}: {n} candidates x {horizon} steps = {n * horizon} "
                                f"predicted frames; at most {MAX_PREDICTED_FRAMES} per call: "
                                f"split the candidates over several files ({_SEE})")
