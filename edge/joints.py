"""Joint samples: what every joint stream delivers and the calibration recorder reads.

The transports of ``firmware_bridge`` produce :class:`JointSample` objects; ``edge`` reads
them (recording, time alignment in :mod:`edge.timebase`) through :class:`JointSource`, without
importing ``firmware_bridge``. A device that reports no joint names numbers its channels
(:func:`positional_names`); :func:`names_are_positional` tells such names from joint names.
A controller that reports a revolute joint within one turn (wrapped to ``(-pi, pi]`` or
``[0, 2 pi)``) is read as the joint turning on: :func:`continuous_positions`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from edge.errors import TimebaseError

__all__ = ["TURNS", "JointSample", "JointSource", "Ping", "Status", "continuous_positions",
           "look_like_degrees", "names_are_positional", "positional_names"]


class Status(enum.IntFlag):
    """Status flags of one joint sample (combine with ``|``).

    ``OK`` (no flag) means fresh values read in one valid cycle right after another valid one.
    ``GAP``: one or more cycles before this sample failed (timeout, CRC, lost frame); the count is
    in :attr:`JointSample.missed`. ``STALE``: the values were not refreshed in this cycle (never
    set on a sample that is yielded as fresh; a device that sends the same frame twice).
    ``FAULT``: the device reported an error (hardware error bit, EtherCAT slave out of OP); the
    values are still the ones read. ``RESTART``: the device started again before this sample
    (its frame numbering began anew): how many cycles were lost is unknown, its clock may
    have been reset and its values may not continue the ones before (an encoder homed again).
    """

    OK = 0
    GAP = 1
    STALE = 2
    FAULT = 4
    RESTART = 8


@dataclass(frozen=True)
class Ping:
    """One host-to-device ping and its answer (the four stamps of NTP, RFC 5905).

    The framed stream pings its device at random moments; the device answers with its own
    clock at the ping's arrival and at its answer. The stream attaches each ping, once it
    is answered or given up, to the next sample it delivers (:attr:`JointSample.pings`);
    :func:`edge.timebase.capture_stamps` maps device stamps to the host clock through the
    answered ping with the smallest round trip.

    Attributes:
        send_ns: host ``time.monotonic_ns()`` just before the ping was written (>= 0).
        device_rx_ns: the device's clock (ns, the clock of ``device_stamp_ns``) when the
            ping arrived; -1 if it was never answered.
        device_tx_ns: the device's clock when it answered (>= ``device_rx_ns``); -1 if never.
        receipt_ns: host ``time.monotonic_ns()`` when the answer was complete; -1 if never.

    Raises:
        TimebaseError: a negative send stamp, an answer with some stamps missing, an answer
            received before the ping was sent, or a device answer before its arrival.
    """

    send_ns: int
    device_rx_ns: int = -1
    device_tx_ns: int = -1
    receipt_ns: int = -1

    def __post_init__(self) -> None:
        if self.send_ns < 0:
            raise TimebaseError(f"ping: expected a send stamp >= 0, found {self.send_ns}")
        answer = (self.device_rx_ns, self.device_tx_ns, self.receipt_ns)
        if answer == (-1, -1, -1):
            return
        if min(answer) < 0:
            raise TimebaseError(f"ping: expected all three answer stamps (device rx, device "
                                f"tx, receipt) >= 0 or all -1, found {answer}")
        if self.receipt_ns < self.send_ns or self.device_tx_ns < self.device_rx_ns:
            raise TimebaseError(f"ping: expected receipt >= send and device tx >= device rx, "
                                f"found send {self.send_ns}, receipt {self.receipt_ns}, "
                                f"device rx {self.device_rx_ns}, tx {self.device_tx_ns}")

    @property
    def answered(self) -> bool:
        """Whether the device answered (all three answer stamps are set)."""
        return self.receipt_ns >= 0

    @property
    def round_trip_ns(self) -> int:
        """Round trip less the device's own answer time, ns: ``(receipt - send) - (device
        tx - device rx)``; -1 if unanswered."""
        if not self.answered:
            return -1
        return (self.receipt_ns - self.send_ns) - (self.device_tx_ns - self.device_rx_ns)


@dataclass(frozen=True)
class JointSample:
    """One reading of every joint of a stream.

    Attributes:
        position_rad: float64 ``(J,)`` joint positions, rad (m for a prismatic joint).
        velocity_rad_s: float64 ``(J,)`` joint velocities, rad/s; NaN where the device has none.
        effort_nm: float64 ``(J,)`` joint efforts, N*m; NaN where the device has none.
        receipt_ns: host ``time.monotonic_ns()`` when the reply was complete (servo buses:
            when the host first saw it whole, less its bytes' time on the line).
        device_counter: the device's own sequence number, or -1 where the protocol has none.
        device_stamp_ns: the device's own clock in ns, or -1 where the protocol has none.
        status: :class:`Status` flags.
        missed: number of failed cycles just before this sample (0 unless ``GAP``).
        fault: a short reason when ``FAULT`` is set, else ``""``.
        request_ns: host ``time.monotonic_ns()`` just before the request that produced this
            sample was sent (EtherCAT; servo buses add the request's bytes' time on the
            line, after which the servos latch), or -1 where the device sends on its own
            clock (framed stream, replayed logs without it). With ``receipt_ns`` it gives the
            round trip from which :func:`edge.timebase.capture_stamps` estimates the latency.
        pings: the host-to-device pings answered or given up since the previous sample
            (:class:`Ping`; framed stream), else empty.
    """

    position_rad: np.ndarray
    velocity_rad_s: np.ndarray
    effort_nm: np.ndarray
    receipt_ns: int
    device_counter: int = -1
    device_stamp_ns: int = -1
    status: Status = Status.OK
    missed: int = 0
    fault: str = ""
    request_ns: int = -1
    pings: tuple[Ping, ...] = ()

    @property
    def joints(self) -> int:
        """Number of joints ``J``."""
        return int(self.position_rad.shape[0])

    def to_record(self) -> dict[str, Any]:
        """Return a JSON-ready dict (lists of floats; NaN written as ``None``; ``pings`` as
        ``[send, device rx, device tx, receipt]`` lists, only when there are any)."""

        def clean(a: np.ndarray) -> list[float | None]:
            return [None if not np.isfinite(v) else float(v) for v in a]

        rec: dict[str, Any] = {
            "receipt_ns": int(self.receipt_ns),
            "device_counter": int(self.device_counter),
            "device_stamp_ns": int(self.device_stamp_ns),
            "status": int(self.status),
            "missed": int(self.missed),
            "fault": self.fault,
            "request_ns": int(self.request_ns),
            "position_rad": clean(self.position_rad),
            "velocity_rad_s": clean(self.velocity_rad_s),
            "effort_nm": clean(self.effort_nm),
        }
        if self.pings:
            rec["pings"] = [[int(p.send_ns), int(p.device_rx_ns), int(p.device_tx_ns),
                             int(p.receipt_ns)] for p in self.pings]
        return rec

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> JointSample:
        """Inverse of :meth:`to_record`.

        Raises:
            TimebaseError: a ping that is not four stamps, or stamps :class:`Ping` refuses.
        """

        def arr(v: list[float | None]) -> np.ndarray:
            return np.array([np.nan if x is None else x for x in v], dtype=np.float64)

        return cls(
            position_rad=arr(rec["position_rad"]),
            velocity_rad_s=arr(rec["velocity_rad_s"]),
            effort_nm=arr(rec["effort_nm"]),
            receipt_ns=int(rec["receipt_ns"]),
            device_counter=int(rec.get("device_counter", -1)),
            device_stamp_ns=int(rec.get("device_stamp_ns", -1)),
            status=Status(int(rec.get("status", 0))),
            missed=int(rec.get("missed", 0)),
            fault=str(rec.get("fault", "")),
            request_ns=int(rec.get("request_ns", -1)),
            pings=tuple(_ping_from_record(p) for p in rec.get("pings", ())),
        )


def _ping_from_record(p: Any) -> Ping:
    if not isinstance(p, list | tuple) or len(p) != 4:
        raise TimebaseError(f"joint record ping: expected [send, device rx, device tx, "
                            f"receipt] (4 integers), found {p!r}")
    return Ping(*(int(v) for v in p))


class JointSource(Protocol):
    """What the calibration recorder reads joints from: an opened joint stream
    (``firmware_bridge.stream.JointStream``, the virtual cell's)."""

    @property
    def joint_names(self) -> list[str]:
        """The channel names, in the controller's channel order."""
        ...

    def read(self) -> JointSample:
        """The next sample; raises on timeout or when the device is gone."""
        ...

    def close(self) -> None:
        """Release the device."""
        ...


def positional_names(count: int) -> list[str]:
    """Placeholder names ``joint0 .. joint{count-1}`` for a device that reports no names."""
    return [f"joint{j}" for j in range(count)]


def names_are_positional(names: list[str]) -> bool:
    """Whether ``names`` only number the channels (:func:`positional_names`, servo ids
    ``id<N>``, EtherCAT ``slave<k>:<device name>`` in chain order) rather than name the
    controller's joints: a program must then be matched to the channels by position."""
    return bool(names) and (names == positional_names(len(names))
                            or all(n.startswith("id") and n[2:].isdigit() for n in names)
                            or all(n.startswith(f"slave{k}:") for k, n in enumerate(names)))


#: The turns a controller may wrap a revolute joint's readings into: a turn in rad, and
#: in degrees (readings in degrees, read with the chain's fitted turn per unit).
TURNS = (2 * np.pi, 360.0)


def continuous_positions(positions: np.ndarray, units: tuple[str, ...] | list[str]
                         ) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Undo the wrap of revolute joints reported within one turn.

    Many controllers report a revolute joint's angle wrapped into one turn (``(-pi, pi]``
    or ``[0, 2 pi)``; in degrees ``(-180, 180]``), so a joint turning through the wrap
    point reads as a jump of almost a turn between two consecutive readings. Between two
    readings of a joint stream or two frames of an episode (10 Hz and up) no robot joint
    turns half a turn (pi rad in 0.1 s is 31 rad/s), so a change of more than half a turn
    between consecutive finite readings is taken as a wrap and the later readings are
    moved by whole turns to continue the first (the rule of NumPy's ``unwrap``, applied
    over the finite readings only, so a reading that is NaN (unknown) neither spreads nor
    moves). A channel is unwrapped only where its readings look wrapped into that turn
    (:data:`TURNS`: rad first, then degrees): they all lie within one turn, and each such
    jump is within a quarter turn of whole turns. Readings in degrees that do not wrap
    fail both tests for rad (they span more than 2 pi) and have no jump of half a turn in
    degrees, so they are left as read. Channels in metres are left as read.

    Args:
        positions: float ``[N, J]`` joint readings in stream or frame order, rad (m for a
            prismatic joint; degrees where the controller reports them); NaN where unknown.
        units: the ``J`` channels' units, ``"rad"`` or ``"m"``.

    Returns:
        ``(continuous, wraps)``: float64 ``[N, J]`` (a copy; equal to the input where no
        channel wrapped) and one ``{"channel", "sample", "turns", "turn"}`` per wrap undone:
        the reading ``sample`` and those after it moved by ``turns`` whole turns of ``turn``
        (2 pi, or 360 for readings in degrees).

    Raises:
        ValueError: ``positions`` is not 2-D or ``units`` does not have one entry per column.
    """
    q = np.array(positions, dtype=np.float64, copy=True)
    if q.ndim != 2 or len(units) != q.shape[1]:
        raise ValueError(f"expected positions [N, J] and J units, found shape {q.shape} and "
                         f"{len(units)} units")
    wraps: list[dict[str, Any]] = []
    for c, unit in enumerate(units):
        if unit != "rad":
            continue
        idx = np.flatnonzero(np.isfinite(q[:, c]))
        if len(idx) < 2:
            continue
        step = np.diff(q[idx, c])
        span = float(q[idx, c].max() - q[idx, c].min())
        for turn in TURNS:
            turns = np.where(np.abs(step) > turn / 2, -np.round(step / turn), 0.0)
            if not turns.any():
                continue
            rest = np.abs(step + turn * turns)[turns != 0]
            if span > turn * (1 + 1e-6) or rest.max() > turn / 4:
                continue  # not readings wrapped into this turn
            q[idx[1:], c] += turn * np.cumsum(turns)
            wraps += [{"channel": c, "sample": int(idx[k + 1]), "turns": int(turns[k]),
                       "turn": round(turn, 6)} for k in np.flatnonzero(turns)]
            break
    return q, wraps


def look_like_degrees(positions: np.ndarray, units: tuple[str, ...] | list[str],
                      calibration: bool) -> list[int]:
    """The revolute channels whose readings look like degrees rather than rad.

    A calibration sweep turns a joint well under half a turn (the planner's sweeps are at
    most about 0.8 rad), and few joints are read beyond two turns from their zero; a
    channel that does either in rad is far likelier read in degrees (a 26 degree sweep
    reads 26). Used to say so (``calibrate import``, ``check``); nothing is converted.

    Args:
        positions: float ``[N, J]`` joint readings (continuous, see
            :func:`continuous_positions`); NaN where unknown.
        units: the channels' units, ``"rad"`` or ``"m"``.
        calibration: whether the readings are a calibration sweep (then a span of more
            than half a turn counts too).

    Returns:
        The channel indices, ascending.
    """
    q = np.asarray(positions, np.float64)
    out = []
    for c, unit in enumerate(units):
        col = q[:, c][np.isfinite(q[:, c])]
        if unit != "rad" or not len(col):
            continue
        if np.abs(col).max() > 4 * np.pi or (calibration and np.ptp(col) > np.pi):
            out.append(c)
    return out
