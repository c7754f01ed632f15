"""The device bundle format, shared by the builder (``export/bundle``) and the device
(``edge/bundle/install.py``).

A bundle is a gzip-compressed tar archive for one target holding, in this order:

1. ``bundle.json``: the bundle manifest (strict JSON, :class:`BundleManifest`): schema
   version, target, model identity, the sha256 and size of every other file, creation
   info and the signing key id; read by the strict config reader
   (:mod:`edge.config_reader`), so unknown or missing keys and values of the wrong type are
   refused naming the key path;
2. ``bundle.sig``: strict JSON ``{"algorithm": "ed25519", "key_id", "signature"}``, the
   signature (base64) over the exact bytes of ``bundle.json``;
3. the payload: ``model.json``, the ONNX graphs and optional extra files, each a regular
   file with a plain name (no folders, no links).

A key id is the first 16 hex digits of the sha256 of the raw 32-byte Ed25519 public key.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from edge.config_reader import Where, read_config
from edge.errors import ConfigError
from edge.manifest import Variant as ModelVariant

__all__ = [
    "BUNDLE_SCHEMA_VERSION",
    "MANIFEST_NAME",
    "SIGNATURE_NAME",
    "TARGETS",
    "BundleError",
    "BundleFile",
    "BundleManifest",
    "BundleSignature",
    "INSTALL_RECORD_NAME",
    "check_file_name",
    "check_target",
    "key_id",
    "load_public_key",
    "parse_strict_json",
    "verify_signature",
]

#: ``bundle.json`` ``model.variant``: an ONNX model's variant, or ``numpy`` for the chain
#: model (:class:`edge.manifest.ChainModelManifest`; a runtime before it refuses such a
#: bundle by this field).
BundleVariant = Literal[ModelVariant, "numpy"]

BUNDLE_SCHEMA_VERSION = 1
MANIFEST_NAME = "bundle.json"
SIGNATURE_NAME = "bundle.sig"
#: What an install writes into a slot beside the payload (:mod:`edge.bundle.install`): no
#: payload file may take its name.
INSTALL_RECORD_NAME = "installed.json"
MAX_MANIFEST_BYTES = 1 << 20

#: Targets a bundle can be built for (docs/bundles.md). An unknown name is an error.
TARGETS: Mapping[str, str] = {
    "cpu": "any x86-64 or aarch64 CPU, ONNX Runtime",
    "jetson-orin-sm87": "Jetson Orin, JetPack 6.x (TensorRT 10.3) or 7.2+, sm_87",
    "jetson-thor-sm110": "Jetson Thor, JetPack 7.2+ (TensorRT 10.16 / 11.4), sm_110",
    "x86-sm90": "x86-64 with an H100/H200 GPU, sm_90",
}

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_KEY_ID = re.compile(r"^[0-9a-f]{16}$")


class BundleError(ConfigError):
    """A bundle, its signature, a key or a device slot is missing, malformed or refused.

    The message names the file (archive, member, key or slot) and the reason.
    """


class BundleBusyError(BundleError):
    """Another install, rollback or activate holds the device's bundle lock: try again
    later (exit code :attr:`exit_code`, EX_TEMPFAIL of BSD's sysexits.h, apart from the 2
    of a refusal, so a fleet script can tell "retry" from "reject")."""

    exit_code = 75


def check_target(target: str, where: str = "target") -> str:
    """Return ``target`` if it is one of :data:`TARGETS`; raise :class:`BundleError` otherwise."""
    if target not in TARGETS:
        raise BundleError(f"{where}: unknown target {target!r}; expected one of {sorted(TARGETS)}")
    return target


def check_file_name(name: str, where: str) -> str:
    """Return ``name`` if it is a plain payload file name (no folder, no leading dot).

    Raises:
        BundleError: naming ``where`` and the refused name (path traversal, absolute
            path, folder, reserved name).
    """
    if not isinstance(name, str) or not _NAME_RE.match(name) or ".." in name:
        raise BundleError(f"{where}: file name {name!r} is not a plain file name "
                          f"(letters, digits, '.', '_', '-'; no folders, no '..', no "
                          f"leading dot); refused as a path traversal risk")
    if name in (MANIFEST_NAME, SIGNATURE_NAME):
        raise BundleError(f"{where}: {name!r} is reserved for the bundle manifest/signature")
    if name == INSTALL_RECORD_NAME:
        raise BundleError(f"{where}: {name!r} is reserved for the install record a device "
                          "writes into the slot; rename the file")
    return name


def parse_strict_json(data: bytes, where: str) -> Any:
    """Decode UTF-8 strict JSON (no NaN/Infinity, no duplicate keys).

    Raises:
        BundleError: naming ``where`` and the problem.
    """
    def no_constants(name: str) -> None:
        raise BundleError(f"{where}: {name} is not strict JSON")

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in pairs:
            if k in out:
                raise BundleError(f"{where}: duplicate key {k!r}")
            out[k] = v
        return out

    try:
        text = data.decode("utf-8")
        return json.loads(text, parse_constant=no_constants, object_pairs_hook=no_duplicates)
    except UnicodeDecodeError as exc:
        raise BundleError(f"{where}: not UTF-8 ({exc})") from None
    except json.JSONDecodeError as exc:
        raise BundleError(f"{where}: invalid JSON: {exc}") from None


def _match(v: str, pattern: re.Pattern[str], w: Where) -> str:
    if not pattern.match(v):
        w.fail(f"expected a string matching {pattern.pattern}, found {v!r}")
    return v


@dataclass(frozen=True)
class _ModelEntry:
    """``bundle.json``'s ``model``: the bundled model's identity."""

    name: str
    variant: BundleVariant
    model_json_sha256: str


@dataclass(frozen=True)
class _FileEntry:
    """One entry of ``bundle.json``'s ``files`` (keyed by the file name)."""

    sha256: str
    size: int


