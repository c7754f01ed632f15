"""EtherCAT: the unmodified pysoem against the slave emulator on a veth pair inside a private
network namespace (``unshare -n``; root needed, marked ``net``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from edge.joints import Status

pytestmark = pytest.mark.net


def scenario(*args: str) -> dict:
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    proc = subprocess.run(["unshare", "-n", sys.executable, "-m",
                           "firmware_bridge.testing.ecat_run", *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


#: the receive wait of the scenarios that assert a clean link loses no cycle: the emulator is
#: a process on this (shared) machine, and a reply it sends 2 ms late because it was not
#: scheduled is the host's timing, not a lost frame; the bridge's own timing is measured by
#: the tests that set timeout_us themselves and by bench/bench_bridge.py
CLEAN_LINK = ("--timeout-us", "50000")


def test_bridge_ethercat_bringup_identity_scaling_and_clean_cycles():
    r = scenario("--cycles", "300", *CLEAN_LINK)
    (slave,) = r["describe"]["slaves"]
    assert (slave["vendor"], slave["product"]) == (0xE55, 0x5EDE)  # SII identity
    assert "SyncEdge CiA402 emulator" in slave["name"]
    assert slave["rad_per_inc"] == pytest.approx(2 * np.pi / 131072)  # 0x608F by SDO
    assert slave["nm_per_permille"] == pytest.approx(1.270e-3)  # 0x6076 by SDO
    assert r["describe"]["expected_wkc"] == 3
    assert r["stats"]["lost_cycles"] == 0 and r["stats"]["samples"] == 300
    steps = np.diff(r["positions"]) / slave["rad_per_inc"]
    np.testing.assert_allclose(steps, 1000)  # a fresh input every cycle
    assert r["datagrams"]["LRW"] >= 300 and r["datagrams"]["LRD"] == 0


def test_bridge_ethercat_lost_frame_counts_cycle_and_never_reports_stale_inputs():
    # every 25th frame is dropped and never answered, so it is lost whatever the receive
    # wait; the clean link's wait keeps a reply the shared host delays from being lost too
    r = scenario("--cycles", "200", "--drop-every", "25", *CLEAN_LINK)
    assert r["stats"]["lost_cycles"] >= 7 and r["stats"]["gaps"] == r["stats"]["lost_cycles"]
    pos = np.array(r["positions"])
    assert np.all(np.diff(pos) > 0)  # no input value is ever delivered twice
    gap = [k for k, s in enumerate(r["status"]) if s & Status.GAP]
    assert len(gap) == r["stats"]["gaps"]


def test_bridge_ethercat_slave_in_safeop_with_error_flags_outputs_not_applied():
    r = scenario("--cycles", "60", "--safeop-at", "30", *CLEAN_LINK)
    faults = [k for k, s in enumerate(r["status"]) if s & Status.FAULT]
    assert faults and r["stats"]["lost_cycles"] == 0
    assert r["faults"] == ["outputs not applied: slave0 AL 0x14 code 0x001B ('SyncEdge "
                           "CiA402 emulator': SAFE-OP + ERROR, Sync manager watchdog)"]
    assert np.all(np.diff(r["positions"]) > 0)  # inputs still read, fresh each cycle
    (health,) = r["stats"]["extra"]["slaves"]  # per-slave health in the statistics
    assert health == {"position": 0, "name": "SyncEdge CiA402 emulator",
                      "state": "SAFE-OP + ERROR", "al_status": "0x001B Sync manager watchdog",
                      "wkc_share": 1, "lost_cycles": 0}
    assert r["describe"]["slaves"][0]["state"] == "OP"  # described at bring-up


def test_bridge_ethercat_slave_without_lrw_uses_lrd_and_lwr():
    r = scenario("--cycles", "100", "--no-lrw", *CLEAN_LINK)
    assert r["datagrams"]["LRW"] == 0 and r["datagrams"]["LRD"] >= 100
    assert r["datagrams"]["LWR"] >= 100
    # per datagram the counters are 1 (LRD) + 1 (LWR) instead of 3; SOEM doubles the LWR
    # count so the expected working counter is still 3 and every cycle checks out
    assert r["describe"]["expected_wkc"] == 3 and r["stats"]["lost_cycles"] == 0


def _emulator_cycles(r: dict) -> np.ndarray:
    """The emulator's process-data frame count behind each sample (position = 1000 * count)."""
    return np.round(np.array(r["positions"]) / r["describe"]["slaves"][0]["rad_per_inc"]
                    / 1000).astype(np.int64)


