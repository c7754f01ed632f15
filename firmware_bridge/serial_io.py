"""Serial-port helpers shared by the serial transports (pyserial underneath).

pyserial's inter-byte timeout does not bound a read on POSIX, so the bridge never relies on it:
:func:`read_some` waits on the file descriptor with ``select`` up to the caller's own deadline
and returns whatever arrived.
"""

from __future__ import annotations

import errno
import os
import select
import time

import serial

from .errors import PortBusyError
from .sdk_types import SerialPort
from .stream import LinkLostError

__all__ = ["drain_until_quiet", "open_serial", "read_some"]


def open_serial(target: str, baudrate: int, write_timeout_s: float | None = None) -> SerialPort:
    """Open a device path or pyserial URL non-blocking (``timeout=0``), exclusively.

    On POSIX the port is locked (pyserial's ``exclusive=True``: ``flock``), so a second
    process, a second bridge included, cannot open it too and take part of its bytes.

    ``write_timeout_s``: how long a write may wait for room (None: until it is written; the
    framed stream bounds its pings, so that a device that never reads cannot stall it).

    Raises:
        PortBusyError: another process holds the port open exclusively.
        LinkLostError: the path does not exist or cannot be opened (unplugged).
    """
    if not target:
        raise LinkLostError("no serial port given (expected a path like /dev/ttyUSB0)")
    if "://" not in target and not os.path.exists(target):
        raise LinkLostError(f"{target}: no such device")
    lock = {"exclusive": True} if os.name == "posix" else {}
    try:
        ser: SerialPort = serial.serial_for_url(target, baudrate=baudrate, timeout=0,
                                                write_timeout=write_timeout_s, **lock)
    except (serial.SerialException, OSError) as exc:
        if getattr(exc, "errno", None) in (errno.EAGAIN, errno.EWOULDBLOCK):
            raise PortBusyError(
                f"port {target} is in use by another process (expected to open it "
                f"exclusively; another 'syncedge bridge' or a serial terminal holds it: "
                f"stop that process, see 'fuser {target}')") from exc
        raise LinkLostError(f"{target}: cannot open: {exc}") from exc
    try:  # bytes queued before the port was opened are old: never deliver them as fresh
        ser.reset_input_buffer()
    except (serial.SerialException, OSError, NotImplementedError):
        pass  # some URL handlers have no input buffer to reset
    return ser


def read_some(ser: SerialPort, timeout_s: float, limit: int = 4096) -> bytes:
    """Wait up to ``timeout_s`` for bytes; return what is available (maybe ``b""``).

    Raises:
        LinkLostError: the port reports an error (device unplugged).
    """
    try:
        n = ser.in_waiting
        if n == 0 and timeout_s > 0:
            try:
                fd = ser.fileno()
            except (AttributeError, serial.SerialException, OSError, ValueError):
                fd = None
            if fd is not None:
                select.select([fd], [], [], timeout_s)
            else:
                end = time.monotonic() + timeout_s
                while ser.in_waiting == 0 and time.monotonic() < end:
                    time.sleep(min(0.0002, timeout_s))
            n = ser.in_waiting
            if n == 0:
                # a readable fd with nothing waiting means the other end hung up: read to find out
                return ser.read(1) if fd is not None and _readable(fd) else b""
        return ser.read(min(max(n, 1), limit))
    except (serial.SerialException, OSError) as exc:
        raise LinkLostError(f"{getattr(ser, 'port', '?')}: read failed: {exc}") from exc


def _readable(fd: int) -> bool:
    r, _, _ = select.select([fd], [], [], 0)
    return bool(r)


def drain_until_quiet(ser: SerialPort, quiet_s: float, limit_s: float) -> int:
    """Discard input until the line stays quiet for ``quiet_s`` (at most ``limit_s``).

    Used after a failed cycle so that a late reply is never taken as the next one.
    Returns the number of bytes discarded. Raises :class:`LinkLostError` like :func:`read_some`.
    """
    end = time.monotonic() + limit_s
    dropped = 0
    try:
        ser.reset_input_buffer()
    except (serial.SerialException, OSError) as exc:
        raise LinkLostError(f"{getattr(ser, 'port', '?')}: flush failed: {exc}") from exc
    while time.monotonic() < end:
        data = read_some(ser, min(quiet_s, max(0.0, end - time.monotonic())))
        if not data:
            break
        dropped += len(data)
    return dropped
