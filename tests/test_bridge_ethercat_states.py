"""EtherCAT bring-up failures name the slaves' states (a fake master; no network needed)."""

from __future__ import annotations

import types

import numpy as np
import pytest

from firmware_bridge import ethercat
from firmware_bridge.ecat_tables import AL
from firmware_bridge.errors import ProtocolError
from firmware_bridge.url import stream_for_url


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


def test_a_slave_below_safeop_never_reports_its_stale_inputs():
    """Two slaves; slave 1 falls to PRE-OP. Its working-counter share is 0, so the counter
    matches the prediction, but its input buffer was not refreshed: its joint is NaN and the
    sample is FAULT naming it (its old position must never come out as fresh); slave 0's
    joint, whose inputs were exchanged, stays fresh."""
    import struct

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
    reading = stream._cycle()
    assert reading.position_rad[0] == 1000.0 and np.isnan(reading.position_rad[1])
    assert "no fresh inputs from slave1 AL 0x02" in reading.fault
    assert "below SAFE-OP" in reading.fault
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


def _two_slave_stream(states, wkc):
    """A stream on a fake master with two slaves in ``states``; the cycle returns ``wkc``."""
    import struct

    def slave(k: int, state: int, pos: int) -> types.SimpleNamespace:
        inp = bytearray(10)
        struct.pack_into("<i", inp, 0, pos)
        return types.SimpleNamespace(state=state, al_status=0x001B if state & 0x10 else 0,
                                     input=bytes(inp), name=f"Drive {k}")

    master = types.SimpleNamespace(
        slaves=[slave(k, st, 1000 * (k + 1)) for k, st in enumerate(states)],
        expected_wkc=6, send_processdata=lambda: None,
        receive_processdata=lambda timeout_us: wkc, read_state=lambda: None)
    stream = ethercat.EthercatStream("ethercat://fake0", "fake0")
    stream._master = master
    stream.layout = [{"name": f"slave{k}:Drive {k}", "offsets": {0x6064: 0, 0x606C: 4, 0x6077: 8},
                      "rad_per_inc": 1.0, "nm_per_permille": 1.0} for k in range(2)]
    return stream, master


def test_one_slave_below_safeop_costs_only_its_own_joint_and_is_named_with_etg_text():
    """Slave 1 falls to PRE-OP with the error flag (AL status 0x001B): its share of the
    working counter is 0 and its inputs are not refreshed. Slave 0's joint stays fresh;
    slave 1's joint is NaN (its old value never comes out); the fault names slave 1 by
    position and name with the AL state and status code decoded (ETG.1000.6)."""
    import math

    stream, _ = _two_slave_stream([AL["OP"], AL["PREOP"] | 0x10], wkc=3)
    r = stream._cycle()
    assert r.position_rad[0] == 1000.0 and math.isnan(r.position_rad[1])
    assert ("slave1 AL 0x12 code 0x001B ('Drive 1': PRE-OP + ERROR, Sync manager watchdog)"
            in r.fault)
    assert "slave0" not in r.fault
    health = stream.stats.extra["slaves"]
    assert [h["lost_cycles"] for h in health] == [0, 1]
    assert health[1]["state"] == "PRE-OP + ERROR" and health[1]["wkc_share"] == 0
    assert health[0]["state"] == "OP" and health[0]["wkc_share"] == 3


def test_al_status_codes_decode_to_the_etg_text():
    from firmware_bridge.ecat_tables import al_state_text, al_status_text

    assert al_status_text(0x001B) == "Sync manager watchdog"
    assert al_status_text(0x0000) == "No error"
    assert al_status_text(0x001A) == "Synchronization error"
    assert al_status_text(0x7777) == "code 0x7777 not in the ETG.1000.6 table (vendor specific?)"
    assert al_state_text(0x14) == "SAFE-OP + ERROR" and al_state_text(0x08) == "OP"


def _sdo_slave(objects: dict, name: str = "drive"):
    import struct

    class SdoError(Exception):
        def __init__(self, slave_pos, index, subindex, abort_code, desc):
            super().__init__(slave_pos, index, subindex, abort_code, desc)
            self.abort_code, self.desc = abort_code, desc

    def read(index: int, sub: int) -> bytes:
        if (index, sub) not in objects:
            raise SdoError(1, index, sub, 0x06020000, "The object does not exist")
        return struct.pack("<I", objects[(index, sub)])

    pysoem = types.SimpleNamespace(SdoError=SdoError, MailboxError=SdoError, WkcError=SdoError)
    return types.SimpleNamespace(name=name, man=1, id=2, sdo_read=read), pysoem


PDO = {(0x1C13, 0): 1, (0x1C13, 1): 0x1A00, (0x1A00, 0): 3, (0x1A00, 1): 0x60640020,
       (0x1A00, 2): 0x606C0020, (0x1A00, 3): 0x60770010}


def test_sdo_errors_name_the_slave_by_position_and_name_with_the_abort_code_in_hex():
    slave, pysoem = _sdo_slave({(0x1C13, 0): 1})
    stream = ethercat.EthercatStream("ethercat://fake0", "fake0")
    stream._pysoem = pysoem
    with pytest.raises(ProtocolError, match=r"slave3 'drive': SDO 0x1C13:1 read: expected a "
                                            r"value, found abort code 0x06020000 \(The object "
                                            r"does not exist\)"):
        stream._map_slave(3, slave)


