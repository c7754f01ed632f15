"""Bundle build, verify, A/B install, list, rollback and key rotation."""

from __future__ import annotations

import pytest
from bundle_helpers import make_env, read_members

from edge.bundle.format import MANIFEST_NAME, SIGNATURE_NAME, BundleError, BundleManifest
from edge.bundle.install import (
    active_model_dir,
    active_slot,
    install_bundle,
    list_slots,
    rollback,
)
from edge.bundle.keys import add_key, remove_key, trusted_keys
from edge.bundle.reader import read_bundle
from edge.manifest import load_model_dir, model_sha256
from export.bundle.build import build_bundle, generate_keypair


def test_bundle_layout_and_manifest(tmp_path):
    env = make_env(tmp_path)
    b = env.bundle()
    members = read_members(b)
    names = [m.name for m, _ in members]
    assert names[:2] == [MANIFEST_NAME, SIGNATURE_NAME]
    assert sorted(names[2:]) == sorted(["model.json", "encoder.onnx", "calibration.onnx",
                                        "step_b1.onnx", "decoder_b1.onnx"])
    m = BundleManifest.from_bytes(members[0][1])
    assert m.target == "cpu" and m.key_id == env.key_id and m.model_name == "tiny"
    assert m.model_sha256 == model_sha256(env.model())
    assert BundleManifest.from_bytes(m.to_bytes()) == m
    assert all(i.uid == 0 and i.mode == 0o644 for i, _ in members)


def test_verify_without_unpacking_and_with_public_key(tmp_path):
    env = make_env(tmp_path)
    v = read_bundle(env.bundle(), trusted_keys(env.root / "keys"))
    assert v.key_id == env.key_id and v.manifest.target == "cpu"


def test_install_switch_list_and_rollback(tmp_path):
    env = make_env(tmp_path)
    assert active_slot(env.root) is None
    with pytest.raises(BundleError, match="no bundle installed"):
        active_model_dir(env.root)
    first = install_bundle(env.bundle(0), target="cpu", root=env.root)
    assert first.slot == "a" and active_slot(env.root) == "a"
    load_model_dir(active_model_dir(env.root))
    with pytest.raises(BundleError, match="slot is empty"):
        rollback(env.root)
    second = install_bundle(env.bundle(1), target="cpu", root=env.root)
    assert second.slot == "b"
    slots = {s.slot: s for s in list_slots(env.root)}
    assert slots["a"].state == slots["b"].state == "complete"
    assert slots["b"].active and not slots["a"].active
    assert model_sha256(active_model_dir(env.root)) == model_sha256(env.model(1))
    back = rollback(env.root)
    assert back.slot == "a"
    assert model_sha256(active_model_dir(env.root)) == model_sha256(env.model(0))
    # Installing again replaces the inactive slot (b), keeping a for rollback.
    third = install_bundle(env.bundle(2), target="cpu", root=env.root)
    assert third.slot == "b"
    assert model_sha256(env.root / "a") == model_sha256(env.model(0))


def test_rollback_refuses_a_corrupt_previous_slot(tmp_path):
    env = make_env(tmp_path)
    install_bundle(env.bundle(0), target="cpu", root=env.root)
    install_bundle(env.bundle(1), target="cpu", root=env.root)
    (env.root / "a" / "encoder.onnx").write_bytes(b"bitrot")
    with pytest.raises(BundleError, match=r"a/encoder\.onnx: sha256 does not match"):
        rollback(env.root)
    assert active_slot(env.root) == "b"


def test_rollback_refuses_a_retired_key_and_another_target(tmp_path):
    env = make_env(tmp_path)
    keys = env.root / "keys"
    install_bundle(env.bundle(0), target="cpu", root=env.root)  # slot a, old key
    new_priv, new_pub, new_id = generate_keypair(tmp_path / "keys2", "oem2")
    add_key(new_pub, keys)
    install_bundle(env.bundle(1, key=new_priv), target="cpu", root=env.root)  # slot b
    remove_key(env.key_id, keys)  # the old key is retired (say, compromised)
    with pytest.raises(BundleError, match=rf"a/bundle\.sig: slot a is signed by key "
                                          rf"{env.key_id}, which this device no longer "
                                          r"trusts .*: a retired key's model does not come "
                                          r"back .*refusing to roll back to slot a"):
        rollback(env.root, target="cpu")
    assert active_slot(env.root) == "b"
    # a slot built for another target does not come back either
    orin = tmp_path / "orin.bundle"
    build_bundle(env.model(2), orin, target="jetson-orin-sm87", private_key_path=new_priv)
    install_bundle(orin, target="jetson-orin-sm87", root=env.root)  # into slot a
    install_bundle(env.bundle(3, key=new_priv), target="cpu", root=env.root)  # slot b
    with pytest.raises(BundleError, match="built for target 'jetson-orin-sm87', but this "
                                          "device is 'cpu'.*refusing to roll back"):
        rollback(env.root, target="cpu")
    assert active_slot(env.root) == "b"
    assert rollback(env.root, target="jetson-orin-sm87").slot == "a"


def test_extra_files_travel_in_the_bundle(tmp_path):
    env = make_env(tmp_path)
    extra = tmp_path / "keypoints.onnx"
    extra.write_bytes(b"regressor")
    out = tmp_path / "x.bundle"
    build_bundle(env.model(), out, target="cpu", private_key_path=env.key, extras=[extra])
    install_bundle(out, target="cpu", root=env.root)
    assert (active_model_dir(env.root) / "keypoints.onnx").read_bytes() == b"regressor"
    with pytest.raises(BundleError, match="clashes"):
        build_bundle(env.model(), out, target="cpu", private_key_path=env.key,
                     extras=[env.model() / "encoder.onnx"])


