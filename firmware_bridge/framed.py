"""``frame://``: the COBS + CRC32 framed stream of custom controller firmware.

URL form: ``frame:///dev/ttyACM0?baud=921600&joints=6&frame_timeout_s=0.05&ping_s=0.02``.
The device sends frames on its own clock (see :mod:`.frame_format`); each :meth:`read`
returns the next valid frame. Corrupt frames are counted (``crc_errors``) and skipped; the
sequence number marks gaps, a frame sent twice (``STALE``), a frame that comes after a later
one (dropped, ``late_frames``) and a device that started again (``RESTART``).

The stream also pings the device (a ping frame every ``ping_s`` on average, at jittered
moments, so that the pings fall at every phase of a USB-serial adapter's latency timer and
some answers meet no burst wait). The device answers with its clock at the ping's arrival
(a pong); each ping, answered or given up after ``ping_timeout_s``, rides on the next sample
(:attr:`edge.joints.JointSample.pings`), from which :func:`edge.timebase.capture_stamps`
puts the device stamps on the host clock. A device that answers none of its first 8 pings
(firmware from before pings) is not pinged again until it reconnects; the stream works as
before and says so (``stats.extra["ping"]``, :meth:`FramedStream.describe`).
"""

from __future__ import annotations

import random
import time
from collections import deque
from typing import Any

import serial

from edge.joints import Ping, positional_names

from .errors import FRAME_REJECT_REASONS
from .frame_format import (
    FRAME_VERSION,
    MAX_JOINTS,
    BridgeFrame,
    FrameDecoder,
    PongFrame,
    encode_ping,
)
from .sdk_types import SerialPort
from .serial_io import open_serial, read_some
from .stream import MAX_POSITION_RAD, CycleError, JointStream, LinkLostError, Reading
from .url import Options

__all__ = ["FramedStream"]

#: How far (besides a quarter of it) the device clock's advance across a reconnect may
#: differ from the host's time between the receipts around it, s, for the frame after it
#: to go on from the numbering before it (delivery delay and bursts on both sides).
RECONNECT_CLOCK_SLACK_S = 0.1

#: Pings in flight at most (unanswered, not yet given up); before the device's first answer
#: also the number of pings after which a silent device is taken to predate pings.
MAX_PINGS_IN_FLIGHT = 8
#: How long one ping write may wait for room in the output buffer, s (a device that never
#: reads must not stall the stream).
PING_WRITE_TIMEOUT_S = 0.002
#: The shortest ``frame_timeout_s`` a URL may ask for, s.
MIN_FRAME_TIMEOUT_S = 0.001
#: How far behind the last delivered frame (in sequence numbers) a frame may be numbered and
#: be taken as late (dropped) at once, its device time permitting.
REORDER_WINDOW = 8
#: How far behind the last delivered frame a frame may be numbered and still be late: one
#: numbered more than :data:`REORDER_WINDOW` and at most this far behind, with a device time
#: that fits its number, is late if the frames after it go on from the last delivered one,
#: else the device started again (docs/bridge-frame-protocol.md, "Receiver rules").
LATE_WINDOW = 256
#: The frame period assumed until two frames in a row have measured it, us (100 Hz).
DEFAULT_PERIOD_US = 10_000

#: What each reason for rejecting frames (:attr:`~.errors.FrameError.reason`) points to.
_REJECT_HINTS = {
    "crc": "with a bad CRC-32: check the baud rate (baud={baud} in the URL) and the "
           "framing (COBS blocks ending in 0x00, CRC-32/ISO-HDLC; "
           "docs/bridge-frame-protocol.md)",
    "framing": "not valid COBS: check the baud rate (baud={baud} in the URL) and that the "
               "device sends COBS frames",
    "version": "of an unsupported protocol version: the bridge reads version {version}; "
               "update the device's firmware or the bridge",
    "length": "whose length disagrees with their joint-count field (16 + 12*J + 4 bytes): "
              "check the firmware's frame layout, or bytes lost on the line (baud={baud})",
    "joint count": "with a joint count outside 1..32: check the firmware",
    "type": "of an unknown frame type: check the baud rate (baud={baud}) and the "
            "firmware version",
}


