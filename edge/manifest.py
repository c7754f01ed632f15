"""The model manifest (``model.json``): one reader and writer shared by export/ and edge/.

A model is a folder holding ``model.json`` and four ONNX graphs (``encoder``,
``calibration``, ``step``, ``decoder``; the step and decoder once per exported batch
size). The manifest is strict JSON with a schema version; unknown or missing keys are
errors that give the key path. The model's identity is the sha256 of its ``model.json``
bytes (:func:`model_sha256`), which lists the sha256 of every graph; :func:`load_model_dir`
refuses a model whose graphs do not match, naming the file.

Contract details fixed by the manifest (the runtime and kernels follow them, never guess):
see :class:`ModelContract` and docs/architecture.md, "Model contract".
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edge.errors import EdgeError
from edge.fileio import atomic_write, sha256_file

__all__ = [
    "MANIFEST_SCHEMA_VERSION",
    "GRAPH_NAMES",
    "ManifestError",
    "TensorSpec",
    "GraphSpec",
    "ModelContract",
    "ModelManifest",
    "load_manifest",
    "load_model_dir",
    "model_sha256",
    "save_manifest",
]

MANIFEST_SCHEMA_VERSION = 1
GRAPH_NAMES = ("encoder", "calibration", "step", "decoder")
_DTYPES = ("float32", "float16", "uint8", "int32", "int64", "bool")


class ManifestError(EdgeError, ValueError):
    """A model manifest or one of its graphs is missing, malformed or does not match."""




def _strict(cls: type, d: Any, where: str) -> dict[str, Any]:
    """Check ``d`` has exactly the dataclass fields of ``cls`` (those without default required)."""
    if not isinstance(d, Mapping):
        raise ManifestError(f"{where}: expected a JSON object, found {type(d).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - set(fields))
    if unknown:
        raise ManifestError(f"{where}.{unknown[0]}: unknown key; expected only {sorted(fields)}")
    for name, f in fields.items():
        if name not in d and f.default is dataclasses.MISSING \
                and f.default_factory is dataclasses.MISSING:
            raise ManifestError(f"{where}.{name}: missing key")
    return dict(d)


@dataclass(frozen=True)
class TensorSpec:
    """One graph input or output.

    Attributes:
        name: ONNX value name.
        shape: static shape.
        dtype: one of float32, float16, uint8, int32, int64, bool.
        unit: physical unit or meaning (``"rad"``, ``"uint8 RGB"``, ``"latent"``, ...).
        bounds: optional inclusive (low, high) of valid values.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    unit: str = ""
    bounds: tuple[float, float] | None = None

    @classmethod
    def from_json(cls, d: Any, where: str) -> TensorSpec:
        """Parse and check a JSON object; raises :class:`ManifestError` naming ``where``."""
        kw = _strict(cls, d, where)
        if kw["dtype"] not in _DTYPES:
            raise ManifestError(f"{where}.dtype: expected one of {list(_DTYPES)}, "
                                f"found {kw['dtype']!r}")
        shape = kw["shape"]
        if not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise ManifestError(f"{where}.shape: expected a list of non-negative integers "
                                f"(static shape), found {shape!r}")
        kw["shape"] = tuple(shape)
        if kw.get("bounds") is not None:
            kw["bounds"] = tuple(kw["bounds"])
        return cls(**kw)

    def check(self, value: np.ndarray, subject: str = "") -> None:
        """Validate an array against this spec.

        Raises:
            ManifestError: naming the subject/tensor, expected and found dtype or shape,
                non-finite floats, or values outside ``bounds``.
        """
        who = subject or self.name
        if not isinstance(value, np.ndarray):
            raise ManifestError(f"{who}: expected a NumPy array, found {type(value).__name__}")
        if value.dtype != np.dtype(self.dtype):
            raise ManifestError(f"{who}: expected dtype {self.dtype}, found {value.dtype}")
        if tuple(value.shape) != tuple(self.shape):
            raise ManifestError(f"{who}: expected shape {list(self.shape)}, "
                                f"found {list(value.shape)}")
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            raise ManifestError(f"{who}: contains NaN or inf")
        if self.bounds is not None and value.size:
            lo, hi = self.bounds
            if value.min() < lo or value.max() > hi:
                raise ManifestError(f"{who}: values must lie in [{lo}, {hi}], found "
                                    f"[{value.min()}, {value.max()}]")


