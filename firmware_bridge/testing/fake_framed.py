"""A fake controller that streams bridge frames on a pty from a child process.

Frame ``k`` (sequence ``k``, from 0) carries the device time of its capture (microseconds
since the stream started) and positions ``0.001*k + j`` rad for joint ``j``; the device clock
runs ``clock_ppm`` fast of the host's. The device answers the host's pings with pongs
(docs/bridge-frame-protocol.md) unless ``answer_pings`` is off (firmware from before pings,
which never reads what the host sends).

The link is modelled like a USB-serial adapter: every byte the device sends (frames and
pongs, in order) reaches the host ``link_delay_s`` later, and with ``burst_period_s`` the
adapter holds them until the next multiple of that period (its latency timer), so they
arrive in bursts; what the host sends reaches the device ``link_delay_s`` later, without
bursts. Faults mirror :class:`~firmware_bridge.testing.fake_servo.Faults`; see
:class:`FramedFaults`.
"""

from __future__ import annotations

import math
import os
import random
import select
import time
import tty
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..cobs import cobs_decode, cobs_encode
from ..frame_format import FrameDecoder, PingFrame, encode_frame, encode_pong
from .child_device import ChildPtyDevice, Event

__all__ = ["FakeFramedDevice", "FramedFaults"]


@dataclass
class FramedFaults:
    """Fault injection of the fake framed device (0 disables each one)."""

    garbage_prefix: bytes = b""  # line noise sent before the first frame's start delimiter
    drop_byte_prob: float = 0.0  # drop each byte with this probability
    corrupt_every: int = 0  # flip one byte of every N-th frame
    bad_crc_from: int = 0  # from frame N on: every frame's CRC-32 is wrong (COBS intact)
    version_from: int = 0  # from frame N on: frames of protocol version 2 (CRC correct)
    joint_field_from: int = 0  # from frame N on: the joint-count field says J + 1 (CRC correct)
    partial_at: int = 0  # at frame N: send half of it, then stay silent for silence_s
    silence_s: float = 1.0
    unplug_at: int = 0  # at frame N: vanish for unplug_s, then return on a new pty
    unplug_s: float = 0.3
    unplug_running: bool = False  # the device runs on while unplugged: frames numbered
    # meanwhile are lost (False: it waits, then sends them in a burst)
    clock_ppm: float = 0.0  # device clock rate error
    clock_jump_at: int = 0  # at frame N: the device clock steps by clock_jump_s (a reset, a
    clock_jump_s: float = 0.0  # time server's step; negative: back), frames and pongs alike
    # replies held by a USB-serial adapter until the next multiple of burst_period_s (its
    # latency timer): frames arrive in bursts
    burst_period_s: float = 0.0
    clock_joint: bool = False  # joint 0 position = the capture time, monotonic s mod 100
    link_delay_s: float = 0.0  # one-way delay of the link, each direction (never told the host)
    answer_pings: bool = True  # False: firmware from before pings (reads nothing, answers none)
    duplicate_every: int = 0  # send every N-th frame twice in a row
    swap_every: int = 0  # every N-th frame is held back and sent after the next one
    restart_at: int = 0  # at frame N the device starts again: numbering and clock from 0
    pause_at: int = 0  # before frame N the device stops sending for pause_s, then goes on
    pause_s: float = 0.0  # numbered without a gap (no frame is lost; its clock runs on)
    late_frame_at: int = 0  # frame N is held back and sent right after frame N + late_by
    late_by: int = 0
    seed: int = 0


class _Link:
    """The device-to-host direction: bytes queued at ``t`` are released at ``t + delay``,
    or with bursts at the first multiple of ``burst_s`` after that (the latency timer)."""

    def __init__(self, delay_s: float, burst_s: float):
        self.delay_s, self.burst_s = delay_s, burst_s
        self.queue: deque[tuple[float, bytes]] = deque()  # (release time, bytes), in order

    def push(self, t: float, data: bytes) -> None:
        due = t + self.delay_s
        if self.burst_s:
            due = (math.floor(due / self.burst_s) + 1) * self.burst_s
        self.queue.append((due, data))

    def next_due(self) -> float:
        return self.queue[0][0] if self.queue else math.inf

    def pop_due(self, now: float) -> bytes:
        out = bytearray()
        while self.queue and self.queue[0][0] <= now:
            out += self.queue.popleft()[1]
        return bytes(out)


