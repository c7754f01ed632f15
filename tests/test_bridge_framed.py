"""Framed stream: COBS, frame layout golden bytes, the C reference encoder, and link faults."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import serial

import firmware_bridge
from edge.joints import Status
from edge.timebase import capture_stamps
from firmware_bridge.cobs import cobs_decode, cobs_encode
from firmware_bridge.errors import BridgeTimeoutError, FrameError
from firmware_bridge.frame_format import (
    PING_SIZE,
    PONG_SIZE,
    FrameDecoder,
    PingFrame,
    PongFrame,
    decode_frame,
    decode_message,
    encode_frame,
    encode_ping,
    encode_pong,
    frame_size,
)
from firmware_bridge.testing.fake_framed import FakeFramedDevice, FramedFaults
from firmware_bridge.url import stream_for_url

FIRMWARE = Path(firmware_bridge.__file__).parent / "firmware"

# Cheshire & Baker's examples plus the 254-byte block boundary.
COBS_VECTORS = [
    (b"", b"\x01"),
    (b"\x00", b"\x01\x01"),
    (b"\x00\x00", b"\x01\x01\x01"),
    (b"\x11\x22\x00\x33", b"\x03\x11\x22\x02\x33"),
    (b"\x11\x22\x33\x44", b"\x05\x11\x22\x33\x44"),
    (b"\x11\x00\x00\x00", b"\x02\x11\x01\x01\x01"),
    (bytes(range(1, 255)), b"\xff" + bytes(range(1, 255)) + b"\x01"),
]

# One frame, byte for byte: seq 0x01020304, t = 0x1122334455 us, J = 1, pos 1.0, vel -2.0,
# eff 0.5, no fault (raw layout in docs/bridge-frame-protocol.md, then COBS and 0x00).
GOLDEN_FRAME = bytes.fromhex("020102010a0403020155443322110101010103803f010102c00101063f650c28f100")


@pytest.mark.parametrize(("raw", "enc"), COBS_VECTORS)
def test_bridge_framed_cobs_vectors(raw, enc):
    assert cobs_encode(raw) == enc
    assert cobs_decode(enc) == raw


def test_bridge_framed_cobs_rejects_bad_blocks():
    with pytest.raises(FrameError, match="expected no 0x00 byte"):
        cobs_decode(b"\x03\x11\x00")
    with pytest.raises(FrameError, match="expected 4 more bytes, found 1"):
        cobs_decode(b"\x05\x11")


def test_bridge_framed_golden_bytes():
    wire = encode_frame(0x01020304, 0x1122334455, [1.0], [-2.0], [0.5])
    assert wire == GOLDEN_FRAME
    raw = cobs_decode(wire[:-1])
    assert raw[:16].hex() == "01000100" "04030201" "5544332211000000"
    assert raw[16:28].hex() == "0000803f" "000000c0" "0000003f"
    assert len(raw) == frame_size(1) == 32
    f = decode_frame(wire[:-1])
    assert (f.sequence, f.device_time_us, f.fault) == (0x01020304, 0x1122334455, False)
    assert list(f.position_rad) == [1.0] and list(f.velocity_rad_s) == [-2.0]


def test_bridge_framed_crc_and_length_errors():
    wire = bytearray(encode_frame(7, 9, [1.0, 2.0], [0, 0], [0, 0]))
    raw = bytearray(cobs_decode(bytes(wire[:-1])))
    raw[20] ^= 1
    with pytest.raises(FrameError, match="CRC-32 expected"):
        decode_frame(cobs_encode(bytes(raw)))
    with pytest.raises(FrameError, match="expected 44 bytes for 2 joints, found 43"):
        decode_frame(cobs_encode(bytes(raw[:-1])))
    # a joint count outside 1..32 is refused even with a consistent length and CRC
    for j in (0, 33):
        body = bytearray(16 + 12 * j)
        body[0], body[2] = 1, j  # version 1, J
        framed = bytes(body) + zlib.crc32(bytes(body)).to_bytes(4, "little")
        with pytest.raises(FrameError, match=f"joint count 1..32, found {j}"):
            decode_frame(cobs_encode(framed))


def _with_crc(body: bytes) -> bytes:
    """``body`` + its CRC-32, COBS-stuffed (no delimiter): a block whose CRC is right."""
    return cobs_encode(body + zlib.crc32(body).to_bytes(4, "little"))


def test_bridge_framed_ping_and_pong_layout():
    # the frame type is byte 3 (0 in every joint sample frame): 1 ping, 2 pong; J byte 0
    ping = encode_ping(0x01020304, 0x1122334455)
    raw = cobs_decode(ping[:-1])
    assert ping[-1] == 0 and len(raw) == PING_SIZE == 20
    assert raw[:16].hex() == "01000001" "04030201" "5544332211000000"
    assert raw[16:] == zlib.crc32(raw[:16]).to_bytes(4, "little")
    assert decode_message(ping[:-1]) == PingFrame(0x01020304, 0x1122334455)
    pong = encode_pong(7, 1_000_001, 1_000_050, 0x1122334455, fault=True)
    raw = cobs_decode(pong[:-1])
    assert len(raw) == PONG_SIZE == 36
    assert raw[:32].hex() == ("01010002" "07000000" "41420f0000000000" "72420f0000000000"
                              "5544332211000000")
    assert decode_message(pong[:-1]) == PongFrame(7, 1_000_001, 1_000_050, 0x1122334455, True)
    # joint sample frames keep their layout (type 0) and still decode with decode_frame
    assert decode_frame(GOLDEN_FRAME[:-1]).sequence == 0x01020304
    # samples and pongs share the device's stream: the decoder returns both, in order
    dec = FrameDecoder()
    out = dec.feed(encode_frame(1, 2, [0.5], [0], [0]) + pong + encode_frame(2, 3, [0.5], [0], [0]))
    assert [type(m).__name__ for m in out] == ["BridgeFrame", "PongFrame", "BridgeFrame"]
    assert dec.crc_errors == 0


def test_bridge_framed_bad_or_short_pong_is_refused():
    pong = encode_pong(7, 1_000_001, 1_000_050, 99)
    raw = cobs_decode(pong[:-1])
    # short: the host stamp echo missing, with a CRC that matches what is there
    with pytest.raises(FrameError, match="pong: expected 36 bytes, found 28"):
        decode_message(_with_crc(raw[:24]))
    with pytest.raises(FrameError, match="pong: expected 36 bytes, found 30"):
        decode_message(cobs_encode(raw[:30]))  # cut off mid-stream
    with pytest.raises(FrameError, match="ping: expected 20 bytes, found 24"):
        decode_message(_with_crc(cobs_decode(encode_ping(1, 2)[:-1])[:16] + bytes(4)))
    bad = bytearray(raw)
    bad[9] ^= 0x10
    with pytest.raises(FrameError, match="CRC-32 expected"):
        decode_message(cobs_encode(bytes(bad)))
    body = bytearray(raw[:32])
    body[2] = 3  # a joint count in a pong
    with pytest.raises(FrameError, match="pong: expected joint count 0, found 3"):
        decode_message(_with_crc(bytes(body)))
    body = bytearray(raw[:32])
    body[3] = 9
    with pytest.raises(FrameError, match=r"frame type: expected 0 \(joint sample\), 1 \(ping\) "
                                         r"or 2 \(pong\), found 9"):
        decode_message(_with_crc(bytes(body)))
    with pytest.raises(FrameError, match=r"expected a joint sample frame \(type 0\), found a "
                                         r"pong \(type 2\)"):
        decode_frame(pong[:-1])
    # in a stream, a bad pong is counted like any corrupt frame and the samples go on
    dec = FrameDecoder()
    frames = dec.feed(encode_frame(1, 2, [0.5], [0], [0]) + cobs_encode(bytes(bad)) + b"\x00"
                      + encode_frame(2, 3, [0.5], [0], [0]))
    assert [f.sequence for f in frames] == [1, 2] and dec.crc_errors == 1
    assert "CRC-32" in dec.last_error


def _build_demo(tmp_path: Path) -> Path:
    exe = tmp_path / "bridge_frame_demo"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "-o", str(exe),
                    str(FIRMWARE / "bridge_frame.c"), str(FIRMWARE / "bridge_frame_demo.c")],
                   check=True)
    return exe


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_bridge_framed_c_firmware_answers_pings_like_python(tmp_path):
    """The C receiver (bf_rx_byte) decodes pings byte by byte, and bf_encode_pong answers
    them byte-exactly as the Python encoder; noise, a corrupt ping and a sample frame on
    the line are not answered. The demo stamps receipt 1000*seq + 5 us, answer + 4 us."""
    exe = _build_demo(tmp_path)
    pings = [encode_ping(k, 10**12 + 37 * k) for k in range(6)]
    raw = bytearray(cobs_decode(pings[2][:-1]))
    raw[6] ^= 0x01
    corrupt = cobs_encode(bytes(raw)) + b"\x00"
    line = (b"\x13\x37\x00" + pings[0] + pings[1] + corrupt + pings[3]
            + encode_frame(9, 9, [1.0], [0], [0]) + pings[4] + b"\x00\x00" + pings[5])
    out = subprocess.run([str(exe), "pong"], input=line, check=True, capture_output=True).stdout
    expected = b"".join(encode_pong(k, 1000 * k + 5, 1000 * k + 9, 10**12 + 37 * k)
                        for k in (0, 1, 3, 4, 5))
    assert out == expected


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_bridge_framed_c_reference_encoder_matches_python(tmp_path):
    exe = _build_demo(tmp_path)
    out = subprocess.run([str(exe), "50", "6"], check=True, capture_output=True).stdout
    dec = FrameDecoder()
    frames = dec.feed(out)
    assert len(frames) == 50 and dec.crc_errors == 0 and dec.resyncs == 0
    j = np.arange(6, dtype=np.float32)
    expected = b"".join(
        encode_frame(k, 1000 * k + 17, np.float32(0.001) * np.float32(k) + j, -0.5 * j, 0.25 * j,
                     fault=(k % 7 == 3)) for k in range(50))
    assert out == expected  # byte-exact
    assert [f.fault for f in frames[:8]] == [k % 7 == 3 for k in range(8)]


def test_bridge_framed_decoder_over_pyserial_loop():
    port = serial.serial_for_url("loop://", timeout=0.1)
    dec = FrameDecoder()
    wire = b"".join(encode_frame(k, k, [k, 0.0], [0, 0], [0, 0]) for k in range(20))
    port.write(b"\x13\x37garbage\x00" + wire[:100])
    frames = dec.feed(port.read(200))
    port.write(wire[100:])
    frames += dec.feed(port.read(len(wire)))
    assert [f.sequence for f in frames] == list(range(20))
    assert dec.resyncs == 1 and dec.crc_errors == 0


def open_framed(dev, **kw):
    return stream_for_url(f"frame://{dev.path}?joints=3&frame_timeout_s=0.02", **kw)


def test_bridge_framed_clean_link():
    with FakeFramedDevice(3, 1000.0) as dev, open_framed(dev) as s:
        samples = [s.read() for _ in range(100)]
    seqs = [x.device_counter for x in samples]
    assert seqs == list(range(seqs[0], seqs[0] + 100))
    assert all(x.status == Status.OK for x in samples)
    np.testing.assert_allclose(samples[-1].position_rad, 0.001 * seqs[-1] + np.arange(3),
                               atol=1e-6)


@pytest.mark.parametrize(("joints", "faults", "cause"), [
    (7, FramedFaults(), "expected 6 joints per frame (joints=6 in the URL), found 7"),
    (6, FramedFaults(version_from=1), "of an unsupported protocol version"),
])
def test_a_read_refused_by_configuration_leads_with_the_cause(joints, faults, cause):
    """Every frame refused (the URL's joint count, another protocol version): the error led
    with "expected a valid sample within 1.0 s (... raise read_timeout_s for a device that
    stalls longer)" and named the cause only at its end; it now leads with the cause."""
    with FakeFramedDevice(joints, 500.0, faults=faults) as dev, \
            stream_for_url(f"frame://{dev.path}?joints=6&frame_timeout_s=0.02",
                           read_timeout_s=0.3) as s:
        with pytest.raises(BridgeTimeoutError) as err:
            for _ in range(5):
                s.read()
    msg = str(err.value)
    assert msg.startswith(f"{dev.path}: ") and cause in msg.split(" (frame://")[0], msg
    assert "no valid sample within 0.3 s" in msg and "raise read_timeout_s" not in msg


