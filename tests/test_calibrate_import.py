"""Importing calibration and validation episodes from ROS 2 bags (written with rosbags' own
writer, MCAP and SQLite3) and from LeRobot datasets; the result goes through check, store
and validate like a recorded episode."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rosbags", reason="pip install 'syncedge[ros]'")

from edge.calibrate.errors import RecordingImportError  # noqa: E402
from edge.calibrate.recording_import import ImportOptions, import_recording  # noqa: E402
from edge.calibrate.rosbag_import import pair_positions  # noqa: E402
from edge.episode import actions_from_positions, load_episode  # noqa: E402
from tests.calib_cell_helpers import (  # noqa: E402
    camera_rate_sweep_episode,
    cli,
    sweep_episode,
)
from tests.rosbag_helpers import (  # noqa: E402
    NAMES,
    T0,
    expected_rgb,
    frame_value,
    true_positions,
    write_bag,
    write_episode_bag,
)

ROOT = Path(__file__).resolve().parents[1]
OPTS = ImportOptions("cell-1")


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
@pytest.mark.parametrize("camera_hz,joint_hz,image", [
    (30.0, 100.0, "rgb8"), (15.0, 50.0, "bgr8"), (10.0, 500.0, "mono8"),
    (30.0, 40.0, "png"), (15.0, 200.0, "jpeg")])
def test_bag_frames_and_joints_paired_by_header_stamp(tmp_path: Path, storage: str,
                                                      camera_hz: float, joint_hz: float,
                                                      image: str) -> None:
    bag = write_bag(tmp_path / "bag", storage=storage, camera_hz=camera_hz,
                    joint_hz=joint_hz, image=image, shuffle_joint_order=True,
                    frames_out_of_order=True)
    ep = import_recording(bag, dataclasses.replace(OPTS, joint_names=NAMES))
    assert ep.frames.shape == (12, 24, 32, 3) and ep.frames.dtype == np.uint8
    assert ep.metadata.dof_names == NAMES and ep.metadata.kind == "calibration"
    assert ep.metadata.fps == pytest.approx(camera_hz, rel=1e-4)
    np.testing.assert_allclose(ep.timestamps, np.arange(12) / camera_hz, atol=1e-6)
    # joints move linearly in time: interpolation at the frame stamps is exact
    np.testing.assert_allclose(ep.joint_positions, true_positions(T0 + ep.timestamps),
                               atol=1e-9)
    np.testing.assert_array_equal(ep.actions, actions_from_positions(ep.joint_positions))
    # frames in stamp order although the bag holds them in another order
    # (JPEG: within 10 levels away from the red corner; frames differ by 23 levels)
    tol, m = (10, 8) if image == "jpeg" else (0, 0)
    for k, frame in enumerate(ep.frames):
        want = expected_rgb(frame_value(k))
        if image == "mono8":
            want = np.repeat(want[..., :1], 3, axis=2)
        assert np.abs(frame[m:, m:].astype(int) - want[m:, m:]).max() <= tol, k
    if image in ("rgb8", "bgr8", "png"):
        assert tuple(ep.frames[0, 0, 0]) == (255, 0, 0)  # channel order kept
    imp = ep.metadata.extra["import"]
    assert imp["storage"] == storage and imp["frames_reordered"] == 3
    assert imp["frames_duplicate_stamp"] == 0
    err = np.asarray(ep.metadata.extra["recording"]["pair_error_s"])
    assert err.shape == (12,) and err.max() <= 0.5 / joint_hz + 1e-6


@pytest.mark.parametrize("storage,suffix", [("mcap", ".mcap"), ("sqlite3", ".db3")])
def test_the_storage_file_itself_is_accepted(tmp_path: Path, storage: str, suffix: str) -> None:
    bag = write_bag(tmp_path / "bag", storage=storage)
    [file] = bag.glob(f"*{suffix}")
    ep = import_recording(file, OPTS)
    assert ep.num_frames == 12 and ep.metadata.extra["import"]["storage"] == storage
    assert ep.metadata.source == f"rosbag2:{file}"


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_joint_messages_out_of_stamp_order_are_sorted(tmp_path: Path, storage: str) -> None:
    bag = write_bag(tmp_path / "bag", storage=storage, joints_out_of_order=True)
    ep = import_recording(bag, dataclasses.replace(OPTS, joint_names=NAMES))
    np.testing.assert_allclose(ep.joint_positions, true_positions(T0 + ep.timestamps),
                               atol=1e-9)


def test_a_repeated_frame_stamp_is_dropped_and_the_check_reports_it(tmp_path: Path) -> None:
    from edge.calibrate.check import EpisodeArrays, check_arrays

    bag = write_bag(tmp_path / "bag", repeat_stamp_of=4)
    ep = import_recording(bag, OPTS)
    assert ep.num_frames == 11 and ep.metadata.extra["import"]["frames_duplicate_stamp"] == 1
    assert int(ep.frames[4, 5, 5, 0]) == frame_value(4)  # the first of the two is kept
    codes = [r["code"] for r in check_arrays(EpisodeArrays.from_episode(ep))["reasons"]]
    assert "stamps_not_monotonic" in codes


def test_unsupported_image_encoding_names_it_and_the_fix() -> None:
    from types import SimpleNamespace

    from edge.calibrate.rosbag_import import decode_image

    msg = SimpleNamespace(encoding="16UC1", height=2, width=2, step=4,
                          data=np.zeros(8, np.uint8))
    with pytest.raises(RecordingImportError, match=r"bag: topic '/d' message 3: Image encoding "
                       r"'16UC1': expected one of \['bgr8', 'bgra8', 'mono8', 'rgb8', 'rgba8'\] "
                       r"\(republish the camera as rgb8"):
        decode_image(msg, "sensor_msgs/msg/Image", "bag: topic '/d' message 3")
    short = SimpleNamespace(encoding="rgb8", height=2, width=2, step=6, data=np.zeros(8, np.uint8))
    with pytest.raises(RecordingImportError, match="expected at least 12 data bytes"):
        decode_image(short, "sensor_msgs/msg/Image", "bag")
    bad = SimpleNamespace(format="jpeg", data=np.frombuffer(b"not a jpeg", np.uint8))
    with pytest.raises(RecordingImportError, match="expected JPEG or PNG data OpenCV can decode"):
        decode_image(bad, "sensor_msgs/msg/CompressedImage", "bag")


def test_default_joint_order_is_the_first_message_s_and_joints_select(tmp_path: Path) -> None:
    bag = write_bag(tmp_path / "bag", shuffle_joint_order=True)
    ep = import_recording(bag, OPTS)
    assert sorted(ep.metadata.dof_names) == sorted(NAMES)
    np.testing.assert_allclose(ep.joint_positions,
                               true_positions(T0 + ep.timestamps, ep.metadata.dof_names),
                               atol=1e-9)
    two = import_recording(bag, dataclasses.replace(OPTS, joint_names=("joint4", "joint2"),
                                                    prismatic=("joint2",)))
    assert two.metadata.dof_names == ("joint4", "joint2")
    assert two.metadata.dof_units == ("rad", "m")
    np.testing.assert_allclose(two.joint_positions,
                               true_positions(T0 + two.timestamps, ("joint4", "joint2")),
                               atol=1e-9)


def test_frames_outside_the_joint_samples_are_dropped_and_counted(tmp_path: Path) -> None:
    bag = write_bag(tmp_path / "bag", camera_hz=10.0, joint_lead_s=-0.15)
    ep = import_recording(bag, OPTS)
    imp = ep.metadata.extra["import"]
    # joints from T0 + 0.15 to T0 + 1.05: frames at 0.0, 0.1 before, 1.1 after
    assert (imp["frames_before_joints"], imp["frames_after_joints"]) == (2, 1)
    assert ep.num_frames == 9 and ep.timestamps[0] == 0.0


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_a_missing_topic_is_named_with_what_the_bag_has(tmp_path: Path, storage: str) -> None:
    bag = write_bag(tmp_path / "noimg", storage=storage, image_topic=None)
    with pytest.raises(RecordingImportError) as e:
        import_recording(bag, OPTS)
    msg = str(e.value)
    assert str(bag) in msg and "expected one image topic" in msg
    assert "/joint_states (sensor_msgs/msg/JointState)" in msg and "--image-topic" in msg
    bag = write_bag(tmp_path / "nojoints", storage=storage, joint_topic=None)
    with pytest.raises(RecordingImportError, match="expected one joint state topic"):
        import_recording(bag, OPTS)
    bag = write_bag(tmp_path / "both", storage=storage)
    with pytest.raises(RecordingImportError) as e:
        import_recording(bag, OPTS, image_topic="/camera/color")
    assert "no topic '/camera/color'" in str(e.value)
    assert "/camera/image_raw (sensor_msgs/msg/Image)" in str(e.value)
    with pytest.raises(RecordingImportError, match="is sensor_msgs/msg/JointState; expected "
                       "sensor_msgs/msg/Image or sensor_msgs/msg/CompressedImage"):
        import_recording(bag, OPTS, image_topic="/joint_states")
    with pytest.raises(RecordingImportError, match=r"joint\(s\) \['elbow'\] never appear"):
        import_recording(bag, dataclasses.replace(OPTS, joint_names=("joint1", "elbow")))


def test_zero_header_stamps_and_joint_gaps_are_refused_with_the_fix(tmp_path: Path) -> None:
    bag = write_bag(tmp_path / "zero", zero_stamps=True)
    with pytest.raises(RecordingImportError, match="header stamps are zero.*--stamps bag"):
        import_recording(bag, OPTS)
    ep = import_recording(bag, dataclasses.replace(OPTS, stamps="bag"))
    assert ep.num_frames >= 10 and ep.metadata.extra["import"]["stamps"] == "bag"
    bag = write_bag(tmp_path / "gap", joint_gap=(0.05, 0.35))
    with pytest.raises(RecordingImportError) as e:
        import_recording(bag, OPTS)
    assert "the joint stream has a gap there" in str(e.value) and "ms apart" in str(e.value)


def test_pairing_interpolates_each_joint_on_its_own_samples() -> None:
    frames = np.array([0.0, 0.1, 0.2, 0.3])
    joints = {"a": (np.array([-0.05, 0.05, 0.15, 0.25, 0.35]), np.arange(5.0)),
              "b": (np.array([0.0, 0.3]), np.array([1.0, 4.0]))}
    keep, q, err = pair_positions(frames, joints, ["b", "a"], 0.5, "x")
    assert keep.all()
    np.testing.assert_allclose(q, [[1.0, 0.5], [2.0, 1.5], [3.0, 2.5], [4.0, 3.5]])
    np.testing.assert_allclose(err, [0.05, 0.1, 0.1, 0.05])
    with pytest.raises(RecordingImportError, match="joint 'b'.*300 ms apart"):
        pair_positions(frames, joints, ["a", "b"], 0.2, "x")


@pytest.mark.parametrize("low", [-np.pi, 0.0])
def test_a_joint_wrapping_between_two_samples_is_interpolated_across_the_wrap(low):
    """A joint reported within one turn ((-pi, pi] or [0, 2 pi)) turns through the wrap
    point between two samples (125 Hz joints, 30 Hz frames): the straight line between
    3.12 and -3.12 gave a made-up 2.09 at the frame between them (6.28 rad off after the
    episode's unwrap, then "looks like degrees" and a failed check). It is interpolated
    on the continuous readings and reported within its turn, so the episode's unwrap
    finds the wrap at its frame."""
    from edge.joints import continuous_positions

    s = np.arange(0.0, 2.0, 1 / 125)  # joint samples, s
    true = 2.5 + 1.5 * s  # rad, through pi at s = 0.43 (and 2 pi at 2.52: not reached)
    reported = np.mod(true - low, 2 * np.pi) + low
    frames = np.arange(0.028, 1.95, 1 / 30)  # 0.428 s lies between the samples around pi
    keep, q, _ = pair_positions(frames, {"a": (s, reported)}, ["a"], 0.1, "x")
    assert keep.all()
    want = np.mod(2.5 + 1.5 * frames - low, 2 * np.pi) + low
    np.testing.assert_allclose(q[:, 0], want, atol=1e-9)
    cont, wraps = continuous_positions(q, ["rad"])
    np.testing.assert_allclose(cont[:, 0] - cont[0, 0], 1.5 * (frames - frames[0]), atol=1e-9)
    assert len(wraps) == (1 if low < 0 else 0)  # [0, 2 pi) wraps at 2 pi, not reached


@pytest.mark.parametrize("storage,image", [("mcap", "png"), ("sqlite3", "rgb8")])
def test_imported_bag_goes_through_check_store_and_validate(tmp_path: Path, storage: str,
                                                            image: str, monkeypatch,
                                                            capsys) -> None:
    monkeypatch.setenv("SYNCEDGE_HOME", str(tmp_path / "home"))
    src = sweep_episode()
    bag = write_episode_bag(src, tmp_path / "cal_bag", storage=storage, image=image)
    ids = ["--cell", "cell-1", "--camera-id", "cam-1", "--robot-id", "robot-1"]
    assert cli("import", str(bag), "--out", str(tmp_path / "cal.npz"), *ids) == 0
    out = capsys.readouterr().out
    assert "calibration episode: 57 frames of 64x64 px at 10 Hz, 7 joints" in out
    ep = load_episode(tmp_path / "cal.npz")
    np.testing.assert_array_equal(ep.frames, src.frames)
    np.testing.assert_allclose(ep.joint_positions, src.joint_positions, atol=1e-9)
    np.testing.assert_allclose(ep.actions, src.actions, atol=1e-6)
    assert (tmp_path / "cal.reference.png").is_file()
    capsys.readouterr()
    assert cli("check", str(tmp_path / "cal.npz"), "--out", str(tmp_path / "chk")) == 0
    report = json.loads((tmp_path / "chk" / "report.json").read_text())
    assert report["verdict"] == "pass" and len(report["dofs"]) == 7
    # no plan came with the import: the amplitudes are the readings' own, and say so
    assert {x["amplitude_from"] for x in report["dofs"]} == {"readings"}
    printed = capsys.readouterr().out
    assert " measured " in printed and " planned " not in printed
    model = ["--model", str(ROOT / "models" / "reference"), "--cache-dir",
             str(tmp_path / "cache"), "--threads", "1"]
    assert cli("store", str(tmp_path / "cal.npz"), *model) == 0
    vbag = write_episode_bag(sweep_episode("validation"), tmp_path / "val_bag",
                             storage=storage, image=image)
    assert cli("import", str(vbag), "--out", str(tmp_path / "val.npz"), *ids, "--kind",
               "validation") == 0
    assert load_episode(tmp_path / "val.npz").metadata.kind == "validation"
    assert cli("validate", "--cell", "cell-1", "--episode", str(tmp_path / "val.npz"),
               *model, "--out", str(tmp_path / "commission")) == 0
    rep = json.loads((tmp_path / "commission" / "report.json").read_text())
    assert rep["validation_episode"]["frames"] == 24 and rep["fidelity"]["calibrated"][
        "steps"] == 23


def test_import_cli_refuses_bad_input_and_writes_nothing(tmp_path: Path, capsys) -> None:
    bag = write_bag(tmp_path / "bag", image_topic=None)
    out = tmp_path / "cal.npz"
    assert cli("import", str(bag), "--out", str(out), "--cell", "c") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "expected one image topic" in err
    assert not out.exists() and not (tmp_path / "cal.reference.png").exists()
    assert cli("import", str(tmp_path / "nothing"), "--out", str(out), "--cell", "c") == 2
    assert "no such file or folder; expected a rosbag2 recording" in capsys.readouterr().err
    assert cli("import", str(bag), "--out", str(tmp_path / "cal"), "--cell", "c") == 2
    assert "expected an episode file name ending in .npz" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [bag]


def test_lerobot_episode_imports_as_calibration_or_validation(tmp_path: Path) -> None:
    from edge.lerobot import write_lerobot

    cal, val = sweep_episode(), sweep_episode("validation")
    root = write_lerobot([cal, val], tmp_path / "ds")
    with pytest.raises(RecordingImportError, match=r"2 episodes; pass --episode-index N \(0..1\)"):
        import_recording(root, OPTS)
    with pytest.raises(RecordingImportError, match="a LeRobot dataset has no topics"):
        import_recording(root, OPTS, image_topic="/cam")
    ep = import_recording(root, OPTS, episode_index=0)
    assert ep.metadata.kind == "calibration" and ep.metadata.cell_id == "cell-1"
    assert ep.metadata.camera_id == "cam-1"  # from the dataset's syncedge metadata
    assert ep.frames.shape == cal.frames.shape
    assert np.abs(ep.frames.astype(int) - cal.frames).mean() < 2.0  # H.264, near lossless
    np.testing.assert_allclose(ep.joint_positions, cal.joint_positions, atol=1e-6)
    v = import_recording(root, dataclasses.replace(OPTS, kind="validation",
                                                   camera_id="cam-9"), episode_index=1)
    assert v.metadata.kind == "validation" and v.metadata.camera_id == "cam-9"
    assert v.num_frames == 24 and v.metadata.extra["import"]["episode_index"] == 1
    with pytest.raises(RecordingImportError, match="episode index 5: expected 0..1"):
        import_recording(root, OPTS, episode_index=5)
    # the dataset's joint names are not the controller's: renamed, segments with them
    r = import_recording(root, dataclasses.replace(OPTS, rename=(("j0", "base"),)),
                         episode_index=0)
    assert r.metadata.dof_names[:2] == ("base", "j1")
    assert r.metadata.extra["import"]["renamed"] == {"j0": "base"}
    with pytest.raises(RecordingImportError, match="--image-offset-s, --stamps, --from-s "
                                                   "and --to-s are for rosbag2"):
        import_recording(root, dataclasses.replace(OPTS, image_offset_s=0.1), episode_index=0)
    # the dataset says episode 1 is a validation episode: not imported as a calibration
    with pytest.raises(RecordingImportError, match=r"episode 1 is a 'validation' episode in the "
                                                   r"dataset, expected 'calibration': pass "
                                                   r"--kind validation"):
        import_recording(root, OPTS, episode_index=1)


def test_a_dataset_episode_is_resampled_to_the_model_s_rate_and_simulates_only_at_it(
        tmp_path: Path, capsys) -> None:
    """A 30 Hz dataset's validation episode: simulate refuses to roll its own actions out at
    the model's 10 Hz (a third of the motion per step, truth compared at the wrong steps);
    import --fps 10 keeps the frame nearest each 0.1 s tick with its positions; a higher
    rate than the recording's is refused. Without a sidecar each camera key gets its own
    camera id."""
    from edge.cli import main
    from edge.lerobot import write_lerobot

    val = sweep_episode("validation")
    fast = dataclasses.replace(val, metadata=dataclasses.replace(val.metadata, fps=30.0),
                               timestamps=np.arange(val.num_frames) / 30.0).validate()
    root = write_lerobot([fast], tmp_path / "ds")
    (root / "meta" / "syncedge_episodes.json").unlink()  # as a dataset from elsewhere
    opts = dataclasses.replace(OPTS, kind="validation")
    ep30 = import_recording(root, opts)
    assert ep30.metadata.fps == 30.0 and ep30.num_frames == 24
    assert ep30.metadata.camera_id == "cell-1-main"  # observation.images.main
    ep10 = import_recording(root, dataclasses.replace(opts, fps=10.0))
    assert ep10.metadata.fps == 10.0 and ep10.num_frames == 8  # 0 .. 0.7 s of 23/30 s
    np.testing.assert_allclose(ep10.joint_positions, fast.joint_positions[::3], atol=1e-6)
    np.testing.assert_allclose(ep10.timestamps, np.arange(8) / 10.0, atol=1e-6)
    assert ep10.metadata.extra["import"]["resampled_from_hz"] == pytest.approx(30.0)
    with pytest.raises(RecordingImportError, match=r"--fps 60: the recording runs at 30 Hz; "
                                                   r"resampling only lowers the rate"):
        import_recording(root, dataclasses.replace(opts, fps=60.0))
    from edge.episode import save_episode

    path = save_episode(ep30, tmp_path / "val30.npz")
    model = Path(__file__).resolve().parent.parent / "models" / "reference"
    assert main(["simulate", "--model", str(model), "--start", str(path), "--out",
                 str(tmp_path / "sim")]) == 2
    err = capsys.readouterr().err
    assert "metadata.fps 30 Hz, but the model steps at 10 Hz" in err and "--fps 10" in err
    assert not (tmp_path / "sim").exists()


def test_a_gripper_read_in_mm_is_named_and_imported_with_millimetres(tmp_path: Path,
                                                                      capsys) -> None:
    """A sliding channel whose readings are mm (a 25 mm opening read as a 25 m slide) is
    named at import with the fix; --millimetres converts it to m; --millimetres on a
    revolute channel is refused."""
    from edge.cli import main
    from edge.lerobot import write_lerobot

    val = sweep_episode("validation")
    q = val.joint_positions.copy()
    q[:, -1] = 10.0 + 25.0 * np.abs(np.sin(np.arange(len(q)) / 3.0))  # mm
    root = write_lerobot([dataclasses.replace(val, joint_positions=q,
                                              actions=actions_from_positions(q))],
                         tmp_path / "ds")
    names = val.metadata.dof_names
    common = ["calibrate", "import", str(root), "--cell", "c", "--kind", "validation",
              "--prismatic", names[-1]]
    assert main([*common, "--out", str(tmp_path / "a.npz")]) == 0
    err = capsys.readouterr().err
    assert f"the readings of {names[-1]} (reads 10.0 to 3" in err and "--millimetres" in err
    assert main([*common, "--millimetres", names[-1], "--out", str(tmp_path / "b.npz")]) == 0
    out, err = capsys.readouterr()
    assert "converted from mm to m" in out and "--millimetres" not in err
    ep = load_episode(tmp_path / "b.npz")
    np.testing.assert_allclose(ep.joint_positions[:, -1], q[:, -1] / 1000.0, atol=1e-6)
    assert main([*common, "--millimetres", names[0], "--out", str(tmp_path / "c.npz")]) == 2
    assert "are revolute (rad); name them in --prismatic too" in capsys.readouterr().err


def _in_degrees(ep):
    q = np.degrees(ep.joint_positions)
    return dataclasses.replace(ep, joint_positions=q, actions=actions_from_positions(q)
                               ).validate()


def test_a_sweep_read_in_degrees_is_named_by_check_and_store_and_imported_with_degrees(
        tmp_path: Path, capsys) -> None:
    """A LeRobot dataset whose state is in degrees (as SO-100 arms write it): the planned
    sweep seen 57.3 times too wide is named by the check as degrees; without the plan,
    store names degrees and the import option; --degrees imports it in rad."""
    from edge.calibrate.check import EpisodeArrays, check_arrays
    from edge.episode import CalibrationSegment
    from edge.lerobot import write_lerobot
    from edge.runtime.calibration_input import CalibrationInputError, prepare_calibration

    cal = sweep_episode()
    deg = _in_degrees(cal)
    planned = tuple(CalibrationSegment(f"j{k}", 8 * k, 8 * k + 8,
                                       float(cal.joint_positions[8 * k + 3, k]))
                    for k in range(7))  # the plan's sweeps, in rad
    report = check_arrays(EpisodeArrays.from_episode(dataclasses.replace(
        deg, metadata=dataclasses.replace(deg.metadata, segments=planned))))
    assert report["verdict"] == "fail"
    codes = {r["code"] for r in report["reasons"]}
    assert codes == {"sweep_overshoot"}, report["reasons"]
    assert "in degrees, not rad" in report["reasons"][0]["message"]
    assert check_arrays(EpisodeArrays.from_episode(dataclasses.replace(  # the same in rad
        cal, metadata=dataclasses.replace(cal.metadata, segments=planned))))["verdict"] == "pass"
    with pytest.raises(CalibrationInputError, match=r"look like degrees, not rad; convert them "
                                                    r"to rad .*--degrees j0,j1"):
        prepare_calibration(deg, 7, 8, amplitude_rad=(0.2, 0.8))
    root = write_lerobot([deg], tmp_path / "ds")
    plain = import_recording(root, OPTS)
    np.testing.assert_allclose(plain.joint_positions, deg.joint_positions, atol=1e-6)
    ep = import_recording(root, dataclasses.replace(OPTS, degrees=("all",)))
    np.testing.assert_allclose(ep.joint_positions, cal.joint_positions, atol=1e-6)
    np.testing.assert_allclose(ep.actions, cal.actions, atol=1e-6)
    assert ep.metadata.extra["import"]["converted_from_degrees"] == list(cal.metadata.dof_names)
    assert check_arrays(EpisodeArrays.from_episode(ep))["verdict"] == "pass"
    one = import_recording(root, dataclasses.replace(OPTS, degrees=("j1",)))
    np.testing.assert_allclose(one.joint_positions[:, 1], cal.joint_positions[:, 1], atol=1e-6)
    np.testing.assert_allclose(one.joint_positions[:, 0], deg.joint_positions[:, 0], atol=1e-4)
    with pytest.raises(RecordingImportError, match=r"--degrees joint\(s\) \['elbow'\] are not "
                                                   r"among the imported joints"):
        import_recording(root, dataclasses.replace(OPTS, degrees=("elbow",)))
    out = tmp_path / "cal.npz"
    assert cli("import", str(root), "--out", str(out), "--cell", "c", "--degrees", "all") == 0
    assert "readings converted from degrees to rad: j0, j1" in capsys.readouterr().out
    np.testing.assert_allclose(load_episode(out).joint_positions, cal.joint_positions,
                               atol=1e-6)


def test_missing_rosbags_names_the_extra(monkeypatch, tmp_path: Path) -> None:
    import builtins

    from edge.errors import MissingDependencyError

    real = builtins.__import__

    def block(name, *a, **k):
        if name.startswith("rosbags"):
            raise ImportError("blocked")
        return real(name, *a, **k)

    bag = write_bag(tmp_path / "bag")
    monkeypatch.setattr(builtins, "__import__", block)
    with pytest.raises(MissingDependencyError, match=r"pip install 'syncedge\[ros\]'"):
        import_recording(bag, OPTS)


def test_an_import_in_degrees_with_a_wrapped_wrist_is_named_and_reads_on(tmp_path: Path,
                                                                         capsys) -> None:
    """A LeRobot dataset in degrees whose j0 sits at 175 deg and sweeps through the +-180
    wrap: imported as written, the wrap is read on in degrees (it was a -354.7 'sweep' the
    check called too fast for the camera) and import and check say the readings look like
    degrees and name --degrees; with --degrees the import is the sweep in rad."""
    from edge.lerobot import write_lerobot

    cal = sweep_episode()
    q = cal.joint_positions.copy()
    q[:, 0] += np.radians(175.0) * np.sign(q[3, 0])  # j0 sweeps out towards the wrap
    deg = np.degrees(q)
    deg[:, 0] = (deg[:, 0] + 180.0) % 360.0 - 180.0
    assert np.abs(np.diff(deg[:, 0])).max() > 300
    ep = dataclasses.replace(cal, joint_positions=deg, actions=actions_from_positions(deg)
                             ).validate()
    root = write_lerobot([ep], tmp_path / "ds")
    (root / "meta" / "syncedge_episodes.json").unlink()  # a dataset recorded elsewhere
    out = tmp_path / "cal.npz"
    assert cli("import", str(root), "--out", str(out), "--cell", "c") == 0
    err = capsys.readouterr().err
    assert load_episode(out).metadata.extra["import"]["kind_in_dataset"] is None
    assert "look like degrees, not rad" in err and "--degrees j0,j1,j2,j3,j4,j5,j6" in err
    assert "j0 at frame" in err  # the wrap, read on
    got = load_episode(out)
    np.testing.assert_allclose(got.joint_positions[:, 0], np.degrees(q[:, 0]), atol=1e-3)
    assert cli("check", str(out), "--out", str(tmp_path / "chk")) == 0
    assert "look like degrees" in capsys.readouterr().err
    assert cli("import", str(root), "--out", str(tmp_path / "rad.npz"), "--cell", "c",
               "--degrees", "all") == 0
    assert "look like degrees" not in capsys.readouterr().err
    np.testing.assert_allclose(load_episode(tmp_path / "rad.npz").joint_positions, q,
                               atol=1e-6)


def _check(tmp_path: Path, ep_path: Path, name: str) -> dict:
    cli("check", str(ep_path), "--out", str(tmp_path / name))
    return json.loads((tmp_path / name / "report.json").read_text())


@pytest.mark.parametrize("offset_s", [-1.5, 0.2, 0.03])
def test_a_camera_stamped_on_another_clock_is_noted_measured_and_moved_back(
        tmp_path: Path, offset_s: float, capsys) -> None:
    """Camera header stamps ``offset_s`` off the joints' (another computer's clock): import
    notes the stamps' arrival delays 0.1 s or more apart with the offset that moves them
    back; check measures the lag from the frames at the camera's rate, judges it in the
    model's frames (0.03 s is 0.3 of a 10 Hz frame: passes) and names the same offset; the
    bag imported again with it passes. 1.5 s is past the 1.3 s at which this sweep's out
    leg fits its back leg (a search held within half a sweep read it as 1.2 s the other
    way)."""
    src = camera_rate_sweep_episode()
    bag = write_episode_bag(src, tmp_path / "bag", image_offset_s=offset_s)
    ep_path = tmp_path / "cal.npz"
    assert cli("import", str(bag), "--out", str(ep_path), "--cell", "c") == 0
    err = capsys.readouterr().err
    imp = load_episode(ep_path).metadata.extra["import"]
    assert imp["receive_delay_s"]["joints"] == pytest.approx(0.001, abs=1e-4)
    assert imp["receive_delay_s"]["image"] == pytest.approx(0.002 - offset_s, abs=1e-4)
    if abs(offset_s) > 0.1:
        assert f"--image-offset-s={-offset_s + 0.001:.3f}" in err
    else:
        assert "different clocks" not in err
    report = _check(tmp_path, ep_path, "chk")
    lag = report["camera_lag"]
    assert lag["s"] == pytest.approx(offset_s, abs=0.01) and lag["measured_at_hz"] == \
        pytest.approx(30.0)
    assert lag["frames"] == pytest.approx(offset_s * 10.0, abs=0.1)  # the model's frames
    if abs(offset_s) * 10.0 < 0.5:
        assert report["verdict"] == "pass", report["reasons"]
        return
    (reason,) = [r for r in report["reasons"] if r["code"] == "camera_lag"]
    assert "--image-offset-s=" in reason["message"] and "--camera-latency-s" not in \
        reason["message"]
    fix = float(reason["message"].split("--image-offset-s=")[1].split(",")[0])
    assert fix == pytest.approx(-offset_s, abs=0.01)
    again = tmp_path / "again.npz"
    assert cli("import", str(bag), "--out", str(again), "--cell", "c",
               f"--image-offset-s={fix}") == 0
    assert "different clocks" not in capsys.readouterr().err
    report = _check(tmp_path, again, "chk2")
    assert report["verdict"] == "pass", report["reasons"]
    assert abs(report["camera_lag"]["s"]) < 0.01


def test_lost_camera_frames_are_noted_at_import_and_named_by_check(tmp_path: Path,
                                                                   capsys) -> None:
    """A second of frames lost in the middle of a sweep: import says where (the episode's
    recording.gaps), and check names the gap rather than the sweep's speed."""
    src = camera_rate_sweep_episode()
    bag = write_episode_bag(src, tmp_path / "bag", drop_frames=(150, 180))
    ep_path = tmp_path / "cal.npz"
    assert cli("import", str(bag), "--out", str(ep_path), "--cell", "c") == 0
    err = capsys.readouterr().err
    assert "the camera's frames stop for 1.033 s before frame 150 (6.00 s in)" in err
    ep = load_episode(ep_path)
    assert ep.metadata.extra["recording"]["gaps"] == [150]
    assert ep.metadata.extra["import"]["frame_gaps"] == [{"frame": 150, "missing_s": 1.033333}]
    report = _check(tmp_path, ep_path, "chk")
    said = " ".join([r["message"] for r in report["reasons"]] + report["notes"])
    assert "the camera sent no frame for 1.033 s before frame 150" in said


