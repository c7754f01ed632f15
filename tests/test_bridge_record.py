"""``syncedge bridge record``: refusals, failed recordings, the summary line, ``probe``'s
latency on a few samples, and a port that another process holds."""

from __future__ import annotations

import argparse
import json
import re

import numpy as np
import pytest

from firmware_bridge.cli import MAX_RECORD_S, register
from firmware_bridge.errors import BridgeError, BridgeTimeoutError, PortBusyError
from firmware_bridge.jointlog import read_joint_log
from firmware_bridge.testing.fake_framed import FakeFramedDevice, FramedFaults
from firmware_bridge.testing.fake_servo import FakeServoBus, Faults
from firmware_bridge.url import stream_for_url


def run(argv):
    parser = argparse.ArgumentParser(prog="syncedge")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.mark.parametrize("seconds", ["inf", "1e300", "nan", str(MAX_RECORD_S * 2)])
def test_record_refuses_an_infinite_or_too_long_duration_before_opening(tmp_path, seconds):
    log = tmp_path / "inf.jsonl"
    with pytest.raises(BridgeError, match=rf"--seconds {re.escape(f'{float(seconds):g}')}: "
                                          rf"expected a duration above 0 s and at most 86400 s"):
        run(["bridge", "record", "loop://?joints=2", "--seconds", seconds, "--out", str(log)])
    assert list(tmp_path.iterdir()) == []  # neither OUT nor OUT.partial


def test_an_error_that_ends_a_recording_never_leaves_out(tmp_path, monkeypatch):
    """Whatever stops a recording before its log is complete, OUT is not written: the log
    stays under its partial name."""
    from firmware_bridge.stream import JointStream

    real_run = JointStream.run

    def broken(self, callback, **kw):
        real_run(self, callback, max_samples=5)
        raise RuntimeError("a fault nobody foresaw")

    monkeypatch.setattr(JointStream, "run", broken)
    log = tmp_path / "j.jsonl"
    with pytest.raises(RuntimeError):
        run(["bridge", "record", "loop://?joints=2&rate_hz=0", "--seconds", "1",
             "--out", str(log)])
    assert not log.exists()
    assert len(read_joint_log(tmp_path / "j.jsonl.partial").samples) == 5


def test_a_failed_recording_keeps_a_partial_log_and_says_how_much_it_holds(tmp_path):
    """The device stops after 150 frames (0.3 s at 500 Hz) of a 5 s recording: the error
    says where the partial log is and how much of the 5 s it holds; OUT is not written; the
    partial log is closed with its statistics and says how the recording ended."""
    log = tmp_path / "j.jsonl"
    with FakeFramedDevice(3, 500.0, count=150) as dev:
        url = f"frame://{dev.path}?joints=3&read_timeout_s=0.3"
        with pytest.raises(BridgeTimeoutError) as info:
            run(["bridge", "record", url, "--seconds", "5", "--out", str(log)])
    msg = str(info.value)
    partial = tmp_path / "j.jsonl.partial"
    m = re.search(rf"; partial recording kept at {re.escape(str(partial))}: (\d+) samples, "
                  rf"the first ([0-9.]+) s of the requested 5 s \(failed after [0-9.]+ s; "
                  rf"{re.escape(str(log))} was not written: record again\)$", msg)
    assert m, msg
    assert msg.startswith(url) and "\n" not in msg
    assert not log.exists()
    jl = read_joint_log(partial)
    assert len(jl.samples) == int(m.group(1)) >= 100
    assert jl.stats["samples"] == len(jl.samples)
    span_s = (jl.samples[-1].receipt_ns - jl.samples[0].receipt_ns) / 1e9
    assert float(m.group(2)) == pytest.approx(span_s, abs=0.01) and span_s < 0.5
    rec = jl.stats["extra"]["recording"]
    assert rec["requested_s"] == 5 and rec["recorded_s"] == pytest.approx(span_s, abs=1e-5)
    assert rec["ended"].startswith("failed: " + url)


