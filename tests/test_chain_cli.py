"""The chain model through the commands: ``simulate --chain`` and ``precheck --chain`` on
the shipped sample cell's chain calibration, their refusals, and ``model read-chain``'s."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from edge.cli import main
from edge.episode import load_episode
from edge.metrics import psnr
from edge.runtime.chain import load_chain_calibration
from tests.helpers import precheck_kit_argv

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "cell_sample"
CHAIN = SAMPLE / "chain.npz"
KIT = ROOT / "samples" / "precheck"


def test_the_sample_chain_matches_its_manifest_and_its_calibration():
    from edge.fileio import sha256_file

    man = json.loads((SAMPLE / "chain.json").read_text())
    chain = load_chain_calibration(CHAIN)
    assert man["sha256"] == chain.sha256()
    assert man["info"]["calibration"]["sha256"] == sha256_file(SAMPLE / "calibration_256.npz")
    assert man["command"].startswith("syncedge model read-chain --calibration "
                                     "samples/cell_sample/calibration_256.npz")
    assert chain.dof_names == list(load_episode(SAMPLE / "test.npz").metadata.dof_names)
    # the fit redraws each channel's sweep peak better than the home frame does
    for row in man["sweep_peaks"]:
        if row["changed_psnr_db"] is not None:
            assert row["changed_psnr_db"] > row["home_changed_psnr_db"], row


def test_simulate_chain_beats_copy_last_on_the_sample_cell(tmp_path, capsys):
    out = tmp_path / "sim"
    assert main(["simulate", "--chain", str(CHAIN), "--start", str(SAMPLE / "test.npz"),
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "model syncedge-chain numpy" in printed
    m = json.loads((out / "metrics.json").read_text())
    test = load_episode(SAMPLE / "test.npz")
    truth = test.frames[1:]
    copy_last = np.mean([psnr(test.frames[0], f) for f in truth])
    assert m["backend"] == "numpy" and m["model_id"]["name"] == "syncedge-chain"
    assert m["horizon"] == len(truth) == len(m["per_step"])
    # 30.0 dB against 22.4 for copying the start frame when this test was written
    assert m["summary"]["psnr_db"] > copy_last + 4.0, (m["summary"], copy_last)
    # the baseline is in the metrics and printed beside the prediction's
    assert m["copy_last"]["summary"]["psnr_db"] == pytest.approx(copy_last, abs=1e-3)
    assert len(m["copy_last"]["per_step_psnr_db"]) == len(truth)
    assert f"copy-last (the start frame held): PSNR {m['copy_last']['summary']['psnr_db']} dB" \
        in printed
    assert m["per_step"][15]["psnr_db"] > psnr(test.frames[0], truth[15]) + 2.0
    assert not any("below copying the start frame" in w for w in m["warnings"])
    with np.load(out / "prediction.npz") as z:
        assert z["frames"].shape == (1, len(truth), 64, 64, 3)
    assert sorted(p.name for p in out.iterdir()) == [".syncedge-outputs.json",
                                                     "contact_sheet.png", "metrics.json",
                                                     "prediction.mp4", "prediction.npz"]


def test_simulate_chain_from_a_start_under_another_light(tmp_path, capsys):
    # the light dimmed to 0.6 since the calibration: without matching, what the arm leaves
    # was drawn in the calibration's light (29.3 dB on these 39 steps when this test was
    # written, against 34.5 matched and 26.9 for copying the start frame)
    import dataclasses

    from edge.episode import save_episode

    test = load_episode(SAMPLE / "test.npz")
    dim = dataclasses.replace(test, frames=np.clip(np.rint(test.frames * 0.6), 0, 255)
                              .astype(np.uint8))
    save_episode(dim, tmp_path / "dim.npz")
    out = tmp_path / "sim"
    assert main(["simulate", "--chain", str(CHAIN), "--start", str(tmp_path / "dim.npz"),
                 "--out", str(out)]) == 0
    assert "note: the light changed since the calibration" in capsys.readouterr().err
    m = json.loads((out / "metrics.json").read_text())
    light = m["start_agreement"]["before"]["light"]
    assert light["applied"] and np.allclose(light["gain"], 0.6, atol=0.02)
    copy_last = m["copy_last"]["summary"]["psnr_db"]
    assert m["summary"]["psnr_db"] > copy_last + 6.0, (m["summary"], copy_last)


def test_simulate_chain_from_a_camera_that_moved_says_so(tmp_path, capsys):
    # every frame of the test episode shifted by 2 px, as after a knock to the camera
    import dataclasses

    import cv2

    from edge.episode import save_episode

    test = load_episode(SAMPLE / "test.npz")
    m2 = np.float32([[1, 0, 2.0], [0, 1, 0.0]])
    moved = np.stack([cv2.warpAffine(f, m2, (64, 64), borderMode=cv2.BORDER_REPLICATE)
                      for f in test.frames])
    save_episode(dataclasses.replace(test, frames=moved), tmp_path / "moved.npz")
    out = tmp_path / "sim"
    assert main(["simulate", "--chain", str(CHAIN), "--start", str(tmp_path / "moved.npz"),
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: the start frame's scene is shifted 2.0 px from the calibration's" in err
    assert "syncedge calibrate verify" in err
    metrics = json.loads((out / "metrics.json").read_text())
    cam = metrics["start_agreement"]["before"]["camera"]
    assert cam["moved"] and cam["shift_px"][0] == pytest.approx(2.0, abs=0.3)
    # the outputs' warnings carry it too (a tool reading them must not miss it)
    assert any("the start frame's scene is shifted 2.0 px" in w for w in metrics["warnings"])
    # the unmoved camera is not warned about
    assert main(["simulate", "--chain", str(CHAIN), "--start", str(SAMPLE / "test.npz"),
                 "--out", str(tmp_path / "sim2")]) == 0
    assert "shifted" not in capsys.readouterr().err


def test_simulate_chain_zero_actions_from_a_frame_give_the_frame(tmp_path):
    test = load_episode(SAMPLE / "test.npz")
    start = tmp_path / "start.npy"
    np.save(start, test.frames[5])
    acts = tmp_path / "zero.npy"
    np.save(acts, np.zeros((2, 6, 7), np.float32))
    q = ",".join(f"{x:.9f}" for x in test.joint_positions[5])
    assert main(["simulate", "--chain", str(CHAIN), "--start", str(start), "--actions",
                 str(acts), f"--start-joints={q}", "--out", str(tmp_path / "o")]) == 0
    with np.load(tmp_path / "o" / "prediction.npz") as z:
        np.testing.assert_array_equal(z["frames"],
                                      np.broadcast_to(test.frames[5], (2, 6, 64, 64, 3)))


def test_simulate_chain_from_a_greyscale_start_says_so(tmp_path, capsys):
    test = load_episode(SAMPLE / "test.npz")
    grey = np.repeat(test.frames[5].mean(-1, keepdims=True).astype(np.uint8), 3, -1)
    np.save(tmp_path / "grey.npy", grey)
    np.save(tmp_path / "colour.npy", test.frames[5])
    np.save(tmp_path / "zero.npy", np.zeros((1, 3, 7), np.float32))
    q = ",".join(f"{x:.9f}" for x in test.joint_positions[5])
    for name in ("grey", "colour"):
        out = tmp_path / name
        assert main(["simulate", "--chain", str(CHAIN), "--start", str(tmp_path / f"{name}.npy"),
                     "--actions", str(tmp_path / "zero.npy"), f"--start-joints={q}",
                     "--no-anchor", "--out", str(out)]) == 0
        warned = [w for w in json.loads((out / "metrics.json").read_text())["warnings"]
                  if "the start frame is greyscale" in w]
        assert len(warned) == (name == "grey"), warned
    assert "while the calibration's home frame is in colour" in capsys.readouterr().err


def test_simulate_chain_refusals_name_the_input(tmp_path, capsys):
    def err(argv: list[str]) -> str:
        assert main(argv) == 2
        return capsys.readouterr().err

    base = ["simulate", "--chain", str(CHAIN), "--out", str(tmp_path / "o")]
    assert "--calibration: not with --chain" in err(
        [*base, "--start", str(SAMPLE / "test.npz"), "--calibration",
         str(SAMPLE / "calibration.npz")])
    np.save(tmp_path / "f.npy", load_episode(SAMPLE / "test.npz").frames[0])
    np.save(tmp_path / "a.npy", np.zeros((3, 7), np.float32))
    assert "--start-joints: required with --chain" in err(
        [*base, "--start", str(tmp_path / "f.npy"), "--actions", str(tmp_path / "a.npy")])
    assert "--start-joints: expected 7 values" in err(
        [*base, "--start", str(tmp_path / "f.npy"), "--actions", str(tmp_path / "a.npy"),
         "--start-joints", "0,0,0"])
    np.save(tmp_path / "a5.npy", np.zeros((3, 5), np.float32))
    assert "expected actions [N, T, 7]" in err(
        [*base, "--start", str(SAMPLE / "test.npz"), "--actions", str(tmp_path / "a5.npy")])
    assert "no such file" in err(["simulate", "--chain", str(tmp_path / "none.npz"),
                                  "--start", str(SAMPLE / "test.npz"),
                                  "--out", str(tmp_path / "o")])
    assert "--start-joints: only with --chain" in err(
        ["simulate", "--model", str(ROOT / "models" / "reference"), "--start",
         str(SAMPLE / "test.npz"), "--start-joints", "0", "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


def test_simulate_chain_refuses_a_start_recorded_with_other_channels(tmp_path, capsys):
    from dataclasses import replace

    from edge.episode import save_episode

    ep = load_episode(SAMPLE / "test.npz")
    names = list(ep.metadata.dof_names)
    names[0], names[1] = names[1], names[0]
    other = replace(ep, metadata=replace(ep.metadata, dof_names=tuple(names)))
    p = save_episode(other, tmp_path / "other.npz")
    assert main(["simulate", "--chain", str(CHAIN), "--start", str(p),
                 "--out", str(tmp_path / "o")]) == 2
    assert "metadata.dof_names" in capsys.readouterr().err


def test_precheck_chain_on_the_kit_agrees_with_the_truth(tmp_path, monkeypatch):
    """The kit's candidates and rules with the chain model: every verdict is the truth's
    (the kit records when each candidate truly breaks a rule, rendered by MuJoCo)."""
    man = json.loads((KIT / "manifest.json").read_text())
    truth = {c["name"]: c for c in man["candidates"]}
    monkeypatch.chdir(ROOT)
    assert main(precheck_kit_argv(tmp_path / "pc", CHAIN)) == 0
    rep = json.loads((tmp_path / "pc" / "report.json").read_text())
    assert rep["model_id"]["name"] == "syncedge-chain"
    for v in rep["verdicts"]:
        t = truth[v["name"]]
        first = [s for s in (t["first_step_over_bound"], t["first_step_outside_joint_limits"],
                             t["first_step_truly_in_keep_out"]) if s is not None]
        assert v["passed"] == (not first), v
    assert rep["chosen"] == "reach"


def test_precheck_chain_decides_keep_out_on_where_it_puts_the_arm(tmp_path, monkeypatch):
    rules = (KIT / "rules.yaml").read_text()
    rules = re.sub(r"basis: motion", "basis: robot_mask", rules)
    rules = rules.replace("image: goal.png", f"image: {KIT / 'goal.png'}")
    (tmp_path / "rules.yaml").write_text(rules)
    monkeypatch.chdir(ROOT)
    argv = precheck_kit_argv(tmp_path / "pc", CHAIN)
    argv[argv.index("--rules") + 1] = str(tmp_path / "rules.yaml")
    assert main(argv) == 0
    rep = json.loads((tmp_path / "pc" / "report.json").read_text())
    assert rep["keepout_basis"] == "robot_mask"
    v = {x["name"]: x for x in rep["verdicts"]}
    assert v["swing-into-keep-out"]["first_fail_rule"] == "keep_out"
    assert v["reach"]["passed"] and v["hold"]["passed"]


def test_read_chain_refuses_before_any_work(tmp_path, capsys):
    torch = pytest.importorskip("torch")  # noqa: F841
    (tmp_path / "c.npz").write_bytes(b"")
    assert main(["model", "read-chain", "--calibration", str(SAMPLE / "calibration_256.npz"),
                 "--out", str(tmp_path / "c.npz")]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["model", "read-chain", "--calibration", str(SAMPLE / "test.npz"),
                 "--out", str(tmp_path / "d.npz")]) == 2
    assert "expected a calibration episode" in capsys.readouterr().err
    assert main(["model", "read-chain", "--calibration", str(SAMPLE / "calibration_256.npz"),
                 "--out", str(tmp_path / "e.npz"), "--grid", "48", "--photometric", "0"]) == 2
    assert "not a whole multiple" in capsys.readouterr().err
    # without --photometric, its default follows the grid (twice it): the grid is the problem
    assert main(["model", "read-chain", "--calibration", str(SAMPLE / "calibration_256.npz"),
                 "--out", str(tmp_path / "e.npz"), "--grid", "48"]) == 2
    err = capsys.readouterr().err
    assert "--grid 48" in err and "not a whole multiple" in err and "--photometric" not in err
    assert not (tmp_path / "d.npz").exists() and not (tmp_path / "e.npz").exists()


def test_chain_refusals_found_by_a_first_trial(tmp_path, capsys):
    """A damaged chain file, a text file as --chain, flags the chain path would ignore, a
    missing joint-state file, read-chain's bad numbers: one line each, exit 2."""
    def err(argv: list[str]) -> str:
        assert main(argv) == 2, argv
        return capsys.readouterr().err

    start = ["--start", str(SAMPLE / "test.npz"), "--out", str(tmp_path / "o")]
    (tmp_path / "cut.npz").write_bytes(CHAIN.read_bytes()[:4000])
    assert "damaged or truncated" in err(["simulate", "--chain", str(tmp_path / "cut.npz"),
                                          *start])
    assert "not a chain calibration: expected a NumPy .npz" in err(
        ["simulate", "--chain", str(ROOT / "README.md"), *start])
    assert "--backend tensorrt: the chain model runs on the CPU" in err(
        ["simulate", "--chain", str(CHAIN), "--backend", "tensorrt", *start])
    kit = ["--actions", str(KIT / "candidates.json"), "--rules", str(KIT / "rules.yaml")]
    # the chain model takes a verification result (since the camera gate was added for
    # it): a missing one is named
    assert "v.json: expected a verification result (JSON)" in err(
        ["precheck", "--chain", str(CHAIN), *kit, "--verification", "v.json", *start])
    assert "no such file" in err(["precheck", "--chain", str(CHAIN), *kit,
                                  "--start-joints", str(tmp_path / "nope.npy"), *start])
    cal = str(SAMPLE / "calibration_256.npz")
    out = ["--out", str(tmp_path / "c.npz")]
    assert "--grid 0: expected" in err(["model", "read-chain", "--calibration", cal, *out,
                                        "--grid", "0"])
    assert "--photometric 100: expected 0" in err(["model", "read-chain", "--calibration",
                                                   cal, *out, "--photometric", "100"])
    with pytest.raises(SystemExit) as stop:  # argparse's own refusal
        main(["model", "read-chain", "--calibration", cal, *out, "--threads", "0"])
    assert stop.value.code == 2
    assert "expected a whole number >= 1" in capsys.readouterr().err
    assert "is a folder" in err(["model", "read-chain", "--calibration", str(SAMPLE), *out])
    assert not (tmp_path / "o").exists() and not (tmp_path / "c.npz").exists()


