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
