"""Build the kernels' fatbin with nvcc and write its manifest: ``python -m kernels.build``.

The fatbin holds SASS for every target (sm_87 Jetson Orin, sm_90 H100/H200, sm_110
Jetson Thor) plus compute_110 PTX that newer drivers JIT-compile. ``fatbin.json``
records the sha256 of the fatbin and of its sources, the nvcc version and the exact
command (run in the ``kernels`` directory), so a test can tell a stale fatbin from a
fresh one. ``--check`` verifies the manifest without nvcc.

Also used by the launcher to compile a cubin for one architecture on a device whose
driver cannot load the prebuilt fatbin (JetPack 6: CUDA 12.6 driver).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from kernels.errors import KernelBuildError

__all__ = [
    "FATBIN",
    "KERNEL_DIR",
    "MANIFEST",
    "SOURCES",
    "TARGETS",
    "build_fatbin",
    "compile_cubin",
    "fatbin_command",
    "fatbin_entries",
    "main",
    "nvcc_version",
    "verify_manifest",
]

KERNEL_DIR = Path(__file__).resolve().parent
SOURCE = "rollout_kernels.cu"
SOURCES = (SOURCE, "rollout_kernels.cuh")
FATBIN = "rollout_kernels.fatbin"
MANIFEST = "fatbin.json"
SCHEMA_VERSION = 1
# SASS per target plus PTX for the newest, for forward compatibility.
SASS_ARCHS = ("87", "90", "110")
PTX_ARCH = "110"
TARGETS = tuple(f"sm_{a}" for a in SASS_ARCHS) + (f"compute_{PTX_ARCH}",)
# --fmad=false: no contraction anywhere (the bodies already use __fadd_rn/__fmul_rn).
NVCC_FLAGS = ("-O3", "--fmad=false", "-std=c++17")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _find_nvcc(nvcc: str) -> str:
    found = shutil.which(nvcc)
    if found is None:
        raise KernelBuildError(
            f"nvcc: expected the CUDA compiler '{nvcc}' on PATH, found none "
            "(install the CUDA toolkit or pass --nvcc PATH)"
        )
    return found


def nvcc_version(nvcc: str = "nvcc") -> str:
    """Version of ``nvcc`` as ``"13.0.88"``.

    Raises:
        KernelBuildError: nvcc is missing or its output has no version.
    """
    out = subprocess.run(
        [_find_nvcc(nvcc), "--version"], capture_output=True, text=True, check=False
    ).stdout
    match = re.search(r"\bV(\d+\.\d+\.\d+)", out)
    if match is None:
        raise KernelBuildError(
            f"nvcc --version: expected 'V<major>.<minor>.<patch>', found {out!r}"
        )
    return match.group(1)


def fatbin_command(nvcc: str = "nvcc", output: str = FATBIN) -> list[str]:
    """The nvcc command (run in :data:`KERNEL_DIR`) that builds the fatbin."""
    cmd = [nvcc, "-fatbin", *NVCC_FLAGS]
    for arch in SASS_ARCHS:
        code = f"[sm_{arch},compute_{arch}]" if arch == PTX_ARCH else f"sm_{arch}"
        cmd += ["-gencode", f"arch=compute_{arch},code={code}"]
    return cmd + ["-o", output, SOURCE]


def _run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise KernelBuildError(
            f"'{' '.join(cmd)}' exited with {proc.returncode}: {proc.stderr.strip()}"
        )


def compile_cubin(arch: str, out_dir: str | os.PathLike[str], nvcc: str = "nvcc") -> Path:
    """Compile the kernels to a cubin for one architecture (``"87"``, ``"sm_90"``, ...).

    Args:
        arch: compute capability digits, with or without the ``sm_`` prefix.
        out_dir: directory for ``rollout_kernels.sm_<arch>.cubin`` (created).
        nvcc: the nvcc executable.

    Returns:
        Path of the cubin.

    Raises:
        KernelBuildError: nvcc missing, unknown architecture, or compilation failed.
    """
    digits = arch.removeprefix("sm_")
    if not digits.isdigit():
        raise KernelBuildError(f"arch: expected digits like '87' or 'sm_87', found {arch!r}")
    out = Path(out_dir) / f"rollout_kernels.sm_{digits}.cubin"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".{os.getpid()}.tmp")
    cmd = [_find_nvcc(nvcc), "-cubin", *NVCC_FLAGS, f"-arch=sm_{digits}", "-o", str(tmp), SOURCE]
    _run(cmd, KERNEL_DIR)
    os.replace(tmp, out)
    return out


def fatbin_entries(data: bytes) -> list[str]:
    """Targets held by a fatbin image: ``"sm_87"`` for SASS, ``"compute_110"`` for PTX.

    Reads the container header as nvcc 12/13 write it (magic 0xBA55ED50; per entry a
    16-bit kind, 1 = PTX and 2 = ELF, the header and payload sizes, and the
    architecture at byte 28). Used to verify builds only; the driver does the loading.

    Raises:
        KernelBuildError: not a fatbin image.
    """
    if len(data) < 16 or struct.unpack_from("<I", data, 0)[0] != 0xBA55ED50:
        raise KernelBuildError("fatbin: expected magic 0xBA55ED50, found another file type")
    _, _, header, size = struct.unpack_from("<IHHQ", data, 0)
    entries, off, end = [], header, header + size
    while off + 32 <= min(end, len(data)):
        kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, off)
        arch = struct.unpack_from("<I", data, off + 28)[0]
        entries.append(f"{'compute' if kind == 1 else 'sm'}_{arch}")
        off += entry_header + payload
    return entries


def build_fatbin(out_dir: str | os.PathLike[str] | None = None, nvcc: str = "nvcc") -> dict:
    """Build the fatbin and write it and its manifest into ``out_dir`` (default: kernels/).

    Returns:
        The manifest written.

    Raises:
        KernelBuildError: nvcc missing or failed, or the result lacks a target.
    """
    dest = Path(out_dir) if out_dir is not None else KERNEL_DIR
    dest.mkdir(parents=True, exist_ok=True)
    version = nvcc_version(nvcc)
    tmp = dest / f"{FATBIN}.{os.getpid()}.tmp"
    _run(fatbin_command(_find_nvcc(nvcc), str(tmp.resolve())), KERNEL_DIR)
    found = fatbin_entries(tmp.read_bytes())
    missing = [t for t in TARGETS if t not in found]
    if missing:
        tmp.unlink()
        raise KernelBuildError(f"fatbin: expected targets {list(TARGETS)}, found {found}")
    os.replace(tmp, dest / FATBIN)
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "fatbin": {"file": FATBIN, "sha256": _sha256(dest / FATBIN)},
        "sources": {name: _sha256(KERNEL_DIR / name) for name in SOURCES},
        "targets": list(TARGETS),
        "nvcc_version": version,
        "command": " ".join(fatbin_command()),
    }
    tmp_manifest = dest / f"{MANIFEST}.{os.getpid()}.tmp"
    tmp_manifest.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp_manifest, dest / MANIFEST)
    return manifest


def verify_manifest(kernel_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Problems with the committed fatbin and manifest; an empty list means they match.

    Checks the schema version, the sha256 of the fatbin and of every source, and that
    the fatbin holds every target.
    """
    root = Path(kernel_dir) if kernel_dir is not None else KERNEL_DIR
    path = root / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [f"{path}: expected a readable JSON manifest, found {exc}"]
    problems = []
    if manifest.get("schema_version") != SCHEMA_VERSION:
        problems.append(
            f"{path}: schema_version: expected {SCHEMA_VERSION}, "
            f"found {manifest.get('schema_version')!r}"
        )
    fatbin = root / FATBIN
    want = manifest.get("fatbin", {}).get("sha256")
    if not fatbin.exists():
        problems.append(f"{fatbin}: missing (run: python -m kernels.build)")
    elif _sha256(fatbin) != want:
        problems.append(f"{fatbin}: sha256 {_sha256(fatbin)} does not match the manifest's {want}")
    else:
        found = fatbin_entries(fatbin.read_bytes())
        for target in TARGETS:
            if target not in found:
                problems.append(f"{fatbin}: expected target {target}, found {found}")
    for name in SOURCES:
        want = manifest.get("sources", {}).get(name)
        src = KERNEL_DIR / name
        got = _sha256(src) if src.exists() else None
        if got != want:
            problems.append(
                f"{src}: sha256 {got} does not match the manifest's {want} "
                "(the fatbin is stale: run python -m kernels.build)"
            )
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: build the fatbin (default) or ``--check`` the committed one."""
    parser = argparse.ArgumentParser(prog="python -m kernels.build", description=__doc__)
    parser.add_argument("--nvcc", default="nvcc", help="nvcc executable (default: nvcc)")
    parser.add_argument("--out-dir", default=None, help="output directory (default: kernels/)")
    parser.add_argument("--check", action="store_true", help="verify the manifest, build nothing")
    args = parser.parse_args(argv)
    if args.check:
        problems = verify_manifest(args.out_dir)
        for line in problems:
            print(line, file=sys.stderr)
        print("fatbin manifest: " + ("mismatch" if problems else "ok"))
        return 1 if problems else 0
    try:
        manifest = build_fatbin(args.out_dir, args.nvcc)
    except KernelBuildError as exc:
        print(f"kernels.build: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(manifest, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