def test_the_chain_calibration_runs_from_the_calibration_cache(tmp_path, capsys, monkeypatch):
    """``calibrate store CAL --chain FILE`` caches the chain beside its episode; ``simulate``
    and ``precheck`` with ``--cell ID --chain`` then give what the file gives."""
    cache = str(tmp_path / "cache")
    cal = str(SAMPLE / "calibration_256.npz")
    assert main(["calibrate", "store", cal, "--chain", str(CHAIN), "--cache-dir", cache]) == 0
    out = capsys.readouterr().out
    assert "chain calibration: " in out and "simulate --cell sample-cell" in out
    start = ["--start", str(SAMPLE / "test.npz")]
    assert main(["simulate", "--cell", "sample-cell", "--chain", "--cache-dir", cache, *start,
                 "--out", str(tmp_path / "cached")]) == 0
    assert main(["simulate", "--chain", str(CHAIN), *start,
                 "--out", str(tmp_path / "file")]) == 0
    # another cell's id with this cell's start: the miss says where the start was recorded
    # and what the cache holds (it only said to store a calibration)
    capsys.readouterr()
    assert main(["simulate", "--cell", "cell-8", "--chain", "--cache-dir", cache, *start,
                 "--out", str(tmp_path / "miss")]) == 2
    miss = capsys.readouterr().err
    assert "was recorded in cell 'sample-cell', its metadata says, not in --cell 'cell-8'" \
        in miss
    assert "the cache holds chain calibrations for sample-cell/sample-cell-cam/" in miss
    assert not (tmp_path / "miss").exists()
    a = np.load(tmp_path / "cached" / "prediction.npz")["frames"]
    b = np.load(tmp_path / "file" / "prediction.npz")["frames"]
    assert np.array_equal(a, b)
    m = json.loads((tmp_path / "cached" / "metrics.json").read_text())
    assert m["model_id"]["folder"] == "cache:sample-cell/sample-cell-cam/sample-cell-kinova3"
    assert m["model_sha256"] == load_chain_calibration(CHAIN).sha256()
    monkeypatch.chdir(ROOT)
    argv = precheck_kit_argv(tmp_path / "pc", CHAIN)
    argv[argv.index("--chain") + 1:] = ["--cell", "sample-cell", "--cache-dir", cache]
    assert main(argv) == 0
    rep = json.loads((tmp_path / "pc" / "report.json").read_text())
    assert rep["chosen"] == "reach" and rep["model_id"]["folder"].startswith("cache:")
    # the commissioning report of the cached chain on the held-out motion episode
    assert main(["calibrate", "validate", "--cell", "sample-cell", "--chain", "--episode",
                 str(SAMPLE / "test.npz"), "--cache-dir", cache,
                 "--out", str(tmp_path / "val")]) == 0
    val = json.loads((tmp_path / "val" / "report.json").read_text())
    fid = val["fidelity"]
    assert fid["calibrated"]["psnr_db"] == m["summary"]["psnr_db"]
    assert fid["gain_over_copy_last"]["psnr_db"] > 5.0
    assert val["verdict"] == "pass" and not val["warnings"]
    assert (tmp_path / "val" / "report.png").is_file()
    assert val["start_agreement"]["before"]["light"]["applied"] is False
    # commissioned under another light: said and recorded as simulate does (it was matched
    # silently)
    import dataclasses

    from edge.episode import save_episode

    test = load_episode(SAMPLE / "test.npz")
    save_episode(dataclasses.replace(test, frames=np.clip(np.rint(test.frames * 0.6), 0, 255)
                                     .astype(np.uint8)), tmp_path / "dim.npz")
    capsys.readouterr()
    assert main(["calibrate", "validate", "--cell", "sample-cell", "--chain", "--episode",
                 str(tmp_path / "dim.npz"), "--cache-dir", cache,
                 "--out", str(tmp_path / "val_dim")]) == 0
    assert "note: the light changed since the calibration" in capsys.readouterr().err
    dim = json.loads((tmp_path / "val_dim" / "report.json").read_text())
    assert dim["start_agreement"]["before"]["light"]["applied"] is True
    assert dim["fidelity"]["gain_over_copy_last"]["psnr_db"] > 5.0
    # actions that say nothing moved while the arm did (a stream that lost the controller):
    # the chain holds the start frame, gains nothing over it and the commissioning fails
    # (exit 1), said and recorded
    save_episode(dataclasses.replace(test, actions=np.zeros_like(test.actions)),
                 tmp_path / "wrong.npz")
    capsys.readouterr()
    assert main(["calibrate", "validate", "--cell", "sample-cell", "--chain", "--episode",
                 str(tmp_path / "wrong.npz"), "--cache-dir", cache,
                 "--out", str(tmp_path / "val_wrong")]) == 1
    err = capsys.readouterr().err
    assert "FAIL: " in err and "+0.00 dB over copying the start frame" in err
    wrong = json.loads((tmp_path / "val_wrong" / "report.json").read_text())
    assert wrong["verdict"] == "fail"
    assert wrong["fidelity"]["gain_over_copy_last"]["psnr_db"] == 0.0
    assert any("whole-frame PSNR" in w for w in wrong["warnings"])
    capsys.readouterr()
    assert main(["calibrate", "validate", "--cell", "sample-cell", "--chain", "--episode",
                 cal, "--cache-dir", cache, "--out", str(tmp_path / "val2")]) == 2
    assert "in-sample" in capsys.readouterr().err
    # the cached chain damaged: the first run sets it aside and says how to read it again;
    # a second run says the entry lost its chain (it said the cache held the chain it missed)
    from edge.cache.store import CalibrationCache

    with CalibrationCache(cache) as c:
        (sha,) = [e.context_sha256 for e in c.list()]
    blob = Path(cache) / "blobs" / sha[:2] / sha[2:]
    blob.write_bytes(blob.read_bytes()[:100])
    sim = ["simulate", "--cell", "sample-cell", "--chain", "--cache-dir", cache, *start]
    assert main([*sim, "--out", str(tmp_path / "damaged")]) == 2
    assert "context blob failed verification" in capsys.readouterr().err
    assert main([*sim, "--out", str(tmp_path / "damaged2")]) == 2
    err = capsys.readouterr().err
    assert "the cache's entry for it holds the calibration episode but no chain calibration" \
        in err and "calibrate store --cell sample-cell --camera-id sample-cell-cam" in err
    assert "the cache holds chain calibrations for" not in err


