"""The fixed-shape rollout loop (CPU path; the NumPy twins of the kernels in ``kernels/``).

Three objects, as in docs/runtime.md:

- :class:`~edge.runtime.model.WorldModel`: immutable, shared.
- :class:`RolloutParams`: a cheap per-request options object (the DoF mask).
- :class:`Rollout`: all mutable state, preallocated once for the maximum horizon and
  number of candidates: the ring buffer of latents and actions, the chronological
  history, the candidate actions, the decoder output and the output frames. Every step
  has the same shapes; N candidates run in chunks of an exported batch size B (padded).

One step t (for each chunk of B candidates; contracts in docs/architecture.md):
``hist = ring_linearise(ring, w)``; ``a_t = select_action(actions, mask, t)``;
``z_{t+1} = step(hist, a_t, context)``; ``w = ring_push(ring, w, z_{t+1}, a_t, mask)``;
``frame_{t+1} = decode_frames(dec(z_{t+1}) [+ start/255 - dec(z_0)])``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from edge.runtime.context import CalibrationContext, check_context
from edge.runtime.errors import CallOrderError, RolloutInputError
from edge.runtime.model import WorldModel
from kernels import reference as ref
from kernels.errors import NonFiniteOutputError

__all__ = ["Rollout", "RolloutParams"]


@dataclass(frozen=True)
class RolloutParams:
    """Per-request options.

    Attributes:
        dof_mask: 0/1 per action channel (length A); None takes the first ``num_dof``
            channels of the context (all A if the context does not know its DoF count).
    """

    dof_mask: tuple[int, ...] | None = None


class Rollout:
    """Mutable rollout state for one model and one calibration context.

    Args:
        model: an activated :class:`WorldModel`.
        context: the cell's :class:`CalibrationContext` (must belong to ``model``).
        params: :class:`RolloutParams` (defaults if None).
        max_horizon: the most steps T any later :meth:`reset` may ask for.
        max_candidates: the most candidates N any later :meth:`reset` may ask for.

    Call order: :meth:`reset`, then :meth:`step` up to T times (or :meth:`run` /
    :meth:`stream`, which reset themselves); :meth:`frames` returns what was predicted.

    Raises:
        ContextMismatchError: the context belongs to another model or has the wrong shape.
        RolloutInputError: a bad DoF mask or sizes.
    """

    def __init__(self, model: WorldModel, context: CalibrationContext,
                 params: RolloutParams | None = None, max_horizon: int = 64,
                 max_candidates: int = 1):
        check_context(model, context)
        c = model.contract
        self.model, self.context = model, context
        self.params = params or RolloutParams()
        self.mask = self._make_mask(c.max_dof)  # (A,) uint8
        if max_horizon < 1:
            raise RolloutInputError(f"max_horizon: expected >= 1, found {max_horizon}")
        self.max_horizon = int(max_horizon)
        self.max_candidates = int(max_candidates)
        self.batch, self.chunks = model.plan_batches(self.max_candidates)
        p, s, a = self.batch * self.chunks, c.history_length, c.max_dof
        ch, lh, lw = c.latent_shape
        h, w = c.resolution
        lat = ch * lh * lw
        # All state, allocated once.
        self.ring_latents = np.zeros((p, s, lat), np.float32)  # (P, S, L)
        self.ring_actions = np.zeros((p, s, a), np.float32)  # (P, S, A)
        self.hist_latents = np.zeros((p, s, lat), np.float32)  # (P, S, L) oldest first
        self.hist_actions = np.zeros((p, s, a), np.float32)  # (P, S, A)
        self.actions = np.zeros((p, self.max_horizon, a), np.float32)  # (P, T, A)
        self.action_t = np.zeros((p, a), np.float32)  # (P, A)
        self.start_latents = np.zeros((p, lat), np.float32)  # (P, L)
        self.next_latents = np.zeros((p, ch, lh, lw), np.float32)  # (P, C, h, w)
        self.decoded = np.zeros((p, 3, h, w), np.float32)  # (P, 3, H, W)
        self.offset = np.zeros((p, 3, h, w), np.float32) if c.residual_decoding else None
        self.out_frames = np.zeros((self.max_horizon, p, h, w, 3), np.uint8)  # (T, P, H, W, 3)
        # Views made once, so a step creates no arrays of its own.
        hist5 = self.hist_latents.reshape(p, s, ch, lh, lw)
        self._next_flat = self.next_latents.reshape(p, lat)
        bsz = self.batch
        self._step_feeds = [{"history_latents": hist5[k * bsz:(k + 1) * bsz],
                             "history_actions": self.hist_actions[k * bsz:(k + 1) * bsz],
                             "action": self.action_t[k * bsz:(k + 1) * bsz],
                             "context": context.values} for k in range(self.chunks)]
        self._next = [self.next_latents[k * bsz:(k + 1) * bsz] for k in range(self.chunks)]
        self._dec = [self.decoded[k * bsz:(k + 1) * bsz] for k in range(self.chunks)]
        self._w = 0
        self._t = -1  # -1: reset() not called
        self._n = 0
        self._horizon = 0
        self._active_chunks = 0

    def _make_mask(self, a: int) -> np.ndarray:
        if self.params.dof_mask is not None:
            m = np.asarray(self.params.dof_mask)
            if m.shape != (a,) or not np.isin(m, (0, 1)).all() or not m.any():
                raise RolloutInputError(f"dof_mask: expected {a} values of 0/1 with at least "
                                        f"one 1, found {self.params.dof_mask!r}")
            return m.astype(np.uint8)
        m = np.zeros(a, np.uint8)
        m[:self.context.num_dof or a] = 1
        return m

    # -- state -----------------------------------------------------------------------
    @property
    def steps_taken(self) -> int:
        """Steps predicted since the last :meth:`reset` (0 before any)."""
        return max(self._t, 0)

    @property
    def horizon(self) -> int:
        """T of the current request (0 before :meth:`reset`)."""
        return self._horizon

    @property
    def num_candidates(self) -> int:
        """N of the current request."""
        return self._n

    @property
    def action_width(self) -> int:
        """Controllable channels (ones in the DoF mask); inputs may also be A wide."""
        return int(self.mask.sum())

    def check_actions(self, x: np.ndarray, what: str) -> np.ndarray:
        """Check an action array ``[..., A']`` and return it A wide (float32 ``[..., A]``).

        A' must be the controllable DoF count (ones in the mask) or the model's A.

        Raises:
            RolloutInputError: naming ``what``, for a wrong width, dtype or NaN/inf.
        """
        a = self.model.contract.max_dof
        n_ctrl = self.action_width
        x = np.asarray(x)
        if x.dtype.kind not in "fiu":
            raise RolloutInputError(f"{what}: expected numbers, found dtype {x.dtype}")
        if x.shape[-1] not in (n_ctrl, a):
            want = f"{a}" if n_ctrl == a else f"{n_ctrl} (the cell's DoFs) or {a}"
            raise RolloutInputError(f"{what}: expected {want} action channels (the model's "
                                    f"max DoF is {a}), found {x.shape[-1]}")
        x = x.astype(np.float32)
        bad = ~np.isfinite(x)
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            raise RolloutInputError(f"{what}: expected finite values, found {x[idx]} at "
                                    f"index {list(idx)}")
        if x.shape[-1] == a:
            return x
        full = np.zeros((*x.shape[:-1], a), np.float32)
        full[..., self.mask != 0] = x
        return full

    def reset(self, start: np.ndarray, actions: np.ndarray | None = None,
              horizon: int | None = None) -> None:
        """Start a rollout: encode the start frame(s) and fill the ring buffer.

        Args:
            start: uint8 ``[H, W, 3]`` (one start for every candidate) or ``[N, H, W, 3]``.
            actions: candidate actions ``[N, T, A']`` or ``[T, A']`` (one candidate), in SI
                units, A' = the controllable DoFs or the model's A. None (policy mode):
                ``horizon`` zero actions, each step's action is given to :meth:`step`.
            horizon: steps when ``actions`` is None.

        Raises:
            RolloutInputError: wrong width, NaN/inf, wrong frame size, more candidates or
                steps than this rollout was allocated for.
        """
        c = self.model.contract
        if actions is None:
            if horizon is None:
                raise RolloutInputError("reset: give candidate actions or a horizon")
            n_start = 1 if np.ndim(start) == 3 else int(np.shape(start)[0])
            acts = np.zeros((n_start, int(horizon), c.max_dof), np.float32)
        else:
            acts = self.check_actions(actions, "actions")
            if acts.ndim == 2:
                acts = acts[None]
            if acts.ndim != 3:
                raise RolloutInputError(f"actions: expected shape [N, T, A] or [T, A], found "
                                        f"{list(np.shape(actions))}")
        n, t = acts.shape[:2]
        if not 1 <= n <= self.max_candidates:
            raise RolloutInputError(f"actions: expected 1..{self.max_candidates} candidates "
                                    f"(max_candidates of this rollout), found {n}")
        if not 1 <= t <= self.max_horizon:
            raise RolloutInputError(f"actions: expected 1..{self.max_horizon} steps "
                                    f"(max_horizon of this rollout), found {t}")
        h, w = c.resolution
        st = np.asarray(start)
        if st.dtype != np.uint8 or st.shape[-3:] != (h, w, 3) or st.ndim not in (3, 4) \
                or (st.ndim == 4 and st.shape[0] not in (1, n)):
            raise RolloutInputError(f"start frame: expected uint8 [{h}, {w}, 3] or "
                                    f"[{n}, {h}, {w}, 3] (the model's resolution), found "
                                    f"{st.dtype} {list(st.shape)}")
        starts = st[None] if st.ndim == 3 else st
        z = [self.model.encode(f).reshape(-1) for f in starts]
        for i in range(self.start_latents.shape[0]):
            self.start_latents[i] = z[i] if i < len(z) else z[0]
        self.actions[...] = 0.0
        self.actions[:n, :t] = acts
        self._w = ref.ring_fill(self.ring_latents, self.ring_actions, self.start_latents)
        self._n, self._horizon, self._t = n, t, 0
        self._active_chunks = -(-n // self.batch)
        if self.offset is not None:
            b = self.batch
            for k in range(self._active_chunks):
                self.model.decode(b, self.start_latents[k * b:(k + 1) * b].reshape(
                    self._next[k].shape), self._dec[k])
            img = starts.transpose(0, 3, 1, 2).astype(np.float32) / np.float32(255.0)
            idx = np.minimum(np.arange(self.offset.shape[0]), len(starts) - 1)
            np.subtract(img[idx], self.decoded, out=self.offset)

    def step(self, action: np.ndarray | None = None) -> np.ndarray:
        """Predict the next frame of every candidate.

        Args:
            action: optional ``[N, A']`` action of this step (policy mode); by default the
                step's row of the actions given to :meth:`reset`.

        Returns:
            uint8 ``[N, H, W, 3]``, a view of the output buffer (valid until the next reset).

        Raises:
            CallOrderError: :meth:`reset` was not called, or every step is taken.
            RolloutInputError: a bad ``action``; the decoder produced NaN.
        """
        if self._t < 0:
            raise CallOrderError("Rollout.step: call reset() first")
        if self._t >= self._horizon:
            raise CallOrderError(f"Rollout.step: all {self._horizon} steps are taken; call "
                                 f"reset() to start again")
        t, b = self._t, self.batch
        if action is not None:
            full = self.check_actions(action, f"action of step {t}")
            if full.shape != (self._n, self.model.contract.max_dof):
                raise RolloutInputError(f"action of step {t}: expected [{self._n}, A], found "
                                        f"{list(np.shape(action))}")
            self.actions[:self._n, t] = full
        ref.select_action(self.actions, self.mask, t, out=self.action_t)
        ref.ring_linearise(self.ring_latents, self.ring_actions, self._w, self.hist_latents,
                           self.hist_actions)
        for k in range(self._active_chunks):
            self.model.step(b, self._step_feeds[k], self._next[k])
        self._w = ref.ring_push(self.ring_latents, self.ring_actions, self._w,
                                self._next_flat, self.action_t, self.mask)
        for k in range(self._active_chunks):
            self.model.decode(b, self._next[k], self._dec[k])
        try:
            ref.decode_frames(self.decoded, self.offset, out=self.out_frames[t])
        except NonFiniteOutputError as exc:
            raise RolloutInputError(f"step {t}: the decoder produced NaN ({exc}); check the "
                                    f"model and the inputs") from exc
        self._t = t + 1
        return self.out_frames[t, :self._n]

    def frames(self) -> np.ndarray:
        """The frames predicted since :meth:`reset`: uint8 ``[N, t, H, W, 3]`` (a copy)."""
        if self._t < 0:
            raise CallOrderError("Rollout.frames: call reset() first")
        return np.ascontiguousarray(self.out_frames[:self._t, :self._n].transpose(1, 0, 2, 3, 4))

    def run(self, start: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Reset and predict every step: frames uint8 ``[N, T, H, W, 3]``."""
        self.reset(start, actions)
        for _ in range(self._horizon):
            self.step()
        return self.frames()

    def stream(self, start: np.ndarray, actions: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
        """Reset, then yield ``(t, frames uint8 [N, H, W, 3])`` as each step is predicted."""
        self.reset(start, actions)
        for t in range(self._horizon):
            yield t, self.step()
