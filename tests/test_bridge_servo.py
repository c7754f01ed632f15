"""Servo-bus transports: the unmodified vendor SDKs against the fake bus on a pty."""

from __future__ import annotations

import math
import sys
import time

import numpy as np
import pytest

from edge.joints import Status
from edge.timebase import pair_frames
from firmware_bridge.errors import BridgeTimeoutError, MissingDependencyError, UrlError
from firmware_bridge.feetech import sign_magnitude
from firmware_bridge.testing.fake_servo import FakeServoBus, Faults, clock_capture_ns
from firmware_bridge.url import stream_for_url

PROTOCOLS = ["dxl", "sts"]
TICK = 2 * math.pi / 4096


def expected_pos_rad(sid: int, n: int) -> float:
    """Position the fake reports for servo ``sid`` at sync read ``n`` (see fake_servo)."""
    return (100 * sid + n % 500) * TICK


def check_fresh(stream, sample) -> None:
    """The sample must be the reply to the bridge's latest request, never an older one."""
    assert sample.position_rad[0] == pytest.approx(expected_pos_rad(stream.ids[0], stream.cycles))


def open_bus(proto, bus, extra=""):
    return stream_for_url(f"{proto}://{bus.path}?ids=1-6&timeout_s=0.01{extra}",
                          read_timeout_s=2.0)


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_bridge_servo_clean_link_values_and_units(proto):
    with FakeServoBus(proto, range(1, 7)) as bus, open_bus(proto, bus) as s:
        models = s.describe()["models"]
        assert set(models) == set(range(1, 7)) and -1 not in models.values()
        for _ in range(100):
            smp = s.read()
            assert smp.status == Status.OK
            check_fresh(s, smp)
        np.testing.assert_allclose(smp.position_rad, [expected_pos_rad(i, s.cycles)
                                                      for i in range(1, 7)])
        assert s.stats.samples == 100 and s.stats.lost_cycles == 0
        vel_raw = np.array([10 * i - 20 for i in range(1, 7)])
        if proto == "dxl":
            np.testing.assert_allclose(smp.velocity_rad_s, vel_raw * 0.229 * 2 * math.pi / 60)
            assert smp.device_stamp_ns >= 0
        else:
            np.testing.assert_allclose(smp.velocity_rad_s, vel_raw * TICK)
            assert smp.effort_nm[0] < 0  # load -5 in sign-magnitude (bit 10)


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_bridge_servo_partial_reply_then_silence_returns_within_deadline(proto):
    faults = Faults(partial_at=3, silence_s=1.5)
    with FakeServoBus(proto, range(1, 7), faults) as bus, open_bus(proto, bus) as s:
        s.read_timeout_s = 0.3
        s.read(), s.read()
        t0 = time.monotonic()
        with pytest.raises(BridgeTimeoutError, match="expected a valid sample within 0.3 s"):
            s.read()
        assert time.monotonic() - t0 < 0.5
        assert s.stats.timeouts + s.stats.crc_errors >= 1


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_bridge_servo_garbage_prefix_is_skipped(proto):
    faults = Faults(garbage_prefix=b"\x00\x13\x37\xfe\x55\x01" * 4)
    with FakeServoBus(proto, range(1, 7), faults) as bus, open_bus(proto, bus) as s:
        for _ in range(5):
            check_fresh(s, s.read())
        assert s.stats.samples == 5


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_bridge_servo_random_dropped_bytes_resync_and_count_gaps(proto):
    faults = Faults(drop_byte_prob=0.001, seed=7)
    with FakeServoBus(proto, range(1, 7), faults) as bus, open_bus(proto, bus) as s:
        s.read()  # failures before the first sample are start-up, not gaps
        cycles0, gaps = s.cycles, 0
        for _ in range(200):
            smp = s.read()
            check_fresh(s, smp)
            gaps += bool(smp.status & Status.GAP)
        assert s.stats.lost_cycles > 0
        assert gaps == s.stats.gaps > 0
        assert s.stats.lost_cycles == s.cycles - cycles0 - 200


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_bridge_servo_corrupt_packet_every_n_marks_gap_and_goes_on(proto):
    with FakeServoBus(proto, range(1, 7), Faults(corrupt_every=25)) as bus, \
            open_bus(proto, bus) as s:
        samples = [s.read() for _ in range(60)]
        assert s.stats.crc_errors >= 10
        flagged = [x for x in samples if x.status & Status.GAP]
        assert len(flagged) == s.stats.gaps >= 10 and all(x.missed >= 1 for x in flagged)
        check_fresh(s, samples[-1])


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_bridge_servo_late_reply_is_never_taken_as_next_reply(proto):
    # every 4th reply arrives 15 ms after the 10 ms allowance: the next cycle must not use it
    with FakeServoBus(proto, range(1, 7), Faults(late_every=4, late_s=0.025)) as bus, \
            open_bus(proto, bus) as s:
        for _ in range(24):
            check_fresh(s, s.read())
        assert s.stats.timeouts >= 5


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_bridge_servo_unplug_and_replug_reconnects(proto):
    with FakeServoBus(proto, range(1, 7), Faults(unplug_at=10, unplug_s=0.3)) as bus, \
            open_bus(proto, bus) as s:
        samples = [s.read() for _ in range(20)]
        assert s.stats.reconnects == 1
        gap = [x for x in samples if x.status & Status.GAP]
        assert len(gap) == 1
        assert samples[9].receipt_ns - samples[8].receipt_ns > 0.25e9


