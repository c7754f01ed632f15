"""Verdicts for candidate action sequences from their predicted frames.

Per candidate and step t (predicted frame t is the scene after action t):

- ``max_step_action``: |action[t, j]| <= bound[j] (rad|m per step), compared in the
  actions' precision (a float32 action clipped at the bound passes).
- ``joint_limits``: lower <= q0 + sum(actions[0..t]) <= upper.
- ``keep_out``: the robot stays out of the keep-out mask. Decided on the model's predicted
  robot mask where it has one (``basis`` ``robot_mask``/``auto``: pixels with mask >= 0.5
  inside the mask <= ``max_robot_pixels``; the counts of ``kernels.reference.robot_in_keepout``,
  given as counts by the rollout on either path or computed here from the masks), else on predicted motion (``basis`` ``motion``:
  a pixel moved if max over channels |pred - reference| > motion_threshold, <=
  ``max_moved_pixels``; the reference is the model's own zero-action rollout, never the
  raw start frame where that rollout is given; ``kernels.reference`` scores).
  ``PrecheckResult.keepout_basis`` says which was used.
- ``goal``: at the last step, SSIM(pred, goal) >= min_ssim.

The first failing step wins; at one step the rules are taken in the order above.
Ranking: passing candidates first; then higher final goal SSIM (if a goal is set); then
less motion energy in the keep-out regions; then smaller total |action|. The chosen
candidate is the best-ranked one that passes (None if none does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from edge.metrics import ssim
from edge.precheck.rules import Rules, keep_out_mask
from edge.runtime.errors import RuntimeInputError
from kernels import reference as ref

#: The pixel change (0..255) counted as motion in the report's motion figures where the
#: rules leave ``keep_out.motion_threshold`` out (the robot mask then decides keep-out).
DEFAULT_MOTION_THRESHOLD = 20

__all__ = ["CandidateVerdict", "PrecheckResult", "evaluate"]


@dataclass
class CandidateVerdict:
    """The verdict on one candidate.

    Attributes:
        index: position in the input.
        name: label (``"candidate-0"``, ``"policy"``, ...).
        passed: every rule holds at every step.
        first_fail_step: first step (0-based) where a rule failed, or None.
        first_fail_rule: that rule's name, or None.
        detail: human-readable reason.
        rank: 1 = best.
        scores: ``keepout_moved_max`` (px), ``keepout_energy`` (sum over steps),
            ``goal_ssim`` (final step, or None), ``action_l1`` (sum |a|, rad|m),
            ``keep_out_first_step`` (the first step keep-out fails, whichever rule
            failed first; None when it holds; absent without keep-out rules).
    """

    index: int
    name: str
    passed: bool = True
    first_fail_step: int | None = None
    first_fail_rule: str | None = None
    detail: str = ""
    rank: int = 0
    scores: dict = field(default_factory=dict)

    def _fail(self, step: int, rule: str, detail: str) -> None:
        if self.first_fail_step is None or step < self.first_fail_step:
            self.passed = False
            self.first_fail_step, self.first_fail_rule, self.detail = step, rule, detail


@dataclass
class PrecheckResult:
    """Verdicts (in input order), the ranking (indices, best first) and the chosen index."""

    verdicts: list[CandidateVerdict]
    ranking: list[int]
    chosen: int | None
    keepout_mask: np.ndarray | None = None  # (H, W) uint8, the regions grown by the margin
    keepout_basis: str | None = None  # "robot_mask", "motion against ..." or None
    keepout_margin_px: float | None = None  # keep_out.margin_px, or None without keep-out


def _width_check(vec: tuple[float, ...], a: int, what: str) -> np.ndarray:
    v = np.asarray(vec, np.float64)
    if len(v) == 1:
        return np.full(a, v[0])
    if len(v) != a:
        raise RuntimeInputError(f"{what}: expected 1 or {a} values (one per DoF), found {len(v)}")
    return v


def evaluate(rules: Rules, start: np.ndarray, joint_state: np.ndarray | None,
             actions: np.ndarray, frames: np.ndarray, names: list[str] | None = None,
             goal: np.ndarray | None = None, robot_masks: np.ndarray | None = None,
             reference_frames: np.ndarray | None = None,
             robot_counts: np.ndarray | None = None,
             dof_names: Sequence[str] | None = None) -> PrecheckResult:
    """Apply the rules to every candidate.

    Args:
        rules: parsed rules.
        start: uint8 ``[H, W, 3]`` start frame.
        joint_state: float ``[A']`` start joint positions (rad|m); required by joint limits.
        actions: float32 ``[N, T, A']`` candidate actions (the cell's DoFs).
        frames: uint8 ``[N, T, H, W, 3]`` predicted frames.
        names: labels per candidate.
        goal: uint8 ``[H, W, 3]`` goal image, required by the goal rule.
        robot_masks: float32 ``[N, T, H, W]`` the model's predicted robot mask (0..1), or
            None (a model without one); the keep-out verdict's basis (module docstring).
        reference_frames: uint8 ``[T, H, W, 3]`` the model's zero-action rollout, the
            reference of the motion basis (None: the start frame).
        robot_counts: int ``[N, T]`` the predicted robot-mask pixels >= 0.5 inside the
            keep-out mask (``Rollout.robot_keepout_counts`` with the keep-out mask,
            :func:`edge.precheck.rules.keep_out_mask` at the frames' size), in place of ``robot_masks``: the same verdicts
            without the masks (what the device rollout gives).
        dof_names: the ``A'`` channels' names, said beside their index in the
            ``max_step_action`` and ``joint_limits`` details (None, or another count: the
            index alone).

    Raises:
        RuntimeInputError: widths or shapes that do not match the rules or each other,
            ``basis: robot_mask`` without a predicted robot mask or its counts, or both
            ``robot_masks`` and ``robot_counts``.
    """
    n, t, a = actions.shape
    h, w = start.shape[:2]
    if frames.shape[:2] != (n, t):
        raise RuntimeInputError(f"frames: expected [{n}, {t}, ...] to match the actions, found "
                                f"{list(frames.shape)}")
    label = ([f"{j} ({dof_names[j]})" for j in range(a)] if dof_names is not None
             and len(dof_names) == a else [str(j) for j in range(a)])
    verdicts = [CandidateVerdict(i, (names or [])[i] if names and i < len(names)
                                 else f"candidate-{i}") for i in range(n)]
    if rules.max_step_action is not None:
        bound = _width_check(rules.max_step_action, a, f"{rules.path}:max_step_action")
        # compare in the actions' precision, inclusive at the limit: a float32 action that a
        # policy clipped at the bound equals float32(bound), which is above the float64 one
        dt = actions.dtype if actions.dtype.kind == "f" else np.dtype(np.float64)
        over = np.abs(actions).astype(dt) > bound.astype(dt)  # (N, T, A)
        for v in verdicts:
            hits = np.argwhere(over[v.index])
            if len(hits):
                s, j = (int(x) for x in hits[0])
                v._fail(s, "max_step_action", f"|action[{label[j]}]| = "
                        f"{abs(float(actions[v.index, s, j])):.4g} > {bound[j]:.4g} at step {s}")
    if rules.joint_limits is not None:
        if joint_state is None:
            raise RuntimeInputError(f"{rules.path}:joint_limits: needs the start joint state "
                                    f"(--joint-state)")
        q0 = np.asarray(joint_state, np.float64)
        if q0.shape != (a,):
            raise RuntimeInputError(f"joint state: expected {a} values (one per DoF), found "
                                    f"{list(q0.shape)}")
        lo = _width_check(rules.joint_limits.lower, a, f"{rules.path}:joint_limits.lower")
        hi = _width_check(rules.joint_limits.upper, a, f"{rules.path}:joint_limits.upper")
        q = q0 + np.cumsum(actions.astype(np.float64), axis=1)  # (N, T, A)
        bad = (q < lo) | (q > hi)
        for v in verdicts:
            hits = np.argwhere(bad[v.index])
            if len(hits):
                s, j = (int(x) for x in hits[0])
                v._fail(s, "joint_limits", f"joint {label[j]} at {q[v.index, s, j]:.4g} outside "
                        f"[{lo[j]:.4g}, {hi[j]:.4g}] after step {s}")
    mask = None
    basis = None
    moved = np.zeros((n, t), np.int32)
    robot = np.zeros((n, t), np.int32)
    energy = np.zeros((n, t), np.float32)
    if rules.keep_out is not None:
        ko = rules.keep_out
        mask = keep_out_mask(ko, h, w)
        if robot_masks is not None and robot_counts is not None:
            raise RuntimeInputError("keep-out: give the robot masks or their counts, not both")
        if ko.basis == "robot_mask" and robot_masks is None and robot_counts is None:
            raise RuntimeInputError(f"{rules.path}:keep_out.basis: robot_mask, but the model "
                                    f"predicts no robot mask (model.json "
                                    f"contract.decoder_outputs); use basis: motion")
        if robot_masks is not None and (robot_masks.shape != (n, t, h, w)
                                        or robot_masks.dtype != np.float32):
            raise RuntimeInputError(f"robot masks: expected float32 [{n}, {t}, {h}, {w}], "
                                    f"found {robot_masks.dtype} {list(robot_masks.shape)}")
        if robot_counts is not None and (np.shape(robot_counts) != (n, t)
                                         or np.asarray(robot_counts).dtype.kind not in "iu"):
            raise RuntimeInputError(f"robot counts: expected integers [{n}, {t}], found "
                                    f"{np.asarray(robot_counts).dtype} "
                                    f"{list(np.shape(robot_counts))}")
        if reference_frames is not None and reference_frames.shape != (t, h, w, 3):
            raise RuntimeInputError(f"reference frames: expected [{t}, {h}, {w}, 3], found "
                                    f"{list(reference_frames.shape)}")
        on_mask = (robot_masks is not None or robot_counts is not None) and ko.basis != "motion"
        if ko.motion_threshold is None and not on_mask:
            raise RuntimeInputError(f"{rules.path}:keep_out.motion_threshold: missing key: this "
                                    f"model predicts no robot mask, so keep-out is decided on "
                                    f"predicted motion, which needs motion_threshold (0..255, "
                                    f"e.g. 20)")
        for s in range(t):
            base = start if reference_frames is None else reference_frames[s]
            sc = ref.precheck_scores(np.ascontiguousarray(frames[:, s]), base, mask,
                                     ko.motion_threshold if ko.motion_threshold is not None
                                     else DEFAULT_MOTION_THRESHOLD)
            moved[:, s], energy[:, s] = sc.moved_in_keepout, sc.motion_energy
        if on_mask:
            if robot_counts is not None:
                robot[...] = robot_counts
            else:
                assert robot_masks is not None
                flat = np.ascontiguousarray(robot_masks).reshape(n * t, h, w)
                robot[...] = ref.robot_in_keepout(flat, mask).reshape(n, t)
            basis = "robot_mask"
        else:
            basis = ("motion against the zero-action rollout" if reference_frames is not None
                     else "motion against the start frame")
        where = ("the keep-out regions" if not ko.margin_px
                 else f"the keep-out regions grown by {ko.margin_px:g} px")
        for v in verdicts:
            if on_mask:
                over = np.flatnonzero(robot[v.index] > ko.max_robot_pixels)
                v.scores["keep_out_first_step"] = int(over[0]) if len(over) else None
                if len(over):
                    s = int(over[0])
                    v._fail(s, "keep_out", f"{int(robot[v.index, s])} px of the predicted "
                            f"robot inside {where} (allowed "
                            f"{ko.max_robot_pixels}) at step {s}")
                continue
            over = np.flatnonzero(moved[v.index] > ko.max_moved_pixels)
            v.scores["keep_out_first_step"] = int(over[0]) if len(over) else None
            if len(over):
                s = int(over[0])
                v._fail(s, "keep_out", f"{int(moved[v.index, s])} px moved inside {where} "
                        f"(allowed {ko.max_moved_pixels}) at step {s}")
    goal_ssim: list[float | None] = [None] * n
    if rules.goal is not None:
        if goal is None or goal.shape != start.shape:
            raise RuntimeInputError(f"{rules.goal.image}: expected a goal image of shape "
                                    f"{list(start.shape)}, found "
                                    f"{None if goal is None else list(goal.shape)}")
        for v in verdicts:
            goal_ssim[v.index] = g = ssim(frames[v.index, -1], goal)
            if g < rules.goal.min_ssim:
                v._fail(t - 1, "goal", f"final SSIM to the goal {g:.3f} < "
                        f"{rules.goal.min_ssim:.3f}")
    for v in verdicts:
        v.scores = {**v.scores, "keepout_moved_max": int(moved[v.index].max()),
                    "keepout_robot_max": int(robot[v.index].max()) if basis == "robot_mask"
                    else None,
                    "keepout_energy": float(energy[v.index].sum()),
                    "goal_ssim": goal_ssim[v.index],
                    "action_l1": float(np.abs(actions[v.index]).sum())}
        if v.passed:
            v.detail = "every rule holds at every step"

    def key(v: CandidateVerdict) -> tuple:
        g = v.scores["goal_ssim"]
        return (not v.passed, -(g if g is not None else 0.0), v.scores["keepout_energy"],
                v.scores["action_l1"], v.index)

    ranking = [v.index for v in sorted(verdicts, key=key)]
    for r, i in enumerate(ranking, 1):
        verdicts[i].rank = r
    chosen = next((i for i in ranking if verdicts[i].passed), None)
    return PrecheckResult(verdicts, ranking, chosen, mask, basis,
                          None if rules.keep_out is None else rules.keep_out.margin_px)