class FramedStream(JointStream):
    """Framed-stream transport.

    Args:
        url: the URL; port: device path or pyserial URL; joints: expected J (a frame with
            another count is counted as corrupt); baud: line rate; frame_timeout_s: how long one
            cycle waits for a frame before it counts as a timeout; ping_s: mean interval
            between pings, s (each interval drawn uniformly in 0.5..1.5 times it; 0: no
            pings); ping_timeout_s: how long a ping waits for its answer before it is given up.
    """

    URL_FORM = ("frame:///dev/ttyACM0?baud=921600&joints=6&frame_timeout_s=0.05&ping_s=0.02"
                "&ping_timeout_s=0.5&read_timeout_s=1.0&max_position_rad=1e6")

    def __init__(self, url: str, port: str, *, joints: int, baud: int = 921600,
                 frame_timeout_s: float = 0.05, ping_s: float = 0.02,
                 ping_timeout_s: float = 0.5, **kw: Any):
        super().__init__(url, **kw)
        self.port, self.joints, self.baud = port, joints, baud
        self.frame_timeout_s = frame_timeout_s
        self.ping_s, self.ping_timeout_s = float(ping_s), float(ping_timeout_s)
        self._ser: SerialPort | None = None
        self._decoder = FrameDecoder()
        self._rejected_at_valid: dict[str, int] = {}  # decoder.rejected at the last valid frame
        self._frames: deque[tuple[int, BridgeFrame]] = deque()  # (receipt ns, frame)
        # the last frame delivered before the latest reconnect: (number, device time us,
        # receipt ns)
        self._before_reconnect: tuple[int, int, int] | None = None
        self._last_receipt_ns = 0  # of the last frame delivered
        self._last_seq: int | None = None  # the last frame delivered: its number,
        self._last_time_us = 0  # its device time,
        self._period_us = DEFAULT_PERIOD_US  # and the device's frame period measured so far
        self._rng = random.Random()
        self._ping_seq = 0  # never reset: a late answer from before a reconnect matches nothing
        self._in_flight: dict[int, tuple[int, int]] = {}  # ping sequence -> (send ns, host us)
        self._evidence: list[Ping] = []  # answered or given up, for the next reading
        self._next_ping_ns = 0
        self._pinging = False
        # over the stream's life: sent, answered, given up, answers too late or not ours,
        # pings skipped because the device did not read
        self._ping_counts = {"sent": 0, "answered": 0, "unanswered": 0, "late": 0,
                             "write_timeouts": 0}
        self._sent_here = self._answered_here = 0  # since the device was (re)opened
        self._ping_state = ""

    @classmethod
    def _url_options(cls, opts: Options) -> dict[str, Any]:
        return dict(joints=opts.int("joints", 6, 1, MAX_JOINTS),
                    baud=opts.int("baud", 921600, 1200),
                    frame_timeout_s=opts.float("frame_timeout_s", 0.05, MIN_FRAME_TIMEOUT_S),
                    read_timeout_s=opts.float("read_timeout_s", 1.0, 0.0),
                    max_position_rad=opts.float("max_position_rad", MAX_POSITION_RAD, 1.0),
                    ping_s=opts.float("ping_s", 0.02, 0.0),
                    ping_timeout_s=opts.float("ping_timeout_s", 0.5, 0.001))

    @property
    def joint_names(self) -> list[str]:
        return positional_names(self.joints)

    def describe(self) -> dict:
        """The URL, the joints and the ping state (whether the device answers pings)."""
        return {**super().describe(), "ping": self._ping_state}

    def _open(self) -> None:
        self._ser = open_serial(self.port, self.baud, write_timeout_s=PING_WRITE_TIMEOUT_S)
        self._decoder.reset()
        self._rejected_at_valid = dict(self._decoder.rejected)
        self._frames.clear()
        self._in_flight.clear()
        self._pinging = self.ping_s > 0
        self._sent_here = self._answered_here = 0
        # the first ping at a random moment within one mean interval
        self._next_ping_ns = time.monotonic_ns() + int(self._rng.uniform(0, self.ping_s) * 1e9)
        self._publish("waiting for the first answer" if self._pinging else "off (ping_s=0)")

    def _close(self) -> None:
        if self._ser is not None:
            try:
                self._ser.close()
            except OSError:
                pass
            self._ser = None

    # -- pings --------------------------------------------------------------------------
    def _publish(self, state: str | None = None) -> None:
        """Keep ``stats.extra["ping"]`` (the counts and the state) up to date."""
        if state is not None:
            self._ping_state = state
        self.stats.extra["ping"] = {**self._ping_counts, "state": self._ping_state}

    def _until_ping_s(self) -> float:
        """Seconds to the next ping (inf when not pinging), >= 0."""
        if not self._pinging:
            return float("inf")
        return max(0.0, (self._next_ping_ns - time.monotonic_ns()) / 1e9)

    def _service_pings(self, ser: SerialPort) -> None:
        """Give up pings past their timeout; send the next ping if it is due."""
        now = time.monotonic_ns()
        timeout_ns = int(self.ping_timeout_s * 1e9)
        c = self._ping_counts
        for seq, (sent, _) in list(self._in_flight.items()):
            if now - sent > timeout_ns:
                del self._in_flight[seq]
                self._evidence.append(Ping(sent))
                c["unanswered"] += 1
                self._publish()
        if self._pinging and not self._answered_here and self._sent_here >= MAX_PINGS_IN_FLIGHT:
            # no more pings to a device that answered none of its first ones: wait for those
            # to be given up, then stop
            if self._in_flight:
                self._next_ping_ns = min(t for t, _ in self._in_flight.values()) + timeout_ns + 1
            else:
                self._pinging = False
                self._publish(f"off: the device answered none of {MAX_PINGS_IN_FLIGHT} pings "
                              f"(firmware from before pings?); latency from the device "
                              f"stamps alone")
            return
        if not self._pinging or now < self._next_ping_ns:
            return
        self._next_ping_ns = now + int(self.ping_s * self._rng.uniform(0.5, 1.5) * 1e9)
        if len(self._in_flight) >= MAX_PINGS_IN_FLIGHT:
            return
        seq = self._ping_seq
        self._ping_seq = (seq + 1) & 0xFFFFFFFF
        host_us = now // 1000
        data = encode_ping(seq, host_us)
        send_ns = time.monotonic_ns()
        try:
            ser.write(data)
        except serial.SerialTimeoutException:
            # pyserial raises this when the port stays unwritable after the bytes were
            # written, or when the device does not read: wait for an answer either way (at
            # most MAX_PINGS_IN_FLIGHT are then outstanding)
            c["write_timeouts"] += 1
        except (serial.SerialException, OSError) as exc:
            raise LinkLostError(f"{self.port}: ping write failed: {exc}") from exc
        self._in_flight[seq] = (send_ns, host_us)
        c["sent"] += 1
        self._sent_here += 1
        self._publish()

    def _on_pong(self, pong: PongFrame, receipt_ns: int) -> None:
        sent = self._in_flight.pop(pong.sequence, None)
        c = self._ping_counts
        if sent is None or sent[1] != pong.host_time_us:  # given up, or not this host's ping
            c["late"] += 1
            self._publish()
            return
        self._evidence.append(Ping(sent[0], pong.device_rx_us * 1000, pong.device_tx_us * 1000,
                                   receipt_ns))
        c["answered"] += 1
        self._answered_here += 1
        self._publish("answering")

    # -- cycle --------------------------------------------------------------------------
    def _pump(self, ser: SerialPort, timeout_s: float) -> None:
        data = read_some(ser, timeout_s)
        if data:
            now = time.monotonic_ns()
            for m in self._decoder.feed(data):
                if isinstance(m, BridgeFrame):
                    self._frames.append((now, m))
                elif isinstance(m, PongFrame):
                    self._on_pong(m, now)
            self.stats.crc_errors = self._decoder.crc_errors
            self.stats.resyncs = self._decoder.resyncs
            if self._decoder.rejected:
                self.stats.extra["rejected_frames"] = dict(self._decoder.rejected)

    def _rejected_since_valid(self) -> str:
        """The frames rejected since the last valid one, by reason, each with what to check
        (``""`` if none)."""
        seen = self._decoder.rejected
        parts = []
        for reason in FRAME_REJECT_REASONS:
            n = seen.get(reason, 0) - self._rejected_at_valid.get(reason, 0)
            if n > 0:
                hint = _REJECT_HINTS[reason].format(baud=self.baud, version=FRAME_VERSION)
                parts.append(f"{n} {hint} (last: {self._decoder.examples[reason]})")
        if not parts:
            return ""
        return (f"frames came but were rejected since the last valid one: "
                f"{'; '.join(parts)}")

    def _cycle(self) -> Reading:
        ser = self._ser
        if ser is None:
            raise LinkLostError(f"{self.port}: not open")
        deadline = time.monotonic() + self.frame_timeout_s
        self._service_pings(ser)
        while True:
            while not self._frames:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    rejected = self._rejected_since_valid()
                    raise CycleError("timeout", f"{self.port}: expected a valid frame within "
                                     f"{self.frame_timeout_s} s, found none"
                                     f"{'; ' + rejected if rejected else ''}",
                                     cause=bool(rejected))
                self._pump(ser, min(remaining, self._until_ping_s()))
                self._service_pings(ser)
            receipt_ns, f = self._frames.popleft()
            if f.position_rad.shape[0] != self.joints:
                rej = self._decoder.rejected
                rej["joints"] = rej.get("joints", 0) + 1
                self.stats.extra["rejected_frames"] = dict(rej)
                raise CycleError("lost", f"{self.port}: expected {self.joints} joints per "
                                 f"frame (joints={self.joints} in the URL), found "
                                 f"{f.position_rad.shape[0]}: set joints= to the device's "
                                 "count")
            order, skipped = self._order(f)
            if order == "suspect":  # the frames after it tell a late frame from a restart
                verdict = self._judge(ser, deadline)
                if verdict is None:  # none came in time: judge it again next cycle
                    self._frames.appendleft((receipt_ns, f))
                    raise CycleError("timeout", f"{self.port}: expected a frame after frame "
                                     f"{f.sequence} (numbered behind the last one delivered, "
                                     f"{self._last_seq}) within {self.frame_timeout_s} s, "
                                     f"found none")
                order = verdict
            if order != "late":
                break
            self.stats.late_frames += 1  # older than one delivered: dropped, wait for the next
        self._rejected_at_valid = dict(self._decoder.rejected)
        sequenced = self._last_seq is not None  # skipped counts frames lost since the last
        if not sequenced and self._before_reconnect is not None:
            skipped = self._numbered_on(f, receipt_ns)
            sequenced = skipped is not None
            skipped = skipped or 0
        self._before_reconnect = None
        if order != "duplicate":  # a repeated frame moves neither the numbering nor the clock
            if order == "next" and self._last_seq is not None:
                dt = f.device_time_us - self._last_time_us
                if dt > 0:
                    self._period_us = dt / (skipped + 1)
            self._last_seq, self._last_time_us = f.sequence, f.device_time_us
            self._last_receipt_ns = receipt_ns
        pings, self._evidence = tuple(self._evidence), []
        return Reading(f.position_rad, f.velocity_rad_s, f.effort_nm, receipt_ns,
                       device_counter=f.sequence, device_stamp_ns=f.device_time_us * 1000,
                       fault="device fault flag" if f.fault else "", skipped=skipped,
                       pings=pings, restart=order == "restart",
                       sequenced=order in ("next", "duplicate") and sequenced)

    def _judge(self, ser: SerialPort, deadline: float) -> str | None:
        """Whether the frame just taken (numbered more than :data:`REORDER_WINDOW` behind
        the last one delivered, its clock consistent with that) came late or the device
        started again, as the frames queued after it say: ``"late"`` if one goes on from
        the last delivered one (the same number again, or ahead of it by at most
        :data:`LATE_WINDOW`) after fewer than :data:`REORDER_WINDOW` frames that are behind
        it too (more late frames); ``"restart"`` after :data:`REORDER_WINDOW` such frames
        (the device numbers on from its new start) or at any other frame; ``None`` if
        neither came before ``deadline`` (monotonic s)."""
        seen = behind = 0
        while True:
            for _, g in list(self._frames)[seen:]:
                seen += 1
                order, skipped = self._order(g)
                if order in ("late", "suspect"):  # behind the last delivered one too
                    behind += 1
                    if behind >= REORDER_WINDOW:
                        return "restart"
                    continue
                go_on = order == "duplicate" or (order == "next" and skipped < LATE_WINDOW)
                return "late" if go_on else "restart"
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self._pump(ser, min(remaining, self._until_ping_s()))
            self._service_pings(ser)

    def _order(self, f: BridgeFrame) -> tuple[str, int]:
        """Where frame ``f`` stands against the last one delivered: ``("next", n)`` (n frames
        skipped before it), ``("duplicate", 0)`` (the same number again: delivered, the
        stream flags it ``STALE``), ``("late", 0)`` (numbered k <= :data:`REORDER_WINDOW`
        behind it with a device time at most 2 (k + 1) frame periods behind: dropped),
        ``("suspect", 0)`` (the same, but :data:`REORDER_WINDOW` < k <= :data:`LATE_WINDOW`:
        late or a restart, as the frames after it say, :meth:`_judge`) or ``("restart", 0)``
        (any other step back, or forward by 2^31 or more: the device started again).
        docs/bridge-frame-protocol.md, "Receiver rules".
        """
        if self._last_seq is None:
            return "next", 0
        ahead = (f.sequence - self._last_seq - 1) & 0xFFFFFFFF
        if ahead < 0x80000000:
            return "next", ahead
        behind = (self._last_seq - f.sequence) & 0xFFFFFFFF
        if behind == 0:
            return "duplicate", 0
        lag_us = self._last_time_us - f.device_time_us
        if behind <= LATE_WINDOW and 0 <= lag_us <= 2 * (behind + 1) * self._period_us:
            return ("late" if behind <= REORDER_WINDOW else "suspect"), 0
        return "restart", 0

    def _numbered_on(self, f: BridgeFrame, receipt_ns: int) -> int | None:
        """After a reconnect: how many frames the device numbered while it was away (lost),
        where frame ``f`` (received at ``receipt_ns``) goes on from the last one before it:
        its number ahead by ``n`` (1 <= n < 2^31), its clock ahead by about ``n`` frame
        periods (within a quarter and 2 periods) and by about the host's time between the
        two receipts (within a quarter and :data:`RECONNECT_CLOCK_SLACK_S`: a device that
        restarted while away and has since run longer than before numbers and clocks on
        too, but from another moment). None where it does not: the numbering then starts
        afresh."""
        assert self._before_reconnect is not None
        seq, t_us, rx_ns = self._before_reconnect
        ahead = (f.sequence - seq) & 0xFFFFFFFF
        dt = f.device_time_us - t_us
        if not 1 <= ahead < 0x80000000 or dt <= 0:
            return None
        want = ahead * self._period_us
        host_us = (receipt_ns - rx_ns) / 1e3
        if abs(dt - host_us) > 0.25 * host_us + RECONNECT_CLOCK_SLACK_S * 1e6:
            return None
        return ahead - 1 if abs(dt - want) <= 0.25 * want + 2 * self._period_us else None

    def _reconnect(self, deadline_ns: int, cause: Exception) -> None:
        if self._last_seq is not None:
            self._before_reconnect = (self._last_seq, self._last_time_us,
                                      self._last_receipt_ns)
        self._last_seq = None
        super()._reconnect(deadline_ns, cause)
