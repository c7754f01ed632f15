"""``sts://``: Feetech STS/SCS servos through the unmodified ``scservo_sdk``
(``feetech-servo-sdk``), with the servos' sign-magnitude encodings decoded.

URL form: ``sts:///dev/ttyUSB0?baud=1000000&ids=1-6&timeout_s=0.02&zero_tick=2048``.
Each cycle sync-reads Present Position .. Present Temperature (addresses 56..63).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from .servo_bus import ServoBusStream
from .stream import Reading
from .url import Options

__all__ = ["STS_TABLE", "FeetechStream", "sign_magnitude"]

# Memory table of the STS series (SRAM feedback area), little-endian words.
# Source: Feetech "STS/SMS series memory table" (FT-SMS-STS emanual; STS3215 user manual).
# name: (address, size in bytes, sign bit or None, unit)
STS_TABLE = {
    "model_number": (3, 2, None, "-"),            # STS3215 reads 777
    "id": (5, 1, None, "-"),
    "torque_enable": (40, 1, None, "-"),
    "present_position": (56, 2, 15, "1 step = 360/4096 deg"),
    "present_speed": (58, 2, 15, "1 step/s"),
    "present_load": (60, 2, 10, "0.1 % of stall torque"),
    "present_voltage": (62, 1, None, "0.1 V"),
    "present_temperature": (63, 1, None, "1 degC"),
}

READ_START = 56
READ_LENGTH = 8
STEPS_PER_REV = 4096
# STS3215 (7.4 V version): stall torque 19.5 kg*cm = 1.91 N*m (Feetech STS3215 datasheet).
STALL_TORQUE_NM = 19.5 * 0.0980665
# Hardware error bits of the status packet that mean a fault (voltage, angle, overheat,
# overcurrent, overload): Feetech SCS protocol manual, "status packet" error byte.
FAULT_BITS = 0x01 | 0x02 | 0x04 | 0x08 | 0x20


def sign_magnitude(raw: npt.ArrayLike, sign_bit: int) -> int | np.ndarray:
    """Decode sign-magnitude integers: bit ``sign_bit`` is the sign, lower bits the magnitude.

    ``sign_magnitude(0x8005, 15) == -5``. Accepts an int or an integer array (any shape).
    """
    raw = np.asarray(raw, dtype=np.int64)
    mag = raw & ((1 << sign_bit) - 1)
    out = np.where(raw & (1 << sign_bit), -mag, mag)
    return int(out) if out.ndim == 0 else out


def _field(data: np.ndarray, name: str) -> np.ndarray:
    addr, size, sign_bit, _ = STS_TABLE[name]
    off = addr - READ_START
    raw = data[:, off].astype(np.int64)
    if size == 2:
        raw = raw | (data[:, off + 1].astype(np.int64) << 8)
    return raw if sign_bit is None else np.asarray(sign_magnitude(raw, sign_bit))


class FeetechStream(ServoBusStream):
    """Feetech STS bus; positions rad (step ``zero_tick`` = 0 rad, unwrapped across the
    4095/0 boundary into turns), velocities rad/s, efforts
    N*m as load fraction times ``stall_torque_nm``. No device clock (stamps are -1)."""

    URL_FORM = ("sts:///dev/ttyUSB0?baud=1000000&ids=1-6&timeout_s=0.02&zero_tick=2048"
                "&stall_torque_nm=1.91&rate_hz=0&read_timeout_s=1.0&max_position_rad=1e6")
    SDK_MODULE = "scservo_sdk"
    SDK_LIBRARY = "feetech-servo-sdk"
    READ_LENGTH = READ_LENGTH
    STEPS_PER_REV = STEPS_PER_REV
    PACKET_HANDLER_ARG = 0  # little-endian words (STS)

    def __init__(self, url: str, port: str, ids: list[int], *, zero_tick: int = 2048,
                 stall_torque_nm: float = STALL_TORQUE_NM, **kw: Any):
        super().__init__(url, port, ids, zero_tick=zero_tick, **kw)
        self.stall_torque_nm = stall_torque_nm

    @classmethod
    def _bus_options(cls, opts: Options) -> dict[str, Any]:
        return dict(stall_torque_nm=opts.float("stall_torque_nm", STALL_TORQUE_NM, 0.0))

    def _sync_read_tx(self) -> int:
        ph, port = self._ph, self._port
        assert ph is not None and port is not None  # called by _cycle() only while open
        return ph.syncReadTx(port, READ_START, READ_LENGTH, list(self.ids),
                             len(self.ids))

    def _decode(self, data: np.ndarray, errors: np.ndarray, receipt_ns: int) -> Reading:
        pos = self._position_rad(_field(data, "present_position"))
        vel = _field(data, "present_speed") * (2 * math.pi / STEPS_PER_REV)
        eff = _field(data, "present_load") * (1e-3 * self.stall_torque_nm)
        bad = [sid for sid, e in zip(self.ids, errors, strict=True) if e & FAULT_BITS]
        fault = f"servo error bits on id {bad}" if bad else ""
        return Reading(pos.astype(np.float64), vel.astype(np.float64), eff.astype(np.float64),
                       receipt_ns, fault=fault)
