"""``syncedge bridge``: probe a bus, record a joint log.

Registered through the ``syncedge.commands`` entry point (``register``); nothing heavy is
imported until a subcommand runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from edge.joints import JointSample

if TYPE_CHECKING:
    from .stream import JointStream

__all__ = ["register"]


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
    probe.add_argument("url")
    probe.add_argument("--samples", type=int, default=5, help="samples to read (default 5)")
    probe.set_defaults(func=_probe)
    rec = sub.add_parser("record", help="write a joint log (JSON Lines) with statistics")
    rec.add_argument("url")
    rec.add_argument("--seconds", type=float, required=True,
                     help="how long to record (> 0); Ctrl-C stops earlier and keeps the log")
    rec.add_argument("--out", default="joints.jsonl",
                     help="log path, must not exist (default joints.jsonl); written as "
                          "OUT.partial and renamed when the log is closed")
    rec.set_defaults(func=_record)


def _latency(stream: JointStream, samples: list[JointSample]) -> str:
    """Estimate the receipt latency from ``samples``, keep it in the stream's statistics
    (``stats.extra["latency"]``) and return the line to print."""
    from edge.timebase import capture_stamps

    if len(samples) < 2:
        return "latency: unknown (fewer than 2 samples)"
    est = capture_stamps(samples)
    stream.stats.extra["latency"] = {"method": est.method, "latency_s": est.latency_s,
                                     **est.detail}
    return est.describe()


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
    """``bridge record``: refuses a non-positive ``--seconds`` and an existing ``--out``
    before opening the stream (:class:`~.errors.BridgeError`, exit 2); Ctrl-C stops the
    recording, closes the log with the statistics so far and returns 130."""
    import os

    from .errors import BridgeError, EndOfLogError
    from .jointlog import JointLogWriter
    from .url import stream_for_url

    if not args.seconds > 0:
        raise BridgeError(f"--seconds {args.seconds:g}: expected a duration above 0 s")
    for path in (args.out, args.out + ".partial"):
        if os.path.lexists(path):
            raise BridgeError(f"--out {args.out}: {path} already exists; name another log "
                              f"or move that file away (a log is never overwritten)")
    ended = ""
    interrupted = False
    samples: list[JointSample] = []

    def keep(sample: JointSample) -> None:
        samples.append(sample)
        w.write(sample)

    with stream_for_url(args.url) as s, \
            JointLogWriter(args.out, args.url, s.joint_names, atomic=True) as w:
        try:
            stats = s.run(keep, seconds=args.seconds)
        except EndOfLogError as exc:  # a replayed log shorter than --seconds: stop there
            stats, ended = s.stats, f" ({exc})"
        except KeyboardInterrupt:  # stop recording: the log keeps what came
            stats, ended, interrupted = s.stats, " (interrupted by Ctrl-C)", True
        except BridgeError:
            w.close(s.stats)  # the log keeps the statistics up to the failure
            raise
        latency = _latency(s, samples)
        w.close(stats)
    d = stats.as_dict()
    print(f"wrote {d['samples']} samples to {args.out}: {d['rate_hz']:.1f} Hz, "
          f"{d['gaps']} gaps, {d['lost_cycles']} lost cycles, {d['crc_errors']} CRC errors, "
          f"{d['reconnects']} reconnects{ended}", file=sys.stdout)
    print(latency)
    if d["slots"]:  # a paced stream: scheduled slots, empty slots and cycle jitter
        print(_timing(s.rate_hz, samples, d))
    for h in d.get("extra", {}).get("slaves", []):  # EtherCAT: per-slave health
        print(f"slave{h['position']} {h['name']!r}: {h['state']}, AL status "
              f"{h['al_status']}, working-counter share {h['wkc_share']}, "
              f"{h['lost_cycles']} lost cycles")
    return 130 if interrupted else 0
