"""A one-slave EtherCAT emulator (CiA 402 drive) on a raw socket, for pysoem tests.

It answers datagrams on a network interface (one end of a veth pair) like an ESC: register
memory with AL state machine, SII EEPROM reads, FMMU-mapped logical process data (LRW, or
LRD + LWR for a slave flagged as not supporting LRW), and CoE SDO uploads over the SM0/SM1
mailbox, and distributed-clock registers (receive-time latch, system time = local time +
offset, read each process-data cycle by SOEM's FRMW datagram). Run it in its own process
(``pysoem``'s ``config_map`` holds the GIL).

Process data: RxPDO 0x1600 = controlword, target position; TxPDO 0x1A00 = statusword,
position actual (``1000 * cycle`` increments), velocity actual, torque actual.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import MutableSequence
from dataclasses import dataclass

from ..ecat_tables import AL, CMD, COE, ESC, FMMU_SIZE, SII, SM_SIZE
from .child_device import Event, hardware_priority

__all__ = ["SlaveFaults", "serve"]

ETH_P_ECAT = 0x88A4
MBX_OUT, MBX_IN, MBX_SIZE = 0x1000, 0x1080, 128
ENCODER_INCREMENTS, RATED_TORQUE_MNM = 131072, 1270

OBJECTS = {  # (index, subindex) -> (value, size in bytes)
    (0x1000, 0): (0x00020192, 4),  # device type: CiA 402 servo drive
    (0x1018, 1): (0x00000E55, 4), (0x1018, 2): (0x00005EDE, 4),
    (0x1C00, 0): (4, 1), (0x1C00, 1): (1, 1), (0x1C00, 2): (2, 1), (0x1C00, 3): (3, 1),
    (0x1C00, 4): (4, 1),
    (0x1C12, 0): (1, 1), (0x1C12, 1): (0x1600, 2),
    (0x1C13, 0): (1, 1), (0x1C13, 1): (0x1A00, 2),
    (0x1600, 0): (2, 1), (0x1600, 1): (0x60400010, 4), (0x1600, 2): (0x607A0020, 4),
    (0x1A00, 0): (4, 1), (0x1A00, 1): (0x60410010, 4), (0x1A00, 2): (0x60640020, 4),
    (0x1A00, 3): (0x606C0020, 4), (0x1A00, 4): (0x60770010, 4),
    (0x6076, 0): (RATED_TORQUE_MNM, 4),
    (0x608F, 0): (2, 1), (0x608F, 1): (ENCODER_INCREMENTS, 4), (0x608F, 2): (1, 4),
}


@dataclass
class SlaveFaults:
    """Fault injection (0 disables): drop the N-th process-data frames, fall to SAFE-OP,
    answer with byte-identical copies of earlier replies.

    A copy carries the frame index, working counter and data of the earlier reply, so only a
    value that changes every cycle (the distributed-clock system time) can expose it.
    """

    drop_every: int = 0  # do not answer every N-th process-data frame
    safeop_at: int = 0  # at process-data frame N: AL status SAFE-OP + error, code 0x001B
    preop_at: int = 0  # at process-data frame N: AL status PRE-OP + error, code 0x001B
    no_lrw: bool = False  # SII general flag "LRW not supported": master must use LRD + LWR
    dc: bool = True  # ESC feature "distributed clocks" (register 0x0008 bit 2)
    # every N-th process-data frame is answered with a byte-identical copy of the last reply
    # sent with the same frame index (one index wrap earlier): a duplicate delivered late
    replay_every: int = 0
    # the reply to every N-th process-data frame is held back and sent, byte-identical, in
    # place of the reply to the next frame with the same frame index (one wrap later)
    late_every: int = 0
    # the position input (0x6064, int32) is position_start + 1000 per process-data frame,
    # wrapping from 2^31 - 1 to -2^31 as a drive's counter does
    position_start: int = 0
    # from process-data frame N on, the DC system time is dc_step_ns off (a step of the
    # clock); with dc32 the system time is 32 bits wide (it wraps every 4.3 s)
    dc_step_at: int = 0
    dc_step_ns: int = 0
    dc32: bool = False


def _sii(no_lrw: bool) -> bytes:
    w = bytearray(0x80 * 2)
    struct.pack_into("<IIII", w, SII["vendor_id"] * 2, 0xE55, 0x5EDE, 1, 42)
    struct.pack_into("<HHHHH", w, SII["std_rx_mailbox_offset"] * 2, MBX_OUT, MBX_SIZE,
                     MBX_IN, MBX_SIZE, 0x0004)  # mailbox protocols: CoE
    struct.pack_into("<HH", w, SII["size"] * 2, 1, 1)
    cats = bytearray()

    def cat(kind: int, data: bytes) -> None:
        if len(data) % 2:
            data += b"\x00"
        cats.extend(struct.pack("<HH", kind, len(data) // 2) + data)

    name = b"SyncEdge CiA402 emulator"
    cat(SII["cat_strings"], bytes([1, len(name)]) + name)
    general = bytearray(32)
    general[3] = 1  # name: string 1
    general[5] = 0x01 | 0x04 | 0x08  # CoE details: SDO, PDO assign, PDO config
    general[11] = 0x02 if no_lrw else 0x00  # flags: bit 1 = LRW not supported
    cat(SII["cat_general"], bytes(general))
    cat(SII["cat_fmmu"], bytes([1, 2, 3, 0]))
    cat(SII["cat_syncm"], struct.pack("<HHBBBB", MBX_OUT, MBX_SIZE, 0x26, 0, 1, 1)
        + struct.pack("<HHBBBB", MBX_IN, MBX_SIZE, 0x22, 0, 1, 2)
        + struct.pack("<HHBBBB", 0x1100, 0, 0x64, 0, 1, 3)
        + struct.pack("<HHBBBB", 0x1180, 0, 0x20, 0, 1, 4))
    return bytes(w) + bytes(cats) + struct.pack("<H", SII["cat_end"]) + b"\xff" * 64


class Slave:
    """Register memory and behaviour of one ESC."""

    def __init__(self, faults: SlaveFaults, counts: MutableSequence[int] | None = None,
                 last: bool = True):
        self.f = faults
        self.counts = counts  # optional shared int array: LRD, LWR, LRW datagrams seen
        self.mem = bytearray(0x10000)
        self.sii = _sii(faults.no_lrw)
        self.mem[ESC["type"][0]] = 0x11
        self.mem[ESC["fmmus_supported"][0]] = 3
        self.mem[ESC["syncmanagers_supported"][0]] = 4
        struct.pack_into("<H", self.mem, ESC["features"][0],
                         ((1 << 9) if faults.no_lrw else 0) | ((1 << 2) if faults.dc else 0))
        # port 0 link + communication; port 1 too where another slave follows in the chain
        struct.pack_into("<H", self.mem, ESC["dl_status"][0], 0x0210 if last else 0x0A30)
        self.set_al(AL["INIT"], 0)
        self.cycles = 0
        self.sent = None

    def set_al(self, state: int, code: int) -> None:
        struct.pack_into("<HH", self.mem, ESC["al_status"][0], state, 0)
        struct.pack_into("<H", self.mem, ESC["al_status_code"][0], code)

    @property
    def al_state(self) -> int:
        return self.mem[ESC["al_status"][0]]

    def on_write(self, ado: int, n: int) -> None:
        end = ado + n
        if ado <= ESC["al_control"][0] < end:
            req = self.mem[ESC["al_control"][0]]
            state, ack = req & 0x0F, req & 0x10
            if self.al_state & AL["ERROR"] and not ack:
                return
            self.set_al(state, 0)
        if ado <= ESC["eeprom_control_status"][0] < end:
            cmd = struct.unpack_from("<H", self.mem, ESC["eeprom_control_status"][0])[0]
            if (cmd >> 8) & 0x07 == 1:
                addr = struct.unpack_from("<I", self.mem, ESC["eeprom_address"][0])[0] * 2
                chunk = self.sii[addr:addr + 8].ljust(8, b"\xff")
                self.mem[ESC["eeprom_data"][0]:ESC["eeprom_data"][0] + 8] = chunk
                struct.pack_into("<H", self.mem, ESC["eeprom_control_status"][0], 0)
        if ado <= MBX_OUT < end:
            self.mailbox(bytes(self.mem[MBX_OUT:MBX_OUT + MBX_SIZE]))
        if self.f.dc and ado <= ESC["dc_receive_time_port0"][0] < end:  # latch receive times
            local = time.monotonic_ns()
            struct.pack_into("<I", self.mem, ESC["dc_receive_time_port0"][0], local & 0xFFFFFFFF)
            struct.pack_into("<q", self.mem, ESC["dc_receive_time_ecat"][0], local)

    def tick_clock(self) -> None:
        """Set the DC system time (local time + the master's offset) as a frame passes."""
        if self.f.dc:
            offset = struct.unpack_from("<q", self.mem, ESC["dc_system_time_offset"][0])[0]
            t = time.monotonic_ns() + offset
            if self.f.dc_step_at and self.cycles >= self.f.dc_step_at:
                t += self.f.dc_step_ns
            struct.pack_into("<q", self.mem, ESC["dc_system_time"][0],
                             t & 0xFFFFFFFF if self.f.dc32 else t)

    def on_read(self, ado: int, n: int) -> None:
        if ado <= MBX_IN < ado + n:
            self.mem[ESC["sm0"][0] + SM_SIZE + 5] &= ~0x08 & 0xFF  # SM1 mailbox now empty

    def mailbox(self, mbx: bytes) -> None:
        length, _, _, mtype = struct.unpack_from("<HHBB", mbx)
        if mtype & 0x0F != COE["mailbox_type_coe"] or length < 10:
            return
        coe, cmd, index, sub = struct.unpack_from("<HBHB", mbx, 6)
        if coe >> 12 != COE["service_sdo_request"]:
            return
        if cmd & 0xE0 == COE["upload_request"] and (index, sub) in OBJECTS:
            value, size = OBJECTS[(index, sub)]
            rcmd = COE["upload_expedited_response"] | ((4 - size) << 2)
            data = value & ((1 << (8 * size)) - 1)
        elif cmd & 0xE0 == 0x20:  # download request: accept and acknowledge
            rcmd, data = COE["download_response"], 0
        else:
            rcmd, data = COE["abort"], COE["abort_no_object"]
        reply = struct.pack("<HHBBHBHBI", 10, 0, 0, (mtype & 0xF0) | 0x03,
                            COE["service_sdo_response"] << 12, rcmd, index, sub, data)
        self.mem[MBX_IN:MBX_IN + MBX_SIZE] = reply.ljust(MBX_SIZE, b"\x00")
        self.mem[ESC["sm0"][0] + SM_SIZE + 5] |= 0x08  # SM1 mailbox full

    def update_inputs(self) -> None:
        phys = struct.unpack_from("<H", self.mem, ESC["sm0"][0] + 3 * SM_SIZE)[0]
        if phys:
            c = self.cycles
            pos = (self.f.position_start + 1000 * c + 2**31) % 2**32 - 2**31  # int32 wrap
            struct.pack_into("<Hiih", self.mem, phys, 0x0237, pos, 50 * c % 7000 - 3500,
                             (c % 200) - 100)

    def logical(self, cmd: int, addr: int, data: bytearray) -> int:
        if cmd == CMD["LRW"] and self.f.no_lrw:
            return 0
        wkc = 0
        for k in range(3):
            base = ESC["fmmu0"][0] + k * FMMU_SIZE
            lstart, llen = struct.unpack_from("<IH", self.mem, base)
            phys = struct.unpack_from("<H", self.mem, base + 8)[0]
            ftype, active = self.mem[base + 11], self.mem[base + 12]
            if not active or llen == 0:
                continue
            lo, hi = max(addr, lstart), min(addr + len(data), lstart + llen)
            if lo >= hi:
                continue
            d, p = lo - addr, phys + lo - lstart
            if ftype & 0x01 and cmd in (CMD["LRD"], CMD["LRW"]) and self.al_state & 0x0F in (
                    AL["SAFEOP"], AL["OP"]):
                data[d:d + hi - lo] = self.mem[p:p + hi - lo]
                wkc |= 1
            if ftype & 0x02 and cmd in (CMD["LWR"], CMD["LRW"]) and self.al_state == AL["OP"]:
                self.mem[p:p + hi - lo] = data[d:d + hi - lo]
                wkc |= 2 if cmd == CMD["LRW"] else 4
        return (wkc & 1) + (2 if wkc & 2 else 0) + (1 if wkc & 4 else 0)

    def frame(self, payload: bytearray) -> bool:
        """Process one EtherCAT frame in place; returns False to drop it (fault injection)."""
        (hdr,) = struct.unpack_from("<H", payload)
        off, end = 2, 2 + (hdr & 0x07FF)
        self.tick_clock()
        logical = False
        while off + 10 <= end:
            cmd, _, adp, ado, ln = struct.unpack_from("<BBHHH", payload, off)
            n = ln & 0x07FF
            data = payload[off + 10:off + 10 + n]
            wkc = struct.unpack_from("<H", payload, off + 10 + n)[0]
            if cmd in (CMD["LRD"], CMD["LWR"], CMD["LRW"]):
                if self.counts is not None:
                    self.counts[cmd - CMD["LRD"]] += 1
                if not logical:
                    logical = True
                    self.cycles += 1
                    c = self.cycles
                    if self.f.safeop_at and c == self.f.safeop_at:
                        self.set_al(AL["SAFEOP"] | AL["ERROR"], 0x001B)
                    if self.f.preop_at and c == self.f.preop_at:
                        self.set_al(AL["PREOP"] | AL["ERROR"], 0x001B)
                    if self.f.drop_every and c % self.f.drop_every == 0:
                        return False
                    self.update_inputs()
                wkc += self.logical(cmd, adp | (ado << 16), data)
            else:
                me = {CMD["APRD"], CMD["APWR"], CMD["APRW"], CMD["ARMW"]}
                fixed = {CMD["FPRD"], CMD["FPWR"], CMD["FPRW"], CMD["FRMW"]}
                station = struct.unpack_from("<H", self.mem, ESC["station_address"][0])[0]
                hit = (cmd in me and adp == 0) or (cmd in fixed and adp == station) or \
                    cmd in (CMD["BRD"], CMD["BWR"], CMD["BRW"])
                if cmd in me:
                    struct.pack_into("<H", payload, off + 2, (adp + 1) & 0xFFFF)
                if hit and cmd != CMD["NOP"]:
                    reads = cmd in (1, 3, 4, 6, 7, 9, 13, 14)
                    writes = cmd in (2, 3, 5, 6, 8, 9)
                    if reads:
                        self.on_read(ado, n)
                        if cmd in (CMD["BRD"], CMD["BRW"]):
                            data[:] = bytes(a | b for a, b in zip(data, self.mem[ado:ado + n],
                                                                  strict=True))
                        else:
                            data[:] = self.mem[ado:ado + n]
                        wkc += 1
                    if writes:
                        self.mem[ado:ado + n] = payload[off + 10:off + 10 + n]
                        self.on_write(ado, n)
                        wkc += 2 if reads else 1
            payload[off + 10:off + 10 + n] = data
            struct.pack_into("<H", payload, off + 10 + n, wkc)
            off += 12 + n
            if not ln & 0x8000:
                break
        return True


def serve(iface: str, faults: SlaveFaults, ready: Event | None = None,
          stop: Event | None = None, counts: MutableSequence[int] | None = None,
          more: tuple[SlaveFaults, ...] = ()) -> None:
    """Answer EtherCAT frames on ``iface`` until ``stop`` (an Event) is set.

    ``counts``: optional shared array of 3 ints, incremented per LRD, LWR and LRW datagram
    (by the first slave). ``more``: faults of further identical slaves after the first, in
    chain order; each frame passes every slave in turn, as on a line.
    """
    hardware_priority()
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ECAT))
    s.bind((iface, 0))
    s.settimeout(0.05)
    chain = [Slave(f, counts if k == 0 else None, last=k == len(more))
             for k, f in enumerate((faults, *more))]
    slave = chain[0]
    sent: dict[int, bytes] = {}  # frame index -> last process-data reply sent with it
    held: dict[int, bytes] = {}  # frame index -> a reply held back for one index wrap
    if ready is not None:
        ready.set()
    while stop is None or not stop.is_set():
        try:
            pkt = bytearray(s.recv(2048))
        except TimeoutError:
            continue
        if len(pkt) < 16 or pkt[6] & 0x02:  # not ours, or already processed by a slave
            continue
        payload = pkt[14:]
        before = slave.cycles
        if not all(sl.frame(payload) for sl in chain):  # a slave dropped the frame
            continue
        out = bytes(pkt[:6] + bytes([pkt[6] | 0x02]) + pkt[7:14] + payload)
        if slave.cycles != before:  # a process-data frame: replay faults apply
            c, index = slave.cycles, payload[3]  # index of the first datagram
            if index in held:
                out = held.pop(index)
            elif faults.late_every and c % faults.late_every == 0:
                held[index] = out
                continue
            elif faults.replay_every and c % faults.replay_every == 0 and index in sent:
                out = sent[index]
            else:
                sent[index] = out
        s.send(out)
    s.close()
