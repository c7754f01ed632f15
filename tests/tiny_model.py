"""A tiny model folder without torch for bundle, engine and gate tests: the runtime's
synthetic model (``tests/fixtures/tiny_model.py``, graphs made with ``onnx.helper`` at
tiny sizes) with a chosen name, variant and parity record."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from edge.manifest import ModelManifest, load_manifest, save_manifest
from tests.fixtures.tiny_model import TinySizes, write_tiny_model

__all__ = ["make_tiny_model", "parity_record"]

SIZES = TinySizes(height=8, width=8, channels=2, lat_h=2, lat_w=2, history=2, dof=2,
                  segment=8, ctx_dim=2, batches=(1,))


def parity_record(manifest: ModelManifest, passed: bool = True) -> dict:
    """A parity record for ``manifest``'s graphs as ``syncedge export check`` writes it."""
    from export.variants.parity_gates import Gates, graphs_digest

    limit = {"fp32": Gates().fp32_max_abs, "int8": Gates().int8_psnr_loss_db,
             "fp16": Gates().fp16_psnr_loss_db}[manifest.variant]
    gate = {"name": manifest.variant, "metric": "tests", "value": 0.0 if passed else 1.0,
            "limit": limit, "unit": "dB", "passed": passed}
    return {"variant": manifest.variant, "gate": gate, "graphs_sha256": graphs_digest(manifest),
            "status": "passed" if passed else "failed"}


def make_tiny_model(out_dir: Path, seed: int = 0, name: str = "tiny",
                    variant: str = "fp32", parity: str | None = "passed") -> Path:
    """Write the tiny model folder (``model.json`` + graphs) and return it.

    ``parity``: ``"passed"`` or ``"failed"`` writes such a parity record into
    ``evaluation.parity`` (bundles need a passed one); None writes none.
    """
    write_tiny_model(out_dir, SIZES, seed=seed)
    manifest = dataclasses.replace(load_manifest(out_dir / "model.json"), name=name,
                                   variant=variant,
                                   provenance={"command": "tests", "seed": seed})
    if parity is not None:
        manifest = dataclasses.replace(manifest, evaluation={
            "parity": parity_record(manifest, parity == "passed")})
    save_manifest(manifest, out_dir / "model.json")
    return Path(out_dir)
