"""The calibration procedure end to end on the virtual cell, and its bad inputs."""

from __future__ import annotations

import importlib.util
import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

if importlib.util.find_spec("mujoco") is None:  # not imported here: MUJOCO_GL is set first
    pytest.skip("the virtual cell needs MuJoCo (pip install 'syncedge[train]')",
                allow_module_level=True)

from edge.calibrate.check import EpisodeArrays, check_arrays, load_for_check  # noqa: E402
from edge.commands import simulate  # noqa: E402
from edge.commands.common import run_command  # noqa: E402
from edge.episode import load_episode, save_episode  # noqa: E402
from tests.calib_cell_helpers import CELL, cli, codes, model_dir, record_sim  # noqa: E402


@pytest.fixture(scope="module")
def cell(tmp_path_factory) -> dict[str, Path]:
    """Plan, record and check the test cell once through the CLI."""
    d = tmp_path_factory.mktemp("cell")
    try:
        import export.cells.virtual  # noqa: F401
        from export.cells.scene import CellScene  # noqa: F401
    except Exception as exc:  # pragma: no cover - machine without robot assets or GL
        pytest.skip(f"virtual cell unavailable: {exc}")
    assert cli("plan", "--robot", CELL, "--seed", "5", "--out", str(d / "plan")) == 0
    assert cli("record", "--camera", CELL, "--joints", CELL, "--plan", str(d / "plan.json"),
               "--out", str(d / "cal.npz"), "--cell", "cell-3", "--model",
               str(model_dir())) == 0
    return {"dir": d, "plan": d / "plan.json", "episode": d / "cal.npz",
            "cache": d / "cache", "model": model_dir()}


def test_end_to_end_plan_record_check_store_validate_simulate(cell) -> None:
    d, ep_path = cell["dir"], cell["episode"]
    ep = load_episode(ep_path)
    assert ep.metadata.kind == "calibration" and ep.num_frames == 8 * 7 + 1
    assert (d / "cal.reference.png").is_file()
    assert cli("check", str(ep_path), "--out", str(d / "check")) == 0
    report = json.loads((d / "check" / "report.json").read_text())
    assert report["verdict"] == "pass" and len(report["dofs"]) == 7
    assert {x["amplitude_from"] for x in report["dofs"]} == {"plan"}  # recorded from plan.json
    assert (d / "check" / "coverage.png").is_file()
    assert len(list((d / "check").glob("dof-*.png"))) == 7
    common = ["--model", str(cell["model"]), "--cache-dir", str(cell["cache"]),
              "--threads", "1"]
    assert cli("store", str(ep_path), *common) == 0
    assert cli("plan", "--robot", CELL, "--seed", "9", "--motion", "--frames", "12",
               "--out", str(d / "motion")) == 0
    assert cli("validate", "--cell", "cell-3", "--camera", CELL, "--joints", CELL, "--plan",
               str(d / "motion.json"), *common, "--out", str(d / "commission")) == 0
    rep = json.loads((d / "commission" / "report.json").read_text())
    assert rep["fidelity"]["calibrated"]["steps"] == 11
    assert rep["fidelity"]["zeroed"]["psnr_db"] is not None
    assert rep["calibration"]["coverage_verdict"] == "pass"
    assert rep["calibration"]["collection_s"] > 5
    assert rep["equipment"]["calibration"]["joints"]["url"] == CELL
    if "keypoint" not in json.loads((cell["model"] / "model.json").read_text()).get("extra", {}):
        assert rep["control_probe"] == {"available": False, "reason": rep["control_probe"][
            "reason"]} and "keypoint" in rep["control_probe"]["reason"]
    assert (d / "commission" / "report.png").is_file()
    # simulate from the cache, with a validation episode as the start
    assert cli("record", "--camera", CELL, "--joints", CELL, "--plan", str(d / "motion.json"),
               "--out", str(d / "val.npz"), "--cell", "cell-3") == 0
    rc = run_command("simulate", simulate.register, [
        "--cell", "cell-3", "--start", str(d / "val.npz"), *common, "--out", str(d / "sim")])
    assert rc == 0
    metrics = json.loads((d / "sim" / "metrics.json").read_text())
    assert metrics["context"] == "cache:cell-3" and metrics["horizon"] == 11


def test_pairing_by_time_beats_arrival_order() -> None:
    from edge.timebase import pair_frames

    raw, ep, complete, truth = record_sim()
    assert complete and ep.metadata.extra["recording"]["joint_drift_ppm"] == pytest.approx(
        -150, abs=2)
    fs = np.array(raw.frame_stamps_ns)
    js = np.array([s.receipt_ns for s in raw.samples])
    q = np.stack([s.position_rad for s in raw.samples])
    true_q = np.stack([t[1] for t in truth])
    naive = pair_frames(fs, js, q, tolerance_s=0.05)
    timed = pair_frames(fs, js, q, tolerance_s=0.05, frame_latency_s=0.035,
                        joint_latency_s=0.003)
    ok = naive.paired & timed.paired
    err_naive = np.abs(naive.positions[ok] - true_q[ok]).max()
    err_timed = np.abs(timed.positions[ok] - true_q[ok]).max()
    assert err_timed < 0.01 < err_naive, (err_timed, err_naive)