def test_precheck_with_the_cached_chain_checks_the_camera_did_not_move(tmp_path, capsys,
                                                                       monkeypatch):
    """``precheck --cell ID --chain --verify-camera SRC`` compares a live frame with the
    cell's reference as the other models do (it was refused for the chain model)."""
    import cv2

    from edge.episode import load_episode
    from edge.visual import write_png

    cache = str(tmp_path / "cache")
    cal = SAMPLE / "calibration_256.npz"
    assert main(["calibrate", "store", str(cal), "--chain", str(CHAIN), "--cache-dir",
                 cache]) == 0
    home = load_episode(cal).frames[0]
    write_png(tmp_path / "same.png", home)
    moved = cv2.warpAffine(home, np.float32([[1, 0, 8], [0, 1, 0]]), home.shape[1::-1],
                           borderMode=cv2.BORDER_REPLICATE)
    write_png(tmp_path / "moved.png", moved)
    monkeypatch.chdir(ROOT)

    def run(live: str, stale: str, out: str) -> int:
        argv = precheck_kit_argv(tmp_path / out, CHAIN)
        argv[argv.index("--chain") + 1:] = ["--cell", "sample-cell", "--cache-dir", cache,
                                            "--verify-camera", str(tmp_path / live),
                                            "--stale", stale]
        return main(argv)

    capsys.readouterr()
    assert run("same.png", "refuse", "same") == 0
    assert json.loads((tmp_path / "same" / "report.json").read_text())[
        "calibration_warning"] is None
    assert run("moved.png", "refuse", "refused") == 2
    assert "is stale: the camera moved" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()
    assert run("moved.png", "warn", "warned") == 0
    rep = json.loads((tmp_path / "warned" / "report.json").read_text())
    assert "the camera moved" in rep["calibration_warning"]
    # a chain file has no cached reference: said, with the way that works
    argv = precheck_kit_argv(tmp_path / "file", CHAIN) + ["--verify-camera",
                                                          str(tmp_path / "same.png")]
    assert main(argv) == 2
    assert "--verify-camera: needs --chain with --cell" in capsys.readouterr().err