@pytest.mark.parametrize("fault", ["--replay-every", "--late-every"])
def test_bridge_ethercat_byte_identical_late_or_replayed_reply_is_a_lost_cycle(fault):
    """Every 23rd reply is a byte-identical copy of an earlier one with the same frame index
    (same working counter and data): a duplicate delivered one index wrap late, or a reply
    held back one wrap and delivered in place of a later one (reordering). Only a per-cycle
    value (the DC system time) exposes it; no such sample may come out fresh."""
    r = scenario("--cycles", "200", fault, "23")
    counts = _emulator_cycles(r)
    assert np.all(np.diff(counts) > 0), "an older input was delivered as a later sample"
    assert r["stats"]["stale_replies"] >= 7  # 200+ cycles, one copy every 23
    gaps = [k for k, s in enumerate(r["status"]) if s & Status.GAP]
    assert len(gaps) == r["stats"]["gaps"] and r["stats"]["lost_cycles"] >= 7
    stamps = np.array(r["device_stamps"])
    assert np.all(stamps > 0) and np.all(np.diff(stamps) > 0)  # DC system time, ns


def test_bridge_ethercat_without_dc_says_freshness_rests_on_index_and_counter():
    r = scenario("--cycles", "50", "--no-dc", *CLEAN_LINK)
    assert r["describe"]["distributed_clock"] is False
    assert "no distributed clock" in r["describe"]["freshness"]
    assert set(r["device_stamps"]) == {-1} and r["stats"]["lost_cycles"] == 0


def test_bridge_ethercat_lost_frame_costs_at_most_two_slots_and_empty_slots_are_counted():
    """1 kHz, timeout_us=500, every 20th frame lost. The receive wait must end at timeout_us
    (SOEM's blocking recv() otherwise waits out a kernel timer tick, 8-12 ms), so the sample
    after a lost frame comes 2 slots after the one before it; every slot of the 1 kHz grid
    without a sample is counted."""
    r = scenario("--cycles", "300", "--drop-every", "20", "--timeout-us", "500")
    rx = np.array(r["receipts"], dtype=np.int64)
    gap = np.array([k for k, s in enumerate(r["status"]) if s & Status.GAP])
    assert gap.size >= 10
    span_ms = (rx[gap] - rx[gap - 1]) / 1e6
    assert np.median(span_ms) < 2.5, f"lost frame spans {np.round(span_ms, 1)} ms"
    st = r["stats"]
    assert st["slots"] == round((rx[-1] - rx[0]) / 1e6) + 1
    assert st["empty_slots"] == st["slots"] - st["samples"] >= st["lost_cycles"]


def test_bridge_ethercat_measures_its_own_wait_for_each_lost_frame():
    """The bridge's part of a lost frame is its receive wait (send to giving up): measured
    per lost cycle, bounded by timeout_us (plus the wake-up), and summarised in the stats,
    so a gap longer than that is shown to be spent elsewhere (scheduling, the link)."""
    r = scenario("--cycles", "300", "--drop-every", "20", "--timeout-us", "500")
    waits = np.array(r["lost_waits_us"])
    st = r["stats"]
    assert waits.size == st["lost_cycles"] >= 10
    assert np.all(waits >= 500), "a lost cycle gave up before timeout_us"
    assert np.median(waits) < 1000, f"lost-frame waits {np.round(waits)} us"
    summary = st["extra"]["lost_wait_us"]
    assert summary["count"] == waits.size
    assert summary["max"] == pytest.approx(waits.max())
    assert summary["mean"] == pytest.approx(waits.mean())


def test_bridge_ethercat_rt_priority_runs_the_cycle_loop_at_sched_fifo():
    r = scenario("--cycles", "200", "--master-priority", "fifo")
    assert r["describe"]["scheduling"] == "SCHED_FIFO 1 (rt_priority=1)"
    assert r["stats"]["samples"] == 200
    plain = scenario("--cycles", "50")
    assert plain["describe"]["scheduling"] == "as the process was (rt_priority=0)"


def test_bridge_ethercat_one_faulty_slave_on_a_line_costs_only_its_own_joint():
    """Two identical drives; the second falls to PRE-OP with error at frame 30. The first
    drive's joint stays fresh every cycle; the second's is NaN from then on (never its old
    value), each such sample FAULT naming slave1; no cycle of the line is lost."""
    r = scenario("--cycles", "80", "--slaves", "2", "--last-preop-at", "30", *CLEAN_LINK)
    assert r["describe"]["expected_wkc"] == 6 and r["stats"]["lost_cycles"] == 0
    pos = np.array([[np.nan if v is None else v for v in row] for row in r["positions_all"]])
    assert np.all(np.diff(pos[:, 0]) > 0)  # slave 0: fresh every cycle
    dead = np.isnan(pos[:, 1])
    first = int(np.argmax(dead))
    assert 10 < first < 40 and dead[first:].all() and not dead[:first].any()
    np.testing.assert_array_equal(pos[:first, 0], pos[:first, 1])  # identical drives
    faulty = [s & Status.FAULT for s in r["status"]]
    assert all(faulty[first:]) and not any(faulty[:first])
    assert r["faults"] == ["no fresh inputs from slave1 AL 0x12 code 0x001B ('SyncEdge CiA402 "
                           "emulator': PRE-OP + ERROR, Sync manager watchdog) (below SAFE-OP: "
                           "joint NaN)"]
    assert [h["lost_cycles"] > 0 for h in r["stats"]["extra"]["slaves"]] == [False, True]


