"""Read and verify a device bundle archive, member by member, before trusting any of it.

Order of checks (each failure raises :class:`edge.bundle.format.BundleError` naming the
archive, the member and the reason; nothing is trusted before its check):

1. the archive opens as gzip-compressed tar; its first member is ``bundle.json`` and its
   second ``bundle.sig`` (regular files, manifest at most 1 MiB);
2. the signature verifies against a trusted key; then ``bundle.json`` is parsed (schema
   version, known target) and, when asked, its target is compared with the device's;
3. every further member is a regular file (no symlink, hardlink, device, FIFO or folder)
   with a plain name (no path traversal), listed in the manifest, seen once, of the listed
   size, and its sha256 matches; its bytes are streamed to the destination folder;
4. every listed file was present; ``model.json`` parses (a schema version newer than this
   syncedge reads is refused), names the same model as the manifest, and every graph it
   lists is in the bundle with the sha256 ``model.json`` records.

A truncated or corrupt archive is reported as such, naming the member being read.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from edge.bundle.format import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    SIGNATURE_NAME,
    BundleError,
    BundleManifest,
    BundleSignature,
    check_file_name,
    verify_signature,
)
from edge.manifest import ManifestError, load_any_model_dir

__all__ = ["VerifiedBundle", "check_model_json", "read_bundle"]

_CHUNK = 1 << 20
_ARCHIVE_ERRORS = (tarfile.TarError, EOFError, zlib.error)


@dataclass(frozen=True)
class VerifiedBundle:
    """A bundle whose signature, files and model manifest were all checked.

    Attributes:
        manifest: the parsed ``bundle.json``.
        manifest_bytes: its exact bytes (what the signature covers).
        signature_bytes: the bytes of ``bundle.sig``.
        key_id: the trusted key that verified it.
    """

    manifest: BundleManifest
    manifest_bytes: bytes
    signature_bytes: bytes
    key_id: str


def _kind(m: tarfile.TarInfo) -> str:
    if m.issym():
        return f"a symlink (to {m.linkname!r})"
    if m.islnk():
        return f"a hardlink (to {m.linkname!r})"
    if m.isdir():
        return "a folder"
    if m.ischr() or m.isblk():
        return "a device node"
    if m.isfifo():
        return "a FIFO"
    return f"an unsupported member type ({m.type!r})"


def _members(tar: tarfile.TarFile, where: str) -> Iterator[tarfile.TarInfo]:
    last = "the archive header"
    while True:
        try:
            m = tar.next()
        except _ARCHIVE_ERRORS + (OSError,) as exc:
            raise BundleError(f"{where}: truncated or corrupt archive after {last} "
                              f"({exc or type(exc).__name__})") from None
        if m is None:
            return
        last = f"member {m.name!r}"
        yield m


def _check_member(m: tarfile.TarInfo, where: str) -> None:
    name = m.name
    if name.startswith("/") or ".." in Path(name).parts or "/" in name or "\\" in name:
        raise BundleError(f"{where}: member {name!r} has a path (absolute, folder or '..'); "
                          f"refused as path traversal")
    if not m.isreg():
        raise BundleError(f"{where}: member {name!r} is {_kind(m)}; only regular files are "
                          f"allowed in a bundle")


def _stream(tar: tarfile.TarFile, m: tarfile.TarInfo, where: str,
            *sinks: Callable[[bytes], object]) -> str:
    """Feed the member's bytes to every sink (return values ignored); return their sha256."""
    h = hashlib.sha256()
    f = tar.extractfile(m)
    if f is None:  # pragma: no cover - regular files always have data
        raise BundleError(f"{where}: member {m.name!r} has no data")
    got = 0
    while True:
        try:
            block = f.read(_CHUNK)
        except _ARCHIVE_ERRORS + (OSError,) as exc:
            raise BundleError(f"{where}: truncated or corrupt archive while reading member "
                              f"{m.name!r} ({exc or type(exc).__name__})") from None
        if not block:
            break
        got += len(block)
        h.update(block)
        for sink in sinks:  # a write error (a full disk) is the destination's, as raised
            sink(block)
    if got != m.size:
        raise BundleError(f"{where}: truncated archive: member {m.name!r} has {got} of "
                          f"{m.size} bytes")
    return h.hexdigest()


