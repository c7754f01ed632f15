"""An ONNX policy rolled out in the world model ("policy in the loop").

The policy sees the latest frame (the start frame, then each predicted frame) and the
joint state (start state plus the actions so far) and returns the next action:
inputs ``frame`` uint8 ``[1, H, W, 3]`` and ``joint_state`` float32 ``[1, A']``, output
``action`` float32 ``[1, A']`` (rad|m per step). A reference policy is shipped in
``samples/policies/reference`` (made by ``scripts/make_reference_policy.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from edge.runtime.backends.ort import OrtCpuRunner
from edge.runtime.errors import CallOrderError, RuntimeInputError
from edge.runtime.rollout import Rollout

__all__ = ["OnnxPolicy", "rollout_chain_policy", "rollout_policy"]


class OnnxPolicy:
    """A policy graph on ONNX Runtime CPU.

    Args:
        path: the policy ONNX file.
        intra_op_num_threads: ONNX Runtime threads.
    """

    def __init__(self, path: str | os.PathLike[str], intra_op_num_threads: int | None = 1):
        self.path = Path(path)
        self.intra_op_num_threads = intra_op_num_threads
        self._runner: OrtCpuRunner | None = None
        self.frame_shape: tuple[int, ...] = ()
        self.dof = 0

    def activate(self) -> OnnxPolicy:
        """Load the graph and check its inputs and outputs.

        Raises:
            RuntimeInputError: the graph lacks ``frame``/``joint_state``/``action`` or has
                other shapes than the contract.
            BackendError: ONNX Runtime cannot load it.
        """
        if self._runner is not None:
            return self
        if not self.path.is_file():
            raise RuntimeInputError(f"{self.path}: no such policy file")
        runner = OrtCpuRunner(self.path, self.intra_op_num_threads)
        runner.activate()
        sess = runner._session
        assert sess is not None  # activate() loaded the session
        ins = {i.name: i.shape for i in sess.get_inputs()}
        outs = {o.name: o.shape for o in sess.get_outputs()}
        if set(ins) != {"frame", "joint_state"} or "action" not in outs:
            runner.deactivate()
            raise RuntimeInputError(f"{self.path}: expected inputs frame, joint_state and "
                                    f"output action, found inputs {sorted(ins)} outputs "
                                    f"{sorted(outs)}")
        self.frame_shape = tuple(ins["frame"])
        self.dof = int(ins["joint_state"][1])
        self._runner = runner
        return self

    def deactivate(self) -> None:
        """Free the session."""
        if self._runner is not None:
            self._runner.deactivate()
            self._runner = None

    def __enter__(self) -> OnnxPolicy:
        return self.activate()

    def __exit__(self, *exc: object) -> None:
        self.deactivate()

    def act(self, frame: np.ndarray, joint_state: np.ndarray) -> np.ndarray:
        """The action float32 ``[A']`` for a frame uint8 ``[H, W, 3]`` and joint state ``[A']``.

        Raises:
            CallOrderError: before :meth:`activate`.
            RuntimeInputError: the policy returned NaN/inf.
        """
        if self._runner is None:
            raise CallOrderError(f"OnnxPolicy({self.path.name}).act: call activate() first")
        out = self._runner.infer({
            "frame": np.ascontiguousarray(frame[None]),
            "joint_state": np.asarray(joint_state, np.float32).reshape(1, -1)})["action"]
        if not np.isfinite(out).all():
            raise RuntimeInputError(f"{self.path}: the policy returned NaN or inf")
        return out[0].astype(np.float32)


def rollout_policy(rollout: Rollout, policy: OnnxPolicy, start: np.ndarray,
                   joint_state: np.ndarray, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """Roll the policy out in the world model for ``horizon`` steps.

    Returns:
        ``(actions float32 [1, T, A'], frames uint8 [1, T, H, W, 3])``.

    Raises:
        RuntimeInputError: the policy's shapes do not match the model or the joint state.
    """
    h, w = rollout.model.contract.resolution
    if policy.frame_shape != (1, h, w, 3):
        raise RuntimeInputError(f"{policy.path}: input frame: expected [1, {h}, {w}, 3] (the "
                                f"model's resolution), found {list(policy.frame_shape)}")
    q = np.asarray(joint_state, np.float64).copy()
    if q.shape != (policy.dof,) or policy.dof not in (rollout.action_width,
                                                      rollout.model.contract.max_dof):
        raise RuntimeInputError(f"{policy.path}: joint_state width {policy.dof}; expected the "
                                f"cell's {rollout.action_width} DoFs and a start joint state of "
                                f"the same width, found {list(q.shape)}")
    rollout.reset(start, None, horizon=horizon)
    actions = np.zeros((1, horizon, policy.dof), np.float32)
    frame = start
    for t in range(horizon):
        a = policy.act(frame, q)
        actions[0, t] = a
        frame = rollout.step(a[None])[0]
        q += a
    return actions, rollout.frames()


def rollout_chain_policy(chain, policy: OnnxPolicy, start: np.ndarray,
                         joint_state: np.ndarray, horizon: int
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Roll the policy out in the chain model (:mod:`edge.runtime.chain`) for ``horizon``
    steps: each step the policy sees the latest frame and the joint readings (start plus
    the actions so far); the chain draws the frame at the new pose from the start frame.

    Args:
        chain: :class:`edge.runtime.chain.ChainCalibration`.
        policy: the policy (its frame input the chain's grid, one action per channel).
        start: uint8 ``[H, W, 3]``; joint_state: float ``[K]`` at the start frame.
        horizon: steps (>= 1).

    Returns:
        ``(actions float32 [1, T, K], frames uint8 [1, T, H, W, 3], cover bool
        [1, T, H, W])``: what the policy did, the predicted frames and where the chain puts
        the arm at each step.

    Raises:
        RuntimeInputError: the policy's frame or action width does not fit the chain, or
            the joint state is not K wide.
    """
    from edge.runtime.chain import chain_rollout

    h, w = chain.resolution
    k = chain.num_dof
    if policy.frame_shape != (1, h, w, 3):
        raise RuntimeInputError(f"{policy.path}: input frame: expected [1, {h}, {w}, 3] (the "
                                f"chain's grid), found {list(policy.frame_shape)}")
    q0 = np.asarray(joint_state, np.float64)
    if policy.dof != k or q0.shape != (k,):
        raise RuntimeInputError(f"{policy.path}: joint_state width {policy.dof}; expected the "
                                f"chain calibration's {k} channels and a start joint state of "
                                f"the same width, found {list(q0.shape)}")
    actions = np.zeros((1, horizon, k), np.float32)
    frames = np.empty((1, horizon, h, w, 3), np.uint8)
    cover = np.empty((1, horizon, h, w), bool)
    moved = np.zeros(k, np.float64)
    frame = start
    for t in range(horizon):
        a = policy.act(frame, q0 + moved)
        actions[0, t] = a
        moved += a
        # the frame at the new pose, drawn from the start frame (one step of all the
        # actions so far): the same frame chain_rollout gives at step t
        f, c = chain_rollout(chain, start, q0, moved[None], with_cover=True)
        frame = frames[0, t] = f[0]
        cover[0, t] = c[0]
    return actions, frames, cover
