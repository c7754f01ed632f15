"""``syncedge doctor``: what can run here: backends, CUDA driver, kernels (nvcc, fatbin),
the installed model bundle (the active slot's files checked against its signed manifest)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from edge.commands.common import run_command
from edge.commands.helptext import plain
from edge.runtime.backends import BACKEND_NAMES, backend_availability, resolve_backend
from edge.runtime.backends.probe import Availability, cuda_driver_status, kernels_status
from edge.runtime.errors import BackendUnavailableError

__all__ = ["bundle_status", "collect", "main", "register", "run"]


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``doctor`` subcommand."""
    p = subparsers.add_parser("doctor", help="report which backends and kernels can run here",
                              description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)
    return p


def collect() -> dict:
    """Availability of every backend, the CUDA driver and the kernels, and what auto picks."""
    items: list[Availability] = [backend_availability(n) for n in BACKEND_NAMES]
    items.append(cuda_driver_status())
    items.extend(kernels_status())
    try:
        auto = resolve_backend("auto")
    except BackendUnavailableError as exc:
        auto = f"none ({exc})"
    items.append(engine_cache_status())
    items.append(bundle_status())
    items.append(Availability(
        "rollout", True,
        f"auto -> {auto}: " + ("device path (TensorRT engines as device executors, rollout "
                               "kernels between them, one CUDA graph per step; 0 host copies "
                               "per step by design)" if auto == "tensorrt" else
                               "host path (each graph through ONNX Runtime, the kernels' NumPy "
                               "twins in between; every graph run copies its inputs and "
                               "outputs)")
        + "; simulate's metrics.json records rollout_path and host_copies_steps_2_to_T"))
    return {"items": [{"name": a.name, "available": a.available, "reason": a.reason}
                      for a in items], "auto": auto}


def bundle_status() -> Availability:
    """The installed bundles under the state root: which slot is active, whether its files
    and ``model.json`` are as signed (:func:`edge.bundle.install.list_slots` with
    ``verify``), the other slot, leftovers of an interrupted install. Available when the
    active slot can run."""
    from edge.bundle.format import BundleError
    from edge.bundle.install import bundles_dir, leftovers, list_slots

    root = bundles_dir()
    try:
        slots = list_slots(root, verify=True)
    except BundleError as exc:
        return Availability("bundle", False, str(exc))
    parts = []
    for s in slots:
        if s.manifest is None:
            parts.append(f"slot {s.slot} {s.state}")
            continue
        m = s.manifest
        state = f"DAMAGED ({s.problem})" if s.problem else "files verified"
        parts.append(f"slot {s.slot}{' (active)' if s.active else ''} {m.model_name} "
                     f"{m.model_variant} {m.model_sha256[:12]} for {m.target}, {state}")
    active = [s for s in slots if s.active]
    if not active:
        parts.insert(0, "no active slot" + ("; make one active with 'syncedge bundle "
                                            "activate SLOT'" if any(s.manifest for s in slots)
                                            else "; install one with 'syncedge bundle install "
                                                 "BUNDLE'"))
    elif active[0].problem:
        parts.append("repair: install the active slot's bundle again")
    left = leftovers(root)
    if left:
        parts.append(f"{len(left)} leftover(s) of an interrupted install "
                     f"({', '.join(p.name for p in left)})")
    ok = bool(active) and not active[0].problem
    return Availability("bundle", ok, f"{root}: " + "; ".join(parts))


def engine_cache_status() -> Availability:
    """The TensorRT engine cache under the state root: entries by TensorRT version and GPU
    (read from the sidecars; nothing is loaded)."""
    from collections import Counter

    from edge.runtime.engine_cache import EngineCache

    cache = EngineCache()
    keys: Counter = Counter()
    for side in cache.root.glob("*/*.json"):
        try:
            k = json.loads(side.read_text(encoding="utf-8"))["key"]
            keys[f"TensorRT {k['trt_version']} sm {k['compute_capability']}"] += 1
        except (OSError, ValueError, KeyError, TypeError):
            keys["unreadable"] += 1
    found = ", ".join(f"{n} for {what}" for what, n in sorted(keys.items())) or "empty"
    return Availability("engine-cache", bool(keys), f"{cache.root}: {found}")


def run(args: argparse.Namespace) -> int:
    """Print the report; returns 0 (the report itself is the result)."""
    d = collect()
    if args.json:
        print(json.dumps(d, indent=2))
        return 0
    for it in d["items"]:
        print(f"{it['name']:<12} {'yes' if it['available'] else 'no ':<4} {it['reason']}")
    print(f"{'auto':<12} -> {d['auto']}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``doctor`` alone (``python -m edge.commands.doctor``)."""
    return run_command("doctor", register, argv)


if __name__ == "__main__":
    sys.exit(main())