def test_an_unstamped_publisher_of_joints_left_out_does_not_block_the_import(
        tmp_path: Path) -> None:
    bag = write_episode_bag(sweep_episode(), tmp_path / "bag", unstamped_gripper=True)
    with pytest.raises(RecordingImportError, match=r"joint\(s\) \['finger_left', "
                       r"'finger_right'\]: header stamps are zero .* or leave them out "
                       r"with --joints j0,j1,j2,j3,j4,j5,j6"):
        import_recording(bag, OPTS)
    ep = import_recording(bag, dataclasses.replace(OPTS, joint_names=tuple(
        f"j{i}" for i in range(7))))
    np.testing.assert_allclose(ep.joint_positions, sweep_episode().joint_positions, atol=1e-9)


def test_joint_names_with_a_prefix_are_stripped_and_renamed(tmp_path: Path, capsys) -> None:
    bag = write_episode_bag(sweep_episode(), tmp_path / "bag", prefix="ur5e_")
    out = tmp_path / "cal.npz"
    assert cli("import", str(bag), "--out", str(out), "--cell", "c", "--strip-prefix",
               "ur5e_", "--rename", "j0=base", "--joints", "base,j1") == 0
    assert "joints renamed: ur5e_j0 -> base, ur5e_j1 -> j1" in capsys.readouterr().out
    ep = load_episode(out)
    assert ep.metadata.dof_names == ("base", "j1")
    assert ep.metadata.extra["import"]["joints_in_bag"][:2] == ["ur5e_j0", "ur5e_j1"]
    with pytest.raises(RecordingImportError, match=r"--rename \['x'\]: not among the "
                                                   r"recording's joints"):
        import_recording(bag, dataclasses.replace(OPTS, strip_prefix="ur5e_",
                                                  rename=(("x", "y"),)))
    with pytest.raises(RecordingImportError, match=r"joint name\(s\) \['j1'\] stand for more "
                                                   r"than one"):
        import_recording(bag, dataclasses.replace(OPTS, strip_prefix="ur5e_",
                                                  rename=(("j0", "j1"),)))
    assert cli("import", str(bag), "--out", str(out), "--cell", "c", "--rename", "a") == 2
    assert "expected comma-separated OLD=NEW pairs" in capsys.readouterr().err


