"""Depth-mirrored twins of a chain's channels (``export.models.chain_fit.twin_candidates``,
``choose_twins``, ``anchor_chain_to_start(twins=True)``), on the synthetic two-link arm of
``test_chain_fit``."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from export.models.chain_fit import (  # noqa: E402
    ChainFit,
    as_calibration,
    chain_positions,
    choose_twins,
    twin_candidates,
)
from tests.test_chain_fit import SIZE, C, F, TwoLinkArm, _render_sweep, _two_link_episodes  # noqa: E402

#: A start pose with both joints turned (the sweep turns one at a time).
START_Q = np.array([0.45, -0.35])


def _arm_fit(arm: TwoLinkArm, points: np.ndarray, pivots: np.ndarray, focal: float) -> ChainFit:
    """The arm's true chain for home points ``points [N, 3]`` and ``pivots [2, 3]`` (m),
    in the chain's depth unit (median depth 1)."""
    scale = float(np.median(points[:, 2]))
    return ChainFit(arm.robot, points[:, 2] / scale, arm.axes * arm.signs[:, None],
                    pivots / scale, np.stack([np.ones(len(points)),
                                              (arm.link == 1).astype(float)]),
                    np.ones(2), focal, C.copy(), np.zeros(2))


def _far_fit(tilted: bool = True) -> ChainFit:
    """The two-link arm seen from 500 m with a 250 times longer lens: the same image,
    almost no perspective; its surface tilted as the arm's, or flat and facing the
    camera."""
    arm = TwoLinkArm()
    focal = 250.0 * F
    ys, xs = np.mgrid[0:SIZE, 0:SIZE]
    z = 500.0 + (0.01 * xs + 0.005 * ys if tilted else np.zeros(xs.shape))
    pts = np.stack([(xs + 0.5 - C[0]) * z / focal, (ys + 0.5 - C[1]) * z / focal, z], -1)
    return _arm_fit(arm, pts[arm.robot], pts[[4, 21], [11, 14]], focal)


def _gap(a: ChainFit, b: ChainFit, qq) -> float:
    """Largest distance (px) between where two chains put the arm's pixels at ``qq``."""
    ua, _ = chain_positions(a, np.asarray(qq, float)[None])
    ub, _ = chain_positions(b, np.asarray(qq, float)[None])
    return float(np.linalg.norm(ua[0] - ub[0], axis=1).max())


def test_twins_look_the_same_where_the_sweep_is_blind_and_differ_where_joints_compose():
    """Seen almost orthographically, the twin of the shoulder with the links beyond it
    (the whole chain mirrored) draws every pose like the chain, the elbow's with its link
    the elbow's sweep; the elbow's twin alone, on a link facing the camera, draws the
    elbow's own sweep like the chain but not a pose that turns both joints."""
    fit = _far_fit()
    cands = twin_candidates(fit)
    assert [(k, c) for k, c, _ in cands] == [("alone", 0), ("distal", 0), ("alone", 1),
                                             ("distal", 1)]
    twin = {(k, c): t for k, c, t in cands}
    for qq in ([0.4, 0.0], [0.0, 0.4], START_Q, [-0.3, 0.5]):
        assert _gap(fit, _still(fit), qq) > 0.5  # the arm moves 0.8-5.7 px
        # 0.003-0.017 px, falling as 1 / distance: the last trace of perspective
        assert _gap(twin[("distal", 0)], fit, qq) < 0.05, qq
    assert _gap(twin[("distal", 1)], fit, [0.0, 0.4]) < 0.01  # 0.002 px
    assert _gap(twin[("distal", 1)], fit, START_Q) > 0.5  # 1.7 px
    flat = _far_fit(tilted=False)
    alone = {(k, c): t for k, c, t in twin_candidates(flat)}[("alone", 1)]
    assert _gap(alone, flat, [0.0, 0.4]) < 0.01  # 0.003 px
    assert _gap(alone, flat, [0.4, 0.0]) < 1e-9  # the shoulder's sweep: elbow at home
    assert _gap(alone, flat, START_Q) > 0.5  # 0.8 px
    # the mirror is its own inverse: the twin's twin is the chain
    back = {(k, c): t for k, c, t in twin_candidates(alone)}[("alone", 1)]
    assert np.allclose(back.axes, flat.axes) and np.allclose(back.pivots, flat.pivots)
    assert np.array_equal(flat.axes, _far_fit(tilted=False).axes)  # the input is untouched


def _still(fit: ChainFit) -> ChainFit:
    """``fit`` with every channel still (axes zero): the home points where they are."""
    import dataclasses

    return dataclasses.replace(fit, axes=np.zeros_like(fit.axes))


@pytest.fixture(scope="module")
def mixed():
    """The arm, its calibration episode (sweep frames at 64x64), its true chain, the same
    chain with the shoulder swapped for its twin, and the start frame at ``START_Q`` at
    64x64. (Seen from 2 m, the twin is 1.7 px off on the shoulder's own sweep and 2.0 px at
    the start pose; the elbow's, on a link near its axis, only 0.2 px.)"""
    arm = TwoLinkArm()
    q, _ = arm.sweep()
    frames = _render_sweep(arm, q, 2)
    cal, _ = _two_link_episodes(arm, q, frames, q[:3], frames[:3])
    true = _arm_fit(arm, arm.points, arm.pivots, F)
    shoulder_twin = {(k, c): t for k, c, t in twin_candidates(true)}[("alone", 0)]
    start = _render_sweep(arm, START_Q[None], 2)[0]
    return arm, q, frames, cal, true, shoulder_twin, start


