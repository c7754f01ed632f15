"""``syncedge bridge``: probe a bus, record a joint log.

Registered through the ``syncedge.commands`` entry point (``register``); nothing heavy is
imported until a subcommand runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from edge.errors import Terminated
from edge.joints import JointSample

if TYPE_CHECKING:
    from .stream import JointStream

__all__ = ["MAX_RECORD_S", "MIN_DRIFT_SAMPLES", "MIN_DRIFT_SPAN_S", "register"]

#: The longest ``bridge record --seconds``, s (24 h; record a longer session as several logs).
MAX_RECORD_S = 86_400.0
#: A clock estimate that fits the device clock's rate (a ``drift ppm`` figure) is reported
#: only from this many samples over at least this span; fewer give an absurd rate.
MIN_DRIFT_SAMPLES = 20
MIN_DRIFT_SPAN_S = 0.1


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``bridge`` subcommand group to an ``argparse`` subparsers object."""
    p = subparsers.add_parser("bridge", help="read joint streams from robot controllers",
                              description="Probe a joint bus or record a joint log. URLs: "
                              "dxl://PORT?ids=1-6, sts://PORT?ids=1-6, frame://PORT?joints=6, "
                              "ethercat://IFACE, replay://FILE, loop://?joints=6, "
                              "sim://cell?split=test_all&seed=0 (the virtual cell); prefix "
                              "trace+ to log every sample.")
    sub = p.add_subparsers(dest="bridge_command", metavar="ACTION", required=True)
    probe = sub.add_parser("probe", help="print what is on the bus and a few samples")
    probe.add_argument("url", help="the controller's transport URL (schemes: syncedge bridge --help; e.g. "
                                   "frame:///dev/ttyACM0?joints=6)")
    probe.add_argument("--samples", type=int, default=5, help="samples to read (default 5)")
    probe.set_defaults(func=_probe)
    rec = sub.add_parser("record", help="write a joint log (JSON Lines) with statistics")
    rec.add_argument("url", help="the controller's transport URL (as for probe)")
    rec.add_argument("--seconds", type=float, required=True,
                     help=f"how long to record (> 0, at most {MAX_RECORD_S:g} s); Ctrl-C "
                          f"stops earlier and keeps the log (nothing before the first sample)")
    rec.add_argument("--out", default="joints.jsonl",
                     help="log path, must not exist (default joints.jsonl); written as "
                          "OUT.partial and renamed once the log is complete (a failed "
                          "recording keeps OUT.partial and says so)")
    rec.set_defaults(func=_record)


def _latency(stream: JointStream, samples: list[JointSample]) -> str:
    """Estimate the receipt latency from ``samples``, keep it in the stream's statistics
    (``stats.extra["latency"]``) and return the line to print.

    An estimate that fits the device clock's rate (``drift ppm`` among its figures) needs
    at least :data:`MIN_DRIFT_SAMPLES` samples over :data:`MIN_DRIFT_SPAN_S`; with fewer
    the latency is reported as unknown, saying so (a rate fitted to a few samples of one
    burst is absurd, and the offset with it)."""
    from edge.timebase import capture_stamps

    if len(samples) < 2:
        return "latency: unknown (fewer than 2 samples)"
    est = capture_stamps(samples)
    span_s = (samples[-1].receipt_ns - samples[0].receipt_ns) / 1e9
    if "drift ppm" in est.detail and (len(samples) < MIN_DRIFT_SAMPLES
                                      or span_s < MIN_DRIFT_SPAN_S):
        why = (f"too few samples to fit the device clock ({est.method}): {len(samples)} "
               f"over {span_s * 1e3:.1f} ms, needs at least {MIN_DRIFT_SAMPLES} over "
               f"{MIN_DRIFT_SPAN_S * 1e3:.0f} ms")
        stream.stats.extra["latency"] = {"method": est.method, "latency_s": None,
                                         "unknown": why}
        return f"latency: unknown ({why}; read more samples, e.g. --samples 200)"
    stream.stats.extra["latency"] = {"method": est.method, "latency_s": est.latency_s,
                                     **est.detail}
    return est.describe()