@pytest.mark.parametrize("step_ms", [2000, -3000])
def test_a_controller_clock_that_jumps_mid_recording_still_pairs(step_ms: int) -> None:
    """The controller's clock steps at its sample 800 (mid-sweep): the recorder finds the
    step, places each stretch on the host clock on its own, and every camera frame pairs
    with the joints' true positions as without a step (on one clock line, a +2 s step left
    82 of 258 frames unpaired and others 0.49 rad off). The episode records the step."""
    from edge.timebase import capture_stamps, pair_frames

    raw, ep, complete, truth = record_sim("", f"&clock_jump_ms={step_ms}&clock_jump_at=800")
    rec = ep.metadata.extra["recording"]
    assert complete and len(rec["joint_clock_jumps"]) == 1, rec["joint_clock_jumps"]
    assert rec["joint_clock_jumps"][0]["device_step_ms"] == pytest.approx(step_ms, abs=5)
    assert rec["joint_clock"] == "device clock"
    est = capture_stamps(raw.samples)
    fs = np.array(raw.frame_stamps_ns)
    q = np.stack([s.position_rad for s in raw.samples])
    true_q = np.stack([t[1] for t in truth])
    p = pair_frames(fs, est.stamps_ns, q, tolerance_s=0.05, frame_latency_s=0.035)
    assert p.paired.all()
    assert np.abs(p.positions - true_q).max() < 0.01
    assert check_arrays(EpisodeArrays.from_episode(ep))["verdict"] == "pass"


def test_joint_samples_delivered_late_or_twice_unflagged_still_pair() -> None:
    """The controller's link hands every 40th sample over after the next one and sends
    every 70th again after the next one, flagging neither (the device counter does not
    repeat back to back): before, each read as a clock jump (60 "jumps", stretches
    placed apart); now the recording names them, places each at its own device stamp, and
    every frame pairs with the joints' true positions as on a clean link."""
    raw, ep, complete, truth = record_sim("", "&late_every=40&again_every=70")
    rec = ep.metadata.extra["recording"]
    counters = [s.device_counter for s in raw.samples]
    behind = sum(c <= max(counters[:i]) for i, c in enumerate(counters) if i)
    assert behind >= 40
    assert complete and rec["joint_clock_jumps"] == [] and rec["joint_clock"] == "device clock"
    assert rec["joint_samples_out_of_sequence"] == behind
    assert rec["joint_drift_ppm"] == pytest.approx(-150, abs=2)
    assert check_arrays(EpisodeArrays.from_episode(ep))["verdict"] == "pass"
    from edge.timebase import pair_samples

    p, _ = pair_samples(np.array(raw.frame_stamps_ns), raw.samples, tolerance_s=0.05,
                        frame_latency_s=0.035)
    true_q = np.stack([t[1] for t in truth])
    assert p.paired.all() and np.abs(p.positions - true_q).max() < 0.01


def test_a_joint_the_controller_reports_within_one_turn_reads_on_through_the_wrap() -> None:
    """The controller reports one DoF within one turn, its zero placed 3 deg below the wrap,
    and the plan sweeps it up by more than that: its readings jump by a turn out and back.
    The recorder reads the joint as turning on (before, the pairing interpolated across the
    jump and the check failed the sweep), and says where in the episode."""
    from tests.calib_cell_helpers import program

    prog = program(5)
    up = next(s for s in prog.sweeps if s.amplitude > 0.1)  # first turned up, through the wrap
    raw, ep, complete, _ = record_sim("", f"&wrap_dof={up.dof}&wrap_margin_deg=3")
    c = list(raw.joint_names).index(up.dof)
    q_raw = np.stack([s.position_rad for s in raw.samples])[:, c]
    assert np.abs(np.diff(q_raw)).max() > 6.0  # the stream itself wraps
    rec = ep.metadata.extra["recording"]
    assert complete and [(w["dof"], w["turns"]) for w in rec["joint_turns_unwrapped"]] == \
        [(up.dof, 1), (up.dof, -1)]
    k = list(ep.metadata.dof_names).index(up.dof)
    assert np.abs(ep.actions[:, k]).max() < 0.5
    report = check_arrays(EpisodeArrays.from_episode(ep))
    assert report["verdict"] == "pass", report["reasons"]
    (d,) = [d for d in report["dofs"] if d["dof"] == up.dof]
    assert d["swept_out"] == pytest.approx(abs(up.amplitude), rel=0.1)


@pytest.mark.parametrize("true_ms, entered_s", [(150, 0.01), (35, 0.135)])
def test_a_wrongly_entered_camera_latency_is_measured_and_named(true_ms: int,
                                                                entered_s: float) -> None:
    """The simulated camera's frames keep their true delay (``latency_ms``) while the
    recorder corrects by the entered one: the check measures the difference from the frames
    and names the latency to record with (docs/calibration.md, step 4)."""
    report = codes(f"&latency_ms={true_ms}", camera_latency_s=entered_s)
    lag = report["camera_lag"]
    assert lag["s"] == pytest.approx(true_ms / 1e3 - entered_s, abs=0.012), lag
    assert lag["r2"] > 0.9 > lag["r2_at_zero"] + 0.3
    assert report["verdict"] == "fail"
    (reason,) = [r for r in report["reasons"] if r["code"] == "camera_lag"]
    fixed = float(reason["message"].split("--camera-latency-s ")[1].split()[0])
    assert fixed == pytest.approx(true_ms / 1e3, abs=0.012), reason["message"]
    assert ("late" if true_ms / 1e3 > entered_s else "early") in reason["message"]


