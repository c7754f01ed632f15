"""The model manifest (``model.json``): one reader and writer shared by export/ and edge/.

A model is a folder holding ``model.json`` and four ONNX graphs (``encoder``,
``calibration``, ``step``, ``decoder``; the step and decoder once per exported batch
size). The manifest is strict JSON with a schema version, read by the strict config reader
(:mod:`edge.config_reader`): unknown or missing keys, values of the wrong type and values
outside the allowed ones are errors that give the file and the key path. The model's
identity is the sha256 of its ``model.json`` bytes (:func:`model_sha256`), which lists the
sha256 of every graph; :func:`load_model_dir` refuses a model whose graphs do not match,
naming the file.

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
from typing import Any, Literal, get_args

import numpy as np

from edge.config_reader import Where, read_config
from edge.errors import ConfigError
from edge.fileio import atomic_write, sha256_file

__all__ = [
    "MANIFEST_SCHEMA_VERSION",
    "FAMILIES",
    "CALIBRATION_MODES",
    "VARIANTS",
    "CalibrationMode",
    "DecoderOutput",
    "Dtype",
    "Family",
    "Variant",
    "Warping",
    "UPGRADE_COMMAND",
    "CHAIN_MODEL_FORMAT",
    "ChainModelManifest",
    "is_chain_model_dir",
    "cache_identity",
    "load_any_model_dir",
    "load_chain_model_dir",
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
#: ``TensorSpec.dtype``: the tensor element types a graph may use.
Dtype = Literal["float32", "float16", "uint8", "int32", "int64", "bool"]
#: Model families (``contract.family``): ``latent`` (autoencoder + latent step, schema 1's
#: only family) and ``warp`` (the start frame warped inside the decoder graph).
Family = Literal["latent", "warp"]
FAMILIES = get_args(Family)
#: ``contract.calibration_mode``: ``calibration`` (reads the cell's calibration episode) or
#: ``history`` (trained without calibration: the start frame and the actions only).
CalibrationMode = Literal["calibration", "history"]
CALIBRATION_MODES = get_args(CalibrationMode)
#: ``contract.warping``: where warping and compositing run.
Warping = Literal["none", "decoder_graph"]
WARPING = get_args(Warping)
#: Model variants (``variant``): the FP32 export and its quantised forms.
Variant = Literal["fp32", "int8", "fp16"]
VARIANTS = get_args(Variant)
#: Outputs a decoder graph may have, ``frames`` first.
DecoderOutput = Literal["frames", "robot_mask"]
#: How to upgrade a schema-1 model folder (graphs unchanged, model.json rewritten).
UPGRADE_COMMAND = "syncedge export upgrade MODEL_DIR"
#: The ``format`` of a chain model's ``model.json`` (:class:`ChainModelManifest`): the
#: chain model has no graphs, so its manifest is its own family beside the ONNX one.
CHAIN_MODEL_FORMAT = "syncedge.chain_model"
#: How to write a chain model folder (``model.json`` only).
CHAIN_MODEL_COMMAND = "syncedge export chain-model --out MODEL_DIR"


class ManifestError(ConfigError):
    """A model manifest or one of its graphs is missing, malformed or does not match."""


class OldModelSchemaError(ManifestError):
    """A ``model.json`` of an older schema than this syncedge reads (``version``); the
    message names the command that upgrades the folder."""

    def __init__(self, message: str, version: int):
        super().__init__(message)
        self.version = version


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
    dtype: Dtype
    unit: str = ""
    bounds: tuple[float, float] | None = None

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
        warping: one of :data:`WARPING` (``decoder_graph``: the bilinear warp inside the
            decoder, as GridSample or as GatherElements, ``provenance.warp_sampler``).
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
    ring_order: Literal["oldest_first"] = "oldest_first"
    history_padding: Literal["start_latent_zero_action"] = "start_latent_zero_action"
    uint8_conversion: Literal["clip01_round_half_up_nan_error"] = \
        "clip01_round_half_up_nan_error"
    action_normalisation: str = "divided by the swept amplitude of the channel's segment"
    frame_normalisation: str = "x / 255 inside the encoder"
    family: Family = "latent"
    calibration_mode: CalibrationMode = "calibration"
    warping: Warping = "none"
    calibration_amplitude_rad: tuple[float, float] = (0.3, 0.5)
    state_layout: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    decoder_outputs: tuple[DecoderOutput, ...] = ("frames",)

    @property
    def calibration_frames(self) -> int:
        """Frames of the calibration input, K*L + 1."""
        return self.calibration_segments * self.segment_frames + 1


@dataclass(frozen=True)
class ModelManifest:
    """The parsed ``model.json``.

    Attributes:
        name: model name.
        variant: ``"fp32"``, ``"int8"`` or ``"fp16"``.
        opset: ONNX opset of every graph (18-20).
        contract: :class:`ModelContract`.
        graphs: ``"encoder"``, ``"calibration"``, ``"step_b{B}"``, ``"decoder_b{B}"`` and
            optionally ``"prepare_b{B}"`` (run once per rollout on the start latents) ->
            :class:`GraphSpec`.
        provenance: how the weights were made (command, data seed, git commit, steps).
        evaluation: evaluation figures (free-form JSON).
        extra: files shipped beside the graphs (e.g. the keypoint regressor), free-form.
    """

    name: str
    variant: Variant
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

    @property
    def has_prepare(self) -> bool:
        """Whether the model prepares its start latents once per rollout (``prepare_b{B}``
        graphs; e.g. the warp model's per-DoF flow fields, then carried in the state)."""
        return any(k.startswith("prepare_b") for k in self.graphs)

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
        """Parse and check a parsed ``model.json`` (``where``: the file, for messages).

        Raises:
            ManifestError: ``<file>:<key.path>: ...`` for a schema version this syncedge
                does not read, an unknown or missing key, a value of the wrong type or
                outside the allowed ones (see :mod:`edge.config_reader`), or a contract or
                graph set that does not hold together.
        """
        if not isinstance(d, Mapping):
            raise ManifestError(f"{where}: expected a JSON object")
        d = dict(d)
        version = d.pop("schema_version", None)
        if not isinstance(version, int) or isinstance(version, bool):
            raise ManifestError(f"{where}:schema_version: missing or not an integer")
        if version > MANIFEST_SCHEMA_VERSION:
            raise ManifestError(f"{where}:schema_version: {version} is newer than this syncedge "
                                f"reads ({MANIFEST_SCHEMA_VERSION}); upgrade syncedge")
        if version < MANIFEST_SCHEMA_VERSION:
            folder = _folder_of(where)
            if folder != "MODEL_DIR" and (Path(folder) / "bundle.json").is_file():
                # an installed bundle slot: its files are signed, never edited on the device
                raise OldModelSchemaError(
                    f"{where}:schema_version: {version} is an older model schema than this "
                    f"syncedge reads ({MANIFEST_SCHEMA_VERSION}); the folder is an installed "
                    f"bundle slot, whose signed files are not edited on the device: on the "
                    f"build machine upgrade the model folder the bundle was built from "
                    f"('{UPGRADE_COMMAND}'), then build, sign and install a new bundle "
                    f"(or 'syncedge bundle rollback' where the other slot holds a model of "
                    f"this schema)", version)
            raise OldModelSchemaError(
                f"{where}:schema_version: {version} is an older model schema than this "
                f"syncedge reads ({MANIFEST_SCHEMA_VERSION}); upgrade the model folder with "
                f"'{UPGRADE_COMMAND.replace('MODEL_DIR', folder)}' (its graphs "
                f"stay as they are), then rebuild any bundle made from it", version)
        w = Where(where, error=ManifestError)
        manifest = read_config(cls, d, w)
        if not 18 <= manifest.opset <= 20:
            w.key("opset").fail(f"expected 18-20, found {manifest.opset!r}")
        graphs = w.key("graphs")
        for key, g in manifest.graphs.items():
            _check_graph(g, graphs.key(key))
        for base in ("encoder", "calibration"):
            if base not in manifest.graphs:
                graphs.key(base).fail("missing graph")
        steps = {g.batch for k, g in manifest.graphs.items() if k.startswith("step_b")}
        decs = {g.batch for k, g in manifest.graphs.items() if k.startswith("decoder_b")}
        if not steps or steps != decs:
            graphs.fail(f"expected step_bN and decoder_bN for the same batch sizes, found step "
                        f"{sorted(steps)}, decoder {sorted(decs)}")
        preps = {g.batch for k, g in manifest.graphs.items() if k.startswith("prepare_b")}
        if preps and preps != steps:
            graphs.fail(f"expected prepare_bN (optional) for the step batch sizes "
                        f"{sorted(steps)}, found {sorted(preps)}")
        return dataclasses.replace(manifest, contract=_check_contract(manifest.contract,
                                                                      w.key("contract")))


def _at_least(v: int, w: Where, low: int) -> None:
    if v < low:
        w.fail(f"expected an integer >= {low}, found {v}")


def _positive(v: float, w: Where) -> float:
    if not v > 0:
        w.fail(f"expected a number > 0, found {v}")
    return float(v)


def _check_graph(g: GraphSpec, w: Where) -> None:
    """Value checks the types do not say: a plain file name and static shapes."""
    if "/" in g.file or "\\" in g.file or g.file.startswith("."):
        w.key("file").fail(f"expected a plain file name, found {g.file!r}")
    for role, specs in (("inputs", g.inputs), ("outputs", g.outputs)):
        for i, t in enumerate(specs):
            if any(n < 0 for n in t.shape):
                w.key(role).index(i).key("shape").fail(
                    f"expected a list of non-negative integers (static shape), found "
                    f"{list(t.shape)!r}")


def _check_contract(c: ModelContract, w: Where) -> ModelContract:
    """Value checks the types do not say (sizes, rates, ranges, the decoder outputs, the
    warp family's layout); returns the contract with its numbers as floats."""
    for k in ("history_length", "max_dof", "calibration_segments", "segment_frames"):
        _at_least(getattr(c, k), w.key(k), 1)
    for k in ("resolution", "latent_shape", "sweep_out_rows", "context_shape"):
        for i, n in enumerate(getattr(c, k)):
            _at_least(n, w.key(k).index(i), 0)
    if not c.context_shape:
        w.key("context_shape").fail("expected a non-empty list of integers, found []")
    for name, (first, stop) in c.state_layout.items():
        _at_least(first, w.key("state_layout").key(name).index(0), 0)
        _at_least(stop, w.key("state_layout").key(name).index(1), 0)
    amp = w.key("calibration_amplitude_rad")
    lo = _positive(c.calibration_amplitude_rad[0], amp.index(0))
    hi = _positive(c.calibration_amplitude_rad[1], amp.index(1))
    if lo > hi:
        amp.fail(f"low {lo} above high {hi}")
    outs = c.decoder_outputs
    if not outs or outs[0] != "frames" or len(set(outs)) != len(outs):
        w.key("decoder_outputs").fail(f"expected ['frames'] or ['frames', 'robot_mask'], found "
                                      f"{list(outs)!r}")
    if c.family == "warp" and not c.state_layout:
        w.key("state_layout").fail("the warp family needs its state layout")
    return dataclasses.replace(c, frame_rate_hz=_positive(c.frame_rate_hz,
                                                          w.key("frame_rate_hz")),
                               calibration_amplitude_rad=(lo, hi))


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


def missing_manifest(path: Path) -> ManifestError:
    """The error for a ``model.json`` that cannot be read at ``path``: the folder does not
    exist, is a file (a bundle file is named as one, with the command that installs it), or
    holds no manifest."""
    folder = path.parent
    if not folder.exists():
        return ManifestError(f"{folder}: no such model folder")
    if folder.is_file():
        if folder.suffix == ".bundle":
            return ManifestError(f"{folder}: a bundle file, not a model folder; install it "
                                 f"('syncedge bundle install {folder}') and run on the "
                                 f"active slot, or pass the model folder it was built from")
        return ManifestError(f"{folder}: a file where a model folder is expected")
    return ManifestError(f"{path}: no model manifest here")


def _read_json(path: Path) -> Any:
    """A manifest file's parsed strict JSON (no NaN); :class:`ManifestError` names the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        raise missing_manifest(path) from None

    def no_constants(name: str) -> None:
        raise ManifestError(f"{path}: {name} is not strict JSON")

    try:
        return json.loads(text, parse_constant=no_constants)
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{path}: invalid JSON: {exc}") from None


def _is_chain_dict(d: Any) -> bool:
    return isinstance(d, Mapping) and d.get("format") == CHAIN_MODEL_FORMAT


def load_manifest(path: str | os.PathLike[str]) -> ModelManifest:
    """Read an ONNX model's ``model.json`` (strict JSON, no NaN).

    Raises:
        ManifestError: naming the file; for a chain model's manifest, that the folder is
            the chain model (no graphs) and what runs it.
    """
    path = Path(path)
    d = _read_json(path)
    if _is_chain_dict(d):
        raise ManifestError(f"{path}: the chain model (format {CHAIN_MODEL_FORMAT!r}, no ONNX "
                            f"graphs): simulate, precheck and calibrate store/validate run it "
                            f"with the cell's chain calibration; this command needs an ONNX "
                            f"model folder (e.g. models/reference)")
    return ModelManifest.from_json_dict(d, where=str(path))


@dataclass(frozen=True)
class ChainModelManifest:
    """The parsed ``model.json`` of a chain model folder (``format``
    :data:`CHAIN_MODEL_FORMAT`; the folder holds nothing else).

    The chain model (:mod:`edge.runtime.chain`) has no weights: each cell's chain
    calibration, read from its calibration episode, is the model for that cell. The folder
    exists so that a signed bundle can carry it and an installed slot can name it: with it
    active, ``simulate``, ``precheck`` and ``calibrate store``/``validate`` run the chain
    model without ``--chain``.

    Attributes:
        format: :data:`CHAIN_MODEL_FORMAT`.
        name: model name.
        variant: ``"numpy"`` (the rollout runs in NumPy/OpenCV, float64, on the CPU).
        chain_format: the chain calibration format the rollout reads
            (``edge.runtime.chain.CHAIN_FORMAT``).
        chain_schema_versions: the chain calibration schema versions it reads.
        chain_model_sha256: the identity its chain calibrations have in the calibration
            cache (``edge.runtime.chain.CHAIN_MODEL_SHA256``); a runtime with another refuses
            the folder.
        recording_resolution: (H, W) px at which a technician records the calibration
            episode the chain is read from (``calibrate record`` defaults to it).
        provenance: how the folder was written (command, git commit, utc).
        evaluation: evaluation figures (free-form JSON).
    """

    format: Literal["syncedge.chain_model"]
    name: str
    variant: Literal["numpy"]
    chain_format: str
    chain_schema_versions: tuple[int, ...]
    chain_model_sha256: str
    recording_resolution: tuple[int, int]
    provenance: Mapping[str, Any] = field(default_factory=dict)
    evaluation: Mapping[str, Any] = field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        """Strict-JSON dictionary with ``schema_version``."""
        return {"schema_version": MANIFEST_SCHEMA_VERSION,
                **json.loads(json.dumps(dataclasses.asdict(self)))}

    @classmethod
    def from_json_dict(cls, d: Any, where: str = "model.json") -> ChainModelManifest:
        """Parse and check a chain model's parsed ``model.json``.

        Raises:
            ManifestError: ``<file>:<key.path>: ...`` for another schema version, an unknown
                or missing key, a value of the wrong type, or a chain format, schema or
                identity this runtime does not run (then: install a bundle built for it).
        """
        from edge.runtime.chain import CHAIN_FORMAT, CHAIN_MODEL_SHA256, CHAIN_SCHEMA_VERSIONS

        if not isinstance(d, Mapping):
            raise ManifestError(f"{where}: expected a JSON object")
        d = dict(d)
        version = d.pop("schema_version", None)
        if version != MANIFEST_SCHEMA_VERSION or isinstance(version, bool):
            raise ManifestError(f"{where}:schema_version: expected {MANIFEST_SCHEMA_VERSION} "
                                f"for a chain model, found {version!r}")
        w = Where(where, error=ManifestError)
        m = read_config(cls, d, w)
        rebuild = (f"install a chain model written by this syncedge "
                   f"('{CHAIN_MODEL_COMMAND}', then bundle it)")
        if m.chain_format != CHAIN_FORMAT:
            w.key("chain_format").fail(f"expected {CHAIN_FORMAT!r}, found {m.chain_format!r}; "
                                       f"{rebuild}")
        unread = [v for v in m.chain_schema_versions if v not in CHAIN_SCHEMA_VERSIONS]
        if not m.chain_schema_versions or unread:
            w.key("chain_schema_versions").fail(
                f"this syncedge reads chain calibration schemas {list(CHAIN_SCHEMA_VERSIONS)}, "
                f"found {list(m.chain_schema_versions)}; {rebuild}")
        if m.chain_model_sha256 != CHAIN_MODEL_SHA256:
            w.key("chain_model_sha256").fail(
                f"{m.chain_model_sha256[:12]}... is not the chain model this syncedge runs "
                f"({CHAIN_MODEL_SHA256[:12]}...); {rebuild}")
        for i, n in enumerate(m.recording_resolution):
            _at_least(n, w.key("recording_resolution").index(i), 1)
        if len(m.recording_resolution) != 2:
            w.key("recording_resolution").fail(f"expected [H, W], found "
                                               f"{list(m.recording_resolution)}")
        return m


def is_chain_model_dir(model_dir: str | os.PathLike[str]) -> bool:
    """Whether ``model_dir/model.json`` is a chain model's manifest (by its ``format``
    alone; :func:`load_chain_model_dir` checks the rest). False for a missing or
    unreadable file (the loaders name those)."""
    try:
        return _is_chain_dict(_read_json(Path(model_dir) / "model.json"))
    except ManifestError:
        return False


def load_chain_model_dir(model_dir: str | os.PathLike[str]) -> ChainModelManifest:
    """Load a chain model folder's ``model.json``.

    Raises:
        ManifestError: naming the file: not a chain model, or as
            :meth:`ChainModelManifest.from_json_dict`.
    """
    path = Path(model_dir) / "model.json"
    d = _read_json(path)
    if not _is_chain_dict(d):
        raise ManifestError(f"{path}:format: expected {CHAIN_MODEL_FORMAT!r} (a chain model), "
                            f"found {d.get('format') if isinstance(d, Mapping) else None!r}")
    return ChainModelManifest.from_json_dict(d, where=str(path))


def load_any_model_dir(model_dir: str | os.PathLike[str], verify: bool = True
                       ) -> ModelManifest | ChainModelManifest:
    """An ONNX model folder (:func:`load_model_dir`) or a chain model folder
    (:func:`load_chain_model_dir`), told apart by ``model.json``'s ``format``.

    Raises:
        ManifestError: as either loader.
    """
    if is_chain_model_dir(model_dir):
        return load_chain_model_dir(model_dir)
    return load_model_dir(model_dir, verify=verify)


def save_manifest(manifest: ModelManifest | ChainModelManifest, path: str | os.PathLike[str]) -> Path:
    """Write ``model.json`` atomically (indented, sorted keys, strict JSON)."""
    text = json.dumps(manifest.to_json_dict(), indent=2, sort_keys=True, allow_nan=False) + "\n"
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def model_sha256(model_dir: str | os.PathLike[str]) -> str:
    """The model's identity: sha256 of its ``model.json`` bytes."""
    return sha256_file(Path(model_dir) / "model.json")


def cache_identity(model_dir: str | os.PathLike[str]) -> str:
    """The ``model_sha256`` under which the calibration cache keeps this model's encoded
    calibrations: a chain model's ``chain_model_sha256`` (its chain calibrations are the
    same for every chain model folder of one format), else :func:`model_sha256`.

    Raises:
        ManifestError: a chain model folder that :func:`load_chain_model_dir` refuses.
    """
    if is_chain_model_dir(model_dir):
        return load_chain_model_dir(model_dir).chain_model_sha256
    return model_sha256(model_dir)


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
