"""The committed fatbin and its manifest; nvcc compiles every kernel for every target."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from kernels import build

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found on PATH (CUDA toolkit absent)")
KERNELS = sorted(
    set(
        re.findall(
            r'extern "C" __global__.*?\b(se_\w+)\s*\(',
            (build.KERNEL_DIR / build.SOURCE).read_text(),
            re.DOTALL,
        )
    )
)


def test_manifest_matches_committed_files():
    assert build.verify_manifest() == []
    manifest = json.loads((build.KERNEL_DIR / build.MANIFEST).read_text())
    assert manifest["targets"] == list(build.TARGETS)
    assert manifest["command"] == " ".join(build.fatbin_command())


def test_committed_fatbin_holds_every_target():
    entries = build.fatbin_entries((build.KERNEL_DIR / build.FATBIN).read_bytes())
    assert set(entries) >= {"sm_87", "sm_90", "sm_110", "compute_110"}


def test_stale_manifest_is_reported(tmp_path):
    (tmp_path / build.FATBIN).write_bytes((build.KERNEL_DIR / build.FATBIN).read_bytes())
    manifest = json.loads((build.KERNEL_DIR / build.MANIFEST).read_text())
    manifest["sources"]["rollout_kernels.cuh"] = "0" * 64
    (tmp_path / build.MANIFEST).write_text(json.dumps(manifest))
    problems = build.verify_manifest(tmp_path)
    assert len(problems) == 1 and "rollout_kernels.cuh" in problems[0]
    assert "python -m kernels.build" in problems[0]


def test_fatbin_entries_rejects_other_files():
    with pytest.raises(build.KernelBuildError, match="expected magic 0xBA55ED50"):
        build.fatbin_entries(b"\x7fELF" + bytes(64))


@pytest.fixture(scope="session")
def cubins(tmp_path_factory):
    """One nvcc run per architecture for the whole test session."""
    out = tmp_path_factory.mktemp("cubins")
    return {arch: build.compile_cubin(arch, out) for arch in build.SASS_ARCHS}


@needs_nvcc
@pytest.mark.parametrize("arch", build.SASS_ARCHS)
def test_every_kernel_compiles_per_arch(cubins, arch):
    data = cubins[arch].read_bytes()
    assert data[:4] == b"\x7fELF"
    for name in KERNELS:
        assert name.encode() in data, f"kernel {name} missing from the sm_{arch} cubin"


def test_kernel_list_is_complete():
    assert KERNELS == sorted(
        [
            "se_decode_frames", "se_precheck_scores", "se_ring_advance", "se_ring_fill",
            "se_ring_linearise", "se_ring_push", "se_ring_push_linearise", "se_robot_in_keepout",
            "se_select_action", "se_store_step",
        ]
    )  # fmt: skip


@needs_nvcc
def test_rebuild_reproduces_the_committed_fatbin(tmp_path):
    manifest = build.build_fatbin(tmp_path)
    committed = json.loads((build.KERNEL_DIR / build.MANIFEST).read_text())
    if manifest["nvcc_version"] != committed["nvcc_version"]:
        pytest.skip(f"nvcc {manifest['nvcc_version']} differs from the committed build's")
    assert manifest["fatbin"]["sha256"] == committed["fatbin"]["sha256"]
