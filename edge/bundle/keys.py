"""Trusted bundle-signing public keys on the device.

The keys live in ``state_root()/bundles/keys/`` as ``<key_id>.pub.pem`` (Ed25519,
SubjectPublicKeyInfo PEM). Rotation: add the new key, install a bundle signed with it,
then remove the old key. Removing the last trusted key is refused unless forced, since the
device could then accept no update at all.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edge.bundle.format import BundleError, key_id, load_public_key
from edge.fileio import atomic_write
from edge.state import state_root

__all__ = ["default_keys_dir", "trusted_keys", "add_key", "remove_key"]

_SUFFIX = ".pub.pem"


def default_keys_dir() -> Path:
    """``state_root()/bundles/keys`` (not created)."""
    return state_root() / "bundles" / "keys"


def trusted_keys(keys_dir: str | os.PathLike[str] | None = None) -> Mapping[str, Any]:
    """Load every trusted key.

    Returns:
        key id -> Ed25519 public key (empty when the folder is missing).
    Raises:
        BundleError: a key file is unreadable, not Ed25519, or its name does not match
            its key id (naming the file).
    """
    d = Path(keys_dir) if keys_dir is not None else default_keys_dir()
    out: dict[str, Any] = {}
    if not d.is_dir():
        return out
    for p in sorted(d.glob(f"*{_SUFFIX}")):
        key = load_public_key(p)
        kid = key_id(key)
        if p.name != kid + _SUFFIX:
            raise BundleError(f"{p}: file name does not match the key id {kid}; expected "
                              f"{kid}{_SUFFIX} (add keys with 'syncedge bundle keys add')")
        out[kid] = key
    return out


def add_key(public_key_pem: str | os.PathLike[str],
            keys_dir: str | os.PathLike[str] | None = None) -> str:
    """Trust a public key: copy it to ``<key_id>.pub.pem`` in the keys folder (atomically).

    Returns:
        The key id.
    Raises:
        BundleError: the file is not an Ed25519 PEM public key.
    """
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    key = load_public_key(public_key_pem)
    kid = key_id(key)
    d = Path(keys_dir) if keys_dir is not None else default_keys_dir()
    pem = key.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    atomic_write(d / f"{kid}{_SUFFIX}", lambda f: f.write(pem), mode=0o644)
    return kid


def remove_key(kid: str, keys_dir: str | os.PathLike[str] | None = None,
               force: bool = False) -> Path:
    """Stop trusting key ``kid``.

    Returns:
        The removed file.
    Raises:
        BundleError: the key is not trusted, or it is the last trusted key and ``force``
            is false.
    """
    d = Path(keys_dir) if keys_dir is not None else default_keys_dir()
    keys = trusted_keys(d)
    if kid not in keys:
        raise BundleError(f"{d}: key {kid!r} is not trusted (trusted: {sorted(keys) or 'none'})")
    if len(keys) == 1 and not force:
        raise BundleError(f"{d}: key {kid} is the last trusted key; removing it would refuse "
                          f"every future bundle. Add the new key first (rotation), or pass "
                          f"--force")
    p = d / f"{kid}{_SUFFIX}"
    p.unlink()
    return p