@dataclass(frozen=True)
class _ManifestFile:
    """``bundle.json`` as stored (the schema :meth:`BundleManifest.from_bytes` reads)."""

    schema_version: int
    target: str
    model: _ModelEntry
    files: Mapping[str, _FileEntry]
    created: Mapping[str, str]
    key_id: str


@dataclass(frozen=True)
class _SignatureFile:
    """``bundle.sig`` as stored."""

    algorithm: Literal["ed25519"]
    key_id: str
    signature: str


@dataclass(frozen=True)
class BundleFile:
    """One payload file: plain ``name``, lowercase hex ``sha256`` and ``size`` in bytes."""

    name: str
    sha256: str
    size: int


@dataclass(frozen=True)
class BundleManifest:
    """The parsed ``bundle.json``.

    Attributes:
        target: one of :data:`TARGETS`.
        model_name: ``model.json``'s ``name``.
        model_variant: ``fp32``, ``int8`` or ``fp16`` (an ONNX model), ``numpy`` (the
            chain model).
        model_sha256: sha256 of the bundled ``model.json`` (the model's identity).
        files: every payload file (``model.json`` included), sorted by name.
        created: creation info (``utc`` ISO-8601 time, ``syncedge_version``, ``command``,
            ``parity``: the model's parity status when built, or why it was forced).
        key_id: id of the signing key.
        schema_version: bundle manifest schema version.
    """

    target: str
    model_name: str
    model_variant: str
    model_sha256: str
    files: tuple[BundleFile, ...]
    created: Mapping[str, str]
    key_id: str
    schema_version: int = BUNDLE_SCHEMA_VERSION

    def file(self, name: str) -> BundleFile | None:
        """The entry for ``name``, or ``None``."""
        for f in self.files:
            if f.name == name:
                return f
        return None

    def to_bytes(self) -> bytes:
        """Canonical strict-JSON bytes (sorted keys, two-space indent, trailing newline)."""
        d = {
            "schema_version": self.schema_version,
            "target": self.target,
            "model": {"name": self.model_name, "variant": self.model_variant,
                      "model_json_sha256": self.model_sha256},
            "files": {f.name: {"sha256": f.sha256, "size": f.size} for f in self.files},
            "created": dict(self.created),
            "key_id": self.key_id,
        }
        return (json.dumps(d, indent=2, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, where: str = MANIFEST_NAME) -> BundleManifest:
        """Parse and check ``bundle.json`` bytes.

        Raises:
            BundleError: ``<where>:<key.path>: ...`` for unknown or missing keys, a value of
                the wrong type or outside the allowed ones, a schema version newer than this
                syncedge reads, an unknown target, a bad file name or digest.
        """
        w = Where(where, error=BundleError)
        d = parse_strict_json(data, where)
        if not isinstance(d, Mapping):
            w.fail(f"expected a mapping, found {type(d).__name__}")
        version = d.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool):
            w.key("schema_version").fail("missing or not an integer")
        if version > BUNDLE_SCHEMA_VERSION:
            w.key("schema_version").fail(f"{version} is newer than this syncedge reads "
                                         f"({BUNDLE_SCHEMA_VERSION}); upgrade syncedge on the "
                                         f"device")
        f = read_config(_ManifestFile, d, w)
        target = check_target(f.target, str(w.key("target")))
        if not f.files:
            w.key("files").fail("expected a non-empty mapping of file entries, found {}")
        files = []
        for name, entry in sorted(f.files.items()):
            fw = w.key("files").key(name)
            check_file_name(name, str(fw))
            if entry.size < 0:
                fw.key("size").fail(f"expected a non-negative integer, found {entry.size!r}")
            files.append(BundleFile(name, _match(entry.sha256, _HEX64, fw.key("sha256")),
                                    entry.size))
        if "model.json" not in f.files:
            w.key("files").fail("'model.json' is not listed")
        mw = w.key("model")
        return cls(target=target, model_name=f.model.name, model_variant=f.model.variant,
                   model_sha256=_match(f.model.model_json_sha256, _HEX64,
                                       mw.key("model_json_sha256")),
                   files=tuple(files), created=dict(f.created),
                   key_id=_match(f.key_id, _KEY_ID, w.key("key_id")),
                   schema_version=f.schema_version)