def test_optional_cia402_objects_are_optional():
    """0x608F (position encoder resolution) and 0x6076 (rated torque) are optional in CiA
    402: without 0x608F the URL's encoder_increments scales positions (and the error says
    so when it is missing); without 0x6076 efforts are NaN."""
    import math

    slave, pysoem = _sdo_slave(PDO)
    stream = ethercat.EthercatStream("ethercat://fake0", "fake0")
    stream._pysoem = pysoem
    with pytest.raises(ProtocolError, match=r"slave0 'drive': no 0x608F .* optional in CiA "
                                            r"402.*encoder_increments=N"):
        stream._map_slave(0, slave)
    stream = stream_for_url("ethercat://fake0?encoder_increments=4096", do_not_open=True)
    stream._pysoem = pysoem
    layout = stream._map_slave(0, slave)
    assert layout["rad_per_inc"] == pytest.approx(2 * math.pi / 4096)
    assert math.isnan(layout["nm_per_permille"])
    assert layout["notes"] == ["no 0x608F: 4096 increments per revolution from the URL",
                               "no 0x6076 (rated torque): efforts are NaN"]


def _one_slave_master(wkc: int, state: int, al_status: int) -> types.SimpleNamespace:
    import struct

    inp = bytearray(10)
    struct.pack_into("<i", inp, 0, 4321)
    slave = types.SimpleNamespace(state=AL["OP"], al_status=0, input=bytes(inp), name="drive")

    def read_state() -> None:  # what the slave reports once it is asked
        slave.state, slave.al_status = state, al_status

    return types.SimpleNamespace(slaves=[slave], expected_wkc=3,
                                 send_processdata=lambda: None,
                                 receive_processdata=lambda timeout_us: wkc,
                                 read_state=read_state)


def _stream_on(master: types.SimpleNamespace) -> ethercat.EthercatStream:
    stream = ethercat.EthercatStream("ethercat://fake0", "fake0")
    stream._master = master
    stream.layout = [{"name": "slave0:drive", "offsets": {0x6064: 0, 0x606C: 4, 0x6077: 8},
                      "rad_per_inc": 1.0, "nm_per_permille": 1.0}]
    return stream


def test_a_lone_slave_below_safeop_is_named_when_its_frame_comes_back_unprocessed():
    """One slave falls to PRE-OP with error: the frame comes back with working counter 0
    (no slave processed it). That is not a lost frame: the slave's state is read, the cycle
    fails naming the slave, its state and AL status code, and its health is that state,
    not the OP it had before."""
    from firmware_bridge.stream import CycleError

    stream = _stream_on(_one_slave_master(0, AL["PREOP"] | 0x10, 0x001B))
    with pytest.raises(CycleError, match=r"cycle 1: no fresh inputs from any slave: slave0 AL "
                                         r"0x12 code 0x001B \('drive': PRE-OP \+ ERROR, Sync "
                                         r"manager watchdog\) \(below SAFE-OP\)"):
        stream._cycle()
    (health,) = stream.stats.extra["slaves"]
    assert health == {"position": 0, "name": "drive", "state": "PRE-OP + ERROR",
                      "al_status": "0x001B Sync manager watchdog", "wkc_share": 0,
                      "lost_cycles": 1}
    assert "lost_wait_us" not in stream.stats.extra  # a frame came back: nothing was waited


def test_no_frame_at_all_is_a_lost_frame_and_an_unprocessed_one_in_op_says_so():
    from firmware_bridge.stream import CycleError

    stream = _stream_on(_one_slave_master(-1, AL["OP"], 0))
    with pytest.raises(CycleError, match=r"no frame came back within 2000 us \(wkc -1, "
                                         r"expected 3\)"):
        stream._cycle()
    assert stream.stats.extra["lost_wait_us"]["count"] == 1
    stream = _stream_on(_one_slave_master(0, AL["OP"], 0))
    with pytest.raises(CycleError, match=r"a frame came back that no slave processed \(wkc 0, "
                                         r"expected 3\), with every slave reporting slave0 AL "
                                         r"0x08 code 0x0000 \('drive': OP, No error\)"):
        stream._cycle()


def test_dc_anchor_rejects_a_single_old_reply_and_re_anchors_on_a_run_that_agrees():
    from firmware_bridge.ecat_checks import DcAnchor

    ms = 1_000_000
    a = DcAnchor()
    cycle = 0

    def reply(dc_ms: float) -> str:
        nonlocal cycle
        cycle += 1
        t = cycle * ms  # the host sends every 1 ms, the reply back 0.1 ms later
        return a.check(int(dc_ms * ms), t, t + ms // 10)

    assert [reply(5_000 + k) for k in range(1, 6)] == ["current"] * 5  # DC 5001..5005 ms
    assert reply(4_990) == "stale"  # a copy 16 cycles old
    assert reply(5_007) == "current"  # the next one is current again: the run is over
    # the DC time steps back 5 s: two replies lost, the third agreeing one re-anchors
    assert [reply(8 + k) for k in range(3)] == ["stale", "stale", "jump"]
    assert a.last is not None and a.last[0] == 10 * ms
    assert reply(11) == "current"
    # a 32-bit system time: an outage longer than a wrap (4.3 s) moves the anchor
    b = DcAnchor()
    assert b.check(2**32 - ms, 0, ms // 10) == "current"
    gone = 5_000 * ms  # 5 s without a reply
    got = [b.check((2**32 - ms + gone + k * ms) % 2**32, gone + k * ms, gone + k * ms + ms // 10)
           for k in range(4)]
    assert got == ["stale", "stale", "jump", "current"]