def test_storing_a_chain_refuses_one_read_from_another_episode(tmp_path, capsys):
    """The chain file must have been read from the episode it is stored with; --model and a
    cell without a chain are refused by name; nothing is cached."""
    import dataclasses

    from edge.episode import save_episode
    from edge.runtime.chain import save_chain_calibration

    cache = str(tmp_path / "cache")
    cal = SAMPLE / "calibration_256.npz"
    chain = load_chain_calibration(CHAIN)

    def err(argv: list[str]) -> str:
        assert main(argv) == 2, argv
        return capsys.readouterr().err

    other = dataclasses.replace(chain, home_frame=255 - chain.home_frame)
    save_chain_calibration(tmp_path / "other.npz", other)
    assert "home_frame differs from the first frame" in err(
        ["calibrate", "store", str(cal), "--chain", str(tmp_path / "other.npz"),
         "--cache-dir", cache])
    moved = dataclasses.replace(chain, home_joint_positions=chain.home_joint_positions + 0.1)
    save_chain_calibration(tmp_path / "moved.npz", moved)
    assert "home_joint_positions" in err(
        ["calibrate", "store", str(cal), "--chain", str(tmp_path / "moved.npz"),
         "--cache-dir", cache])
    ep = load_episode(cal)
    names = list(ep.metadata.dof_names)
    names[0], names[1] = names[1], names[0]
    swapped = dataclasses.replace(ep, metadata=dataclasses.replace(
        ep.metadata, dof_names=tuple(names)))
    p = save_episode(swapped, tmp_path / "swapped.npz")
    assert "expected the episode's" in err(
        ["calibrate", "store", str(p), "--chain", str(CHAIN), "--cache-dir", cache,
         "--force", "segments named by the swapped channels"])
    assert "write the episode first" in err(
        ["calibrate", "store", "--chain", str(cal), "--cache-dir", cache])
    assert "--model: not with --chain" in err(
        ["calibrate", "store", str(cal), "--chain", str(CHAIN), "--model", "models/reference",
         "--cache-dir", cache])
    assert not (tmp_path / "cache").exists()  # no refused store created the cache
    assert "--cache-dir " + cache + ": no such folder" in err(
        ["simulate", "--cell", "sample-cell", "--chain", "--cache-dir", cache,
         "--start", str(SAMPLE / "test.npz"), "--out", str(tmp_path / "o")])
    (tmp_path / "cache").mkdir()
    assert "no chain calibration for cell 'sample-cell'" in err(
        ["simulate", "--cell", "sample-cell", "--chain", "--cache-dir", cache,
         "--start", str(SAMPLE / "test.npz"), "--out", str(tmp_path / "o")])
    assert "give --cell ID" in err(["simulate", "--chain", "--start",
                                    str(SAMPLE / "test.npz"), "--out", str(tmp_path / "o")])
    assert "--cell: not with --chain" in err(
        ["simulate", "--cell", "sample-cell", "--chain", str(CHAIN), "--start",
         str(SAMPLE / "test.npz"), "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


def test_precheck_chain_runs_a_policy_in_the_loop(tmp_path):
    """``precheck --chain --policy``: the policy sees each frame the chain draws; the frames
    are the open-loop rollout of the actions it chose."""
    from edge.precheck.policy import OnnxPolicy, rollout_chain_policy
    from edge.runtime.chain import chain_rollout

    policy_path = ROOT / "samples" / "policies" / "reference" / "policy.onnx"
    out = tmp_path / "pp"
    rc = main(["precheck", "--chain", str(CHAIN), "--start", str(SAMPLE / "test.npz"),
               "--policy", str(policy_path), "--horizon", "12",
               "--rules", str(KIT / "rules.yaml"), "--out", str(out)])
    assert rc in (0, 1)
    rep = json.loads((out / "report.json").read_text())
    assert [v["name"] for v in rep["verdicts"]] == ["policy"] and rep["horizon"] == 12
    frames = np.load(out / "prediction.npz")["frames"]
    assert frames.shape == (1, 12, 64, 64, 3)
    chain = load_chain_calibration(CHAIN)
    ep = load_episode(SAMPLE / "test.npz")
    q0 = ep.joint_positions[0]
    with OnnxPolicy(policy_path) as policy:
        actions, again, cover = rollout_chain_policy(chain, policy, ep.frames[0], q0, 12)
    assert np.array_equal(again, frames)
    assert np.abs(actions).max() > 0 and cover.any()
    assert np.array_equal(chain_rollout(chain, ep.frames[0], q0, actions), frames)


def test_a_chain_is_stored_with_the_same_sweep_recorded_at_another_timing(tmp_path, capsys):
    """The chain is read at the sweep's poses, so the sample's chain is accepted with its
    sweep recorded by a 30 Hz camera (each frame held three times, read with encoder noise
    at home) and refused with a sweep that does not come back."""
    import dataclasses

    from edge.episode import save_episode

    cal = load_episode(SAMPLE / "calibration_256.npz")
    rep = np.repeat(np.arange(cal.num_frames), 3)
    q = np.asarray(cal.joint_positions, np.float64)[rep]
    q[1:] += np.random.default_rng(0).normal(0, 1e-5, q[1:].shape)  # noise after frame 0
    slow = dataclasses.replace(
        cal, ee_px=None, robot_mask=None, frames=cal.frames[rep], actions=np.diff(q, axis=0, append=q[-1:]).astype(
            np.float32), timestamps=np.arange(len(rep)) / 30.0, joint_positions=q,
        metadata=dataclasses.replace(cal.metadata, fps=30.0, segments=()))
    p = tmp_path / "slow.npz"
    save_episode(slow, p)
    cache = str(tmp_path / "cache")
    assert main(["calibrate", "store", str(p), "--chain", str(CHAIN), "--cache-dir", cache]) == 0
    capsys.readouterr()
    cut = dataclasses.replace(slow, frames=slow.frames[:-12], actions=slow.actions[:-12],
                              timestamps=slow.timestamps[:-12], joint_positions=q[:-12])
    save_episode(cut, tmp_path / "cut.npz")
    code = main(["calibrate", "store", str(tmp_path / "cut.npz"), "--chain", str(CHAIN),
                 "--cache-dir", str(tmp_path / "cache2")])
    assert code == 2 and "(no_return)" in capsys.readouterr().err  # the coverage check's


def test_read_chain_draws_its_sheet_from_a_sweep_recorded_at_another_timing(
        tmp_path, capsys, monkeypatch):
    """A 30 Hz recording names no segments of its own: read-chain read it (at the sweep's
    poses) and then died drawing its sheet ('channels [...] have no sweep segment'),
    after minutes of reading, writing nothing. The sheet is now drawn at the sweep's poses
    too. (The read itself is the sample's chain, not read again here.)"""
    import dataclasses

    import export.models.chain_fit as chain_fit
    from edge.episode import save_episode

    cal = load_episode(SAMPLE / "calibration_256.npz")
    rep = np.repeat(np.arange(cal.num_frames), 3)
    q = np.asarray(cal.joint_positions, np.float64)[rep]
    slow = dataclasses.replace(
        cal, ee_px=None, robot_mask=None, frames=cal.frames[rep],
        actions=np.diff(q, axis=0, append=q[-1:]).astype(np.float32),
        timestamps=np.arange(len(rep)) / 30.0, joint_positions=q,
        metadata=dataclasses.replace(cal.metadata, fps=30.0, segments=()))
    p = save_episode(slow, tmp_path / "slow.npz")
    read = []
    monkeypatch.setattr(chain_fit, "read_chain_calibration",
                        lambda ep, *a, **k: read.append(ep) or load_chain_calibration(CHAIN))
    out = tmp_path / "c.npz"
    assert main(["model", "read-chain", "--calibration", str(p), "--out", str(out)]) == 0, \
        capsys.readouterr().err
    assert len(read) == 1 and out.is_file() and out.with_suffix(".png").is_file()
    report = json.loads(out.with_suffix(".json").read_text())
    assert [r["dof"] for r in report["sweep_peaks"]] == list(cal.metadata.dof_names)


def test_a_sweep_in_the_model_s_timing_without_segments_is_stored_and_drawn(
        tmp_path, capsys, monkeypatch):
    """An episode in the model's timing (8 frames per channel, 10 Hz) whose metadata names
    no segments, as a user's own recorder writes it: `calibrate check` passes it, and
    `store --chain` and `read-chain` refused it ('channels [...] have no sweep segment in
    the calibration: record every channel's sweep') though every channel was swept. Its
    segments are now found in its joint readings, as for any other timing."""
    import dataclasses

    import export.models.chain_fit as chain_fit
    from edge.calibrate.ingest import at_sweep_poses
    from edge.episode import save_episode

    cal = load_episode(SAMPLE / "calibration_256.npz")
    bare = dataclasses.replace(cal, ee_px=None, robot_mask=None,
                               metadata=dataclasses.replace(cal.metadata, segments=()))
    at_poses, report = at_sweep_poses(bare)
    assert np.array_equal(at_poses.frames, cal.frames)  # the same frames, with segments
    assert [(g.dof, g.start, g.stop) for g in at_poses.metadata.segments] == \
        [(g.dof, g.start, g.stop) for g in cal.metadata.segments]
    assert report["source_frames"] == list(range(cal.num_frames))
    p = save_episode(bare, tmp_path / "bare.npz")
    assert main(["calibrate", "store", str(p), "--chain", str(CHAIN), "--cache-dir",
                 str(tmp_path / "cache")]) == 0, capsys.readouterr().err
    capsys.readouterr()
    monkeypatch.setattr(chain_fit, "read_chain_calibration",
                        lambda ep, *a, **k: load_chain_calibration(CHAIN))
    out = tmp_path / "c.npz"
    assert main(["model", "read-chain", "--calibration", str(p), "--out", str(out)]) == 0, \
        capsys.readouterr().err
    assert out.with_suffix(".png").is_file()


def test_simulate_chain_takes_a_start_at_another_frame_rate_or_size(tmp_path, capsys):
    """The chain places the arm at each step's joint readings, whatever the time between
    steps: a start episode at 30 Hz against the sample chain's 10 Hz calibration runs (it
    was refused), and one at the camera's size is fitted to the grid (it was refused, with
    advice that lost the ground truth). Both predict what the 10 Hz 64x64 start does."""
    import dataclasses

    from edge.episode import save_episode

    test = load_episode(SAMPLE / "test.npz")
    fast = dataclasses.replace(test, timestamps=test.timestamps / 3.0,
                               metadata=dataclasses.replace(test.metadata, fps=30.0))
    big = dataclasses.replace(test, frames=np.repeat(np.repeat(test.frames, 3, 1), 3, 2),
                              robot_mask=None, ee_px=None)
    got = {}
    for name, ep in (("plain", test), ("fast", fast), ("big", big)):
        path = SAMPLE / "test.npz" if name == "plain" else \
            save_episode(ep, tmp_path / f"{name}.npz")
        assert main(["simulate", "--chain", str(CHAIN), "--start", str(path),
                     "--out", str(tmp_path / name)]) == 0, capsys.readouterr().err
        with np.load(tmp_path / name / "prediction.npz") as z:
            got[name] = z["frames"]
    err = capsys.readouterr().err
    # 192x192 is 3x the grid: reduced by area, nothing cropped, so no warning (a start of
    # another aspect still warns: tests/test_runtime_simulate.py)
    assert "centre-cropped and resized" not in err
    # the actions are judged per the start's own frames: the sample's largest step (0.27
    # rad) is 2.7 rad/s at its 10 Hz, 8.2 rad/s said to be at 30 Hz, faster than any arm
    assert "8.18 rad/s at 30 Hz, faster than any arm" in err and "at 10 Hz" not in err
    assert np.array_equal(got["fast"], got["plain"])
    assert np.abs(got["big"].astype(int) - got["plain"]).max() <= 1


def test_a_calibration_at_the_camera_s_size_is_fitted_for_the_chain(tmp_path, capsys):
    """A 4:3 calibration (the camera's own size) was refused by 'calibrate store --chain'
    ('not a whole multiple of the model's 64x64'); it is now centre-cropped and resized as
    a recording is, stored so, and the chain takes it: the sample's sweep with columns
    added each side gives the sample's own episode back."""
    import dataclasses

    from edge.cache.store import CalibrationCache
    from edge.episode import save_episode

    cal = load_episode(SAMPLE / "calibration_256.npz")
    wide = dataclasses.replace(cal, frames=np.pad(cal.frames, ((0, 0), (0, 0), (43, 43),
                                                               (0, 0)), mode="edge"),
                               robot_mask=None, ee_px=None)
    p = save_episode(wide, tmp_path / "wide.npz")
    cache = tmp_path / "cache"
    assert main(["calibrate", "store", str(p), "--chain", str(CHAIN), "--cache-dir",
                 str(cache)]) == 0, capsys.readouterr().err
    printed = capsys.readouterr()
    assert "frames of 342x256 px centre-cropped to a square and resized to 256x256" in \
        printed.err
    # the fit, to look at, where 'calibrate check' writes its sheets
    sheet = Path(printed.out.split("the fit, to look at: ")[1].split(" ")[0])
    assert sheet.name == "chain.png" and sheet.parent.name == "wide" and sheet.is_file()
    figures = json.loads(sheet.with_suffix(".json").read_text())
    assert [r["dof"] for r in figures["sweep_peaks"]] == list(cal.metadata.dof_names)
    with CalibrationCache(cache) as c:
        (entry,) = [c.get(i.key) for i in c.list()]
    assert np.array_equal(entry.episode.frames, cal.frames)
    assert entry.episode.metadata.extra["fitted_for_chain"] == {"from_hw": [256, 342],
                                                                "to_hw": [256, 256]}
    # portrait: the crop keeps fewer rows, so the vertical field of view narrows with it
    from edge.calibrate.camera import fit_for_chain

    tall = dataclasses.replace(wide, frames=wide.frames.transpose(0, 2, 1, 3).copy())
    fitted, how = fit_for_chain(tall, 64)
    fovy = cal.metadata.camera["fovy_deg"]
    assert how == {"from_hw": [342, 256], "to_hw": [256, 256]}
    assert np.tan(np.radians(fitted.metadata.camera["fovy_deg"]) / 2) == pytest.approx(
        np.tan(np.radians(fovy) / 2) * 256 / 342)


def test_read_chain_fits_a_calibration_at_the_camera_s_aspect(tmp_path, capsys, monkeypatch):
    """read-chain reads a 4:3 calibration (the camera's own size) centre-cropped and
    resized as a recording is (it was refused as 'not a whole multiple'); a square one
    that is not a whole multiple of --grid is still refused (test above)."""
    import dataclasses

    import export.models.chain_fit as chain_fit
    from edge.episode import save_episode

    cal = load_episode(SAMPLE / "calibration_256.npz")
    wide = dataclasses.replace(cal, frames=np.pad(cal.frames, ((0, 0), (0, 0), (43, 43),
                                                               (0, 0)), mode="edge"),
                               robot_mask=None, ee_px=None)
    p = save_episode(wide, tmp_path / "wide.npz")
    read = []
    monkeypatch.setattr(chain_fit, "read_chain_calibration",
                        lambda ep, *a, **k: read.append(ep) or load_chain_calibration(CHAIN))
    assert main(["model", "read-chain", "--calibration", str(p), "--out",
                 str(tmp_path / "c.npz")]) == 0
    assert "frames of 342x256 px centre-cropped to a square and resized to 256x256" in \
        capsys.readouterr().err
    assert len(read) == 1 and np.array_equal(read[0].frames, cal.frames)


def test_cache_verbs_take_cache_dir_as_simulate_does(tmp_path, capsys):
    """``cache list --cache-dir DIR`` lists what ``calibrate store --cache-dir DIR`` stored,
    as ``--root DIR`` does."""
    cache = str(tmp_path / "cache")
    cal = str(SAMPLE / "calibration_256.npz")
    assert main(["calibrate", "store", cal, "--chain", str(CHAIN), "--cache-dir", cache]) == 0
    capsys.readouterr()
    outs = []
    for flag in ("--cache-dir", "--root"):
        assert main(["cache", "list", flag, cache]) == 0
        outs.append(capsys.readouterr().out)
    assert "sample-cell" in outs[0] and "chain" in outs[0] and outs[0] == outs[1]


def test_a_mistyped_cache_dir_is_refused_and_not_created(tmp_path, capsys):
    missing = tmp_path / "no-such-cache"
    code = main(["simulate", "--cell", "sample-cell", "--chain", "--cache-dir", str(missing),
                 "--start", str(SAMPLE / "test.npz"), "--out", str(tmp_path / "o")])
    assert code == 2 and f"--cache-dir {missing}: no such folder" in capsys.readouterr().err
    assert not missing.exists() and not (tmp_path / "o").exists()


def test_a_chain_refined_with_an_episode_is_not_commissioned_on_it(tmp_path, capsys):
    """A chain refined with a motion episode (``info["motion"]``) refuses that episode in
    ``calibrate validate`` and takes another; ``--motion`` is refused where no chain is
    read (an ONNX model's store, a chain file) and when its file is missing."""
    import dataclasses
    import hashlib

    from edge.runtime.chain import save_chain_calibration

    cache = str(tmp_path / "cache")
    cal = str(SAMPLE / "calibration_256.npz")
    test = load_episode(SAMPLE / "test.npz")
    chain = load_chain_calibration(CHAIN)
    used = {"episode": "test.npz", "frames": test.num_frames,
            "frames_sha256": hashlib.sha256(test.frames.tobytes()).hexdigest()}
    refined = dataclasses.replace(chain, info={**chain.info, "motion": [used]})
    path = save_chain_calibration(tmp_path / "refined.npz", refined)
    assert main(["calibrate", "store", cal, "--chain", str(path), "--cache-dir", cache]) == 0
    capsys.readouterr()
    assert main(["calibrate", "validate", "--cell", "sample-cell", "--chain", "--episode",
                 str(SAMPLE / "test.npz"), "--cache-dir", cache,
                 "--out", str(tmp_path / "val")]) == 2
    err = capsys.readouterr().err
    assert "refined with this episode (read as test.npz)" in err
    assert not (tmp_path / "val").exists()
    # another episode of the cell: the same frames but the last one left out
    other = dataclasses.replace(test, frames=test.frames[:-1], actions=test.actions[:-1],
                                timestamps=test.timestamps[:-1],
                                joint_positions=test.joint_positions[:-1],
                                ee_px=None, robot_mask=None)
    from edge.episode import save_episode

    oth = save_episode(other, tmp_path / "other.npz")
    assert main(["calibrate", "validate", "--cell", "sample-cell", "--chain", "--episode",
                 str(oth), "--cache-dir", cache, "--out", str(tmp_path / "val2")]) == 0
    capsys.readouterr()
    for argv, says in (
            (["calibrate", "store", cal, "--motion", str(oth), "--cache-dir", cache],
             "--motion: only with --chain"),
            (["calibrate", "store", cal, "--chain", str(path), "--motion", str(oth),
              "--cache-dir", cache], "--motion: only when the chain is read at store"),
            (["model", "read-chain", "--calibration", cal, "--motion",
              str(tmp_path / "missing.npz"), "--out", str(tmp_path / "c.npz")],
             "missing.npz: no such file"),
            (["model", "read-chain", "--calibration", cal, "--twins",
              "--out", str(tmp_path / "c.npz")], "--twins: only with --motion"),
            (["calibrate", "store", cal, "--chain", "--twins", "--cache-dir", cache],
             "--twins: only with --motion"),
            (["model", "read-chain", "--calibration", cal, "--no-twins",
              "--out", str(tmp_path / "c.npz")], "--no-twins: only with --motion"),
            (["calibrate", "store", cal, "--chain", "--no-twins", "--cache-dir", cache],
             "--no-twins: only with --motion")):
        assert main(argv) == 2, argv
        assert says in capsys.readouterr().err


def test_the_sample_chain_refined_with_motion_matches_its_episodes_and_predicts_better(
        tmp_path):
    """``chain_motion.npz``: the sample's sweep read and refined with its commissioning
    episode (not the test episode); on the held-out test episode it predicts at least as
    well as the sweep alone (30.74 against 30.10 dB whole-frame when they were read)."""
    import hashlib

    man = json.loads((SAMPLE / "chain_motion.json").read_text())
    chain = load_chain_calibration(SAMPLE / "chain_motion.npz")
    assert man["sha256"] == chain.sha256()
    assert man["command"] == ("syncedge model read-chain --calibration "
                              "samples/cell_sample/calibration_256.npz --motion "
                              "samples/cell_sample/commissioning_256.npz --out "
                              "samples/cell_sample/chain_motion.npz")
    comm = load_episode(SAMPLE / "commissioning_256.npz")
    test = load_episode(SAMPLE / "test.npz")
    (used,) = chain.info["motion"]
    assert used["frames_sha256"] == hashlib.sha256(comm.frames.tobytes()).hexdigest()
    assert used["frames_used"] == comm.num_frames == 32
    assert comm.metadata.cell_id == test.metadata.cell_id
    assert not np.allclose(comm.joint_positions[0], test.joint_positions[0], atol=0.1)
    summary = {}
    for name in ("chain", "chain_motion"):
        assert main(["simulate", "--chain", str(SAMPLE / f"{name}.npz"), "--start",
                     str(SAMPLE / "test.npz"), "--out", str(tmp_path / name)]) == 0
        summary[name] = json.loads((tmp_path / name / "metrics.json").read_text())["summary"]
    assert summary["chain_motion"]["psnr_db"] == pytest.approx(30.74, abs=0.01)
    assert summary["chain"]["psnr_db"] == pytest.approx(30.10, abs=0.01)
    assert summary["chain_motion"]["motion_psnr_db"] > summary["chain"]["motion_psnr_db"]


@pytest.mark.parametrize("flag, twins", [([], True), (["--twins"], True),
                                         (["--no-twins"], False)])
def test_read_chain_with_motion_chooses_twins_unless_told_not_to(tmp_path, monkeypatch,
                                                                 capsys, flag, twins):
    """``model read-chain --motion`` hands ``motion_twins=True`` to the reader (the twin
    choice is on by default with a motion episode), ``--no-twins`` hands False."""
    pytest.importorskip("torch")
    import export.models.chain_fit as chain_fit

    seen = {}

    def reader(episode, size, fovy_deg, photometric_size, **kw):
        seen.update(kw)
        return load_chain_calibration(CHAIN)

    monkeypatch.setattr(chain_fit, "read_chain_calibration", reader)
    out = tmp_path / "c.npz"
    assert main(["model", "read-chain", "--calibration", str(SAMPLE / "calibration_256.npz"),
                 "--motion", str(SAMPLE / "commissioning_256.npz"), *flag,
                 "--out", str(out)]) == 0, capsys.readouterr().err
    assert seen["motion_twins"] is twins
    assert [str(w) for _, w in seen["motions"]] == [str(SAMPLE / "commissioning_256.npz")]
    assert out.is_file()


def test_motion_twins_reads_the_three_state_flag():
    """``--twins`` / ``--no-twins`` / neither, with and without ``--motion``: the choice is
    on unless ``--no-twins``; either flag without a motion episode is refused by name."""
    from edge.commands.common import motion_twins

    assert motion_twins(None, True) is True
    assert motion_twins(True, True) is True
    assert motion_twins(False, True) is False
    assert motion_twins(None, False) is True
    for flag, name in ((True, "--twins"), (False, "--no-twins")):
        with pytest.raises(ValueError, match=f"^{name}: only with --motion"):
            motion_twins(flag, False)


def test_commissioning_verdict_fails_a_chain_no_better_than_the_still_start_frame():
    from edge.commands.calibrate_chain import commissioning_verdict

    assert commissioning_verdict({"psnr_db": 0.4, "ssim": 0.01, "motion_psnr_db": 1.2},
                                 "v.npz") == ("pass", [])
    verdict, why = commissioning_verdict({"psnr_db": 0.0, "ssim": 0.0,
                                          "motion_psnr_db": 0.5}, "v.npz")
    assert verdict == "fail" and len(why) == 1  # a tie is no gain
    assert why[0].startswith("v.npz: the chain's whole-frame PSNR is +0.00 dB over copying "
                             "the start frame")
    verdict, why = commissioning_verdict({"psnr_db": -0.3, "ssim": -0.01,
                                          "motion_psnr_db": -0.7}, "v.npz")
    assert verdict == "fail" and "motion-region PSNR is -0.70 dB over" in why[1]
    # nothing measured in the moving region (no pixel moved): the whole frame decides
    assert commissioning_verdict({"psnr_db": 0.2, "ssim": 0.0, "motion_psnr_db": None},
                                 "v.npz")[0] == "pass"


def test_precheck_refuses_a_start_of_another_cell_or_a_moved_camera(tmp_path, capsys,
                                                                    monkeypatch):
    """A start recorded in another cell (ids differ), a scene shifted from the
    calibration's (the camera moved) or another view altogether (a wrist camera's frame for
    a fixed camera's chain) is refused before any rollout (exit 2, nothing written);
    ``--mismatch warn`` decides anyway and records why in the warnings."""
    import dataclasses

    import cv2

    from edge.episode import save_episode

    monkeypatch.chdir(ROOT)
    test = load_episode(SAMPLE / "test.npz")
    other = dataclasses.replace(test, metadata=dataclasses.replace(test.metadata,
                                                                  cell_id="cell-b"))
    save_episode(other, tmp_path / "other.npz")
    m2 = np.float32([[1, 0, 3.0], [0, 1, 0.0]])
    save_episode(dataclasses.replace(test, frames=np.stack([
        cv2.warpAffine(f, m2, (64, 64), borderMode=cv2.BORDER_REPLICATE)
        for f in test.frames])), tmp_path / "moved.npz")
    # another view (a wrist camera's frame given for this fixed camera's chain): the
    # frames upside down
    save_episode(dataclasses.replace(test, frames=np.ascontiguousarray(test.frames[:, ::-1])),
                 tmp_path / "elsewhere.npz")
    for name, said in (("other", "recorded with cell_id 'cell-b'"),
                       ("moved", "the start frame's scene is shifted"),
                       ("elsewhere", "the start frame does not show the calibration's scene")):
        argv = precheck_kit_argv(tmp_path / name, CHAIN)
        argv[argv.index("--start") + 1] = str(tmp_path / f"{name}.npz")
        capsys.readouterr()
        assert main([*argv, "--no-anchor"]) == 2, name
        err = capsys.readouterr().err
        assert said in err and "--mismatch warn decides anyway" in err, err
        assert not (tmp_path / name).exists()
        assert main([*argv, "--no-anchor", "--mismatch", "warn"]) in (0, 1), name
        rep = json.loads((tmp_path / name / "report.json").read_text())
        assert any(said in w for w in rep["warnings"]), rep["warnings"]
    # a shift of 1.5 px is warned of, not refused (refused from CAMERA_SHIFT_REFUSE_PX)
    m15 = np.float32([[1, 0, 1.5], [0, 1, 0.0]])
    save_episode(dataclasses.replace(test, frames=np.stack([
        cv2.warpAffine(f, m15, (64, 64), borderMode=cv2.BORDER_REPLICATE)
        for f in test.frames])), tmp_path / "nudged.npz")
    argv = precheck_kit_argv(tmp_path / "nudged", CHAIN)
    argv[argv.index("--start") + 1] = str(tmp_path / "nudged.npz")
    assert main([*argv, "--no-anchor"]) in (0, 1)
    rep = json.loads((tmp_path / "nudged" / "report.json").read_text())
    assert any("the start frame's scene is shifted 1." in w for w in rep["warnings"])


def test_precheck_warns_of_an_arm_already_in_keep_out_and_a_start_outside_the_limits(
        tmp_path, capsys):
    """A region over part of the arm's start pose: the candidate that holds still fails
    at step 0, the one that swings away at once passes; said (it was said only when every
    candidate failed there). A start already outside joint_limits is said naming the
    channel."""
    test = load_episode(SAMPLE / "test.npz")
    acts = np.zeros((2, 3, 7), np.float32)
    acts[1, 0, 0] = 0.6  # the base swings the arm out of the region at its first step
    np.save(tmp_path / "acts.npy", acts)
    q0 = test.joint_positions[0, :7]
    upper = [3.0] * 7
    upper[3] = float(q0[3]) - 0.1  # the start already past channel 3's upper limit
    (tmp_path / "rules.yaml").write_text(
        "keep_out:\n  regions:\n    - polygon: [[0.6875, 0.0625], [0.78125, 0.0625], "
        "[0.78125, 0.15625], [0.6875, 0.15625]]\n"
        f"joint_limits:\n  lower: {[-3.0] * 7}\n  upper: {upper}\n")
    argv = ["precheck", "--chain", str(CHAIN), "--start", str(SAMPLE / "test.npz"),
            "--actions", str(tmp_path / "acts.npy"), "--rules", str(tmp_path / "rules.yaml"),
            "--no-anchor", "--out", str(tmp_path / "o")]
    assert main(argv) == 1  # both refused: the start is past a limit
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    ko = [v["scores"]["keep_out_first_step"] for v in rep["verdicts"]]
    assert ko[0] == 0 and ko[1] is None, ko
    name = load_chain_calibration(CHAIN).dof_names[3]
    assert any("the arm at the start already has" in w for w in rep["warnings"])
    assert any("the start joint readings already lie outside joint_limits" in w
               and f"{name} " in w for w in rep["warnings"]), rep["warnings"]


def test_simulate_says_a_prediction_below_copying_the_start_frame(tmp_path, capsys):
    """A chain read wrong (every axis turned the other way) predicts the sample cell's test
    episode below holding its start frame: said on stderr and in the warnings (it was
    printed beside the copy-last figure with nothing to say it lost)."""
    import dataclasses

    from edge.runtime.chain import load_chain_calibration, save_chain_calibration

    chain = load_chain_calibration(CHAIN)
    wrong = tmp_path / "wrong.npz"
    save_chain_calibration(wrong, dataclasses.replace(chain, axes=-chain.axes))
    out = tmp_path / "sim"
    assert main(["simulate", "--chain", str(wrong), "--start", str(SAMPLE / "test.npz"),
                 "--no-anchor", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    m = json.loads((out / "metrics.json").read_text())
    assert m["summary"]["psnr_db"] < m["copy_last"]["summary"]["psnr_db"]
    (said,) = [w for w in m["warnings"] if "below copying the start frame" in w]
    assert (f"whole-frame PSNR {m['summary']['psnr_db']:.2f} against "
            f"{m['copy_last']['summary']['psnr_db']:.2f} dB over 39 steps") in said
    assert "chain.png" in said and said in err


def test_below_copy_last_compares_the_steps_both_have():
    """A step whose truth equals the start frame has no finite PSNR for the start frame
    held; averaged over different steps, a prediction worse at every step read as better
    (30, 18, 18 against inf, 19, 19)."""
    from edge.commands.simulate import _below_copy_last

    said = _below_copy_last([30.0, 18.0, 18.0], [None, 19.0, 19.0], True)
    assert said is not None and "18.00 against 19.00 dB over 2 steps" in said
    assert _below_copy_last([30.0, 20.0], [None, 19.0], True) is None
    assert _below_copy_last([None], [None], False) is None
