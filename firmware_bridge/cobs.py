"""Consistent Overhead Byte Stuffing (COBS).

Reference: S. Cheshire and M. Baker, "Consistent Overhead Byte Stuffing", IEEE/ACM
Transactions on Networking 7(2), 1999. Encoded data contains no 0x00 byte, so 0x00 delimits
frames; overhead is at most one byte per 254 bytes plus one.
"""

from __future__ import annotations

from .errors import FrameError

__all__ = ["cobs_decode", "cobs_encode"]


def cobs_encode(data: bytes) -> bytes:
    """Encode ``data`` (any bytes) into COBS form without the trailing 0x00 delimiter."""
    out = bytearray()
    block = bytearray()
    for b in data:
        if b == 0:
            out.append(len(block) + 1)
            out += block
            block.clear()
        else:
            block.append(b)
            if len(block) == 254:
                out.append(255)
                out += block
                block.clear()
    out.append(len(block) + 1)
    out += block
    return bytes(out)


def cobs_decode(data: bytes) -> bytes:
    """Decode one COBS block (without its 0x00 delimiter).

    Raises:
        FrameError: a zero byte inside the block, or a code byte pointing past the end.
    """
    out = bytearray()
    i, n = 0, len(data)
    while i < n:
        code = data[i]
        if code == 0:
            raise FrameError(f"COBS block: expected no 0x00 byte, found one at offset {i}")
        end = i + code
        chunk = data[i + 1:end]
        if len(chunk) != code - 1:
            raise FrameError(f"COBS block: code {code} at offset {i} expected {code - 1} more "
                             f"bytes, found {len(chunk)}")
        if 0 in chunk:
            raise FrameError(f"COBS block: expected no 0x00 byte, found one after offset {i}")
        out += chunk
        i = end
        if code != 255 and i < n:
            out.append(0)
    return bytes(out)
