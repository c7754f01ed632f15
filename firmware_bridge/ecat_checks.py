"""Per-cycle checks of the EtherCAT master (:mod:`.ethercat`), kept apart from the stream.

* :func:`dc_reply_is_current`: a reply's distributed-clock system time against the host's
  send and receipt stamps (a late, replayed or duplicated frame fails); :class:`DcAnchor`:
  the last accepted reply it is checked against, re-anchored when the DC time jumps;
* :func:`wkc_share`, :func:`slave_label`: each slave's share of the working counter in its
  AL state, and how a slave is named in messages (chain position, name, AL state and status
  code, raw and decoded with the ETG.1000.6 tables of :mod:`.ecat_tables`);
* :func:`socket_fds`, :func:`soem_raw_sockets`: finding SOEM's raw socket among the
  process's descriptors, so the stream can bound the receive wait itself.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct

from .ecat_tables import AL, al_state_text, al_status_text
from .sdk_types import EcatSlave

__all__ = ["ABSENT_OBJECT_ABORTS", "CLOCK_RATE_TOLERANCE_PPM", "DC_JUMP_CONFIRM", "IFACE_GONE",
           "RECEIVE_ALLOWANCE_US", "DcAnchor", "dc_reply_is_current", "dc_step_ns", "iface_trouble", "slave_label", "socket_fds", "soem_raw_sockets",
           "wkc_share"]

#: SDO abort codes that mean "this object or subindex is not there" (ETG.1000.6).
ABSENT_OBJECT_ABORTS = (0x06020000, 0x06090011)

#: Once a reply is waiting, how long SOEM may still poll for the cycle's other frames, us.
RECEIVE_ALLOWANCE_US = 100

#: Tolerance for the rates of the DC and host clocks, parts per million (ESC and host
#: crystals are specified to well under 100 ppm each).
CLOCK_RATE_TOLERANCE_PPM = 200.0


#: ``ioctl`` request and interface flags (Linux ``<linux/sockios.h>``, ``<net/if.h>``).
SIOCGIFFLAGS = 0x8913
IFF_UP, IFF_RUNNING = 0x1, 0x40
#: How :func:`iface_trouble` says that no interface has the name any more.
IFACE_GONE = "is gone (see 'ip link'; unplugged or removed)"

#: Replies in a row, each a plausible cycle after the one before it, that make a DC time
#: that fails against the last accepted reply a jump of the clock (re-anchored) rather than
#: late, replayed or duplicated frames.
DC_JUMP_CONFIRM = 3


def socket_fds() -> set[int]:
    """Descriptors of the process that are sockets (empty without procfs)."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:  # no procfs: nothing found, the receive wait stays as SOEM has it
        return set()
    fds = set()
    for name in names:
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                fds.add(int(name))
        except OSError:
            continue
    return fds


def soem_raw_sockets(before: set[int], iface: str) -> list[int]:
    """Descriptors of the raw packet sockets bound to ``iface`` opened since ``before``.

    Args:
        before: socket descriptors of the process before ``Master.open`` (:func:`socket_fds`).
        iface: the interface SOEM opened.

    Returns:
        The descriptors (SOEM's primary socket; two with a redundant port).
    """
    found = []
    for fd in sorted(socket_fds() - before):
        try:
            with socket.socket(fileno=os.dup(fd)) as sk:
                if sk.family == socket.AF_PACKET and sk.getsockname()[0] == iface:
                    found.append(fd)
        except OSError:
            continue
    return found


def iface_trouble(iface: str) -> str:
    """Why no frame can pass ``iface``, as the kernel sees it in this network namespace, or
    ``""`` where it is up with a link: ``network interface IFACE is gone (...)`` when no
    interface has that name any more, ``... is down (...)`` when it is administratively
    down, ``... has no link (...)`` when it is up without a carrier."""
    try:
        socket.if_nametoindex(iface)
    except OSError:
        return f"network interface {iface} {IFACE_GONE}"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sk:
            req = struct.pack("16sH", iface.encode()[:15], 0)
            flags = struct.unpack("16sH", fcntl.ioctl(sk.fileno(), SIOCGIFFLAGS, req))[1]
    except OSError:
        return ""
    if not flags & IFF_UP:
        return f"network interface {iface} is down (set it up: ip link set {iface} up)"
    if not flags & IFF_RUNNING:
        return f"network interface {iface} has no link (no carrier: check the cable)"
    return ""


def dc_step_ns(dc_ns: int, receipt_ns: int, last: tuple[int, int, int]) -> int:
    """How far the DC time moved beyond the host's elapsed time since ``last`` (``(dc,
    send, receipt)`` of an earlier reply), ns: positive ahead, negative back. A 32-bit
    system time is taken modulo 2**32, into [-2**31, 2**31) ns."""
    step = (dc_ns - last[0]) - (receipt_ns - last[2])
    if dc_ns < 1 << 32 and last[0] < 1 << 32:
        step = (step + (1 << 31)) % (1 << 32) - (1 << 31)
    return step


