"""A port handler for the vendor servo SDKs that keeps the bridge's own deadline.

Both ``dynamixel_sdk`` and ``scservo_sdk`` accept any object with the ``PortHandler`` methods.
The bridge subclasses the SDK's own class (the SDK itself is not modified) to:

* measure packet timeouts on the monotonic clock (the SDKs use ``time.time()``);
* replace the SDK's fixed 16 ms latency allowance with the stream's ``timeout_s``;
* wait for bytes with ``select`` up to that deadline instead of spinning on ``timeout=0``;
* flush stale input before every request (``scservo_sdk`` flushes only the output);
* stamp every request on the monotonic clock just before it is written (``write_ns``),
  the start of the round trip from which the latency is estimated;
* open pyserial URLs and report an unplugged device as :class:`~.stream.LinkLostError`.
"""

from __future__ import annotations

import time
from typing import Any

from .sdk_types import SerialPort, ServoPortHandler
from .serial_io import open_serial, read_some
from .stream import LinkLostError

__all__ = ["make_port_handler"]


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
            self.write_ns = time.monotonic_ns()
            return self._port().write(bytes(packet))

        def readPort(self, length: int) -> bytes:  # noqa: N802
            remaining_ms = self.packet_timeout - (self.getCurrentTime() - self.packet_start_time)
            return read_some(self._port(), max(0.0, remaining_ms / 1000.0), limit=length)

        def setPacketTimeout(self, packet_length: int) -> None:  # noqa: N802
            self.packet_start_time = self.getCurrentTime()
            self.packet_timeout = self.tx_time_per_byte * packet_length + timeout_s * 1000.0

        def getCurrentTime(self) -> float:  # noqa: N802
            return time.monotonic_ns() / 1e6

    handler = BridgePortHandler(port_name)
    handler.write_ns = -1
    handler.baudrate = baudrate
    handler.setupPort(baudrate)
    return handler
