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
``frame_{t+1} = decode_frames(dec(z_{t+1}) [+ start/255 - dec(z_0)])``; with a keep-out
mask, ``robot_{t+1} = robot_in_keepout(robot_mask(z_{t+1}), keepout)`` (pixels >= 0.5).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, overload

import numpy as np

from edge.runtime.context import CalibrationContext, check_context
from edge.runtime.errors import CallOrderError, RolloutInputError
from edge.runtime.model import WorldModel
from kernels import reference as ref
from kernels.errors import NonFiniteOutputError

if TYPE_CHECKING:
    from edge.runtime.device_rollout import DeviceRollout

__all__ = ["Rollout", "RolloutParams"]


@dataclass(frozen=True)
class _PlanViews:
    """Views of the rollout state for one plan: ``batch`` B, ``chunks``, ``rows`` = B*chunks."""

    batch: int
    chunks: int
    rows: int
    ring_latents: np.ndarray  # (P, S, L)
    ring_actions: np.ndarray  # (P, S, A)
    hist_latents: np.ndarray  # (P, S, L)
    hist_actions: np.ndarray  # (P, S, A)
    actions: np.ndarray  # (P, T, A)
    action_t: np.ndarray  # (P, A)
    next_flat: np.ndarray  # (P, L)
    decoded: np.ndarray  # (P, 3, H, W)
    offset: np.ndarray | None  # (P, 3, H, W)
    feeds: list[dict[str, np.ndarray]]  # per chunk, the step graph's inputs
    next: list[np.ndarray]  # per chunk (B, C, h, w)
    dec: list[np.ndarray]  # per chunk (B, 3, H, W)


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
        robot_mask: keep the decoder's predicted robot mask of every step
            (:meth:`robot_masks`, float32 ``[N, t, H, W]``); the host path only (the device
            path keeps only the counts below).
        keepout: uint8 (or bool) ``[H, W]`` keep-out mask, nonzero inside (e.g.
            :func:`edge.precheck.rules.rasterise` of the rules' regions): count, per step
            and candidate, the predicted robot-mask pixels >= 0.5 inside it
            (:meth:`robot_keepout_counts`, int32 ``[N, t]``), on both paths: on the host
            from each step's robot mask with ``kernels.reference.robot_in_keepout``, on the
            device with its kernel twin ``se_robot_in_keepout`` inside the captured step
            (the masks stay on the GPU; the counts come back with the frames). None: no
            counts.

    Call order: :meth:`reset`, then :meth:`step` up to T times (or :meth:`run` /
    :meth:`stream`, which reset themselves); :meth:`frames` returns what was predicted.

    Raises:
        ContextMismatchError: the context belongs to another model or has the wrong shape.
        RolloutInputError: a bad DoF mask or sizes; ``robot_mask`` or ``keepout`` for a
            model that predicts no robot mask; ``robot_mask`` on the device path; a
            ``keepout`` of the wrong dtype or shape.
    """

    def __init__(self, model: WorldModel, context: CalibrationContext,
                 params: RolloutParams | None = None, max_horizon: int = 64,
                 max_candidates: int = 1, robot_mask: bool = False,
                 keepout: np.ndarray | None = None):
        check_context(model, context)
        c = model.contract
        self.model, self.context = model, context
        self.params = params or RolloutParams()
        self.mask = self._make_mask(c.max_dof)  # (A,) uint8
        if max_horizon < 1:
            raise RolloutInputError(f"max_horizon: expected >= 1, found {max_horizon}")
        self.max_horizon = int(max_horizon)
        self.max_candidates = int(max_candidates)
        # The plan for the most candidates sizes the state; each reset() then picks the
        # smallest exported batch that fits its own N (one candidate never runs a b16 graph).
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
        # The decoder's robot mask per step, kept only when asked (the step and the decoder
        # then run as two sessions, the decoder once for both outputs; the pre-check decides
        # keep-out on it).
        self.out_masks: np.ndarray | None = None  # (T, P, 1, H, W)
        if robot_mask:
            if not model.has_robot_mask:
                raise RolloutInputError(f"robot_mask: {model.model_dir} predicts no robot "
                                        f"mask (model.json contract.decoder_outputs)")
            if model.on_device:
                raise RolloutInputError("robot_mask: the device rollout does not keep robot "
                                        "masks, only their counts inside a keep-out mask "
                                        "(keepout=...); run this rollout with the CPU "
                                        "backend to keep the masks")
            self.out_masks = np.zeros((self.max_horizon, p, 1, h, w), np.float32)
        # Robot-mask pixels inside the keep-out mask per step, when a keep-out mask is given.
        self.keepout: np.ndarray | None = None  # (H, W) uint8
        self.out_robot: np.ndarray | None = None  # (T, P) int32
        self._step_mask: np.ndarray | None = None  # (P, 1, H, W): the step's mask, not kept
        if keepout is not None:
            self.keepout = self._check_keepout(keepout, h, w)
            self.out_robot = np.zeros((self.max_horizon, p), np.int32)
            if self.out_masks is None and not model.on_device:
                self._step_mask = np.zeros((p, 1, h, w), np.float32)
        self._views: dict[tuple[int, int], _PlanViews] = {}
        self._v = self._plan_views(self.batch, self.chunks)
        self._w = 0
        self._t = -1  # -1: reset() not called
        self._n = 0
        self._horizon = 0
        self._fetched = -1
        self._device: DeviceRollout | None = None
        if model.on_device:
            from edge.runtime.device_rollout import DeviceRollout

            self._device = DeviceRollout(model, context, self.max_horizon)

    def _plan_views(self, batch: int, chunks: int) -> _PlanViews:
        """Views of the state for one plan (B, chunks), made once per plan."""
        key = (batch, chunks)
        if key not in self._views:
            c = self.model.contract
            p, s = batch * chunks, c.history_length
            hist5 = self.hist_latents[:p].reshape(p, s, *c.latent_shape)
            v = _PlanViews(
                batch=batch, chunks=chunks, rows=p,
                ring_latents=self.ring_latents[:p], ring_actions=self.ring_actions[:p],
                hist_latents=self.hist_latents[:p], hist_actions=self.hist_actions[:p],
                actions=self.actions[:p], action_t=self.action_t[:p],
                next_flat=self.next_latents[:p].reshape(p, -1), decoded=self.decoded[:p],
                offset=None if self.offset is None else self.offset[:p],
                feeds=[{"history_latents": hist5[k * batch:(k + 1) * batch],
                        "history_actions": self.hist_actions[k * batch:(k + 1) * batch],
                        "action": self.action_t[k * batch:(k + 1) * batch],
                        "context": self.context.values} for k in range(chunks)],
                next=[self.next_latents[k * batch:(k + 1) * batch] for k in range(chunks)],
                dec=[self.decoded[k * batch:(k + 1) * batch] for k in range(chunks)])
            self._views[key] = v
        return self._views[key]

    def _check_keepout(self, keepout: np.ndarray, h: int, w: int) -> np.ndarray:
        if not self.model.has_robot_mask:
            raise RolloutInputError(f"keepout: {self.model.model_dir} predicts no robot mask "
                                    f"to count inside it (model.json "
                                    f"contract.decoder_outputs)")
        k = np.asarray(keepout)
        if k.dtype not in (np.uint8, np.bool_) or k.shape != (h, w):
            raise RolloutInputError(f"keepout: expected a uint8 (or bool) mask [{h}, {w}] (the "
                                    f"model's resolution), found {k.dtype} {list(k.shape)}")
        return np.ascontiguousarray(k, np.uint8)

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
        """Start a rollout: encode the start frame(s), prepare them (``prepare_b{B}``, where
        the model has it) and fill the ring buffer.

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
        self.batch, self.chunks = self.model.plan_batches(n)
        v = self._v = self._plan_views(self.batch, self.chunks)
        z = [self.model.encode(f).reshape(-1) for f in starts]
        for i in range(v.rows):
            self.start_latents[i] = z[i] if i < len(z) else z[0]
        b = self.batch
        if self.model.has_prepare:  # once per rollout (e.g. the warp model's flow fields)
            for k in range(v.chunks):
                rows = slice(k * b, (k + 1) * b)
                ready = self.model.prepare(b, self.start_latents[rows].reshape(
                    self.next_latents[rows].shape), self.context.values, self.next_latents[rows])
                self.start_latents[rows] = ready.reshape(b, -1)
        self.actions[...] = 0.0
        self.actions[:n, :t] = acts
        self._n, self._horizon, self._t, self._fetched = n, t, 0, -1
        if v.offset is not None:
            for k in range(v.chunks):
                self.model.decode(b, self.start_latents[k * b:(k + 1) * b].reshape(
                    v.next[k].shape), v.dec[k])
            img = starts.transpose(0, 3, 1, 2).astype(np.float32) / np.float32(255.0)
            idx = np.minimum(np.arange(v.rows), len(starts) - 1)
            np.subtract(img[idx], v.decoded, out=v.offset)
        if self._device is not None:
            self._device.reset(b, v.chunks, self.start_latents[:v.rows], v.actions[:, :t],
                               self.mask, np.ascontiguousarray(starts[0]), v.offset,
                               keepout=self.keepout)
            return
        self._w = ref.ring_fill(v.ring_latents, v.ring_actions, self.start_latents[:v.rows])

    @property
    def path(self) -> str:
        """Where the steps run: ``"device"`` (``tensorrt`` backend: engines, kernels and a
        CUDA graph on the GPU, ``edge.runtime.cuda_step``) or ``"host"`` (each graph through its
        runner's ``infer``, the NumPy twins of the kernels in between)."""
        return "device" if self._device is not None else "host"

    @property
    def device_graph(self) -> dict[str, object] | None:
        """On the device path: the captured step graph's node counts and memcpy nodes per
        step (None before the capture); None on the host path."""
        if self._device is None:
            return None
        return {"node_counts": self._device.graph_node_counts,
                "memcpy_nodes_per_step": self._device.memcpy_nodes_per_step}

    @overload
    def step(self, action: np.ndarray | None = None, *,
             fetch: Literal[True] = True) -> np.ndarray: ...

    @overload
    def step(self, action: np.ndarray | None = None, *,
             fetch: bool) -> np.ndarray | None: ...

    def step(self, action: np.ndarray | None = None, *, fetch: bool = True) -> np.ndarray | None:
        """Predict the next frame of every candidate.

        Args:
            action: optional ``[N, A']`` action of this step (policy mode); by default the
                step's row of the actions given to :meth:`reset`.
            fetch: on the device path, copy this step's frames to the host and return
                them (two device-to-host copies); False leaves them on the device (the
                step copies nothing; :meth:`frames` copies every step at once) and
                returns None. On the host path the frames are always returned.

        Returns:
            uint8 ``[N, H, W, 3]``, a view of the output buffer (valid until the next
            reset), or None (device path, ``fetch=False``).

        Raises:
            CallOrderError: :meth:`reset` was not called, or every step is taken.
            RolloutInputError: a bad ``action``; the decoder produced NaN.
        """
        if self._t < 0:
            raise CallOrderError("Rollout.step: call reset() first")
        if self._t >= self._horizon:
            raise CallOrderError(f"Rollout.step: all {self._horizon} steps are taken; call "
                                 f"reset() to start again")
        t, b, v = self._t, self.batch, self._v
        if action is not None:
            full = self.check_actions(action, f"action of step {t}")
            if full.shape != (self._n, self.model.contract.max_dof):
                raise RolloutInputError(f"action of step {t}: expected [{self._n}, A], found "
                                        f"{list(np.shape(action))}")
            self.actions[:self._n, t] = full
            if self._device is not None:
                self._device.set_action(t, self.actions[:v.rows, t])
        if self._device is not None:
            self._device.step()
            self._t = t + 1
            if not fetch:
                return None
            try:
                self._device.fetch(t, self.out_frames[t, :v.rows])
            except NonFiniteOutputError as exc:
                raise RolloutInputError(f"step {t}: the decoder produced NaN ({exc}); check "
                                        f"the model and the inputs") from exc
            return self.out_frames[t, :self._n]
        ref.select_action(v.actions, self.mask, t, out=v.action_t)
        masks = self.out_masks[t] if self.out_masks is not None else self._step_mask
        if masks is None:
            self._host_step_decode(t)
        else:
            ref.ring_linearise(v.ring_latents, v.ring_actions, self._w, v.hist_latents,
                               v.hist_actions)
            for k in range(v.chunks):  # one decoder run for both outputs
                self.model.step(b, v.feeds[k], v.next[k])
                self.model.decode_robot_mask(b, v.next[k], v.dec[k], masks[k * b:(k + 1) * b])
            self._w = ref.ring_push(v.ring_latents, v.ring_actions, self._w, v.next_flat,
                                    v.action_t, self.mask)
            try:
                ref.decode_frames(v.decoded, v.offset, out=self.out_frames[t, :v.rows])
            except NonFiniteOutputError as exc:
                raise RolloutInputError(f"step {t}: the decoder produced NaN ({exc}); check "
                                        f"the model and the inputs") from exc
        if self.out_robot is not None and self.keepout is not None and masks is not None:
            self.out_robot[t, :v.rows] = ref.robot_in_keepout(masks[:v.rows, 0], self.keepout)
        self._t = t + 1
        return self.out_frames[t, :self._n]

    def _host_step_decode(self, t: int) -> None:
        """Step ``t`` on the host without masks: per chunk, one fused step+decoder call, the
        ring buffer's history read before and its push and the uint8 frames after each
        group of candidates, on the thread that runs that group
        (:meth:`WorldModel.step_decode`'s ``before``/``after``; rows are independent, so
        the result is that of doing them for all rows at once).

        Raises:
            RolloutInputError: the decoder produced NaN.
            BackendError: a graph failed; some groups may have pushed this step already,
                so the rollout needs :meth:`reset` before the next step.
        """
        v, b, w = self._v, self.batch, self._w
        out = self.out_frames[t]
        nan: list[int] = []  # one count per group (list.append is atomic)

        for k in range(v.chunks):
            base = k * b

            def before(first: int, stop: int, base: int = base) -> None:
                r = slice(base + first, base + stop)
                ref.ring_linearise(v.ring_latents[r], v.ring_actions[r], w, v.hist_latents[r],
                                   v.hist_actions[r])

            def after(first: int, stop: int, base: int = base) -> None:
                r = slice(base + first, base + stop)
                ref.ring_push(v.ring_latents[r], v.ring_actions[r], w, v.next_flat[r],
                              v.action_t[r], self.mask)
                nan.append(ref.decode_frames_counting(
                    v.decoded[r], None if v.offset is None else v.offset[r], out=out[r])[1])

            try:
                self.model.step_decode(b, v.feeds[k], v.next[k], v.dec[k], before, after)
            except BaseException:
                self._t = -1  # the ring buffer may be part-pushed: reset() first
                raise
        self._w = (w + 1) % self.model.contract.history_length
        if sum(nan):
            raise RolloutInputError(f"step {t}: the decoder produced NaN "
                                    f"({NonFiniteOutputError(sum(nan))}); check the model and "
                                    f"the inputs")

    def _download(self) -> None:
        """Device path: copy the frames (and the robot counts) of the steps taken to the
        host once (again only after more steps)."""
        if self._device is None or self._fetched == self._t:
            return
        rows = self._v.rows
        try:
            self._device.outputs(self._t, self.out_frames[:, :rows],
                                 None if self.out_robot is None else self.out_robot[:, :rows])
        except NonFiniteOutputError as exc:
            raise RolloutInputError(f"the decoder produced NaN ({exc}); check the model "
                                    f"and the inputs") from exc
        self._fetched = self._t

    def frames(self) -> np.ndarray:
        """The frames predicted since :meth:`reset`: uint8 ``[N, t, H, W, 3]`` (a copy).

        Raises:
            CallOrderError: :meth:`reset` was not called.
            RolloutInputError: the decoder produced NaN (device path: found here).
        """
        if self._t < 0:
            raise CallOrderError("Rollout.frames: call reset() first")
        self._download()
        return np.ascontiguousarray(self.out_frames[:self._t, :self._n].transpose(1, 0, 2, 3, 4))

    def robot_masks(self) -> np.ndarray:
        """The robot masks predicted since :meth:`reset`: float32 ``[N, t, H, W]`` (0..1, a
        copy).

        Raises:
            CallOrderError: :meth:`reset` was not called, or the rollout was made without
                ``robot_mask=True``.
        """
        if self._t < 0:
            raise CallOrderError("Rollout.robot_masks: call reset() first")
        if self.out_masks is None:
            raise CallOrderError("Rollout.robot_masks: make the rollout with robot_mask=True")
        return np.ascontiguousarray(self.out_masks[:self._t, :self._n, 0].transpose(1, 0, 2, 3))

    def robot_keepout_counts(self) -> np.ndarray:
        """Per candidate and step since :meth:`reset`, the predicted robot-mask pixels
        >= 0.5 inside the ``keepout`` mask: int32 ``[N, t]`` (a copy). The same numbers on
        both paths (``kernels.reference.robot_in_keepout`` on the host, its kernel on the
        device, where this copies the frames and counts of the steps taken once, like
        :meth:`frames`).

        Raises:
            CallOrderError: :meth:`reset` was not called, or the rollout was made without
                ``keepout``.
            RolloutInputError: the decoder produced NaN (device path: found here).
        """
        if self._t < 0:
            raise CallOrderError("Rollout.robot_keepout_counts: call reset() first")
        if self.out_robot is None:
            raise CallOrderError("Rollout.robot_keepout_counts: make the rollout with a "
                                 "keep-out mask (keepout=...)")
        self._download()
        return np.ascontiguousarray(self.out_robot[:self._t, :self._n].T)

    def close(self) -> None:
        """Free the device buffers of the device path now (otherwise the model frees them
        when it is deactivated); idempotent; a no-op on the host path."""
        if self._device is not None:
            self.model.unregister_device_user(self._device)
            self._device.close()
            self._device = None
            self._t = -1

    def __enter__(self) -> Rollout:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, start: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Reset and predict every step: frames uint8 ``[N, T, H, W, 3]`` (on the device
        path the steps copy nothing; the frames come back once, at the end)."""
        self.reset(start, actions)
        for _ in range(self._horizon):
            self.step(fetch=False)
        return self.frames()

    def stream(self, start: np.ndarray, actions: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
        """Reset, then yield ``(t, frames uint8 [N, H, W, 3])`` as each step is predicted."""
        self.reset(start, actions)
        for t in range(self._horizon):
            yield t, self.step()
