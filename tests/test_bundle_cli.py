"""``syncedge bundle ...`` through argparse (the worktree is not pip-installed), including
the four-command OEM flow of docs/bundles.md."""

from __future__ import annotations

import argparse
import re

import pytest
from tiny_model import make_tiny_model

from edge.bundle.format import BundleError
from export.bundle.cli import register


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="syncedge")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    args = parser.parse_args(list(argv))
    return args.func(args)


def test_oem_flow_in_four_commands(tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    monkeypatch.setenv("SYNCEDGE_HOME", str(home))
    monkeypatch.setenv("SYNCEDGE_TARGET", "cpu")
    model = make_tiny_model(tmp_path / "model")
    oem = tmp_path / "oem"
    assert _run("bundle", "keygen", "--out", str(oem)) == 0
    out = tmp_path / "tiny-cpu.bundle"
    assert _run("bundle", "build", str(model), "--target", "cpu", "--key",
                str(oem / "oem.key.pem"), "--out", str(out)) == 0
    assert _run("bundle", "verify", str(out), "--pubkey", str(oem / "oem.pub.pem")) == 0
    # On the device the OEM key is trusted once (at flashing time), then install.
    assert _run("bundle", "keys", "add", str(oem / "oem.pub.pem")) == 0
    assert _run("bundle", "install", str(out)) == 0
    text = capsys.readouterr().out
    assert "OK: tiny fp32 for cpu" in text and "into slot a; now active" in text
    assert (home / "bundles" / "active").is_symlink()
    assert _run("bundle", "list") == 0
    assert "* a  tiny fp32 target=cpu" in capsys.readouterr().out
    assert _run("bundle", "keys", "list") == 0
    with pytest.raises(BundleError, match="slot is empty"):
        _run("bundle", "rollback")


def test_install_refuses_target_from_flag(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNCEDGE_HOME", str(tmp_path / "home"))
    model = make_tiny_model(tmp_path / "model")
    _run("bundle", "keygen", "--out", str(tmp_path))
    out = tmp_path / "b.bundle"
    _run("bundle", "build", str(model), "--target", "x86-sm90", "--key",
         str(tmp_path / "oem.key.pem"), "--out", str(out))
    _run("bundle", "keys", "add", str(tmp_path / "oem.pub.pem"))
    with pytest.raises(BundleError, match="built for target 'x86-sm90', not 'cpu'"):
        _run("bundle", "install", str(out), "--target", "cpu")
    with pytest.raises(BundleError, match="--target: unknown target 'gpu'"):
        _run("bundle", "install", str(out), "--target", "gpu")
    monkeypatch.setenv("SYNCEDGE_TARGET", "orin")
    with pytest.raises(BundleError, match="SYNCEDGE_TARGET: unknown target 'orin'"):
        _run("bundle", "install", str(out))


def test_detect_target(tmp_path):
    from edge.bundle.device_target import detect_target

    model = tmp_path / "model"
    model.write_bytes(b"NVIDIA Jetson AGX Orin Developer Kit\x00")
    assert detect_target(model, lambda: (8, 7)) == "jetson-orin-sm87"
    model.write_bytes(b"NVIDIA Jetson AGX Thor Developer Kit\x00")
    assert detect_target(model, lambda: None) == "jetson-thor-sm110"
    model.write_bytes(b"NVIDIA Jetson Xavier NX\x00")
    with pytest.raises(BundleError, match="not a supported target"):
        detect_target(model, lambda: None)
    missing = tmp_path / "none"
    assert detect_target(missing, lambda: None) == "cpu"
    assert detect_target(missing, lambda: (9, 0), machine="x86_64") == "x86-sm90"
    with pytest.raises(BundleError, match="compute capability 8.9"):
        detect_target(missing, lambda: (8, 9), machine="x86_64")


def test_verify_with_another_public_key_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNCEDGE_HOME", str(tmp_path / "home"))
    model = make_tiny_model(tmp_path / "model")
    _run("bundle", "keygen", "--out", str(tmp_path / "a"))
    _run("bundle", "keygen", "--out", str(tmp_path / "b"))
    out = tmp_path / "b.bundle"
    _run("bundle", "build", str(model), "--target", "cpu", "--key",
         str(tmp_path / "a" / "oem.key.pem"), "--out", str(out))
    with pytest.raises(BundleError, match=r"signed by key \w+, not by the key given with "
                                          r"--pubkey \(\w+\); pass the public key"):
        _run("bundle", "verify", str(out), "--pubkey", str(tmp_path / "b" / "oem.pub.pem"))
    with pytest.raises(BundleError, match=r"not trusted on this device \(trusted: none\)"):
        _run("bundle", "verify", str(out))


def test_build_names_a_model_json_given_for_its_folder_and_a_missing_folder(tmp_path):
    model = make_tiny_model(tmp_path / "m")
    out = str(tmp_path / "x.bundle")
    with pytest.raises(BundleError, match=r"model\.json: a file; give the model's folder \("):
        _run("bundle", "build", str(model / "model.json"), "--target", "cpu", "--out", out,
             "--key", str(tmp_path / "none"))
    with pytest.raises(FileNotFoundError) as e:
        _run("bundle", "build", str(tmp_path / "nothing"), "--target", "cpu", "--out", out,
             "--key", str(tmp_path / "none"))
    assert e.value.filename == str(tmp_path / "nothing")
    assert not (tmp_path / "x.bundle").exists()


def test_a_full_disk_during_install_names_the_disk_not_the_bundle(tmp_path, monkeypatch,
                                                                  capsys):
    import errno

    from edge.bundle import reader
    from edge.cli import main

    home = tmp_path / "home"
    monkeypatch.setenv("SYNCEDGE_HOME", str(home))
    monkeypatch.setenv("SYNCEDGE_TARGET", "cpu")
    model = make_tiny_model(tmp_path / "model")
    _run("bundle", "keygen", "--out", str(tmp_path))
    out = tmp_path / "b.bundle"
    _run("bundle", "build", str(model), "--target", "cpu", "--key",
         str(tmp_path / "oem.key.pem"), "--out", str(out))
    _run("bundle", "keys", "add", str(tmp_path / "oem.pub.pem"))
    real = reader._open_out

    def full_disk(dest, name):  # writes fail as on a full disk: ENOSPC, no file named
        f, _sink = real(dest, name)

        def sink(block):
            raise OSError(errno.ENOSPC, "No space left on device")
        return f, sink

    monkeypatch.setattr(reader, "_open_out", full_disk)
    capsys.readouterr()
    rc = main(["bundle", "install", str(out)])
    err = capsys.readouterr().err
    assert rc != 0 and "No space left on device" in err, err
    assert "truncated or corrupt" not in err and "Traceback" not in err
    assert str(home / "bundles") in err  # the file being written, on the full disk
    assert not (home / "bundles" / "active").exists()


def test_rollback_under_a_mistyped_root_creates_nothing(tmp_path):
    typo = tmp_path / "bundels"
    with pytest.raises(BundleError, match="no bundle installed .no such folder.; nothing to "
                                          "roll back"):
        _run("bundle", "rollback", "--root", str(typo))
    assert not typo.exists()


def test_list_marks_a_slot_whose_key_was_retired(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SYNCEDGE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SYNCEDGE_TARGET", "cpu")
    model = make_tiny_model(tmp_path / "model")
    for name in ("old", "new"):
        _run("bundle", "keygen", "--out", str(tmp_path / name))
        _run("bundle", "build", str(model), "--target", "cpu", "--key",
             str(tmp_path / name / "oem.key.pem"), "--out", str(tmp_path / f"{name}.bundle"))
        _run("bundle", "keys", "add", str(tmp_path / name / "oem.pub.pem"))
        _run("bundle", "install", str(tmp_path / f"{name}.bundle"))
    capsys.readouterr()
    _run("bundle", "list")
    listed = capsys.readouterr().out
    assert "no longer trusted" not in listed
    old_id = re.search(r"\n? +a  tiny fp32 target=cpu model=\w+ key=(\w+)", listed).group(1)
    _run("bundle", "keys", "remove", old_id)
    capsys.readouterr()
    _run("bundle", "list")
    listed = capsys.readouterr().out.splitlines()
    assert "(key no longer trusted: rollback refuses this slot)" in listed[0]  # slot a
    assert "no longer trusted" not in listed[1]  # the active slot b, the new key
