"""Shared machinery of the serial servo-bus transports (Dynamixel, Feetech).

One cycle = one sync-read instruction to every configured id, then one status packet per id,
through the vendor SDK's packet handler. A failed cycle (timeout, checksum, missing id) drains
the line until it is quiet, so that a late reply is never taken as the next cycle's reply.
"""

from __future__ import annotations

import abc
import time
import types
from typing import Any

import numpy as np

from .encoder import TurnCounter
from .sdk_types import ServoPacketHandler, ServoPortHandler
from .serial_io import drain_until_quiet
from .stream import MAX_POSITION_RAD, CycleError, JointStream, LinkLostError, Reading
from .url import Options

__all__ = ["ServoBusStream"]


class ServoBusStream(JointStream):
    """Base of the servo-bus transports.

    Args:
        url: the URL; port: device path or pyserial URL; ids: servo ids (``J`` joints, in this
            order); baud: line rate; timeout_s: reply allowance per cycle beyond wire time;
            zero_tick: the encoder step that is 0 rad.

    Positions are unwrapped across the encoder's 4095/0 boundary into whole turns
    (:class:`~.encoder.TurnCounter`); the count restarts within half a turn of ``zero_tick``
    when the stream is opened or reconnected (a servo may have been power-cycled).
    """

    #: SDK import name, its distribution name, and the status-OK code.
    SDK_MODULE = ""
    SDK_LIBRARY = ""

    def __init__(self, url: str, port: str, ids: list[int], *, baud: int = 1_000_000,
                 timeout_s: float = 0.02, zero_tick: int = 2048, **kw: Any):
        super().__init__(url, **kw)
        self.port, self.ids, self.baud, self.timeout_s = port, list(ids), baud, timeout_s
        self._sdk: types.ModuleType | None = None
        # the SDK's PortHandler and PacketHandler (typed by what the bridge calls on them)
        self._port: ServoPortHandler | None = None
        self._ph: ServoPacketHandler | None = None
        self.cycles = 0
        self.zero_tick = zero_tick
        self._turns = TurnCounter(self.STEPS_PER_REV, zero_tick)

    @property
    def joint_names(self) -> list[str]:
        return [f"id{i}" for i in self.ids]

    @classmethod
    def _url_options(cls, opts: Options) -> dict[str, Any]:
        """The options every servo bus has, plus the transport's own (:meth:`_bus_options`)."""
        return dict(ids=opts.ids(), baud=opts.int("baud", 1_000_000, 9600),
                    timeout_s=opts.float("timeout_s", 0.02, 0.0),
                    zero_tick=opts.int("zero_tick", 2048),
                    **cls._bus_options(opts),
                    rate_hz=opts.float("rate_hz", 0.0, 0.0),
                    read_timeout_s=opts.float("read_timeout_s", 1.0, 0.0),
                    max_position_rad=opts.float("max_position_rad", MAX_POSITION_RAD, 1.0))

    @classmethod
    def _bus_options(cls, opts: Options) -> dict[str, Any]:
        """The transport's own URL options, as constructor keyword arguments."""
        return {}

    # -- protocol specifics -------------------------------------------------------------
    #: The argument of the SDK's ``PacketHandler`` (protocol version or word order).
    PACKET_HANDLER_ARG: float = 0

    def _make_handlers(self, sdk: types.ModuleType
                       ) -> tuple[ServoPortHandler, ServoPacketHandler]:
        """Return ``(port_handler, packet_handler)`` for the opened port."""
        from .sdk_port import make_port_handler

        port = make_port_handler(sdk.PortHandler, self.port, self.baud, self.timeout_s)
        return port, sdk.PacketHandler(self.PACKET_HANDLER_ARG)

    @abc.abstractmethod
    def _sync_read_tx(self) -> int:
        """Send the sync-read instruction; return the SDK's result code."""

    @abc.abstractmethod
    def _decode(self, data: np.ndarray, errors: np.ndarray, receipt_ns: int) -> Reading:
        """Turn ``(J, N)`` uint8 register bytes and ``(J,)`` error bytes into a reading."""

    READ_LENGTH = 0
    #: Encoder steps per turn of the servos' position register.
    STEPS_PER_REV = 4096

    # -- JointStream --------------------------------------------------------------------
    def _open(self) -> None:
        if self._sdk is None:
            from .errors import require

            self._sdk = require(self.SDK_MODULE, self.SDK_LIBRARY, f"the {self.url} transport")
        self._port, self._ph = self._make_handlers(self._sdk)
        self._turns.reset()

    def _position_rad(self, raw: np.ndarray) -> np.ndarray:
        """float64 ``(J,)`` rad from int ``(J,)`` raw position steps, counting turns."""
        return self._turns.update(raw) * (2 * np.pi / self.STEPS_PER_REV)

    def _close(self) -> None:
        if self._port is not None:
            self._port.closePort()
            self._port = None

    def _cycle(self) -> Reading:
        port = self._port
        if port is None:
            raise LinkLostError(f"{self.port}: not open")
        sdk, ph = self._sdk, self._ph
        assert sdk is not None and ph is not None  # _open() sets them with the port
        self.cycles += 1
        rc = self._sync_read_tx()
        request_ns = port.write_ns  # stamped by the port handler just before the write
        if rc != sdk.COMM_SUCCESS:
            port.is_using = False
            raise CycleError("lost", f"{self.port}: sync read not sent: "
                             f"{ph.getTxRxResult(rc)}")
        data = np.zeros((len(self.ids), self.READ_LENGTH), dtype=np.uint8)
        errors = np.zeros(len(self.ids), dtype=np.uint8)
        for k, sid in enumerate(self.ids):
            values, rc, err = ph.readRx(port, sid, self.READ_LENGTH)
            if rc != sdk.COMM_SUCCESS or len(values) != self.READ_LENGTH:
                kind = {sdk.COMM_RX_TIMEOUT: "timeout", sdk.COMM_RX_CORRUPT: "crc"}.get(rc, "lost")
                raise CycleError(kind, f"{self.port}: expected a status packet from id {sid}, "
                                 f"found {ph.getTxRxResult(rc)}")
            data[k] = values
            errors[k] = err
        request_ns, receipt_ns = self._round_trip(port, request_ns)
        reading = self._decode(data, errors, receipt_ns)
        reading.request_ns = request_ns
        return reading

    def _round_trip(self, port: ServoPortHandler, write_ns: int) -> tuple[int, int]:
        """``(request_ns, receipt_ns)`` of the cycle just read, with the line's own time
        taken out, so that the round trip holds only the link's delays and waits.

        The servos latch their registers once the whole request has reached them, so the
        request counts from the end of its bytes on the line (write + their line time). The
        reply counts from when it was first seen whole (:func:`.sdk_port.reply_complete_ns`,
        before the SDK parsed it) less its bytes' line time: the earliest its first byte could
        have arrived. Both line times follow from the byte counts and ``baud``; with them out,
        :func:`edge.timebase.capture_stamps` splits only the link between the two directions.
        """
        from .sdk_port import line_time_ns, reply_complete_ns

        now = time.monotonic_ns()
        complete = reply_complete_ns(port)
        request = write_ns + line_time_ns(port.write_bytes, self.baud)
        if complete < 0:
            return request, now
        receipt = complete - line_time_ns(port.rx_bytes, self.baud)
        return request, max(receipt, request)

    def _recover(self, error: CycleError) -> None:
        if self._port is None:
            return
        self._port.is_using = False
        if self._port.ser is None:
            return
        # A reply later than the allowance must not be read as the next cycle's reply: wait
        # until the line has been quiet for twice the allowance (bounded) before the next one.
        drain_until_quiet(self._port.ser, quiet_s=2 * self.timeout_s, limit_s=10 * self.timeout_s)

    def _ping(self, sid: int) -> tuple[int, int]:
        ph, port = self._ph, self._port
        if ph is None or port is None:
            raise LinkLostError(f"{self.port}: not open; open the stream before describing "
                                f"the bus")
        model, rc, err = ph.ping(port, sid)[:3]
        sdk = self._sdk
        assert sdk is not None  # _open() loads the SDK before making the handlers
        return (model, err) if rc == sdk.COMM_SUCCESS else (-1, rc)

    def describe(self) -> dict[str, Any]:
        """Ping every configured id; report model numbers (``-1``: no answer).

        Raises:
            LinkLostError: the stream is not open.
            DeviceGoneError: the device vanished during the pings (naming the URL and the
                id being pinged).
        """
        from .errors import DeviceGoneError

        if self._ph is None or self._port is None:
            self._ping(self.ids[0])  # raises: not open
        found = {}
        for sid in self.ids:
            try:
                model, _ = self._ping(sid)
            except LinkLostError as exc:
                raise DeviceGoneError(f"{self.url}: device vanished while pinging id {sid} "
                                      f"({exc}); check the cable or the path, then probe "
                                      f"again") from exc
            found[sid] = model
        return {"url": self.url, "joints": self.joint_names, "models": found}
