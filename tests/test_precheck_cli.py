"""``syncedge precheck`` end to end on the tiny model: candidates, a policy, exit codes."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from edge.commands import precheck
from edge.commands.common import run_command
from edge.episode import save_episode
from tests.fixtures.runtime import calibration_episode, motion_episode, tiny_model_dir

ROOT = Path(__file__).resolve().parents[1]


def _policy_module():
    spec = importlib.util.spec_from_file_location(
        "make_reference_policy", ROOT / "scripts" / "make_reference_policy.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture()
def setup(tmp_path: Path) -> dict[str, Path]:
    cal = save_episode(calibration_episode(3, 4, 16, 16, seed=1), tmp_path / "cal.npz")
    ep = save_episode(motion_episode(3, 6, 16, 16, seed=2), tmp_path / "ep.npz")
    acts = np.zeros((3, 5, 3), np.float32)
    acts[0, :, 0] = 0.02  # small: passes
    acts[1, 2, 1] = 0.5  # breaks the per-step bound at step 2
    acts[2, :, 2] = 0.3  # joint 2 leaves [-1, 1] at step 3 (start 0.05)
    np.save(tmp_path / "cands.npy", acts)
    (tmp_path / "rules.yaml").write_text(
        "max_step_action: 0.4\njoint_limits:\n  lower: [-1, -1, -1]\n  upper: [1, 1, 1]\n")
    return {"cal": cal, "ep": ep, "acts": tmp_path / "cands.npy",
            "rules": tmp_path / "rules.yaml", "out": tmp_path / "out", "tmp": tmp_path}


def _argv(s: dict[str, Path], *extra: str) -> list[str]:
    return ["--calibration", str(s["cal"]), "--start", str(s["ep"]), "--rules",
            str(s["rules"]), "--model", str(tiny_model_dir()), "--threads", "1",
            "--joint-state", "0,0,0.05", "--out", str(s["out"]), *extra]


def test_candidates_verdicts_ranking_and_report(setup, capsys) -> None:
    parser = argparse.ArgumentParser(prog="syncedge")
    precheck.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["precheck", *_argv(setup, "--actions", str(setup["acts"]))])
    assert args.func(args) == 0
    rep = json.loads((setup["out"] / "report.json").read_text())
    v = {x["index"]: x for x in rep["verdicts"]}
    assert v[0]["passed"] and rep["chosen_index"] == 0
    assert (v[1]["first_fail_rule"], v[1]["first_fail_step"]) == ("max_step_action", 2)
    assert (v[2]["first_fail_rule"], v[2]["first_fail_step"]) == ("joint_limits", 3)
    assert rep["ranking"][0] == "candidate-0"
    assert (setup["out"] / "report.png").stat().st_size > 0
    assert "CHOSEN" not in capsys.readouterr().err


def test_horizon_with_actions_is_refused(setup, capsys) -> None:
    rc = run_command("precheck", precheck.register,
                     _argv(setup, "--actions", str(setup["acts"]), "--horizon", "9"))
    assert rc == 2 and "--horizon goes with --policy" in capsys.readouterr().err
    assert not setup["out"].exists()


def test_a_folder_as_actions_is_named_as_a_folder(setup, capsys) -> None:
    folder = setup["acts"].parent
    rc = run_command("precheck", precheck.register, _argv(setup, "--actions", str(folder)))
    err = capsys.readouterr().err
    assert rc == 2 and f"{folder}: is a folder; expected an actions file" in err
    assert not setup["out"].exists()


def test_exit_code_1_when_nothing_passes(setup) -> None:
    setup["rules"].write_text("max_step_action: 0.001\n")
    rc = run_command("precheck", precheck.register,
                     _argv(setup, "--actions", str(setup["acts"])))
    assert rc == 1
    rep = json.loads((setup["out"] / "report.json").read_text())
    assert rep["chosen"] is None and not any(x["passed"] for x in rep["verdicts"])


def test_keep_out_and_goal_rules_on_the_model(setup) -> None:
    np.save(setup["tmp"] / "goal.npy", np.zeros((16, 16, 3), np.uint8))
    setup["rules"].write_text(
        "keep_out:\n  motion_threshold: 0\n  regions:\n"
        "    - polygon: [[0, 0], [1, 0], [1, 1], [0, 1]]\n"
        "goal:\n  image: goal.npy\n  min_ssim: 0.99\n")
    rc = run_command("precheck", precheck.register,
                     _argv(setup, "--actions", str(setup["acts"])))
    assert rc == 1
    rep = json.loads((setup["out"] / "report.json").read_text())
    assert {x["first_fail_rule"] for x in rep["verdicts"]} == {"keep_out"}
    # the tiny model has no robot mask: motion against its own zero-action rollout, so
    # what it changes when nothing moves is not taken for the robot
    assert rep["keepout_basis"] == "motion against the zero-action rollout"


def test_policy_in_the_loop(setup) -> None:
    policy = _policy_module().write_policy(setup["tmp"] / "policy", 16, 16, 3)
    rc = run_command("precheck", precheck.register,
                     _argv(setup, "--policy", str(policy / "policy.onnx"), "--horizon", "4"))
    assert rc == 0
    rep = json.loads((setup["out"] / "report.json").read_text())
    assert rep["chosen"] == "policy" and rep["horizon"] == 4
    man = json.loads((policy / "policy.json").read_text())
    import hashlib
    assert man["sha256"] == hashlib.sha256((policy / "policy.onnx").read_bytes()).hexdigest()


def test_shipped_reference_policy_matches_its_manifest() -> None:
    import hashlib

    d = ROOT / "samples" / "policies" / "reference"
    man = json.loads((d / "policy.json").read_text())
    assert man["sha256"] == hashlib.sha256((d / man["file"]).read_bytes()).hexdigest()
    assert man["inputs"]["frame"] == ["uint8", [1, 64, 64, 3]]
    rebuilt = _policy_module().build_policy(64, 64, 7).SerializeToString()
    assert hashlib.sha256(rebuilt).hexdigest() == man["sha256"]


@pytest.mark.parametrize("rules_text, match", [
    ("", "the rules file is empty"),
    ("keep_out: {motion_threshold: 5, regions: [}", "not valid YAML"),
    ("joint_limits: {lower: [0], upper: [1], center: [0]}", r"joint_limits.center: unknown key"),
])
def test_bad_rules_exit_2_and_write_nothing(setup, capsys, rules_text: str, match: str) -> None:
    setup["rules"].write_text(rules_text)
    rc = run_command("precheck", precheck.register,
                     _argv(setup, "--actions", str(setup["acts"])))
    assert rc == 2
    err = capsys.readouterr().err
    assert match.replace("\\", "") in err.replace("\\", "") or __import__("re").search(match, err)
    assert str(setup["rules"]) in err
    assert not setup["out"].exists()


def test_policy_with_wrong_width_is_refused(setup, capsys) -> None:
    policy = _policy_module().write_policy(setup["tmp"] / "p5", 16, 16, 5)
    rc = run_command("precheck", precheck.register,
                     [*_argv(setup, "--policy", str(policy / "policy.onnx"), "--horizon", "3")])
    assert rc == 2
    assert "joint_state width 5" in capsys.readouterr().err
    assert not setup["out"].exists()


def test_rules_speak_of_the_cells_dofs_when_the_model_has_more(setup) -> None:
    """A 2-DoF cell on the 3-DoF model: 3-wide candidates are accepted (the third channel is
    masked off), and the rules and joint state are the cell's 2 DoFs; the masked channel is
    not checked."""
    tmp = setup["tmp"]
    cal2 = save_episode(calibration_episode(2, 4, 16, 16, seed=1), tmp / "cal2.npz")
    acts = np.zeros((1, 4, 3), np.float32)
    acts[0, :, 0] = 0.02
    acts[0, :, 2] = 5.0  # far beyond every bound, on the channel the cell does not have
    np.save(tmp / "wide.npy", acts)
    (tmp / "rules2.yaml").write_text(
        "max_step_action: 0.4\njoint_limits:\n  lower: [-1, -1]\n  upper: [1, 1]\n")
    rc = run_command("precheck", precheck.register, [
        "--calibration", str(cal2), "--start", str(setup["ep"]), "--rules",
        str(tmp / "rules2.yaml"), "--model", str(tiny_model_dir()), "--threads", "1",
        "--joint-state", "0,0", "--actions", str(tmp / "wide.npy"), "--out",
        str(tmp / "out2")])
    assert rc == 0
    rep = json.loads((tmp / "out2" / "report.json").read_text())
    assert rep["verdicts"][0]["passed"]


def test_goal_image_is_brought_to_the_grid_as_the_start_is(setup, capsys) -> None:
    """A goal at the camera's resolution is reduced like the start frame (a whole multiple
    by area, another size centre-cropped, said); smaller is refused; a greyscale goal
    against a colour start is warned about in the report's warnings."""
    from edge.episode import load_episode
    from edge.visual import write_png

    start = load_episode(setup["ep"]).frames[0]
    write_png(setup["tmp"] / "goal4x.png", start.repeat(4, 0).repeat(4, 1))
    setup["rules"].write_text("goal:\n  image: goal4x.png\n  min_ssim: 0.0\n")

    def run(out: Path) -> int:
        return run_command("precheck", precheck.register,
                           _argv({**setup, "out": out}, "--actions", str(setup["acts"])))

    assert run(setup["out"]) == 0
    rep = json.loads((setup["out"] / "report.json").read_text())
    assert not any("goal" in w for w in rep["warnings"])
    # reduced by area, the 4x goal is the start frame itself
    from edge.precheck.rules import load_rules

    notes: list[str] = []
    assert np.array_equal(precheck._load_goal(load_rules(setup["rules"]), start, notes), start)
    assert notes == []
    # another shape, larger: centre-cropped and resized, and said
    write_png(setup["tmp"] / "goal_wide.png", np.repeat(start, 3, 1))  # 16 x 48
    setup["rules"].write_text("goal:\n  image: goal_wide.png\n  min_ssim: 0.0\n")
    out2 = setup["tmp"] / "out2"
    assert run(out2) == 0
    rep2 = json.loads((out2 / "report.json").read_text())
    assert any("goal_wide.png: an image of 48x16 px centre-cropped" in w
               for w in rep2["warnings"]), rep2["warnings"]
    # smaller: refused before any work
    write_png(setup["tmp"] / "goal_small.png", start[:8, :8])
    setup["rules"].write_text("goal:\n  image: goal_small.png\n  min_ssim: 0.0\n")
    out3 = setup["tmp"] / "out3"
    assert run(out3) == 2
    assert "goal_small.png: expected a goal image 16 px wide" in capsys.readouterr().err
    assert not out3.exists()
    # greyscale against a colour start
    grey = np.repeat(start.mean(-1, keepdims=True).astype(np.uint8), 3, -1)
    write_png(setup["tmp"] / "goal_grey.png", grey)
    setup["rules"].write_text("goal:\n  image: goal_grey.png\n  min_ssim: 0.0\n")
    out4 = setup["tmp"] / "out4"
    assert run(out4) == 0
    rep4 = json.loads((out4 / "report.json").read_text())
    assert any("the goal image is greyscale" in w for w in rep4["warnings"]), rep4["warnings"]