#: The shortest time without a sample that ``bridge record``'s summary names (besides ten
#: sample periods), ns.
SILENCE_NOTE_NS = 100_000_000


def _timing(rate_hz: float, samples: list, stats: dict) -> str:
    """One line: slots scheduled at ``rate_hz``, empty slots, |spacing - period| p50/p99, worst
    gap."""
    import numpy as np

    spacing_us = np.diff(np.array([x.receipt_ns for x in samples], dtype=np.float64)) / 1e3
    dev = np.abs(spacing_us - 1e6 / rate_hz) if spacing_us.size else np.zeros(1)
    return (f"timing: {stats['slots']} slots scheduled at {rate_hz:g} Hz, "
            f"{stats['empty_slots']} empty; jitter |spacing - period| p50 "
            f"{np.percentile(dev, 50):.0f} us, p99 {np.percentile(dev, 99):.0f} us; worst gap "
            f"{stats['worst_gap_ns'] / 1e6:.2f} ms")


def _probe(args: argparse.Namespace) -> int:
    from .errors import BridgeError
    from .url import stream_for_url

    if args.samples < 1:
        raise BridgeError(f"--samples {args.samples}: expected 1 or more")

    with stream_for_url(args.url) as s:
        info = s.describe()
        for k, v in info.items():
            print(f"{k}: {v}")
        samples = []
        for _ in range(args.samples):
            smp = s.read()
            samples.append(smp)
            pos = " ".join(f"{x:+.4f}" for x in smp.position_rad)
            print(f"t={smp.receipt_ns / 1e9:.6f}s status={smp.status.name or 'OK'} pos_rad=[{pos}]")
        print(_latency(s, samples))
        print("stats: " + json.dumps(s.stats.as_dict()))
    return 0