def test_extra_files_that_cannot_travel_are_refused_before_the_bundle_is_written(tmp_path):
    # installed.json in the payload was overwritten by install's own record; the slot then
    # read as corrupt after a rollback and back
    env = make_env(tmp_path)
    record = tmp_path / "installed.json"
    record.write_text("{}")
    out = tmp_path / "r.bundle"
    with pytest.raises(BundleError, match="--extra expected a file, found a folder"):
        build_bundle(env.model(), out, target="cpu", private_key_path=env.key,
                     extras=[tmp_path])
    twice = tmp_path / "keypoints.onnx"
    twice.write_bytes(b"regressor")
    with pytest.raises(BundleError, match="'keypoints.onnx' is given twice"):
        build_bundle(env.model(), out, target="cpu", private_key_path=env.key,
                     extras=[twice, twice])
    with pytest.raises(BundleError, match="'installed.json' is reserved for the install record"):
        build_bundle(env.model(), out, target="cpu", private_key_path=env.key, extras=[record])
    assert not out.exists()


def test_an_extra_file_model_json_lists_must_be_the_one_it_records(tmp_path):
    import dataclasses
    import hashlib

    from edge.manifest import save_manifest

    env = make_env(tmp_path)
    model = env.model()
    right = tmp_path / "keypoint.onnx"
    right.write_bytes(b"the regressor exported with this model")
    man = load_model_dir(model)
    save_manifest(dataclasses.replace(man, extra={"keypoint": {
        "file": "keypoint.onnx", "sha256": hashlib.sha256(right.read_bytes()).hexdigest()}}),
        model / "model.json")
    out = tmp_path / "x.bundle"
    wrong = tmp_path / "other" / "keypoint.onnx"
    wrong.parent.mkdir()
    wrong.write_bytes(b"a decoder graph")
    with pytest.raises(BundleError, match=r"keypoint\.onnx: sha256 .* differs from model\.json "
                                          r"extra\.keypoint\.sha256"):
        build_bundle(model, out, target="cpu", private_key_path=env.key, extras=[wrong])
    build_bundle(model, out, target="cpu", private_key_path=env.key, extras=[right])
    assert out.is_file()


def test_key_rotation_add_new_then_retire_old(tmp_path):
    env = make_env(tmp_path)
    keys = env.root / "keys"
    new_priv, new_pub, new_id = generate_keypair(tmp_path / "keys2", "oem2")
    new_bundle = tmp_path / "new.bundle"
    build_bundle(env.model(1), new_bundle, target="cpu", private_key_path=new_priv)
    with pytest.raises(BundleError, match=f"signed by key {new_id}, which is not trusted"):
        install_bundle(new_bundle, target="cpu", root=env.root)
    assert add_key(new_pub, keys) == new_id
    assert sorted(trusted_keys(keys)) == sorted([env.key_id, new_id])
    install_bundle(new_bundle, target="cpu", root=env.root)
    remove_key(env.key_id, keys)
    with pytest.raises(BundleError, match="last trusted key"):
        remove_key(new_id, keys)
    with pytest.raises(BundleError, match="not trusted on this device"):
        install_bundle(env.bundle(0), target="cpu", root=env.root)
    with pytest.raises(BundleError, match="is not trusted"):
        remove_key(env.key_id, keys)


def test_keygen_never_overwrites(tmp_path):
    generate_keypair(tmp_path, "k")
    assert oct((tmp_path / "k.key.pem").stat().st_mode & 0o777) == "0o600"
    with pytest.raises(BundleError, match="already exists"):
        generate_keypair(tmp_path, "k")


def test_unknown_target_is_refused_at_build(tmp_path):
    env = make_env(tmp_path)
    with pytest.raises(BundleError, match="unknown target 'jetson'"):
        build_bundle(env.model(), tmp_path / "x", target="jetson", private_key_path=env.key)


def test_installing_the_active_bundle_again_keeps_the_rollback_slot(tmp_path, capsys):
    env = make_env(tmp_path)
    install_bundle(env.bundle(0), target="cpu", root=env.root)
    install_bundle(env.bundle(1), target="cpu", root=env.root)  # b active, a for rollback
    again = install_bundle(env.bundle(1), target="cpu", root=env.root)
    assert again.unchanged and again.slot == "b" and active_slot(env.root) == "b"
    assert model_sha256(env.root / "a") == model_sha256(env.model(0))  # not overwritten
    assert sorted(p.name for p in env.root.iterdir() if p.name.endswith(".partial")) == []
    assert rollback(env.root).slot == "a"
    assert model_sha256(active_model_dir(env.root)) == model_sha256(env.model(0))
    # the bundle in the inactive slot is installed as usual (active again)
    back = install_bundle(env.bundle(1), target="cpu", root=env.root)
    assert not back.unchanged and back.slot == "b"


def test_rollback_on_a_state_root_it_cannot_write_says_so_in_one_line(tmp_path, monkeypatch):
    import os

    import edge.bundle.install as install

    env = make_env(tmp_path)
    real_open = os.open

    def no_lock(path, *a, **k):
        if str(path).endswith(".lock"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **k)
    monkeypatch.setattr(install.os, "open", no_lock)
    with pytest.raises(BundleError, match="cannot write the device's bundle folder") as e:
        rollback(env.root)
    assert ".lock" not in str(e.value)
