"""NumPy reference of every rollout kernel; the CPU runtime uses it.

Each function has the semantics of the CUDA kernel of the same name in
``rollout_kernels.cu`` (and of the host build in ``host_kernels.cpp``), bit for bit:
integer results are identical and float results are computed with the same float32
operations in the same order, or from exact integer sums. See ``docs/kernels.md``.

Shapes: B batch items (candidates), S history slots, L = C*h*w latent elements,
A action width (max DoF), T horizon steps, H x W frame pixels.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kernels.errors import KernelInputError, NonFiniteOutputError

__all__ = [
    "PrecheckScores",
    "decode_frames",
    "decode_frames_counting",
    "goal_mse",
    "precheck_scores",
    "ring_fill",
    "ring_linearise",
    "ring_push",
    "ring_push_linearise",
    "robot_in_keepout",
    "select_action",
]

_U8_SQ = 65025.0  # 255 ** 2


def _check(name: str, arr: object, dtype: type, shape: tuple[int | None, ...]) -> np.ndarray:
    """Return ``arr`` if it is a C-contiguous ndarray of ``dtype`` and ``shape`` (None = any)."""
    if not isinstance(arr, np.ndarray):
        raise KernelInputError(f"{name}: expected a numpy array, found {type(arr).__name__}")
    if arr.dtype != np.dtype(dtype):
        raise KernelInputError(f"{name}: expected dtype {np.dtype(dtype)}, found {arr.dtype}")
    if len(arr.shape) != len(shape) or any(
        want is not None and got != want for got, want in zip(arr.shape, shape, strict=False)
    ):
        want_s = "[" + ", ".join("*" if d is None else str(d) for d in shape) + "]"
        raise KernelInputError(f"{name}: expected shape {want_s}, found {list(arr.shape)}")
    if not arr.flags.c_contiguous:
        raise KernelInputError(f"{name}: expected a C-contiguous array, found a strided view")
    return arr


def _check_ring(ring_latents: np.ndarray, ring_actions: np.ndarray) -> tuple[int, int, int, int]:
    _check("ring_latents", ring_latents, np.float32, (None, None, None))
    b, s, lat = ring_latents.shape
    _check("ring_actions", ring_actions, np.float32, (b, s, None))
    if s < 1:
        raise KernelInputError("ring_latents: expected at least one history slot, found 0")
    return b, s, lat, ring_actions.shape[2]


def _check_index(name: str, value: int, size: int) -> int:
    if not isinstance(value, (int, np.integer)) or not 0 <= int(value) < size:
        raise KernelInputError(f"{name}: expected an integer in [0, {size}), found {value!r}")
    return int(value)


def ring_fill(ring_latents: np.ndarray, ring_actions: np.ndarray, start_latent: np.ndarray) -> int:
    """Reset the ring: every slot holds the start latent and a zero action.

    Args:
        ring_latents: float32 ``[B, S, L]``, written in place.
        ring_actions: float32 ``[B, S, A]``, written in place (all +0.0).
        start_latent: float32 ``[B, L]``, the encoded start frame of each item.

    Returns:
        The next write index, 0.

    Raises:
        KernelInputError: wrong dtype, shape or layout.
    """
    b, _, lat, _ = _check_ring(ring_latents, ring_actions)
    _check("start_latent", start_latent, np.float32, (b, lat))
    ring_latents[...] = start_latent[:, None, :]
    ring_actions[...] = 0.0
    return 0


def ring_push(
    ring_latents: np.ndarray,
    ring_actions: np.ndarray,
    w: int,
    new_latent: np.ndarray,
    new_action: np.ndarray,
    dof_mask: np.ndarray,
) -> int:
    """Write slot ``w`` of every item: the new latent and the action that produced it.

    Action channels whose mask is 0 are stored as exactly +0.0 (whatever the input,
    NaN included).

    Args:
        ring_latents: float32 ``[B, S, L]``, written in place.
        ring_actions: float32 ``[B, S, A]``, written in place.
        w: write index in ``[0, S)``.
        new_latent: float32 ``[B, L]``.
        new_action: float32 ``[B, A]``.
        dof_mask: uint8 ``[A]``; nonzero = controllable.

    Returns:
        The next write index ``(w + 1) % S``.

    Raises:
        KernelInputError: wrong dtype, shape, layout or index.
    """
    b, s, lat, a = _check_ring(ring_latents, ring_actions)
    w = _check_index("w", w, s)
    _check("new_latent", new_latent, np.float32, (b, lat))
    _check("new_action", new_action, np.float32, (b, a))
    _check("dof_mask", dof_mask, np.uint8, (a,))
    ring_latents[:, w, :] = new_latent
    ring_actions[:, w, :] = np.where(dof_mask != 0, new_action, np.float32(0.0))
    return (w + 1) % s


def ring_linearise(
    ring_latents: np.ndarray,
    ring_actions: np.ndarray,
    w_next: int,
    hist_latents: np.ndarray | None = None,
    hist_actions: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Gather the history in chronological order: ``hist[b, s] = ring[b, (w_next + s) % S]``.

    Position 0 is the oldest entry, ``S - 1`` the newest (``w_next`` is the slot after
    the newest, i.e. the next write index).

    Args:
        ring_latents: float32 ``[B, S, L]``.
        ring_actions: float32 ``[B, S, A]``.
        w_next: next write index in ``[0, S)``.
        hist_latents: optional float32 ``[B, S, L]`` output (allocated if None).
        hist_actions: optional float32 ``[B, S, A]`` output (allocated if None).

    Returns:
        ``(hist_latents, hist_actions)``.

    Raises:
        KernelInputError: wrong dtype, shape, layout or index.
    """
    b, s, lat, a = _check_ring(ring_latents, ring_actions)
    w_next = _check_index("w_next", w_next, s)
    if hist_latents is None:
        hist_latents = np.empty_like(ring_latents)
    if hist_actions is None:
        hist_actions = np.empty_like(ring_actions)
    _check("hist_latents", hist_latents, np.float32, (b, s, lat))
    _check("hist_actions", hist_actions, np.float32, (b, s, a))
    order = (w_next + np.arange(s)) % s
    hist_latents[...] = ring_latents[:, order, :]
    hist_actions[...] = ring_actions[:, order, :]
    return hist_latents, hist_actions