def test_a_recording_that_fails_before_its_first_sample_keeps_nothing(tmp_path):
    """Every frame is damaged on the line: nothing is recorded, so nothing is kept."""
    log = tmp_path / "j.jsonl"
    with FakeFramedDevice(3, 500.0, faults=FramedFaults(corrupt_every=1)) as dev, \
            pytest.raises(BridgeTimeoutError, match="frames came but were rejected") as info:
        run(["bridge", "record", f"frame://{dev.path}?joints=3&read_timeout_s=0.3",
             "--seconds", "1", "--out", str(log)])
    assert "partial recording" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_record_summary_counts_fault_samples_and_names_the_first_reason(tmp_path, capsys):
    log = tmp_path / "j.jsonl"
    with FakeServoBus("dxl", [1, 2, 3], Faults(alert_ids=(3,))) as bus:
        assert run(["bridge", "record", f"dxl://{bus.path}?ids=1-3&timeout_s=0.01",
                    "--seconds", "0.3", "--out", str(log)]) == 0
    out = capsys.readouterr().out
    jl = read_joint_log(log)
    n = jl.stats["faults"]
    assert n == jl.stats["samples"] == len(jl.samples) > 0
    assert jl.samples[0].fault == "hardware alert on id [3]"
    assert f"reconnects, {n} FAULT samples (first: hardware alert on id [3])" in out
    assert jl.stats["extra"]["recording"] == {
        "requested_s": 0.3, "ended": "complete",
        "recorded_s": pytest.approx((jl.samples[-1].receipt_ns - jl.samples[0].receipt_ns)
                                    / 1e9, abs=1e-5)}


def test_record_summary_says_zero_fault_samples_on_a_clean_stream(tmp_path, capsys):
    assert run(["bridge", "record", "loop://?joints=2&rate_hz=200", "--seconds", "0.1",
                "--out", str(tmp_path / "j.jsonl")]) == 0
    assert re.search(r"\d+ reconnects, 0 FAULT samples\n", capsys.readouterr().out)