@pytest.mark.parametrize("entered_s, late_s", [(0.0, 0.09), (None, 0.0)])
def test_check_reads_the_camera_lag_of_a_slower_plan_on_the_recording(entered_s,
                                                                      late_s) -> None:
    """A plan slower than the model's timing (0.6 s sweeps, 0.5 s pauses) is checked
    through its normalised episode, whose frames are not evenly spaced in time: the lag is
    read on the recording's own frames instead (from those, a 90 ms late camera read 44 ms
    and passed)."""
    import export.cells.virtual as virtual
    from edge.calibrate.plan import plan_sweep

    prog = plan_sweep(virtual.virtual_robot_spec("test_all", 3), 5, phase_s=0.6, pause_s=0.5)
    _, ep, complete, _ = record_sim("&latency_ms=90", camera_latency_s=entered_s, prog=prog)
    assert complete and len(ep.frames) != 8 * 7 + 1
    report = check_arrays(EpisodeArrays.from_episode(ep))
    assert report["ingest"]["normalised"]
    lag = report["camera_lag"]
    assert lag["s"] == pytest.approx(late_s, abs=0.015), lag
    assert lag["frames"] == pytest.approx(lag["s"] * 10.0)  # in the model's frames
    codes_ = {r["code"] for r in report["reasons"]}
    if late_s:
        assert report["verdict"] == "fail" and "camera_lag" in codes_
        (reason,) = [r for r in report["reasons"] if r["code"] == "camera_lag"]
        fixed = float(reason["message"].split("--camera-latency-s ")[1].split()[0])
        assert fixed == pytest.approx(0.09, abs=0.015)
    else:
        assert report["verdict"] == "pass", report["reasons"]


def test_dropped_frames_names_its_cause_the_joint_stream_or_a_slow_camera() -> None:
    """Knots without a frame because the joint stream dropped samples, or because the camera
    runs at the plan's own rate (its frames fall up to half a period from the knots): the
    reason says which, not that the camera dropped frames."""
    import dataclasses

    import export.cells.virtual as virtual
    from edge.calibrate.plan import plan_sweep

    report = codes("", "&drop=0.6")
    (r,) = [r for r in report["reasons"] if r["code"] == "dropped_frames"]
    assert "had no joint sample within the pairing tolerance" in r["message"], r["message"]
    assert "the camera dropped" not in r["message"]
    spec = dataclasses.replace(virtual.virtual_robot_spec("test_all", 3), frame_rate_hz=15.0)
    _, ep, _, _ = record_sim("&fps=15", prog=plan_sweep(spec, 5))
    report = check_arrays(EpisodeArrays.from_episode(ep))
    (r,) = [r for r in report["reasons"] if r["code"] == "dropped_frames"]
    assert "the camera ran at 14" in r["message"] and "plan at a lower rate" in r["message"]


def test_a_camera_stall_across_sweeps_is_dropped_frames_not_stuck_or_clipped_joints() -> None:
    """A 1 s camera stall across three DoFs' sweeps: their knots show other moments, so the
    one reason is dropped_frames naming them, not 'stuck' or 'clipped' joints that moved."""
    report = codes("&stall_at_s=3&stall_s=1")
    assert [r["code"] for r in report["reasons"]] == ["dropped_frames"], report["reasons"]
    unjudged = [d["dof"] for d in report["dofs"] if d.get("judged") is False]
    assert unjudged and all(x in report["reasons"][0]["message"] for x in unjudged)


def test_a_lag_under_the_limit_is_named_beside_a_faint_dof() -> None:
    """A camera 30 ms later than entered (0.3 frames, under the limit) and an occluded DoF:
    no camera_lag reason, but the no_image_motion message names the lag and its fix."""
    report = codes("&latency_ms=65&occlude=Actuator4", camera_latency_s=0.035)
    assert 0.25 <= report["camera_lag"]["frames"] < 0.5
    (r,) = [r for r in report["reasons"] if r["code"] == "no_image_motion"]
    assert "frames late against the joints (camera_lag; under the 0.5-frame limit)" in \
        r["message"] and "corrected by +3" in r["message"]
    assert "camera_lag" not in {x["code"] for x in report["reasons"]}


@pytest.mark.parametrize("every", [1, 2])
def test_a_noisy_camera_passes_the_sweeps_it_shows_and_still_fails_an_occluded_dof(
        every: int) -> None:
    """Camera noise of 1.5 levels on every frame (every=1), or on every other frame as a
    video codec's alternating frames carry it (every=2): the image motion is measured above
    the noise, so every DoF the picture shows passes and the lag is still read (with the
    noise in the mean frame difference every DoF failed no_image_motion); an occluded DoF
    still fails."""
    import dataclasses

    from tests.calib_cell_helpers import record_sim

    def noisy(camera: str) -> dict:
        _, ep, _, _ = record_sim(camera)
        rng = np.random.default_rng(0)
        f = ep.frames.astype(np.float32)
        f[::every] += rng.normal(0.0, 1.5, f[::every].shape)
        ep = dataclasses.replace(ep, frames=np.clip(np.round(f), 0, 255).astype(np.uint8))
        return check_arrays(EpisodeArrays.from_episode(ep))

    report = noisy("")
    assert report["verdict"] == "pass", report["reasons"]
    assert report["camera_lag"]["r2"] > 0.9 and abs(report["camera_lag"]["frames"]) < 0.1
    occluded = noisy("&occlude=Actuator4")
    assert ("no_image_motion", "Actuator4") in {(r["code"], r["dof"])
                                                for r in occluded["reasons"]}


def test_the_right_camera_latency_measures_no_lag() -> None:
    report = codes()  # corrected by the simulated camera's own 35 ms
    assert abs(report["camera_lag"]["frames"]) < 0.1 and report["verdict"] == "pass"
    assert report["camera_lag"]["r2"] > 0.9


@pytest.mark.parametrize("camera, joints, code, dof", [
    ("&occlude=Actuator4", "", "no_image_motion", "Actuator4"),
    ("&point=away", "", "no_image_motion", None),  # every DoF: said once, of the camera
    ("", "&freeze=Actuator3", "dof_not_moving", "Actuator3"),
    ("", "&clip=Actuator1", "sweep_clipped", "Actuator1"),
    ("", "&drop_dof=Actuator5", "dof_missing", "Actuator5"),
    ("&stall_at_s=2&stall_s=0.4", "", "dropped_frames", None),  # across two DoFs' sweeps
    ("&stall_at_s=3.2&stall_s=0.2", "", "dropped_frames", "Actuator1"),  # within one
])
def test_bad_input_gives_its_reason(camera: str, joints: str, code: str, dof) -> None:
    report = codes(camera, joints)
    assert report["verdict"] == "fail"
    found = {(r["code"], r["dof"]) for r in report["reasons"]}
    assert (code, dof) in found, found
    if camera == "&point=away":  # one reason, not one per DoF
        blind = [r for r in report["reasons"] if r["code"] == "no_image_motion"]
        assert len(blind) == 1 and "the camera does not see the arm" in blind[0]["message"]


