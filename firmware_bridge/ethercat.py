"""``ethercat://IFACE``: CiA 402 drives through the unmodified ``pysoem`` (SOEM).

URL form: ``ethercat://eth0?cycle_us=1000&timeout_us=2000&state_timeout_s=3&encoder_increments=0``.

Bring-up: ``config_init`` (slaves, SII identity), ``config_map`` (PDO map read over CoE),
SAFE-OP, ``config_dc``, then OP after one valid process-data exchange. Each slave is one
joint: the TxPDO assigned to SM3 (read over SDO from 0x1C13 and the PDO's entries) locates
0x6064 position, 0x606C velocity and 0x6077 torque in the inputs; positions are scaled by
the encoder increments per revolution (0x608F, or ``encoder_increments`` where the drive has
none) and torque by the rated torque (0x6076; efforts NaN without it), read by SDO.

Every cycle the working counter is checked against ``master.expected_wkc``:

* no frame (wkc < 0, SOEM's ``EC_NOFRAME``): the cycle is lost; the inputs buffer still
  holds the previous cycle's values and is never reported as fresh;
* a frame that came back unprocessed (wkc 0) or any other mismatch: the slaves' AL states
  are read (and kept as their health) and decide, as below;
* wkc equal to what the slaves' AL states predict with some slaves out of OP (each slave adds
  1 for inputs read, 2 for outputs written, :func:`wkc_share`): a slave in SAFE-OP has fresh
  inputs and the sample is ``FAULT`` with "outputs not applied"; a slave below SAFE-OP has
  its joint set to NaN (its input buffer is old) while the others stay fresh;
* anything else: lost cycle for every slave (one LRW datagram carries the whole line, so
  its working counter cannot say which slave missed it).

Per-slave health (state, AL status, working-counter share, lost cycles) is kept in
``stats.extra["slaves"]``; slaves are named by :func:`slave_label`.

Freshness does not rest on SOEM's frame index (16 values) and the working counter alone: a
reply that comes back one index wrap late, or a byte-identical copy of an earlier reply,
matches both. Where the chain has a distributed clock (``config_dc``), SOEM adds an FRMW
datagram that reads the reference slave's DC system time (register 0x0910, ETG.1000.4) into
every process-data frame; the reply is accepted only if that time advanced since the last
accepted reply by an amount the host's own send and receipt stamps allow (see
:func:`dc_reply_is_current`). A reply that fails is a lost cycle (``stats.stale_replies``),
never a sample, unless it completes a run of replies that agree with each other: then the
DC time jumped and the stream re-anchors on it (:class:`~.ecat_checks.DcAnchor`,
``stats.clock_jumps``). Without DC the bridge has no per-cycle value and says so in
:meth:`EthercatStream.describe` (``freshness``).

Receive wait: SOEM (as built into pysoem) opens its raw socket with ``SO_RCVTIMEO`` = 1 us
and calls a blocking ``recv()`` in a loop until ``timeout_us`` has passed. Linux rounds a
socket timeout up to whole timer ticks, so a cycle whose frame never comes back waits a
full tick whatever ``timeout_us`` says (measured on the development machine: 6.1-12.1 ms,
median 12.0 ms, for one empty ``recv()``). Once the slaves are in OP the bridge waits
for the reply itself with ``select()`` on that socket (found among the process's
descriptors, see :func:`soem_raw_sockets`; ``select`` sleeps on a high-resolution timer)
until ``timeout_us`` after the send, and only then calls ``receive_processdata`` with
``O_NONBLOCK`` set for the duration of the call, so its ``recv()`` returns at once. The wait
ends on time (plus ``RECEIVE_ALLOWANCE_US`` for the other frames of a multi-frame cycle)
and no core is kept busy; state and mailbox reads keep SOEM's blocking receive.
"""

from __future__ import annotations

import collections
import fcntl
import math
import os
import select
import struct
import time
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from .ecat_checks import (
    ABSENT_OBJECT_ABORTS,
    IFACE_GONE,
    RECEIVE_ALLOWANCE_US,
    DcAnchor,
    dc_reply_is_current,
    dc_step_ns,
    iface_trouble,
    slave_label,
    socket_fds,
    soem_raw_sockets,
    wkc_share,
)
from .ecat_tables import AL, CIA402, al_state_text, al_status_text, sdo_abort_text
from .encoder import TurnCounter
from .errors import BridgeError, ProtocolError, require
from .realtime import RealtimePriority
from .sdk_types import EcatMaster, EcatSlave, Pysoem
from .stream import MAX_POSITION_RAD, CycleError, JointStream, LinkLostError, Reading
from .url import Options

