"""A port handler for the vendor servo SDKs that keeps the bridge's own deadline.

Both ``dynamixel_sdk`` and ``scservo_sdk`` accept any object with the ``PortHandler`` methods.
The bridge subclasses the SDK's own class (the SDK itself is not modified) to:

* measure packet timeouts on the monotonic clock (the SDKs use ``time.time()``);
* replace the SDK's fixed 16 ms latency allowance with the stream's ``timeout_s``;
* wait for bytes with ``select`` up to that deadline instead of spinning on ``timeout=0``;
* flush stale input before every request (``scservo_sdk`` flushes only the output);
* stamp every request on the monotonic clock just before it is written (``write_ns``),
  the start of the round trip from which the latency is estimated, and log every read that
  returns bytes with the bytes received or waiting by then (``rx_log``), so that the end of
  the round trip is when the whole reply was first seen, before the SDK parses it
  (:func:`reply_complete_ns`);
* open pyserial URLs and report an unplugged device as :class:`~.stream.LinkLostError`.
"""

from __future__ import annotations

import time
from typing import Any

from .sdk_types import SerialPort, ServoPortHandler
from .serial_io import open_serial, read_some
from .stream import LinkLostError

__all__ = ["line_time_ns", "make_port_handler", "reply_complete_ns"]


def make_port_handler(base_cls: Any, port_name: str, baudrate: int,
                      timeout_s: float) -> ServoPortHandler:
    """Return an opened instance of a subclass of the SDK's ``base_cls`` (a PortHandler).

    Args:
        base_cls: ``dynamixel_sdk.PortHandler`` or ``scservo_sdk.PortHandler`` (untyped).
        port_name: device path or pyserial URL.
        baudrate: line rate, bit/s (used for the per-byte allowance).
        timeout_s: allowance on top of the bytes' wire time for one reply.

    Raises:
        LinkLostError: the port cannot be opened.
    """

    class BridgePortHandler(base_cls):  # the SDK class is untyped (Any)
        ser: SerialPort | None
        port_name: str
        baudrate: int
        is_open: bool
        is_using: bool
        tx_time_per_byte: float
        packet_start_time: float
        packet_timeout: float
        write_ns: int
        write_bytes: int
        rx_bytes: int
        rx_log: list[tuple[int, int]]

        def setupPort(self, cflag_baud: int) -> bool:  # noqa: N802 - SDK method name
            if self.is_open:
                self.closePort()
            self.ser = open_serial(self.port_name, self.baudrate)
            self.is_open = True
            self.ser.reset_input_buffer()
            self.tx_time_per_byte = 10_000.0 / self.baudrate  # ms per byte (10 bits)
            return True

        def closePort(self) -> None:  # noqa: N802
            if self.ser is not None:
                try:
                    self.ser.close()
                except OSError:
                    pass
            self.is_open = False

        def _port(self) -> SerialPort:
            if self.ser is None:
                raise LinkLostError(f"{self.port_name}: not open")
            return self.ser

        def clearPort(self) -> None:  # noqa: N802
            self._port().reset_input_buffer()

        def writePort(self, packet: bytes | list[int]) -> int | None:  # noqa: N802
            data = bytes(packet)
            self.write_ns, self.write_bytes, self.rx_bytes = time.monotonic_ns(), len(data), 0
            self.rx_log = []
            return self._port().write(data)

        def readPort(self, length: int) -> bytes:  # noqa: N802
            remaining_ms = self.packet_timeout - (self.getCurrentTime() - self.packet_start_time)
            ser = self._port()
            data = read_some(ser, max(0.0, remaining_ms / 1000.0), limit=length)
            if data:
                now = time.monotonic_ns()
                self.rx_bytes += len(data)
                try:
                    waiting = ser.in_waiting
                except (OSError, ValueError):
                    waiting = 0
                self.rx_log.append((now, self.rx_bytes + waiting))
            return data

        def setPacketTimeout(self, packet_length: int) -> None:  # noqa: N802
            self.packet_start_time = self.getCurrentTime()
            self.packet_timeout = self.tx_time_per_byte * packet_length + timeout_s * 1000.0

        def getCurrentTime(self) -> float:  # noqa: N802
            return time.monotonic_ns() / 1e6

    handler = BridgePortHandler(port_name)
    handler.write_ns, handler.write_bytes, handler.rx_bytes, handler.rx_log = -1, 0, 0, []
    handler.baudrate = baudrate
    handler.setupPort(baudrate)
    return handler


def line_time_ns(n_bytes: int, baudrate: int) -> int:
    """Time ``n_bytes`` take on a UART line at ``baudrate`` bit/s (10 bits a byte: start,
    8 data, stop), ns."""
    return (10 * n_bytes * 1_000_000_000) // baudrate


def reply_complete_ns(port: ServoPortHandler) -> int:
    """When the whole reply to the latest request was first seen by the host, ns.

    The first read after which the bytes read plus the bytes waiting in the driver reached
    all the bytes the reply turned out to have (``port.rx_bytes``); later reads only fetched
    bytes that had already arrived while the SDK parsed the ones before. -1 before any byte.
    """
    for t, seen in port.rx_log:
        if seen >= port.rx_bytes:
            return t
    return -1
