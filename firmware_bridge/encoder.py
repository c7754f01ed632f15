"""Multi-turn tracking of single-turn servo encoders.

Servo encoders in position mode report one turn (Dynamixel X and Feetech STS: 0..4095, 4096
steps per turn). A joint that crosses the 4095/0 boundary would jump by a whole turn; the
bridge counts turns on the host instead, by unwrapping the change between two readings.

What this can and cannot know:

* the change between two readings must be less than half a turn (2048 steps), or a turn is
  miscounted; at 1 Mbaud and a few hundred cycles per second that is more than 100 rev/s,
  but a joint turned by hand while the bus is down (a gap, a reconnect) can lose turns;
* the turn count lives in the host process: after the stream is opened, reconnected, or the
  servo is power-cycled, the first reading starts again within half a turn of ``zero_tick``
  (a raw value outside one turn, from a servo in a multi-turn mode, is taken as it is).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["TurnCounter"]


class TurnCounter:
    """Continuous encoder positions from single-turn readings.

    Args:
        steps_per_rev: encoder steps per turn (4096 for Dynamixel X and Feetech STS).
        zero_step: the step that is position 0.

    Raises:
        ValueError: ``steps_per_rev`` is not a positive even integer.
    """

    def __init__(self, steps_per_rev: int, zero_step: int = 0):
        if steps_per_rev <= 0 or steps_per_rev % 2:
            raise ValueError(f"TurnCounter steps_per_rev: expected a positive even integer, "
                             f"found {steps_per_rev}")
        self.steps_per_rev, self.zero_step = int(steps_per_rev), int(zero_step)
        self._last: np.ndarray | None = None  # int64 (J,) raw steps of the last reading
        self._steps: np.ndarray | None = None  # int64 (J,) continuous steps from zero

    def reset(self) -> None:
        """Forget the turn count (after a reconnect: the servo may have been power-cycled)."""
        self._last = self._steps = None

    def update(self, raw: npt.ArrayLike) -> np.ndarray:
        """Add one reading and return the continuous positions.

        Args:
            raw: int ``(J,)`` raw encoder steps as the servo reports them.

        Returns:
            int64 ``(J,)`` steps from ``zero_step``, counting whole turns.

        Raises:
            ValueError: the number of joints changed since the last reading.
        """
        raw = np.asarray(raw, dtype=np.int64)
        n, half = self.steps_per_rev, self.steps_per_rev // 2
        if self._last is None or self._steps is None:
            first = raw - self.zero_step
            one_turn = (raw >= 0) & (raw < n)  # single-turn reading: nearest turn to zero
            self._steps = np.where(one_turn, (first + half) % n - half, first)
        else:
            if raw.shape != self._last.shape:
                raise ValueError(f"TurnCounter reading: expected shape {self._last.shape}, "
                                 f"found {raw.shape}")
            self._steps = self._steps + (raw - self._last + half) % n - half
        self._last = raw
        return self._steps.copy()