def test_disconnected_camera_keeps_the_partial_recording(cell, capsys) -> None:
    d = cell["dir"]
    rc = cli("record", "--camera", CELL + "&disconnect_at_s=3", "--joints", CELL, "--plan",
             str(cell["plan"]), "--out", str(d / "cut.npz"), "--cell", "cell-3")
    assert rc == 2
    assert "partial recording kept at" in capsys.readouterr().err
    assert not (d / "cut.npz").exists() and (d / "cut.partial.npz").is_file()
    (d / "cut.npz").write_bytes(b"an earlier recording")  # recording again over it fails too
    rc = cli("record", "--camera", CELL + "&disconnect_at_s=3", "--joints", CELL, "--plan",
             str(cell["plan"]), "--out", str(d / "cut.npz"), "--cell", "cell-3")
    assert rc == 2
    assert f"{d / 'cut.npz'} is an earlier recording, not this one (it was left as it " \
           "was)" in capsys.readouterr().err
    assert (d / "cut.npz").read_bytes() == b"an earlier recording"
    report = check_arrays(load_for_check(d / "cut.partial.npz"))
    partial = [r for r in report["reasons"] if r["code"] == "partial_recording"]
    assert partial
    # only the DoFs whose whole sweep was recorded are checked, in the plan's order (not
    # the channels': a DoF swept after the cut has no segment); the others are named
    ep = load_episode(d / "cut.partial.npz")
    checked = [x["dof"] for x in report["dofs"]]
    whole = [sg.dof for sg in ep.metadata.segments if sg.start + 8 < len(ep.frames)]
    assert 0 < len(checked) < ep.num_dof, checked
    assert sorted(checked) == sorted(whole), (checked, ep.metadata.segments)
    left = [x for x in ep.metadata.dof_names if x not in whole]
    assert f"DoF(s) {left} not (wholly) recorded and not checked" in partial[0]["message"]
    assert not any(r["dof"] in left for r in report["reasons"] if r["code"] != "dof_missing")
    # recorded again, whole: the earlier try's partial recording is removed, and said so
    (d / "cut.npz").unlink()
    capsys.readouterr()
    assert cli("record", "--camera", CELL, "--joints", CELL, "--plan", str(cell["plan"]),
               "--out", str(d / "cut.npz"), "--cell", "cell-3") == 0
    err = capsys.readouterr().err
    assert f"removed {d / 'cut.partial.npz'}" in err
    assert "enlarges" not in err  # 64x64 from the camera's 128x96: reduced, not enlarged
    assert (d / "cut.npz").is_file() and not (d / "cut.partial.npz").exists()
    # more pixels than the camera has: recorded, and said (it was silent)
    assert cli("record", "--camera", CELL, "--joints", CELL, "--plan", str(cell["plan"]),
               "--out", str(d / "big.npz"), "--cell", "cell-3", "--size", "192x192") == 0
    assert ("warning: the camera delivers 128x96 px; --size 192x192 enlarges its centre crop "
            "2.0x, which adds no detail") in capsys.readouterr().err
    # --size with --model: the model's resolution decides; refused before recording
    assert cli("record", "--camera", CELL, "--joints", CELL, "--plan", str(cell["plan"]),
               "--out", str(d / "sized.npz"), "--cell", "cell-3", "--model",
               str(cell["model"]), "--size", "96x128") == 2
    assert "--size 96x128 with --model" in capsys.readouterr().err
    assert not list(d.glob("sized*"))


def test_record_size_is_width_by_height_as_the_camera_url_gives_it() -> None:
    import argparse

    from edge.commands.calibrate import _resolution
    from edge.errors import EdgeError

    assert _resolution(argparse.Namespace(model=None, size="320x240")) == (240, 320)
    assert _resolution(argparse.Namespace(model=None, size="64X64")) == (64, 64)
    for bad in ("320", "320x0", "wide"):
        with pytest.raises(EdgeError, match="expected .*WIDTHxHEIGHT"):
            _resolution(argparse.Namespace(model=None, size=bad))


def test_record_refuses_a_joint_stream_of_another_channel_count_before_the_sweep(
        cell, capsys) -> None:
    d = cell["dir"]
    capsys.readouterr()
    rc = cli("record", "--camera", CELL, "--joints", "loop://?joints=6", "--plan",
             str(cell["plan"]), "--out", str(d / "six.npz"), "--cell", "cell-3")
    out, err = capsys.readouterr()
    assert rc == 2 and "6 unnamed channels" in err and "expected the program's 7 DoFs" in err
    assert out == ""  # no progress line: the recording never started
    assert not list(d.glob("six*"))


@pytest.mark.parametrize("case", ["folder", "fifo", "under-a-file", "unwritable", "cell-id",
                                  "robot-id"])
