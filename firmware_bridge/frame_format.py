"""The bridge frame: wire layout, encoder and decoder (spec: docs/bridge-frame-protocol.md).

Wire layout of one frame before COBS (all fields little-endian). Source: this project's own
specification, docs/bridge-frame-protocol.md, version 1; CRC is CRC-32/ISO-HDLC (IEEE 802.3,
the one ``zlib.crc32`` computes: reflected polynomial 0xEDB88320, init and final XOR 0xFFFFFFFF).

=========  =========  ===========  ========================================================
offset     size       type         field
=========  =========  ===========  ========================================================
0          1          u8           version (1)
1          1          u8           flags (bit 0: device fault; other bits 0)
2          1          u8           joint count J (1..32)
3          1          u8           reserved (0)
4          4          u32          sequence number (wraps at 2**32)
8          8          u64          device time, microseconds since device boot
16         4*J        f32[J]       position, rad
16+4J      4*J        f32[J]       velocity, rad/s
16+8J      4*J        f32[J]       effort, N*m
16+12J     4          u32          CRC-32 of bytes [0, 16+12J)
=========  =========  ===========  ========================================================

On the wire each frame is ``COBS(frame) + b"\\x00"``.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .cobs import cobs_decode, cobs_encode
from .errors import FrameError

__all__ = ["FRAME_VERSION", "MAX_JOINTS", "BridgeFrame", "FrameDecoder", "decode_frame",
           "encode_frame", "frame_size"]

FRAME_VERSION = 1
MAX_JOINTS = 32
FLAG_FAULT = 0x01
_HEADER = struct.Struct("<BBBBIQ")  # version, flags, J, reserved, sequence, device time us
HEADER_SIZE = _HEADER.size  # 16
CRC_SIZE = 4


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
    body = _HEADER.pack(FRAME_VERSION, FLAG_FAULT if fault else 0, j, 0,
                        sequence & 0xFFFFFFFF, device_time_us) + p.tobytes() + v.tobytes() + e.tobytes()
    return cobs_encode(body + struct.pack("<I", zlib.crc32(body))) + b"\x00"


def decode_frame(block: bytes) -> BridgeFrame:
    """Decode one COBS block (the bytes between two 0x00 delimiters).

    Raises:
        FrameError: bad COBS, a joint count outside 1..MAX_JOINTS, wrong length for the
            joint count, CRC mismatch, or unknown version.
    """
    raw = cobs_decode(block)
    if len(raw) < HEADER_SIZE + CRC_SIZE:
        raise FrameError(f"frame: expected at least {HEADER_SIZE + CRC_SIZE} bytes, found {len(raw)}")
    version, flags, j, _, seq, t_us = _HEADER.unpack_from(raw)
    if not 1 <= j <= MAX_JOINTS:
        raise FrameError(f"frame: expected a joint count 1..{MAX_JOINTS}, found {j}")
    if len(raw) != frame_size(j):
        raise FrameError(f"frame: expected {frame_size(j)} bytes for {j} joints, found {len(raw)}")
    (crc,) = struct.unpack_from("<I", raw, len(raw) - CRC_SIZE)
    calc = zlib.crc32(raw[:-CRC_SIZE])
    if crc != calc:
        raise FrameError(f"frame: CRC-32 expected 0x{calc:08x}, found 0x{crc:08x}")
    if version != FRAME_VERSION:
        raise FrameError(f"frame: expected version {FRAME_VERSION}, found {version}")
    vals = np.frombuffer(raw, dtype="<f4", count=3 * j, offset=HEADER_SIZE).astype(np.float64)
    return BridgeFrame(seq, t_us, vals[:j], vals[j:2 * j], vals[2 * j:], bool(flags & FLAG_FAULT))


class FrameDecoder:
    """Incremental decoder: feed bytes, get frames; bad blocks are counted, never raised.

    Attributes:
        crc_errors: blocks that failed to decode (COBS, length, CRC, version).
        resyncs: blocks discarded before the first good frame (joining mid-frame, line noise)
            or runaway blocks longer than any frame.
    """

    def __init__(self, max_block: int = 2 * frame_size(MAX_JOINTS)):
        self._buf = bytearray()
        self._synced = False
        self.max_block = max_block
        self.crc_errors = 0
        self.resyncs = 0
        self.last_error = ""

    def feed(self, data: bytes) -> list[BridgeFrame]:
        """Add received bytes; return the frames they completed, in order."""
        self._buf += data
        frames = []
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
                frames.append(decode_frame(block))
                self._synced = True
            except FrameError as exc:
                if self._synced:
                    self.crc_errors += 1
                    self.last_error = str(exc)
                else:  # joining mid-stream or line noise before the first good frame
                    self.resyncs += 1
        return frames

    def reset(self) -> None:
        """Forget buffered bytes (after a reconnect); the next block may be a partial one."""
        self._buf.clear()
        self._synced = False