def test_bridge_ethercat_lone_slave_in_preop_is_named_and_its_health_is_the_state_read():
    """One slave falls to PRE-OP with error at frame 30: its frames still come back, with
    working counter 0. The read fails naming the slave, its state and AL status code (not
    "no frame came back"), and the health kept in the statistics is the state read after
    the fault."""
    r = scenario("--cycles", "200", "--last-preop-at", "30", *CLEAN_LINK)
    assert 10 < len(r["status"]) < 40
    # the cause leads the message, the read's time-out follows it
    cause, _, rest = r["error"].partition(" (ethercat://")
    assert cause.endswith("no fresh inputs from any slave: slave0 AL 0x12 code 0x001B "
                          "('SyncEdge CiA402 emulator': PRE-OP + ERROR, Sync manager "
                          "watchdog) (below SAFE-OP)"), r["error"]
    assert "no valid sample within" in rest, r["error"]
    assert "no frame came back" not in r["error"]
    (health,) = r["stats"]["extra"]["slaves"]
    assert (health["state"], health["al_status"], health["wkc_share"]) == \
        ("PRE-OP + ERROR", "0x001B Sync manager watchdog", 0)
    assert health["lost_cycles"] == r["stats"]["lost_cycles"] > 0


def test_bridge_ethercat_clean_run_keeps_every_slaves_health_from_the_start():
    """What ``bridge record`` prints one line per slave from: kept from bring-up on, in a
    clean run too, without describe() having been called."""
    r = scenario("--cycles", "50", "--slaves", "2", *CLEAN_LINK)
    assert r["stats"]["lost_cycles"] == 0
    want = [(k, "OP", "0x0000 No error", 3, 0) for k in range(2)]
    for health in (r["health_at_open"], r["stats"]["extra"]["slaves"]):
        assert [(h["position"], h["state"], h["al_status"], h["wkc_share"], h["lost_cycles"])
                for h in health] == want


def test_bridge_ethercat_int32_position_counts_are_unwrapped_across_the_wrap():
    # the drive's position counter starts 100 frames below 2^31 and wraps to -2^31: the
    # joint keeps turning the same way, never jumping by 2^32 increments
    r = scenario("--cycles", "300", "--position-start", str(2**31 - 100_000), *CLEAN_LINK)
    inc = r["describe"]["slaves"][0]["rad_per_inc"]
    steps = np.diff(r["positions"]) / inc
    np.testing.assert_allclose(steps, 1000)
    assert r["positions"][-1] > r["positions"][0] > 100_000
    assert r["faults"] == [] and r["stats"]["faults"] == 0


@pytest.mark.parametrize("step", [("--dc-step-s", "-5"), ("--dc32", "--dc-step-s", "5")],
                         ids=["back-5s", "32bit-wrap"])
def test_bridge_ethercat_a_dc_time_jump_is_re_anchored_once_replies_agree(step):
    """From frame 100 on the DC system time is 5 s off: stepped back, or (a 32-bit system
    time, which wraps every 4.3 s) moved on as after an outage longer than a wrap. The
    replies after it agree with each other: after 3 of them the stream re-anchors, counts a
    clock jump and goes on; only the 2 before are lost."""
    r = scenario("--cycles", "300", "--dc-step-at", "100", *step, *CLEAN_LINK)
    assert "error" not in r, r["error"]
    st = r["stats"]
    assert (st["samples"], st["clock_jumps"], st["stale_replies"]) == (300, 1, 2)
    assert st["gaps"] == 1 and st["lost_cycles"] == 2
    (jump,) = st["extra"]["dc_jumps"]
    assert abs(abs(jump["dc_step_us"]) - (5e6 if step[0] != "--dc32" else 5e6 - 2**32 / 1e3)) \
        < 5e3, jump
    counts = _emulator_cycles(r)
    assert np.all(np.diff(counts) > 0)  # never an older input


def test_bridge_ethercat_an_interface_deleted_mid_stream_is_named_as_gone():
    r = scenario("--cycles", "300", "--delete-iface-at", "50", *CLEAN_LINK)
    assert r["stats"]["samples"] == 50
    assert "network interface ecm0 is gone" in r["error"], r["error"]
    assert r["error"].startswith("ethercat://ecm0?"), r["error"]