def test_bridge_framed_partial_frame_then_silence_returns_within_deadline():
    with FakeFramedDevice(3, 500.0, faults=FramedFaults(partial_at=5, silence_s=1.5)) as dev, \
            open_framed(dev, read_timeout_s=0.25) as s:
        with pytest.raises(BridgeTimeoutError, match="expected a valid sample within 0.25 s"):
            t0 = 0.0
            for _ in range(100):
                t0 = time.monotonic()
                s.read()
        assert time.monotonic() - t0 < 0.4


def test_bridge_framed_garbage_prefix():
    f = FramedFaults(garbage_prefix=b"\x42\x13\x00\x99\x98\x97")
    with FakeFramedDevice(3, 500.0, faults=f) as dev, open_framed(dev) as s:
        samples = [s.read() for _ in range(10)]
    assert samples[0].device_counter == 0
    assert s.stats.resyncs == 2 and s.stats.gaps == 0 and s.stats.crc_errors == 0


def test_bridge_framed_dropped_bytes_resync_and_count_gaps():
    f = FramedFaults(drop_byte_prob=0.002, seed=3)
    with FakeFramedDevice(3, 1000.0, faults=f) as dev, open_framed(dev) as s:
        samples = [s.read() for _ in range(300)]
    seqs = np.array([x.device_counter for x in samples])
    assert np.all(np.diff(seqs) > 0)
    skipped = int(np.sum(np.diff(seqs) - 1))
    assert skipped > 0 and s.stats.crc_errors >= 1
    assert sum(x.missed for x in samples[1:]) == skipped
    assert all(x.status & Status.GAP for x, d in zip(samples[1:], np.diff(seqs), strict=True) if d > 1)


