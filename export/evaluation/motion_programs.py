"""Episodes of the joints turned together, rendered by MuJoCo, for refining a chain read.

A calibration sweep turns one DoF at a time; the chain's refinement
(:func:`export.models.chain_fit.refine_chain_with_motion`) reads how the channels compose
from an episode that turns them together. :func:`composition_episode` renders the episodes
a technician can record for it on a generated cell: the planner's held poses
(``calibrate plan --poses``), its validation motion (``calibrate plan --motion``), or
independent poses, all about the calibration's home reading. The futures evaluation
(``scripts/chain_fit_eval.py --composition``) and the pre-check benchmark
(``--chain-poses``) render them here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np


def composition_episode(gen: Any, params: Any, q_home: np.ndarray, count: int,
                        amplitude: float, seed: int, planned: bool = False,
                        poses: bool = False, latency_frames: int = 0) -> Any:
    """A short episode of the joints turned together, rendered by ``gen``.

    Args:
        gen: a :class:`export.cells.generate.CellGenerator` (its size is the episode's).
        params: the cell (:class:`export.cells.sampling.CellParams`).
        q_home: float64 ``[K]``, the calibration's first joint readings (controller
            convention and units); the program is drawn about them.
        count: poses (independent poses, ``poses``) or frames (``planned``).
        amplitude: half range about home, rad (a tenth of it for a DoF in m in the
            planner's programs).
        seed: random seed of the poses.
        planned: the planner's validation motion instead
            (:func:`edge.calibrate.plan.plan_motion`, ``half_range=amplitude``: smooth,
            waypoints every 6 frames).
        poses: every frame of the planner's held-poses program
            (:func:`edge.calibrate.plan.plan_poses`, ``count`` poses, moves and holds; the
            refinement reads the holds' middle frames). Neither: ``count`` independent
            poses, each channel at home plus a uniform offset in ``[-amplitude,
            amplitude]`` rad (canonical joints, clipped to the robot's limits).
        latency_frames: L > 0: frame t shows the pose read at frame t - L (a camera late
            against the joint readings; the first L frames show the first pose); the
            readings stay.

    Returns:
        :class:`edge.episode.Episode` of kind ``motion`` in the cell's controller
        convention, without end-effector pixels or robot masks.

    Raises:
        edge.calibrate.plan.PlanError: a program the planner refuses (fewer than 2 poses,
            a half range <= 0).
    """
    from edge.calibrate.plan import plan_motion, plan_poses
    from export.cells.robots import robot_spec

    conv = params.convention
    home = conv.to_canonical(np.asarray(q_home, np.float64)[None])[0]
    spec = robot_spec(params.robot)
    if planned or poses:
        spec = replace(spec, dofs=tuple(replace(d, home=float(h))
                                        for d, h in zip(spec.dofs, home, strict=True)))
        q = (plan_poses(spec, seed, count=count, half_range=amplitude) if poses else
             plan_motion(spec, seed, frames=count, half_range=amplitude)).episode_positions()
    else:
        limits = np.asarray(spec.limits_rad, np.float64)
        rng = np.random.default_rng(seed)
        q = np.clip(home + rng.uniform(-amplitude, amplitude, (count, len(home))),
                    limits[:, 0], limits[:, 1])
    shown = q[np.maximum(np.arange(len(q)) - latency_frames, 0)]
    ep = gen.render_episode(params, shown, "motion")
    return replace(ep, joint_positions=conv.to_controller(q), ee_px=None, robot_mask=None)
