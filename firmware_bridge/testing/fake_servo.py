"""A fake servo bus on a pseudo-terminal, speaking Dynamixel Protocol 2.0 or Feetech STS.

The bus runs in a child process (so the SDKs' polling loops do not share a GIL with it) and
publishes its port as a symlink, so that "unplugging" can remove the path and "plugging back"
can restore it with a fresh pty. Faults are injected per :class:`Faults`.

Register values change with every sync read so tests can tell replies apart: for servo ``i``
at sync read ``n`` (counted from 1), present position = ``2048 + 100*i + n % 500`` ticks,
velocity = ``10*i - 20``, current/load = ``-5*i`` (negative values in each protocol's own
encoding: two's complement for Dynamixel, sign-magnitude for Feetech).
"""

from __future__ import annotations

import os
import random
import select
import struct
import time
import tty
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from .child_device import ChildPtyDevice, Event
from .servo_packets import dxl_status, parse_dxl, parse_sts, sts_status

__all__ = ["CLOCK_STEP_NS", "FakeServoBus", "Faults", "clock_capture_ns"]

DXL_MODEL = 1020  # XM430-W350
CLOCK_STEP_NS = 100_000  # a clock servo's position advances one step per 100 us
STS_MODEL = 777  # STS3215


@dataclass
class Faults:
    """Fault injection of the fake bus (0 disables each one)."""

    corrupt_every: int = 0  # flip one byte of every N-th status packet
    drop_byte_prob: float = 0.0  # drop each status-packet byte with this probability
    garbage_prefix: bytes = b""  # sent just before the first reply
    late_every: int = 0  # every N-th sync read is answered after late_s
    late_s: float = 0.05
    partial_at: int = 0  # at sync read N: send half a reply, then go silent for silence_s
    silence_s: float = 1.0
    delay_s: float = 0.0  # every reply waits this long (a loop slower than nominal)
    unplug_at: int = 0  # at sync read N: vanish for unplug_s, then come back on a new pty
    unplug_s: float = 0.3
    # at sync read N: half a reply, then a noise byte every 10 ms for noise_s (the host
    # drains the line after the failed cycle), then vanish for unplug_s (mid-drain)
    vanish_in_drain_at: int = 0
    noise_s: float = 0.2
    unplug_at_ping: int = 0  # at the N-th ping: vanish for unplug_s, then come back
    alert_ids: tuple = ()  # ids whose status packets carry the hardware alert / error bit
    wire_baud: int = 0  # pace replies at this line rate (10 bits per byte); 0: no pacing
    seed: int = 0
    positions: dict = field(default_factory=dict)  # id -> fixed raw position register value
    # id -> ticks per sync read: the joint turns steadily, raw position (4090 + rate * n) mod
    # 4096, so it crosses the 4095/0 boundary of the single-turn encoder
    turning: dict = field(default_factory=dict)
    parked_ids: tuple = ()  # ids parked on the boundary: raw position 4095, 0, 4095, 0, ...
    # A USB-serial link: each direction takes link_delay_s (the servo latches its registers
    # link_delay_s after the request's last byte was on the line: at wire_baud where it is
    # set, at once otherwise), and replies are held by the adapter
    # until the next multiple of burst_period_s (its latency timer, 16 ms by default on FTDI)
    link_delay_s: float = 0.0
    burst_period_s: float = 0.0
    # ids whose present position is the capture time: raw = (monotonic us // 100) % 4096
    # (one turn in 409.6 ms: a reading taken with less than 409.6 ms of latency names its
    # capture time to within 100 us)
    clock_ids: tuple = ()


def clock_capture_ns(receipt_ns: npt.ArrayLike, position_rad: npt.ArrayLike) -> np.ndarray:
    """True capture times of a clock servo's samples (:attr:`Faults.clock_ids`).

    Its raw position is capture time // ``CLOCK_STEP_NS`` mod 4096, so each sample names its
    capture time modulo one turn (409.6 ms); the capture is the latest such time before the
    receipt (latency under one turn), taken at the middle of the 100 us step.

    Args:
        receipt_ns: int ``(N,)`` receipt stamps, ns; position_rad: float ``(N,)`` the clock
            servo's positions as the stream reports them (``zero_tick=0``, any turn).

    Returns:
        int64 ``(N,)`` capture times on the host's monotonic clock, ns.
    """
    rx = np.asarray(receipt_ns, dtype=np.int64)
    raw = np.round(np.asarray(position_rad, dtype=np.float64) / (2 * np.pi / 4096))
    step = raw.astype(np.int64) % 4096
    lag = (rx - step * CLOCK_STEP_NS) % (4096 * CLOCK_STEP_NS)  # receipt - step start
    return rx - lag + CLOCK_STEP_NS // 2