def ring_push_linearise(
    ring_latents: np.ndarray,
    ring_actions: np.ndarray,
    hist_latents: np.ndarray,
    hist_actions: np.ndarray,
    w: int,
    new_latent: np.ndarray,
    new_action: np.ndarray,
    dof_mask: np.ndarray,
) -> int:
    """:func:`ring_push` then :func:`ring_linearise` with the new write index, in one call.

    Args and errors as for those two functions; the history arrays are written in place.

    Returns:
        The next write index ``(w + 1) % S``.
    """
    w_next = ring_push(ring_latents, ring_actions, w, new_latent, new_action, dof_mask)
    ring_linearise(ring_latents, ring_actions, w_next, hist_latents, hist_actions)
    return w_next


def select_action(
    actions: np.ndarray, dof_mask: np.ndarray, t: int, out: np.ndarray | None = None
) -> np.ndarray:
    """The masked action of step ``t`` of every candidate.

    Args:
        actions: float32 ``[B, T, A]`` candidate actions (SI units).
        dof_mask: uint8 ``[A]``; masked channels become +0.0.
        t: step index; clamped to ``[0, T - 1]`` like the kernel.
        out: optional float32 ``[B, A]`` output.

    Returns:
        float32 ``[B, A]``.

    Raises:
        KernelInputError: wrong dtype, shape or layout; T == 0.
    """
    _check("actions", actions, np.float32, (None, None, None))
    b, horizon, a = actions.shape
    if horizon < 1:
        raise KernelInputError("actions: expected at least one step, found T = 0")
    _check("dof_mask", dof_mask, np.uint8, (a,))
    if out is None:
        out = np.empty((b, a), np.float32)
    _check("out", out, np.float32, (b, a))
    tc = min(max(int(t), 0), horizon - 1)
    out[...] = np.where(dof_mask != 0, actions[:, tc, :], np.float32(0.0))
    return out