def _rewrite(wire: bytes, *, version: int, joints: int, crc_ok: bool) -> bytes:
    """A wire frame with its version and joint-count bytes set and its CRC-32 recomputed
    (or, without ``crc_ok``, wrong in its lowest bit)."""
    raw = bytearray(cobs_decode(wire[:-1]))
    raw[0], raw[2] = version, joints
    body = bytes(raw[:-4])
    crc = zlib.crc32(body) ^ (0 if crc_ok else 1)
    return cobs_encode(body + crc.to_bytes(4, "little")) + b"\x00"


def _run(joints: int, rate_hz: float, count: int, f: FramedFaults, link_path: str,
         ready: Event, stop: Event) -> None:
    rng = random.Random(f.seed)
    j = np.arange(joints, dtype=np.float64)

    def plug() -> int:
        master, slave = os.openpty()
        tty.setraw(slave)
        name = os.ttyname(slave)
        os.close(slave)
        tmp = link_path + ".new"
        os.symlink(name, tmp)
        os.replace(tmp, link_path)
        ready.set()
        return master

    master = plug()
    ready.wait()
    time.sleep(0.2)  # give the reader time to open the port (opening flushes input)
    period = 1.0 / rate_hz
    t0 = time.monotonic()
    link = _Link(f.link_delay_s, f.burst_period_s)
    decoder = FrameDecoder()
    arriving: deque[tuple[float, PingFrame]] = deque()  # pings on their way to the device
    deaf_until = 0.0  # after EIO (no reader on the other side), stop listening a while

    step_us = [0]  # the clock's step so far (clock_jump_s once frame clock_jump_at is due)
    seq_base = [0]  # the frame whose sequence number is 0 (restart_at moves it)
    held: list[bytes] = []  # a frame held back by swap_every, sent after the next one
    held_late: list[bytes] = []  # the frame held back by late_frame_at

    def device_us(t: float) -> int:
        return int((t - t0) * 1e6 * (1 + f.clock_ppm * 1e-6)) + step_us[0]

    def send(data: bytes) -> None:
        try:
            os.write(master, data)
        except OSError:
            pass

    k = 0
    while not stop.is_set() and (count <= 0 or k < count):
        now = time.monotonic()
        while arriving and arriving[0][0] <= now:  # a ping reaches the device: answer it
            ping = arriving.popleft()[1]
            rx_us = device_us(now)
            link.push(now, encode_pong(ping.sequence, rx_us, max(rx_us, device_us(
                time.monotonic())), ping.host_time_us))
        data_out = link.pop_due(now)
        if data_out:
            send(data_out)
        due = t0 + k * period
        if now >= due and f.pause_at and k == f.pause_at and f.pause_s > 0:
            time.sleep(f.pause_s)  # the device's loop stalls; its clock runs on
            t0 += f.pause_s
            f.pause_at = 0
            continue
        if now >= due:
            if f.clock_jump_at and k == f.clock_jump_at:
                step_us[0] = int(round(f.clock_jump_s * 1e6))
            if f.restart_at and k == f.restart_at:  # numbering and clock begin again
                seq_base[0] = k
                step_us[0] = -int((now - t0) * 1e6 * (1 + f.clock_ppm * 1e-6))
            t_us = device_us(now)
            pos = 0.001 * k + j
            if f.clock_joint:
                pos[0] = now % 100.0
            data = bytearray(encode_frame(k - seq_base[0], t_us, pos, -0.5 * j, 0.25 * j))
            new_version = bool(f.version_from) and k >= f.version_from
            bad_field = bool(f.joint_field_from) and k >= f.joint_field_from
            bad_crc = bool(f.bad_crc_from) and k >= f.bad_crc_from
            if new_version or bad_field or bad_crc:
                data = bytearray(_rewrite(bytes(data), version=2 if new_version else 1,
                                          joints=joints + 1 if bad_field else joints,
                                          crc_ok=not bad_crc))
            if k == 0 and f.garbage_prefix:
                data[:0] = f.garbage_prefix + b"\x00"  # line noise, then the start delimiter
            if f.corrupt_every and k % f.corrupt_every == f.corrupt_every - 1:
                data[len(data) // 2] ^= 0x21
                if data[len(data) // 2] == 0:
                    data[len(data) // 2] = 0x77
            if f.drop_byte_prob:
                data = bytearray(b for b in data if rng.random() >= f.drop_byte_prob)
            if f.unplug_at and k == f.unplug_at:
                os.unlink(link_path)
                os.close(master)
                time.sleep(f.unplug_s)
                master = plug()
                link.queue.clear()
                arriving.clear()
                decoder.reset()
                time.sleep(0.05)
                if f.unplug_running:  # the frames numbered while unplugged never came
                    k = max(k, int((time.monotonic() - t0) / period))
                    t_us = device_us(time.monotonic())
                    data = bytearray(encode_frame(k - seq_base[0], t_us, 0.001 * k + j,
                                                  -0.5 * j, 0.25 * j))
            if f.partial_at and k == f.partial_at:
                send(link.pop_due(math.inf) + bytes(data[: len(data) // 2]))
                time.sleep(f.silence_s)
                k += 1
                continue
            if f.swap_every and k % f.swap_every == f.swap_every - 1:
                held.append(bytes(data))
                k += 1
                continue
            if f.late_frame_at and k == f.late_frame_at:
                held_late.append(bytes(data))
                k += 1
                continue
            link.push(now, bytes(data))
            if f.late_frame_at and k == f.late_frame_at + f.late_by:
                link.push(now, held_late.pop())
            if f.duplicate_every and k % f.duplicate_every == f.duplicate_every - 1:
                link.push(now, bytes(data))
            while held:
                link.push(now, held.pop())
            k += 1
            continue
        wake = min(due, link.next_due(), arriving[0][0] if arriving else math.inf)
        wait = max(0.0, wake - time.monotonic())
        if not f.answer_pings:  # firmware from before pings: never reads the line
            time.sleep(wait)
            continue
        if now < deaf_until:
            time.sleep(min(wait, deaf_until - now))
            continue
        readable, _, _ = select.select([master], [], [], wait)
        if readable:
            try:
                got = os.read(master, 4096)
            except OSError:  # EIO: the host side is closed; listen again a little later
                deaf_until = time.monotonic() + 0.01
                continue
            arrived = time.monotonic() + f.link_delay_s
            for m in decoder.feed(got):
                if isinstance(m, PingFrame):
                    arriving.append((arrived, m))
    while link.queue and not stop.is_set():  # the last frames still in the adapter
        time.sleep(max(0.0, link.next_due() - time.monotonic()))
        send(link.pop_due(time.monotonic()))
    stop.wait(2.0)


class FakeFramedDevice(ChildPtyDevice):
    """Run the fake device in a child process; use as a context manager.

    Args:
        joints: J; rate_hz: frame rate; count: frames to send (0: until stopped);
        faults: :class:`FramedFaults`.

    Attributes:
        path: the port path (a symlink to the current pty), set by :meth:`start`.
    """

    name = "fake framed device"
    prefix = "fakeframe-"

    def __init__(self, joints: int = 6, rate_hz: float = 1000.0, count: int = 0,
                 faults: FramedFaults | None = None):
        super().__init__()
        self.joints, self.rate_hz, self.count = joints, rate_hz, count
        self.faults = faults or FramedFaults()

    def _child(self) -> tuple[Callable[..., None], tuple[Any, ...]]:
        return _run, (self.joints, self.rate_hz, self.count, self.faults)
