"""Joint logs read back: a damaged or malformed log is refused naming the file, the line,
the field, what was expected and what was found (``read_joint_log``, ``replay://``,
``bridge probe``/``record``)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from firmware_bridge.cli import register
from firmware_bridge.errors import BridgeError
from firmware_bridge.jointlog import read_joint_log
from firmware_bridge.url import stream_for_url


def run(argv):
    parser = argparse.ArgumentParser(prog="syncedge")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def recorded(tmp_path: Path, joints: int = 6) -> Path:
    """A log of about 40 samples of ``loop://`` with ``joints`` joints."""
    log = tmp_path / "r.jsonl"
    with stream_for_url(f"trace+loop://?joints={joints}&rate_hz=0&trace_path={log}") as s:
        for _ in range(40):
            s.read()
    return log


def rewrite_line(log: Path, lineno: int, edit) -> None:
    """Replace line ``lineno`` (1-based) of ``log`` with ``edit(obj)``'s JSON."""
    lines = log.read_text().splitlines()
    obj = json.loads(lines[lineno - 1])
    lines[lineno - 1] = json.dumps(edit(obj))
    log.write_text("\n".join(lines) + "\n")


def test_a_byte_that_is_not_utf8_is_refused_naming_file_line_and_column(tmp_path, capsys):
    log = recorded(tmp_path)
    data = bytearray(log.read_bytes())
    start = data.index(b"\n", data.index(b"\n", data.index(b"\n") + 1) + 1) + 1  # line 4
    data[start + 10] = 0xFF
    log.write_bytes(bytes(data))
    want = rf"^{re.escape(str(log))}:4: expected UTF-8 text, found byte 0xff at column 11 "
    with pytest.raises(BridgeError, match=want):
        read_joint_log(log)
    with pytest.raises(BridgeError, match=want):
        run(["bridge", "probe", f"replay://{log}?speed=0"])


def test_a_last_line_cut_short_is_left_out_and_said(tmp_path, caplog):
    """A log whose last line was cut (a copy truncated, power lost mid-write) could not be
    replayed at all ("expected a JSON object, found Expecting ',' delimiter"): its whole
    lines are read, and the cut is said; a damaged line with its newline is still refused."""
    import logging

    log = recorded(tmp_path)
    data = log.read_bytes()
    cut = data[:data.rindex(b"\n", 0, len(data) - 1) + 40]  # 39 bytes of the last line
    log.write_bytes(cut)
    whole = cut.count(b"\n")
    jl = read_joint_log(log)
    assert len(jl.samples) == whole - 1  # the header is a line too
    assert jl.cut_last_line.startswith(f"{log}:{whole + 1}: the last line is cut short (39 bytes")
    with caplog.at_level(logging.WARNING, logger="firmware_bridge.replay"):
        with stream_for_url(f"replay://{log}?speed=0") as s:
            assert s.read() is not None
    assert "the last line is cut short" in caplog.text
    log.write_bytes(cut + b"\n")  # the same line ended: damaged, not cut
    with pytest.raises(BridgeError, match="expected a JSON object"):
        read_joint_log(log)


def test_a_log_of_a_newer_schema_says_to_upgrade(tmp_path):
    log = recorded(tmp_path)
    rewrite_line(log, 1, lambda o: {**o, "schema": 2})
    with pytest.raises(BridgeError, match="written by a newer syncedge; this one reads schema 1: "
                                          "upgrade syncedge"):
        read_joint_log(log)


