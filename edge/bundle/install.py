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
    BundleBusyError,
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
    "activate",
    "active_model_dir",
    "active_slot",
    "bundles_dir",
    "check_slot",
    "check_slot_identity",
    "install_bundle",
    "leftovers",
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
            raise BundleBusyError(f"{root}: another install, rollback or activate is running "
                                  f"(lock {root / '.lock'} is held); try again when it "
                                  f"has finished") from None
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
        problem: from :func:`list_slots` with ``verify``: why a complete slot cannot run
            (a file missing or altered, a model schema this syncedge does not read), ``""``
            when its files match its signed manifest.
        repaired: from :func:`install_bundle`: the damage found in the slot that was
            active before (:func:`check_slot`), which the install replaced; ``""`` when
            it was sound.
    """

    slot: str
    state: str
    active: bool
    manifest: BundleManifest | None = None
    installed_utc: str = ""
    unchanged: bool = False
    problem: str = ""
    repaired: str = ""


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


def list_slots(root: str | os.PathLike[str] | None = None, *, verify: bool = False
               ) -> tuple[SlotInfo, ...]:
    """State of slots ``a`` and ``b``; with ``verify``, each complete slot is also checked
    as the runtime needs it (:func:`check_slot` without trust or target: every file's
    sha256 and ``model.json``), the result in :attr:`SlotInfo.problem` (reads every file:
    about a second for a few hundred MB)."""
    r = Path(root if root is not None else bundles_dir())
    active = active_slot(r)
    infos = [_slot_info(r, s, active) for s in SLOTS]
    return tuple(dataclasses.replace(i, problem=_damage(r, i.slot)) if verify and i.manifest
                 else i for i in infos)


def leftovers(root: str | os.PathLike[str] | None = None) -> tuple[Path, ...]:
    """Folders an interrupted install left (``a.partial``, ``b.old``, ...); the next
    install, rollback or activate removes them."""
    r = Path(root if root is not None else bundles_dir())
    if not r.is_dir():
        return ()
    return tuple(sorted(p for p in r.iterdir() if p.name.endswith((".partial", ".old"))
                        and p.is_dir() and not p.is_symlink()))


def _verify_slot_files(d: Path, manifest: BundleManifest) -> None:
    for f in manifest.files:
        p = d / f.name
        try:
            digest = sha256_file(p)
        except (FileNotFoundError, IsADirectoryError):
            raise BundleError(f"{p}: missing from slot {d.name}; the slot is damaged: install "
                              f"its bundle again (the install replaces a damaged slot)") from None
        if digest != f.sha256:
            raise BundleError(f"{p}: sha256 does not match the slot's {MANIFEST_NAME}; the "
                              f"slot is damaged: install its bundle again (the install "
                              f"replaces a damaged slot)")


def check_slot_identity(model_dir: str | os.PathLike[str]) -> None:
    """When ``model_dir`` is an installed bundle slot (``bundle.json`` beside
    ``model.json``, e.g. ``STATE_ROOT/bundles/active``): its ``model.json`` must still be
    the one the signed manifest names (one hash of a small file; the graphs' own sha256
    are checked against ``model.json`` when the model loads). Nothing for another folder.

    Raises:
        BundleError: ``model.json`` changed after the bundle was signed, naming the slot
            and what to do.
    """
    d = Path(model_dir)
    if not (d / MANIFEST_NAME).is_file():
        return
    manifest = BundleManifest.from_bytes((d / MANIFEST_NAME).read_bytes(),
                                         str(d / MANIFEST_NAME))
    try:
        digest = sha256_file(d / "model.json")
    except FileNotFoundError:
        raise BundleError(f"{d / 'model.json'}: missing from the installed bundle slot; the "
                          f"slot is damaged: install its bundle again") from None
    if digest != manifest.model_sha256:
        raise BundleError(f"{d / 'model.json'}: sha256 {digest[:12]}... is not the model the "
                          f"slot's signed {MANIFEST_NAME} names ({manifest.model_sha256[:12]}"
                          f"...): the slot was changed after it was installed; install its "
                          f"bundle again ('syncedge bundle list' shows each slot's state)")


def check_slot(d: str | os.PathLike[str], manifest: BundleManifest, *,
               trusted: Mapping[str, Any] | None = None, target: str | None = None) -> None:
    """Check an installed slot as an install checks a bundle: every payload file's sha256
    against the slot's signed manifest, and ``model.json`` as the runtime reads it (a model
    schema this syncedge does not read is refused here, not when ``simulate`` loads it);
    with ``trusted``, the signature against the keys trusted now and (with ``target``)
    the target.

    Args:
        d: the slot folder (``ROOT/a`` or ``ROOT/b``).
        manifest: its parsed ``bundle.json``.
        trusted: key id -> public key (None: neither signature nor target is checked).
        target: the device's target (None: not checked).
    Raises:
        BundleError: naming the slot, the file and what to do.
    """
    from edge.bundle.reader import check_model_json

    d = Path(d)
    if trusted is not None:
        _verify_slot_trust(d, manifest, trusted, target)
    _verify_slot_files(d, manifest)
    check_model_json(d, manifest, f"slot {d.name} ({d})")


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
        damage = _damage(r, active)
        other = "b" if active == "a" else "a"
        if damage and not _damage(r, other, trusted, target):
            # the active slot cannot run (a file lost or altered): the install replaces it,
            # not the other slot's sound previous model. That model serves meanwhile (a
            # complete slot, so a power cut still leaves a runnable device); with nothing
            # sound there, the install goes into the other slot as usual
            _switch(r, other)
            active = other
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
        if active is not None and not damage and _same_manifest(r / active, staging):
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
        return dataclasses.replace(_slot_info(r, slot, slot), repaired=damage)


def _damage(root: Path, slot: str | None, trusted: Mapping[str, Any] | None = None,
            target: str | None = None) -> str:
    """Why the installed ``slot`` cannot run or be switched to (:func:`check_slot`; without
    ``trusted``, files and ``model.json`` only: a slot whose key was retired since still
    runs), ``""`` when it can or ``slot`` is None."""
    if slot is None:
        return ""
    info = _slot_info(root, slot, slot)
    if info.manifest is None:
        return f"slot {slot} is {info.state}"
    try:
        check_slot(root / slot, info.manifest, trusted=trusted, target=target)
    except BundleError as exc:
        return str(exc)
    return ""


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
    so a retired key or another target's bundle cannot come back through a rollback or an
    activate."""
    where = str(d / SIGNATURE_NAME)
    try:
        signature = BundleSignature.from_bytes((d / SIGNATURE_NAME).read_bytes(), where)
    except FileNotFoundError:
        raise BundleError(f"{where}: missing; the slot is incomplete") from None
    if signature.key_id not in trusted:  # retired since (or never added on this device)
        raise BundleError(f"{where}: slot {d.name} is signed by key {signature.key_id}, which "
                          f"this device no longer trusts (trusted: "
                          f"{', '.join(sorted(trusted)) or 'none'}): a retired key's model "
                          f"does not come back (install a bundle signed with a trusted key)")
    verify_signature((d / MANIFEST_NAME).read_bytes(), signature, trusted, where)
    if target is not None and manifest.target != target:
        raise BundleError(f"{d / MANIFEST_NAME}: slot {d.name} holds a bundle built for target "
                          f"{manifest.target!r}, but this device is {target!r} (override the "
                          f"device target with --target/SYNCEDGE_TARGET)")


