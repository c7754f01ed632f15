"""A device's bundle slots in the field: a damaged active slot repaired by installing its
bundle again, old-schema and edited slots refused by rollback, activate and the runtime,
activate after a lost link, slot health in list and doctor, a held lock's exit code."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from bundle_helpers import make_env

from edge.bundle.format import BundleError
from edge.bundle.install import (
    activate,
    active_slot,
    check_slot_identity,
    install_bundle,
    list_slots,
    rollback,
)
from edge.cli import main
from edge.manifest import model_sha256
from export.bundle.build import load_private_key, pack_bundle

ROOT = Path(__file__).resolve().parent.parent
LATENT = ROOT / "models" / "latent-reference"
SAMPLE = ROOT / "samples" / "cell_sample"


def _pack(folder: Path, out: Path, key: Path) -> Path:
    m = json.loads((folder / "model.json").read_text())
    pack_bundle({p.name: p for p in folder.iterdir() if p.is_file()}, out, target="cpu",
                model_name=m["name"], model_variant=m["variant"],
                private_key=load_private_key(key))
    return out


def _schema1_bundle(tmp: Path, key: Path) -> Path:
    """A bundle of the latent reference model with a schema-1 model.json, signed as an
    older syncedge's build would have (this one's build refuses to make it)."""
    folder = tmp / "old-model"
    shutil.copytree(LATENT, folder)
    d = json.loads((folder / "model.json").read_text())
    d["schema_version"] = 1
    for k in ("family", "calibration_mode", "warping", "calibration_amplitude_rad",
              "state_layout", "decoder_outputs"):
        d["contract"].pop(k, None)
    (folder / "model.json").write_text(json.dumps(d))
    return _pack(folder, tmp / "old.bundle", key)


def _as_left_by_an_older_syncedge(bundle: Path, slot: Path) -> None:
    """Unpack ``bundle`` into ``slot`` as an install of an older syncedge left it (that
    install checked no model schema)."""
    shutil.rmtree(slot, ignore_errors=True)
    slot.mkdir()
    with tarfile.open(bundle, "r:gz") as tar:
        tar.extractall(slot, filter="data")
    (slot / "installed.json").write_text(json.dumps({"utc": "2026-01-01T00:00:00+00:00",
                                                     "source": bundle.name}))


def test_installing_the_active_bundle_again_repairs_its_damaged_slot_and_keeps_the_previous(
        tmp_path):
    env = make_env(tmp_path)
    install_bundle(env.bundle(0), target="cpu", root=env.root)  # a
    install_bundle(env.bundle(1), target="cpu", root=env.root)  # b, active
    (env.root / "b" / "step_b1.onnx").unlink()  # a file lost on the device
    health = {s.slot: s for s in list_slots(env.root, verify=True)}
    assert "step_b1.onnx: missing from slot b" in health["b"].problem
    assert health["a"].problem == ""
    assert list_slots(env.root)[1].problem == ""  # without verify nothing is hashed
    info = install_bundle(env.bundle(1), target="cpu", root=env.root)
    assert not info.unchanged and "step_b1.onnx: missing" in info.repaired
    assert info.slot == "b" and active_slot(env.root) == "b"
    assert all(s.problem == "" for s in list_slots(env.root, verify=True))
    # the previous model (slot a) is still there to roll back to
    assert model_sha256(env.root / "a") == model_sha256(env.model(0))
    assert rollback(env.root, target="cpu").slot == "a"


def test_a_refused_repair_leaves_the_previous_model_active(tmp_path):
    from export.bundle.build import generate_keypair

    env = make_env(tmp_path)
    install_bundle(env.bundle(0), target="cpu", root=env.root)  # a
    install_bundle(env.bundle(1), target="cpu", root=env.root)  # b, active
    (env.root / "b" / "step_b1.onnx").unlink()
    stranger, _, _ = generate_keypair(tmp_path / "other-keys", "stranger")
    with pytest.raises(BundleError):
        install_bundle(env.bundle(2, key=stranger), target="cpu", root=env.root)
    assert active_slot(env.root) == "a"  # sound, where b could not run
    assert list_slots(env.root, verify=True)[0].problem == ""


def test_a_damaged_slot_with_nothing_sound_beside_it_is_replaced_through_the_other_slot(
        tmp_path):
    env = make_env(tmp_path)
    install_bundle(env.bundle(0), target="cpu", root=env.root)  # a, b empty
    p = env.root / "a" / "encoder.onnx"
    p.write_bytes(p.read_bytes()[:-1] + b"\0")  # altered
    info = install_bundle(env.bundle(0), target="cpu", root=env.root)
    assert "encoder.onnx: sha256 does not match" in info.repaired
    assert info.slot == "b" and active_slot(env.root) == "b"
    # a sound active slot is still not installed twice
    again = install_bundle(env.bundle(0), target="cpu", root=env.root)
    assert again.unchanged and again.repaired == "" and active_slot(env.root) == "b"


def test_rollback_and_activate_refuse_a_slot_of_an_older_model_schema(tmp_path, capsys,
                                                                      monkeypatch):
    env = make_env(tmp_path)
    install_bundle(env.bundle(0), target="cpu", root=env.root)  # a
    install_bundle(env.bundle(1), target="cpu", root=env.root)  # b, active
    _as_left_by_an_older_syncedge(_schema1_bundle(tmp_path, env.key), env.root / "a")
    with pytest.raises(BundleError, match=r"schema_version 1 is an older model schema.*"
                                          r"refusing to roll back to slot a"):
        rollback(env.root, target="cpu")
    with pytest.raises(BundleError, match=r"schema_version 1.*refusing to activate slot a"):
        activate("a", env.root, target="cpu")
    assert active_slot(env.root) == "b"
    slots = {s.slot: s for s in list_slots(env.root, verify=True)}
    assert "schema_version 1" in slots["a"].problem and slots["b"].problem == ""

    # the runtime on such an active slot (an older syncedge switched to it) names the
    # bundle route, and export upgrade leaves the signed slot alone
    monkeypatch.setenv("SYNCEDGE_HOME", str(env.root.parent))
    os.replace(env.root / "active", env.root / "active.b")
    os.symlink("a", env.root / "active")
    before = (env.root / "a" / "model.json").read_bytes()
    assert main(["simulate", "--calibration", str(SAMPLE / "calibration.npz"), "--start",
                 str(SAMPLE / "test.npz"), "--out", str(tmp_path / "sim")]) == 2
    err = capsys.readouterr().err
    assert "installed bundle slot" in err and "build, sign and install a new bundle" in err
    assert "syncedge export upgrade " + str(env.root) not in err
    assert main(["export", "upgrade", str(env.root / "active")]) == 2
    assert "an installed bundle slot" in capsys.readouterr().err
    assert (env.root / "a" / "model.json").read_bytes() == before
    assert not (tmp_path / "sim").exists()


def test_the_runtime_refuses_an_active_slot_whose_model_json_was_edited(tmp_path, capsys,
                                                                        monkeypatch):
    env = make_env(tmp_path)
    install_bundle(_pack(LATENT, tmp_path / "latent.bundle", env.key), target="cpu",
                   root=env.root)
    check_slot_identity(env.root / "active")  # as installed: nothing to say
    check_slot_identity(LATENT)  # not a slot: nothing to check
    m = env.root / "a" / "model.json"
    m.write_bytes(m.read_bytes() + b"\n")  # valid JSON, another model than the one signed
    with pytest.raises(BundleError, match="changed after it was installed"):
        check_slot_identity(env.root / "active")
    monkeypatch.setenv("SYNCEDGE_HOME", str(env.root.parent))
    assert main(["simulate", "--calibration", str(SAMPLE / "calibration.npz"), "--start",
                 str(SAMPLE / "test.npz"), "--out", str(tmp_path / "sim")]) == 2
    assert "changed after it was installed" in capsys.readouterr().err


def test_activate_restores_a_lost_active_link_and_list_and_doctor_report_slot_health(
        tmp_path, capsys, monkeypatch):
    from edge.commands.doctor import bundle_status

    env = make_env(tmp_path)
    monkeypatch.setenv("SYNCEDGE_HOME", str(env.root.parent))
    monkeypatch.setenv("SYNCEDGE_TARGET", "cpu")
    assert "no active slot" in bundle_status().reason and not bundle_status().available
    install_bundle(env.bundle(0), target="cpu", root=env.root)
    install_bundle(env.bundle(1), target="cpu", root=env.root)
    ok = bundle_status()
    assert ok.available and "slot b (active)" in ok.reason and "files verified" in ok.reason
    (env.root / "active").unlink()
    with pytest.raises(BundleError, match="slots a and b are installed: make one active "
                                          "with 'syncedge bundle activate SLOT'"):
        rollback(env.root, target="cpu")
    assert main(["bundle", "list"]) == 0
    assert "no slot is active" in capsys.readouterr().out
    assert main(["bundle", "activate", "b"]) == 0
    assert "slot b active" in capsys.readouterr().out and active_slot(env.root) == "b"
    (env.root / "b" / "decoder_b1.onnx").unlink()
    (env.root / "a.partial").mkdir()  # as an interrupted install leaves it
    status = bundle_status()
    assert not status.available and "DAMAGED" in status.reason
    assert "leftover" in status.reason
    assert main(["bundle", "list"]) == 1  # the active slot cannot run
    out = capsys.readouterr().out
    assert "DAMAGED" in out and "files=verified" in out and "a.partial" in out
    with pytest.raises(BundleError, match="decoder_b1.onnx: missing.*refusing to activate "
                                          "slot b"):
        activate("b", env.root, target="cpu")
    assert not (env.root / "a.partial").exists()  # activate cleaned the leftover


def test_a_held_lock_exits_75_and_a_private_key_is_not_trusted(tmp_path, capsys,
                                                               monkeypatch):
    env = make_env(tmp_path)
    monkeypatch.setenv("SYNCEDGE_HOME", str(env.root.parent))
    monkeypatch.setenv("SYNCEDGE_TARGET", "cpu")
    fd = os.open(env.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert main(["bundle", "install", str(env.bundle(0))]) == 75
        assert "try again" in capsys.readouterr().err
    finally:
        os.close(fd)
    capsys.readouterr()
    assert main(["bundle", "keys", "add", str(env.key)]) == 2
    assert "a private key; a device trusts the public key only" in capsys.readouterr().err
