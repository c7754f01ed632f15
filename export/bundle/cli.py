"""``syncedge bundle ...``: keygen and build (off device); verify, install, list, rollback
and keys (on the device, through :mod:`edge.bundle.install` and :mod:`edge.bundle.keys`).

The group is registered from ``export`` because argparse allows one registrar per group;
the device verbs only call into ``edge``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["register"]


def _root(args: argparse.Namespace) -> Path:
    from edge.bundle.install import bundles_dir

    return Path(args.root) if args.root else bundles_dir()


def _keys_dir(args: argparse.Namespace) -> Path:
    return Path(args.keys_dir) if args.keys_dir else _root(args) / "keys"


def _run_keygen(args: argparse.Namespace) -> int:
    from export.bundle.build import generate_keypair

    priv, pub, kid = generate_keypair(args.out, args.name)
    print(f"key id {kid}\nprivate key {priv} (keep it secret, off devices)\n"
          f"public key {pub} (install on devices: syncedge bundle keys add {pub})")
    return 0


def _run_build(args: argparse.Namespace) -> int:
    from edge.fileio import check_file_target
    from export.bundle.build import build_bundle

    check_file_target(args.out)  # a bundle is never overwritten: it may be the one installed
    model = Path(args.model_dir)
    if model.is_file():
        from edge.bundle.format import BundleError

        raise BundleError(f"{model}: a file; give the model's folder"
                          f"{f' ({model.parent})' if model.name == 'model.json' else ''}, "
                          "the one that holds model.json")
    if not model.exists():
        raise FileNotFoundError(2, "no such folder (expected a model folder with model.json)",
                                str(model))
    cmd = "syncedge " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    m = build_bundle(args.model_dir, args.out, target=args.target, private_key_path=args.key,
                     extras=args.extra or (), command=cmd,
                     force_unchecked=args.force_unchecked)
    print(f"{args.out}: {m.model_name} {m.model_variant} for {m.target}, {len(m.files)} file{'s' if len(m.files) != 1 else ''}, "
          f"signed by key {m.key_id}; parity {m.created.get('parity', '?')}")
    return 0


def _parity_state(m: Any) -> str:
    """``passed``, ``n/a`` (the chain model: no graphs to gate) or ``FORCED``."""
    if m.created.get("parity") == "passed":
        return "passed"
    return "n/a" if m.model_variant == "numpy" else "FORCED"


def _parity_warning(m: Any) -> str:
    """A line to print when an ONNX model's bundle was built without a passed parity
    record."""
    parity = str(m.created.get("parity", "not recorded"))
    return ("" if _parity_state(m) != "FORCED"
            else f"\nwarning: parity not passed: {parity}")


def _trusted(args: argparse.Namespace) -> dict:
    from edge.bundle.format import key_id, load_public_key
    from edge.bundle.keys import trusted_keys

    if args.pubkey:
        keys = [load_public_key(p) for p in args.pubkey]
        return {key_id(k): k for k in keys}
    return dict(trusted_keys(_keys_dir(args)))


def _run_verify(args: argparse.Namespace) -> int:
    from edge.bundle.format import check_target
    from edge.bundle.reader import read_bundle

    target = check_target(args.target, "--target") if args.target else None
    with tempfile.TemporaryDirectory(prefix="syncedge-verify-") as tmp:
        v = read_bundle(args.bundle, _trusted(args), tmp, target=target,
                        keys_given=bool(args.pubkey))
    m = v.manifest
    print(f"{args.bundle}: OK: {m.model_name} {m.model_variant} for {m.target}, "
          f"{len(m.files)} file{'s' if len(m.files) != 1 else ''} verified, signed by key {v.key_id}, created "
          f"{m.created.get('utc', '?')}{_parity_warning(m)}")
    return 0


def _run_install(args: argparse.Namespace) -> int:
    from edge.bundle.device_target import device_target
    from edge.bundle.install import install_bundle

    target = device_target(args.target)
    info = install_bundle(args.bundle, target=target, root=_root(args),
                          keys_dir=_keys_dir(args))
    m = info.manifest
    assert m is not None
    if info.repaired:
        print(f"the slot active before could not run: {info.repaired}", file=sys.stderr)
    if info.unchanged:
        print(f"{args.bundle}: {m.model_name} {m.model_variant} ({m.model_sha256[:12]}) is "
              f"already installed and active in slot {info.slot}; nothing changed (the "
              f"other slot keeps its model for 'syncedge bundle rollback')")
        return 0
    print(f"installed {m.model_name} {m.model_variant} ({m.model_sha256[:12]}) into slot "
          f"{info.slot}{' (replacing the damaged slot)' if info.repaired else ''}; now "
          f"active{_parity_warning(m)}")
    return 0


def _run_list(args: argparse.Namespace) -> int:
    from edge.bundle.format import BundleError
    from edge.bundle.install import leftovers, list_slots
    from edge.bundle.keys import trusted_keys

    try:
        trusted = set(trusted_keys(_keys_dir(args)))
    except BundleError:  # a damaged keys folder: list the slots without the trust column
        trusted = None
    slots = list_slots(_root(args), verify=not args.quick)
    for s in slots:
        mark = "*" if s.active else " "
        if s.manifest is None:
            print(f"{mark} {s.slot}  {s.state}")
        else:
            m = s.manifest
            retired = ""
            if trusted is not None and m.key_id not in trusted:
                retired = (" (key no longer trusted: it runs until the next install; "
                           "activating it again is refused)" if s.active else
                           " (key no longer trusted: rollback refuses this slot)")
            health = ("" if args.quick else
                      f" DAMAGED: {s.problem}" if s.problem else " files=verified")
            print(f"{mark} {s.slot}  {m.model_name} {m.model_variant} target={m.target} "
                  f"model={m.model_sha256[:12]} key={m.key_id}{retired} "
                  f"installed={s.installed_utc} parity={_parity_state(m)}{health}")
    if not any(s.active for s in slots) and any(s.manifest for s in slots):
        print("no slot is active: make one active with 'syncedge bundle activate SLOT'")
    for p in leftovers(_root(args)):
        print(f"leftover of an interrupted install: {p} (the next install, rollback or "
              f"activate removes it)")
    return 1 if any(s.active and s.problem for s in slots) else 0


def _run_activate(args: argparse.Namespace) -> int:
    from edge.bundle.device_target import device_target
    from edge.bundle.install import activate

    info = activate(args.slot, _root(args), target=device_target(args.target),
                    keys_dir=_keys_dir(args))
    m = info.manifest
    assert m is not None
    print(f"slot {info.slot} active: {m.model_name} {m.model_variant} ({m.model_sha256[:12]})")
    return 0


def _run_rollback(args: argparse.Namespace) -> int:
    from edge.bundle.device_target import device_target
    from edge.bundle.install import rollback

    info = rollback(_root(args), target=device_target(args.target), keys_dir=_keys_dir(args))
    m = info.manifest
    assert m is not None
    print(f"rolled back to slot {info.slot}: {m.model_name} {m.model_variant} "
          f"({m.model_sha256[:12]})")
    return 0


def _run_keys(args: argparse.Namespace) -> int:
    from edge.bundle.keys import add_key, remove_key, trusted_keys

    d = _keys_dir(args)
    if args.keys_command == "add":
        print(f"trusted key {add_key(args.public_key, d)} ({d})")
    elif args.keys_command == "remove":
        print(f"removed {remove_key(args.key_id, d, force=args.force)}")
    else:
        keys = trusted_keys(d)
        for kid in keys:
            print(kid)
        if not keys:
            print(f"no trusted keys in {d}")
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", help="bundles folder (default: STATE_ROOT/bundles, see "
                                  "SYNCEDGE_HOME)")
    p.add_argument("--keys-dir", help="trusted keys folder (default: ROOT/keys)")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``bundle`` group to the ``syncedge`` command line."""
    from edge.bundle.format import TARGETS

    p = subparsers.add_parser("bundle", help="signed device bundles (A/B install, rollback)")
    sub = p.add_subparsers(dest="bundle_command", metavar="VERB", required=True)

    k = sub.add_parser("keygen", help="create an Ed25519 signing key pair (off device)")
    k.add_argument("--out", required=True, help="folder for NAME.key.pem and NAME.pub.pem")
    k.add_argument("--name", default="oem", help="file name stem (default: oem)")
    k.set_defaults(func=_run_keygen)

    b = sub.add_parser("build", help="build and sign a bundle from a model folder")
    b.add_argument("model_dir", help="folder with model.json and its ONNX graphs, or a chain model "
                        "folder ('syncedge export chain-model')")
    b.add_argument("--target", required=True, choices=sorted(TARGETS))
    b.add_argument("--key", required=True, help="private key PEM (from bundle keygen)")
    b.add_argument("--out", required=True, help="bundle file to write (a new path: an "
                        "existing file is refused, never overwritten)")
    b.add_argument("--extra", action="append", help="extra payload file (repeatable)")
    b.add_argument("--force-unchecked", action="store_true",
                   help="build even without a passed parity record ('syncedge export "
                        "check'); the bundle manifest records that it was forced")
    b.set_defaults(func=_run_build)

    v = sub.add_parser("verify", help="check a bundle's signature, files and model.json")
    v.add_argument("bundle")
    v.add_argument("--pubkey", action="append",
                   help="trust this public key PEM instead of the keys folder (repeatable)")
    v.add_argument("--target", help="also require this target")
    _common(v)
    v.set_defaults(func=_run_verify)

    i = sub.add_parser("install", help="verify and install into the inactive slot, then "
                                       "switch to it",
                       description="Verify the bundle (signature, every file, model.json, "
                                   "target) while unpacking it into the inactive slot, then "
                                   "switch to it atomically. The bundle already active is not "
                                   "installed twice (the other slot keeps the previous model), "
                                   "unless the active slot is damaged (a file lost or altered): "
                                   "then the install replaces the damaged slot and the "
                                   "previous model stays for rollback. Exit 75 when another "
                                   "install, rollback or activate holds the lock (retry), 2 "
                                   "for a refusal.")
    i.add_argument("bundle")
    i.add_argument("--target", help="the device's target (default: $SYNCEDGE_TARGET or "
                                    "detected)")
    _common(i)
    i.set_defaults(func=_run_install)

    ls = sub.add_parser("list", help="show slots a and b (* = active)",
                        description="Show slots a and b (* = active), each checked as the "
                                    "runtime needs it: every file's sha256 against the slot's "
                                    "signed bundle.json and model.json's schema (files=verified, "
                                    "or DAMAGED and why; a damaged slot is repaired by "
                                    "installing its bundle again). Exit 1 when the active slot "
                                    "is damaged.")
    ls.add_argument("--quick", action="store_true",
                    help="read the manifests only; do not hash the files")
    _common(ls)
    ls.set_defaults(func=_run_list)

    a = sub.add_parser("activate", help="make slot a or b active (after checking it)",
                       description="Make an installed slot active, checked as an install "
                                   "would be: files, model.json, signature with the keys "
                                   "trusted now, target. For a device whose 'active' link was "
                                   "lost, or to choose between two installed models.")
    a.add_argument("slot", choices=("a", "b"))
    a.add_argument("--target", help="the device's target (default: $SYNCEDGE_TARGET or "
                                    "detected)")
    _common(a)
    a.set_defaults(func=_run_activate)

    r = sub.add_parser("rollback", help="switch back to the previous slot",
                       description="Make the other slot active again (rolling back twice "
                                   "returns to the newer model). The slot is checked as an "
                                   "install would be: files, model.json (a model schema this "
                                   "syncedge does not read is refused), signature with the "
                                   "keys trusted now, target.")
    _common(r)
    r.add_argument("--target", help="the device's target (default: $SYNCEDGE_TARGET or "
                                    "detected)")
    r.set_defaults(func=_run_rollback)

    ks = sub.add_parser("keys", help="trusted public keys (rotation: add new, then remove old)")
    ksub = ks.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    ka = ksub.add_parser("add", help="trust a public key PEM")
    ka.add_argument("public_key")
    _common(ka)
    kr = ksub.add_parser("remove", help="stop trusting a key id")
    kr.add_argument("key_id")
    kr.add_argument("--force", action="store_true", help="allow removing the last key")
    _common(kr)
    kl = ksub.add_parser("list", help="list trusted key ids")
    _common(kl)
    ks.set_defaults(func=_run_keys)
