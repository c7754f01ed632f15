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