def _sign_mag(v: int, bit: int) -> int:
    return (-v) | (1 << bit) if v < 0 else v


class _Bus:
    def __init__(self, protocol: str, ids: Iterable[int], faults: Faults, link: str,
                 ready: Event | None):
        self.protocol, self.ids, self.f, self.link = protocol, list(ids), faults, link
        self.ready = ready
        self.rng = random.Random(faults.seed)
        self.n_sync = 0
        self.n_ping = 0
        self.n_packets = 0
        self.t0 = time.monotonic()
        self.garbage_sent = False
        self.t_read = time.monotonic()  # when the last bytes were read from the port

    def plug(self) -> None:
        self.master, slave = os.openpty()
        tty.setraw(slave)
        self.slave_name = os.ttyname(slave)
        os.close(slave)  # the client opens it by name
        tmp = self.link + ".new"
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(self.slave_name, tmp)
        os.replace(tmp, self.link)
        self.buf = bytearray()
        if self.ready is not None:  # the in-process pyserial handler has no child to wait for
            self.ready.set()

    def unplug(self) -> None:
        os.unlink(self.link)
        os.close(self.master)

    def regs(self, sid: int, now: float | None = None) -> bytes:
        n = self.n_sync
        pos = self.f.positions.get(sid, 2048 + 100 * sid + n % 500)
        if sid in self.f.clock_ids:
            t_ns = int((time.monotonic() if now is None else now) * 1e9)
            pos = t_ns // CLOCK_STEP_NS % 4096
        elif sid in self.f.turning:
            pos = (4090 + self.f.turning[sid] * n) % 4096
        elif sid in self.f.parked_ids:
            pos = 4095 if n % 2 else 0
        vel, cur = 10 * sid - 20, -5 * sid
        if self.protocol == "dxl":
            tick = int((time.monotonic() - self.t0) * 1000) % 32768
            mem = bytearray(256)
            struct.pack_into("<HBB", mem, 0, DXL_MODEL, 0, 0)
            mem[6], mem[7] = 46, sid
            struct.pack_into("<HBBhhii", mem, 120, tick, 0, 0, 0, cur, vel, pos)
            return bytes(mem)
        mem = bytearray(256)
        struct.pack_into("<H", mem, 3, STS_MODEL)
        mem[5] = sid
        struct.pack_into("<HHHBB", mem, 56, pos & 0xFFFF if pos >= 0 else _sign_mag(pos, 15),
                         _sign_mag(vel, 15), _sign_mag(cur, 10), 74, 30)
        return bytes(mem)

    def status(self, sid: int, params: bytes) -> bytes:
        err = 0
        if sid in self.f.alert_ids:
            err = 0x80 if self.protocol == "dxl" else 0x20
        pkt = (dxl_status if self.protocol == "dxl" else sts_status)(sid, err, params)
        self.n_packets += 1
        if self.f.corrupt_every and self.n_packets % self.f.corrupt_every == 0:
            b = bytearray(pkt)
            b[-3] ^= 0x5A
            pkt = bytes(b)
        if self.f.drop_byte_prob:
            pkt = bytes(x for x in pkt if self.rng.random() >= self.f.drop_byte_prob)
        return pkt

    def send(self, data: bytes) -> None:
        if self.f.wire_baud:
            time.sleep(len(data) * 10 / self.f.wire_baud)
        try:
            os.write(self.master, data)
        except OSError:
            pass

    def handle(self, sid: int, inst: int, params: bytes) -> bool:
        """Answer one instruction; returns False when the bus should unplug."""
        dxl = self.protocol == "dxl"
        if inst == 0x82:  # sync read
            if dxl:
                addr, length = struct.unpack_from("<HH", params)
                targets = list(params[4:])
            else:
                addr, length = params[0], params[1]
                targets = list(params[2:])
            self.n_sync += 1
            n = self.n_sync
            if self.f.unplug_at and n == self.f.unplug_at:
                return False
            # simulated link times are absolute (from when the request was read), so that a
            # late wake-up of this process delays delivery but never moves the capture time
            # the request was on its line (paced replies: at wire_baud), then on its way
            n_bytes = len(params) + (10 if dxl else 6)  # the instruction packet's bytes
            line = n_bytes * 10 / self.f.wire_baud if self.f.wire_baud else 0.0
            capture = self.t_read + line + self.f.link_delay_s
            _sleep_until(capture)
            reply = b"".join(self.status(t, self.regs(t, capture)[addr:addr + length])
                             for t in targets if t in self.ids)
            due = capture + self.f.link_delay_s  # the reply is on its way
            if self.f.burst_period_s:  # the adapter sends on its latency-timer grid
                p = self.f.burst_period_s
                due += p - due % p
            _sleep_until(due)
            if not self.garbage_sent and self.f.garbage_prefix:
                reply = self.f.garbage_prefix + reply
                self.garbage_sent = True
            if self.f.vanish_in_drain_at and n == self.f.vanish_in_drain_at:
                self.send(reply[:len(reply) // 2])
                end = time.monotonic() + self.f.noise_s
                while time.monotonic() < end:
                    time.sleep(0.01)
                    self.send(b"\x55")
                return False
            if self.f.partial_at and n == self.f.partial_at:
                self.send(reply[:len(reply) // 2])
                time.sleep(self.f.silence_s)
                self.buf.clear()
                return True
            if self.f.late_every and n % self.f.late_every == 0:
                time.sleep(self.f.late_s)
            elif self.f.delay_s:
                time.sleep(self.f.delay_s)
            self.send(reply)
        elif sid in self.ids:
            if inst == 0x01:  # ping
                self.n_ping += 1
                if self.f.unplug_at_ping and self.n_ping == self.f.unplug_at_ping:
                    return False
                body = struct.pack("<HB", DXL_MODEL, 46) if dxl else b""
                self.send(self.status(sid, body))
            elif inst == 0x02:  # read
                addr, length = struct.unpack_from("<HH", params) if dxl else (params[0], params[1])
                self.send(self.status(sid, self.regs(sid)[addr:addr + length]))
            elif inst == 0x03:  # write: acknowledge only
                self.send(self.status(sid, b""))
        return True

    def serve(self, stop: Event) -> None:
        parse = parse_dxl if self.protocol == "dxl" else parse_sts
        self.plug()
        while not stop.is_set():
            r, _, _ = select.select([self.master], [], [], 0.05)
            if not r:
                continue
            try:
                self.buf += os.read(self.master, 4096)
                self.t_read = time.monotonic()
            except OSError:
                continue
            while (pkt := parse(self.buf)) is not None:
                if not self.handle(*pkt):
                    self.unplug()
                    time.sleep(self.f.unplug_s)
                    self.plug()
                    break


def _sleep_until(t: float) -> None:
    delay = t - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def _serve(protocol: str, ids: list[int], faults: Faults, link: str, ready: Event,
           stop: Event) -> None:
    _Bus(protocol, ids, faults, link, ready).serve(stop)


class FakeServoBus(ChildPtyDevice):
    """Run a fake bus in a child process; use as a context manager.

    Args:
        protocol: ``"dxl"`` or ``"sts"``; ids: servo ids present; faults: :class:`Faults`.

    Attributes:
        path: the port path to open (a symlink to the current pty), set by :meth:`start`.
    """

    name = "fake servo bus"
    prefix = "fakebus-"

    def __init__(self, protocol: str, ids: Iterable[int], faults: Faults | None = None):
        if protocol not in ("dxl", "sts"):
            raise ValueError(f"protocol: expected 'dxl' or 'sts', found {protocol!r}")
        super().__init__()
        self.protocol, self.ids, self.faults = protocol, list(ids), faults or Faults()

    def _child(self) -> tuple[Callable[..., None], tuple[Any, ...]]:
        return _serve, (self.protocol, self.ids, self.faults)
