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


class Valued(JointStream):
    """One joint pair whose readings carry the values given, in turn."""

    def __init__(self, values: list[tuple[float, float, float]], fault: str = ""):
        super().__init__("valued://")
        self.values, self.fault, self.i = values, fault, 0

    @property
    def joint_names(self) -> list[str]:
        return ["shoulder", "elbow"]

    def _open(self) -> None: ...

    def _close(self) -> None: ...

    def _cycle(self) -> Reading:
        p, v, e = self.values[self.i]
        self.i += 1
        return Reading(np.array([0.5, p]), np.array([0.0, v]), np.array([0.0, e]), self.i,
                       fault=self.fault)


def test_non_finite_values_from_a_device_are_faults_never_ok() -> None:
    """An infinite position, velocity or effort, and a NaN (unknown) position, is a FAULT
    sample naming the joint and the field; infinite values come out as NaN (unknown), as a
    joint log writes them. A NaN velocity or effort (a device without it) stays OK."""
    inf, nan = float("inf"), float("nan")
    with Valued([(inf, 0.0, 0.0), (nan, 0.0, 0.0), (0.1, -inf, inf), (0.2, nan, nan),
                 (0.3, 0.0, 0.0)]) as s:
        got = [s.read() for _ in range(5)]
    assert [x.status for x in got] == [Status.FAULT] * 3 + [Status.OK] * 2
    assert got[0].fault == "non-finite value: elbow position_rad inf from the device"
    assert np.isnan(got[0].position_rad[1]) and got[0].position_rad[0] == 0.5
    assert got[1].fault == "non-finite value: elbow position_rad nan from the device"
    assert got[2].fault == ("non-finite value: elbow velocity_rad_s -inf from the device; "
                            "elbow effort_nm inf from the device")
    assert np.isnan(got[2].velocity_rad_s[1]) and np.isnan(got[2].effort_nm[1])
    assert s.stats.faults == 3


def test_a_nan_position_the_transport_explained_keeps_its_reason() -> None:
    """A transport that sets a joint to NaN gives the reason itself (an EtherCAT slave below
    SAFE-OP); an infinite value is still named after it."""
    reason = "no fresh inputs from slave1 (below SAFE-OP: joint NaN)"
    with Valued([(float("nan"), 0.0, 0.0), (float("nan"), 0.0, float("inf"))], reason) as s:
        first, second = s.read(), s.read()
    assert first.status == Status.FAULT and first.fault == reason
    assert second.fault == f"{reason}; non-finite value: elbow effort_nm inf from the device"
