"""Bridge benchmark: sustained rates, lost samples, cycle jitter and pairing error.

Usage: ``python bench/bench_bridge.py [--json bench_bridge.json] [--seconds 3]``
(the EtherCAT row needs root and ``unshare``; it is skipped otherwise). Prints a table and
writes JSON. Run it on an idle machine: the load average during the run is reported.

Targets: servo bus 6 joints >= 300 Hz over the pty fake (paced at 1 Mbaud wire time);
framed stream >= 1 kHz; EtherCAT emulator >= 1 kHz for 10,000 cycles; pairing error < 1 ms;
zero lost samples on clean links.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from firmware_bridge.testing.fake_framed import FakeFramedDevice  # noqa: E402
from firmware_bridge.testing.fake_servo import FakeServoBus, Faults  # noqa: E402
from firmware_bridge.timebase import ClockEstimator, pair_frames  # noqa: E402
from firmware_bridge.url import stream_for_url  # noqa: E402


def jitter(stamps_ns: np.ndarray, period_us: float | None) -> tuple[float, float]:
    d_us = np.diff(stamps_ns.astype(np.float64)) / 1e3
    ref = period_us if period_us else float(np.median(d_us))
    dev = np.abs(d_us - ref)
    return float(np.percentile(dev, 50)), float(np.percentile(dev, 99))


def run_stream(url: str, seconds: float, period_us: float | None) -> dict:
    with stream_for_url(url) as s:
        s.read()  # start-up
        s.stats.__init__()
        stamps = []
        s.run(lambda x: stamps.append(x.receipt_ns), seconds=seconds)
        st = s.stats.as_dict()
    p50, p99 = jitter(np.array(stamps), period_us)
    return {"rate_hz": st["rate_hz"], "samples": st["samples"], "lost": st["lost_cycles"],
            "jitter_p50_us": p50, "jitter_p99_us": p99}


def bench_servo(proto: str, seconds: float) -> dict:
    with FakeServoBus(proto, range(1, 7), Faults(wire_baud=1_000_000)) as bus:
        return run_stream(f"{proto}://{bus.path}?ids=1-6", seconds, None)


def bench_framed(seconds: float) -> dict:
    with FakeFramedDevice(6, 1000.0) as dev:
        return run_stream(f"frame://{dev.path}?joints=6", seconds, 1000.0)


def bench_ethercat(cycles: int) -> dict | None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return None
    out = subprocess.run(["unshare", "-n", sys.executable, "-m",
                          "firmware_bridge.testing.ecat_run", "--cycles", str(cycles)],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    r = json.loads(out)
    return {"rate_hz": r["stats"]["rate_hz"], "samples": r["stats"]["samples"],
            "lost": r["stats"]["lost_cycles"], "jitter_p50_us": r["jitter_p50_us"],
            "jitter_p99_us": r["jitter_p99_us"]}


def bench_pairing(seconds: float) -> dict:
    """Pair 30 fps camera stamps (30 ms latency, +-0.5 ms stamp jitter) with real framed-stream
    samples placed on the host clock by the device-clock estimate.

    The fake device sends frame ``seq`` at device time ``seq`` ms and joint 0 = ``0.001*seq``,
    so the interpolated value converts back to time (1 seq = 1 ms). Truth: the device clock
    mapped by the lower envelope of (receipt - device stamp), i.e. the fastest delivery.
    """
    with FakeFramedDevice(1, 1000.0) as dev, stream_for_url(f"frame://{dev.path}?joints=1") as s:
        s.read()
        samples = []
        s.run(samples.append, seconds=seconds)
    dev_ns = np.array([x.device_stamp_ns for x in samples], dtype=np.int64)
    rx_ns = np.array([x.receipt_ns for x in samples], dtype=np.int64)
    est = ClockEstimator(window=len(samples))
    for d, h in zip(dev_ns, rx_ns, strict=True):
        est.update(int(d), int(h))
    t = np.array([est.to_host(int(d)) for d in dev_ns], dtype=np.int64)
    value = np.array([x.position_rad[0] for x in samples])[:, None]  # 0.001 * seq
    truth_offset = int(np.min(rx_ns - dev_ns))
    rng = np.random.default_rng(0)
    exposure = np.arange(t[0] + 50_000_000, t[-1] - 50_000_000, 33_333_333, dtype=np.int64)
    stamps = exposure + 30_000_000 + rng.integers(-500_000, 500_000, exposure.size)
    p = pair_frames(stamps, t, value, tolerance_s=0.005, frame_latency_s=0.030)
    truth_ms = (exposure - truth_offset) / 1e6 - dev_ns[0] / 1e6 + value[0, 0] * 1e3
    err_ms = np.abs(p.positions[p.paired, 0] * 1e3 - truth_ms[p.paired])
    return {"frames": int(exposure.size), "unpaired": int(p.unpaired.size),
            "error_p50_ms": float(np.percentile(err_ms, 50)),
            "error_max_ms": float(err_ms.max()),
            "device_mean_latency_us": float(np.mean(rx_ns - est_host(est, dev_ns)) / 1e3)}


def est_host(est: ClockEstimator, dev_ns: np.ndarray) -> np.ndarray:
    return np.array([est.to_host(int(d)) for d in dev_ns], dtype=np.int64)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--ecat-cycles", type=int, default=10_000)
    ap.add_argument("--json", default="bench_bridge.json")
    a = ap.parse_args()
    load_before = os.getloadavg()
    t0 = time.monotonic()
    rows = {"dxl 6 joints (pty, 1 Mbaud paced)": bench_servo("dxl", a.seconds),
            "sts 6 joints (pty, 1 Mbaud paced)": bench_servo("sts", a.seconds),
            "framed 6 joints (pty, 1 kHz device)": bench_framed(a.seconds)}
    ecat = bench_ethercat(a.ecat_cycles)
    if ecat is not None:
        rows[f"ethercat 1 slave ({a.ecat_cycles} cycles, veth)"] = ecat
    pairing = bench_pairing(a.seconds)
    result = {"rows": rows, "pairing": pairing, "load_avg_before": load_before,
              "load_avg_after": os.getloadavg(), "cpus": os.cpu_count(),
              "wall_s": time.monotonic() - t0}
    print(f"{'stream':42} {'rate Hz':>9} {'samples':>8} {'lost':>5} {'p50 us':>8} {'p99 us':>8}")
    for name, r in rows.items():
        print(f"{name:42} {r['rate_hz']:9.1f} {r['samples']:8d} {r['lost']:5d} "
              f"{r['jitter_p50_us']:8.1f} {r['jitter_p99_us']:8.1f}")
    print(f"pairing: {pairing['frames']} frames, {pairing['unpaired']} unpaired, error p50 "
          f"{pairing['error_p50_ms']:.3f} ms, max {pairing['error_max_ms']:.3f} ms")
    print(f"load average before {load_before}, after {result['load_avg_after']} "
          f"({result['cpus']} CPUs)")
    with open(a.json, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