def test_joints_that_never_move_in_a_calibration_are_named_with_the_joints_to_keep(
        tmp_path: Path, capsys) -> None:
    src = camera_rate_sweep_episode(extra_still=2)
    bag = write_episode_bag(src, tmp_path / "bag")
    out = tmp_path / "cal.npz"
    assert cli("import", str(bag), "--out", str(out), "--cell", "c") == 0
    keep = ",".join(f"j{i}" for i in range(7))
    assert ("joint(s) ['finger0', 'finger1'] hardly move in this recording" in
            capsys.readouterr().err)
    report = _check(tmp_path, out, "chk")
    (reason,) = report["reasons"]
    assert reason["code"] == "never_swept" and f"--joints {keep}" in reason["message"]
    assert cli("import", str(bag), "--out", str(out), "--cell", "c", "--joints", keep) == 0
    assert _check(tmp_path, out, "chk2")["verdict"] == "pass"


def test_camera_info_gives_the_field_of_view_and_store_chain_asks_for_it_first(
        tmp_path: Path, capsys) -> None:
    fy = 40.0
    bag = write_episode_bag(sweep_episode(), tmp_path / "bag", camera_info_fy=fy)
    out = tmp_path / "cal.npz"
    assert cli("import", str(bag), "--out", str(out), "--cell", "c") == 0
    want = float(np.degrees(2 * np.arctan(64 / (2 * fy))))
    assert f"camera field of view {want:.2f} deg (vertical) from /cam/camera_info" in \
        capsys.readouterr().out
    cam = load_episode(out).metadata.camera
    assert cam["fovy_deg"] == pytest.approx(want, abs=1e-5)
    assert cam["intrinsics"]["fy"] == fy and cam["intrinsics"]["cx"] == 32.0
    plain = write_episode_bag(sweep_episode(), tmp_path / "plain")
    assert cli("import", str(plain), "--out", str(tmp_path / "plain.npz"), "--cell", "c") == 0
    capsys.readouterr()
    # no field of view: refused before the check and the chain's minutes
    assert cli("store", str(tmp_path / "plain.npz"), "--chain", "--cache-dir",
               str(tmp_path / "cache")) == 2
    cap = capsys.readouterr()
    assert "metadata.camera has no 'fovy_deg'" in cap.err and "pass --fovy-deg" in cap.err
    assert "reading the chain from" not in cap.err and not (tmp_path / "cache").exists()


