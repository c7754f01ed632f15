"""The shipped pre-check kit (samples/precheck): the README's precheck command runs as
written on it, refuses the unsafe candidates for the right reason and passes the safe
ones; the docs' example rules are the kit's rules file."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from edge.cli import main
from edge.fileio import sha256_file

ROOT = Path(__file__).resolve().parent.parent
KIT = ROOT / "samples" / "precheck"


def _readme_command(name: str) -> list[str]:
    """The README's ``syncedge NAME --model ...`` command (continuation lines joined)."""
    text = (ROOT / "README.md").read_text()
    m = re.search(rf"^(syncedge {name} --model models/reference .*?)(?<!\\)$", text,
                  re.M | re.S)
    assert m, f"no 'syncedge {name} --model models/reference' command in README.md"
    argv = shlex.split(m.group(1).replace("\\\n", " "))
    assert argv[0] == "syncedge"
    return argv[1:]


def test_kit_files_match_their_manifest() -> None:
    man = json.loads((KIT / "manifest.json").read_text())
    assert man["command"] == "python scripts/make_precheck_kit.py --out samples/precheck"
    assert set(man["files"]) == {"candidates.json", "goal.png", "rules.yaml", "truth.npz"}
    for name, entry in man["files"].items():
        assert sha256_file(KIT / name) == entry["sha256"], name
    total = sum((KIT / n).stat().st_size for n in man["files"])
    assert total < 100_000  # a small kit
    sample = json.loads((ROOT / "samples/cell_sample/manifest.json").read_text())
    assert man["sample_cell"]["test.npz"] == sample["files"]["test.npz"]["sha256"]


def test_readme_precheck_runs_as_written_with_one_refusal_and_one_pass(
        tmp_path: Path, monkeypatch, capsys) -> None:
    argv = _readme_command("precheck")
    out = Path(argv[argv.index("--out") + 1])
    assert not out.is_absolute()
    monkeypatch.chdir(ROOT)
    argv[argv.index("--out") + 1] = str(tmp_path / "precheck")  # not into the checkout
    assert main(argv) == 0
    printed = capsys.readouterr().out
    rep = json.loads((tmp_path / "precheck" / "report.json").read_text())
    v = {x["name"]: x for x in rep["verdicts"]}
    assert set(v) == {"reach", "hold", "too-fast", "elbow-past-limit", "swing-into-keep-out"}
    assert v["reach"]["passed"] and v["hold"]["passed"]
    assert rep["chosen"] == "reach"  # its goal SSIM is the higher of the two that pass
    assert (v["too-fast"]["first_fail_rule"], v["too-fast"]["first_fail_step"]) == \
        ("max_step_action", 0)
    assert (v["elbow-past-limit"]["first_fail_rule"],
            v["elbow-past-limit"]["first_fail_step"]) == ("joint_limits", 13)
    assert v["swing-into-keep-out"]["first_fail_rule"] == "keep_out"
    assert "PASS" in printed and "FAIL" in printed


def test_verdicts_agree_with_the_truth_the_kit_records(tmp_path: Path, monkeypatch) -> None:
    """The rules that need no prediction agree with the kit's truth exactly; the keep-out
    verdict is compared with where MuJoCo puts the arm."""
    man = json.loads((KIT / "manifest.json").read_text())
    truth = {c["name"]: c for c in man["candidates"]}
    monkeypatch.chdir(ROOT)
    argv = _readme_command("precheck")
    argv[argv.index("--out") + 1] = str(tmp_path / "pc")
    main(argv)
    rep = json.loads((tmp_path / "pc" / "report.json").read_text())
    for v in rep["verdicts"]:
        t = truth[v["name"]]
        first = [s for s in (t["first_step_over_bound"], t["first_step_outside_joint_limits"],
                             t["first_step_truly_in_keep_out"]) if s is not None]
        assert v["passed"] == (not first), v["name"]
        if v["first_fail_rule"] == "max_step_action":
            assert v["first_fail_step"] == t["first_step_over_bound"]
        if v["first_fail_rule"] == "joint_limits":
            assert v["first_fail_step"] == t["first_step_outside_joint_limits"]
    assert truth["swing-into-keep-out"]["true_keep_out_px_max"] >= 4
    assert truth["reach"]["true_keep_out_px_max"] == 0
    with np.load(KIT / "truth.npz", allow_pickle=False) as z:
        frames = z["frames"]
        names = list(z["names"])
    from edge.runtime.inputs import load_image

    assert np.array_equal(frames[names.index("reach"), -1], load_image(KIT / "goal.png"))


def test_docs_example_rules_are_the_kits_rules_file() -> None:
    doc = (ROOT / "docs" / "runtime.md").read_text()
    m = re.search(r"### Rules file\n\n```yaml\n(.*?)```", doc, re.S)
    assert m, "docs/runtime.md: no yaml block under 'Rules file'"
    assert m.group(1) == (KIT / "rules.yaml").read_text()


@pytest.mark.slow
def test_the_kit_regenerates_identically(tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("mujoco") is None:  # not imported here: the renderer picks
        pytest.skip("needs MuJoCo (pip install '.[train]')")  # its OpenGL backend first

    spec = importlib.util.spec_from_file_location("make_precheck_kit",
                                                  ROOT / "scripts" / "make_precheck_kit.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.build(tmp_path / "kit")
    man = json.loads((KIT / "manifest.json").read_text())
    for name, entry in man["files"].items():
        assert sha256_file(tmp_path / "kit" / name) == entry["sha256"], name


def test_a_keep_out_region_over_the_arm_s_start_pose_is_said(tmp_path: Path, capsys,
                                                             monkeypatch) -> None:
    """A region drawn over where the arm stands fails every candidate at step 0, the one
    that holds still included: precheck says why (it said only 'N px of the predicted
    robot inside at step 0' per candidate), in the report's warnings too."""
    from tests.helpers import precheck_kit_argv

    monkeypatch.chdir(ROOT)
    rules = tmp_path / "rules.yaml"
    rules.write_text("keep_out:\n  basis: robot_mask\n  regions:\n    - name: all\n"
                     "      polygon: [[0, 0], [1, 0], [1, 1], [0, 1]]\n")
    argv = precheck_kit_argv(tmp_path / "pc", ROOT / "samples" / "cell_sample" / "chain.npz")
    argv[argv.index("--rules") + 1] = str(rules)
    assert main(argv) == 1  # no candidate passes
    err = capsys.readouterr().err
    assert "every candidate fails keep_out at step 0" in err
    rep = json.loads((tmp_path / "pc" / "report.json").read_text())
    assert any("the arm stands inside a keep-out region at the start" in w
               for w in rep["warnings"])
    # the same when another rule refuses some candidates first (a step too large at step
    # 0): their keep-out still fails at step 0 with the rest
    rules.write_text(rules.read_text() + "max_step_action: 0.001\n")
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert "> 0.001 at step 0" in out and "every candidate fails keep_out at step 0" in err
    # the kit's own rules: the arm starts clear of its region, nothing said
    argv = precheck_kit_argv(tmp_path / "ok", ROOT / "samples" / "cell_sample" / "chain.npz")
    assert main(argv) == 0
    assert "every candidate fails keep_out" not in capsys.readouterr().err
