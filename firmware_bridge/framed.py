"""``frame://``: the COBS + CRC32 framed stream of custom controller firmware.

URL form: ``frame:///dev/ttyACM0?baud=921600&joints=6&frame_timeout_s=0.05``. The device sends
frames on its own clock (see :mod:`.frame_format`); each :meth:`read` returns the next valid
frame. Corrupt frames are counted (``crc_errors``) and skipped; the sequence number marks gaps.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from edge.joints import positional_names

from .frame_format import MAX_JOINTS, BridgeFrame, FrameDecoder
from .sdk_types import SerialPort
from .serial_io import open_serial, read_some
from .stream import CycleError, JointStream, LinkLostError, Reading
from .url import Options

__all__ = ["FramedStream"]


class FramedStream(JointStream):
    """Framed-stream transport.

    Args:
        url: the URL; port: device path or pyserial URL; joints: expected J (a frame with
            another count is counted as corrupt); baud: line rate; frame_timeout_s: how long one
            cycle waits for a frame before it counts as a timeout.
    """

    URL_FORM = "frame:///dev/ttyACM0?baud=921600&joints=6&frame_timeout_s=0.05"

    def __init__(self, url: str, port: str, *, joints: int, baud: int = 921600,
                 frame_timeout_s: float = 0.05, **kw: Any):
        super().__init__(url, **kw)
        self.port, self.joints, self.baud = port, joints, baud
        self.frame_timeout_s = frame_timeout_s
        self._ser: SerialPort | None = None
        self._decoder = FrameDecoder()
        self._frames: deque[tuple[int, BridgeFrame]] = deque()  # (receipt ns, frame)
        self._last_seq: int | None = None

    @classmethod
    def _url_options(cls, opts: Options) -> dict[str, Any]:
        return dict(joints=opts.int("joints", 6, 1, MAX_JOINTS),
                    baud=opts.int("baud", 921600, 1200),
                    frame_timeout_s=opts.float("frame_timeout_s", 0.05, 0.0),
                    read_timeout_s=opts.float("read_timeout_s", 1.0, 0.0))

    @property
    def joint_names(self) -> list[str]:
        return positional_names(self.joints)

    def _open(self) -> None:
        self._ser = open_serial(self.port, self.baud)
        self._decoder.reset()
        self._frames.clear()

    def _close(self) -> None:
        if self._ser is not None:
            try:
                self._ser.close()
            except OSError:
                pass
            self._ser = None

    def _pump(self, ser: SerialPort, timeout_s: float) -> None:
        data = read_some(ser, timeout_s)
        if data:
            now = time.monotonic_ns()
            for f in self._decoder.feed(data):
                self._frames.append((now, f))
            self.stats.crc_errors = self._decoder.crc_errors
            self.stats.resyncs = self._decoder.resyncs

    def _cycle(self) -> Reading:
        ser = self._ser
        if ser is None:
            raise LinkLostError(f"{self.port}: not open")
        deadline = time.monotonic() + self.frame_timeout_s
        while not self._frames:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CycleError("timeout", f"{self.port}: expected a frame within "
                                 f"{self.frame_timeout_s} s, found none")
            self._pump(ser, remaining)
        receipt_ns, f = self._frames.popleft()
        if f.position_rad.shape[0] != self.joints:
            self._decoder.crc_errors += 1
            self.stats.crc_errors = self._decoder.crc_errors
            raise CycleError("lost", f"{self.port}: expected {self.joints} joints per frame, "
                             f"found {f.position_rad.shape[0]}")
        skipped = 0
        if self._last_seq is not None:
            diff = (f.sequence - self._last_seq - 1) & 0xFFFFFFFF
            skipped = diff if diff < 0x80000000 else 0  # a huge jump is a device restart
        self._last_seq = f.sequence
        return Reading(f.position_rad, f.velocity_rad_s, f.effort_nm, receipt_ns,
                       device_counter=f.sequence, device_stamp_ns=f.device_time_us * 1000,
                       fault="device fault flag" if f.fault else "", skipped=skipped)

    def _reconnect(self, deadline_ns: int, cause: Exception) -> None:
        self._last_seq = None
        super()._reconnect(deadline_ns, cause)