def test_bridge_framed_corrupt_every_n():
    with FakeFramedDevice(3, 1000.0, faults=FramedFaults(corrupt_every=10)) as dev, \
            open_framed(dev) as s:
        samples = [s.read() for _ in range(90)]
    # Frames k with k % 10 == 9 are corrupted: each is dropped and the next sample reports a
    # gap of exactly that frame. (The decoder may also count a corrupted frame read before the
    # first sample or after the last one, which no sample can show as a gap.)
    counters = [x.device_counter for x in samples]
    corrupted = [k for k in range(counters[0], counters[-1]) if k % 10 == 9]
    assert sorted(set(range(counters[0], counters[-1] + 1)) - set(counters)) == corrupted
    gaps = [x for x in samples if x.status & Status.GAP]
    assert [x.device_counter - 1 for x in gaps] == corrupted and len(corrupted) >= 8
    assert all(x.missed == 1 for x in gaps) and s.stats.gaps == len(corrupted)
    assert len(corrupted) <= s.stats.crc_errors <= len(corrupted) + 2


def test_bridge_framed_unplug_and_replug():
    f = FramedFaults(unplug_at=30, unplug_s=0.3)
    with FakeFramedDevice(3, 500.0, faults=f) as dev, open_framed(dev, read_timeout_s=2.0) as s:
        samples = [s.read() for _ in range(60)]
    assert s.stats.reconnects == 1
    assert any(x.status & Status.GAP for x in samples)


