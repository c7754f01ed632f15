"""Install device bundles into A/B slots, list the slots and roll back.

Layout under the bundles folder (``state_root()/bundles``)::

    a/, b/          slots: the payload, bundle.json, bundle.sig and installed.json
    active          symlink to "a" or "b": the model the runtime loads
    keys/           trusted public keys (edge/bundle/keys.py)
    .lock           held (flock) by an install or rollback
    a.partial/ ...  leftovers of an interrupted install, removed by the next one

Install: verify the whole bundle while unpacking it into ``<inactive>.partial`` (see
:mod:`edge.bundle.reader`), write ``installed.json`` last, move the old inactive slot
aside and the new one into place (renames), then switch ``active`` by creating a new
symlink and renaming it over the old one, fsyncing the folder after each rename. A power
cut at any point leaves ``active`` pointing at a complete slot: the old one before the
final rename, the new one after it. The previous model stays in the other slot for
:func:`rollback`.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import fcntl
import json
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge.bundle.format import (
    INSTALL_RECORD_NAME,
    MANIFEST_NAME,
    SIGNATURE_NAME,
    BundleError,
    BundleManifest,
    BundleSignature,
    verify_signature,
)
from edge.bundle.keys import trusted_keys
from edge.bundle.reader import read_bundle
from edge.fileio import fsync_dir, sha256_file, write_json_atomic
from edge.state import state_root

__all__ = [
    "INSTALL_STEPS",
    "SlotInfo",
    "active_model_dir",
    "active_slot",
    "bundles_dir",
    "install_bundle",
    "list_slots",
    "rollback",
]

SLOTS = ("a", "b")
ACTIVE = "active"
RECORD = INSTALL_RECORD_NAME
#: Named steps of an install, in order, passed to ``on_step`` (progress and tests).
INSTALL_STEPS = ("locked", "cleaned", "verified-first-file", "staged", "retired",
                 "slot-ready", "switched")


def bundles_dir() -> Path:
    """``state_root()/bundles`` (not created)."""
    return state_root() / "bundles"




@contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except PermissionError:
        raise BundleError(f"{root}: cannot write the device's bundle folder (permission "
                          "denied); run as the user that owns the state root "
                          "(SYNCEDGE_HOME), nothing was changed") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BundleError(f"{root}: another install or rollback is running "
                              f"(lock {root / '.lock'} is held)") from None
        yield
    finally:
        os.close(fd)


def active_slot(root: str | os.PathLike[str] | None = None) -> str | None:
    """The active slot name (``"a"``/``"b"``), or ``None`` before the first install.

    Raises:
        BundleError: ``active`` exists but is not a symlink to ``a`` or ``b``.
    """
    link = Path(root if root is not None else bundles_dir()) / ACTIVE
    try:
        value = os.readlink(link)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BundleError(f"{link}: expected a symlink to 'a' or 'b' ({exc.strerror})") from None
    if value not in SLOTS:
        raise BundleError(f"{link}: expected a symlink to 'a' or 'b', found {value!r}")
    return value


def active_model_dir(root: str | os.PathLike[str] | None = None) -> Path:
    """The folder of the active model (load it with :func:`edge.manifest.load_model_dir`).

    Raises:
        BundleError: no bundle is installed.
    """
    r = Path(root if root is not None else bundles_dir())
    slot = active_slot(r)
    if slot is None:
        raise BundleError(f"{r}: no bundle installed; run 'syncedge bundle install BUNDLE'")
    return r / slot


@dataclass(frozen=True)
class SlotInfo:
    """One slot's state.

    Attributes:
        slot: ``"a"`` or ``"b"``.
        state: ``"empty"``, ``"complete"`` or ``"incomplete"``.
        active: whether ``active`` points here.
        manifest: the slot's bundle manifest when complete.
        installed_utc: install time (ISO-8601) when complete.
        unchanged: from :func:`install_bundle`: the bundle was already the active one, so
            nothing was replaced (the other slot keeps its model for rollback).
    """

    slot: str
    state: str
    active: bool
    manifest: BundleManifest | None = None
    installed_utc: str = ""
    unchanged: bool = False


def _slot_info(root: Path, slot: str, active: str | None) -> SlotInfo:
    d = root / slot
    if not d.is_dir():
        return SlotInfo(slot, "empty", slot == active)
    try:
        manifest = BundleManifest.from_bytes((d / MANIFEST_NAME).read_bytes(),
                                             str(d / MANIFEST_NAME))
        record = json.loads((d / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return SlotInfo(slot, "incomplete", slot == active)
    return SlotInfo(slot, "complete", slot == active, manifest, str(record.get("utc", "")))


def list_slots(root: str | os.PathLike[str] | None = None) -> tuple[SlotInfo, ...]:
    """State of slots ``a`` and ``b``."""
    r = Path(root if root is not None else bundles_dir())
    active = active_slot(r)
    return tuple(_slot_info(r, s, active) for s in SLOTS)


def _verify_slot_files(d: Path, manifest: BundleManifest) -> None:
    for f in manifest.files:
        p = d / f.name
        try:
            digest = sha256_file(p)
        except FileNotFoundError:
            raise BundleError(f"{p}: missing from slot {d.name}") from None
        if digest != f.sha256:
            raise BundleError(f"{p}: sha256 does not match the slot's {MANIFEST_NAME}; the "
                              f"slot is corrupt: install a bundle again (it replaces this "
                              f"slot) instead of rolling back")


def _switch(root: Path, slot: str) -> None:
    tmp = root / ".active.tmp"
    tmp.unlink(missing_ok=True)
    os.symlink(slot, tmp)
    os.replace(tmp, root / ACTIVE)
    fsync_dir(root)


def _cleanup(root: Path) -> None:
    (root / ".active.tmp").unlink(missing_ok=True)
    for p in root.iterdir():
        if p.name.endswith((".partial", ".old")) and p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
    fsync_dir(root)


def install_bundle(path: str | os.PathLike[str], *, target: str,
                   root: str | os.PathLike[str] | None = None,
                   keys_dir: str | os.PathLike[str] | None = None,
                   on_step: Callable[[str], None] | None = None) -> SlotInfo:
    """Verify ``path`` and make it the active model (A/B, atomic switch).

    Args:
        path: the bundle archive.
        target: the device's target (:func:`edge.bundle.device_target.device_target`); a bundle
            built for another target is refused.
        root: the bundles folder (default ``state_root()/bundles``).
        keys_dir: trusted keys folder (default ``root/keys``).
        on_step: called with each name of :data:`INSTALL_STEPS` as the install passes it
            (progress reporting; tests interrupt the install here).
    Returns:
        The new active slot's :class:`SlotInfo`; when ``path`` is the bundle already
        active (the same signed manifest), nothing changes and the active slot's info comes
        back with ``unchanged`` set (a second install would otherwise overwrite the other
        slot, the rollback model, with a copy of the active one).
    Raises:
        BundleError: any refusal (see :mod:`edge.bundle.reader`); the active slot is then
            untouched and the partial slot removed.
    """
    r = Path(root if root is not None else bundles_dir())
    step = on_step or (lambda name: None)
    trusted = trusted_keys(keys_dir if keys_dir is not None else r / "keys")
    with _locked(r):
        step("locked")
        _cleanup(r)
        step("cleaned")
        active = active_slot(r)
        slot = "b" if active == "a" else "a"
        staging = r / f"{slot}.partial"
        staging.mkdir()
        first = [True]

        def on_file(name: str) -> None:
            if first[0]:
                first[0] = False
                step("verified-first-file")

        try:
            verified = read_bundle(path, trusted, staging, target=target, on_file=on_file)
            utc = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
            write_json_atomic(staging / RECORD, {"utc": utc, "source": Path(path).name,
                                                 "key_id": verified.key_id})
            fsync_dir(staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        if active is not None and _same_manifest(r / active, staging):
            # installing the active bundle again would replace the other slot, the only
            # model left to roll back to, with a second copy of this one
            shutil.rmtree(staging, ignore_errors=True)
            return dataclasses.replace(_slot_info(r, active, active), unchanged=True)
        step("staged")
        final = r / slot
        if final.exists():
            os.rename(final, r / f"{slot}.old")
            fsync_dir(r)
        step("retired")
        os.rename(staging, final)
        fsync_dir(r)
        step("slot-ready")
        _switch(r, slot)
        step("switched")
        shutil.rmtree(r / f"{slot}.old", ignore_errors=True)
        return _slot_info(r, slot, slot)


def _same_manifest(a: Path, b: Path) -> bool:
    """Whether the slot folders ``a`` and ``b`` hold the same signed bundle manifest (so the
    same payload, by its checksums)."""
    try:
        return (a / MANIFEST_NAME).read_bytes() == (b / MANIFEST_NAME).read_bytes()
    except OSError:
        return False


def _verify_slot_trust(d: Path, manifest: BundleManifest, trusted: Mapping[str, Any],
                       target: str | None) -> None:
    """The slot's signature against the keys trusted now, and its target against the device's,
    so a retired key or another target's bundle cannot come back through a rollback."""
    where = str(d / SIGNATURE_NAME)
    try:
        signature = BundleSignature.from_bytes((d / SIGNATURE_NAME).read_bytes(), where)
    except FileNotFoundError:
        raise BundleError(f"{where}: missing; the slot is incomplete") from None
    if signature.key_id not in trusted:  # retired since (or never added on this device)
        raise BundleError(f"{where}: slot {d.name} is signed by key {signature.key_id}, which "
                          f"this device no longer trusts (trusted: "
                          f"{', '.join(sorted(trusted)) or 'none'}); refusing to roll back to "
                          f"it: a retired key's model does not come back (install a bundle "
                          f"signed with a trusted key)")
    try:
        verify_signature((d / MANIFEST_NAME).read_bytes(), signature, trusted, where)
    except BundleError as exc:
        raise BundleError(f"{exc}; refusing to roll back to slot {d.name}") from None
    if target is not None and manifest.target != target:
        raise BundleError(f"{d / MANIFEST_NAME}: slot {d.name} holds a bundle built for target "
                          f"{manifest.target!r}, but this device is {target!r}; refusing to "
                          f"roll back to it (override the device target with "
                          f"--target/SYNCEDGE_TARGET)")


