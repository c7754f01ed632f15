"""Bridge benchmark: rates, empty slots, cycle jitter, lost-frame cost, latency and pairing.

Usage::

    python bench/bench_bridge.py --json bench/results/bridge.json --docs docs/bridge.md
    python bench/bench_bridge.py --only pairing   # the pairing rows alone, printed only

Runs every row twice: on the machine as it is (no stressor) and again with ``--stress`` busy
processes running (a named stressor: N pure-Python spin loops). Each pass records the load
average before and after. ``--docs`` rewrites the figures block of docs/bridge.md (between
the ``bench_bridge`` markers), so that every figure there comes from this one command. The
EtherCAT rows need root and ``unshare`` (skipped otherwise).

What is measured against what: the servo buses run the vendor SDKs against the fake bus on a
pty paced at 1 Mbaud wire time; the framed stream against the fake device on a pty;
EtherCAT against the Python ESC emulator on a veth pair. These measure the bridge's own
overhead and timing, not real buses. The EtherCAT rows run the master twice: at normal
priority and at real-time priority (SCHED_FIFO 1, as a master on a loaded machine should
run), and the lost-frame rows give the bridge's own receive wait for each lost frame beside
the slots it cost, so a gap longer than that wait is shown to be spent elsewhere. Pairing rows pair 600 synthetic camera frames with
joint samples whose position is their own capture time (so the error of the pairing is
known exactly), next to the baselines: receipt stamps, the least-squares clock fit and, for
the framed stream, the device stamps' lower envelope without the pings (the estimate before
the stream pinged its device). The framed rows with a link delay give the fake device a
one-way delay in each direction that the bridge is never told.

Targets (issue 16): servo bus 6 joints >= 300 Hz; framed >= 1 kHz; EtherCAT scheduled at
1 kHz with every empty slot counted and p99 jitter reported; a lost frame costs at most
2 slots; pairing error < 1 ms p99 once latency is estimated (16 ms bursts).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import replace

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import serial  # noqa: E402

from edge.timebase import ClockEstimator, capture_stamps, pair_frames  # noqa: E402
from firmware_bridge.testing.fake_framed import FakeFramedDevice, FramedFaults  # noqa: E402
from firmware_bridge.testing.fake_servo import FakeServoBus, Faults, clock_capture_ns  # noqa: E402
from firmware_bridge.url import stream_for_url  # noqa: E402

BEGIN, END = "<!-- bench_bridge figures begin -->", "<!-- bench_bridge figures end -->"


def jitter(stamps_ns, period_us: float | None) -> tuple[float, float]:
    """p50 and p99 of |spacing - period| in us (median spacing where unpaced)."""
    d_us = np.diff(np.asarray(stamps_ns, dtype=np.float64)) / 1e3
    ref = period_us if period_us else float(np.median(d_us))
    dev = np.abs(d_us - ref)
    return float(np.percentile(dev, 50)), float(np.percentile(dev, 99))


def run_stream(url: str, seconds: float, period_us: float | None) -> dict:
    with stream_for_url(url) as s:
        s.read()  # start-up
        s.stats.__init__()
        stamps: list[int] = []
        s.run(lambda x: stamps.append(x.receipt_ns), seconds=seconds)
        st = s.stats.as_dict()
    p50, p99 = jitter(stamps, period_us)
    return {"rate_hz": st["rate_hz"], "samples": st["samples"], "lost": st["lost_cycles"],
            "jitter_p50_us": p50, "jitter_p99_us": p99}


def bench_servo(proto: str, seconds: float) -> dict:
    with FakeServoBus(proto, range(1, 7), Faults(wire_baud=1_000_000)) as bus:
        return run_stream(f"{proto}://{bus.path}?ids=1-6", seconds, None)


def bench_framed(seconds: float) -> dict:
    with FakeFramedDevice(6, 1000.0) as dev:
        return run_stream(f"frame://{dev.path}?joints=6", seconds, 1000.0)


def ecat_run(*args: str) -> dict | None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return None
    out = subprocess.run(["unshare", "-n", sys.executable, "-m",
                          "firmware_bridge.testing.ecat_run", *args],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    return json.loads(out)


def bench_ethercat(cycles: int, priority: str = "normal") -> dict | None:
    """1 kHz scheduled, clean link: slots of the grid, empty slots, jitter, worst gap;
    ``priority`` "fifo" runs the master and emulator at SCHED_FIFO 1."""
    r = ecat_run("--cycles", str(cycles), "--master-priority", priority,
                 "--slave-priority", priority)
    if r is None:
        return None
    st = r["stats"]
    return {"rate_hz": st["rate_hz"], "samples": st["samples"], "lost": st["lost_cycles"],
            "timeouts": st["timeouts"], "stale_replies": st["stale_replies"],
            "slots": st["slots"], "empty_slots": st["empty_slots"],
            "jitter_p50_us": r["jitter_p50_us"], "jitter_p99_us": r["jitter_p99_us"],
            "worst_gap_ms": st["worst_gap_ns"] / 1e6}


def bench_ethercat_lost_frames(cycles: int, priority: str = "normal") -> dict | None:
    """Every 50th frame lost, timeout_us=500: how many slots one lost frame costs, and the
    bridge's own receive wait for it (send to giving up); ``priority`` "fifo" runs the
    master and emulator at SCHED_FIFO 1."""
    r = ecat_run("--cycles", str(cycles), "--drop-every", "50", "--timeout-us", "500",
                 "--master-priority", priority, "--slave-priority", priority)
    if r is None:
        return None
    rx = np.array(r["receipts"], dtype=np.int64)
    gap = np.array([k for k, s in enumerate(r["status"]) if s & 1])  # Status.GAP
    # the slots without a sample between the samples around a lost frame (1 ms slots)
    cost = (rx[gap] - rx[gap - 1]) / 1e6 - 1 if gap.size else np.zeros(1)
    st = r["stats"]
    return {"lost": st["lost_cycles"], "slots": st["slots"], "empty_slots": st["empty_slots"],
            "lost_frame_cost_p50_slots": float(np.median(cost)),
            "lost_frame_cost_max_slots": float(cost.max()),
            "lost_wait_p50_us": float(np.median(r["lost_waits_us"])) if r["lost_waits_us"]
            else float("nan"),
            "lost_wait_max_us": float(max(r["lost_waits_us"], default=float("nan"))),
            "master_priority": r["master_priority"], "jitter_p99_us": r["jitter_p99_us"]}


def _score(truth_ns: np.ndarray, stamps_ns: np.ndarray, frames: np.ndarray,
           tolerance_s: float) -> dict:
    """Pair ``frames`` (true capture times) with samples placed at ``stamps_ns`` whose joint
    value is their true capture time; the interpolated value minus the frame's time is the
    pairing error."""
    p = pair_frames(frames, stamps_ns, truth_ns[:, None].astype(np.float64),
                    tolerance_s=tolerance_s)
    err_ms = np.abs(p.positions[p.paired, 0] - frames[p.paired]) / 1e6
    return {"frames": int(frames.size), "unpaired": int(p.unpaired.size),
            "p50_ms": float(np.percentile(err_ms, 50)), "p99_ms": float(np.percentile(err_ms, 99)),
            "max_ms": float(err_ms.max())}


def _frames_between(truth_ns: np.ndarray) -> np.ndarray:
    return np.linspace(truth_ns[0] + 60e6, truth_ns[-1] - 60e6, 600).astype(np.int64)


def bench_pairing_framed(seconds: float, rate_hz: float, burst_s: float,
                         link_s: float = 0.0) -> dict:
    """Framed stream with joint 0 = capture time and a one-way link delay ``link_s`` the
    bridge is not told; the default estimate (the ping round trip) beside the device stamps'
    lower envelope without the pings, the least-squares fit and receipt stamps."""
    f = FramedFaults(burst_period_s=burst_s, clock_joint=True, link_delay_s=link_s)
    with FakeFramedDevice(2, rate_hz, faults=f) as dev, \
            stream_for_url(f"frame://{dev.path}?joints=2&frame_timeout_s=0.2") as s:
        s.read()
        samples: list = []
        s.run(samples.append, seconds=seconds)
    rx = np.array([x.receipt_ns for x in samples], dtype=np.int64)
    q_s = np.array([x.position_rad[0] for x in samples], dtype=np.float64)
    k = np.floor((rx[0] / 1e9 - q_s[0]) / 100.0)
    truth = np.round((np.unwrap(q_s, period=100.0) + 100.0 * k) * 1e9).astype(np.int64)
    frames = _frames_between(truth)
    est = capture_stamps(samples)
    envelope = capture_stamps([replace(x, pings=()) for x in samples])
    lsq = ClockEstimator(window=len(samples))
    for x in samples:
        lsq.update(x.device_stamp_ns, x.receipt_ns)
    fit = np.array([lsq.to_host(x.device_stamp_ns) for x in samples], dtype=np.int64)
    return {"estimate": _score(truth, est.stamps_ns, frames, 0.05),
            "device_clock_no_ping": _score(truth, envelope.stamps_ns, frames, 0.05),
            "least_squares": _score(truth, fit, frames, 0.05),
            "receipt": _score(truth, rx, frames, 0.05),
            "latency_estimate_ms": (est.latency_s or 0.0) * 1e3,
            "latency_true_ms": float(np.mean(rx - truth)) / 1e6, "samples": len(samples),
            "method": est.method, "estimate_detail": est.detail}


def _servo_truth(samples: list) -> tuple[np.ndarray, np.ndarray]:
    rx = np.array([x.receipt_ns for x in samples], dtype=np.int64)
    return rx, clock_capture_ns(rx, [x.position_rad[0] for x in samples])


def bench_pairing_servo(port: str, seconds: float) -> dict:
    """Servo bus on a bursty link with servo 1's position = its capture time; round-trip
    estimate beside receipt stamps."""
    with stream_for_url(f"dxl://{port}?ids=1-2&timeout_s=0.1&zero_tick=0&rate_hz=13.53",
                        read_timeout_s=2.0) as s:
        s.read()
        samples: list = []
        s.run(samples.append, seconds=seconds)
    rx, truth = _servo_truth(samples)
    frames = _frames_between(truth)
    est = capture_stamps(samples)
    return {"estimate": _score(truth, est.stamps_ns, frames, 0.2),
            "receipt": _score(truth, rx, frames, 0.2),
            "latency_estimate_ms": (est.latency_s or 0.0) * 1e3,
            "latency_true_ms": float(np.mean(rx - truth)) / 1e6, "samples": len(samples),
            "method": est.method}


def bench_pairing_servo_simbus(link_s: float, seconds: float) -> dict:
    packages = serial.protocol_handler_packages
    serial.protocol_handler_packages = [*packages, "firmware_bridge.testing"]
    try:
        return bench_pairing_servo(f"simbus://dxl?ids=1,2&link_delay_s={link_s}"
                                   f"&burst_period_s=0.016&clock_ids=1", seconds)
    finally:
        serial.protocol_handler_packages = packages


def bench_pairing_servo_pty(link_s: float, seconds: float) -> dict:
    f = Faults(link_delay_s=link_s, burst_period_s=0.016, clock_ids=(1,), wire_baud=1_000_000)
    with FakeServoBus("dxl", [1, 2], f) as bus:
        return bench_pairing_servo(bus.path, seconds)


def _spin() -> None:
    while True:
        pass


def bench_pairing(seconds: float) -> dict:
    """The pairing rows: the framed stream (pinged; the baselines beside it) and the servo
    bus on simulated and pty links with 16 ms bursts."""
    return {
        "framed 1 kHz, no bursts": bench_pairing_framed(seconds, 1000.0, 0.0),
        "framed 487 Hz, 16 ms bursts": bench_pairing_framed(seconds, 487.0, 0.016),
        "framed 500 Hz, 16 ms bursts (period divides the timer)":
            bench_pairing_framed(seconds, 500.0, 0.016),
        "framed 500 Hz, link 3 ms + 16 ms bursts": bench_pairing_framed(seconds, 500.0, 0.016,
                                                                         0.003),
        "framed 500 Hz, link 20 ms + 16 ms bursts": bench_pairing_framed(seconds, 500.0,
                                                                          0.016, 0.020),
        "dxl simulated link 3 ms + 16 ms bursts": bench_pairing_servo_simbus(0.003, 3.0),
        "dxl simulated link 20 ms + 16 ms bursts": bench_pairing_servo_simbus(0.020, 3.0),
        "dxl pty link 10 ms + 16 ms bursts": bench_pairing_servo_pty(0.010, 3.0),
    }


def run_pass(a: argparse.Namespace, stress: int) -> dict:
    """One pass of every row (``a.only == "pairing"``: the pairing rows alone) with
    ``stress`` busy processes running."""
    procs = [mp.get_context("fork").Process(target=_spin, daemon=True) for _ in range(stress)]
    for p in procs:
        p.start()
    time.sleep(1.0 if procs else 0.0)
    load_before = os.getloadavg()
    t0 = time.monotonic()
    rows: dict = {}
    lost = lost_rt = None
    try:
        if a.only != "pairing":
            rows = {"dxl 6 joints (pty, 1 Mbaud paced)": bench_servo("dxl", a.seconds),
                    "sts 6 joints (pty, 1 Mbaud paced)": bench_servo("sts", a.seconds),
                    "framed 6 joints (pty, 1 kHz device)": bench_framed(a.seconds)}
            ecat = bench_ethercat(a.ecat_cycles)
            if ecat is not None:
                rows[f"ethercat 1 slave ({a.ecat_cycles} cycles at 1 kHz, veth)"] = ecat
                rows["ethercat, the same, master and emulator at SCHED_FIFO 1"] = bench_ethercat(
                    a.ecat_cycles, "fifo")
            lost = bench_ethercat_lost_frames(2000)
            lost_rt = bench_ethercat_lost_frames(2000, "fifo")
        pairing = bench_pairing(a.seconds)
    finally:
        for p in procs:
            p.kill()
            p.join()
    return {"stress_processes": stress, "rows": rows, "ethercat_lost_frames": lost,
            "ethercat_lost_frames_fifo": lost_rt,
            "pairing": pairing, "load_avg_before": load_before,
            "load_avg_after": os.getloadavg(), "wall_s": time.monotonic() - t0}


def report(result: dict) -> str:
    """The figures as text (printed, and written into docs/bridge.md with --docs)."""
    lines = [f"Measured {result['date']} on {result['cpus']} CPUs with "
             f"`{result['command']}`."]
    for name, p in result["passes"].items():
        la = ", ".join(f"{x:.2f}" for x in p["load_avg_before"])
        lb = ", ".join(f"{x:.2f}" for x in p["load_avg_after"])
        lines += ["", f"Pass {name}; load average (1, 5, 15 min) before {la}, after {lb}",
                  "```"]
        w = max([46, *(len(row) for row in p["rows"])])  # the stream column fits every label
        if p["rows"]:
            lines.append(f"{'stream':{w}} {'rate Hz':>8} {'samples':>7} {'lost':>5} "
                         f"{'p50 us':>8} {'p99 us':>8}")
        for row, r in p["rows"].items():
            lines.append(f"{row:{w}} {r['rate_hz']:8.1f} {r['samples']:7d} {r['lost']:5d} "
                         f"{r['jitter_p50_us']:8.1f} {r['jitter_p99_us']:8.1f}")
            if "slots" in r:
                lines.append(f"{'':{w}} slots {r['slots']}, empty {r['empty_slots']}, worst "
                             f"gap {r['worst_gap_ms']:.2f} ms; lost: {r['stale_replies']} "
                             f"stale replies, {r['lost'] - r['stale_replies']} no or short "
                             f"reply")
        for how, lf in _lost_frame_rows(p, "master at normal priority",
                                        "master and emulator at SCHED_FIFO 1"):
            lines.append(f"ethercat, every 50th frame lost, timeout_us=500, {how}: "
                         f"{lf['lost']} lost, {lf['empty_slots']} empty of {lf['slots']} "
                         f"slots; a lost frame costs {lf['lost_frame_cost_p50_slots']:.2f} "
                         f"slots (p50), {lf['lost_frame_cost_max_slots']:.2f} (max); the "
                         f"bridge's own wait for it {lf['lost_wait_p50_us']:.0f} us (p50), "
                         f"{lf['lost_wait_max_us']:.0f} us (max)")
        lines.append("pairing, 600 frames, |paired - true capture| ms p50 / p99 / max "
                     "(unpaired) of the estimate (its method) and the baselines; latency "
                     "estimate vs true")
        for row, r in p["pairing"].items():
            parts = [f"{k} {v['p50_ms']:.2f} / {v['p99_ms']:.2f} / {v['max_ms']:.2f} "
                     f"({v['unpaired']})" + (f" by {r['method']}" if k == "estimate" else "")
                     for k, v in r.items() if isinstance(v, dict) and "p50_ms" in v]
            bound = r.get("estimate_detail", {}).get("error bound ms")
            lines.append(f"  {row}: " + "; ".join(parts)
                         + f"; latency {r['latency_estimate_ms']:.2f} vs "
                         f"{r['latency_true_ms']:.2f} ms ({r['samples']} samples"
                         + (f", error bound {bound:.2f} ms" if bound is not None else "")
                         + ")")
        lines.append("```")
        lines.append(targets(p))
    return "\n".join(lines)


def _lost_frame_rows(p: dict, normal: str, fifo: str) -> list[tuple[str, dict]]:
    """The pass's lost-frame rows that ran, each with its label (normal, then SCHED_FIFO)."""
    rows = (("ethercat_lost_frames", normal), ("ethercat_lost_frames_fifo", fifo))
    return [(how, p[key]) for key, how in rows if p.get(key) is not None]