def test_record_refuses_its_output_and_ids_before_the_sweep(cell, capsys, monkeypatch,
                                                           case) -> None:
    # each was refused only after the whole sweep, and the recording was lost with it
    import tempfile

    d = cell["dir"] / f"refuse-{case}"
    d.mkdir()
    out, extra = d / "cal.npz", []
    if case == "folder":
        out.mkdir()
    elif case == "fifo":  # as /dev/sda: the recording was moved over it, replacing it
        os.mkfifo(out)
    elif case == "under-a-file":  # it said "plan.json: already exists"
        (d / "plan.json").write_text("{}")
        out = d / "plan.json" / "cal.npz"
    elif case == "unwritable":
        def no_write(*a, **k):
            raise PermissionError(13, "Permission denied")
        monkeypatch.setattr(tempfile, "TemporaryFile", no_write)
    elif case == "cell-id":
        extra = ["--cell", "bad/id"]
    else:
        extra = ["--cell", "cell-3", "--robot-id", "x" * 201]
    capsys.readouterr()
    rc = cli("record", "--camera", CELL, "--joints", CELL, "--plan", str(cell["plan"]),
             "--out", str(out), *(extra or ["--cell", "cell-3"]))
    stdout, err = capsys.readouterr()
    assert rc == 2 and "Traceback" not in err
    assert stdout == ""  # no progress line: the recording never started
    said = {"folder": f"{out}: is a folder", "unwritable": f"{d}: permission denied",
            "fifo": f"{out}: exists and is not a regular file",
            "under-a-file": f"{d / 'plan.json'} is a file, not a folder",
            "cell-id": "--cell 'bad/id': expected at most 200 printable characters",
            "robot-id": "--robot-id 'xxx"}[case]
    assert said in err, err
    assert [x.name for x in d.iterdir()] == (["cal.npz"] if case in ("folder", "fifo")
                                             else ["plan.json"] if case == "under-a-file"
                                             else [])
    if case == "fifo":
        assert stat.S_ISFIFO(out.stat().st_mode)  # still the pipe


@pytest.mark.parametrize("rate_hz", [30, 20])
def test_a_slow_joint_stream_is_paired_with_a_tolerance_of_its_own_interval(cell, capsys,
                                                                          rate_hz) -> None:
    """A controller that reports at 30 or 20 Hz: a frame has a joint sample on each side
    within the stream's interval, not within the default 20 ms, so without --tolerance-s the
    recorder pairs with 1.1 of the median interval and the episode passes the check; given
    20 ms, nothing pairs and the refusal names the stream's interval."""
    d = cell["dir"]
    joints = CELL + f"&rate_hz={rate_hz}&drop=0"
    assert cli("record", "--camera", CELL, "--joints", joints, "--plan", str(cell["plan"]),
               "--out", str(d / f"slow{rate_hz}.npz"), "--cell", "cell-3") == 0
    ep = load_episode(d / f"slow{rate_hz}.npz")
    rec = ep.metadata.extra["recording"]
    assert rec["tolerance_s"] == pytest.approx(1.1 / rate_hz, abs=0.002)
    report = check_arrays(load_for_check(d / f"slow{rate_hz}.npz"))
    assert report["verdict"] == "pass", report["reasons"]
    capsys.readouterr()
    assert cli("record", "--camera", CELL, "--joints", joints, "--plan", str(cell["plan"]),
               "--out", str(d / f"tight{rate_hz}.npz"), "--cell", "cell-3",
               "--tolerance-s", "0.02") == 2
    err = capsys.readouterr().err
    assert f"came every {1000 / rate_hz:.1f} ms" in err and "--tolerance-s" in err


def test_a_recording_cut_before_pairing_checks_no_dof(cell, tmp_path: Path) -> None:
    d = cell["dir"]
    rc = cli("record", "--camera", CELL + "&disconnect_at_s=0.2", "--joints", CELL, "--plan",
             str(cell["plan"]), "--out", str(d / "early.npz"), "--cell", "cell-3")
    assert rc == 2
    report = check_arrays(load_for_check(d / "early.partial.npz"))
    partial = [r for r in report["reasons"] if r["code"] == "partial_recording"][0]
    # paired or not (the virtual cell's clock decides), no DoF's sweep is there to check
    assert report["dofs"] == [] and " of None " not in partial["message"]
    assert "no DoF is checked" in partial["message"] or \
        "not (wholly) recorded and not checked" in partial["message"]
    # as the recorder keeps frames it could not pair at all
    ep = load_episode(d / "early.partial.npz")
    ep.metadata.extra["recording"].update(unpaired=True, frames_expected=57)
    save_episode(ep, tmp_path / "unpaired.npz")
    report = check_arrays(load_for_check(tmp_path / "unpaired.npz"))
    partial = [r for r in report["reasons"] if r["code"] == "partial_recording"][0]
    assert report["dofs"] == []
    assert f"{ep.num_frames} of 57 frames; its frames could not be paired with joint " \
           "samples, so no DoF is checked" in partial["message"]


def test_record_refuses_a_joint_stream_that_lacks_a_planned_channel(cell, capsys) -> None:
    # it swept the whole program, kept the episode and only then said check would refuse it
    d = cell["dir"]
    capsys.readouterr()
    rc = cli("record", "--camera", CELL, "--joints", CELL + "&drop_dof=Actuator5", "--plan",
             str(cell["plan"]), "--out", str(d / "six.npz"), "--cell", "cell-3")
    out, err = capsys.readouterr()
    assert rc == 2 and "lack the program's DoF(s) ['Actuator5']" in err, err
    assert "dof_missing" in err
    assert out == ""  # no progress line: the recording never started
    assert not list(d.glob("six*"))


