"""The ``syncedge bridge`` subcommands, registered on a plain argparse parser."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from edge.joints import Status
from firmware_bridge.cli import register
from firmware_bridge.jointlog import read_joint_log
from firmware_bridge.testing.fake_servo import FakeServoBus
from firmware_bridge.url import stream_for_url


def run(argv):
    parser = argparse.ArgumentParser(prog="syncedge")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def test_bridge_cli_probe_servo_bus(capsys):
    with FakeServoBus("dxl", [1, 2, 3]) as bus:
        assert run(["bridge", "probe", f"dxl://{bus.path}?ids=1-3", "--samples", "2"]) == 0
    out = capsys.readouterr().out
    assert "models: {1: 1020, 2: 1020, 3: 1020}" in out and out.count("status=OK") == 2
    assert "latency: " in out and " ms by round trip (min RTT ms " in out


def test_bridge_cli_record_then_replay(tmp_path, capsys):
    log = tmp_path / "j.jsonl"
    assert run(["bridge", "record", "loop://?joints=3&rate_hz=400&drop_every=50",
                "--seconds", "0.3", "--out", str(log)]) == 0
    out = capsys.readouterr().out
    assert "samples to" in out
    assert re.search(r"latency: [-0-9.]+ ms by device clock \(drift ppm", out)  # loop stamps
    assert re.search(r"timing: \d+ slots scheduled at 400 Hz, \d+ empty; jitter", out)
    jl = read_joint_log(log)
    assert jl.joints == ["joint0", "joint1", "joint2"]
    assert jl.stats["samples"] == len(jl.samples) > 50 and jl.stats["gaps"] >= 1
    assert any(s.status & Status.GAP for s in jl.samples)
    with stream_for_url(f"replay://{log}?speed=0") as r:
        back = [r.read() for _ in range(len(jl.samples))]
    assert [b.device_counter for b in back] == [s.device_counter for s in jl.samples]
    # recorded gaps replay as gaps, with the same missed counts
    assert [(b.status & Status.GAP, b.missed) for b in back] == \
        [(s.status & Status.GAP, s.missed) for s in jl.samples]
    json.dumps(jl.stats)
    # a replay shorter than --seconds ends the recording there, with its statistics
    again = tmp_path / "again.jsonl"
    assert run(["bridge", "record", f"replay://{log}?speed=0", "--seconds", "30",
                "--out", str(again)]) == 0
    assert "end of the log after" in capsys.readouterr().out
    assert read_joint_log(again).stats["samples"] == len(jl.samples)


def test_bridge_cli_trace_wrapper_writes_a_log(tmp_path):
    log = tmp_path / "t.jsonl"
    with stream_for_url(f"trace+loop://?joints=2&rate_hz=0&trace_path={log}") as s:
        for _ in range(10):
            s.read()
    assert len(read_joint_log(log).samples) == 10


def test_bridge_cli_unknown_scheme_is_one_line_error():
    from firmware_bridge.errors import UrlError

    with pytest.raises(UrlError, match="expected one of the schemes .* found 'can'"):
        run(["bridge", "probe", "can://vcan0"])


def test_device_gone_and_timeouts_print_one_line_not_a_traceback(capsys) -> None:
    import argparse

    from edge.cli import run_parsed
    from firmware_bridge.errors import BridgeTimeoutError, DeviceGoneError

    for exc in (DeviceGoneError("frame:///dev/ttyACM0: the device vanished"),
                BridgeTimeoutError("frame:///dev/ttyACM0: no valid sample within 1 s")):
        def boom(args, exc=exc):
            raise exc
        assert run_parsed(argparse.Namespace(func=boom, command="bridge")) == 2
        err = capsys.readouterr().err
        assert err.startswith("syncedge bridge: error: frame:///dev/ttyACM0") and \
            len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("url, match", [
    ("frame:///dev/x?joints=6&frame_timeout_s=inf", "'frame_timeout_s' expected a finite number"),
    ("frame:///dev/x?joints=6&read_timeout_s=nan", "'read_timeout_s' expected a finite number"),
    ("frame:///dev/x?joints=0", r"'joints' expected an integer in \[1, 32\], found '0'"),
])
def test_url_options_must_be_finite_and_in_range(url: str, match: str) -> None:
    from firmware_bridge.errors import UrlError

    with pytest.raises(UrlError, match=match):
        run(["bridge", "probe", url])


def test_record_refuses_a_duration_of_zero_or_less_and_an_existing_log(tmp_path):
    from firmware_bridge.errors import BridgeError

    log = tmp_path / "j.jsonl"
    for seconds in ("0", "-1"):
        with pytest.raises(BridgeError, match=f"--seconds {seconds}: expected a duration above"):
            run(["bridge", "record", "loop://?joints=2", "--seconds", seconds, "--out", str(log)])
    assert not log.exists()
    log.write_text("not mine\n")
    with pytest.raises(BridgeError, match=r"j\.jsonl already exists; name another log"):
        run(["bridge", "record", "loop://?joints=2", "--seconds", "0.1", "--out", str(log)])
    assert log.read_text() == "not mine\n"  # never overwritten
    with pytest.raises(BridgeError, match="--samples 0: expected 1 or more"):
        run(["bridge", "probe", "loop://?joints=2", "--samples", "0"])


def test_record_makes_the_logs_folder_as_every_command_does(tmp_path):
    log = tmp_path / "new" / "deeper" / "j.jsonl"
    assert run(["bridge", "record", "loop://?joints=2", "--seconds", "0.1",
                "--out", str(log)]) == 0
    assert log.is_file() and not (log.parent / "j.jsonl.partial").exists()


@pytest.mark.parametrize(("how", "code"), [("Ctrl-C", 130), ("SIGTERM", 143)])
def test_ctrl_c_or_sigterm_stops_a_recording_and_keeps_a_closed_log(tmp_path, capsys,
                                                                    monkeypatch, how, code):
    """Ctrl-C stops a recording, and the log is closed with its statistics. SIGTERM (a
    service manager stopping ``bridge record``) killed the process and left only
    ``OUT.partial``; through ``syncedge`` it now does what Ctrl-C does, exits 143 and says
    which stopped it."""
    import os
    import signal

    from edge.cli import main
    from firmware_bridge.stream import JointStream

    real_run = JointStream.run

    def stopped(self, callback, **kw):  # stopped after 20 samples
        real_run(self, callback, max_samples=20)
        if how == "Ctrl-C":
            raise KeyboardInterrupt
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not stop the recording")

    monkeypatch.setattr(JointStream, "run", stopped)
    log = tmp_path / "j.jsonl"
    assert main(["bridge", "record", "loop://?joints=2&rate_hz=0", "--seconds", "30",
                 "--out", str(log)]) == code
    assert "wrote 20 samples" in capsys.readouterr().out
    jl = read_joint_log(log)
    assert len(jl.samples) == 20 and jl.stats["samples"] == 20  # closed with its statistics
    assert jl.stats["extra"]["recording"]["ended"] == f"interrupted by {how}"
    assert not (tmp_path / "j.jsonl.partial").exists()


def test_a_recording_is_written_beside_the_log_until_it_is_closed(tmp_path, monkeypatch):
    from firmware_bridge.stream import JointStream

    log = tmp_path / "j.jsonl"
    seen = []

    def look(self, callback, **kw):
        seen.append((log.exists(), (tmp_path / "j.jsonl.partial").exists()))
        return self.stats

    monkeypatch.setattr(JointStream, "run", look)
    assert run(["bridge", "record", "loop://?joints=2", "--seconds", "1", "--out", str(log)]) == 0
    assert seen == [(False, True)] and log.exists()


@pytest.mark.skipif(__import__("importlib").util.find_spec("mujoco") is None,
                    reason="the virtual cell renders with MuJoCo")
def test_the_virtual_cells_joint_stream_runs_without_a_camera(tmp_path):
    """With no camera on the cell to drive its simulated clock, ``sim://`` samples come at
    the device rate in real time (it used to wait for a camera forever)."""
    import threading

    log = tmp_path / "sim.jsonl"
    done: list[int] = []
    t = threading.Thread(target=lambda: done.append(run(
        ["bridge", "record", "sim://cell?split=test_all&seed=3&rate_hz=100&drop=0",
         "--seconds", "0.5", "--out", str(log)])), daemon=True)
    t.start()
    t.join(60)
    assert done == [0]
    n = len(read_joint_log(log).samples)
    assert 25 <= n <= 55  # 100 Hz for 0.5 s


def test_a_closed_stdout_ends_quietly(capsys):
    from edge.cli import run_parsed

    def piped(args):
        raise BrokenPipeError(32, "Broken pipe")

    assert run_parsed(argparse.Namespace(func=piped, command="bridge")) == 141
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("url, match", [
    ("frame:///dev/x?joints=6&frame_timeout_s=0",
     r"option 'frame_timeout_s' expected a number >= 0\.001, found '0'"),
    ("ethercat://eth0?cycle_us=100000000",
     r"option 'cycle_us' expected an integer in \[0, 100000\], found '100000000'"),
    ("ethercat://eth0?timeout_us=100000000",
     r"option 'timeout_us' expected an integer in \[1, 100000\], found '100000000'"),
    ("dxl:///dev/x?ids=7-1",
     r"^URL 'dxl:///dev/x\?ids=7-1': option ids='7-1': expected a list like '1-6' or "
     r"'1,2,5', found the range '7-1', which runs from high to low \(write '1-7'\); form: "
     r"dxl:///dev/ttyUSB0\?"),
    ("sts:///dev/x?ids=1,a",
     r"^URL 'sts:///dev/x\?ids=1,a': option ids='1,a': expected a list like '1-6' or "
     r"'1,2,5', found the part 'a', which is neither an id nor a low-high range; form: "),
])
def test_url_options_that_cannot_work_are_refused_at_parse_naming_the_url(url, match):
    from firmware_bridge.errors import UrlError

    with pytest.raises(UrlError, match=match):
        stream_for_url(url, do_not_open=True)


def test_record_through_a_trace_wrapper_reports_the_inner_streams_timing(tmp_path, capsys):
    from firmware_bridge.errors import BridgeError

    log, trace = tmp_path / "k.jsonl", tmp_path / "trace.jsonl"
    assert run(["bridge", "record", f"trace+loop://?joints=2&rate_hz=400&trace_path={trace}",
                "--seconds", "0.2", "--out", str(log)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"timing: \d+ slots scheduled at 400 Hz", out)
    assert len(read_joint_log(trace).samples) == len(read_joint_log(log).samples) > 10
    # an existing trace log is never overwritten
    before = trace.read_text()
    with pytest.raises(BridgeError, match=r"trace_path .*trace\.jsonl already exists"):
        run(["bridge", "record", f"trace+loop://?joints=2&trace_path={trace}",
             "--seconds", "0.1", "--out", str(tmp_path / "other.jsonl")])
    assert trace.read_text() == before and not (tmp_path / "other.jsonl").exists()
    # nor is the recording's own log its trace
    same = tmp_path / "same.jsonl"
    with pytest.raises(BridgeError, match="the trace needs a log of its own"):
        run(["bridge", "record", f"trace+loop://?joints=2&trace_path={same}",
             "--seconds", "0.1", "--out", str(same)])
    assert not same.exists() and not (tmp_path / "same.jsonl.partial").exists()


@pytest.mark.parametrize(("url", "says"), [
    ("sim://cell?split=nosuch", "unknown split 'nosuch'"),
    ("sim://cell?seed=x", "option 'seed' expected a whole number, found 'x'"),
])
def test_a_virtual_cell_url_naming_no_cell_quotes_the_url_and_its_form(url, says):
    from export.errors import CellError

    with pytest.raises(CellError, match=re.escape(f"URL {url!r} (form: sim://cell?split=")
                       + ".*" + re.escape(says)):
        run(["bridge", "probe", url])


@pytest.mark.parametrize("url", ["frame:///dev/x?joints=6&bogus=1",
                                 "dxl:///dev/x?ids=1&bogus=1", "sts:///dev/x?ids=1&bogus=1",
                                 "ethercat://eth0?bogus=1"])
def test_an_option_error_quotes_a_form_that_names_read_timeout_s(url: str) -> None:
    from firmware_bridge.errors import UrlError

    with pytest.raises(UrlError) as info:
        stream_for_url(url, do_not_open=True)
    assert "'bogus' expected a known option" in str(info.value)
    assert "&read_timeout_s=1" in str(info.value).split("form: ", 1)[1], str(info.value)


def test_a_stall_past_the_read_deadline_names_read_timeout_s_and_its_value():
    from firmware_bridge.errors import BridgeTimeoutError
    from firmware_bridge.testing.fake_framed import FakeFramedDevice, FramedFaults

    with FakeFramedDevice(3, 500.0, faults=FramedFaults(pause_at=20, pause_s=1.0)) as dev, \
            stream_for_url(f"frame://{dev.path}?joints=3&read_timeout_s=0.3") as s:
        with pytest.raises(BridgeTimeoutError) as info:
            for _ in range(100):
                s.read()
    msg = str(info.value)
    assert "expected a valid sample within 0.3 s (read_timeout_s=0.3 in the URL" in msg, msg
    assert "raise read_timeout_s for a device that stalls longer" in msg, msg
