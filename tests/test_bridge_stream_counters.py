"""Stream statistics: waiting for the first sample is start-up, counted nowhere."""

from __future__ import annotations

import numpy as np

from edge.joints import Status
from firmware_bridge.stream import CycleError, JointStream, Reading


class Scripted(JointStream):
    """Cycles that time out where the script says so."""

    def __init__(self, script: str):
        super().__init__("scripted://", read_timeout_s=5.0)
        self.script, self.i = script, 0

    @property
    def joint_names(self) -> list[str]:
        return ["a"]

    def _open(self) -> None: ...

    def _close(self) -> None: ...

    def _cycle(self) -> Reading:
        c = self.script[self.i]
        self.i += 1
        if c == "t":
            raise CycleError("timeout", "no reply")
        return Reading(np.zeros(1), np.zeros(1), np.zeros(1), self.i)


def test_start_up_timeouts_count_neither_as_lost_cycles_nor_as_timeouts() -> None:
    with Scripted("ttt.t.") as s:
        first = s.read()
        assert first.status == Status.OK and s.stats.timeouts == 0
        assert s.stats.lost_cycles == 0
        second = s.read()
        assert second.status & Status.GAP and second.missed == 1
        assert s.stats.timeouts == 1 and s.stats.lost_cycles == 1
