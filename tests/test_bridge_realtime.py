"""Real-time priority for a joint stream's cycle loop (``rt_priority`` URL option): applied
to the calling thread, refused with a clear message where the OS does not allow it, and
the previous scheduling restored afterwards."""

from __future__ import annotations

import os

import pytest

from firmware_bridge.errors import BridgeError
from firmware_bridge.realtime import RealtimePriority

linux_only = pytest.mark.skipif(not hasattr(os, "sched_setscheduler"),
                                reason="needs Linux scheduling calls")


@linux_only
def test_priority_zero_leaves_the_scheduling_alone(monkeypatch):
    calls = []
    monkeypatch.setattr(os, "sched_setscheduler", lambda *a: calls.append(a))
    with RealtimePriority(0, "ethercat://eth0") as rt:
        assert rt.describe() == "as the process was (rt_priority=0)"
    assert calls == []


@linux_only
def test_a_refused_priority_names_the_option_and_what_to_do(monkeypatch):
    def refuse(*a):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    with pytest.raises(BridgeError, match=r"ethercat://eth0\?rt_priority=5: cannot run the "
                                          r"cycle loop at SCHED_FIFO 5.*CAP_SYS_NICE.*"
                                          r"rt_priority=0"):
        RealtimePriority(5, "ethercat://eth0?rt_priority=5").apply()


@linux_only
def test_out_of_range_priority_is_refused_before_anything_changes(monkeypatch):
    monkeypatch.setattr(os, "sched_setscheduler", lambda *a: pytest.fail("must not be called"))
    with pytest.raises(BridgeError, match=r"rt_priority: expected 0 \(off\) or 1-99, found 120"):
        RealtimePriority(120, "ethercat://eth0")


@linux_only
@pytest.mark.skipif(os.geteuid() != 0, reason="SCHED_FIFO needs root or CAP_SYS_NICE")
def test_fifo_is_applied_to_the_calling_thread_and_restored():
    before = (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority)
    with RealtimePriority(3, "ethercat://eth0") as rt:
        assert os.sched_getscheduler(0) == os.SCHED_FIFO
        assert os.sched_getparam(0).sched_priority == 3
        assert rt.describe() == "SCHED_FIFO 3 (rt_priority=3)"
    assert (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority) == before


@linux_only
@pytest.mark.skipif(os.geteuid() != 0, reason="SCHED_FIFO needs root or CAP_SYS_NICE")
def test_the_priority_follows_the_thread_that_runs_the_cycles():
    import threading

    rt = RealtimePriority(2, "ethercat://eth0")
    rt.apply()  # the opener
    seen = {}

    def cycles():
        rt.follow()
        seen["policy"] = os.sched_getscheduler(0)

    t = threading.Thread(target=cycles)
    t.start()
    t.join()
    assert seen["policy"] == os.SCHED_FIFO
    assert os.sched_getscheduler(0) != os.SCHED_FIFO  # the opener is back to normal
    rt.restore()
