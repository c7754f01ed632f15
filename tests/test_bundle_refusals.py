"""Bad bundles are refused with a message naming the file and reason, and the active slot
stays untouched (same link, same bytes, no leftovers)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from bundle_helpers import Env, make_env, read_members, rewrite, tree_digest, write_members

from edge.bundle.format import BundleError, BundleManifest, BundleSignature
from edge.bundle.install import install_bundle
from export.bundle.build import generate_keypair, load_private_key, pack_bundle


@pytest.fixture
def env(tmp_path: Path) -> Env:
    e = make_env(tmp_path)
    install_bundle(e.bundle(0), target="cpu", root=e.root)
    install_bundle(e.bundle(1), target="cpu", root=e.root)
    return e


def _refused(env: Env, bundle: Path, match: str, target: str = "cpu") -> str:
    before = tree_digest(env.root)
    with pytest.raises(BundleError, match=match) as info:
        install_bundle(bundle, target=target, root=env.root)
    assert tree_digest(env.root) == before, "active or inactive slot changed"
    assert str(bundle) in str(info.value)
    return str(info.value)


def _replace(name: str, data: bytes):
    def mutate(ms):
        return [(i, data if i.name == name else d) for i, d in ms]
    return mutate


def test_tampered_file(env, tmp_path):
    src = env.bundle(1)
    size = next(len(data) for info, data in read_members(src) if info.name == "step_b1.onnx")
    bad = rewrite(src, tmp_path / "t.bundle", _replace("step_b1.onnx", b"x" * size))
    _refused(env, bad, r"member 'step_b1\.onnx' has sha256 .* tampered")


def test_tampered_file_with_another_size(env, tmp_path):
    bad = rewrite(env.bundle(1), tmp_path / "t.bundle", _replace("encoder.onnx", b"evil"))
    _refused(env, bad, r"member 'encoder\.onnx' is 4 bytes, bundle\.json says")


def test_wrong_signature(env, tmp_path):
    ms = read_members(env.bundle(2))
    d = json.loads(ms[0][1])
    d["target"] = "x86-sm90"  # altered after signing
    ms[0] = (ms[0][0], json.dumps(d).encode())
    _refused(env, write_members(tmp_path / "s.bundle", ms), "does not verify bundle.json")


def test_signature_from_another_key_under_the_trusted_id(env, tmp_path):
    other, _, _ = generate_keypair(tmp_path / "other", "x")
    ms = read_members(env.bundle(2))
    forged = load_private_key(other).sign(ms[0][1])
    sig = BundleSignature(env.key_id, forged).to_bytes()
    ms[1] = (ms[1][0], sig)
    _refused(env, write_members(tmp_path / "f.bundle", ms), "does not verify")


def test_unknown_key(env, tmp_path):
    other, _, other_id = generate_keypair(tmp_path / "other", "x")
    _refused(env, env.bundle(3, key=other), f"signed by key {other_id}, which is not trusted")


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.97])
def test_truncated_archive(env, tmp_path, keep):
    data = env.bundle(2).read_bytes()
    bad = tmp_path / "cut.bundle"
    bad.write_bytes(data[: int(len(data) * keep)])
    _refused(env, bad, "truncated|corrupt|missing")


def test_not_an_archive(env, tmp_path):
    bad = tmp_path / "junk.bundle"
    bad.write_bytes(b"not a bundle at all")
    _refused(env, bad, "not a gzip-compressed tar archive")


def test_a_member_named_as_the_install_record(env, tmp_path):
    def mutate(ms):
        return ms[:2] + [(tarfile.TarInfo("installed.json"), b"{}")] + ms[2:]
    bad = rewrite(env.bundle(2), tmp_path / "r.bundle", mutate)
    _refused(env, bad, "'installed.json' is reserved for the install record")


@pytest.mark.parametrize("name", ["../evil.onnx", "/etc/evil", "sub/evil.onnx"])
def test_path_traversal_member(env, tmp_path, name):
    def mutate(ms):
        info = tarfile.TarInfo(name)
        return ms[:2] + [(info, b"payload")] + ms[2:]
    bad = rewrite(env.bundle(2), tmp_path / "p.bundle", mutate)
    _refused(env, bad, "refused as path traversal")


@pytest.mark.parametrize("kind,label", [(tarfile.SYMTYPE, "a symlink"),
                                        (tarfile.LNKTYPE, "a hardlink"),
                                        (tarfile.CHRTYPE, "a device node"),
                                        (tarfile.FIFOTYPE, "a FIFO"),
                                        (tarfile.DIRTYPE, "a folder")])
def test_link_and_device_members(env, tmp_path, kind, label):
    def mutate(ms):
        info = tarfile.TarInfo("encoder.onnx")
        info.type = kind
        info.linkname = "/etc/passwd" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
        return ms[:2] + [(info, b"")] + [m for m in ms[2:] if m[0].name != "encoder.onnx"]
    bad = rewrite(env.bundle(2), tmp_path / "l.bundle", mutate)
    _refused(env, bad, f"member 'encoder.onnx' is {label}")


def test_unlisted_and_duplicate_members(env, tmp_path):
    bad = rewrite(env.bundle(2), tmp_path / "u.bundle",
                  lambda ms: ms + [(tarfile.TarInfo("extra.onnx"), b"x")])
    _refused(env, bad, "'extra.onnx' is not listed in bundle.json")
    bad = rewrite(env.bundle(2), tmp_path / "d.bundle", lambda ms: ms + [ms[-1]])
    _refused(env, bad, "appears twice")


def test_missing_member(env, tmp_path):
    bad = rewrite(env.bundle(2), tmp_path / "m.bundle",
                  lambda ms: [m for m in ms if m[0].name != "decoder_b1.onnx"])
    _refused(env, bad, "'decoder_b1.onnx' is listed in bundle.json but missing")


def test_members_out_of_order(env, tmp_path):
    bad = rewrite(env.bundle(2), tmp_path / "o.bundle", lambda ms: [ms[1], ms[0]] + ms[2:])
    _refused(env, bad, "expected member 'bundle.json' here, found 'bundle.sig'")


def test_model_schema_from_the_future(env, tmp_path):
    src = env.model(4)
    d = json.loads((src / "model.json").read_text())
    d["schema_version"] = 99
    (src / "model.json").write_text(json.dumps(d))
    files = {p.name: p for p in src.iterdir()}
    bad = tmp_path / "future.bundle"
    pack_bundle(files, bad, target="cpu", model_name="tiny", model_variant="fp32",
                private_key=load_private_key(env.key))
    _refused(env, bad, r"model\.json refused: .*schema_version: 99 is newer")


def test_bundle_schema_from_the_future(env, tmp_path):
    ms = read_members(env.bundle(2))
    d = json.loads(ms[0][1])
    d["schema_version"] = 7
    data = json.dumps(d).encode()
    sig = BundleSignature(env.key_id, load_private_key(env.key).sign(data)).to_bytes()
    ms[0], ms[1] = (ms[0][0], data), (ms[1][0], sig)
    _refused(env, write_members(tmp_path / "f.bundle", ms),
             r"schema_version: 7 is newer than this syncedge reads")


def test_wrong_target(env):
    msg = _refused(env, env.bundle(2, target="jetson-orin-sm87"),
                   r"built for target 'jetson-orin-sm87', not 'cpu' \(the target checked: this "
                   r"device's, unless --target")
    assert "--target" in msg


def test_manifest_unknown_key_is_an_error():
    good = BundleManifest(target="cpu", model_name="m", model_variant="fp32",
                          model_sha256="0" * 64, files=(), created={}, key_id="0" * 16)
    d = json.loads(good.to_bytes())
    d["files"] = {"model.json": {"sha256": "0" * 64, "size": 1}}
    d["surprise"] = 1
    with pytest.raises(BundleError, match=r"bundle.json.surprise: unknown key"):
        BundleManifest.from_bytes(json.dumps(d).encode())
    del d["surprise"]
    d["files"]["../x"] = {"sha256": "0" * 64, "size": 1}
    with pytest.raises(BundleError, match="path traversal"):
        BundleManifest.from_bytes(json.dumps(d).encode())