def _record(args: argparse.Namespace) -> int:
    """``bridge record``: refuses a ``--seconds`` that is not a finite duration in
    (0, :data:`MAX_RECORD_S`] and an existing ``--out`` before opening the stream
    (:class:`~.errors.BridgeError`, exit 2). The log is written as ``OUT.partial`` and
    renamed to ``OUT`` once whole. A recording that fails (the device gone, a timeout)
    keeps what came as ``OUT.partial``, closed with its statistics, and the error says so
    and how much of ``--seconds`` it holds (nothing is kept before the first sample); Ctrl-C
    stops the recording, closes the log with the statistics so far and returns 130 (before
    the first sample: keeps nothing, says so in one line on stderr, returns 130); SIGTERM,
    through ``syncedge`` (``edge.errors.Terminated``), does the same and returns 143."""
    import math
    import os
    import time

    from .errors import BridgeError, EndOfLogError
    from .jointlog import JointLogWriter
    from .url import stream_for_url

    if not (math.isfinite(args.seconds) and 0 < args.seconds <= MAX_RECORD_S):
        raise BridgeError(f"--seconds {args.seconds:g}: expected a duration above 0 s and at "
                          f"most {MAX_RECORD_S:g} s (24 h), a finite number; record a longer "
                          f"session as several logs")
    for path in (args.out, args.out + ".partial"):
        if os.path.lexists(path):
            raise BridgeError(f"--out {args.out}: {path} already exists; name another log "
                              f"or move that file away (a log is never overwritten)")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)  # as every command
    ended = ""
    interrupted = 0  # the exit code of an interrupted recording
    samples: list[JointSample] = []
    first_fault: list[str] = []

    def keep(sample: JointSample) -> None:
        samples.append(sample)
        w.write(sample)
        if sample.fault and not first_fault:
            first_fault.append(sample.fault)

    def note(stream: JointStream, how: str) -> None:
        """What the log holds against what was asked (``stats.extra["recording"]``)."""
        stream.stats.extra["recording"] = {
            "requested_s": args.seconds, "recorded_s": round(_span_s(samples), 6),
            "ended": how}

    stream = stream_for_url(args.url, do_not_open=True)
    layer = stream
    while layer is not None:  # trace+...: its own log must not be this one
        traced = getattr(layer, "trace_path", None)
        if traced and os.path.abspath(traced) in (os.path.abspath(args.out),
                                                  os.path.abspath(args.out + ".partial")):
            raise BridgeError(f"{args.url}: trace_path {traced} is --out {args.out} (or its "
                              ".partial file): the trace needs a log of its own")
        layer = getattr(layer, "inner", None)
    with stream as s, \
            JointLogWriter(args.out, args.url, s.joint_names, atomic=True) as w:
        start = time.monotonic()
        try:
            stats = s.run(keep, seconds=args.seconds)
            how = "complete"
        except EndOfLogError as exc:  # a replayed log shorter than --seconds: stop there
            stats, ended, how = s.stats, f" ({exc})", "end of the replayed log"
        except KeyboardInterrupt as exc:  # stop recording: the log keeps what came
            by = "SIGTERM" if isinstance(exc, Terminated) else "Ctrl-C"
            code = 143 if by == "SIGTERM" else 130
            if not samples:  # nothing worth keeping, as for a failure before the first one
                w.discard()
                print(f"syncedge bridge: interrupted by {by} before the first sample: "
                      f"nothing kept ({args.out} was not written)", file=sys.stderr)
                return code
            stats, ended, interrupted = s.stats, f" (interrupted by {by})", code
            how = f"interrupted by {by}"
        except BridgeError as exc:
            if not samples:  # nothing worth keeping
                w.discard()
                raise
            note(s, f"failed: {exc}")
            kept = w.close_partial(s.stats)  # with the statistics up to the failure
            why = (f"{exc}; partial recording kept at {kept}: {len(samples)} samples, the "
                   f"first {_span_s(samples):.2f} s of the requested {args.seconds:g} s "
                   f"(failed after {time.monotonic() - start:.2f} s; {args.out} was not "
                   f"written: record again)")
            try:  # the same kind of error (a timeout stays a timeout), saying what was kept
                again = type(exc)(why)
            except TypeError:
                again = BridgeError(why)
            raise again from exc
        note(s, how)
        latency = _latency(s, samples)
        w.close(stats)
    d = stats.as_dict()
    jumps = (f"{d['clock_jumps']} device clock jumps (re-anchored), " if d["clock_jumps"]
             else "")
    faults = (f", {d['faults']} FAULT samples (first: {first_fault[0]})" if d["faults"]
              else ", 0 FAULT samples")
    # a silence the counts above do not show (a device that paused and numbered on)
    typical_ns = 1e9 / d["rate_hz"] if d["rate_hz"] > 0 else 0.0
    if d["worst_gap_ns"] > max(SILENCE_NOTE_NS, 10 * typical_ns) and not d["slots"]:
        faults += f", longest silence {d['worst_gap_ns'] / 1e9:.3f} s"
    print(f"wrote {d['samples']} samples to {args.out}: {d['rate_hz']:.1f} Hz, "
          f"{d['gaps']} gaps, {d['lost_cycles']} lost cycles, {d['crc_errors']} CRC errors, "
          f"{d['stale_samples']} STALE samples (frames sent again), {d['restarts']} restarts, "
          f"{d['late_frames']} late frames (dropped), {jumps}"
          f"{d['reconnects']} reconnects{faults}{ended}", file=sys.stdout)
    print(latency)
    if d["slots"] and s.rate_hz > 0:  # paced: scheduled slots, empty slots, cycle jitter
        print(_timing(s.rate_hz, samples, d))
    for h in d.get("extra", {}).get("slaves", []):  # EtherCAT: per-slave health
        print(f"slave{h['position']} {h['name']!r}: {h['state']}, AL status "
              f"{h['al_status']}, working-counter share {h['wkc_share']}, "
              f"{h['lost_cycles']} lost cycles")
    return int(interrupted)  # 130 after Ctrl-C, 143 after SIGTERM, else 0


def _span_s(samples: list[JointSample]) -> float:
    """Seconds from the first sample's receipt to the last's (0 with fewer than 2)."""
    return (samples[-1].receipt_ns - samples[0].receipt_ns) / 1e9 if len(samples) > 1 else 0.0
