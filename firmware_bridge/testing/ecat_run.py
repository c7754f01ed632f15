"""Run the EtherCAT emulator and the bridge's master on a veth pair; print JSON results.

Meant to run inside a private network namespace (root needed)::

    unshare -n python -m firmware_bridge.testing.ecat_run --cycles 200 --drop-every 50

Creates ``ecm0`` (master side) and ``ecs0`` (emulator side), starts the emulator in a child
process, brings the master up through ``ethercat://ecm0`` and reads ``--cycles`` samples; a
read that fails ends the reading, and its message is reported as ``error``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import time

import numpy as np

from edge.joints import Status

from ..errors import BridgeError
from ..ethercat import EthercatStream
from ..url import stream_for_url
from .ecat_slave import SlaveFaults, serve

__all__ = ["main"]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True)


def _serve_at(priority: str, *args: object) -> None:
    """The emulator's process: ``priority`` "fifo" runs it at SCHED_FIFO 1 first (a real slave
    is hardware and answers on time; the emulator should not be the one descheduled)."""
    if priority == "fifo":
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    serve(*args)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run one scenario, print one JSON object; returns 0."""
    p = argparse.ArgumentParser()
    p.add_argument("--cycles", type=int, default=200)
    p.add_argument("--cycle-us", type=int, default=1000)
    p.add_argument("--drop-every", type=int, default=0)
    p.add_argument("--safeop-at", type=int, default=0)
    p.add_argument("--no-lrw", action="store_true")
    p.add_argument("--no-dc", action="store_true", help="the emulated slave has no DC")
    p.add_argument("--replay-every", type=int, default=0)
    p.add_argument("--late-every", type=int, default=0)
    p.add_argument("--timeout-us", type=int, default=2000)
    p.add_argument("--dc-step-at", type=int, default=0,
                   help="from process-data frame N on, the DC time is --dc-step-s off")
    p.add_argument("--dc-step-s", type=float, default=0.0)
    p.add_argument("--dc32", action="store_true", help="a 32-bit DC system time")
    p.add_argument("--delete-iface-at", type=int, default=0,
                   help="delete the master's interface after N samples (unplugged NIC)")
    p.add_argument("--position-start", type=int, default=0,
                   help="the position counter's value at frame 0 (it wraps as an int32)")
    p.add_argument("--slaves", type=int, default=1, help="identical slaves on the line")
    p.add_argument("--last-preop-at", type=int, default=0,
                   help="the last slave (the only one with --slaves 1) falls to PRE-OP with "
                        "error at frame N")
    p.add_argument("--master-priority", choices=("normal", "fifo"), default="normal",
                   help="fifo: run the master's cycle loop at real-time priority "
                        "(rt_priority=1: SCHED_FIFO 1), as a master on a loaded machine should")
    p.add_argument("--slave-priority", choices=("normal", "fifo"), default="normal",
                   help="fifo: run the emulated slaves at SCHED_FIFO 1")
    a = p.parse_args(argv)
    _ip("link", "add", "ecm0", "type", "veth", "peer", "name", "ecs0")
    for dev in ("ecm0", "ecs0"):
        _ip("link", "set", dev, "up")
    ctx = mp.get_context("fork")
    ready, stop = ctx.Event(), ctx.Event()
    faults = SlaveFaults(drop_every=a.drop_every, safeop_at=a.safeop_at, no_lrw=a.no_lrw,
                         dc=not a.no_dc, replay_every=a.replay_every, late_every=a.late_every,
                         position_start=a.position_start, dc_step_at=a.dc_step_at,
                         dc_step_ns=int(a.dc_step_s * 1e9), dc32=a.dc32)
    counts = ctx.Array("l", 3)
    more = tuple(SlaveFaults(dc=not a.no_dc, no_lrw=a.no_lrw,
                             preop_at=a.last_preop_at if k == a.slaves - 2 else 0)
                 for k in range(a.slaves - 1))
    if a.slaves == 1 and a.last_preop_at:
        faults.preop_at = a.last_preop_at
    proc = ctx.Process(target=_serve_at,
                       args=(a.slave_priority, "ecs0", faults, ready, stop, counts, more),
                       daemon=True)
    proc.start()
    ready.wait(5)
    out: dict = {"master_priority": a.master_priority, "slave_priority": a.slave_priority}
    rt = "&rt_priority=1" if a.master_priority == "fifo" else ""  # the stream's own option
    try:
        t_open = time.monotonic()
        with stream_for_url(f"ethercat://ecm0?cycle_us={a.cycle_us}"
                            f"&timeout_us={a.timeout_us}{rt}") as s:
            assert isinstance(s, EthercatStream)  # what an ethercat:// URL makes
            out["bringup_s"] = time.monotonic() - t_open
            # per-slave health as the stream keeps it on its own (describe() reads states)
            out["health_at_open"] = s.stats.extra.get("slaves")
            out["describe"] = s.describe()
            samples = []
            try:
                for _ in range(a.cycles):
                    if a.delete_iface_at and len(samples) == a.delete_iface_at:
                        _ip("link", "del", "ecm0")
                    samples.append(s.read())
            except BridgeError as exc:  # a fault the scenario injected: report it
                out["error"] = str(exc)
            out["stats"] = s.stats.as_dict()
            out["cycles"] = s.cycles
            out["lost_waits_us"] = list(s.lost_waits_us)
        stamps = np.array([x.receipt_ns for x in samples], dtype=np.float64)
        jitter_us = np.abs(np.diff(stamps) / 1e3 - a.cycle_us)
        if not jitter_us.size:  # fewer than 2 samples before an injected fault
            jitter_us = np.zeros(1)
        out["jitter_p50_us"] = float(np.percentile(jitter_us, 50))
        out["jitter_p99_us"] = float(np.percentile(jitter_us, 99))
        out["positions"] = [float(x.position_rad[0]) for x in samples]
        out["positions_all"] = [[None if np.isnan(v) else float(v) for v in x.position_rad]
                                for x in samples]
        out["counters"] = [x.device_counter for x in samples]
        out["device_stamps"] = [x.device_stamp_ns for x in samples]
        out["receipts"] = [x.receipt_ns for x in samples]
        out["status"] = [int(x.status) for x in samples]
        out["faults"] = sorted({x.fault for x in samples if x.status & Status.FAULT})
        out["load_avg"] = os.getloadavg()
        out["datagrams"] = dict(zip(("LRD", "LWR", "LRW"), counts[:], strict=True))
    finally:
        stop.set()
        proc.join(2)
        if proc.is_alive():
            proc.kill()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