def decode_frames_counting(
    x: np.ndarray, offset: np.ndarray | None = None, out: np.ndarray | None = None
) -> tuple[np.ndarray, int]:
    """Decoder output to uint8 HWC frames, returning the NaN count instead of raising.

    Per value: ``v = x + offset`` (float32); NaN gives 0 and is counted; clip to
    ``[0, 1]``; ``u8 = floor(v * 255 + 0.5)`` evaluated exactly on the float32 product
    ``v * 255`` (round half up). ``+inf`` clips to 255 and ``-inf`` to 0.

    Args:
        x: float32 ``[B, 3, H, W]``, the decoder output (nominally in [0, 1]).
        offset: optional float32 ``[B, 3, H, W]`` (residual decoding:
            ``start_frame / 255 - dec(z_0)``); None for plain decoding.
        out: optional uint8 ``[B, H, W, 3]`` output.

    Returns:
        ``(frames, nan_count)``: uint8 ``[B, H, W, 3]`` (RGB) and the number of NaN values.

    Raises:
        KernelInputError: wrong dtype, shape or layout.
    """
    _check("x", x, np.float32, (None, 3, None, None))
    b, _, h, w = x.shape
    if offset is not None:
        _check("offset", offset, np.float32, x.shape)
    with np.errstate(invalid="ignore"):  # inf + -inf is NaN by design: counted below
        v = x + (np.float32(0.0) if offset is None else offset)
    nan = np.isnan(v)
    v = np.clip(np.where(nan, np.float32(0.0), v), np.float32(0.0), np.float32(1.0))
    t = v * np.float32(255.0)
    r = np.floor(t)
    u8 = (r + (t - r >= np.float32(0.5))).astype(np.uint8)
    if out is None:
        out = np.empty((b, h, w, 3), np.uint8)
    _check("out", out, np.uint8, (b, h, w, 3))
    out[...] = u8.transpose(0, 2, 3, 1)
    return out, int(np.count_nonzero(nan))


def decode_frames(
    x: np.ndarray, offset: np.ndarray | None = None, out: np.ndarray | None = None
) -> np.ndarray:
    """Decoder output to uint8 HWC frames; NaN anywhere is an error.

    Same arguments and conversion as :func:`decode_frames_counting`.

    Returns:
        uint8 ``[B, H, W, 3]`` (RGB).

    Raises:
        KernelInputError: wrong dtype, shape or layout.
        NonFiniteOutputError: ``x + offset`` held NaN values; the message gives the count.
    """
    frames, nan_count = decode_frames_counting(x, offset, out)
    if nan_count:
        raise NonFiniteOutputError(nan_count)
    return frames


class PrecheckScores(NamedTuple):
    """Per-candidate pre-check scores of one predicted step.

    Attributes:
        moved_in_keepout: int32 ``[B]``, moved pixels inside the keep-out mask.
        motion_energy: float32 ``[B]``, mean over keep-out pixels and channels of
            ``(|pred - start| / 255)^2`` (0 when the mask is empty).
        goal_mse: float32 ``[B]``, mean over all pixels and channels of
            ``((pred - goal) / 255)^2``; None when no goal was given.
    """

    moved_in_keepout: np.ndarray
    motion_energy: np.ndarray
    goal_mse: np.ndarray | None


def _mean_sq(sum_sq: np.ndarray, n_values: int) -> np.ndarray:
    if n_values <= 0:
        return np.zeros(sum_sq.shape, np.float32)
    return (sum_sq.astype(np.float64) / (_U8_SQ * float(n_values))).astype(np.float32)


def _sum_sq_diff(pred: np.ndarray, ref: np.ndarray) -> np.ndarray:
    d = pred.astype(np.int32) - ref.astype(np.int32)  # (B, H, W, 3)
    return (d * d).sum(axis=-1, dtype=np.int64)  # (B, H, W)