@dataclass(frozen=True)
class BundleSignature:
    """The parsed ``bundle.sig``: the signing ``key_id`` and the raw 64-byte signature."""

    key_id: str
    signature: bytes
    algorithm: str = "ed25519"

    def to_bytes(self) -> bytes:
        """Strict-JSON bytes with the signature in base64."""
        d = {"algorithm": self.algorithm, "key_id": self.key_id,
             "signature": base64.b64encode(self.signature).decode("ascii")}
        return (json.dumps(d, indent=2, sort_keys=True) + "\n").encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, where: str = SIGNATURE_NAME) -> BundleSignature:
        """Parse ``bundle.sig``.

        Raises:
            BundleError: naming the key path: unknown or missing keys, a value of the wrong
                type, an algorithm other than ed25519, a signature that is not 64 bytes of
                base64.
        """
        w = Where(where, error=BundleError)
        f = read_config(_SignatureFile, parse_strict_json(data, where), w)
        try:
            sig = base64.b64decode(f.signature, validate=True)
        except ValueError:
            w.key("signature").fail("not valid base64")
        if len(sig) != 64:
            w.key("signature").fail(f"expected 64 bytes, found {len(sig)}")
        return cls(key_id=_match(f.key_id, _KEY_ID, w.key("key_id")), signature=sig)


def key_id(public_key: Any) -> str:
    """Key id of an Ed25519 public key: first 16 hex digits of sha256(raw 32 bytes)."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    raw = public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def load_public_key(path: str | os.PathLike[str]) -> Any:
    """Load an Ed25519 public key from a PEM file (SubjectPublicKeyInfo).

    Returns:
        ``cryptography``'s ``Ed25519PublicKey``.
    Raises:
        BundleError: naming the file when it is missing, not PEM, or not Ed25519.
    """
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BundleError(f"{path}: public key file not found") from None
    if b"PRIVATE KEY-----" in data:
        raise BundleError(f"{path}: a private key; a device trusts the public key only (the "
                          f"NAME.pub.pem beside it from 'syncedge bundle keygen'); keep the "
                          f"private key off devices")
    try:
        key = load_pem_public_key(data)
    except ValueError as exc:
        raise BundleError(f"{path}: not a PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise BundleError(f"{path}: expected an Ed25519 public key, found {type(key).__name__}")
    return key


def verify_signature(manifest_bytes: bytes, signature: BundleSignature,
                     trusted: Mapping[str, Any], where: str, *,
                     keys_given: bool = False) -> str:
    """Check ``signature`` over ``manifest_bytes`` with the trusted key it names.

    Args:
        manifest_bytes: exact bytes of ``bundle.json``.
        signature: parsed ``bundle.sig``.
        trusted: key id -> Ed25519 public key.
        where: the bundle file, for messages.
        keys_given: ``trusted`` are keys named on the command line (``--pubkey``), not the
            device's trusted keys (changes only the message).
    Returns:
        The key id that verified.
    Raises:
        BundleError: the key is not trusted (listing the trusted ids) or the signature does
            not verify.
    """
    from cryptography.exceptions import InvalidSignature

    key = trusted.get(signature.key_id)
    if key is None and keys_given:
        raise BundleError(f"{where}: signed by key {signature.key_id}, not by the key given "
                          f"with --pubkey ({', '.join(sorted(trusted)) or 'none'}); pass the "
                          f"public key of the key that signed it")
    if key is None:
        raise BundleError(f"{where}: signed by key {signature.key_id}, which is not trusted on "
                          f"this device (trusted: {', '.join(sorted(trusted)) or 'none'}); add the OEM's "
                          f"public key with 'syncedge bundle keys add'")
    try:
        key.verify(signature.signature, manifest_bytes)
    except InvalidSignature:
        raise BundleError(f"{where}: {SIGNATURE_NAME} does not verify {MANIFEST_NAME} with key "
                          f"{signature.key_id}; the manifest was altered or signed by another "
                          f"key") from None
    return signature.key_id