def test_frames_a_device_numbered_while_unplugged_are_counted_lost():
    """The cable pulled for 0.3 s while the device runs on (500 Hz: about 150 frames
    numbered and never delivered): the count said 1 lost cycle (the numbering started
    afresh after the reconnect); the frame after it goes on from the last number, its
    clock ahead by as many periods, so the numbering's count is kept."""
    f = FramedFaults(unplug_at=30, unplug_s=0.3, unplug_running=True)
    with FakeFramedDevice(3, 500.0, faults=f) as dev, open_framed(dev, read_timeout_s=2.0) as s:
        samples = [s.read() for _ in range(60)]
    assert s.stats.reconnects == 1
    (i,) = [k for k, x in enumerate(samples) if x.status & Status.GAP]
    after = samples[i]
    numbered = after.device_counter - samples[i - 1].device_counter - 1
    assert numbered >= 100  # the device ran on
    assert after.missed == numbered and s.stats.lost_cycles == numbered


def test_bridge_framed_pings_are_answered_and_carried_by_the_samples():
    f = FramedFaults(burst_period_s=0.016, link_delay_s=0.004)
    with FakeFramedDevice(3, 500.0, faults=f) as dev, \
            stream_for_url(f"frame://{dev.path}?joints=3&frame_timeout_s=0.2") as s:
        samples = [s.read() for _ in range(400)]  # 0.8 s
        ping = dict(s.stats.extra["ping"])
        info = s.describe()
    pings = [p for x in samples for p in x.pings]
    assert all(x.status == Status.OK for x in samples[1:]) and s.stats.crc_errors == 0
    assert len(pings) >= 10 and all(p.receipt_ns > p.send_ns for p in pings)
    assert ping["answered"] >= len(pings) and ping["unanswered"] == 0
    rtt = np.array([(p.receipt_ns - p.send_ns) - (p.device_tx_ns - p.device_rx_ns) for p in pings])
    assert rtt.min() >= 8e6 - 1e5  # twice the link delay at least
    assert "answering" in info["ping"]


