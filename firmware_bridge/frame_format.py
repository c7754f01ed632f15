"""The bridge frames: wire layout, encoders and decoder (spec: docs/bridge-frame-protocol.md).

Three frame types share one framing (COBS, a trailing 0x00, a CRC-32 over the raw bytes) and
one header; byte 3 (reserved and 0 in the first version of the protocol) says the type. All
fields are little-endian. Source: this project's own specification,
docs/bridge-frame-protocol.md, version 1; CRC is CRC-32/ISO-HDLC (IEEE 802.3, the one
``zlib.crc32`` computes: reflected polynomial 0xEDB88320, init and final XOR 0xFFFFFFFF).

Joint sample, type 0, device to host, ``16 + 12*J + 4`` bytes:

=========  =========  ===========  ========================================================
offset     size       type         field
=========  =========  ===========  ========================================================
0          1          u8           version (1)
1          1          u8           flags (bit 0: device fault; other bits 0)
2          1          u8           joint count J (1..32)
3          1          u8           frame type (0: joint sample)
4          4          u32          sequence number (wraps at 2**32)
8          8          u64          device time, microseconds since device boot
16         4*J        f32[J]       position, rad
16+4J      4*J        f32[J]       velocity, rad/s
16+8J      4*J        f32[J]       effort, N*m
16+12J     4          u32          CRC-32 of bytes [0, 16+12J)
=========  =========  ===========  ========================================================

Ping, type 1, host to device, 20 bytes: version 1, flags 0, joint count 0, type 1, u32 ping
sequence at 4, u64 host time in microseconds at 8 (the host's own clock, echoed back), CRC-32
of bytes [0, 16) at 16.

Pong, type 2, device to host, 36 bytes: version 1, flags (bit 0: device fault), joint count
0, type 2, u32 the ping's sequence at 4, u64 device time at the ping's receipt (us) at 8,
u64 device time when the pong was queued for sending (us) at 16, u64 the ping's host time
echoed at 24, CRC-32 of bytes [0, 32) at 32.

On the wire each frame is ``COBS(frame) + b"\\x00"``. A receiver of the first version
(which knew only joint samples) rejects a pong whole (joint count 0), so pongs reach only
hosts that ping.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from .cobs import cobs_decode, cobs_encode
from .errors import FrameError

__all__ = ["FRAME_VERSION", "MAX_JOINTS", "PING_SIZE", "PONG_SIZE", "TYPE_PING", "TYPE_PONG",
           "TYPE_SAMPLE", "BridgeFrame", "FrameDecoder", "Message", "PingFrame", "PongFrame",
           "decode_frame", "decode_message", "encode_frame", "encode_ping", "encode_pong",
           "frame_size"]

FRAME_VERSION = 1
MAX_JOINTS = 32
FLAG_FAULT = 0x01
TYPE_SAMPLE, TYPE_PING, TYPE_PONG = 0, 1, 2
_TYPE_NAMES = {TYPE_SAMPLE: "joint sample", TYPE_PING: "ping", TYPE_PONG: "pong"}
# version, flags, J, type, sequence, device time us (a ping: host time us)
_HEADER = struct.Struct("<BBBBIQ")
HEADER_SIZE = _HEADER.size  # 16
CRC_SIZE = 4
_PONG_TAIL = struct.Struct("<QQ")  # device time at sending us, host time echoed us
PING_SIZE = HEADER_SIZE + CRC_SIZE  # 20
PONG_SIZE = HEADER_SIZE + _PONG_TAIL.size + CRC_SIZE  # 36
_U32, _U64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF


def frame_size(joints: int) -> int:
    """Size in bytes of a frame with ``joints`` joints, before COBS (16 + 12*J + 4)."""
    return HEADER_SIZE + 12 * joints + CRC_SIZE


@dataclass(frozen=True)
class BridgeFrame:
    """One decoded frame; arrays are float64 ``(J,)`` (widened from the wire's float32)."""

    sequence: int
    device_time_us: int
    position_rad: np.ndarray
    velocity_rad_s: np.ndarray
    effort_nm: np.ndarray
    fault: bool = False


@dataclass(frozen=True)
class PingFrame:
    """One ping (host to device): ``sequence`` u32, ``host_time_us`` u64 (the host's clock,
    microseconds; the device echoes it)."""

    sequence: int
    host_time_us: int


@dataclass(frozen=True)
class PongFrame:
    """One pong (device to host), the answer to the ping ``sequence``.

    Attributes:
        sequence: the ping's sequence number (u32).
        device_rx_us: device time when the ping was received, us (u64).
        device_tx_us: device time when the pong was queued for sending, us (u64, >= rx).
        host_time_us: the ping's host time, echoed, us (u64).
        fault: the device's fault flag.
    """

    sequence: int
    device_rx_us: int
    device_tx_us: int
    host_time_us: int
    fault: bool = False


#: What :func:`decode_message` and :meth:`FrameDecoder.feed` return.
Message: TypeAlias = BridgeFrame | PingFrame | PongFrame


def _finish(body: bytes) -> bytes:
    return cobs_encode(body + struct.pack("<I", zlib.crc32(body))) + b"\x00"


def _check_int(name: str, value: int, top: int) -> None:
    if not 0 <= value <= top:
        raise FrameError(f"{name}: expected an integer in 0..{top}, found {value}")


def encode_ping(sequence: int, host_time_us: int) -> bytes:
    """Encode one ping (20 bytes before COBS), COBS-stuffed and terminated with 0x00.

    Args:
        sequence: u32 (taken modulo 2**32); host_time_us: the host's clock, us, 0..2**64-1.

    Raises:
        FrameError: ``host_time_us`` out of range.
    """
    _check_int("ping host time us", host_time_us, _U64)
    return _finish(_HEADER.pack(FRAME_VERSION, 0, 0, TYPE_PING, sequence & _U32, host_time_us))


def encode_pong(sequence: int, device_rx_us: int, device_tx_us: int, host_time_us: int,
                fault: bool = False) -> bytes:
    """Encode one pong (36 bytes before COBS), COBS-stuffed and terminated with 0x00.

    Args:
        sequence: the ping's u32; device_rx_us, device_tx_us: device time at the ping's
            receipt and at the pong's sending, us (u64, tx >= rx); host_time_us: the ping's
            host time, echoed; fault: the device's fault flag.

    Raises:
        FrameError: a stamp out of range, or ``device_tx_us < device_rx_us``.
    """
    for name, v in (("device rx", device_rx_us), ("device tx", device_tx_us),
                    ("host time", host_time_us)):
        _check_int(f"pong {name} us", v, _U64)
    if device_tx_us < device_rx_us:
        raise FrameError(f"pong: expected device tx us >= device rx us {device_rx_us}, found "
                         f"{device_tx_us}")
    return _finish(_HEADER.pack(FRAME_VERSION, FLAG_FAULT if fault else 0, 0, TYPE_PONG,
                                sequence & _U32, device_rx_us)
                   + _PONG_TAIL.pack(device_tx_us, host_time_us))


def encode_frame(sequence: int, device_time_us: int, position_rad: npt.ArrayLike,
                 velocity_rad_s: npt.ArrayLike, effort_nm: npt.ArrayLike,
                 fault: bool = False) -> bytes:
    """Encode one frame, COBS-stuffed and terminated with 0x00.

    Args:
        sequence: u32; device_time_us: u64; the three arrays: ``(J,)`` float, J in 1..32.

    Raises:
        FrameError: J out of range or arrays of different lengths.
    """
    p = np.asarray(position_rad, dtype="<f4")
    v = np.asarray(velocity_rad_s, dtype="<f4")
    e = np.asarray(effort_nm, dtype="<f4")
    j = p.shape[0]
    if not (1 <= j <= MAX_JOINTS) or v.shape != (j,) or e.shape != (j,):
        raise FrameError(f"frame: expected three arrays of equal length 1..{MAX_JOINTS}, "
                         f"found {p.shape}, {v.shape}, {e.shape}")
    body = _HEADER.pack(FRAME_VERSION, FLAG_FAULT if fault else 0, j, TYPE_SAMPLE,
                        sequence & _U32, device_time_us) + p.tobytes() + v.tobytes() + e.tobytes()
    return _finish(body)


def decode_message(block: bytes) -> Message:
    """Decode one COBS block (the bytes between two 0x00 delimiters) of any frame type.

    Returns:
        :class:`BridgeFrame` (joint sample), :class:`PingFrame` or :class:`PongFrame`.

    Raises:
        FrameError: bad COBS; an unknown frame type; for a joint sample a joint count
            outside 1..MAX_JOINTS, for a ping or pong a joint count other than 0; a length
            other than the type's; CRC mismatch; or unknown version.
    """
    raw = cobs_decode(block)
    if len(raw) < HEADER_SIZE + CRC_SIZE:
        raise FrameError(f"frame: expected at least {HEADER_SIZE + CRC_SIZE} bytes, found "
                         f"{len(raw)}", "length")
    version, flags, j, kind, seq, t_us = _HEADER.unpack_from(raw)
    if kind == TYPE_SAMPLE:
        if not 1 <= j <= MAX_JOINTS:
            raise FrameError(f"frame: expected a joint count 1..{MAX_JOINTS}, found {j}",
                             "joint count")
        size = frame_size(j)
        if len(raw) != size:
            raise FrameError(f"frame: expected {size} bytes for {j} joints, found {len(raw)}",
                             "length")
    elif kind in (TYPE_PING, TYPE_PONG):
        name = _TYPE_NAMES[kind]
        size = PING_SIZE if kind == TYPE_PING else PONG_SIZE
        if len(raw) != size:
            raise FrameError(f"{name}: expected {size} bytes, found {len(raw)}", "length")
        if j != 0:
            raise FrameError(f"{name}: expected joint count 0, found {j}", "joint count")
    else:
        raise FrameError(f"frame type: expected 0 (joint sample), 1 (ping) or 2 (pong), "
                         f"found {kind}", "type")
    (crc,) = struct.unpack_from("<I", raw, len(raw) - CRC_SIZE)
    calc = zlib.crc32(raw[:-CRC_SIZE])
    if crc != calc:
        raise FrameError(f"frame: CRC-32 expected 0x{calc:08x}, found 0x{crc:08x}", "crc")
    if version != FRAME_VERSION:
        raise FrameError(f"frame: expected version {FRAME_VERSION}, found {version}",
                         "version")
    if kind == TYPE_PING:
        return PingFrame(seq, t_us)
    if kind == TYPE_PONG:
        tx_us, host_us = _PONG_TAIL.unpack_from(raw, HEADER_SIZE)
        return PongFrame(seq, t_us, tx_us, host_us, bool(flags & FLAG_FAULT))
    vals = np.frombuffer(raw, dtype="<f4", count=3 * j, offset=HEADER_SIZE).astype(np.float64)
    return BridgeFrame(seq, t_us, vals[:j], vals[j:2 * j], vals[2 * j:], bool(flags & FLAG_FAULT))


def decode_frame(block: bytes) -> BridgeFrame:
    """Decode one COBS block that must hold a joint sample frame (type 0).

    Raises:
        FrameError: as :func:`decode_message`, or a ping or pong.
    """
    m = decode_message(block)
    if not isinstance(m, BridgeFrame):
        kind = TYPE_PING if isinstance(m, PingFrame) else TYPE_PONG
        raise FrameError(f"frame: expected a joint sample frame (type 0), found a "
                         f"{_TYPE_NAMES[kind]} (type {kind})")
    return m


class FrameDecoder:
    """Incremental decoder: feed bytes, get frames of every type; bad blocks are counted,
    never raised.

    Attributes:
        crc_errors: blocks that failed to decode (COBS, type, length, CRC, version).
        resyncs: blocks discarded before the first good frame (joining mid-frame, line noise)
            or runaway blocks longer than any frame.
        rejected: every block that failed to decode, before the first good frame or after,
            by :attr:`~.errors.FrameError.reason` (``"crc"``, ``"version"``, ...).
        examples: the message of the last block rejected for each reason.
        last_error: the message of the last block that failed to decode.
    """

    def __init__(self, max_block: int = 2 * frame_size(MAX_JOINTS)):
        self._buf = bytearray()
        self._synced = False
        self.max_block = max_block
        self.crc_errors = 0
        self.resyncs = 0
        self.rejected: dict[str, int] = {}
        self.examples: dict[str, str] = {}
        self.last_error = ""

    def feed(self, data: bytes) -> list[Message]:
        """Add received bytes; return the frames they completed, in order
        (:class:`BridgeFrame`, :class:`PingFrame`, :class:`PongFrame`)."""
        self._buf += data
        frames: list[Message] = []
        while True:
            k = self._buf.find(0)
            if k < 0:
                if len(self._buf) > self.max_block:  # runaway block: drop it, wait for a delimiter
                    self.resyncs += 1
                    self._buf.clear()
                    self._synced = False
                break
            block = bytes(self._buf[:k])
            del self._buf[:k + 1]
            if not block:
                continue
            try:
                frames.append(decode_message(block))
                self._synced = True
            except FrameError as exc:
                self.rejected[exc.reason] = self.rejected.get(exc.reason, 0) + 1
                self.examples[exc.reason] = self.last_error = str(exc)
                if self._synced:
                    self.crc_errors += 1
                else:  # joining mid-stream or line noise before the first good frame
                    self.resyncs += 1
        return frames

    def reset(self) -> None:
        """Forget buffered bytes (after a reconnect); the next block may be a partial one."""
        self._buf.clear()
        self._synced = False
