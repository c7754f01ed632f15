"""Calibration episodes recorded at other timings on the virtual cell, end to end.

Each case plans a sweep at a timing (``calibrate plan --frame-rate-hz --sweep-seconds
--pause-seconds --amplitude``), records it from the virtual cell's camera and controller
(their own clocks, latency, jitter and drops), checks it and stores it with the shipped
model: ingest must accept every timing. One case runs in the default suite; the matrix
(camera 10/15/30 Hz, 0.3-2 s per phase, amplitudes across the model's range: 5 cases,
about 20 s on 2 cores) is marked ``slow``. The model-quality side of the same matrix is
``bench/bench_calibration_timing.py``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

if importlib.util.find_spec("mujoco") is None:  # not imported here: MUJOCO_GL is set first
    pytest.skip("the virtual cell needs MuJoCo (pip install 'syncedge[train]')",
                allow_module_level=True)

from tests.calib_cell_helpers import CELL, cli, model_dir  # noqa: E402


def _record_check_store(tmp_path: Path, rate_hz: float, phase_s: float, pause_s: float,
                        amplitude: str | None, seed: int) -> dict:
    try:
        import export.cells.virtual  # noqa: F401
    except Exception as exc:  # pragma: no cover - machine without robot assets or GL
        pytest.skip(f"virtual cell unavailable: {exc}")
    plan = ["plan", "--robot", CELL, "--seed", str(seed), "--out", str(tmp_path / "plan"),
            "--frame-rate-hz", str(rate_hz), "--sweep-seconds", str(phase_s),
            "--pause-seconds", str(pause_s), "--lead-in-s", "0.5", "--lead-out-s", "0.5"]
    assert cli(*plan, *(["--amplitude", amplitude] if amplitude else [])) == 0
    camera = CELL + f"&fps={max(30.0, rate_hz)}"
    assert cli("record", "--camera", camera, "--joints", CELL, "--plan",
               str(tmp_path / "plan.json"), "--out", str(tmp_path / "cal.npz"), "--cell",
               "cell-3", "--model", str(model_dir())) == 0
    assert cli("check", str(tmp_path / "cal.npz"), "--out", str(tmp_path / "check")) == 0
    report = json.loads((tmp_path / "check" / "report.json").read_text())
    assert report["verdict"] == "pass" and report["frames"] == 57
    # 3 frames out with a one-frame pause at 10 Hz is the model's own timing
    model_timing = (rate_hz, phase_s, pause_s) == (10.0, 0.3, 0.1)
    assert ("ingest" in report) is not model_timing
    assert cli("store", str(tmp_path / "cal.npz"), "--model", str(model_dir()),
               "--cache-dir", str(tmp_path / "cache"), "--threads", "1") == 0
    return report


def test_a_slow_sweep_at_15_hz_is_recorded_checked_and_stored(tmp_path: Path) -> None:
    report = _record_check_store(tmp_path, 15.0, 0.6, 0.2, None, 11)
    assert len(report["ingest"]["sweeps"]) == 7


@pytest.mark.slow
@pytest.mark.parametrize("rate_hz, phase_s, pause_s, amplitude", [
    (10.0, 0.3, 0.1, None),
    (10.0, 2.0, 0.0, "0.25-0.75"),
    (15.0, 1.0, 0.5, "0.2-0.4"),
    (30.0, 0.3, 0.3, "0.6-0.8"),
    (30.0, 2.0, 0.5, None),
])
def test_the_timing_matrix_is_accepted(tmp_path: Path, rate_hz, phase_s, pause_s,
                                       amplitude) -> None:
    _record_check_store(tmp_path, rate_hz, phase_s, pause_s, amplitude, 21)
