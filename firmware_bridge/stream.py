"""The joint stream interface every transport implements.

A stream is opened, read (one sample per call, by iteration, or through a callback) and closed.
Subclasses implement one bus cycle in :meth:`JointStream._cycle`; this base class owns pacing,
the read deadline, gap marking, reconnection and the statistics, so every transport behaves the
same way when a link misbehaves.
"""

from __future__ import annotations

import abc
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from edge.joints import JointSample, Ping, Status

from .errors import BridgeError, BridgeTimeoutError, DeviceGoneError
from .sample import StreamStats

if TYPE_CHECKING:
    from .url import Options

__all__ = ["MAX_EFFORT_NM", "MAX_POSITION_RAD", "MAX_VELOCITY_RAD_S", "CycleError",
           "JointStream", "LinkLostError", "Reading"]

#: The largest |position| a joint can have, rad (m for a prismatic joint): about 159 000
#: turns, beyond any arm joint and beyond what a float32 position resolves to 0.1 rad. The
#: default of ``max_position_rad``; a joint that turns further (a wheel) raises it.
MAX_POSITION_RAD = 1e6
#: The largest |velocity| any joint or motor shaft turns at, rad/s (about 95 000 rpm).
MAX_VELOCITY_RAD_S = 1e4
#: The largest |effort| a joint can exert, N*m.
MAX_EFFORT_NM = 1e6


class CycleError(BridgeError):
    """One bus cycle failed; the stream retries and marks a gap.

    Attributes:
        kind: ``"timeout"``, ``"crc"``, ``"stale"`` (a late, replayed or duplicated reply) or
            ``"lost"`` (which counter to bump besides ``lost_cycles``).
    """

    def __init__(self, kind: str, message: str, *, cause: bool | None = None):
        super().__init__(message)
        self.kind = kind
        #: the message names why the cycle failed beyond "nothing came" (a frame refused
        #: for its joint count, version, CRC): a read that runs out of time leads with it
        self.cause = kind != "timeout" if cause is None else cause


class LinkLostError(BridgeError):
    """The device vanished (port closed, path gone); the stream reconnects when it returns."""


@dataclass
class Reading:
    """What one successful cycle produced (arrays ``(J,)`` float64 in SI units)."""

    position_rad: np.ndarray
    velocity_rad_s: np.ndarray
    effort_nm: np.ndarray
    receipt_ns: int
    device_counter: int = -1
    device_stamp_ns: int = -1
    fault: str = ""
    skipped: int = 0  # device sequence numbers skipped since the previous reading
    request_ns: int = -1  # host stamp just before the request was sent (-1: device paced)
    pings: tuple[Ping, ...] = ()  # pings answered or given up since the previous reading
    restart: bool = False  # the device started again before this reading (Status.RESTART)
    # skipped is the device's own count (its sequence numbers) of the frames lost since the
    # previous reading: the lost cycles are that many, whatever cycles failed (timeouts
    # while the device paused lose nothing)
    sequenced: bool = False