def test_bridge_framed_old_device_without_pong_still_streams():
    """A device whose firmware predates pings never answers: the samples are unaffected,
    the host gives up after 8 unanswered pings and says so; the samples carry the
    unanswered pings so that the estimate can say why it fell back."""
    f = FramedFaults(burst_period_s=0.016, answer_pings=False)
    with FakeFramedDevice(3, 500.0, faults=f) as dev, \
            stream_for_url(f"frame://{dev.path}?joints=3&frame_timeout_s=0.2&ping_s=0.01"
                           "&ping_timeout_s=0.2") as s:
        samples = [s.read() for _ in range(500)]  # 1 s
        ping = dict(s.stats.extra["ping"])
        info = s.describe()
    seqs = [x.device_counter for x in samples]
    assert seqs == list(range(seqs[0], seqs[0] + 500)) and s.stats.crc_errors == 0
    assert (ping["sent"], ping["answered"], ping["unanswered"]) == (8, 0, 8)
    assert "answered none of 8 pings" in ping["state"] and info["ping"] == ping["state"]
    pings = [p for x in samples for p in x.pings]
    assert len(pings) == 8 and all(p.receipt_ns == -1 and p.device_rx_ns == -1 for p in pings)
    est = capture_stamps(samples)  # today's estimate, and the reason it is used
    assert est.method == "device clock (no pong)" and est.detail["pings unanswered"] == 8
    assert "by device clock (no pong)" in est.describe()


@pytest.mark.parametrize(("faults", "reason", "says"), [
    (FramedFaults(bad_crc_from=20), "crc",
     r"\d+ with a bad CRC-32: check the baud rate \(baud=921600 in the URL\) and the framing "
     r"\(COBS blocks ending in 0x00, CRC-32/ISO-HDLC; docs/bridge-frame-protocol\.md\) "
     r"\(last: frame: CRC-32 expected 0x[0-9a-f]{8}, found 0x[0-9a-f]{8}\)"),
    (FramedFaults(version_from=20), "version",
     r"\d+ of an unsupported protocol version: the bridge reads version 1; update the "
     r"device's firmware or the bridge \(last: frame: expected version 1, found 2\)"),
    (FramedFaults(joint_field_from=20), "length",
     r"\d+ whose length disagrees with their joint-count field \(16 \+ 12\*J \+ 4 bytes\): "
     r"check the firmware's frame layout, or bytes lost on the line \(baud=921600\) \(last: "
     r"frame: expected 68 bytes for 4 joints, found 56\)"),
])
def test_bridge_framed_frames_that_all_fail_name_why_they_were_rejected(faults, reason, says):
    """Frames keep coming but every one is rejected (from frame 20 on): the timeout says
    frames were received and rejected, how many, why and what to check, rather than that
    none came; the statistics count them by reason."""
    with FakeFramedDevice(3, 500.0, faults=faults) as dev, \
            stream_for_url(f"frame://{dev.path}?joints=3&read_timeout_s=0.3") as s:
        with pytest.raises(BridgeTimeoutError) as info:
            for _ in range(100):
                s.read()
        msg = str(info.value)
        assert re.search(r"expected a valid frame within 0\.05 s, found none; frames came but "
                         r"were rejected since the last valid one: " + says, msg), msg
        assert s.stats.samples <= 20
        n = int(re.search(r"rejected since the last valid one: (\d+)", msg)[1])
        assert s.stats.extra["rejected_frames"][reason] >= n >= 10