@pytest.mark.parametrize(("field", "edit", "says"), [
    ("position_rad", lambda o: {**o, "position_rad": o["position_rad"][:3]},
     re.escape("field 'position_rad': expected 6 values (one per joint of the header), "
               "found 3")),
    ("effort_nm", lambda o: {**o, "effort_nm": "none"},
     re.escape("field 'effort_nm': expected a list of 6 numbers (one per joint of the "
               "header), found 'none'")),
    ("velocity_rad_s", lambda o: {**o, "velocity_rad_s": [0.0] * 5 + ["x"]},
     r"field 'velocity_rad_s'\[5\]: expected a finite number or null \(unknown\), found 'x'"),
    ("receipt_ns", lambda o: {**o, "receipt_ns": 5},
     r"field 'receipt_ns': expected >= the previous sample's \d+ \(receipt stamps never step "
     r"back\), found 5"),
    ("receipt_ns", lambda o: {k: v for k, v in o.items() if k != "receipt_ns"},
     "field 'receipt_ns': expected an integer >= 0, found None"),
    # a status outside the flags replayed as OK (99) or as RESTART (-5)
    ("status", lambda o: {**o, "status": 99},
     r"field 'status': expected a combination of the flags GAP=1, STALE=2, FAULT=4, "
     r"RESTART=8 \(0: OK\), found 99"),
    ("status", lambda o: {**o, "status": -5},
     "field 'status': expected an integer >= 0, found -5"),
    ("device_counter", lambda o: {**o, "device_counter": "12"},
     re.escape("field 'device_counter': expected an integer >= -1 (-1: none), found '12'")),
    ("missed", lambda o: {**o, "missed": 1.5},
     "field 'missed': expected an integer >= 0, found 1.5"),
    ("fault", lambda o: {**o, "fault": 3}, "field 'fault': expected a string, found 3"),
    ("unknown", lambda o: {**o, "posiiton_rad": [0.0] * 6},
     "unknown field 'posiiton_rad': expected only "),
])
def test_a_malformed_sample_is_refused_naming_file_line_field_expected_and_found(
        tmp_path, field, edit, says):
    log = recorded(tmp_path)
    rewrite_line(log, 7, edit)
    want = rf"^{re.escape(str(log))}:7: {says}"
    with pytest.raises(BridgeError, match=want):
        read_joint_log(log)
    with pytest.raises(BridgeError, match=want):  # replay refuses it before the first sample
        stream_for_url(f"replay://{log}?speed=0")


def test_a_header_that_names_more_joints_than_the_samples_have_is_refused(tmp_path):
    log = recorded(tmp_path)
    rewrite_line(log, 1, lambda o: {**o, "joints": [*o["joints"], "joint6"]})
    with pytest.raises(BridgeError, match=rf"^{re.escape(str(log))}:2: field 'position_rad': "
                                          rf"expected 7 values \(one per joint of the header\), "
                                          rf"found 6"):
        read_joint_log(log)


def test_record_of_a_malformed_replay_copies_nothing(tmp_path):
    log = recorded(tmp_path)
    rewrite_line(log, 7, lambda o: {**o, "position_rad": o["position_rad"][:3]})
    out = tmp_path / "copy.jsonl"
    with pytest.raises(BridgeError, match=r":7: field 'position_rad': expected 6 values"):
        run(["bridge", "record", f"replay://{log}?speed=0", "--seconds", "1", "--out",
             str(out)])
    assert not out.exists() and not Path(str(out) + ".partial").exists()


def test_a_well_formed_log_with_unknown_values_still_reads(tmp_path):
    log = recorded(tmp_path, joints=2)
    rewrite_line(log, 3, lambda o: {**o, "effort_nm": [None, 0.5]})
    jl = read_joint_log(log)
    assert len(jl.samples) == 40 and jl.samples[1].effort_nm[1] == 0.5


def test_a_slow_replay_of_a_device_that_restarted_keeps_its_stamps_valid(tmp_path):
    """At speed 0.5 the device stamps run half as fast from the clock's origin; the
    origin was the log's first stamp, so after the device restarted (its clock from 1 ms
    again) the stamps went below 0 (read as "no device stamp", or a ping refused). Each
    restart is an origin of its own: the replay reads one clock jump, as the log does."""
    import numpy as np

    from edge.joints import JointSample, Status
    from edge.timebase import capture_stamps
    from firmware_bridge.jointlog import JointLogWriter

    log = tmp_path / "restart.jsonl"
    z = np.zeros(1)
    with JointLogWriter(str(log), "test://", ["j0"]) as w:
        for k in range(60):
            dev = (10_000 + 5 * k) * 1_000_000 if k < 30 else (1 + 5 * (k - 30)) * 1_000_000
            w.write(JointSample(z + k, z, z, 10**12 + k * 5_000_000, device_counter=k,
                                device_stamp_ns=dev,
                                status=Status.RESTART if k == 30 else Status.OK))
    with stream_for_url(f"replay://{log}?speed=0.5") as s:
        got = [s.read() for _ in range(60)]
    stamps = [x.device_stamp_ns for x in got]
    assert min(stamps) >= 0 and stamps[30] == 1_000_000
    assert stamps[31] - stamps[30] == 10_000_000  # 5 ms of the device's, replayed at half speed
    est = capture_stamps(got)
    assert est.method == "device clock" and [j.sample for j in est.jumps] == [30]