class JointStream(abc.ABC):
    """Base class of every transport.

    Args:
        url: the URL the stream was made from (for messages).
        rate_hz: cycle rate to pace at; 0 runs cycles back to back (the device paces).
        read_timeout_s: a :meth:`read` that gets no valid sample within this deadline raises.
        reconnect_period_s: how often to try reopening a vanished device.
        max_position_rad: a finite position of larger magnitude (rad) is a device error: the
            sample is ``FAULT`` naming the joint, the value NaN (velocities above
            :data:`MAX_VELOCITY_RAD_S` and efforts above :data:`MAX_EFFORT_NM` likewise).

    Use as a context manager, or call :meth:`open` / :meth:`close`. The constructor only stores
    arguments; nothing touches the device before :meth:`open`.
    """

    #: The URL form this transport accepts, quoted in error messages.
    URL_FORM = ""

    def __init__(self, url: str, *, rate_hz: float = 0.0, read_timeout_s: float = 1.0,
                 reconnect_period_s: float = 0.1, max_position_rad: float = MAX_POSITION_RAD):
        self.url = url
        self.max_position_rad = float(max_position_rad)
        self.rate_hz = float(rate_hz)
        self.read_timeout_s = float(read_timeout_s)
        self.reconnect_period_s = float(reconnect_period_s)
        self.stats = StreamStats()
        self.is_open = False
        self._next_tick_ns = 0
        self._last_counter: int | None = None

    @classmethod
    def from_url(cls, url: str, target: str, opts: Options, **kw: Any) -> JointStream:
        """Build from a parsed URL (see :func:`firmware_bridge.url.stream_for_url`): the
        transport's own options (:meth:`_url_options`), unknown ones refused, then ``kw`` on
        top; ``target`` is the URL's device path, interface or file."""
        args = cls._url_options(opts)
        opts.finish()
        args.update(kw)
        make: Callable[..., JointStream] = cls  # concrete transports take (url, target, ...)
        return make(url, target, **args)

    @classmethod
    def _url_options(cls, opts: Options) -> dict[str, Any]:
        """This transport's URL options, parsed from ``opts``, as constructor keywords."""
        return {}

    # -- to implement -------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def joint_names(self) -> list[str]:
        """Names of the ``J`` joints, in the order of the sample arrays."""

    @abc.abstractmethod
    def _open(self) -> None:
        """Open the device; raise :class:`LinkLostError` if its path is absent."""

    @abc.abstractmethod
    def _close(self) -> None:
        """Release the device; must not raise."""

    @abc.abstractmethod
    def _cycle(self) -> Reading:
        """Run one bus cycle; raise :class:`CycleError` or :class:`LinkLostError`."""

    def _recover(self, error: CycleError) -> None:  # noqa: B027 - optional hook
        """Bring the link back to a clean state after a failed cycle (flush, drain); may
        raise :class:`LinkLostError` (the device vanished meanwhile: :meth:`read`
        reconnects as for a vanished device)."""

    def describe(self) -> dict:
        """What is on the bus (for ``syncedge bridge probe``); override to add detail."""
        return {"url": self.url, "joints": self.joint_names}

    # -- lifecycle ----------------------------------------------------------------------
    def open(self) -> JointStream:
        """Open the device; returns ``self``. Raises :class:`BridgeError` subclasses."""
        if not self.is_open:
            try:
                self._open()
            except LinkLostError as exc:
                raise DeviceGoneError(f"{self.url}: expected a device, found none: {exc}") from exc
            self.is_open = True
            self._next_tick_ns = time.monotonic_ns()
        return self

    def close(self) -> None:
        """Close the device (idempotent)."""
        if self.is_open:
            self._close()
            self.is_open = False

    def __enter__(self) -> JointStream:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ------------------------------------------------------------------------
    def _pace(self) -> None:
        if self.rate_hz <= 0:
            return
        period_ns = int(1e9 / self.rate_hz)
        now = time.monotonic_ns()
        if self._next_tick_ns > now:
            time.sleep((self._next_tick_ns - now) / 1e9)
            self._next_tick_ns += period_ns
        elif now - self._next_tick_ns < period_ns:  # a little late: keep the absolute grid
            self._next_tick_ns += period_ns
        else:  # a whole period behind: restart the grid now, never burst to catch up
            self._next_tick_ns = now + period_ns

    def _reconnect(self, deadline_ns: int, cause: Exception) -> None:
        self._close()
        while True:
            try:
                self._open()
                self.stats.reconnects += 1
                return
            except LinkLostError:
                pass
            if time.monotonic_ns() + self.reconnect_period_s * 1e9 > deadline_ns:
                raise DeviceGoneError(
                    f"{self.url}: device vanished ({cause}) and did not come back within "
                    f"{self.read_timeout_s} s ({self._deadline_hint()}); check the cable or "
                    f"the path"
                ) from cause
            time.sleep(self.reconnect_period_s)

    def _deadline_hint(self) -> str:
        """``read_timeout_s=V in the URL; raise ...`` where the URL takes the option (its
        :attr:`URL_FORM` names it), else ``read_timeout_s=V``."""
        if "read_timeout_s=" in self.URL_FORM:
            return (f"read_timeout_s={self.read_timeout_s} in the URL; raise read_timeout_s "
                    f"for a device that stalls longer")
        return f"read_timeout_s={self.read_timeout_s}"

    def read(self) -> JointSample:
        """Return the next valid sample.

        Failed cycles are retried until ``read_timeout_s`` passes; the sample after them has
        ``Status.GAP`` and ``missed`` set. A device that vanishes is reopened every
        ``reconnect_period_s``.

        Raises:
            BridgeError: if the stream is not open (call :meth:`open` first).
            BridgeTimeoutError: no valid sample within ``read_timeout_s``.
            DeviceGoneError: the device vanished and did not return within ``read_timeout_s``.
        """
        if not self.is_open:
            raise BridgeError(f"{self.url}: stream is closed; call open() first")
        deadline_ns = time.monotonic_ns() + int(self.read_timeout_s * 1e9)
        missed = timeouts = stale = 0
        reconnected = False
        last_error: Exception | None = None
        while True:
            self._pace()
            try:
                r = self._cycle()
                break
            except CycleError as exc:
                missed += 1
                last_error = exc
                self.stats.lost_cycles += 1
                if exc.kind == "timeout":
                    self.stats.timeouts += 1
                    timeouts += 1
                elif exc.kind == "crc":
                    self.stats.crc_errors += 1
                elif exc.kind == "stale":
                    self.stats.stale_replies += 1
                    stale += 1
                try:
                    self._recover(exc)
                except LinkLostError as lost:  # vanished while the link was cleaned up
                    self._reconnect(deadline_ns, lost)
                    reconnected = True
            except LinkLostError as exc:
                missed += 1
                self.stats.lost_cycles += 1
                self._reconnect(deadline_ns, exc)
                reconnected = True
            if time.monotonic_ns() > deadline_ns:
                if getattr(last_error, "cause", False):  # refused, not silent: say why first
                    raise BridgeTimeoutError(
                        f"{last_error} ({self.url}: no valid sample within "
                        f"{self.read_timeout_s} s, {missed} failed cycles; the last one's "
                        f"reason is the one above)")
                raise BridgeTimeoutError(
                    f"{self.url}: expected a valid sample within {self.read_timeout_s} s "
                    f"({self._deadline_hint()}), found {missed} failed cycles (last: "
                    f"{last_error})"
                )
        if self.stats.samples == 0:  # waiting for the first sample is start-up, not a gap
            self.stats.lost_cycles -= missed
            self.stats.timeouts -= timeouts
            self.stats.stale_replies -= stale
            missed = 0
        if r.skipped > missed or (r.sequenced and not reconnected):
            # the device's counter shows cycles the bridge never saw; where it numbers its
            # frames, the lost cycles are what its numbering says
            self.stats.lost_cycles += r.skipped - missed
            missed = r.skipped
        status = Status.OK
        if missed:
            status |= Status.GAP
            self.stats.gaps += 1
        bad = _non_finite(r, self.joint_names)
        if bad:  # an infinite value or an unknown position is a device error, never OK
            r.fault = f"{r.fault}; {bad}" if r.fault else bad
        bad = _implausible(r, self.joint_names, self.max_position_rad)
        if bad:  # so is a finite value no joint can have
            r.fault = f"{r.fault}; {bad}" if r.fault else bad
        if r.fault:
            status |= Status.FAULT
            self.stats.faults += 1
        if r.device_counter >= 0 and r.device_counter == self._last_counter:
            status |= Status.STALE
            self.stats.stale_samples += 1
        if r.restart:
            status |= Status.RESTART
            self.stats.restarts += 1
        self._last_counter = r.device_counter if r.device_counter >= 0 else None
        s = JointSample(r.position_rad, r.velocity_rad_s, r.effort_nm, r.receipt_ns,
                        r.device_counter, r.device_stamp_ns, status, missed, r.fault,
                        r.request_ns, r.pings)
        st = self.stats
        st.samples += 1
        if st.first_ns < 0:
            st.first_ns = r.receipt_ns
        elif st.last_ns >= 0:
            st.worst_gap_ns = max(st.worst_gap_ns, r.receipt_ns - st.last_ns)
        st.last_ns = r.receipt_ns
        if self.rate_hz > 0:  # "N Hz" means scheduled at N Hz: count the grid's slots
            st.slots = round((st.last_ns - st.first_ns) * self.rate_hz / 1e9) + 1
            st.empty_slots = st.slots - st.samples
        return s

    def __iter__(self) -> Iterator[JointSample]:
        """Yield samples forever (stop by breaking out); raises like :meth:`read`."""
        while True:
            yield self.read()

    def run(self, callback: Callable[[JointSample], object], *, seconds: float | None = None,
            max_samples: int | None = None) -> StreamStats:
        """Call ``callback(sample)`` for each sample until ``seconds`` pass, ``max_samples``
        samples were delivered, or the callback returns ``False``. Returns :attr:`stats`.

        Raises:
            BridgeError: ``seconds`` is not a finite number >= 0 (None runs until the
                callback returns ``False``); otherwise as :meth:`read`.
        """
        if seconds is not None and not (math.isfinite(seconds) and seconds >= 0):
            raise BridgeError(f"{self.url}: run(seconds={seconds!r}): expected a finite "
                              f"number of seconds >= 0, or None to run until the callback "
                              f"returns False")
        end_ns = None if seconds is None else time.monotonic_ns() + int(seconds * 1e9)
        n = 0
        while (end_ns is None or time.monotonic_ns() < end_ns) and (
                max_samples is None or n < max_samples):
            n += 1
            if callback(self.read()) is False:
                break
        return self.stats


