"""``dxl://``: Dynamixel Protocol 2.0 servos through the unmodified ``dynamixel-sdk``.

URL form: ``dxl:///dev/ttyUSB0?baud=1000000&ids=1-6&timeout_s=0.02&zero_tick=2048``.
Each cycle sync-reads Realtime Tick .. Present Position (addresses 120..135) from every id.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .servo_bus import ServoBusStream
from .stream import Reading
from .url import Options

__all__ = ["DXL_X_TABLE", "DynamixelStream"]

# Control table of the X series (RAM area), Protocol 2.0.
# Source: ROBOTIS e-Manual, XM430-W350 "Control Table of RAM Area"
# (https://emanual.robotis.com/docs/en/dxl/x/xm430-w350/#control-table-of-ram-area).
# name: (address, size in bytes, signed, unit)
DXL_X_TABLE = {
    "model_number": (0, 2, False, "-"),            # EEPROM; XM430-W350 reads 1020
    "firmware_version": (6, 1, False, "-"),
    "id": (7, 1, False, "-"),
    "torque_enable": (64, 1, False, "-"),
    "hardware_error_status": (70, 1, False, "bits"),
    "realtime_tick": (120, 2, False, "1 ms, wraps at 32767"),
    "moving": (122, 1, False, "-"),
    "moving_status": (123, 1, False, "bits"),
    "present_pwm": (124, 2, True, "0.113 %"),
    "present_current": (126, 2, True, "2.69 mA"),
    "present_velocity": (128, 4, True, "0.229 rev/min"),
    "present_position": (132, 4, True, "1 tick = 360/4096 deg"),
}

READ_START = 120  # realtime_tick
READ_LENGTH = 16  # through present_position (132 + 4 - 120)

TICKS_PER_REV = 4096  # e-Manual: resolution 4096 pulse/rev
VELOCITY_UNIT_RPM = 0.229
CURRENT_UNIT_A = 2.69e-3
# XM430-W350 at 12 V: stall torque 4.1 N*m at 2.3 A (e-Manual specifications) -> 1.78 N*m/A.
TORQUE_CONSTANT_NM_PER_A = 4.1 / 2.3
TICK_WRAP_MS = 32768


def _field(data: np.ndarray, name: str) -> np.ndarray:
    """Decode one table field from ``(J, READ_LENGTH)`` uint8 bytes into int64 ``(J,)``."""
    addr, size, signed, _ = DXL_X_TABLE[name]
    off = addr - READ_START
    raw = data[:, off:off + size]
    dt = {(2, True): "<i2", (2, False): "<u2", (4, True): "<i4", (4, False): "<u4"}[(size, signed)]
    return np.ascontiguousarray(raw).view(dt)[:, 0].astype(np.int64)


class DynamixelStream(ServoBusStream):
    """Dynamixel X-series bus; positions rad (tick ``zero_tick`` = 0 rad, unwrapped across
    the 4095/0 boundary into turns), velocities rad/s,
    efforts N*m from present current times ``torque_constant_nm_per_a``.

    The device stamp is the first servo's Realtime Tick, unwrapped, in ns. A status packet with
    the alert bit (0x80) set marks the sample ``FAULT``.
    """

    URL_FORM = ("dxl:///dev/ttyUSB0?baud=1000000&ids=1-6&timeout_s=0.02&zero_tick=2048"
                "&torque_constant_nm_per_a=1.78&rate_hz=0&read_timeout_s=1.0&max_position_rad=1e6")
    SDK_MODULE = "dynamixel_sdk"
    SDK_LIBRARY = "dynamixel-sdk"
    READ_LENGTH = READ_LENGTH
    STEPS_PER_REV = TICKS_PER_REV
    PACKET_HANDLER_ARG = 2.0  # protocol 2.0

    def __init__(self, url: str, port: str, ids: list[int], *, zero_tick: int = 2048,
                 torque_constant_nm_per_a: float = TORQUE_CONSTANT_NM_PER_A, **kw: Any):
        super().__init__(url, port, ids, zero_tick=zero_tick, **kw)
        self.torque_constant_nm_per_a = torque_constant_nm_per_a
        self._tick_last: int | None = None
        self._tick_ms = 0

    @classmethod
    def _bus_options(cls, opts: Options) -> dict[str, Any]:
        return dict(torque_constant_nm_per_a=opts.float("torque_constant_nm_per_a",
                                                        TORQUE_CONSTANT_NM_PER_A, 0.0))

    def _sync_read_tx(self) -> int:
        ph, port = self._ph, self._port
        assert ph is not None and port is not None  # called by _cycle() only while open
        return ph.syncReadTx(port, READ_START, READ_LENGTH, list(self.ids),
                             len(self.ids), False)

    def _decode(self, data: np.ndarray, errors: np.ndarray, receipt_ns: int) -> Reading:
        pos = self._position_rad(_field(data, "present_position"))
        vel = _field(data, "present_velocity") * (VELOCITY_UNIT_RPM * 2 * math.pi / 60)
        eff = _field(data, "present_current") * (CURRENT_UNIT_A * self.torque_constant_nm_per_a)
        tick = int(_field(data[:1], "realtime_tick")[0])
        if self._tick_last is not None:
            self._tick_ms += (tick - self._tick_last) % TICK_WRAP_MS
        self._tick_last = tick
        alert = [sid for sid, e in zip(self.ids, errors, strict=True) if e & 0x80]
        fault = f"hardware alert on id {alert}" if alert else ""
        return Reading(pos, vel, eff.astype(np.float64), receipt_ns,
                       device_stamp_ns=self._tick_ms * 1_000_000, fault=fault)

    def _reconnect(self, deadline_ns: int, cause: Exception) -> None:
        self._tick_last = None
        super()._reconnect(deadline_ns, cause)
