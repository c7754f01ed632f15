"""Shared builders for the bundle tests: keys, tiny-model bundles, archive rewriting."""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tiny_model import make_tiny_model

from edge.bundle.keys import add_key
from export.bundle.build import build_bundle, generate_keypair

Member = tuple[tarfile.TarInfo, bytes]


@dataclass
class Env:
    """A workspace: a signing key trusted by a device root, and a tiny model folder."""

    tmp: Path
    root: Path
    key: Path
    pub: Path
    key_id: str

    def model(self, seed: int = 0, name: str = "tiny") -> Path:
        return make_tiny_model(self.tmp / f"model-{name}-{seed}", seed=seed, name=name)

    def bundle(self, seed: int = 0, target: str = "cpu", key: Path | None = None) -> Path:
        out = self.tmp / f"b-{seed}-{target}.bundle"
        if not out.exists() or key is not None:
            build_bundle(self.model(seed), out, target=target, private_key_path=key or self.key)
        return out


def make_env(tmp: Path) -> Env:
    priv, pub, kid = generate_keypair(tmp / "keys", "oem")
    root = tmp / "device" / "bundles"
    add_key(pub, root / "keys")
    return Env(tmp, root, priv, pub, kid)


def read_members(path: Path) -> list[Member]:
    out = []
    with tarfile.open(path, "r:gz") as tar:
        for m in tar.getmembers():
            f = tar.extractfile(m) if m.isreg() else None
            out.append((m, f.read() if f else b""))
    return out


def write_members(path: Path, members: list[Member]) -> Path:
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            if info.isreg():
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return path


def rewrite(src: Path, dst: Path, mutate: Callable[[list[Member]], list[Member]]) -> Path:
    return write_members(dst, mutate(read_members(src)))


def tree_digest(d: Path) -> dict[str, str]:
    """name -> sha256 for every file under ``d`` (relative paths), plus symlink targets."""
    out = {}
    for p in sorted(d.rglob("*")):
        rel = str(p.relative_to(d))
        if p.is_symlink():
            out[rel] = "-> " + str(p.readlink())
        elif p.is_file() and p.name != ".lock":
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out
