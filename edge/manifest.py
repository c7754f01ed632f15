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
    "FAMILIES",
    "CALIBRATION_MODES",
    "UPGRADE_COMMAND",
    "upgrade_manifest_dict",
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

MANIFEST_SCHEMA_VERSION = 2
GRAPH_NAMES = ("encoder", "calibration", "step", "decoder")
_DTYPES = ("float32", "float16", "uint8", "int32", "int64", "bool")
#: Model families (``contract.family``): ``latent`` (autoencoder + latent step, schema 1's
#: only family) and ``warp`` (the start frame warped inside the decoder graph).
FAMILIES = ("latent", "warp")
#: ``contract.calibration_mode``: ``calibration`` (reads the cell's calibration episode) or
#: ``history`` (trained without calibration: the start frame and the actions only).
CALIBRATION_MODES = ("calibration", "history")
#: ``contract.warping``: where warping and compositing run.
WARPING = ("none", "decoder_graph")
#: How to upgrade a schema-1 model folder (graphs unchanged, model.json rewritten).
UPGRADE_COMMAND = "syncedge export upgrade MODEL_DIR"


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
        family: one of :data:`FAMILIES`.
        calibration_mode: one of :data:`CALIBRATION_MODES`.
        warping: one of :data:`WARPING` (``decoder_graph``: GridSample inside the decoder).
        calibration_amplitude_rad: (low, high) magnitude of a DoF's calibration sweep the
            model accepts, rad (the range it was trained on); ingest refuses others.
        state_layout: for the warp family, the channel blocks of the latent (the runtime
            state): name -> (first, last + 1); empty for the latent family.
        decoder_outputs: output names of the decoder graphs, ``frames`` first
            (``robot_mask`` float32 ``[B, 1, H, W]`` in [0, 1] where the model predicts it).
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
    family: str = "latent"
    calibration_mode: str = "calibration"
    warping: str = "none"
    calibration_amplitude_rad: tuple[float, float] = (0.3, 0.5)
    state_layout: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    decoder_outputs: tuple[str, ...] = ("frames",)

    @property
    def calibration_frames(self) -> int:
        """Frames of the calibration input, K*L + 1."""
        return self.calibration_segments * self.segment_frames + 1

    @classmethod
    def from_json(cls, d: Any, where: str = "model.json:contract") -> ModelContract:
        """Parse and check keys, value types and allowed values; raises
        :class:`ManifestError` naming the key path, what was expected and what was found."""
        kw = _strict(cls, d, where)
        for k in ("history_length", "max_dof", "calibration_segments", "segment_frames"):
            _check_int(kw[k], f"{where}.{k}", low=1)
        for k, n in (("resolution", 2), ("latent_shape", 3), ("sweep_out_rows", 2)):
            kw[k] = _int_tuple(kw[k], f"{where}.{k}", n)
        kw["context_shape"] = _int_tuple(kw["context_shape"], f"{where}.context_shape", None)
        kw["frame_rate_hz"] = _check_number(kw["frame_rate_hz"], f"{where}.frame_rate_hz",
                                            positive=True)
        _check_bool(kw["residual_decoding"], f"{where}.residual_decoding")
        for k in ("action_units", "action_normalisation", "frame_normalisation"):
            _check_str(kw[k], f"{where}.{k}")
        for k, allowed in (("ring_order", ("oldest_first",)),
                           ("history_padding", ("start_latent_zero_action",)),
                           ("uint8_conversion", ("clip01_round_half_up_nan_error",)),
                           ("family", FAMILIES), ("calibration_mode", CALIBRATION_MODES),
                           ("warping", WARPING)):
            if k in kw:
                _check_str(kw[k], f"{where}.{k}", allowed)
        if "calibration_amplitude_rad" in kw:
            amp = kw["calibration_amplitude_rad"]
            if not isinstance(amp, list) or len(amp) != 2:
                raise ManifestError(f"{where}.calibration_amplitude_rad: expected [low, high] "
                                    f"rad, found {amp!r}")
            lo = _check_number(amp[0], f"{where}.calibration_amplitude_rad[0]", positive=True)
            hi = _check_number(amp[1], f"{where}.calibration_amplitude_rad[1]", positive=True)
            if lo > hi:
                raise ManifestError(f"{where}.calibration_amplitude_rad: low {lo} above high "
                                    f"{hi}")
            kw["calibration_amplitude_rad"] = (lo, hi)
        if "state_layout" in kw:
            lay = kw["state_layout"]
            if not isinstance(lay, Mapping):
                raise ManifestError(f"{where}.state_layout: expected a JSON object, found "
                                    f"{type(lay).__name__}")
            kw["state_layout"] = {str(k): _int_tuple(v, f"{where}.state_layout.{k}", 2)
                                  for k, v in lay.items()}
        if "decoder_outputs" in kw:
            outs = kw["decoder_outputs"]
            if not isinstance(outs, list) or not outs or outs[0] != "frames" \
                    or not set(outs) <= {"frames", "robot_mask"} or len(set(outs)) != len(outs):
                raise ManifestError(f"{where}.decoder_outputs: expected ['frames'] or "
                                    f"['frames', 'robot_mask'], found {outs!r}")
            kw["decoder_outputs"] = tuple(outs)
        if kw.get("family", "latent") == "warp" and not kw.get("state_layout"):
            raise ManifestError(f"{where}.state_layout: the warp family needs its state "
                                "layout")
        return cls(**kw)