def rollback(root: str | os.PathLike[str] | None = None, *, target: str | None = None,
             keys_dir: str | os.PathLike[str] | None = None) -> SlotInfo:
    """Make the other slot (the previous model) active again, after re-verifying it as an
    install would: every file's sha256, ``model.json`` as the runtime reads it (its
    schema), the signature with the keys trusted now, the target.

    Args:
        root: the bundles folder (default ``state_root()/bundles``).
        target: the device's target; a slot built for another one is refused (None: not
            checked).
        keys_dir: trusted keys folder (default ``root/keys``).
    Returns:
        The new active slot's :class:`SlotInfo`.
    Raises:
        BundleError: nothing active (naming :func:`activate` when a slot is complete); the
            other slot is empty, incomplete or damaged, holds a model schema this syncedge
            does not read, its signing key is no longer trusted, or it was built for
            another target. The active slot is then unchanged.
    """
    r = Path(root if root is not None else bundles_dir())
    if not r.is_dir():  # a mistyped --root: nothing is created for it
        raise BundleError(f"{r}: no bundle installed (no such folder); nothing to roll back")
    trusted = trusted_keys(keys_dir if keys_dir is not None else r / "keys")
    with _locked(r):
        active = active_slot(r)
        if active is None:
            complete = [i.slot for i in list_slots(r) if i.state == "complete"]
            raise BundleError(
                f"{r}: no slot is active, so there is nothing to roll back from"
                + (f"; slot{'s' if len(complete) > 1 else ''} {' and '.join(complete)} "
                   f"{'are' if len(complete) > 1 else 'is'} installed: make one active with "
                   f"'syncedge bundle activate SLOT' (checked as an install would be)"
                   if complete else "; install a bundle with 'syncedge bundle install BUNDLE'"))
        return _activate_locked(r, "b" if active == "a" else "a", trusted, target,
                                "roll back to")