def rollback(root: str | os.PathLike[str] | None = None, *, target: str | None = None,
             keys_dir: str | os.PathLike[str] | None = None) -> SlotInfo:
    """Make the other slot (the previous model) active again, after re-verifying it as an
    install would: every file's sha256, the signature with the keys trusted now, the target.

    Args:
        root: the bundles folder (default ``state_root()/bundles``).
        target: the device's target; a slot built for another one is refused (None: not
            checked).
        keys_dir: trusted keys folder (default ``root/keys``).
    Returns:
        The new active slot's :class:`SlotInfo`.
    Raises:
        BundleError: nothing installed; the other slot is empty, incomplete or corrupt; its
            signing key is no longer trusted; it was built for another target. The active
            slot is then unchanged.
    """
    r = Path(root if root is not None else bundles_dir())
    if not r.is_dir():  # a mistyped --root: nothing is created for it
        raise BundleError(f"{r}: no bundle installed (no such folder); nothing to roll back")
    trusted = trusted_keys(keys_dir if keys_dir is not None else r / "keys")
    with _locked(r):
        active = active_slot(r)
        if active is None:
            raise BundleError(f"{r}: no bundle installed; nothing to roll back")
        other = "b" if active == "a" else "a"
        info = _slot_info(r, other, active)
        if info.state != "complete" or info.manifest is None:
            raise BundleError(f"{r / other}: slot is {info.state}; there is no previous model "
                              f"to roll back to")
        _verify_slot_trust(r / other, info.manifest, trusted, target)
        _verify_slot_files(r / other, info.manifest)
        _switch(r, other)
        return _slot_info(r, other, other)