#: lost-frame receive waits kept for inspection (``EthercatStream.lost_waits_us``)
LOST_WAITS_KEPT = 1000
#: The longest ``cycle_us`` a URL may ask for (100 ms, 10 Hz): a cycle is paced before it
#: runs, so a longer one would outlast the read deadline (``read_timeout_s``, 1 s) unseen.
MAX_CYCLE_US = 100_000
#: The longest receive wait ``timeout_us`` a URL may ask for (100 ms).
MAX_TIMEOUT_US = 100_000

__all__ = ["EthercatStream", "dc_reply_is_current", "slave_label", "soem_raw_sockets",
           "wkc_share"]

_FMT = {"u16": "<H", "i16": "<h", "u32": "<I", "i32": "<i"}

class EthercatStream(JointStream):
    """EtherCAT master over one network interface; one joint per CiA 402 slave."""

    URL_FORM = ("ethercat://eth0?cycle_us=1000&timeout_us=2000&state_timeout_s=3"
                "&encoder_increments=0&rt_priority=0&read_timeout_s=1.0"
                "&max_position_rad=1e6")

    def __init__(self, url: str, iface: str, *, cycle_us: int = 1000, timeout_us: int = 2000,
                 state_timeout_s: float = 3.0, encoder_increments: int = 0,
                 rt_priority: int = 0, **kw: Any):
        kw.setdefault("rate_hz", 1e6 / cycle_us if cycle_us else 0.0)
        super().__init__(url, **kw)
        self.iface, self.timeout_us, self.state_timeout_s = iface, timeout_us, state_timeout_s
        self.encoder_increments = encoder_increments
        self._pysoem: Pysoem | None = None
        self._master: EcatMaster | None = None
        self.layout: list[dict[str, Any]] = []
        self.cycles = 0
        self.has_dc = False
        self._states_noted = False  # some slave was last seen out of OP
        self.receive_wait = "not open"
        self._raw_fds: list[int] = []
        self._bounded = False
        self._fd_flags: list[int] = []
        self._dc = DcAnchor()  # the DC time of the last accepted reply, re-anchored on jumps
        self._iface_known = False
        #: the slaves' int32 position counts, unwrapped across the int32 wrap
        self._counts = TurnCounter(1 << 32)
        #: the bridge's own wait (send to giving up, us) for each of the last lost frames
        self.lost_waits_us: collections.deque[float] = collections.deque(maxlen=LOST_WAITS_KEPT)
        #: SCHED_FIFO for the thread that runs the cycles (``rt_priority``; 0: off): applied
        #: once the slaves are in OP, moved to whichever thread runs the cycles, undone at
        #: close
        self.realtime = RealtimePriority(rt_priority, url)

    @classmethod
    def _url_options(cls, opts: Options) -> dict[str, Any]:
        return dict(cycle_us=opts.int("cycle_us", 1000, 0, MAX_CYCLE_US),
                    timeout_us=opts.int("timeout_us", 2000, 1, MAX_TIMEOUT_US),
                    state_timeout_s=opts.float("state_timeout_s", 3.0, 0.0),
                    encoder_increments=opts.int("encoder_increments", 0, 0),
                    rt_priority=opts.int("rt_priority", 0, 0, 99),
                    read_timeout_s=opts.float("read_timeout_s", 1.0, 0.0),
                    max_position_rad=opts.float("max_position_rad", MAX_POSITION_RAD, 1.0))

    @property
    def joint_names(self) -> list[str]:
        return [d["name"] for d in self.layout]

    def _sdo(self, k: int, slave: EcatSlave, index: int, sub: int, fmt: str, *,
             optional: bool = False) -> int | None:
        """Read one object by SDO; ``None`` for an absent optional object.

        Raises:
            ProtocolError: naming the slave by position and name, the object, and the abort
                code in hex with its ETG.1000.6 text.
        """
        pysoem = self._pysoem
        assert pysoem is not None  # _open() loads it before reading objects
        try:
            raw = slave.sdo_read(index, sub)
        except (pysoem.SdoError, pysoem.MailboxError, pysoem.WkcError) as exc:
            code = getattr(exc, "abort_code", None)
            if optional and code in ABSENT_OBJECT_ABORTS:
                return None
            if code is not None:
                why = (f"abort code 0x{code:08X} "
                       f"({getattr(exc, 'desc', '') or sdo_abort_text(code)})")
            else:  # a mailbox or working-counter error: no abort code
                why = f"{type(exc).__name__} {getattr(exc, 'desc', '') or exc}"
            raise ProtocolError(f"{self.url}: slave{k} {slave.name!r}: SDO 0x{index:04X}:{sub} "
                                f"read: expected a value, found {why}") from exc
        size = struct.calcsize(fmt)
        value: int = struct.unpack(fmt, raw[:size].ljust(size, b"\0"))[0]
        return value

    def _map_slave(self, k: int, slave: EcatSlave) -> dict[str, Any]:
        """Locate the CiA 402 inputs in slave ``k``'s process data and read its scaling.

        Returns:
            ``name``, ``offsets`` (object index -> byte offset in the inputs),
            ``rad_per_inc`` (rad per position increment), ``nm_per_permille`` (N*m per
            per mille of rated torque; NaN without 0x6076), ``vendor``, ``product``, ``notes``.

        Raises:
            ProtocolError: an SDO fails, the TxPDOs lack position, velocity or torque on byte
                boundaries, or 0x608F is absent and no ``encoder_increments`` was given.
        """
        # every TxPDO assigned in 0x1C13 (its sub 0 counts them), entries packed in order of
        # assignment, sizes in bits (ETG.1000.6 / CiA 301 PDO mapping: index 16 | sub 8 |
        # bit length 8); padding entries (index 0) only advance the offset
        count = self._sdo(k, slave, 0x1C13, 0, "<B") or 0
        pdos = [self._sdo(k, slave, 0x1C13, i, "<H") or 0 for i in range(1, count + 1)]
        offsets: dict[int, int] = {}
        bit = 0
        for pdo in pdos:
            for sub in range(1, (self._sdo(k, slave, pdo, 0, "<B") or 0) + 1):
                entry = self._sdo(k, slave, pdo, sub, "<I") or 0
                index, bits = entry >> 16, entry & 0xFF
                if index and bit % 8 == 0:
                    offsets.setdefault(index, bit // 8)
                bit += bits
        need = {CIA402[n][0] for n in ("position_actual", "velocity_actual", "torque_actual")}
        if not need <= set(offsets):
            found = ", ".join(f"0x{p:04X}" for p in pdos) or "none"
            raise ProtocolError(f"{self.url}: slave{k} {slave.name!r}: TxPDOs ({found}) "
                                f"expected objects {sorted(hex(i) for i in need)} on byte "
                                f"boundaries, found {sorted(hex(i) for i in offsets)}")
        notes = []
        # 0x608F position encoder resolution and 0x6076 rated torque are optional (CiA 402)
        inc = self._sdo(k, slave, 0x608F, 1, "<I", optional=True)
        revs = 1
        if inc:
            revs = self._sdo(k, slave, 0x608F, 2, "<I", optional=True) or 1
        elif self.encoder_increments:
            inc = self.encoder_increments
            notes.append(f"no 0x608F: {inc} increments per revolution from the URL")
        else:
            raise ProtocolError(f"{self.url}: slave{k} {slave.name!r}: no 0x608F (position "
                                f"encoder resolution, optional in CiA 402), so positions "
                                f"cannot be scaled to rad; give the increments per "
                                f"revolution in the URL as encoder_increments=N (the "
                                f"drive's manual, or 0x6091/0x6092)")
        rated_mnm = self._sdo(k, slave, 0x6076, 0, "<I", optional=True)
        if not rated_mnm:
            notes.append("no 0x6076 (rated torque): efforts are NaN")
        return {"name": f"slave{k}:{slave.name}", "offsets": offsets,
                "rad_per_inc": 2 * math.pi * revs / inc,
                "nm_per_permille": rated_mnm * 1e-6 if rated_mnm else math.nan,
                "vendor": slave.man, "product": slave.id, "notes": notes}

    def _open(self) -> None:
        pysoem = cast(Pysoem, require("pysoem", "pysoem", "the EtherCAT transport"))
        self._pysoem = pysoem
        if not self.iface:
            raise LinkLostError(f"{self.url}: no network interface given (expected "
                                f"ethercat://eth0)")
        m = pysoem.Master()
        fds_before = socket_fds()
        try:
            m.open(self.iface)
        except Exception as exc:  # pysoem raises ConnectionError or a generic error
            trouble = iface_trouble(self.iface)
            if trouble:
                why = trouble
            elif os.geteuid() != 0:
                why = "raw sockets need root or CAP_NET_RAW"
            else:
                why = str(exc)
            raise LinkLostError(f"{self.iface}: cannot open: {why}") from exc
        self._master = m
        # the kernel knows the interface: a lost frame can ask it whether it went down or away
        self._iface_known = IFACE_GONE not in iface_trouble(self.iface)
        self._raw_fds = soem_raw_sockets(fds_before, self.iface)
        if m.config_init() <= 0:
            self._close()
            raise LinkLostError(f"{self.iface}: expected at least one EtherCAT slave, found none")
        m.config_map()
        if m.state_check(AL["SAFEOP"], int(self.state_timeout_s * 1e6)) != AL["SAFEOP"]:
            found = self._states()  # read before closing: closing forgets the master
            self._close()
            raise ProtocolError(f"{self.url}: expected all slaves in SAFE-OP after mapping, "
                                f"found {found}")
        # SOEM then reads the reference clock's system time in every process-data frame
        self.has_dc = bool(m.config_dc())
        self._dc.reset()
        self.layout = [self._map_slave(k, s) for k, s in enumerate(m.slaves)]
        self._counts.reset()  # a slave may have been power-cycled: count from its value
        m.send_processdata()
        m.receive_processdata(self.timeout_us)
        m.state = AL["OP"]
        m.write_state()
        end = time.monotonic() + self.state_timeout_s
        while m.state_check(AL["OP"], 50_000) != AL["OP"]:
            m.send_processdata()
            m.receive_processdata(self.timeout_us)
            if time.monotonic() > end:
                found = self._states()
                self._close()
                raise ProtocolError(f"{self.url}: expected all slaves in OP within "
                                    f"{self.state_timeout_s} s, found {found}")
        self._bound_receive_wait()
        m.read_state()
        self._note_states(m.slaves)  # every slave's health from the start (all in OP)
        try:
            self.realtime.apply()  # the cycles start now; no-op at rt_priority=0
        except BridgeError:
            self._close()
            raise

    def _receive(self, m: EcatMaster, send_ns: int) -> int:
        """``receive_processdata`` with the wait bounded at ``timeout_us`` after the send."""
        if not self._bounded:
            return m.receive_processdata(self.timeout_us)
        deadline_ns = send_ns + self.timeout_us * 1000
        ready, _, _ = select.select(self._raw_fds, [], [],
                                    max(0, deadline_ns - time.monotonic_ns()) / 1e9)
        self._set_nonblocking(True)  # SOEM's recv() returns at once, its loop polls
        try:
            if not ready:  # nothing came: a zero timeout still clears SOEM's index stack
                return m.receive_processdata(0)
            # a frame is waiting; SOEM reads one per try, so a cycle of several frames (LRD
            # + LWR) gets a short allowance even when this process woke late
            left_us = (deadline_ns - time.monotonic_ns()) // 1000
            return m.receive_processdata(max(left_us, RECEIVE_ALLOWANCE_US))
        finally:  # mailbox and state reads keep SOEM's blocking receive (no busy wait)
            self._set_nonblocking(False)

    def _note_lost_wait(self, wait_us: float) -> None:
        """Keep the receive wait of a cycle whose frame never came back, and its summary in
        ``stats.extra["lost_wait_us"]`` (count, mean, max, us over the stream's life): the
        bridge's own share of a lost frame's cost; a longer gap was spent elsewhere."""
        self.lost_waits_us.append(wait_us)
        w = self.stats.extra.setdefault("lost_wait_us", {"count": 0, "mean": 0.0, "max": 0.0})
        w["count"] += 1
        w["mean"] += (wait_us - w["mean"]) / w["count"]
        w["max"] = max(w["max"], wait_us)

    def _set_nonblocking(self, on: bool) -> None:
        for fd, flags in zip(self._raw_fds, self._fd_flags, strict=True):
            fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK if on else flags)

    def _bound_receive_wait(self) -> None:
        """Make SOEM's receive wait end at ``timeout_us`` (module docstring)."""
        self._fd_flags = [fcntl.fcntl(fd, fcntl.F_GETFL) for fd in self._raw_fds]
        self._bounded = bool(self._raw_fds)
        self.receive_wait = (f"bounded at timeout_us={self.timeout_us} (select() on the "
                             f"non-blocking socket)" if self._bounded else
                             "SOEM's blocking recv(): a lost frame waits a kernel timer tick "
                             "(socket not found)")

    def _states(self) -> str:
        m = self._master
        if m is None:
            return "no master (link closed)"
        m.read_state()
        return ", ".join(slave_label(k, s) for k, s in enumerate(m.slaves))

    def _health(self, slaves: Sequence[EcatSlave]) -> list[dict[str, Any]]:
        """Per-slave health in ``stats.extra["slaves"]`` (created on first use)."""
        health = self.stats.extra.get("slaves")
        if health is None or len(health) != len(slaves):
            health = [{"position": k, "name": getattr(s, "name", ""), "state": "OP",
                       "al_status": "0x0000 No error", "wkc_share": 3, "lost_cycles": 0}
                      for k, s in enumerate(slaves)]
            self.stats.extra["slaves"] = health
        return health

    def _note_states(self, slaves: Sequence[EcatSlave]) -> list[dict[str, Any]]:
        """Copy the slaves' AL states (just read) into their health entries."""
        health = self._health(slaves)
        for h, s in zip(health, slaves, strict=True):
            h["state"] = al_state_text(s.state)
            h["al_status"] = f"0x{s.al_status:04X} {al_status_text(s.al_status)}"
            h["wkc_share"] = wkc_share(s.state)
        self._states_noted = any(s.state != AL["OP"] for s in slaves)
        return health

    def _close(self) -> None:
        self.realtime.restore()
        self._bounded, self._raw_fds = False, []
        if self._master is not None:
            try:
                self._master.state = AL["INIT"]
                self._master.write_state()
                self._master.close()
            except Exception:  # noqa: BLE001 - closing must not raise
                pass
            self._master = None

    def _cycle(self) -> Reading:
        m = self._master
        if m is None:
            raise LinkLostError(f"{self.iface}: not open")
        self.realtime.follow()  # the thread that runs the cycles; no-op at rt_priority=0
        self.cycles += 1
        send_ns = time.monotonic_ns()
        m.send_processdata()
        wkc = self._receive(m, send_ns)
        receipt_ns = time.monotonic_ns()
        expected = m.expected_wkc
        fault = ""
        no_inputs: list[int] = []
        if wkc == expected and self._states_noted:  # every slave answered as in OP again
            for h in self._health(m.slaves):
                h.update(state="OP", al_status="0x0000 No error", wkc_share=3)
            self._states_noted = False
        if wkc != expected:
            if wkc < 0:  # SOEM's EC_NOFRAME: no frame came back at all
                for h in self._health(m.slaves):
                    h["lost_cycles"] += 1
                self._note_lost_wait((receipt_ns - send_ns) / 1e3)
                why = f"no frame came back within {self.timeout_us} us (wkc {wkc}, expected " \
                      f"{expected})"
                trouble = iface_trouble(self.iface) if self._iface_known else ""
                if IFACE_GONE in trouble:
                    raise LinkLostError(f"{self.iface}: cycle {self.cycles}: {why}: {trouble}")
                raise CycleError("lost", f"{self.iface}: cycle {self.cycles}: {why}"
                                 f"{': ' + trouble if trouble else ''}")
            # a frame came back (wkc 0: no slave processed it): the slaves' states say why
            m.read_state()
            health = self._note_states(m.slaves)
            out_of_op = [(k, s) for k, s in enumerate(m.slaves) if s.state != AL["OP"]]
            predicted = sum(wkc_share(s.state) for s in m.slaves)
            if not out_of_op or wkc != predicted:
                for h in health:
                    h["lost_cycles"] += 1
                if wkc == 0:
                    raise CycleError("lost", f"{self.iface}: cycle {self.cycles}: a frame came "
                                     f"back that no slave processed (wkc 0, expected "
                                     f"{expected}), with every slave reporting "
                                     f"{self._labels(m, list(range(len(m.slaves))))}")
                # pysoem maps every slave into one group: one LRW datagram whose working
                # counter is the sum over the chain, so a decrement names no slave
                raise CycleError("lost", f"{self.iface}: cycle {self.cycles}: working counter "
                                 f"expected {expected}, found {wkc} (the chain shares one "
                                 f"datagram: the slave that missed it is unknown)")
            # below SAFE-OP a slave's inputs are not exchanged: its joint is unknown (NaN),
            # the other slaves' inputs are fresh
            no_inputs = [k for k, s in out_of_op if s.state & 0x0F != AL["SAFEOP"]]
            for k in no_inputs:
                health[k]["lost_cycles"] += 1
            if len(no_inputs) == len(m.slaves):
                raise CycleError("lost", f"{self.iface}: cycle {self.cycles}: no fresh inputs "
                                 f"from any slave: {self._labels(m, no_inputs)} (below "
                                 f"SAFE-OP)")
            parts = []
            if no_inputs:
                parts.append(f"no fresh inputs from {self._labels(m, no_inputs)} (below "
                             f"SAFE-OP: joint NaN)")
            safe = [k for k, s in out_of_op if k not in no_inputs]
            if safe:
                parts.append(f"outputs not applied: {self._labels(m, safe)}")
            fault = "; ".join(parts)
        dc_ns = -1
        if self.has_dc:
            dc_ns = int(m.dc_time)
            last = self._dc.last
            verdict = self._dc.check(dc_ns, send_ns, receipt_ns)
            if verdict == "stale":
                assert last is not None  # the first reply is always accepted
                raise CycleError("stale", f"{self.iface}: cycle {self.cycles}: expected a reply "
                                 f"with a DC system time {(send_ns - last[2]) / 1e3:.0f}.."
                                 f"{(receipt_ns - last[1]) / 1e3:.0f} us after the last "
                                 f"accepted one, found {(dc_ns - last[0]) / 1e3:+.0f} us: a "
                                 f"late, replayed or duplicated frame, or the DC time jumped "
                                 f"(taken as a jump once {self._dc.confirm} replies in a row "
                                 f"agree with each other; {self._dc.pending} so far)")
            if verdict == "jump":  # the DC time stepped: re-anchored on the replies since
                assert last is not None
                self.stats.clock_jumps += 1
                self.stats.extra["dc_jumps"] = self.stats.extra.get("dc_jumps", []) + [
                    {"cycle": self.cycles,
                     "dc_step_us": round(dc_step_ns(dc_ns, receipt_ns, last) / 1e3)}][-10:]
        raw, vel, eff = (np.empty(len(self.layout)) for _ in range(3))
        for k, (d, s) in enumerate(zip(self.layout, m.slaves, strict=True)):
            inp, o = bytes(s.input), d["offsets"]
            raw[k] = struct.unpack_from("<i", inp, o[0x6064])[0]
            vel[k] = struct.unpack_from("<i", inp, o[0x606C])[0] * d["rad_per_inc"]
            eff[k] = struct.unpack_from("<h", inp, o[0x6077])[0] * d["nm_per_permille"]
        # the int32 position counter wraps from 2^31 - 1 to -2^31: unwrapped, as the servo
        # buses unwrap their encoders' turns (a slave without fresh inputs repeats its old
        # count, which moves nothing)
        pos = self._counts.update(raw.astype(np.int64)) * np.array(
            [d["rad_per_inc"] for d in self.layout])
        pos[no_inputs] = vel[no_inputs] = eff[no_inputs] = np.nan  # their buffers are old
        # no device sequence number: the host's cycle count would say nothing about freshness
        return Reading(pos, vel, eff, receipt_ns, device_stamp_ns=dc_ns, fault=fault,
                       request_ns=send_ns)

    @staticmethod
    def _labels(m: EcatMaster, ks: list[int]) -> str:
        return ", ".join(slave_label(k, m.slaves[k]) for k in ks)

    def describe(self) -> dict[str, Any]:
        """Slaves found (by chain position and name): identity, scaling, AL state and status
        (read now, decoded), and how freshness and the receive wait are handled."""
        slaves = [{k: v for k, v in d.items() if k != "offsets"} for d in self.layout]
        m = self._master
        if m is not None:
            m.read_state()
            for d, h in zip(slaves, self._note_states(m.slaves), strict=False):
                d.update(state=h["state"], al_status=h["al_status"])
        return {"url": self.url, "joints": self.joint_names, "slaves": slaves,
                "expected_wkc": self._master.expected_wkc if self._master else None,
                "distributed_clock": self.has_dc, "receive_wait": self.receive_wait,
                "scheduling": self.realtime.describe(),
                "freshness": ("DC system time checked every cycle" if self.has_dc else
                              "frame index and working counter only (no distributed clock: "
                              "a reply one index wrap late cannot be told from a current "
                              "one)")}
