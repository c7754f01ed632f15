"""Generate signing keys and build signed device bundles (format: :mod:`edge.bundle.format`)."""

from __future__ import annotations

import datetime as _dt
import io
import os
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from edge import __version__
from edge.bundle.format import (
    BUNDLE_SCHEMA_VERSION,
    MANIFEST_NAME,
    SIGNATURE_NAME,
    BundleError,
    BundleFile,
    BundleManifest,
    BundleSignature,
    check_file_name,
    check_target,
    key_id,
)
from edge.fileio import atomic_write, file_digest, sha256_file
from edge.manifest import ChainModelManifest, load_any_model_dir

__all__ = ["generate_keypair", "load_private_key", "pack_bundle", "build_bundle"]


def generate_keypair(out_dir: str | os.PathLike[str], name: str = "oem") -> tuple[Path, Path, str]:
    """Create an Ed25519 signing key pair.

    Writes ``<name>.key.pem`` (PKCS#8 PEM, unencrypted, mode 0600: keep it off devices)
    and ``<name>.pub.pem`` (SubjectPublicKeyInfo PEM, to install on devices).

    Returns:
        (private key path, public key path, key id).
    Raises:
        BundleError: ``name`` is not a plain file name stem (empty, a path, a leading
            dot), ``out_dir`` is an existing file, or either file already exists (keys are
            never overwritten).
    """
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
        PublicFormat,
    )

    out = Path(out_dir)
    if not name or name != Path(name).name or name.startswith(".") or "\\" in name:
        raise BundleError(f"--name {name!r}: expected a plain file name stem such as 'oem' "
                          "(no folder, no leading dot); --out names the folder")
    if out.exists() and not out.is_dir():
        raise BundleError(f"--out {out}: an existing file; --out takes the folder for "
                          f"{name}.key.pem and {name}.pub.pem")
    priv_p, pub_p = out / f"{name}.key.pem", out / f"{name}.pub.pem"
    for p in (priv_p, pub_p):
        if p.exists():
            raise BundleError(f"{p}: already exists; keys are never overwritten (choose "
                              f"another --name or folder)")
    key = Ed25519PrivateKey.generate()
    priv = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    pub = key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    atomic_write(priv_p, lambda f: f.write(priv), mode=0o600)
    atomic_write(pub_p, lambda f: f.write(pub), mode=0o644)
    return priv_p, pub_p, key_id(key.public_key())


