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