def _non_finite(r: Reading, names: list[str]) -> str:
    """Why a reading's values cannot be taken as they are, or ``""``.

    An infinite position, velocity or effort is a device error: it is named (the first such
    joint of each field, by its name in ``names``, and how many there are) and replaced by
    NaN (unknown, as a joint log writes it). A NaN position (the joint's value unknown this cycle) is named too, unless
    the transport already gave a fault reason (an EtherCAT slave below SAFE-OP). NaN
    velocities and efforts are a device without those values, not an error.
    """
    parts = []
    for name in ("position_rad", "velocity_rad_s", "effort_nm"):
        a = getattr(r, name)
        inf = np.isinf(a)
        bad = inf | np.isnan(a) if name == "position_rad" and not r.fault else inf
        if not bad.any():
            continue
        k = np.flatnonzero(bad)
        more = f" (and {k.size - 1} more)" if k.size > 1 else ""
        joint = names[k[0]] if k[0] < len(names) else f"joint {k[0]}"
        parts.append(f"{joint} {name} {a[k[0]]} from the device{more}")
        if inf.any():
            setattr(r, name, np.where(inf, np.nan, a))
    return "non-finite value: " + "; ".join(parts) if parts else ""


def _implausible(r: Reading, names: list[str], max_position_rad: float) -> str:
    """Why a reading's finite values cannot be a joint's, or ``""``.

    A finite position above ``max_position_rad`` in magnitude, a velocity above
    :data:`MAX_VELOCITY_RAD_S` or an effort above :data:`MAX_EFFORT_NM` is a device error
    (a garbled float, a counter that wrapped): named as :func:`_non_finite` names values
    (the first such joint of each field, and how many there are), with the bound, and
    replaced by NaN (unknown).
    """
    parts = []
    for name, bound, option in (("position_rad", max_position_rad, ", max_position_rad"),
                                ("velocity_rad_s", MAX_VELOCITY_RAD_S, ""),
                                ("effort_nm", MAX_EFFORT_NM, "")):
        a = getattr(r, name)
        with np.errstate(invalid="ignore"):
            bad = np.abs(a) > bound  # NaN compares False
        if not bad.any():
            continue
        k = np.flatnonzero(bad)
        more = f" (and {k.size - 1} more)" if k.size > 1 else ""
        joint = names[k[0]] if k[0] < len(names) else f"joint {k[0]}"
        parts.append(f"{joint} {name} {a[k[0]]:g} from the device{more} (expected "
                     f"|{name}| <= {bound:g}{option})")
        setattr(r, name, np.where(bad, np.nan, a))
    return "implausible value: " + "; ".join(parts) if parts else ""