def test_start_of_another_cell_than_the_calibration_is_refused(setup, capsys) -> None:
    import dataclasses

    from edge.episode import load_episode

    ep = load_episode(setup["ep"])
    save_episode(dataclasses.replace(ep, metadata=dataclasses.replace(
        ep.metadata, cell_id="elsewhere")), setup["tmp"] / "other.npz")
    argv = _argv({**setup, "ep": setup["tmp"] / "other.npz"}, "--actions", str(setup["acts"]))
    capsys.readouterr()
    assert run_command("precheck", precheck.register, argv) == 2
    err = capsys.readouterr().err
    assert "recorded with cell_id 'elsewhere'" in err and "--mismatch warn" in err
    assert not setup["out"].exists()
    assert run_command("precheck", precheck.register, [*argv, "--mismatch", "warn"]) == 0
    rep = json.loads((setup["out"] / "report.json").read_text())
    assert any("recorded with cell_id 'elsewhere'" in w for w in rep["warnings"])


def test_start_of_another_cell_than_the_cached_calibration_is_refused(setup, capsys) -> None:
    """``--cell``: the start episode's cell id is compared with --cell (the camera and
    robot ids come from the start itself); it ran silently."""
    import dataclasses

    from edge.episode import load_episode
    from edge.runtime.context import encode_calibration
    from edge.runtime.model import load_model
    from tests.fixtures.runtime import MemoryContextSource

    model = load_model(tiny_model_dir(), intra_op_num_threads=1)
    ep = load_episode(setup["ep"])
    src = MemoryContextSource()
    ctx = encode_calibration(model, load_episode(setup["cal"]))
    src.put("cell-1", ep.metadata.camera_id, ep.metadata.robot_id, model.sha256, ctx.values)
    model.deactivate()
    save_episode(dataclasses.replace(ep, metadata=dataclasses.replace(
        ep.metadata, cell_id="elsewhere")), setup["tmp"] / "other.npz")
    argv = ["--cell", "cell-1", "--start", str(setup["tmp"] / "other.npz"), "--rules",
            str(setup["rules"]), "--model", str(tiny_model_dir()), "--threads", "1",
            "--joint-state", "0,0,0.05", "--out", str(setup["out"]), "--actions",
            str(setup["acts"])]
    parser = argparse.ArgumentParser()
    precheck.register(parser.add_subparsers())
    args = parser.parse_args(["precheck", *argv])
    with pytest.raises(Exception, match="recorded with cell_id 'elsewhere'.*--mismatch warn"):
        precheck.run(args, context_source=src)
    assert not setup["out"].exists()
    args = parser.parse_args(["precheck", *argv, "--mismatch", "warn"])
    assert precheck.run(args, context_source=src) == 0
    rep = json.loads((setup["out"] / "report.json").read_text())
    assert any("recorded with cell_id 'elsewhere'" in w for w in rep["warnings"])
