"""``simbus://``: a servo bus behind a simulated USB-serial link, inside the calling process.

A pyserial URL handler (module name ``protocol_<scheme>``, found through
``serial.protocol_handler_packages``; a test adds ``"firmware_bridge.testing"`` to that list
explicitly). It answers sync reads and pings like :class:`~.fake_servo.FakeServoBus` (the
same register values and packets), but on simulated time instead of a child process on a
pty, so the link's timing is exactly what the URL says whatever load the machine carries:

* the servo latches its registers ``link_delay_s`` after the request's last byte left the
  host (written, plus 10 bits per byte at ``baudrate``);
* the reply takes ``link_delay_s`` plus its wire time (10 bits per byte at ``baudrate``);
* the adapter delivers it at the next multiple of ``burst_period_s`` on the monotonic clock
  (a USB-serial latency timer; 0: at once).

URL form: ``simbus://dxl?ids=1,2&link_delay_s=0.01&burst_period_s=0.016&clock_ids=1``
(``dxl`` or ``sts``; ``clock_ids``: servos whose position is their capture time, as in
:class:`~.fake_servo.Faults`).
"""

from __future__ import annotations

import struct
import time
from urllib.parse import parse_qs, urlparse

from serial import SerialBase, SerialException

from .fake_servo import Faults, _Bus
from .servo_packets import parse_dxl, parse_sts

__all__ = ["Serial"]

URL_FORM = "simbus://dxl?ids=1,2&link_delay_s=0.01&burst_period_s=0.016&clock_ids=1"


class Serial(SerialBase):
    """The simulated port (pyserial's ``SerialBase`` interface, non-blocking reads)."""

    def open(self) -> None:
        if self._port is None:
            raise SerialException(f"simbus: expected a URL like {URL_FORM}, found none")
        u = urlparse(self._port)
        q = {k: v[-1] for k, v in parse_qs(u.query).items()}
        known = {"ids", "link_delay_s", "burst_period_s", "clock_ids"}
        if u.scheme != "simbus" or u.netloc not in ("dxl", "sts") or set(q) - known:
            raise SerialException(f"simbus: expected a URL like {URL_FORM}, found "
                                  f"{self._port!r}")

        def ids(text: str) -> list[int]:
            return [int(x) for x in text.split(",") if x]

        self.protocol = u.netloc
        faults = Faults(link_delay_s=float(q.get("link_delay_s", 0)),
                        burst_period_s=float(q.get("burst_period_s", 0)),
                        clock_ids=tuple(ids(q.get("clock_ids", ""))))
        self._bus = _Bus(self.protocol, ids(q.get("ids", "1")), faults, "", None)
        self._rx = bytearray()  # bytes from the host, not yet parsed
        self._pending: list[tuple[float, bytes]] = []  # (delivery time, bytes) in order
        self._ready = bytearray()  # delivered, waiting to be read
        self.is_open = True

    def close(self) -> None:
        self.is_open = False

    def _reconfigure_port(self) -> None:
        pass

    def _deliver(self) -> None:
        now = time.monotonic()
        while self._pending and self._pending[0][0] <= now:
            self._ready += self._pending.pop(0)[1]

    @property
    def in_waiting(self) -> int:
        self._deliver()
        return len(self._ready)

    def read(self, size: int = 1) -> bytes:
        self._deliver()
        out = bytes(self._ready[:size])
        del self._ready[:size]
        return out

    def reset_input_buffer(self) -> None:
        self._deliver()
        self._ready.clear()

    def reset_output_buffer(self) -> None:
        pass

    def write(self, data: bytes | bytearray | memoryview) -> int:
        written = time.monotonic()
        self._rx += bytes(data)
        parse = parse_dxl if self.protocol == "dxl" else parse_sts
        bus, f = self._bus, self._bus.f
        while (pkt := parse(self._rx)) is not None:
            sid, inst, params = pkt
            capture = written + len(data) * 10 / (self.baudrate or 1_000_000) + f.link_delay_s
            if inst == 0x82:  # sync read
                if self.protocol == "dxl":
                    addr, length = struct.unpack_from("<HH", params)
                    targets = list(params[4:])
                else:
                    addr, length, targets = params[0], params[1], list(params[2:])
                bus.n_sync += 1
                reply = b"".join(bus.status(t, bus.regs(t, capture)[addr:addr + length])
                                 for t in targets if t in bus.ids)
            elif inst == 0x01 and sid in bus.ids:  # ping
                reply = bus.status(sid, struct.pack("<HB", 1020, 46)
                                   if self.protocol == "dxl" else b"")
            else:
                continue
            due = capture + f.link_delay_s + len(reply) * 10 / (self.baudrate or 1_000_000)
            if f.burst_period_s:
                due += f.burst_period_s - due % f.burst_period_s
            self._pending.append((due, reply))
        return len(data)