def test_a_bag_without_metadata_or_cut_short_names_the_repair(tmp_path: Path) -> None:
    bag = write_episode_bag(sweep_episode(), tmp_path / "bag")
    (bag / "metadata.yaml").unlink()
    with pytest.raises(RecordingImportError, match=r"no metadata.yaml .* 'ros2 bag reindex "):
        import_recording(bag, OPTS)
    (storage,) = bag.glob("*.mcap")
    with pytest.raises(RecordingImportError, match=r"no metadata.yaml"):
        import_recording(storage, OPTS)
    data = storage.read_bytes()
    storage.write_bytes(data[:len(data) - 100])  # still being written: no end magic
    with pytest.raises(RecordingImportError, match=r"does not end as a finished MCAP file .* "
                                                   r"'mcap recover FILE -o FIXED.mcap'"):
        import_recording(bag, OPTS)
    cut = write_episode_bag(sweep_episode(), tmp_path / "cut")
    (storage,) = cut.glob("*.mcap")
    data = storage.read_bytes()
    storage.write_bytes(data[:len(data) // 2])
    with pytest.raises(RecordingImportError, match=r"cut short or damaged .* 'mcap recover "):
        import_recording(cut, OPTS)


def test_a_frame_of_another_size_is_refused_and_only_kept_frames_are_decoded(
        tmp_path: Path) -> None:
    bag = write_bag(tmp_path / "bag", taller_frame=5)
    with pytest.raises(RecordingImportError, match=r"message 5: a 32x26 frame after 32x24 "
                                                   r"ones; expected one camera mode"):
        import_recording(bag, OPTS)
    # a frame left out (before the joint samples) is not decoded: its size does not matter
    late = write_bag(tmp_path / "late", taller_frame=0, joint_lead_s=-0.01)
    ep = import_recording(late, OPTS)
    assert ep.metadata.extra["import"]["frames_before_joints"] == 1
    assert ep.frames.shape[1:3] == (24, 32)


def test_a_camera_two_seconds_off_fails_ingest_with_the_import_s_offset_named(
        tmp_path: Path) -> None:
    """Camera stamps 2 s ahead of the joints: the last sweep's return is paired with
    poses 2 s earlier, so ingest refuses (no_return) before any lag is measured; the
    reason names the offset the bag's stamp delays point to."""
    bag = write_episode_bag(camera_rate_sweep_episode(), tmp_path / "bag", image_offset_s=2.0)
    out = tmp_path / "cal.npz"
    assert cli("import", str(bag), "--out", str(out), "--cell", "c") == 0
    report = _check(tmp_path, out, "chk")
    (reason,) = report["reasons"]
    assert reason["code"] == "no_return"
    assert "import the bag again with --image-offset-s=-1.999 first" in reason["message"]


def test_an_uncalibrated_camera_info_is_noted_not_fatal_unless_named(tmp_path: Path,
                                                                      capsys) -> None:
    bag = write_episode_bag(sweep_episode(), tmp_path / "bag", camera_info_fy=0.0)
    out = tmp_path / "cal.npz"
    assert cli("import", str(bag), "--out", str(out), "--cell", "c") == 0
    assert "CameraInfo /cam/camera_info holds no calibration" in capsys.readouterr().err
    assert "fovy_deg" not in load_episode(out).metadata.camera
    with pytest.raises(RecordingImportError, match="no CameraInfo message holds a calibration"):
        import_recording(bag, OPTS, camera_info_topic="/cam/camera_info")


def test_camera_info_beside_a_compressed_image_topic_is_found(tmp_path: Path) -> None:
    bag = write_episode_bag(sweep_episode(), tmp_path / "bag", camera_info_fy=50.0,
                            image_topic="/cam/image_raw/compressed")
    ep = import_recording(bag, OPTS)
    assert ep.metadata.camera["intrinsics"]["topic"] == "/cam/camera_info"
    assert not ep.metadata.extra["import"]["notes"]
    other = write_episode_bag(sweep_episode(), tmp_path / "other", camera_info_fy=50.0,
                              image_topic="/front/image")
    ep = import_recording(other, OPTS)  # the bag's only one, not beside: said
    assert ep.metadata.camera["intrinsics"]["topic"] == "/cam/camera_info"
    assert "not beside the image topic /front/image" in ep.metadata.extra["import"]["notes"][0]


def test_a_depth_stream_is_named_as_such() -> None:
    from types import SimpleNamespace

    from edge.calibrate.rosbag_import import decode_image

    msg = SimpleNamespace(format="16UC1; compressedDepth png", data=b"\x00" * 40)
    with pytest.raises(RecordingImportError, match="a depth stream; expected the colour "
                                                   "camera's frames"):
        decode_image(msg, "sensor_msgs/msg/CompressedImage", "bag: topic '/depth'")


def test_a_window_of_a_longer_bag_is_imported(tmp_path: Path, capsys) -> None:
    bag = write_bag(tmp_path / "bag", frames=12)
    out = tmp_path / "cal.npz"
    assert cli("import", str(bag), "--out", str(out), "--cell", "c", "--from-s", "0.09",
               "--to-s", "0.24") == 0
    assert "window 0.09..0.24 s: 7 frame(s) outside it left out" in capsys.readouterr().out
    ep = load_episode(out)
    values = [int(f[1, 1, 0]) for f in ep.frames]
    assert values == [frame_value(k) for k in range(3, 8)]
    np.testing.assert_allclose(ep.joint_positions,
                               true_positions(T0 + np.arange(3, 8) / 30.0), atol=1e-9)
    with pytest.raises(RecordingImportError, match=r"hold 0 frame\(s\) of the camera's"):
        import_recording(bag, dataclasses.replace(OPTS, from_s=5.0))
    # a repeated stamp outside the window is not the window's
    rep = write_bag(tmp_path / "rep", frames=12, repeat_stamp_of=9)
    ep = import_recording(rep, dataclasses.replace(OPTS, to_s=0.24))
    assert ep.metadata.extra["import"]["frames_duplicate_stamp"] == 0
    assert ep.metadata.extra["recording"]["camera_stamps_non_monotonic"] == 0
    assert ep.metadata.extra["recording"]["camera_frames"] == 8
    assert import_recording(rep, OPTS).metadata.extra["import"]["frames_duplicate_stamp"] == 1
    # a gap's time is counted from the camera's first frame, as the window is
    gap = write_bag(tmp_path / "gap", frames=30, joint_gap=(0.45, 0.8))
    with pytest.raises(RecordingImportError, match=r"the frame at \+0\.467 s \(from the first "
                                                   r"frame\)"):
        import_recording(gap, dataclasses.replace(OPTS, from_s=0.3))
    with pytest.raises(RecordingImportError, match="expected --from-s below --to-s"):
        ImportOptions("c", from_s=2.0, to_s=1.0)


def test_joint_samples_without_a_position_are_left_out_or_the_joint_named(
        tmp_path: Path) -> None:
    """NaN is a driver's "no reading": a few such samples are left out (the frames pair
    across them) and noted; a joint that never reports a position is refused naming the
    --joints that leave it out."""
    bag = write_bag(tmp_path / "bag", nan_samples=("joint3", (10, 11)))
    ep = import_recording(bag, OPTS)
    t = T0 + np.arange(12) / 30.0
    np.testing.assert_allclose(ep.joint_positions, true_positions(t), atol=1e-9)
    assert ep.metadata.extra["import"]["joint_samples_nan"] == {"joint3": 2}
    assert "joint samples without a position (NaN) left out: joint3 2" in \
        ep.metadata.extra["import"]["notes"][0]
    blind = write_bag(tmp_path / "blind", no_position_joint="grip")
    with pytest.raises(RecordingImportError, match=r"joint\(s\) \['grip'\] report no position "
                       r".* --joints joint1,joint2,joint3,joint4,joint5,joint6,joint7"):
        import_recording(blind, OPTS)
    with pytest.raises(RecordingImportError, match=r"leave them out with --joints joint1,"
                                                   r"joint2$"):
        import_recording(blind, dataclasses.replace(OPTS, joint_names=("joint1", "joint2",
                                                                       "grip")))
    ep = import_recording(blind, dataclasses.replace(OPTS, joint_names=NAMES))
    assert ep.metadata.dof_names == NAMES


def test_joints_on_two_topics_are_read_together_when_both_are_named(tmp_path: Path) -> None:
    src = sweep_episode()
    bag = write_episode_bag(src, tmp_path / "bag", own_topic=("/gripper/joint_states",
                                                              ("j5", "j6")))
    with pytest.raises(RecordingImportError, match=r"found 2 \(/gripper/joint_states, "
                       r"/joint_states\).* \(or --joint-topic /gripper/joint_states,"
                       r"/joint_states to read"):
        import_recording(bag, OPTS)
    # the channels come in the order the bag first names them, whatever the topics' order
    for topics in ("/joint_states,/gripper/joint_states", "/gripper/joint_states,/joint_states"):
        ep = import_recording(bag, OPTS, joint_topic=topics)
        assert ep.metadata.dof_names == tuple(f"j{i}" for i in range(7)), topics
        np.testing.assert_allclose(ep.joint_positions, src.joint_positions, atol=1e-9)
    twice = import_recording(bag, OPTS, joint_topic="/joint_states,/joint_states")
    assert twice.metadata.extra["import"]["joint_messages"] == \
        import_recording(bag, OPTS, joint_topic="/joint_states,/gripper/joint_states"
                         ).metadata.extra["import"]["joint_messages"] // 2
    with pytest.raises(RecordingImportError, match="no topic '/nope'"):
        import_recording(bag, OPTS, joint_topic="/joint_states,/nope")


def test_readings_in_another_unit_are_scaled_and_a_suffix_stripped(tmp_path: Path,
                                                                   capsys) -> None:
    src = sweep_episode()
    bag = write_episode_bag(src, tmp_path / "bag", prefix="arm/")
    names = ImportOptions("c", strip_prefix="arm/", strip_suffix=".pos")
    assert names.renamed(["arm/j0.pos", "j1.pos", ".pos", "arm/"], "x") == \
        ["j0", "j1", ".pos", "arm/"]
    out = tmp_path / "cal.npz"
    assert cli("import", str(bag), "--out", str(out), "--cell", "c", "--strip-prefix", "arm/",
               "--scale", "j0=0.5,j3=-2") == 0
    assert "readings scaled: j0 x 0.5, j3 x -2" in capsys.readouterr().out
    ep = load_episode(out)
    want = src.joint_positions.copy()
    want[:, 0] *= 0.5
    want[:, 3] *= -2
    np.testing.assert_allclose(ep.joint_positions, want, atol=1e-9)
    assert ep.metadata.extra["import"]["scaled"] == {"j0": 0.5, "j3": -2.0}
    assert cli("import", str(bag), "--out", str(out), "--cell", "c", "--scale", "j0") == 2
    assert "expected comma-separated NAME=FACTOR pairs" in capsys.readouterr().err
    with pytest.raises(RecordingImportError, match=r"--scale joint\(s\) \['nope'\]"):
        import_recording(bag, dataclasses.replace(OPTS, strip_prefix="arm/",
                                                  scale=(("nope", 2.0),)))
    with pytest.raises(RecordingImportError, match="one finite, non-zero factor per joint"):
        ImportOptions("c", scale=(("j0", 0.0),))


def test_a_dataset_whose_fps_disagrees_with_its_timestamps_is_refused(tmp_path: Path) -> None:
    from edge.lerobot import write_lerobot

    root = write_lerobot([sweep_episode()], tmp_path / "ds")
    info = json.loads((root / "meta" / "info.json").read_text())
    info["fps"] = 15
    (root / "meta" / "info.json").write_text(json.dumps(info))
    with pytest.raises(Exception, match=r"meta/info.json says fps 15, but the frames' "
                                        r"'timestamp' column steps 100.0 ms \(10 Hz\)"):
        import_recording(root, OPTS)


def test_a_dataset_s_state_names_are_checked_against_its_width(tmp_path: Path) -> None:
    from edge.errors import EpisodeError
    from edge.lerobot import write_lerobot

    root = write_lerobot([sweep_episode()], tmp_path / "ds")
    (root / "meta" / "syncedge_episodes.json").unlink(missing_ok=True)
    info_path = root / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    names = info["features"]["observation.state"]["names"]
    info["features"]["observation.state"]["names"] = names[:6]
    info_path.write_text(json.dumps(info))
    with pytest.raises(EpisodeError, match=r"6 names .* for a shape of \[7\]; expected one "
                                           r"name per state column"):
        import_recording(root, OPTS)
    info["features"]["observation.state"]["names"] = None
    info_path.write_text(json.dumps(info))
    ep = import_recording(root, OPTS)
    assert ep.metadata.dof_names == tuple(f"dof{i}" for i in range(7))
    assert "the dataset names no joints" in ep.metadata.extra["import"]["notes"][0]


def test_a_dataset_of_several_cameras_names_them_and_how_to_choose_a_fixed_one(
        tmp_path: Path) -> None:
    """ALOHA-style datasets hold a fixed camera and wrist cameras; the import reads the
    first and says which it took, which others there are and that the chain model needs a
    fixed one; a dataset of one camera, or a --camera-key given, gets no such note."""
    from edge.lerobot import lerobot_video_keys, write_lerobot

    cal = sweep_episode()
    root = write_lerobot([cal], tmp_path / "ds")
    info_path = root / "meta" / "info.json"
    one = import_recording(root, OPTS).metadata.extra["import"]["notes"]
    assert not any("cameras" in n for n in one)
    info = json.loads(info_path.read_text())
    info["features"]["observation.images.left_wrist"] = dict(
        info["features"]["observation.images.main"])
    info_path.write_text(json.dumps(info))
    assert lerobot_video_keys(root) == ["observation.images.main",
                                        "observation.images.left_wrist"]
    notes = import_recording(root, OPTS).metadata.extra["import"]["notes"]
    (note,) = [n for n in notes if "cameras" in n]
    assert ("holds 2 cameras (observation.images.main, observation.images.left_wrist): "
            "imported observation.images.main, the first") in note
    assert "wrist camera" in note and "--camera-key" in note
    chosen = import_recording(root, OPTS, camera_key="observation.images.main")
    assert not any("cameras" in n for n in chosen.metadata.extra["import"]["notes"])
