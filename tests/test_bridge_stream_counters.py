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


def test_physically_impossible_values_are_faults_naming_joint_and_field() -> None:
    """A finite value no joint can have (|position| above max_position_rad, default 1e6 rad;
    |velocity| above 1e4 rad/s; |effort| above 1e6 N*m) is a FAULT sample naming the joint
    and the field, delivered as NaN (unknown), as an infinite one is."""
    from firmware_bridge.stream import MAX_POSITION_RAD

    assert MAX_POSITION_RAD == 1e6
    with Valued([(3e38, 0.0, 0.0), (-2e6, 0.0, 0.0), (0.1, 2e4, -3e6), (9e5, -9e3, 9e5)]) as s:
        got = [s.read() for _ in range(4)]
    assert [x.status for x in got] == [Status.FAULT] * 3 + [Status.OK]
    assert got[0].fault == ("implausible value: elbow position_rad 3e+38 from the device "
                            "(expected |position_rad| <= 1e+06, max_position_rad)")
    assert np.isnan(got[0].position_rad[1]) and got[0].position_rad[0] == 0.5
    assert got[1].fault == ("implausible value: elbow position_rad -2e+06 from the device "
                            "(expected |position_rad| <= 1e+06, max_position_rad)")
    assert got[2].fault == ("implausible value: elbow velocity_rad_s 20000 from the device "
                            "(expected |velocity_rad_s| <= 10000); elbow effort_nm -3e+06 "
                            "from the device (expected |effort_nm| <= 1e+06)")
    assert s.stats.faults == 3
    with Valued([(2e6, 0.0, 0.0)]) as s:
        s.max_position_rad = 1e7  # a joint that turns further: its own bound
        assert s.read().status == Status.OK


def test_max_position_rad_is_a_url_option_of_the_device_transports() -> None:
    from firmware_bridge.url import stream_for_url

    for url in ("frame:///dev/x?joints=6", "dxl:///dev/x?ids=1", "sts:///dev/x?ids=1",
                "ethercat://eth0?cycle_us=1000"):
        s = stream_for_url(f"{url}&max_position_rad=5e6", do_not_open=True)
        assert s.max_position_rad == 5e6
        assert "max_position_rad=1e6" in s.URL_FORM
