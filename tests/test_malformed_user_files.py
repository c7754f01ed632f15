"""Malformed files a user hands the check, the planner and the pre-check: one line naming the
file and the field, exit 2, nothing written (each case crashed or passed silently before)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edge.cli import main

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "cell_sample"
PRECHECK = ["precheck", "--chain", str(SAMPLE / "chain.npz"), "--start", str(SAMPLE / "test.npz"),
            "--rules", str(ROOT / "samples" / "precheck" / "rules.yaml")]


def _episode(tmp_path: Path, name: str, **change) -> Path:
    with np.load(SAMPLE / "calibration.npz", allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays.update({k: v(arrays) for k, v in change.items()})
    path = tmp_path / f"{name}.npz"
    np.savez(path, **arrays)
    return path


def _nan_at(a: np.ndarray, r: int, c: int, value: float = np.nan) -> np.ndarray:
    a = a.copy()
    a[r, c] = value
    return a


@pytest.mark.parametrize(("change", "said"), [
    ({"joint_positions": lambda z: z["joint_positions"][:30]},
     "field 'joint_positions': expected shape [57, 7] (one row per frame"),
    ({"joint_positions": lambda z: _nan_at(z["joint_positions"], 5, 2)},
     "field 'joint_positions': non-finite value nan at row 5, channel 2"),
    ({"joint_positions": lambda z: z["joint_positions"][:, :6]},
     "field 'joint_positions': expected shape [57, 7]"),
    ({"frames": lambda z: z["frames"].astype(np.float32)},
     "field 'frames': expected uint8 [T, H, W, 3] (RGB 0-255), found float32"),
    ({"actions": lambda z: _nan_at(z["actions"], 3, 1, np.inf)},
     "field 'actions': non-finite value inf at row 3, channel 1"),
    ({"actions": lambda z: z["actions"][:, :6], "joint_positions": lambda z: z["joint_positions"][:, :6]},
     "field 'metadata.dof_names': expected 6 names (one per column of 'actions'), found 7"),
], ids=["readings-rows", "readings-nan", "readings-columns", "float-frames", "actions-inf",
        "names-width"])
def test_check_refuses_arrays_it_cannot_read(tmp_path, capsys, change, said):
    path = _episode(tmp_path, "cal", **change)
    out = tmp_path / "check"
    assert main(["calibrate", "check", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: cannot check it: {said}" in err and "Traceback" not in err
    assert not out.exists() or not any(out.iterdir())


def test_check_still_reports_on_the_sample_calibration(tmp_path):
    assert main(["calibrate", "check", str(SAMPLE / "calibration.npz"), "--out",
                 str(tmp_path / "check")]) == 0


@pytest.mark.parametrize(("flag", "value", "said"), [
    ("--frame-rate-hz", "-5", "--frame-rate-hz -5: expected a number > 0"),
    ("--frame-rate-hz", "0", "--frame-rate-hz 0: expected a number > 0"),
    ("--sweep-seconds", "nan", "--sweep-seconds nan: expected a number > 0"),
    ("--lead-in-s", "-1", "--lead-in-s -1: expected a number >= 0"),
    ("--min-fraction", "1.5", "--min-fraction 1.5: expected a share of the amplitude"),
])
def test_plan_refuses_rates_and_durations_that_cannot_be(tmp_path, capsys, flag, value, said):
    out = tmp_path / "plan"
    assert main(["calibrate", "plan", "--robot", str(ROOT / "samples" / "robots" / "panda.yaml"),
                 f"{flag}={value}", "--out", str(out)]) == 2
    assert said in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("content", "said"), [
    ({"names": ["a", "b"], "candidates": [[[0.0] * 7] * 2, [[0.0] * 6] * 2]},
     "candidate 1, step 0 has 6 channels, the first step has 7"),
    ([[[0.0] * 7] * 2, [[0.0] * 7]], "candidate 1 has 1 steps, candidate 0 has 2"),
    ([[[0, "0.1", 0, 0, 0, 0, 0]]], "candidate 0, step 0, channel 1 is '0.1', expected a number"),
    ([[[0, True, 0, 0, 0, 0, 0]]], "channel 1 is True, expected a number"),
    ({"names": ["a", "a"], "candidates": [[[0.0] * 7], [[0.0] * 7]]},
     "found 'a' 2 times: name them apart"),
    ({"names": ["a", 3], "candidates": [[[0.0] * 7], [[0.0] * 7]]},
     "names: expected 2 names (non-empty strings"),
], ids=["channels", "steps", "string", "bool", "duplicate-names", "number-name"])
def test_precheck_names_the_candidate_and_step_of_malformed_json(tmp_path, capsys, content,
                                                                  said):
    f = tmp_path / "candidates.json"
    f.write_text(json.dumps(content))
    out = tmp_path / "out"
    assert main(PRECHECK + ["--actions", str(f), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert said in err and str(f) in err and "Traceback" not in err
    assert not out.exists()


def test_precheck_still_reads_one_candidate_as_a_list_of_steps(tmp_path):
    f = tmp_path / "one.json"
    f.write_text(json.dumps([[0.0] * 7, [0.01] + [0.0] * 6]))
    assert main(PRECHECK + ["--actions", str(f), "--out", str(tmp_path / "out")]) == 0


def test_precheck_reads_candidates_and_names_saved_by_numpy_savez(tmp_path):
    """``numpy.savez(path, actions=..., names=...)`` is how a policy team saves candidates
    with their names; an ``.npz`` was read as an episode only ("not a syncedge episode
    file"). The names reach the report."""
    f = tmp_path / "cands.npz"
    acts = np.zeros((2, 3, 7), np.float32)
    acts[1, :, 0] = 0.01
    for k, names in enumerate((np.array(["still", "nudge"]), np.array([b"still", b"nudge"]))):
        np.savez(f, actions=acts, names=names)  # str or bytes (dtype S) names
        out = tmp_path / f"out{k}"
        assert main(PRECHECK + ["--actions", str(f), "--out", str(out)]) in (0, 1)
        report = json.loads((out / "report.json").read_text())
        assert [v["name"] for v in report["verdicts"]] == ["still", "nudge"]


@pytest.mark.parametrize(("arrays", "said"), [
    ({"arr_0": np.zeros((2, 3, 7))}, "expected an episode or the arrays 'actions'"),
    ({"actions": np.zeros((2, 3, 7)), "extra": np.zeros(1)}, "unknown arrays ['extra']"),
    ({"actions": np.zeros((2, 3, 7)), "names": np.arange(2)},
     "names: expected a 1-D array of strings"),
    ({"actions": np.zeros((2, 3, 7)), "names": np.array(["a"])}, "names: expected 2 names"),
], ids=["unnamed", "extra", "numeric-names", "too-few-names"])
def test_precheck_names_what_is_wrong_with_a_candidates_npz(tmp_path, capsys, arrays, said):
    f = tmp_path / "cands.npz"
    np.savez(f, **arrays)
    out = tmp_path / "out"
    assert main(PRECHECK + ["--actions", str(f), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert said in err and str(f) in err and "Traceback" not in err and "cannot read" not in err
    assert not out.exists()


PNG_BYTES = b"\x89PNG\r\n\x1a\n" + bytes(range(256))


@pytest.mark.parametrize("what", ["rules", "csv-precheck", "csv-simulate", "robot"])
def test_binary_files_where_text_is_expected_are_refused_in_one_line(tmp_path, capsys, what):
    # a PNG (or any non-UTF-8 bytes) handed as a rules file, CSV actions or a robot spec
    bad = tmp_path / {"rules": "rules.yaml", "robot": "robot.yaml"}.get(what, "actions.csv")
    bad.write_bytes(PNG_BYTES)
    out = tmp_path / "out"
    if what == "rules":
        argv = PRECHECK[:-1] + [str(bad), "--actions", str(ROOT / "samples" / "precheck" /
                                                            "candidates.json")]
    elif what == "csv-precheck":
        argv = PRECHECK + ["--actions", str(bad)]
    elif what == "csv-simulate":
        argv = ["simulate", "--chain", str(SAMPLE / "chain.npz"), "--start",
                str(SAMPLE / "test.npz"), "--actions", str(bad)]
    else:
        argv = ["calibrate", "plan", "--robot", str(bad)]
    assert main(argv + ["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(bad) in err and "not UTF-8 text (byte 0x89" in err
    assert not out.exists()


def test_plan_warns_of_sweeps_beyond_the_specs_sweep_max(tmp_path, capsys):
    robot = str(ROOT / "samples" / "robots" / "panda.yaml")
    assert main(["calibrate", "plan", "--robot", robot, "--amplitude", "0.9-1.2",
                 "--out", str(tmp_path / "wide")]) == 0
    err = capsys.readouterr().err
    assert "warning: --amplitude 0.9-1.2: sweeps of up to 1.2 rad, beyond the robot spec's " \
           "sweep_max" in err and "calibrate store' refuses others" in err
    assert main(["calibrate", "plan", "--robot", robot, "--amplitude", "0.2-0.4",
                 "--out", str(tmp_path / "within")]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main(["calibrate", "plan", "--robot", robot, "--poses", "0",
                 "--out", str(tmp_path / "p")]) == 2
    assert "--poses 0: expected at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("model", ["chain", "warp"])
def test_the_threads_warning_is_in_the_metrics_as_on_stderr(tmp_path, capsys, model):
    import os

    many = str(4 * (os.cpu_count() or 1))
    which = (["--chain", str(SAMPLE / "chain.npz")] if model == "chain" else
             ["--model", str(ROOT / "models" / "reference"), "--calibration",
              str(SAMPLE / "calibration.npz")])
    out = tmp_path / "sim"
    assert main(["simulate", *which, "--start", str(SAMPLE / "test.npz"), "--threads", many,
                 "--out", str(out)]) == 0
    said = f"--threads {many}: more than this machine's"
    assert said in capsys.readouterr().err
    assert any(said in w for w in json.loads((out / "metrics.json").read_text())["warnings"])