def test_bridge_servo_sign_magnitude_negative_position():
    assert sign_magnitude(0x8005, 15) == -5
    assert sign_magnitude(0x0005, 15) == 5
    assert list(sign_magnitude(np.array([0x0405, 0x0005]), 10)) == [-5, 5]
    with FakeServoBus("sts", [1, 2], Faults(positions={2: 0x8005})) as bus, \
            stream_for_url(f"sts://{bus.path}?ids=1-2&zero_tick=0") as s:
        smp = s.read()
    assert smp.position_rad[1] == pytest.approx(-5 * TICK)


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_bridge_servo_slow_loop_stamps_show_real_spacing(proto):
    # nominal 500 Hz, but the bus answers 8 ms late every cycle
    with FakeServoBus(proto, range(1, 7), Faults(delay_s=0.008)) as bus, \
            open_bus(proto, bus, "&rate_hz=500") as s:
        stamps = np.array([s.read().receipt_ns for _ in range(12)], dtype=np.float64)
    spacing_s = np.diff(stamps) / 1e9
    assert np.median(spacing_s) > 0.0075
    assert s.stats.rate_hz < 135


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_bridge_servo_alert_bit_flags_fault(proto):
    with FakeServoBus(proto, range(1, 4), Faults(alert_ids=(3,))) as bus, \
            stream_for_url(f"{proto}://{bus.path}?ids=1-3") as s:
        smp = s.read()
    assert smp.status & Status.FAULT and "id [3]" in smp.fault


def test_bridge_servo_url_errors_quote_the_form():
    with pytest.raises(UrlError, match=r"option 'ids' expected a servo id list.*form: dxl://"):
        stream_for_url("dxl:///dev/null", do_not_open=True)
    with pytest.raises(UrlError, match="option 'bogus' expected a known option"):
        stream_for_url("sts:///dev/null?ids=1&bogus=2", do_not_open=True)
    with pytest.raises(UrlError, match="expected distinct ids"):
        stream_for_url("sts:///dev/null?ids=1,1", do_not_open=True)


def test_bridge_servo_missing_sdk_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "dynamixel_sdk", None)
    s = stream_for_url("dxl:///dev/null?ids=1", do_not_open=True)
    with pytest.raises(MissingDependencyError, match=r"pip install 'syncedge\[bridge\]'"):
        s.open()


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_describing_a_closed_bus_says_it_is_not_open(proto):
    from firmware_bridge.stream import LinkLostError

    with FakeServoBus(proto, range(1, 3)) as bus:
        s = stream_for_url(f"{proto}://{bus.path}?ids=1-2")
        assert set(s.describe()["models"]) == {1, 2}
        s.close()
        with pytest.raises(LinkLostError, match="not open; open the stream before describing"):
            s.describe()