def test_bridge_framed_a_frame_sent_twice_is_stale_and_counted():
    with FakeFramedDevice(3, 500.0, faults=FramedFaults(duplicate_every=10)) as dev, \
            open_framed(dev) as s:
        samples = [s.read() for _ in range(60)]
    stale = [x for x in samples if x.status & Status.STALE]
    assert stale and all(x.device_counter % 10 == 9 for x in stale)
    # the repeat carries the counter of the sample before it, and nothing is counted missed
    for a, b in zip(samples, samples[1:], strict=False):
        if b.status & Status.STALE:
            assert b.device_counter == a.device_counter
    assert s.stats.stale_samples == len(stale) and s.stats.gaps == 0
    assert not any(x.status & Status.GAP for x in samples)


def test_bridge_framed_a_late_frame_is_dropped_without_a_false_gap():
    # frame 10k + 9 is sent after frame 10k + 10: 10k + 10 shows it missed, then 10k + 9
    # comes late (dropped, counted) and 10k + 11 follows with no gap
    with FakeFramedDevice(3, 500.0, faults=FramedFaults(swap_every=10)) as dev, \
            open_framed(dev) as s:
        samples = [s.read() for _ in range(60)]
    seqs = [x.device_counter for x in samples]
    assert all(b > a for a, b in zip(seqs, seqs[1:], strict=False))  # never older data
    gaps = [x for x in samples if x.status & Status.GAP]
    assert gaps and all(x.device_counter % 10 == 0 and x.missed == 1 for x in gaps)
    assert s.stats.late_frames >= len(gaps) - 1 >= 3
    assert not any(x.status & (Status.RESTART | Status.STALE) for x in samples)


def test_bridge_framed_a_device_that_starts_again_is_flagged_once():
    with FakeFramedDevice(3, 500.0, faults=FramedFaults(restart_at=40)) as dev, \
            open_framed(dev) as s:
        samples = [s.read() for _ in range(70)]
    flagged = [i for i, x in enumerate(samples) if x.status & Status.RESTART]
    assert len(flagged) == 1 and s.stats.restarts == 1
    first = samples[flagged[0]]
    assert first.device_counter == 0 and samples[flagged[0] - 1].device_counter >= 30
    after = samples[flagged[0] + 1:]
    assert [x.device_counter for x in after] == list(range(1, len(after) + 1))
    assert all(x.status == Status.OK for x in after) and s.stats.late_frames == 0


def test_bridge_framed_another_joint_count_is_its_own_rejection_not_a_crc_error():
    with FakeFramedDevice(4, 500.0) as dev, \
            stream_for_url(f"frame://{dev.path}?joints=3&frame_timeout_s=0.02&read_timeout_s=0.2"
                           ) as s:
        with pytest.raises(BridgeTimeoutError, match="set joints= to the device's count"):
            s.read()
        assert s.stats.crc_errors == 0
        assert s.stats.extra["rejected_frames"].get("joints", 0) >= 1
        assert "crc" not in s.stats.extra["rejected_frames"]


def test_bridge_framed_a_pause_without_lost_frames_counts_no_lost_cycles():
    # the device stops sending for 0.6 s (30 frame timeouts of 0.02 s) and goes on numbered
    # without a gap: nothing was lost, whatever the timeouts
    with FakeFramedDevice(3, 500.0, faults=FramedFaults(pause_at=100, pause_s=0.6)) as dev, \
            open_framed(dev) as s:
        samples = [s.read() for _ in range(200)]
    seqs = [x.device_counter for x in samples]
    assert seqs == list(range(seqs[0], seqs[0] + 200))
    assert s.stats.timeouts >= 10  # the pause was seen
    assert s.stats.lost_cycles == 0 and s.stats.gaps == 0
    assert all(x.missed == 0 and x.status == Status.OK for x in samples)