@dataclass(frozen=True)
class GraphSpec:
    """One ONNX graph file of the model."""

    file: str
    sha256: str
    batch: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    @classmethod
    def from_json(cls, d: Any, where: str) -> GraphSpec:
        """Parse and check a JSON object; raises :class:`ManifestError` naming ``where``."""
        kw = _strict(cls, d, where)
        kw["inputs"] = tuple(TensorSpec.from_json(x, f"{where}.inputs[{i}]")
                             for i, x in enumerate(kw["inputs"]))
        kw["outputs"] = tuple(TensorSpec.from_json(x, f"{where}.outputs[{i}]")
                              for i, x in enumerate(kw["outputs"]))
        if "/" in kw["file"] or "\\" in kw["file"] or kw["file"].startswith("."):
            raise ManifestError(f"{where}.file: expected a plain file name, found {kw['file']!r}")
        return cls(**kw)


@dataclass(frozen=True)
class ModelContract:
    """Contract details the runtime and kernels follow (docs/architecture.md).

    Attributes:
        resolution: (H, W) of frames, px.
        latent_shape: (C, h, w).
        history_length: S, slots of the ring buffer.
        max_dof: A, action width; robots with fewer DoFs are padded and masked.
        calibration_segments: K (= max_dof), one sweep segment per DoF.
        segment_frames: L, frames per segment; the calibration input has K*L+1 frames.
        sweep_out_rows: action rows of a segment's outward phase, (first, last+1).
        frame_rate_hz: the model's frame rate; ingest resamples to it.
        action_units: units of action channels (``"rad"``; ``"m"`` for prismatic joints).
        context_shape: shape of the cached context (no batch dimension: one per cell).
        residual_decoding: frames are ``start + dec(z_t) - dec(z_0)`` when true.
        ring_order: ``"oldest_first"``: history slot s=0 is the oldest.
        history_padding: ``"start_latent_zero_action"``.
        uint8_conversion: ``"clip01_round_half_up_nan_error"``.
        action_normalisation: how actions are normalised inside the graphs.
        frame_normalisation: how frames are normalised inside the encoder.
    """

    resolution: tuple[int, int]
    latent_shape: tuple[int, int, int]
    history_length: int
    max_dof: int
    calibration_segments: int
    segment_frames: int
    sweep_out_rows: tuple[int, int]
    frame_rate_hz: float
    action_units: str
    context_shape: tuple[int, ...]
    residual_decoding: bool
    ring_order: str = "oldest_first"
    history_padding: str = "start_latent_zero_action"
    uint8_conversion: str = "clip01_round_half_up_nan_error"
    action_normalisation: str = "divided by the swept amplitude of the channel's segment"
    frame_normalisation: str = "x / 255 inside the encoder"

    @property
    def calibration_frames(self) -> int:
        """Frames of the calibration input, K*L + 1."""
        return self.calibration_segments * self.segment_frames + 1

    @classmethod
    def from_json(cls, d: Any, where: str = "model.json:contract") -> ModelContract:
        """Parse and check; raises :class:`ManifestError` naming the key path."""
        kw = _strict(cls, d, where)
        for k in ("resolution", "latent_shape", "sweep_out_rows", "context_shape"):
            kw[k] = tuple(kw[k])
        if kw["ring_order"] != "oldest_first":
            raise ManifestError(f"{where}.ring_order: expected 'oldest_first', "
                                f"found {kw['ring_order']!r}")
        return cls(**kw)