def load_private_key(path: str | os.PathLike[str]) -> Any:
    """Load an unencrypted Ed25519 private key (PEM).

    Raises:
        BundleError: naming the file when missing, not PEM, encrypted or not Ed25519.
    """
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BundleError(f"{path}: private key file not found") from None
    try:
        key = load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise BundleError(f"{path}: not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise BundleError(f"{path}: expected an Ed25519 private key, found {type(key).__name__}")
    return key




def _tarinfo(name: str, size: int, mtime: int) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.mtime = size, 0o644, mtime
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def pack_bundle(files: Mapping[str, str | os.PathLike[str]], out_path: str | os.PathLike[str], *,
                target: str, model_name: str, model_variant: str, private_key: Any,
                command: str = "", parity: str | None = None) -> BundleManifest:
    """Sign and write a bundle from payload files, without checking the model.

    :func:`build_bundle` is the normal entry; this lower level exists so that tests can
    build signed bundles holding unusual payloads (e.g. a model.json from the future).

    Args:
        files: payload name -> source path; must include ``model.json``.
        out_path: the archive to write (atomically).
        target: one of :data:`edge.bundle.format.TARGETS`.
        model_name, model_variant: the model's identity as recorded in ``model.json``.
        private_key: an Ed25519 private key (:func:`load_private_key`).
        command: the command line that built the bundle (creation info).
        parity: the model's parity status for ``created.parity`` (omitted when None).
    Returns:
        The written manifest.
    Raises:
        BundleError: unknown target, bad file name, missing ``model.json``.
    """
    check_target(target)
    if "model.json" not in files:
        raise BundleError(f"{out_path}: the payload must include model.json")
    entries = []
    for name, src in sorted(files.items()):
        check_file_name(name, f"payload file {src}")
        sha, size = file_digest(Path(src))
        entries.append(BundleFile(name, sha, size))
    now = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)
    manifest = BundleManifest(
        target=target, model_name=model_name, model_variant=model_variant,
        model_sha256=next(e.sha256 for e in entries if e.name == "model.json"),
        files=tuple(entries),
        created={"utc": now.isoformat(), "syncedge_version": __version__, "command": command,
                 **({"parity": parity} if parity is not None else {})},
        key_id=key_id(private_key.public_key()), schema_version=BUNDLE_SCHEMA_VERSION)
    manifest_bytes = manifest.to_bytes()
    sig = BundleSignature(manifest.key_id, private_key.sign(manifest_bytes)).to_bytes()
    mtime = int(now.timestamp())

    def write(f: IO[bytes]) -> None:
        with tarfile.open(fileobj=f, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
            for name, data in ((MANIFEST_NAME, manifest_bytes), (SIGNATURE_NAME, sig)):
                tar.addfile(_tarinfo(name, len(data), mtime), io.BytesIO(data))
            for e in entries:
                with open(files[e.name], "rb") as src:
                    tar.addfile(_tarinfo(e.name, e.size, mtime), src)

    atomic_write(out_path, write)
    return manifest


def build_bundle(model_dir: str | os.PathLike[str], out_path: str | os.PathLike[str], *,
                 target: str, private_key_path: str | os.PathLike[str],
                 extras: Sequence[str | os.PathLike[str]] = (),
                 command: str = "", force_unchecked: bool = False) -> BundleManifest:
    """Build a signed bundle from a model folder.

    The payload is ``model.json``, every graph it lists (verified against their sha256
    first) and each extra file (e.g. a keypoint regressor ONNX), under its base name; an
    extra file that ``model.json`` ``extra`` lists by name must have the sha256 it records.

    A chain model folder (:class:`edge.manifest.ChainModelManifest`) has ``model.json``
    alone and no graphs, so no parity record: ``created.parity`` says so.

    An ONNX model must carry a passed parity record for its own graphs (``model.json``
    ``evaluation.parity``, written by ``syncedge export check``;
    :func:`export.variants.parity_gates.require_parity`: passed, with gates no looser than the
    defaults, for its own graphs and variant). ``force_unchecked`` builds anyway and
    records why in the bundle manifest (``created.parity``: ``"forced: ..."``); otherwise
    ``created.parity`` is ``"passed"``.

    Raises:
        BundleError: unknown target, a bad or clashing extra file name, an unusable key,
            or a missing/failed/foreign parity record (without ``force_unchecked``).
        edge.manifest.ManifestError: the model folder is invalid (naming the file).
    """
    from export.variants.parity_gates import ParityError, require_parity

    model_dir = Path(model_dir)
    model = load_any_model_dir(model_dir, verify=True)
    files: dict[str, Path] = {"model.json": model_dir / "model.json"}
    listed: dict[str, tuple[str | None, Any]] = {}
    if isinstance(model, ChainModelManifest):
        parity = "not applicable: the chain model has no graphs"
    else:
        try:
            require_parity(model, str(model_dir / "model.json"))
            parity = "passed"
        except ParityError as exc:
            if not force_unchecked:
                raise BundleError(f"refusing to bundle: {exc}") from None
            parity = f"forced: built with --force-unchecked ({exc})"
        for g in model.graphs.values():
            files[g.file] = model_dir / g.file
        listed = {str(e["file"]): (k, e.get("sha256")) for k, e in model.extra.items()
                  if isinstance(e, Mapping) and "file" in e}
    extra_names: dict[str, Path] = {}
    for x in extras:
        p = Path(x)
        if p.is_dir():
            raise BundleError(f"{p}: --extra expected a file, found a folder; pass each file "
                              "of it as its own --extra")
        if not p.is_file():
            raise BundleError(f"{p}: extra file not found")
        if p.name in extra_names:
            raise BundleError(f"{p}: extra file name {p.name!r} is given twice (also "
                              f"{extra_names[p.name]}); a bundle holds one file per name")
        if p.name in files:
            raise BundleError(f"{p}: extra file name {p.name!r} clashes with a model file")
        extra_names[p.name] = p
        key, sha = listed.get(p.name, (None, None))
        found = sha256_file(p) if sha is not None else None
        if found is not None and found != sha:
            raise BundleError(f"{p}: sha256 {found[:12]}... differs from model.json "
                              f"extra.{key}.sha256 {str(sha)[:12]}...; pass the {key} file "
                              f"exported with this model")
        files[p.name] = p
    key = load_private_key(private_key_path)
    return pack_bundle(files, out_path, target=target, model_name=model.name,
                       model_variant=model.variant, private_key=key, command=command,
                       parity=parity)