def _read_small(tar: tarfile.TarFile, m: tarfile.TarInfo | None, expected: str,
                where: str) -> bytes:
    if m is None:
        raise BundleError(f"{where}: missing {expected} (empty or truncated archive)")
    _check_member(m, where)
    if m.name != expected:
        raise BundleError(f"{where}: expected member {expected!r} here, found {m.name!r}; "
                          f"not a syncedge bundle or the members were reordered")
    if m.size > MAX_MANIFEST_BYTES:
        raise BundleError(f"{where}: member {expected!r} is {m.size} bytes, more than "
                          f"{MAX_MANIFEST_BYTES}")
    parts: list[bytes] = []
    _stream(tar, m, where, parts.append)
    return b"".join(parts)


def _open_out(dest: Path | None,
              name: str) -> tuple[IO[bytes] | None, Callable[[bytes], object]]:
    if dest is None:
        return None, lambda b: None
    fd = os.open(dest / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    f = os.fdopen(fd, "wb")
    return f, f.write


def read_bundle(path: str | os.PathLike[str], trusted: Mapping[str, Any],
                dest: str | os.PathLike[str] | None = None, *,
                target: str | None = None,
                on_file: Callable[[str], None] | None = None,
                keys_given: bool = False) -> VerifiedBundle:
    """Verify a bundle and (with ``dest``) unpack its payload into an empty folder.

    Args:
        path: the bundle archive.
        trusted: key id -> Ed25519 public key (:func:`edge.bundle.keys.trusted_keys`).
        dest: an existing empty folder receiving the payload files and ``bundle.json`` /
            ``bundle.sig`` (each fsynced); ``None`` only verifies the archive and digests
            (``model.json`` is then checked from memory, not its graphs' own digests).
        target: when given, the bundle's target must equal it.
        on_file: called with each payload file name after it is written (used by tests to
            interrupt an install midway).
        keys_given: ``trusted`` came from the command line (``--pubkey``), not the device
            (messages only).
    Returns:
        The :class:`VerifiedBundle`.
    Raises:
        BundleError: naming the archive, member and reason (see the module docstring).
            A partly written ``dest`` is left for the caller to remove.
    """
    where = str(path)
    dest_p = Path(dest) if dest is not None else None
    if Path(path).is_dir():
        raise BundleError(f"{where}: a folder; expected a bundle file (from 'syncedge bundle "
                          "build')")
    try:
        tar = tarfile.open(path, mode="r:gz")
    except FileNotFoundError:
        raise BundleError(f"{where}: bundle file not found") from None
    except _ARCHIVE_ERRORS + (OSError,) as exc:
        raise BundleError(f"{where}: not a gzip-compressed tar archive or truncated "
                          f"({exc or type(exc).__name__})") from None
    with tar:
        members = _members(tar, where)
        manifest_bytes = _read_small(tar, next(members, None), MANIFEST_NAME, where)
        sig_bytes = _read_small(tar, next(members, None), SIGNATURE_NAME, where)
        sig = BundleSignature.from_bytes(sig_bytes, f"{where}:{SIGNATURE_NAME}")
        kid = verify_signature(manifest_bytes, sig, trusted, where, keys_given=keys_given)
        manifest = BundleManifest.from_bytes(manifest_bytes, f"{where}:{MANIFEST_NAME}")
        if manifest.key_id != kid:
            raise BundleError(f"{where}:{MANIFEST_NAME}.key_id: {manifest.key_id} differs from "
                              f"the signing key {kid}")
        if target is not None and manifest.target != target:
            raise BundleError(f"{where}: built for target {manifest.target!r}, not "
                              f"{target!r} (the target checked: this device's, unless "
                              f"--target or SYNCEDGE_TARGET names another); use the bundle "
                              f"built for {target!r}")
        model_json = b""
        seen: set[str] = set()
        for m in members:
            _check_member(m, where)
            check_file_name(m.name, f"{where}: member")
            entry = manifest.file(m.name)
            if entry is None:
                raise BundleError(f"{where}: member {m.name!r} is not listed in {MANIFEST_NAME}")
            if m.name in seen:
                raise BundleError(f"{where}: member {m.name!r} appears twice")
            seen.add(m.name)
            if m.size != entry.size:
                raise BundleError(f"{where}: member {m.name!r} is {m.size} bytes, "
                                  f"{MANIFEST_NAME} says {entry.size}")
            out, sink = _open_out(dest_p, m.name)
            keep: list[bytes] = []
            sinks = (sink, keep.append) if m.name == "model.json" else (sink,)
            try:
                digest = _stream(tar, m, where, *sinks)
                if out is not None:
                    out.flush()
                    os.fsync(out.fileno())
            except OSError as exc:
                if dest_p is None or getattr(exc, "filename", None):
                    raise
                # a full disk names no file: name the one being written
                raise OSError(exc.errno, exc.strerror or str(exc),
                              str(dest_p / m.name)) from exc
            finally:
                if out is not None:
                    out.close()
            if digest != entry.sha256:
                raise BundleError(f"{where}: member {m.name!r} has sha256 {digest[:12]}..., "
                                  f"{MANIFEST_NAME} says {entry.sha256[:12]}...; the file was "
                                  f"tampered with or corrupted")
            if m.name == "model.json":
                model_json = b"".join(keep)
            if on_file is not None:
                on_file(m.name)
    missing = sorted({f.name for f in manifest.files} - seen)
    if missing:
        raise BundleError(f"{where}: {missing[0]!r} is listed in {MANIFEST_NAME} but missing "
                          f"from the archive (truncated?)")
    _check_model(model_json, manifest, where, dest_p)
    if dest_p is not None:
        for name, data in ((MANIFEST_NAME, manifest_bytes), (SIGNATURE_NAME, sig_bytes)):
            out, sink = _open_out(dest_p, name)
            assert out is not None
            with out:
                sink(data)
                out.flush()
                os.fsync(out.fileno())
    return VerifiedBundle(manifest, manifest_bytes, sig_bytes, kid)


def check_model_json(slot: Path, manifest: BundleManifest, where: str) -> None:
    """An installed slot's ``model.json`` against its signed manifest and as the runtime
    reads it (graphs present with the sha256 both record; a model schema this syncedge
    reads).

    Args:
        slot: the slot folder.
        manifest: the slot's parsed ``bundle.json``.
        where: how messages name the slot.
    The graph files' own bytes are not hashed here: :func:`edge.bundle.install.check_slot`
    hashes every payload file against the manifest first, and the graphs ``model.json``
    lists are compared with the manifest's entries.

    Raises:
        BundleError: ``model.json`` missing, altered, of an older or newer schema (saying
            what to do on the build machine), or naming another model than the manifest.
    """
    try:
        model_json = (Path(slot) / "model.json").read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        raise BundleError(f"{where}: model.json is missing; the slot is damaged: install its "
                          f"bundle again") from None
    _check_model(model_json, manifest, where, Path(slot), strip=False, hash_graphs=False)


def _check_model(model_json: bytes, manifest: BundleManifest, where: str,
                 dest: Path | None, strip: bool = True, hash_graphs: bool = True) -> None:
    import json

    from edge.manifest import (
        CHAIN_MODEL_FORMAT,
        MANIFEST_SCHEMA_VERSION,
        UPGRADE_COMMAND,
        ChainModelManifest,
        ModelManifest,
        OldModelSchemaError,
    )

    if hashlib.sha256(model_json).hexdigest() != manifest.model_sha256:
        raise BundleError(f"{where}: model.json sha256 differs from {MANIFEST_NAME}.model "
                          f"(changed after the bundle was signed; a bundle's files are "
                          f"never edited: build, sign and install a new one)")
    try:
        if dest is not None:
            model = load_any_model_dir(dest, verify=hash_graphs)
        else:
            d = json.loads(model_json.decode("utf-8"))
            model = (ChainModelManifest if isinstance(d, dict)
                     and d.get("format") == CHAIN_MODEL_FORMAT
                     else ModelManifest).from_json_dict(d, where="model.json")
    except OldModelSchemaError as exc:
        raise BundleError(
            f"{where}: model.json refused: schema_version {exc.version} is an older model "
            f"schema than this syncedge reads ({MANIFEST_SCHEMA_VERSION}); on the build "
            f"machine upgrade the model folder this bundle was built from "
            f"('{UPGRADE_COMMAND}'), then build, sign and install a new bundle") from None
    except (ManifestError, ValueError) as exc:
        # the folder unpacked into is a temporary one: name the member, not that folder
        text = str(exc).replace(f"{dest}{os.sep}", "") if dest is not None and strip \
            else str(exc)
        raise BundleError(f"{where}: model.json refused: {text}") from None
    if (model.name, model.variant) != (manifest.model_name, manifest.model_variant):
        raise BundleError(f"{where}: model.json names {model.name!r} {model.variant}, "
                          f"{MANIFEST_NAME} says {manifest.model_name!r} {manifest.model_variant}")
    for key, g in getattr(model, "graphs", {}).items():
        entry = manifest.file(g.file)
        if entry is None or entry.sha256 != g.sha256:
            raise BundleError(f"{where}: graph '{key}' ({g.file}) listed in model.json is "
                              f"missing from the bundle or has another sha256")