@pytest.mark.parametrize("zero_tick", [0, 2048, 4095])
@pytest.mark.parametrize("proto", PROTOCOLS)
def test_bridge_servo_encoder_wrap_is_unwrapped_into_turns(proto, zero_tick):
    """Servo 1 is parked on the 4095/0 boundary (raw 4095, 0, 4095, ...); servo 2 turns 37
    ticks per read across it (3 turns in 300 reads). Positions are continuous, in turns."""
    faults = Faults(parked_ids=(1,), turning={2: 37})
    with FakeServoBus(proto, [1, 2], faults) as bus, stream_for_url(
            f"{proto}://{bus.path}?ids=1-2&timeout_s=0.01&zero_tick={zero_tick}",
            read_timeout_s=2.0) as s:
        samples, cycles = [], []
        for _ in range(300):
            samples.append(s.read())
            cycles.append(s.cycles)
    pos_ticks = np.array([x.position_rad for x in samples]) / TICK  # (300, 2)
    parked = pos_ticks[:, 0]
    assert parked.max() - parked.min() == pytest.approx(1.0)  # one tick, never 2*pi
    step = np.diff(pos_ticks[:, 1]) / np.diff(cycles)
    np.testing.assert_allclose(step, 37.0)  # 37 ticks per sync read, also across the wrap
    assert pos_ticks[-1, 1] - pos_ticks[0, 1] > 2 * 4096  # more than two turns


def test_turn_counter_starts_near_zero_tick_and_restarts_after_reset():
    from firmware_bridge.encoder import TurnCounter

    t = TurnCounter(4096, zero_step=4000)
    assert list(t.update([10, 3990])) == [106, -10]  # nearest turn to zero_step
    assert list(t.update([4090, 4095])) == [90, 95]  # joint 0 back across the boundary
    t.reset()  # reconnect or power cycle: the count restarts within half a turn of zero
    assert list(t.update([4090, 100_000])) == [90, 96_000]  # a multi-turn raw value as is
    with pytest.raises(ValueError, match=r"expected shape \(2,\), found \(3,\)"):
        t.update([1, 2, 3])


@pytest.fixture
def simbus(monkeypatch):
    """Let pyserial open ``simbus://`` (firmware_bridge.testing.protocol_simbus)."""
    import serial

    monkeypatch.setattr(serial, "protocol_handler_packages",
                        [*serial.protocol_handler_packages, "firmware_bridge.testing"])


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_bridge_servo_latency_estimated_by_round_trip_pairs_within_1ms_at_p99(proto, simbus):
    """A USB-serial link: a one-way delay drawn at random in 3..20 ms (never given to the
    bridge) and replies delivered on a 16 ms latency-timer grid (simulated in-process, so
    the link's timing does not depend on the machine's load). Servo 1's position is its
    capture time (100 us per step). The stream's own round-trip estimate must place samples
    on the host clock so that 600 camera frames pair within 1 ms at p99. The bus is paced at
    13.53 Hz (73.9 ms, longer than the slowest round trip; 73.9 mod 16 = 0.618 of 16 ms, so
    successive requests spread evenly over the phases of the 16 ms timer); a free-running
    loop locks to it (docs/bridge.md)."""
    from edge.timebase import capture_stamps

    link_s = float(np.random.default_rng().uniform(0.003, 0.020))
    port = f"simbus://{proto}?ids=1,2&link_delay_s={link_s}&burst_period_s=0.016&clock_ids=1"
    with stream_for_url(f"{proto}://{port}?ids=1-2&timeout_s=0.1&zero_tick=0&rate_hz=13.53",
                        read_timeout_s=2.0) as s:
        s.read()
        samples = []
        s.run(samples.append, seconds=3.0)
    receipt = np.array([x.receipt_ns for x in samples], dtype=np.int64)
    truth_ns = clock_capture_ns(receipt, [x.position_rad[0] for x in samples])  # (N,)
    assert np.all(truth_ns <= receipt) and np.all(np.diff(truth_ns) > 0)
    est = capture_stamps(samples)
    assert est.method == "round trip"
    frames = np.linspace(truth_ns[0] + 60e6, truth_ns[-1] - 60e6, 600).astype(np.int64)
    column = truth_ns[:, None].astype(np.float64)  # (N, 1): each sample's true capture time
    p = pair_frames(frames, est.stamps_ns, column, tolerance_s=0.2)
    err_ms = np.abs(p.positions[p.paired, 0] - frames[p.paired]) / 1e6
    assert p.paired.all(), f"link {link_s * 1e3:.1f} ms: {p.unpaired.size} frames unpaired"
    assert np.percentile(err_ms, 99) < 1.0, (
        f"link {link_s * 1e3:.1f} ms: pairing error p99 {np.percentile(err_ms, 99):.2f} ms, "
        f"estimate {est.latency_s * 1e3:.1f} ms")
    true_latency_s = float(np.mean(receipt - truth_ns)) / 1e9
    assert est.latency_s == pytest.approx(true_latency_s, abs=0.001)
    naive = pair_frames(frames, receipt, column, tolerance_s=0.2)  # the baseline: receipt
    assert np.median(np.abs(naive.positions[naive.paired, 0] - frames[naive.paired])) > 5e6


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_bridge_servo_round_trip_takes_the_lines_own_time_out(proto, simbus):
    """Six servos at 57600 baud: the sync-read request spends about 3.5 ms on the line and
    the six status packets 15 (sts) to 28 ms (dxl), so a round trip split evenly would put
    every capture 5-12 ms late. The bridge counts the request from the end of its bytes and
    the reply from when it was whole less its bytes' time (both from the byte counts and the
    baud rate), so only the 5 ms link is split: frames pair within 1 ms at p99."""
    from edge.timebase import capture_stamps

    port = f"simbus://{proto}?ids=1,2,3,4,5,6&link_delay_s=0.005&clock_ids=1"
    with stream_for_url(f"{proto}://{port}?ids=1-6&baud=57600&timeout_s=0.1&zero_tick=0"
                        "&rate_hz=15", read_timeout_s=2.0) as s:
        s.read()
        samples = []
        s.run(samples.append, seconds=3.0)
    receipt = np.array([x.receipt_ns for x in samples], dtype=np.int64)
    request = np.array([x.request_ns for x in samples], dtype=np.int64)
    truth_ns = clock_capture_ns(receipt, [x.position_rad[0] for x in samples])  # (N,)
    # only the link is left in the round trip: 2 x 5 ms and the host's wake-up
    assert np.min(receipt - request) / 1e6 == pytest.approx(10.0, abs=0.5)
    est = capture_stamps(samples)
    frames = np.linspace(truth_ns[0] + 60e6, truth_ns[-1] - 60e6, 600).astype(np.int64)
    p = pair_frames(frames, est.stamps_ns, truth_ns[:, None].astype(np.float64),
                    tolerance_s=0.2)
    err_ms = np.abs(p.positions[p.paired, 0] - frames[p.paired]) / 1e6
    assert p.paired.all() and np.percentile(err_ms, 99) < 1.0, np.percentile(err_ms, 99)


