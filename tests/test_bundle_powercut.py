"""A power cut during install: the installing process is SIGKILLed at each named step, and
the active slot is always one complete model, the old or the new one, never a mix; the
next install removes the leftovers."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from bundle_helpers import make_env

from edge.bundle.format import MANIFEST_NAME, BundleManifest
from edge.bundle.install import INSTALL_STEPS, active_model_dir, install_bundle, list_slots
from edge.manifest import load_model_dir, model_sha256

REPO = Path(__file__).resolve().parents[1]

# The test-only hook: kill this process at the named step, like a power cut.
CHILD = """
import os, signal, sys
from edge.bundle.install import install_bundle
root, bundle, at = sys.argv[1:4]
def on_step(name):
    if name == at:
        os.kill(os.getpid(), signal.SIGKILL)
install_bundle(bundle, target="cpu", root=root, on_step=on_step)
print("finished")
"""


def _complete_model(slot_dir: Path) -> str:
    """Check the slot holds exactly one whole bundle; return its model sha256."""
    manifest = BundleManifest.from_bytes((slot_dir / MANIFEST_NAME).read_bytes())
    names = {p.name for p in slot_dir.iterdir()}
    assert names == {f.name for f in manifest.files} | {"bundle.json", "bundle.sig",
                                                        "installed.json"}
    for f in manifest.files:
        assert hashlib.sha256((slot_dir / f.name).read_bytes()).hexdigest() == f.sha256
    load_model_dir(slot_dir)
    return model_sha256(slot_dir)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    env = make_env(tmp_path_factory.mktemp("powercut"))
    install_bundle(env.bundle(0), target="cpu", root=env.root)   # slot a
    install_bundle(env.bundle(1), target="cpu", root=env.root)   # slot b, active
    return env, env.bundle(2), model_sha256(env.model(1)), model_sha256(env.model(2))


@pytest.mark.parametrize("step", INSTALL_STEPS)
def test_kill_at_each_step_leaves_old_or_new(prepared, tmp_path, step):
    env, new_bundle, old_sha, new_sha = prepared
    root = tmp_path / "bundles"
    shutil.copytree(env.root, root, symlinks=True)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(root), str(new_bundle), step],
                          cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    active = _complete_model(active_model_dir(root))
    expected_new = INSTALL_STEPS.index(step) >= INSTALL_STEPS.index("switched")
    assert active == (new_sha if expected_new else old_sha)
    # The next install cleans up and succeeds.
    info = install_bundle(new_bundle, target="cpu", root=root)
    assert _complete_model(root / info.slot) == new_sha
    leftovers = [p.name for p in root.iterdir() if p.name.endswith((".partial", ".old", ".tmp"))]
    assert leftovers == []
    states = {s.slot: s.state for s in list_slots(root)}
    assert set(states.values()) == {"complete"}
