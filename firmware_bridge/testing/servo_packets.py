"""Packet formats of the two servo protocols, as the fake servo bus speaks them.

Dynamixel Protocol 2.0 (source: ROBOTIS e-Manual, "DYNAMIXEL Protocol 2.0"):

======  ======  ==============================================================
offset  size    field
======  ======  ==============================================================
0       3       header FF FF FD
3       1       reserved 00
4       1       id (FE = broadcast)
5       2       length = parameters + 3 (instruction + CRC), little-endian
7       1       instruction (status packets: 0x55)
8       n       parameters (status packets: error byte first); FF FF FD -> FF FF FD FD
8+n     2       CRC-16 (poly 0x8005, init 0, not reflected) over bytes [0, 8+n)
======  ======  ==============================================================

Feetech SCS/STS (source: Feetech "SCS communication protocol" manual):

======  ======  ==============================================================
0       2       header FF FF
2       1       id (FE = broadcast)
3       1       length = parameters + 2
4       1       instruction (status packets: error byte)
5       n       parameters
5+n     1       checksum = ~(id + length + instruction + parameters) & 0xFF
======  ======  ==============================================================
"""

from __future__ import annotations

__all__ = ["dxl_crc16", "dxl_status", "dxl_stuff", "dxl_unstuff", "parse_dxl", "parse_sts",
           "sts_status"]


def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005) if crc & 0x8000 else (crc << 1)
        table.append(crc & 0xFFFF)
    return table


_TABLE = _crc_table()


def dxl_crc16(data: bytes) -> int:
    """CRC-16/BUYPASS as Protocol 2.0 uses it."""
    crc = 0
    for b in data:
        crc = ((crc << 8) ^ _TABLE[((crc >> 8) ^ b) & 0xFF]) & 0xFFFF
    return crc


def dxl_stuff(params: bytes) -> bytes:
    """Insert FD after every FF FF FD in the parameters."""
    out = bytearray()
    for b in params:
        out.append(b)
        if len(out) >= 3 and out[-3:] == b"\xff\xff\xfd":
            out.append(0xFD)
    return bytes(out)


def dxl_unstuff(params: bytes) -> bytes:
    """Remove the FD inserted after every FF FF FD."""
    out = bytearray()
    i = 0
    while i < len(params):
        out.append(params[i])
        if len(out) >= 3 and out[-3:] == b"\xff\xff\xfd" and i + 1 < len(params) \
                and params[i + 1] == 0xFD:
            i += 1
        i += 1
    return bytes(out)


def dxl_status(sid: int, error: int, params: bytes) -> bytes:
    """Build a Protocol 2.0 status packet."""
    body = dxl_stuff(bytes([error]) + params)
    n = len(body) + 3
    pkt = bytes([0xFF, 0xFF, 0xFD, 0x00, sid, n & 0xFF, n >> 8, 0x55]) + body
    crc = dxl_crc16(pkt)
    return pkt + bytes([crc & 0xFF, crc >> 8])


def parse_dxl(buf: bytearray) -> tuple[int, int, bytes] | None:
    """Pop one instruction packet from ``buf``: ``(id, instruction, params)`` or None.

    Bytes before a header and packets with a bad CRC are discarded.
    """
    while True:
        k = buf.find(b"\xff\xff\xfd\x00")
        if k < 0:
            del buf[:max(0, len(buf) - 3)]
            return None
        del buf[:k]
        if len(buf) < 7:
            return None
        n = buf[5] | (buf[6] << 8)
        if len(buf) < 7 + n:
            return None
        pkt = bytes(buf[:7 + n])
        del buf[:7 + n]
        if dxl_crc16(pkt[:-2]) != (pkt[-2] | (pkt[-1] << 8)):
            continue
        return pkt[4], pkt[7], dxl_unstuff(pkt[8:-2])


def sts_status(sid: int, error: int, params: bytes) -> bytes:
    """Build a Feetech status packet."""
    body = bytes([sid, len(params) + 2, error]) + params
    return b"\xff\xff" + body + bytes([~sum(body) & 0xFF])


def parse_sts(buf: bytearray) -> tuple[int, int, bytes] | None:
    """Pop one Feetech instruction packet: ``(id, instruction, params)`` or None."""
    while True:
        k = buf.find(b"\xff\xff")
        if k < 0:
            del buf[:max(0, len(buf) - 1)]
            return None
        del buf[:k]
        if len(buf) < 4:
            return None
        n = buf[3]
        if len(buf) < 4 + n:
            return None
        pkt = bytes(buf[:4 + n])
        del buf[:4 + n]
        if ~sum(pkt[2:-1]) & 0xFF != pkt[-1]:
            continue
        return pkt[2], pkt[4], pkt[5:-1]
