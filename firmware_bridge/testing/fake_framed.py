"""A fake controller that streams bridge frames on a pty from a child process.

Frame ``k`` (sequence ``k``, from 0) carries device time ``device_time_us(k)`` and positions
``0.001*k + j`` rad for joint ``j``; the device clock runs ``clock_ppm`` fast of the host's.
Faults mirror :class:`~firmware_bridge.testing.fake_servo.Faults`; see :class:`FramedFaults`.
"""

from __future__ import annotations

import os
import random
import time
import tty
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..frame_format import encode_frame
from .child_device import ChildPtyDevice, Event

__all__ = ["FakeFramedDevice", "FramedFaults"]


@dataclass
class FramedFaults:
    """Fault injection of the fake framed device (0 disables each one)."""

    garbage_prefix: bytes = b""  # line noise sent before the first frame's start delimiter
    drop_byte_prob: float = 0.0  # drop each byte with this probability
    corrupt_every: int = 0  # flip one byte of every N-th frame
    partial_at: int = 0  # at frame N: send half of it, then stay silent for silence_s
    silence_s: float = 1.0
    unplug_at: int = 0  # at frame N: vanish for unplug_s, then return on a new pty
    unplug_s: float = 0.3
    clock_ppm: float = 0.0  # device clock rate error
    # replies held by a USB-serial adapter until the next multiple of burst_period_s (its
    # latency timer): frames arrive in bursts
    burst_period_s: float = 0.0
    clock_joint: bool = False  # joint 0 position = the capture time, monotonic s mod 100
    seed: int = 0


def _run(joints: int, rate_hz: float, count: int, f: FramedFaults, link: str, ready: Event,
         stop: Event) -> None:
    rng = random.Random(f.seed)
    j = np.arange(joints, dtype=np.float64)

    def plug() -> int:
        master, slave = os.openpty()
        tty.setraw(slave)
        name = os.ttyname(slave)
        os.close(slave)
        tmp = link + ".new"
        os.symlink(name, tmp)
        os.replace(tmp, link)
        ready.set()
        return master

    master = plug()
    ready.wait()
    time.sleep(0.2)  # give the reader time to open the port (opening flushes input)
    period = 1.0 / rate_hz
    t0 = time.monotonic()
    k = 0
    pending = bytearray()  # frames the adapter holds until its next flush
    while not stop.is_set() and (count <= 0 or k < count):
        due = t0 + k * period
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        now = time.monotonic()
        t_us = int((now - t0) * 1e6 * (1 + f.clock_ppm * 1e-6))
        pos = 0.001 * k + j
        if f.clock_joint:
            pos[0] = now % 100.0
        data = bytearray(encode_frame(k, t_us, pos, -0.5 * j, 0.25 * j))
        if k == 0 and f.garbage_prefix:
            data[:0] = f.garbage_prefix + b"\x00"  # line noise, then the start delimiter
        if f.corrupt_every and k % f.corrupt_every == f.corrupt_every - 1:
            data[len(data) // 2] ^= 0x21
            if data[len(data) // 2] == 0:
                data[len(data) // 2] = 0x77
        if f.drop_byte_prob:
            data = bytearray(b for b in data if rng.random() >= f.drop_byte_prob)
        if f.unplug_at and k == f.unplug_at:
            os.unlink(link)
            os.close(master)
            time.sleep(f.unplug_s)
            master = plug()
            time.sleep(0.05)
        if f.partial_at and k == f.partial_at:
            os.write(master, bytes(data[: len(data) // 2]))
            time.sleep(f.silence_s)
            k += 1
            continue
        if f.burst_period_s:
            pending += data
            p = f.burst_period_s
            if int(now / p) != int((now + period) / p):  # a flush falls before the next frame
                time.sleep(max(0.0, p - now % p))
                data, pending = pending, bytearray()
            else:
                k += 1
                continue
        try:
            os.write(master, bytes(data))
        except OSError:
            pass
        k += 1
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