def targets(p: dict) -> str:
    """The pass's figures against the targets, one line each ("met" / "not met")."""
    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    rows, out = p["rows"], []
    servo = {k: r["rate_hz"] for k, r in rows.items() if k.startswith(("dxl", "sts"))}
    if servo:
        out.append(f"servo bus 6 joints >= 300 Hz: {verdict(min(servo.values()) >= 300)} ("
                   + ", ".join(f"{k.split()[0]} {v:.0f} Hz" for k, v in servo.items()) + ")")
    framed = next((r for k, r in rows.items() if k.startswith("framed")), None)
    if framed is not None:
        ok = framed["rate_hz"] >= 999.5 and not framed["lost"]
        out.append(f"framed >= 1 kHz with 0 lost: {verdict(ok)} ({framed['rate_hz']:.1f} Hz, "
                   f"{framed['lost']} lost)")
    for k, ecat in rows.items():
        if not k.startswith("ethercat"):
            continue
        how = ", master and emulator at SCHED_FIFO 1" if "SCHED_FIFO" in k else ""
        out.append(f"EtherCAT scheduled at 1 kHz, every slot filled{how}: "
                   f"{verdict(ecat['empty_slots'] == 0)} ({ecat['empty_slots']} of "
                   f"{ecat['slots']} slots empty, all counted; {ecat['lost']} lost cycles; "
                   f"p99 jitter {ecat['jitter_p99_us']:.0f} us)")
    for how, lf in _lost_frame_rows(p, "", ", master and emulator at SCHED_FIFO 1"):
        out.append(f"a lost frame costs at most 2 slots{how}: "
                   f"{verdict(lf['lost_frame_cost_max_slots'] <= 2.05)} (p50 "
                   f"{lf['lost_frame_cost_p50_slots']:.2f}, max "
                   f"{lf['lost_frame_cost_max_slots']:.2f} slots without a sample around it; "
                   f"the bridge's own wait at most {lf['lost_wait_max_us']:.0f} us)")
    worst = max(p["pairing"].items(), key=lambda kv: kv[1]["estimate"]["p99_ms"])
    out.append(f"pairing < 1 ms p99 once latency is estimated: "
               f"{verdict(worst[1]['estimate']['p99_ms'] < 1.0)} (worst row: {worst[0]}, "
               f"p99 {worst[1]['estimate']['p99_ms']:.2f} ms)")
    return "\n".join(f"- {line}" for line in out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--ecat-cycles", type=int, default=10_000)
    ap.add_argument("--stress", type=int, default=2, help="busy processes in the 2nd pass")
    ap.add_argument("--only", choices=("all", "pairing"), default="all",
                    help="pairing: run the pairing rows alone (printed; written only to an "
                    "explicit --json; --docs needs every row)")
    ap.add_argument("--json", default=None,
                    help="write the figures here (default bench/results/bridge.json for a "
                    "run of every row)")
    ap.add_argument("--docs", default="", help="rewrite the figures block of this file")
    a = ap.parse_args()
    if a.only != "all" and a.docs:
        ap.error("--docs rewrites the figures of every row: run without --only")
    if a.json is None and a.only == "all":
        a.json = "bench/results/bridge.json"
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "cpus": os.cpu_count(), "command": "python " + " ".join(sys.argv),
              "passes": {"1, no stressor": run_pass(a, 0)}}
    if a.stress:
        result["passes"][f"2, stressor: {a.stress} busy processes"] = run_pass(a, a.stress)
    text = report(result)
    print(text)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
    if a.docs:
        with open(a.docs, encoding="utf-8") as f:
            doc = f.read()
        if BEGIN not in doc or END not in doc:
            raise SystemExit(f"{a.docs}: expected the markers {BEGIN} and {END}, found none")
        doc = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END),
                     lambda _: f"{BEGIN}\n{text}\n{END}", doc, flags=re.S)
        with open(a.docs, "w", encoding="utf-8") as f:
            f.write(doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