def activate(slot: str, root: str | os.PathLike[str] | None = None, *,
             target: str | None = None, keys_dir: str | os.PathLike[str] | None = None
             ) -> SlotInfo:
    """Make installed ``slot`` active, after checking it as an install would
    (:func:`check_slot` with the keys trusted now and the target): a device whose
    ``active`` link was lost, or a factory image that filled both slots, chooses its slot
    this way. :func:`rollback` is ``activate`` of the other slot.

    Args:
        slot: ``"a"`` or ``"b"``.
        root: the bundles folder (default ``state_root()/bundles``).
        target: the device's target (None: not checked).
        keys_dir: trusted keys folder (default ``root/keys``).
    Returns:
        The slot's :class:`SlotInfo` (active).
    Raises:
        BundleError: another slot name; the slot is empty, incomplete or fails
            :func:`check_slot`; the active slot is then unchanged.
    """
    if slot not in SLOTS:
        raise BundleError(f"slot {slot!r}: expected one of {', '.join(SLOTS)}")
    r = Path(root if root is not None else bundles_dir())
    if not r.is_dir():
        raise BundleError(f"{r}: no bundle installed (no such folder)")
    trusted = trusted_keys(keys_dir if keys_dir is not None else r / "keys")
    with _locked(r):
        return _activate_locked(r, slot, trusted, target, "activate")


def _activate_locked(r: Path, slot: str, trusted: Mapping[str, Any], target: str | None,
                     verb: str) -> SlotInfo:
    """:func:`activate` with the lock held (``verb`` names the action in messages)."""
    _cleanup(r)
    active = active_slot(r)
    info = _slot_info(r, slot, active)
    if info.state != "complete" or info.manifest is None:
        raise BundleError(f"{r / slot}: slot is {info.state}; there is no "
                          f"{'previous ' if verb == 'roll back to' else ''}model to {verb}"
                          + ("" if info.state == "empty" else
                             ": install a bundle (it replaces this slot)"))
    try:
        check_slot(r / slot, info.manifest, trusted=trusted, target=target)
    except BundleError as exc:
        raise BundleError(f"{exc}; refusing to {verb} slot {slot}") from None
    if active != slot:
        _switch(r, slot)
    return _slot_info(r, slot, slot)