def goal_mse(pred: np.ndarray, goal: np.ndarray) -> np.ndarray:
    """Distance of every candidate's predicted frame to a goal frame.

    Args:
        pred: uint8 ``[B, H, W, 3]``.
        goal: uint8 ``[H, W, 3]``.

    Returns:
        float32 ``[B]``: mean over pixels and channels of ``((pred - goal) / 255)^2``,
        from the exact integer sum (one float64 division, rounded once to float32).

    Raises:
        KernelInputError: wrong dtype, shape or layout.
    """
    _check("pred", pred, np.uint8, (None, None, None, 3))
    _, h, w, _ = pred.shape
    _check("goal", goal, np.uint8, (h, w, 3))
    return _mean_sq(_sum_sq_diff(pred, goal[None]).sum(axis=(1, 2)), 3 * h * w)


def precheck_scores(
    pred: np.ndarray,
    start: np.ndarray,
    keepout: np.ndarray,
    threshold: int,
    goal: np.ndarray | None = None,
) -> PrecheckScores:
    """Pre-check scores of every candidate for one predicted step.

    A pixel moved if ``max over channels |pred - start| > threshold``.

    Args:
        pred: uint8 ``[B, H, W, 3]``, the predicted frames.
        start: uint8 ``[H, W, 3]``, the start frame.
        keepout: uint8 ``[H, W]``; nonzero = inside a keep-out region.
        threshold: int in ``[0, 255]`` (pixel value units).
        goal: optional uint8 ``[H, W, 3]`` goal frame.

    Returns:
        :class:`PrecheckScores`.

    Raises:
        KernelInputError: wrong dtype, shape, layout or threshold.
    """
    _check("pred", pred, np.uint8, (None, None, None, 3))
    _, h, w, _ = pred.shape
    _check("start", start, np.uint8, (h, w, 3))
    _check("keepout", keepout, np.uint8, (h, w))
    if not isinstance(threshold, (int, np.integer)) or not 0 <= int(threshold) <= 255:
        raise KernelInputError(f"threshold: expected an integer in [0, 255], found {threshold!r}")
    inside = keepout != 0
    d = np.abs(pred.astype(np.int32) - start.astype(np.int32))  # (B, H, W, 3)
    moved = ((d.max(axis=-1) > int(threshold)) & inside).sum(axis=(1, 2)).astype(np.int32)
    energy_sum = ((d * d).sum(axis=-1, dtype=np.int64) * inside).sum(axis=(1, 2))
    energy = _mean_sq(energy_sum, 3 * int(np.count_nonzero(inside)))
    mse = None if goal is None else goal_mse(pred, goal)
    return PrecheckScores(moved, energy, mse)


def robot_in_keepout(robot_mask: np.ndarray, keepout: np.ndarray) -> np.ndarray:
    """Predicted robot pixels inside the keep-out mask, per item (``se_robot_in_keepout``).

    A pixel counts when ``robot_mask >= 0.5`` (a float32 comparison: exactly 0.5 is robot,
    the next float32 below is not, NaN is not) and ``keepout`` is nonzero there. The
    pre-check's keep-out verdict on the predicted robot mask compares these counts with
    ``max_robot_pixels``.

    Args:
        robot_mask: float32 ``[B, H, W]``, the decoder's predicted robot mask (0..1; its
            ``[B, 1, H, W]`` output without the channel axis). B may be any number of
            items, e.g. N candidates x T steps flattened.
        keepout: uint8 ``[H, W]``; nonzero = inside a keep-out region.

    Returns:
        int32 ``[B]``: the counts (0 for an empty keep-out mask).

    Raises:
        KernelInputError: wrong dtype, shape or layout.
    """
    _check("robot_mask", robot_mask, np.float32, (None, None, None))
    _, h, w = robot_mask.shape
    _check("keepout", keepout, np.uint8, (h, w))
    inside = (robot_mask >= np.float32(0.5)) & (keepout != 0)[None]
    return inside.sum(axis=(1, 2), dtype=np.int64).astype(np.int32)