def test_duplicated_dof_names_are_reported(cell, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SYNCEDGE_HOME", str(tmp_path / "home"))
    ep = load_episode(cell["episode"])
    meta = ep.metadata.to_json_dict()
    meta["dof_names"][2] = meta["dof_names"][0]
    meta["schema_version"] = 1
    arrays = {"frames": ep.frames, "actions": ep.actions, "timestamps": ep.timestamps,
              "metadata_json": np.frombuffer(json.dumps(meta).encode(), np.uint8)}
    np.savez_compressed(tmp_path / "dup.npz", **arrays)
    assert cli("check", str(tmp_path / "dup.npz")) == 1
    report = json.loads((tmp_path / "home" / "checks" / "dup" / "report.json").read_text())
    dup = [r for r in report["reasons"] if r["code"] == "dof_duplicated"]
    assert dup and meta["dof_names"][0] in dup[0]["message"]


def test_store_refuses_a_failed_check_unless_forced(cell, tmp_path: Path, capsys) -> None:
    _, ep, _, _ = record_sim("", "&clip=Actuator1")
    from edge.episode import save_episode

    path = save_episode(ep, tmp_path / "clipped.npz")
    common = ["--model", str(cell["model"]), "--cache-dir", str(tmp_path / "cache"),
              "--threads", "1"]
    assert cli("store", str(path), *common) == 2
    assert "sweep_clipped" in capsys.readouterr().err
    assert cli("store", str(path), *common, "--force", "joint 1 limit stop, to be moved") == 0
    # the clipped sweep is also under the model's range: said, not passed unseen
    assert "amplitude range too: " in capsys.readouterr().err
    from edge.cache.store import CalibrationCache

    with CalibrationCache(tmp_path / "cache") as cache:
        (info,) = cache.list()
        assert info.forced and info.forced_reason == "joint 1 limit stop, to be moved"
        assert cache.get(info.key).report["verdict"] == "fail"
        assert "DoF 'Actuator1' swept 0.1" in \
            cache.get(info.key).report["stored"]["amplitude_outside_range"]


def test_a_store_forced_for_one_reason_says_the_sweeps_are_outside_the_model_s_range(
        cell, tmp_path: Path, capsys) -> None:
    """--force given for a failed check also passes the model's calibration amplitude range
    (the technician's choice), but not unseen: a warning names the DoF and the range, and
    the entry's report records it."""
    import dataclasses

    from edge.cache.store import CalibrationCache

    ep = load_episode(cell["episode"])
    # readings 3x the motion the frames show: swept past the range the model accepts
    wide = dataclasses.replace(ep, actions=ep.actions * 3.0,
                               joint_positions=ep.joint_positions * 3.0)
    path = save_episode(wide, tmp_path / "wide.npz")
    common = ["--model", str(cell["model"]), "--cache-dir", str(tmp_path / "cache"),
              "--threads", "1"]
    assert cli("store", str(path), *common) == 2
    capsys.readouterr()
    assert cli("store", str(path), *common, "--force", "faint wrist") == 0
    err = capsys.readouterr().err
    assert "warning: --force stores past the model's calibration amplitude range too" in err
    with CalibrationCache(tmp_path / "cache") as cache:
        (info,) = cache.list()
        assert "rad" in cache.get(info.key).report["stored"]["amplitude_outside_range"]


def test_cache_entry_for_another_model_and_mismatched_episodes(cell, tmp_path: Path,
                                                               monkeypatch, capsys) -> None:
    """store --cell re-encodes the cached episode for another model; validate refuses
    another cell's episode; verify needs no model."""
    import dataclasses

    from edge.cache.store import CalibrationCache
    from edge.episode import save_episode
    from tests.calib_cell_helpers import ROOT

    monkeypatch.setenv("SYNCEDGE_HOME", str(tmp_path / "home"))  # no active bundle
    cache = tmp_path / "cache"
    fp32 = ["--model", str(cell["model"]), "--cache-dir", str(cache), "--threads", "1"]
    assert cli("store", str(cell["episode"]), *fp32) == 0
    other = ROOT / "models" / "reference-int8"
    if not (other / "model.json").is_file() or cell["model"] == other:
        pytest.skip("needs the shipped INT8 model")
    int8 = ["--model", str(other), "--cache-dir", str(cache), "--threads", "1"]
    capsys.readouterr()
    assert cli("validate", "--cell", "cell-3", "--episode", str(cell["episode"]), *int8,
               "--out", str(tmp_path / "v")) == 2
    assert "cached for other models" in capsys.readouterr().err
    assert cli("store", "--cell", "cell-3", *int8) == 0
    with CalibrationCache(cache) as c:
        infos = c.list(cell_id="cell-3")
        assert len(infos) == 2 and len({i.episode_sha256 for i in infos}) == 1
    ep = load_episode(cell["episode"])
    stranger = save_episode(dataclasses.replace(
        ep, metadata=dataclasses.replace(ep.metadata, cell_id="cell-9", kind="validation")),
        tmp_path / "c9.npz")
    capsys.readouterr()
    assert cli("validate", "--cell", "cell-3", "--episode", str(stranger), *int8,
               "--out", str(tmp_path / "v")) == 2
    err = capsys.readouterr().err
    assert "a validation episode of cell/camera/robot cell-9/" in err and "cell-3/" in err
    assert not (tmp_path / "v").exists()
    assert cli("verify", "--camera", CELL, "--cell", "cell-3", "--cache-dir", str(cache)) == 0
    assert capsys.readouterr().out.startswith("VALID")
    # validate records ordinary motion: the calibration sweep program is refused
    assert cli("validate", "--cell", "cell-3", "--camera", CELL, "--joints", CELL, "--plan",
               str(cell["plan"]), *fp32, "--out", str(tmp_path / "v")) == 2
    assert "a calibration program; validate records ordinary motion" in capsys.readouterr().err


def test_check_says_a_validation_episode_is_not_a_calibration(cell, tmp_path: Path,
                                                             capsys, monkeypatch) -> None:
    import dataclasses

    from edge.episode import save_episode

    monkeypatch.setenv("SYNCEDGE_HOME", str(tmp_path / "home"))
    ep = load_episode(cell["episode"])
    val = save_episode(dataclasses.replace(
        ep, metadata=dataclasses.replace(ep.metadata, kind="validation")), tmp_path / "v.npz")
    assert cli("check", str(val)) == 1
    assert not (tmp_path / "v.check").exists()  # written under the state root instead
    report = json.loads((tmp_path / "home" / "checks" / "v" / "report.json").read_text())
    assert [r["code"] for r in report["reasons"]] == ["not_calibration"]
    (tmp_path / "plan.json").write_text("{}")
    assert cli("check", str(tmp_path / "plan.json")) == 2
    err = capsys.readouterr().err
    assert err.count("not an episode file: expected a NumPy .npz archive") == 1
    assert "allow_pickle" not in err


def test_a_sweep_the_other_way_is_named_reversed_not_stuck(cell, tmp_path: Path) -> None:
    """A controller that turns a joint opposite to the robot spec's direction: the
    readings sweep the plan's amplitude the other way. It was reported as a joint that
    did not move (dof_not_moving, 'stuck, disabled'); it is sweep_reversed, naming the
    direction, and the other DoFs pass."""
    import dataclasses

    ep = load_episode(cell["episode"])
    segs = list(ep.metadata.segments)
    segs[2] = dataclasses.replace(segs[2], amplitude=-segs[2].amplitude)  # the plan's sign
    save_episode(dataclasses.replace(ep, metadata=dataclasses.replace(ep.metadata,
                                                                      segments=segs)),
                 tmp_path / "reversed.npz")
    report = check_arrays(load_for_check(tmp_path / "reversed.npz"))
    got = [(r["code"], r.get("dof")) for r in report["reasons"]]
    assert got == [("sweep_reversed", segs[2].dof)], got
    msg = report["reasons"][0]["message"]
    assert f"expected a sweep of {segs[2].amplitude:+.3f}" in msg
    assert f"found it swept {'-' if segs[2].amplitude > 0 else '+'}0.3" in msg
    assert "the other way" in msg and "robot spec's direction" in msg


def test_a_recording_whose_joints_left_the_program_is_named_so(cell, tmp_path: Path) -> None:
    """The arm paused mid-sweep (1.5 s in its third DoF on the virtual cell: the readings
    0.1 rad RMS from the aligned program): the frames are taken at the program's times,
    so the sweeps are read at the wrong moments. It was reported as DoFs that did not move;
    program_not_followed now comes first and says why. The clean recording passes."""
    import dataclasses

    ep = load_episode(cell["episode"])
    rec = ep.metadata.extra["recording"]
    assert rec["fit_rms"] < 1e-3
    assert check_arrays(load_for_check(cell["episode"]))["verdict"] == "pass"
    extra = {**ep.metadata.extra, "recording": {**rec, "fit_rms": 0.0995}}
    save_episode(dataclasses.replace(ep, metadata=dataclasses.replace(ep.metadata,
                                                                      extra=extra)),
                 tmp_path / "paused.npz")
    report = check_arrays(load_for_check(tmp_path / "paused.npz"))
    assert report["verdict"] == "fail"
    first = report["reasons"][0]
    assert first["code"] == "program_not_followed", report["reasons"]
    assert "0.0995 RMS from the program" in first["message"]
    assert "paused, lagged behind or ran another program" in first["message"]


def test_a_recording_kept_elsewhere_keeps_its_reference_frame(cell, capsys, monkeypatch
                                                               ) -> None:
    """The episode cannot be written at --out (a disk filling during the sweep): it is kept
    under the partial name with its reference frame beside it (the reference was lost, and
    store then took the episode's 64x64 first frame, so every verify said the resolution
    differed); store of an episode without its reference says what it falls back to."""
    import errno

    import edge.episode as episode_mod

    d = cell["dir"] / "full"
    d.mkdir()
    out = d / "cal.npz"
    real = episode_mod.save_episode

    def full(ep, path):
        if Path(path) == out:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(ep, path)

    monkeypatch.setattr(episode_mod, "save_episode", full)
    capsys.readouterr()
    rc = cli("record", "--camera", CELL, "--joints", CELL, "--plan", str(cell["plan"]),
             "--out", str(out), "--cell", "cell-3")
    err = capsys.readouterr().err
    assert rc == 2 and "No space left on device" in err, err
    kept, ref = d / "cal.partial.npz", d / "cal.partial.reference.png"
    assert kept.is_file() and ref.is_file() and f"with its reference frame {ref}" in err
    monkeypatch.setattr(episode_mod, "save_episode", real)
    from edge.runtime.inputs import load_image

    assert load_image(ref).shape[:2] != load_episode(kept).frames.shape[1:3]  # the camera's
    ref.unlink()
    rc = cli("store", str(kept), "--cache-dir", str(d / "cache"), "--model", str(cell["model"]))
    assert rc == 0
    assert "the episode's first frame, 64x64 px, is the reference" in capsys.readouterr().err


def test_readings_in_degrees_are_said_when_the_stream_opens(cell) -> None:
    """A controller reporting degrees: said from the first readings, while the technician
    can still stop (it was noticed only by check, after the sweep)."""
    from edge.calibrate.assemble import start_unit_warning
    from edge.calibrate.plan import load_program

    prog = load_program(cell["plan"])
    home = np.asarray(prog.positions[0], np.float64)
    names = list(prog.dof_names)
    assert start_unit_warning(prog, names, home) is None
    said = start_unit_warning(prog, names, np.degrees(home))
    big = int(np.argmax(np.abs(home)))
    assert said is not None and "look like degrees, not rad" in said
    assert f"{names[big]} reads {np.degrees(home[big]):.4g}" in said
    # by position (an unnamed stream) too; a near-zero home alone says nothing
    from edge.joints import positional_names

    assert start_unit_warning(prog, positional_names(len(names)),
                              np.degrees(home)) is not None
    assert start_unit_warning(prog, names, home * 0 + 0.01) is None


def test_record_through_a_traced_joint_stream(cell, capsys) -> None:
    """``trace+sim://``: the recorder runs the simulated controller's program and wakes its
    read through the trace wrapper (it never started, and the trace file was closed under
    a blocked reader thread); the recording and the trace are both whole."""
    from firmware_bridge.jointlog import read_joint_log

    d = cell["dir"] / "traced"
    d.mkdir()
    trace = d / "joints.jsonl"
    assert cli("record", "--camera", CELL, "--joints", f"trace+{CELL}&trace_path={trace}",
               "--plan", str(cell["plan"]), "--out", str(d / "cal.npz"), "--cell",
               "cell-3") == 0
    assert "Traceback" not in capsys.readouterr().err
    assert check_arrays(load_for_check(d / "cal.npz"))["verdict"] == "pass"
    log = read_joint_log(trace)
    assert len(log.samples) > 100


def test_ctrl_c_during_the_sweep_keeps_what_was_recorded(cell, capsys, monkeypatch) -> None:
    """Ctrl-C in the third DoF's sweep: exit 130 as for any interrupt, and the frames so far
    are kept as a partial recording that check reads (they were all lost)."""
    import edge.calibrate.record as record_mod

    real = record_mod._say

    def say(opts, text):
        if text.startswith("DoF 3/"):
            raise KeyboardInterrupt
        real(opts, text)

    monkeypatch.setattr(record_mod, "_say", say)
    d = cell["dir"] / "ctrl-c"
    d.mkdir()
    capsys.readouterr()
    rc = cli("record", "--camera", CELL, "--joints", CELL, "--plan", str(cell["plan"]),
             "--out", str(d / "cal.npz"), "--cell", "cell-3")
    err = capsys.readouterr().err
    assert rc == 130 and "interrupted: the " in err and "cal.partial.npz" in err, err
    assert not (d / "cal.npz").exists()
    report = check_arrays(load_for_check(d / "cal.partial.npz"))
    partial = [r for r in report["reasons"] if r["code"] == "partial_recording"]
    assert partial and "interrupted (Ctrl-C)" in partial[0]["message"], report["reasons"]
    assert len(report["dofs"]) == 2  # the two sweeps made before the interrupt


@pytest.mark.parametrize("where", ["assembly", "reference"])
def test_ctrl_c_after_the_sweep_keeps_the_recording(cell, capsys, monkeypatch, where) -> None:
    """Ctrl-C once the sweep is over, while the recording is assembled (it was lost: the
    interrupt went straight to the one-line exit) or while its reference frame is written
    (the episode was on disk without it): exit 130, and the recording is kept, as a
    partial one or completed with its reference frame."""
    import edge.calibrate.assemble as assemble_mod
    import edge.visual as visual_mod

    d = cell["dir"] / f"ctrl-c-{where}"
    d.mkdir()
    real_assemble, real_png = assemble_mod.assemble_episode, visual_mod.write_png
    state = {"first": True}

    def assemble(*a, **k):
        if state["first"]:
            state["first"] = False
            raise KeyboardInterrupt
        return real_assemble(*a, **k)

    def png(path, image):
        if state["first"] and str(path).startswith(str(d)):
            state["first"] = False
            raise KeyboardInterrupt
        return real_png(path, image)

    if where == "assembly":
        monkeypatch.setattr(assemble_mod, "assemble_episode", assemble)
    else:
        monkeypatch.setattr(visual_mod, "write_png", png)
    capsys.readouterr()
    rc = cli("record", "--camera", CELL, "--joints", CELL, "--plan", str(cell["plan"]),
             "--out", str(d / "cal.npz"), "--cell", "cell-3")
    err = capsys.readouterr().err
    assert rc == 130 and "keeping the recording" in err and "Traceback" not in err, err
    if where == "assembly":
        assert not (d / "cal.npz").exists() and "cal.partial.npz" in err
        # the whole sweep is in it: check passes it as it would the episode
        assert check_arrays(load_for_check(d / "cal.partial.npz"))["verdict"] == "pass"
    else:
        assert f"written to {d / 'cal.npz'}" in err
        from edge.episode import reference_path

        assert reference_path(d / "cal.npz").is_file()
        assert check_arrays(load_for_check(d / "cal.npz"))["verdict"] == "pass"


def test_ctrl_c_again_while_the_reader_stops_still_keeps_the_recording(cell, capsys,
                                                                       monkeypatch) -> None:
    """A second Ctrl-C while the joint reader is being stopped (a stream without wake can
    take a read timeout): the recording is still handed back, frames and stamps of equal
    length (a frame appended without its stamp made the partial's save fail)."""
    import threading

    import edge.calibrate.record as record_mod

    real_say, real_join = record_mod._say, threading.Thread.join
    state = {"first": True}

    def say(opts, text):
        if text.startswith("DoF 2/"):
            raise KeyboardInterrupt
        real_say(opts, text)

    def join(self, timeout=None):
        if state["first"] and isinstance(self, record_mod._JointReader):
            state["first"] = False
            real_join(self, timeout)
            raise KeyboardInterrupt
        return real_join(self, timeout)

    monkeypatch.setattr(record_mod, "_say", say)
    monkeypatch.setattr(threading.Thread, "join", join)
    d = cell["dir"] / "ctrl-c-twice"
    d.mkdir()
    rc = cli("record", "--camera", CELL, "--joints", CELL, "--plan", str(cell["plan"]),
             "--out", str(d / "cal.npz"), "--cell", "cell-3")
    assert rc == 130 and (d / "cal.partial.npz").is_file()
    assert "Traceback" not in capsys.readouterr().err
