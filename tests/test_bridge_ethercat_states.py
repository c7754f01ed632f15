"""EtherCAT bring-up failures name the slaves' states (a fake master; no network needed)."""

from __future__ import annotations

import types

import pytest

from firmware_bridge import ethercat
from firmware_bridge.ecat_tables import AL
from firmware_bridge.errors import ProtocolError


class _Slave:
    state, al_status = 0x04 | 0x10, 0x001B  # SAFE-OP with the error flag, watchdog code
    name, man, id = "fake", 0x2, 0x3


class _Master:
    def __init__(self) -> None:
        self.slaves = [_Slave()]
        self.closed = False

    def open(self, iface: str) -> None: ...
    def config_init(self) -> int: return 1
    def config_map(self) -> None: ...
    def read_state(self) -> None: ...
    def write_state(self) -> None: ...
    def close(self) -> None: self.closed = True
    def state_check(self, state: int, timeout_us: int) -> int: return AL["INIT"]


def test_slaves_not_reaching_safeop_raise_protocol_error_naming_their_states(monkeypatch):
    master = _Master()
    fake = types.SimpleNamespace(Master=lambda: master)
    monkeypatch.setattr(ethercat, "require", lambda *a: fake)
    stream = ethercat.EthercatStream("ethercat://fake0", "fake0", state_timeout_s=0.01)
    with pytest.raises(ProtocolError, match=r"SAFE-OP after mapping, found slave0 AL 0x14 "
                                            r"code 0x001B"):
        stream._open()
    assert master.closed and stream._master is None


def test_a_slave_below_safeop_loses_the_cycle_instead_of_reporting_stale_inputs():
    """Two slaves; slave 1 falls to PRE-OP. Its working-counter share is 0, so the counter
    matches the prediction, but its input buffer was not refreshed: no sample, a lost cycle
    naming it (its old position must never come out as fresh)."""
    import struct

    from firmware_bridge.stream import CycleError

    def slave(state: int, pos: int) -> types.SimpleNamespace:
        inp = bytearray(10)
        struct.pack_into("<i", inp, 0, pos)
        return types.SimpleNamespace(state=state, al_status=0, input=bytes(inp))

    master = types.SimpleNamespace(
        slaves=[slave(AL["OP"], 1000), slave(AL["PREOP"], 777777)], expected_wkc=6,
        send_processdata=lambda: None, receive_processdata=lambda timeout_us: 3,
        read_state=lambda: None)
    stream = ethercat.EthercatStream("ethercat://fake0", "fake0")
    stream._master = master
    stream.layout = [{"name": f"slave{k}", "offsets": {0x6064: 0, 0x606C: 4, 0x6077: 8},
                      "rad_per_inc": 1.0, "nm_per_permille": 1.0} for k in range(2)]
    with pytest.raises(CycleError, match=r"no fresh inputs from slave1 AL 0x02 .*below "
                                         r"SAFE-OP"):
        stream._cycle()
    master.slaves[1].state = AL["SAFEOP"] | 0x10  # inputs still exchanged: a FAULT sample
    master.receive_processdata = lambda timeout_us: 4
    reading = stream._cycle()
    assert reading.fault.startswith("outputs not applied: slave1 AL 0x14")
    assert list(reading.position_rad) == [1000.0, 777777.0]


def test_pdo_mapping_reads_every_assigned_txpdo_in_bits():
    """Two TxPDOs assigned in 0x1C13 and an 8-bit padding entry: the byte offsets follow
    all of them (the first TxPDO alone lacks velocity and torque)."""
    import struct

    def entry(index: int, bits: int) -> int:
        return index << 16 | bits

    sdo = {(0x1C13, 0): struct.pack("<B", 2), (0x1C13, 1): struct.pack("<H", 0x1A00),
           (0x1C13, 2): struct.pack("<H", 0x1A01),
           (0x1A00, 0): struct.pack("<B", 2), (0x1A00, 1): struct.pack("<I", entry(0x6041, 16)),
           (0x1A00, 2): struct.pack("<I", entry(0x6064, 32)),
           (0x1A01, 0): struct.pack("<B", 3), (0x1A01, 1): struct.pack("<I", entry(0, 8)),
           (0x1A01, 2): struct.pack("<I", entry(0x606C, 32)),
           (0x1A01, 3): struct.pack("<I", entry(0x6077, 16)),
           (0x608F, 1): struct.pack("<I", 4096), (0x608F, 2): struct.pack("<I", 1),
           (0x6076, 0): struct.pack("<I", 2000)}

    class Err(Exception):
        pass

    slave = types.SimpleNamespace(name="drive", man=1, id=2,
                                  sdo_read=lambda index, sub: sdo[(index, sub)])
    stream = ethercat.EthercatStream("ethercat://fake0", "fake0")
    stream._pysoem = types.SimpleNamespace(SdoError=Err, MailboxError=Err, WkcError=Err)
    layout = stream._map_slave(0, slave)
    assert layout["offsets"] == {0x6041: 0, 0x6064: 2, 0x606C: 7, 0x6077: 11}
    sdo[(0x1C13, 0)] = struct.pack("<B", 1)  # only the first TxPDO assigned
    with pytest.raises(ProtocolError, match=r"TxPDOs \(0x1A00\) expected objects"):
        stream._map_slave(0, slave)


def test_dc_reply_is_current_bounds_the_dc_advance_by_host_send_and_receipt_stamps():
    from firmware_bridge.ethercat import dc_reply_is_current

    ms = 1_000_000
    last = (5_000 * ms, 100 * ms, 100 * ms + 150_000)  # DC, send, receipt of the last reply
    # next cycle 1 ms later, a 150 us round trip: the DC advanced about 1 ms
    assert dc_reply_is_current(5_001 * ms, 101 * ms, 101 * ms + 150_000, last)
    # a copy of a reply 16 cycles old, or the last reply again: rejected
    assert not dc_reply_is_current(4_985 * ms, 101 * ms, 101 * ms + 150_000, last)
    assert not dc_reply_is_current(5_000 * ms, 101 * ms, 101 * ms + 150_000, last)
    # the host stalled 30 ms before stamping the receipt: still current
    assert dc_reply_is_current(5_001 * ms, 101 * ms, 131 * ms, last)
    # a 32-bit DC wraps: compared modulo 2**32 (a copy 16 ms old still fails)
    wrap = (2**32 - ms // 2, 100 * ms, 100 * ms + 150_000)
    assert dc_reply_is_current(ms // 2, 101 * ms, 101 * ms + 150_000, wrap)
    assert not dc_reply_is_current(2**32 - 16 * ms, 101 * ms, 101 * ms + 150_000, wrap)