@dataclass(frozen=True)
class ModelManifest:
    """The parsed ``model.json``.

    Attributes:
        name: model name.
        variant: ``"fp32"``, ``"int8"`` or ``"fp16"``.
        opset: ONNX opset of every graph (18-20).
        contract: :class:`ModelContract`.
        graphs: ``"encoder"``, ``"calibration"``, ``"step_b{B}"``, ``"decoder_b{B}"`` ->
            :class:`GraphSpec`.
        provenance: how the weights were made (command, data seed, git commit, steps).
        evaluation: evaluation figures (free-form JSON).
        extra: files shipped beside the graphs (e.g. the keypoint regressor), free-form.
    """

    name: str
    variant: str
    opset: int
    contract: ModelContract
    graphs: Mapping[str, GraphSpec]
    provenance: Mapping[str, Any] = field(default_factory=dict)
    evaluation: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        """Batch sizes the step and decoder graphs were exported for, ascending."""
        return tuple(sorted(g.batch for n, g in self.graphs.items() if n.startswith("step_b")))

    def graph(self, kind: str, batch: int | None = None) -> GraphSpec:
        """The graph ``kind`` (for step/decoder: at ``batch``).

        Raises:
            ManifestError: naming the missing graph and what exists.
        """
        key = kind if batch is None else f"{kind}_b{batch}"
        if key not in self.graphs:
            raise ManifestError(f"model.json:graphs.{key}: no such graph; found "
                                f"{sorted(self.graphs)}")
        return self.graphs[key]

    def to_json_dict(self) -> dict[str, Any]:
        """Strict-JSON dictionary with ``schema_version``."""
        d = dataclasses.asdict(self)
        d["graphs"] = {k: dataclasses.asdict(v) for k, v in self.graphs.items()}
        return {"schema_version": MANIFEST_SCHEMA_VERSION, **json.loads(json.dumps(d))}

    @classmethod
    def from_json_dict(cls, d: Any, where: str = "model.json") -> ModelManifest:
        """Parse a dictionary; raises :class:`ManifestError` with the key path."""
        if not isinstance(d, Mapping):
            raise ManifestError(f"{where}: expected a JSON object")
        d = dict(d)
        version = d.pop("schema_version", None)
        if not isinstance(version, int):
            raise ManifestError(f"{where}:schema_version: missing or not an integer")
        if version > MANIFEST_SCHEMA_VERSION:
            raise ManifestError(f"{where}:schema_version: {version} is newer than this syncedge "
                                f"reads ({MANIFEST_SCHEMA_VERSION}); upgrade syncedge")
        kw = _strict(cls, d, where)
        if kw["variant"] not in ("fp32", "int8", "fp16"):
            raise ManifestError(f"{where}:variant: expected fp32, int8 or fp16, "
                                f"found {kw['variant']!r}")
        if not 18 <= int(kw["opset"]) <= 20:
            raise ManifestError(f"{where}:opset: expected 18-20, found {kw['opset']!r}")
        kw["contract"] = ModelContract.from_json(kw["contract"], f"{where}:contract")
        if not isinstance(kw["graphs"], Mapping):
            raise ManifestError(f"{where}:graphs: expected a JSON object")
        kw["graphs"] = {k: GraphSpec.from_json(v, f"{where}:graphs.{k}")
                        for k, v in kw["graphs"].items()}
        for base in ("encoder", "calibration"):
            if base not in kw["graphs"]:
                raise ManifestError(f"{where}:graphs.{base}: missing graph")
        steps = {g.batch for k, g in kw["graphs"].items() if k.startswith("step_b")}
        decs = {g.batch for k, g in kw["graphs"].items() if k.startswith("decoder_b")}
        if not steps or steps != decs:
            raise ManifestError(f"{where}:graphs: expected step_bN and decoder_bN for the same "
                                f"batch sizes, found step {sorted(steps)}, decoder {sorted(decs)}")
        return cls(**kw)


def load_manifest(path: str | os.PathLike[str]) -> ModelManifest:
    """Read ``model.json`` (strict JSON, no NaN); raises :class:`ManifestError` naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(f"{path}: no model manifest here") from None

    def no_constants(name: str) -> None:
        raise ManifestError(f"{path}: {name} is not strict JSON")

    try:
        d = json.loads(text, parse_constant=no_constants)
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{path}: invalid JSON: {exc}") from None
    return ModelManifest.from_json_dict(d, where=str(path))


def save_manifest(manifest: ModelManifest, path: str | os.PathLike[str]) -> Path:
    """Write ``model.json`` atomically (indented, sorted keys, strict JSON)."""
    text = json.dumps(manifest.to_json_dict(), indent=2, sort_keys=True, allow_nan=False) + "\n"
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def model_sha256(model_dir: str | os.PathLike[str]) -> str:
    """The model's identity: sha256 of its ``model.json`` bytes."""
    return sha256_file(Path(model_dir) / "model.json")


def load_model_dir(model_dir: str | os.PathLike[str], verify: bool = True) -> ModelManifest:
    """Load a model folder's manifest and (by default) verify every graph's sha256.

    Raises:
        ManifestError: naming the manifest or the graph file that is missing or altered.
    """
    model_dir = Path(model_dir)
    manifest = load_manifest(model_dir / "model.json")
    if verify:
        for key, g in manifest.graphs.items():
            p = model_dir / g.file
            if not p.is_file():
                raise ManifestError(f"{p}: graph '{key}' listed in model.json is missing")
            digest = sha256_file(p)
            if digest != g.sha256:
                raise ManifestError(f"{p}: sha256 {digest[:12]}... does not match model.json "
                                    f"({g.sha256[:12]}...); the file was altered or belongs "
                                    f"to another model")
    return manifest