def test_bridge_framed_a_frame_20_behind_then_the_stream_going_on_is_late_not_a_restart():
    # frame 100 comes after frame 120 (20 behind, outside the reorder window of 8): frame 101
    # showed it missed; frame 100 is dropped as late, frame 121 follows with no gap
    with FakeFramedDevice(3, 500.0, faults=FramedFaults(late_frame_at=100, late_by=20)) as dev, \
            open_framed(dev) as s:
        samples = [s.read() for _ in range(160)]
    seqs = [x.device_counter for x in samples]
    assert [x.device_counter for x in samples if x.status & Status.RESTART] == []
    assert all(b == a + 1 for a, b in zip(seqs, seqs[1:], strict=False) if b != 101)
    assert 100 not in seqs and 121 in seqs and s.stats.restarts == 0
    gaps = [x for x in samples if x.status & Status.GAP]
    assert [(x.device_counter, x.missed) for x in gaps] == [(101, 1)]
    assert s.stats.late_frames == 1 and s.stats.lost_cycles == 1


def _loop_stream():
    """A framed stream on pyserial's loop:// port (what is written to it is read back), no
    pings: the test writes the frames."""
    s = stream_for_url("frame://loop://?joints=1&ping_s=0&frame_timeout_s=0.02&read_timeout_s=0.2")
    return s


def _period_us(k):
    return 1000 + 2000 * k  # frame k's device time at 500 Hz, us


@pytest.mark.parametrize(("then", "expected", "late", "restarts"), [
    # frame 10 (its own clock), then the stream goes on from frame 30: frame 10 came late
    ([(10, 10), (31, 31), (32, 32)], [(31, 0, Status.OK), (32, 0, Status.OK)], 1, 0),
    # frames 10 and 11 both late, then 31
    ([(10, 10), (11, 11), (31, 31)], [(31, 0, Status.OK)], 2, 0),
    # the numbering starts again at 10 and goes on from there, the clock running on
    ([(10, 31), (11, 32), (12, 33)],
     [(10, 0, Status.RESTART), (11, 0, Status.OK), (12, 0, Status.OK)], 0, 1),
    # numbering and clock both start again as at frame 10, and go on from there: late
    # frames or a restart, until 8 frames have gone on from it
    ([(k, k) for k in range(10, 20)],
     [(10, 0, Status.RESTART), (11, 0, Status.OK), (12, 0, Status.OK)], 0, 1),
])
def test_bridge_framed_a_step_back_outside_the_window_is_judged_by_the_frames_after_it(
        then, expected, late, restarts):
    # frames 0..30 every 2 ms, then a step back of 20 (outside the reorder window of 8) and
    # what follows it: (sequence number, device time of frame k)
    def wire(seq, k):
        return encode_frame(seq, _period_us(k), [float(seq)], [0.0], [0.0])

    with _loop_stream() as s:
        for k in range(31):  # one frame a write: loop:// models a write's line time
            s._ser.write(wire(k, k))
        first = [s.read() for _ in range(31)]
        for seq, k in then:
            s._ser.write(wire(seq, k))
        got = [s.read() for _ in expected]
    assert [x.device_counter for x in first] == list(range(31))
    assert [(x.device_counter, x.missed, x.status) for x in got] == expected
    assert (s.stats.late_frames, s.stats.restarts) == (late, restarts)
    assert s.stats.lost_cycles == 0


def test_a_device_that_restarted_while_unplugged_is_not_taken_to_have_numbered_on():
    """The device rebooted during a 6 s outage and has since been up longer than before
    it: its number and clock are both ahead of the last frame's, by the same number of
    periods, and its frames were counted as lost (274, no RESTART). Its clock's advance
    (0.5 s) does not match the host's time between the receipts (6 s): the numbering
    starts afresh."""
    from firmware_bridge.frame_format import BridgeFrame
    from firmware_bridge.framed import FramedStream

    period_us = 1818  # 550 Hz
    s = FramedStream("frame:///dev/null?joints=1", "/dev/null", joints=1)
    s._period_us = period_us
    z = np.zeros(1)
    s._before_reconnect = (1100, 1100 * period_us, 10**12)
    frame = BridgeFrame(1375, 1375 * period_us, z, z, z)
    assert s._numbered_on(frame, 10**12 + 6 * 10**9) is None
    # the same frame 0.5 s after the last one (the device ran on through a cable pull)
    assert s._numbered_on(frame, 10**12 + int(0.5 * 10**9)) == 274
