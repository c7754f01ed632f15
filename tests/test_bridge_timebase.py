"""Time alignment: clock offset and drift, latency offsets, frame pairing."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from firmware_bridge.errors import BridgeError
from firmware_bridge.testing.fake_framed import FakeFramedDevice, FramedFaults
from firmware_bridge.timebase import ClockEstimator, pair_frames
from firmware_bridge.url import stream_for_url


def test_bridge_timebase_clock_offset_and_drift_synthetic():
    rng = np.random.default_rng(1)
    est = ClockEstimator(window=20_000)
    for i in range(20_000):  # 20 s at 1 kHz, device 80 ppm slow, 0-200 us receipt jitter
        d = i * 1_000_000
        est.update(d, int(3e9 + d * (1 + 80e-6) + rng.uniform(0, 2e5)))
    assert est.drift_ppm == pytest.approx(80, abs=1.0)
    assert abs(est.to_host(20_000_000_000) - (3e9 + 20e9 * (1 + 80e-6) + 1e5)) < 20_000


def test_bridge_timebase_drift_from_a_real_framed_stream():
    # the fake device's clock runs 2% fast; the estimate must see it through real I/O (a
    # large drift, so that receipt jitter on a loaded machine cannot hide it in 0.6 s)
    with FakeFramedDevice(3, 1000.0, faults=FramedFaults(clock_ppm=20_000)) as dev, \
            stream_for_url(f"frame://{dev.path}?joints=3") as s:
        est = ClockEstimator(window=5000)
        for _ in range(600):
            smp = s.read()
            est.update(smp.device_stamp_ns, smp.receipt_ns)
    assert est.drift_ppm == pytest.approx(-20_000, abs=3000)


def test_bridge_timebase_pairing_uses_latency_corrected_stamps():
    t = np.arange(0, 2_000_000_000, 3_333_333, dtype=np.int64)  # 300 Hz joint samples
    q = np.stack([np.sin(t / 1e9), t / 1e9], axis=1)  # (N, 2)
    capture = np.arange(100_000_000, 1_900_000_000, 33_333_333, dtype=np.int64)  # 30 fps
    arrive = capture + 30_000_000  # camera stamps frames 30 ms after exposure
    good = pair_frames(arrive, t, q, tolerance_s=0.005, frame_latency_s=0.030)
    assert good.paired.all()
    err_s = np.abs(good.positions[:, 1] - capture / 1e9)  # joint 1 is the time itself
    assert err_s.max() < 1e-6
    naive = pair_frames(arrive, t, q, tolerance_s=0.005)
    assert np.abs(naive.positions[:, 1] - capture / 1e9).min() > 0.029


def test_bridge_timebase_unpaired_frames_are_reported():
    t = np.array([0, 1_000_000, 2_000_000, 50_000_000, 51_000_000], dtype=np.int64)
    q = np.arange(5, dtype=np.float64)[:, None]
    frames = np.array([500_000, 20_000_000, 50_500_000, 90_000_000, -5], dtype=np.int64)
    p = pair_frames(frames, t, q, tolerance_s=0.002)
    assert list(p.unpaired) == [1, 3, 4]
    assert p.positions[0, 0] == pytest.approx(0.5) and np.isnan(p.positions[1, 0])
    with pytest.raises(BridgeError, match="strictly increasing"):
        pair_frames(frames, t[::-1], q, tolerance_s=0.002)


def test_bridge_imports_without_optional_libraries():
    code = ("import sys\n"
            "for m in ('pysoem', 'dynamixel_sdk', 'scservo_sdk'): sys.modules[m] = None\n"
            "import firmware_bridge.url, firmware_bridge.cli, firmware_bridge.dynamixel, "
            "firmware_bridge.feetech, firmware_bridge.framed, firmware_bridge.timebase\n")
    subprocess.run([sys.executable, "-c", code], check=True)