def _error(arm: TwoLinkArm, fit: ChainFit, qq) -> float:
    """Mean distance (px) between where the chain and the true arm put the arm's pixels."""
    uv, _ = chain_positions(fit, np.asarray(qq, float)[None])
    return float(np.linalg.norm(uv[0] - arm.positions(np.asarray(qq, float)), axis=1).mean())


def test_choose_twins_swaps_back_a_twin_the_start_frame_contradicts(mixed):
    """With the start frame beside the sweep, the chain whose shoulder landed on its twin
    is swapped back to one that puts the arm where the start frame shows it; the true
    chain is kept as it is."""
    arm, q, frames, _, true, shoulder_twin, start = mixed
    seen = np.concatenate([frames, np.repeat(start[None], 8, 0)])
    qq = np.concatenate([q, np.repeat(START_Q[None], 8, 0)])
    before = _error(arm, shoulder_twin, START_Q)
    lines: list[str] = []
    chosen, record = choose_twins(shoulder_twin, seen, qq, log=lines.append)
    assert before > 1.5
    assert _error(arm, chosen, START_Q) < 0.1 * before, (before, record)
    # loss 1.72 -> 0.73: the shoulder's twin of the twin, the true chain to 1e-14 px
    assert record["loss_after"] < 0.5 * record["loss_before"]
    assert [(k["kind"], k["channel"]) for k in record["kept"]] == [("alone", 0)]
    assert record["candidates_scored"] >= 4 and len(lines) == len(record["kept"])
    kept, rec_true = choose_twins(true, seen, qq)
    assert rec_true["kept"] == [] and rec_true["loss_after"] == rec_true["loss_before"]
    assert kept is true


def test_choose_twins_refuses_frames_off_the_grid(mixed):
    _, q, frames, _, true, _, _ = mixed
    with pytest.raises(ValueError, match="choose_twins"):
        choose_twins(true, frames[:, :50, :50], q)
    with pytest.raises(ValueError, match="joint positions"):
        choose_twins(true, frames, q[:, :1])


def test_anchoring_with_twins_records_the_swap_and_places_the_arm(mixed):
    """``anchor_chain_to_start(twins=True)`` swaps the shoulder's twin back before refining,
    records it in ``info["twins"]``, and puts the arm nearer the start frame than the
    same anchoring without the choice."""
    from export.models.chain_fit import anchor_chain_to_start

    arm, q, frames, cal, _, shoulder_twin, start = mixed
    home = frames[0].reshape(SIZE, 2, SIZE, 2, 3).mean((1, 3)).round().astype(np.uint8)
    chain = as_calibration(shoulder_twin, home, q[0], None, ["shoulder", "elbow"], {})
    grid = start.reshape(SIZE, 2, SIZE, 2, 3).mean((1, 3)).round().astype(np.uint8)
    kw = dict(photometric_size=64, steps=(40,), blur_px=(2.0,))
    plain = anchor_chain_to_start(chain, cal, grid, START_Q, **kw)
    twinned = anchor_chain_to_start(chain, cal, grid, START_Q, twins=True, **kw)
    assert "twins" not in plain.info
    assert len(twinned.info["twins"]["kept"]) == 1
    from export.models.chain_fit import fit_of_calibration

    e_plain = _error(arm, fit_of_calibration(plain), START_Q)
    e_twin = _error(arm, fit_of_calibration(twinned), START_Q)
    assert e_twin < 0.5 * e_plain, (e_plain, e_twin)


def test_refining_with_motion_and_twins_records_the_swap(mixed):
    """``refine_chain_with_motion``: a motion episode turning both joints together swaps
    the shoulder's twin back (``info["twins"]``), by default as with ``twins=True``; with
    ``twins=False`` (no choice) the record is absent."""
    from export.models.chain_fit import fit_of_calibration, refine_chain_with_motion

    arm, q, frames, _, _, shoulder_twin, _ = mixed
    qm = np.linspace(0.0, 1.0, 6)[:, None] * START_Q[None]
    cal, motion = _two_link_episodes(arm, q, frames, qm, _render_sweep(arm, qm, 2))
    home = frames[0].reshape(SIZE, 2, SIZE, 2, 3).mean((1, 3)).round().astype(np.uint8)
    chain = as_calibration(shoulder_twin, home, q[0], None, ["shoulder", "elbow"], {})
    kw = dict(photometric_size=64, steps=(20,), blur_px=(2.0,))
    twinned = refine_chain_with_motion(chain, cal, [(motion, "motion")], twins=True, **kw)
    record = twinned.info["twins"]
    # both shoulder twins (alone, or with the elbow and its depths) put the shoulder back
    # and save about 40% of the loss once refined; the elbow's about 4%, below the first
    assert [k["channel"] for k in record["kept"]] == [0]
    gain = {(r["kind"], r["channel"]): r["gain"] for r in record["refined"] if r["round"] == 0}
    assert min(gain[("alone", 0)], gain[("distal", 0)]) > 0.3
    assert max(gain[("alone", 1)], gain[("distal", 1)]) < 0.1
    assert _error(arm, fit_of_calibration(twinned), START_Q) < 0.5 * _error(
        arm, shoulder_twin, START_Q)
    default = refine_chain_with_motion(chain, cal, [(motion, "motion")], **kw)
    assert default.info["twins"]["kept"] == twinned.info["twins"]["kept"]
    plain = refine_chain_with_motion(chain, cal, [(motion, "motion")], twins=False, **kw)
    assert "twins" not in plain.info