def test_bridge_servo_reply_complete_is_the_first_read_that_saw_every_byte():
    """``rx_log`` holds (host ns, bytes read or waiting then): the reply of 60 bytes was whole
    when the second read saw 60; the third read only fetched bytes already waiting."""
    from types import SimpleNamespace

    from firmware_bridge.sdk_port import line_time_ns, reply_complete_ns

    port = SimpleNamespace(rx_bytes=60, rx_log=[(100, 27), (250, 60), (900, 60)])
    assert reply_complete_ns(port) == 250
    assert reply_complete_ns(SimpleNamespace(rx_bytes=0, rx_log=[])) == -1
    assert line_time_ns(100, 1_000_000) == 1_000_000  # 10 bits a byte
    assert line_time_ns(27, 57600) == 4_687_500


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_bridge_servo_device_vanishing_while_the_line_drains_reconnects(proto):
    # sync read 10 gets half a reply, then noise keeps the host draining the line after the
    # failed cycle, and the bus vanishes mid-drain: the same reconnect as any other unplug
    faults = Faults(vanish_in_drain_at=10, noise_s=0.2, unplug_s=0.3)
    with FakeServoBus(proto, range(1, 7), faults) as bus, \
            stream_for_url(f"{proto}://{bus.path}?ids=1-6&timeout_s=0.05",
                           read_timeout_s=2.0) as s:
        samples = [s.read() for _ in range(20)]
        assert s.stats.reconnects == 1
        assert [x.missed > 0 for x in samples].count(True) == 1


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_bridge_servo_describe_names_the_url_when_the_bus_vanishes_during_the_pings(proto):
    from firmware_bridge.errors import DeviceGoneError

    with FakeServoBus(proto, range(1, 4), Faults(unplug_at_ping=2, unplug_s=5.0)) as bus:
        url = f"{proto}://{bus.path}?ids=1-3"
        with stream_for_url(url) as s:
            with pytest.raises(DeviceGoneError) as info:
                s.describe()
    msg = str(info.value)
    assert msg.startswith(f"{url}: device vanished while pinging id 2 ("), msg
    assert msg.endswith("check the cable or the path, then probe again"), msg