def _check_bool(v: Any, where: str) -> bool:
    if not isinstance(v, bool):
        raise ManifestError(f"{where}: expected true or false, found {v!r}")
    return v


def _check_int(v: Any, where: str, low: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ManifestError(f"{where}: expected an integer, found {v!r}")
    if low is not None and v < low:
        raise ManifestError(f"{where}: expected an integer >= {low}, found {v}")
    return v


def _check_number(v: Any, where: str, positive: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ManifestError(f"{where}: expected a number, found {v!r}")
    if positive and not v > 0:
        raise ManifestError(f"{where}: expected a number > 0, found {v}")
    return float(v)


def _check_str(v: Any, where: str, allowed: tuple[str, ...] | None = None) -> str:
    if not isinstance(v, str):
        raise ManifestError(f"{where}: expected a string, found {v!r}")
    if allowed is not None and v not in allowed:
        raise ManifestError(f"{where}: expected one of {list(allowed)}, found {v!r}")
    return v


def _int_tuple(v: Any, where: str, n: int | None) -> tuple[int, ...]:
    if not isinstance(v, list) or (n is not None and len(v) != n) or not v:
        want = f"a list of {n} integers" if n else "a non-empty list of integers"
        raise ManifestError(f"{where}: expected {want}, found {v!r}")
    return tuple(_check_int(x, f"{where}[{i}]", low=0) for i, x in enumerate(v))


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
        if version < MANIFEST_SCHEMA_VERSION:
            raise ManifestError(f"{where}:schema_version: {version} is an older model schema "
                                f"than this syncedge reads ({MANIFEST_SCHEMA_VERSION}); "
                                f"upgrade the model folder with "
                                f"'{UPGRADE_COMMAND.replace('MODEL_DIR', _folder_of(where))}' "
                                f"(its graphs stay as they are), then rebuild any bundle "
                                f"made from it")
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


def _folder_of(where: str) -> str:
    """The model folder of a ``.../model.json`` location (``MODEL_DIR`` if unknown)."""
    p = Path(where.split(":")[0])
    return str(p.parent) if p.name == "model.json" else "MODEL_DIR"


def upgrade_manifest_dict(d: Mapping[str, Any], where: str = "model.json") -> dict[str, Any]:
    """A schema-1 ``model.json`` dictionary rewritten as schema 2 (the latent family; the
    accepted calibration amplitudes its training data used, 0.3-0.5 rad; history mode for a
    model trained without calibration). A schema-2 dictionary is returned unchanged.

    Raises:
        ManifestError: not a model manifest, or a schema this function does not know.
    """
    if not isinstance(d, Mapping) or not isinstance(d.get("schema_version"), int):
        raise ManifestError(f"{where}: not a model manifest (no integer schema_version)")
    out = json.loads(json.dumps(d))
    if out["schema_version"] == MANIFEST_SCHEMA_VERSION:
        return out
    if out["schema_version"] != 1:
        raise ManifestError(f"{where}:schema_version: {out['schema_version']}: expected 1 or 2")
    c = out.get("contract")
    if not isinstance(c, dict):
        raise ManifestError(f"{where}:contract: expected a JSON object")
    history = "calibrated" not in str(c.get("action_normalisation", "calibrated"))
    c.update({"family": "latent", "calibration_mode": "history" if history else "calibration",
              "warping": "none", "calibration_amplitude_rad": [0.3, 0.5], "state_layout": {},
              "decoder_outputs": ["frames"]})
    out["schema_version"] = MANIFEST_SCHEMA_VERSION
    ModelManifest.from_json_dict(out, where)  # the result must parse
    return out


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
