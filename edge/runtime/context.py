"""Calibration contexts: encode a calibration episode, or take one from the cache.

A context belongs to one model: :class:`CalibrationContext` carries the sha256 of the
``model.json`` that made it, and the rollout refuses a context from another model.
The calibration cache (``edge.cache.store``) is consumed through the small
:class:`ContextSource` protocol only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from edge.episode import Episode
from edge.runtime.calibration_input import prepare_calibration
from edge.runtime.errors import ContextMismatchError, RuntimeInputError
from edge.runtime.model import WorldModel

__all__ = [
    "CalibrationContext",
    "ContextSource",
    "check_context",
    "context_from_source",
    "dof_mask_for",
    "encode_calibration",
    "model_timing",
    "pad_calibration",
]


@runtime_checkable
class ContextSource(Protocol):
    """Where cached contexts come from (the calibration cache implements this)."""

    def get_context(self, cell_id: str, camera_id: str, robot_id: str,
                    model_sha256: str) -> np.ndarray | None:
        """The cached context float32 ``[K, D, h, w]`` for this key, or None if absent."""


@dataclass(frozen=True)
class CalibrationContext:
    """A context and the model it was made for.

    Attributes:
        values: float32 ``context_shape`` (``[K, D, h, w]``).
        model_sha256: sha256 of the ``model.json`` of the model that made it.
        num_dof: controllable DoFs of the cell (channels ``[0, num_dof)``), or None if
            unknown (e.g. from the cache).
        source: where it came from (``"episode:<path>"``, ``"cache:<cell>"``), for reports.
        warnings: what the command should say about it (a calibration recorded in another
            cell than the start), one line each.
    """

    values: np.ndarray
    model_sha256: str
    num_dof: int | None = None
    source: str = ""
    warnings: tuple[str, ...] = ()


def dof_mask_for(num_dof: int, max_dof: int) -> np.ndarray:
    """uint8 ``[max_dof]``: 1 for channels ``[0, num_dof)``, 0 for the padding."""
    if not 1 <= num_dof <= max_dof:
        raise RuntimeInputError(f"DoF count: expected 1..{max_dof} (the model's max DoF), "
                                f"found {num_dof}")
    mask = np.zeros(max_dof, np.uint8)
    mask[:num_dof] = 1
    return mask


def check_context(model: WorldModel, ctx: CalibrationContext) -> None:
    """Refuse a context made by another model or of the wrong shape/dtype/values.

    Raises:
        ContextMismatchError: naming expected and found sha256 or shape.
    """
    if ctx.model_sha256 != model.sha256:
        raise ContextMismatchError(
            f"context ({ctx.source or 'given'}): made by model {ctx.model_sha256[:12]}..., "
            f"expected this model {model.sha256[:12]}... ({model.model_dir}); re-encode the "
            f"calibration episode with this model")
    want = tuple(model.contract.context_shape)
    v = ctx.values
    if not isinstance(v, np.ndarray) or v.dtype != np.float32 or v.shape != want:
        found = (v.dtype, v.shape) if isinstance(v, np.ndarray) else type(v).__name__
        raise ContextMismatchError(f"context ({ctx.source or 'given'}): expected float32 "
                                   f"{list(want)}, found {found}")
    if not np.isfinite(v).all():
        raise ContextMismatchError(f"context ({ctx.source or 'given'}): contains NaN or inf")


def model_timing(model: WorldModel, episode: Episode, where: str = "calibration episode",
                 check_amplitude: bool = True) -> tuple[Episode, dict]:
    """The calibration episode in this model's timing and resolution
    (``edge.calibrate.ingest``: a sweep recorded at any speed, rate, order, sign or frame
    size is segmented and its frames picked at the model's poses; one already in the
    model's timing is returned as it is).

    Returns:
        ``(episode, report)``: ``report["normalised"]`` says whether anything was done.
    Raises:
        CalibrationInputError (``IngestError``): naming ``where``, the DoF and the frames.
    """
    from edge.calibrate.ingest import IngestError, IngestOptions, ingest_calibration

    c = model.contract
    opts = IngestOptions(amplitude_rad=c.calibration_amplitude_rad if check_amplitude
                         else None)
    try:
        return ingest_calibration(episode, (int(c.resolution[0]), int(c.resolution[1])),
                                  c.segment_frames, opts, fps=c.frame_rate_hz)
    except IngestError as exc:
        raise IngestError(exc.code, f"{where}: {exc}", exc.dof, exc.frames) from None


def pad_calibration(model: WorldModel, episode: Episode, where: str = "calibration episode",
                    check_amplitude: bool = True
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pad a calibration episode to the model's K*L+1 frames and A channels.

    The episode is first brought into the model's timing (:func:`model_timing`). An
    episode with n < A DoFs has fewer frames (8n + 1): the last frame is repeated with
    zero actions, extra action channels are zero and the DoF mask is 1 for the first n.
    Each DoF's sweep magnitude must lie in ``contract.calibration_amplitude_rad`` unless
    ``check_amplitude`` is false (a technician's forced store).

    Returns:
        frames uint8 ``[K*L+1, H, W, 3]``, actions float32 ``[K*L+1, A]``, mask float32 ``[A]``.

    Raises:
        CalibrationInputError: wrong resolution, too many DoFs, a missing or extra DoF
            segment, a DoF without a sweep segment of its own, or a sweep magnitude outside
            the model's range (naming the DoF and the range).
        RuntimeInputError: non-finite actions.
    """
    c = model.contract
    if not np.isfinite(episode.actions).all():
        raise RuntimeInputError(f"{where}: actions contain NaN or inf")
    episode, _ = model_timing(model, episode, where, check_amplitude)
    # prepare_calibration takes any (H, W) / (first, last+1) pair (it only indexes them and
    # compares tuple(resolution)), so the contract's tuples are passed as they are
    return prepare_calibration(episode, c.max_dof, c.segment_frames, c.resolution,
                               c.sweep_out_rows, source=where,
                               amplitude_rad=c.calibration_amplitude_rad if check_amplitude
                               else None)


def encode_calibration(model: WorldModel, episode: Episode,
                       where: str = "calibration episode",
                       check_amplitude: bool = True) -> CalibrationContext:
    """Encode a calibration episode into this model's context (encoder + calibration graphs).

    Returns:
        :class:`CalibrationContext` with ``num_dof`` = the episode's DoF count.
    """
    frames, actions, mask = pad_calibration(model, episode, where, check_amplitude)
    c, h, w = model.contract.latent_shape
    latents = np.empty((len(frames), c, h, w), np.float32)
    for i, f in enumerate(frames):
        latents[i] = model.encode(f)
    values = model.calibrate(latents, actions, mask)
    return CalibrationContext(values=np.ascontiguousarray(values, np.float32),
                              model_sha256=model.sha256, num_dof=episode.num_dof,
                              source=where)


def context_from_source(source: ContextSource, model: WorldModel, cell_id: str,
                        camera_id: str, robot_id: str) -> CalibrationContext:
    """Fetch this model's context for a cell from a :class:`ContextSource`.

    Raises:
        RuntimeInputError: no context is cached for the key (names the key and the fix).
        ContextMismatchError: the cached array has the wrong shape or values.
    """
    values = source.get_context(cell_id, camera_id, robot_id, model.sha256)
    key = f"cell {cell_id!r}, camera {camera_id!r}, robot {robot_id!r}, model " \
          f"{model.sha256[:12]}..."
    if values is None:
        raise RuntimeInputError(f"calibration cache: no context for {key}; store the "
                                f"cell's calibration for this model (syncedge calibrate "
                                f"store EPISODE --model MODEL, or --cell {cell_id} instead of "
                                f"EPISODE where the cache holds the cell's episode), import "
                                f"an archive (syncedge cache import), or pass --calibration "
                                f"EPISODE")
    ctx = CalibrationContext(values=values, model_sha256=model.sha256,
                             source=f"cache:{cell_id}")
    check_context(model, ctx)
    return ctx
