"""Protocol types of the vendor handles the transports hold.

pyserial, the servo SDKs (``dynamixel_sdk``, ``scservo_sdk``) and pysoem ship no type
information, so each handle is typed here by what the bridge calls on it, no more: mypy then
checks every call the bridge makes, and a fake (``firmware_bridge.testing``) needs only these
members. Signatures follow the libraries' documentation: pyserial 3.5 ``SerialBase``, the
SDKs' ``PortHandler``/``PacketHandler`` (protocol 2.0 and the SCS protocol), pysoem 1.1
``Master``/``CdefSlave``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["EcatMaster", "EcatSlave", "Pysoem", "SerialPort", "ServoPacketHandler",
           "ServoPortHandler"]


class SerialPort(Protocol):
    """A pyserial port (``serial.SerialBase``), opened non-blocking."""

    #: seconds a write may wait for room in the output buffer (None: forever); a write that
    #: cannot finish in time raises ``serial.SerialTimeoutException``
    write_timeout: float | None

    @property
    def in_waiting(self) -> int:
        """Bytes waiting in the input buffer."""
        ...

    def read(self, size: int = 1) -> bytes:
        """Up to ``size`` bytes (non-blocking: what is there)."""
        ...

    def write(self, data: bytes) -> int | None:
        """Queue ``data``; the count written."""
        ...

    def reset_input_buffer(self) -> None:
        """Discard the input buffer."""
        ...

    def close(self) -> None:
        """Close the port."""
        ...

    def fileno(self) -> int:
        """The file descriptor (raises for URL handlers that have none)."""
        ...


class ServoPortHandler(Protocol):
    """The servo SDKs' ``PortHandler`` as :func:`firmware_bridge.sdk_port.make_port_handler`
    extends it."""

    ser: SerialPort | None
    is_open: bool
    is_using: bool
    #: host ``time.monotonic_ns()`` just before the last request was written (-1: none yet)
    write_ns: int
    #: bytes of the last request
    write_bytes: int
    #: bytes read since the last request
    rx_bytes: int
    #: ``(host ns, bytes read or waiting then)`` after each read since the last request that
    #: returned bytes
    rx_log: list[tuple[int, int]]

    def closePort(self) -> None:  # noqa: N802 - SDK method name
        """Close the serial port."""
        ...


class ServoPacketHandler(Protocol):
    """The servo SDKs' ``PacketHandler`` (the calls the bridge makes)."""

    def getTxRxResult(self, result: int) -> str:  # noqa: N802 - SDK method name
        """The text of a communication result code."""
        ...

    def readRx(self, port: ServoPortHandler, servo_id: int,  # noqa: N802
               length: int) -> tuple[list[int], int, int]:
        """One status packet: ``(data bytes, result code, servo error byte)``."""
        ...

    def ping(self, port: ServoPortHandler, servo_id: int) -> tuple[int, int, int]:
        """``(model number, result code, servo error byte)``."""
        ...

    def syncReadTx(self, port: ServoPortHandler, start_address: int,  # noqa: N802
                   data_length: int, param: list[int], param_length: int,
                   *options: bool) -> int:
        """Send a sync-read instruction (``dynamixel_sdk`` takes a ``fast_option``)."""
        ...


class EcatSlave(Protocol):
    """One pysoem slave (``pysoem.CdefSlave``)."""

    name: str
    man: int
    id: int
    state: int
    al_status: int

    @property
    def input(self) -> bytes:
        """The slave's input process data of the last exchange."""
        ...

    def sdo_read(self, index: int, subindex: int) -> bytes:
        """Read one object through the mailbox (CoE SDO upload)."""
        ...


class EcatMaster(Protocol):
    """A pysoem master (``pysoem.Master``)."""

    slaves: Sequence[EcatSlave]
    state: int
    expected_wkc: int
    dc_time: int

    def open(self, ifname: str) -> None:
        """Open the raw socket on a network interface."""
        ...

    def close(self) -> None:
        """Close the socket."""
        ...

    def config_init(self) -> int:
        """Enumerate the slaves; their count."""
        ...

    def config_map(self) -> int:
        """Map every slave's process data into one image; its size."""
        ...

    def config_dc(self) -> bool:
        """Configure distributed clocks; whether a slave has one."""
        ...

    def state_check(self, expected_state: int, timeout: int = ...) -> int:
        """Wait up to ``timeout`` us for every slave to reach a state; the lowest state."""
        ...

    def read_state(self) -> int:
        """Read every slave's AL state and status; the lowest state."""
        ...

    def write_state(self) -> int:
        """Request :attr:`state` of every slave."""
        ...

    def send_processdata(self) -> int:
        """Send one process-data frame."""
        ...

    def receive_processdata(self, timeout: int = ...) -> int:
        """Receive the frame sent last, waiting up to ``timeout`` us; its working counter."""
        ...


class Pysoem(Protocol):
    """The ``pysoem`` module: its master and the errors of a mailbox read."""

    SdoError: type[Exception]
    MailboxError: type[Exception]
    WkcError: type[Exception]

    def Master(self) -> EcatMaster:  # noqa: N802 - the library's class name
        """A new master (not yet open)."""
        ...