def wkc_share(state: int) -> int:
    """A slave's share of the LRW working counter in AL ``state`` (ETG.1000.4: +1 for inputs
    read, from SAFE-OP; +2 for outputs written, in OP only)."""
    return 3 if state == AL["OP"] else 1 if state & 0x0F == AL["SAFEOP"] else 0


def slave_label(k: int, s: EcatSlave) -> str:
    """``slave1 AL 0x14 code 0x001B ('Drive': SAFE-OP + ERROR, Sync manager watchdog)``:
    a slave by chain position and name, its AL state and status code, raw and decoded."""
    return (f"slave{k} AL 0x{s.state:02X} code 0x{s.al_status:04X} "
            f"({getattr(s, 'name', '')!r}: {al_state_text(s.state)}, "
            f"{al_status_text(s.al_status)})")


def dc_reply_is_current(dc_ns: int, send_ns: int, receipt_ns: int, last: tuple[int, int, int],
                        tolerance_ppm: float = CLOCK_RATE_TOLERANCE_PPM) -> bool:
    """Whether a reply's DC system time shows it passed the slave during this cycle.

    The frame of this cycle passed the reference clock after it was sent (``send_ns``) and
    before it came back (``receipt_ns``); the last accepted frame likewise within its own
    send and receipt. So the DC time elapsed between the two, in ns, must lie in
    ``(send_ns - last_receipt_ns, receipt_ns - last_send_ns)``, widened by the clocks' rate
    tolerance. A late, replayed or duplicated frame carries an older DC time and falls
    below. Host preemption only widens the interval, so it never rejects a current reply.

    Args:
        dc_ns: the reply's DC system time (``master.dc_time``), ns; a 32-bit DC is compared
            modulo 2**32.
        send_ns, receipt_ns: host ``time.monotonic_ns()`` just before the send and just
            after the receive of this cycle.
        last: ``(dc_ns, send_ns, receipt_ns)`` of the last accepted reply.
        tolerance_ppm: allowed rate difference of the two clocks.

    Returns:
        True if the reply is current.
    """
    last_dc, last_send, last_rx = last
    delta = dc_ns - last_dc
    if dc_ns < 1 << 32 and last_dc < 1 << 32:  # a 32-bit system time wraps every 4.3 s
        delta %= 1 << 32
    lo, hi = send_ns - last_rx, receipt_ns - last_send
    slack = tolerance_ppm * 1e-6 * hi
    return lo - slack < delta < hi + slack


class DcAnchor:
    """The reply each DC system time is checked against (:func:`dc_reply_is_current`).

    A reply that is current against the last accepted one is accepted and becomes it. One
    that is not is rejected (a late, replayed or duplicated frame), unless it is the
    ``confirm``-th of a run of rejected replies in a row each current against the one
    before it: then the DC time jumped (stepped back, or a 32-bit system time wrapped during
    an outage longer than 4.3 s) and the stream re-anchors on it. A single late or copied
    reply starts such a run but the next current reply ends it.

    Args:
        confirm: replies in a row that make a jump (>= 2; :data:`DC_JUMP_CONFIRM`).
    """

    def __init__(self, confirm: int = DC_JUMP_CONFIRM):
        if confirm < 2:
            raise ValueError(f"DcAnchor confirm: expected >= 2, found {confirm}")
        self.confirm = confirm
        self.last: tuple[int, int, int] | None = None  # (dc, send, receipt) of the last accepted
        self._run: list[tuple[int, int, int]] = []  # rejected replies in a row that agree

    def reset(self) -> None:
        """Forget the anchor (the link was reopened): the next reply is accepted."""
        self.last, self._run = None, []

    @property
    def pending(self) -> int:
        """Rejected replies in a row, each current against the one before (0..confirm-1)."""
        return len(self._run)

    def check(self, dc_ns: int, send_ns: int, receipt_ns: int) -> str:
        """Judge one reply: ``"current"`` (accepted), ``"jump"`` (accepted: the DC time
        jumped and this reply completes the run that shows it) or ``"stale"`` (rejected).

        Args:
            dc_ns: the reply's DC system time, ns; send_ns, receipt_ns: host
                ``time.monotonic_ns()`` around its cycle.
        """
        now = (dc_ns, send_ns, receipt_ns)
        if self.last is None or dc_reply_is_current(dc_ns, send_ns, receipt_ns, self.last):
            self.last, self._run = now, []
            return "current"
        if self._run and dc_reply_is_current(dc_ns, send_ns, receipt_ns, self._run[-1]):
            self._run.append(now)
        else:
            self._run = [now]
        if len(self._run) >= self.confirm:
            self.last, self._run = now, []
            return "jump"
        return "stale"