def test_probe_on_a_few_samples_says_too_few_instead_of_an_absurd_drift(capsys):
    """Three samples of one burst cannot place a device clock: no drift figure, and the
    estimate says why; the statistics keep it as unknown."""
    assert run(["bridge", "probe", "loop://?joints=2&rate_hz=0", "--samples", "3"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("latency: "))
    assert "drift ppm" not in out
    assert re.fullmatch(r"latency: unknown \(too few samples to fit the device clock \(device "
                        r"clock\): 3 over [0-9.]+ ms, needs at least 20 over 100 ms; read more "
                        r"samples, e\.g\. --samples 200\)", line), line
    stats = json.loads(next(x for x in out.splitlines() if x.startswith("stats: "))[7:])
    assert stats["extra"]["latency"]["latency_s"] is None


def test_a_second_reader_of_a_serial_port_is_refused(tmp_path):
    """The port is opened exclusively: a second stream, or a second recording, on the same
    port is refused naming the port (two readers would each get part of the bytes)."""
    with FakeFramedDevice(3, 500.0) as dev, \
            stream_for_url(f"frame://{dev.path}?joints=3") as first:
        first.read()
        with pytest.raises(PortBusyError, match=rf"^port {re.escape(dev.path)} is in use by "
                                                rf"another process"):
            stream_for_url(f"frame://{dev.path}?joints=3")
        log = tmp_path / "b.jsonl"
        with pytest.raises(PortBusyError, match="is in use by another process"):
            run(["bridge", "record", f"frame://{dev.path}?joints=3", "--seconds", "1",
                 "--out", str(log)])
        assert list(tmp_path.iterdir()) == []
        first.read()  # the first reader is undisturbed
    with FakeServoBus("dxl", [1]) as bus, \
            stream_for_url(f"dxl://{bus.path}?ids=1&timeout_s=0.01"), \
            pytest.raises(PortBusyError, match="is in use by another process"):
        stream_for_url(f"dxl://{bus.path}?ids=1&timeout_s=0.01")


def test_record_summary_counts_stale_samples_restarts_and_late_frames(tmp_path, capsys):
    log = tmp_path / "j.jsonl"
    f = FramedFaults(duplicate_every=10, swap_every=25)
    with FakeFramedDevice(3, 500.0, faults=f) as dev:
        assert run(["bridge", "record", f"frame://{dev.path}?joints=3", "--seconds", "0.5",
                    "--out", str(log)]) == 0
    out = capsys.readouterr().out
    st = read_joint_log(log).stats
    assert st["stale_samples"] >= 10 and st["late_frames"] >= 5
    assert (f"CRC errors, {st['stale_samples']} STALE samples (frames sent again), "
            f"{st['restarts']} restarts, {st['late_frames']} late frames (dropped), "
            f"{st['reconnects']} reconnects, 0 FAULT samples") in out, out


def test_ctrl_c_before_the_first_sample_keeps_nothing_and_says_so(tmp_path, capsys,
                                                                   monkeypatch):
    from firmware_bridge.stream import JointStream

    def interrupted(self, callback, **kw):  # Ctrl-C while waiting for the first sample
        raise KeyboardInterrupt

    monkeypatch.setattr(JointStream, "run", interrupted)
    log = tmp_path / "j.jsonl"
    assert run(["bridge", "record", "loop://?joints=2", "--seconds", "5",
                "--out", str(log)]) == 130
    assert list(tmp_path.iterdir()) == []  # neither OUT nor OUT.partial
    cap = capsys.readouterr()
    assert cap.out == ""
    assert cap.err == (f"syncedge bridge: interrupted by Ctrl-C before the first sample: "
                       f"nothing kept ({log} was not written)\n")


def _recorded_and_replayed(tmp_path, speed: float):
    """A 1 s recording of the fake framed device at 500 Hz, and that log replayed at
    ``speed`` and recorded again: the two logs read back."""
    first, again = tmp_path / "first.jsonl", tmp_path / "again.jsonl"
    with FakeFramedDevice(3, 500.0) as dev:
        assert run(["bridge", "record", f"frame://{dev.path}?joints=3", "--seconds", "1",
                    "--out", str(first)]) == 0
    assert run(["bridge", "record", f"replay://{first}?speed={speed:g}", "--seconds", "5",
                "--out", str(again)]) == 0
    return read_joint_log(first), read_joint_log(again)


def test_a_replayed_framed_log_keeps_its_pings_and_its_latency_method(tmp_path, capsys):
    from edge.timebase import capture_stamps

    a, b = _recorded_and_replayed(tmp_path, speed=1)
    pings_a = [len(x.pings) for x in a.samples]
    assert sum(pings_a) >= 20
    assert [len(x.pings) for x in b.samples] == pings_a
    assert capture_stamps(b.samples).method == capture_stamps(a.samples).method \
        == "ping round trip"
    # the host stamps of the pings move with the receipt stamps they ride on
    for x, y in zip(a.samples, b.samples, strict=True):
        for p, q in zip(x.pings, y.pings, strict=True):
            shift = y.receipt_ns - x.receipt_ns
            assert (q.send_ns - p.send_ns, q.receipt_ns - p.receipt_ns) == (shift, shift)
            assert (q.device_rx_ns, q.device_tx_ns) == (p.device_rx_ns, p.device_tx_ns)
    # stamped when each sample was due: the recording's receipt spacing and its figures,
    # not the replay's sleeps (the figures differed: 12.0 ms and -308 ppm replayed as
    # 12.8 ms and -420 ppm)
    rx_a = np.array([x.receipt_ns for x in a.samples])
    rx_b = np.array([x.receipt_ns for x in b.samples])
    same = np.diff(rx_b) == np.diff(rx_a)
    assert same.mean() > 0.95, same.mean()
    est_a, est_b = capture_stamps(a.samples), capture_stamps(b.samples)
    assert est_b.detail["drift ppm"] == pytest.approx(est_a.detail["drift ppm"], abs=2)


def test_a_replay_at_another_speed_reads_the_device_clocks_own_drift(tmp_path):
    """At speed 2 the receipts come twice as fast; the device stamps (of samples and pings)
    run twice as fast with them, so the drift read is the device's, not -500 000 ppm."""
    from edge.timebase import capture_stamps

    a, b = _recorded_and_replayed(tmp_path, speed=2)
    span = lambda log: log.samples[-1].receipt_ns - log.samples[0].receipt_ns  # noqa: E731
    assert span(b) == pytest.approx(span(a) / 2, rel=0.05)
    assert abs(capture_stamps(b.samples).detail["drift ppm"]
               - capture_stamps(a.samples).detail["drift ppm"]) < 50


def test_a_device_that_pauses_is_named_in_the_summary(tmp_path, capsys):
    """A device that stops sending for 0.4 s and numbers on (nothing lost, so no gap and
    no lost cycle) read "0 gaps, 0 lost cycles" and nothing else; the summary names the
    longest silence."""
    log = tmp_path / "p.jsonl"
    f = FramedFaults(pause_at=300, pause_s=0.4)
    with FakeFramedDevice(3, 500.0, faults=f) as dev:
        assert run(["bridge", "record", f"frame://{dev.path}?joints=3&read_timeout_s=2",
                    "--seconds", "1.2", "--out", str(log)]) == 0
    out = capsys.readouterr().out
    said = re.search(r"0 gaps, 0 lost cycles, .*, longest silence ([0-9.]+) s", out)
    assert said and float(said.group(1)) == pytest.approx(0.4, abs=0.05), out
    clean = tmp_path / "c.jsonl"
    with FakeFramedDevice(3, 500.0) as dev:
        assert run(["bridge", "record", f"frame://{dev.path}?joints=3", "--seconds", "0.5",
                    "--out", str(clean)]) == 0
    assert "longest silence" not in capsys.readouterr().out
