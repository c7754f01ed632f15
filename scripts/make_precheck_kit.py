"""Write the pre-check kit for the shipped sample cell (``samples/precheck/``).

The kit is what the README's ``syncedge precheck`` command reads: five candidate action
sequences from the sample cell's start state, a rules file that fits that cell (the
example rules of docs/runtime.md) and a goal image. Every candidate's true future is
rendered by MuJoCo with the sample cell's own scene (``syncedge cells sample``), so the
kit says, for each candidate, what really happens: whether the arm enters the keep-out
region (true robot-mask pixels inside it), whether a joint leaves its limits, whether a
step exceeds the bound, and how near its true last frame is to the goal.

Candidates (16 steps, rad per step, the cell's controller order and signs):

- ``reach``: a straight line in joint space from the start pose to the pose of the test
  episode's frame 3, 1/16 of the way per step (at most 0.039 rad): safe, and its true last
  frame is the goal image;
- ``hold``: all zeros: safe, stays at the start;
- ``too-fast``: the same motion in 8 steps, then still: 0.079 rad per step breaks the
  0.05 bound at step 0;
- ``elbow-past-limit``: channel 3 (Actuator4) +0.05 per step: leaves the Kinova Gen3 limit
  of 2.66 rad after step 13;
- ``swing-into-keep-out``: channel 0 (Actuator1, the base) +0.05 per step: the arm swings
  into the keep-out region (truly: 187 robot pixels inside it at the last step).

Files written to ``--out``: ``candidates.json`` (``{"candidates": [N][T][A], "names": [N]}``),
``rules.yaml``, ``goal.png``, ``truth.npz`` (``frames`` uint8 ``[N, T+1, H, W, 3]`` and
``robot_mask`` bool ``[N, T+1, H, W]``, the MuJoCo truth from the start frame on) and
``manifest.json`` (checksums, the command, what each candidate truly does).

Needs MuJoCo (``pip install '.[train]'``, as ``syncedge cells``). Usage, the command that
made samples/precheck/:

    python scripts/make_precheck_kit.py --out samples/precheck
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "cell_sample"
STEPS = 16
MAX_STEP_RAD = 0.05
GOAL_FRAME = 3  # the test episode's frame whose pose ``reach`` ends at
KEEP_OUT = [[0.25, 0.0], [0.6, 0.0], [0.6, 0.6], [0.25, 0.6]]
COMMAND = "python scripts/make_precheck_kit.py --out samples/precheck"


def candidates(q_ctrl: np.ndarray) -> tuple[list[str], np.ndarray, list[str]]:
    """The kit's candidates from the test episode's joint positions (controller order, rad).

    Returns:
        ``(names, actions float32 [N, STEPS, A], descriptions)``.
    """
    q0 = q_ctrl[0]
    a = q_ctrl.shape[1]
    reach = np.repeat(((q_ctrl[GOAL_FRAME] - q0) / STEPS)[None], STEPS, 0)
    fast = np.zeros((STEPS, a))
    fast[:STEPS // 2] = 2 * reach[:STEPS // 2]
    elbow = np.zeros((STEPS, a))
    elbow[:, 3] = MAX_STEP_RAD
    swing = np.zeros((STEPS, a))
    swing[:, 0] = MAX_STEP_RAD
    out = [("reach", reach, f"a straight line in joint space to the pose of test.npz frame "
                            f"{GOAL_FRAME}, 1/{STEPS} of the way per step"),
           ("hold", np.zeros((STEPS, a)), "all zeros: stays at the start pose"),
           ("too-fast", fast, f"the reach motion in {STEPS // 2} steps, then still"),
           ("elbow-past-limit", elbow, f"channel 3 (Actuator4) +{MAX_STEP_RAD} rad per step"),
           ("swing-into-keep-out", swing, f"channel 0 (Actuator1, the base) +{MAX_STEP_RAD} "
                                          f"rad per step")]
    return ([n for n, _, _ in out], np.stack([x for _, x, _ in out]).astype(np.float32),
            [d for _, _, d in out])


def joint_limits(robot_yaml: Path, perm: Sequence[int], signs: Sequence[int]
                 ) -> tuple[list[float], list[float]]:
    """The robot's joint limits (canonical order, from its spec) in the controller's order
    and signs: channel i is canonical joint ``perm[i]`` times ``signs[i]``."""
    import yaml

    dofs = yaml.safe_load(robot_yaml.read_text())["dofs"]
    lo, hi = [], []
    for j, s in zip(perm, signs, strict=True):
        a, b = float(dofs[j]["lower"]), float(dofs[j]["upper"])
        a, b = (a, b) if s > 0 else (-b, -a)
        lo.append(round(a, 5))
        hi.append(round(b, 5))
    return lo, hi


def rules_text(lower: Sequence[float], upper: Sequence[float]) -> str:
    """The kit's rules file (also the example in docs/runtime.md, "Rules file")."""
    def vec(v: Sequence[float]) -> str:
        return "[" + ", ".join(f"{x:g}" for x in v) + "]"

    poly = "[" + ", ".join(f"[{x:g}, {y:g}]" for x, y in KEEP_OUT) + "]"
    return f"""\
# keep-out: the robot must not enter these regions (normalised image coordinates,
# x to the right, y down, 0..1, so the file survives a change of resolution)
keep_out:
  # decided on predicted motion: the shipped model's robot mask fades where it is unsure,
  # so on the mask (basis: robot_mask, the default for a model that predicts one) it misses
  # this cell's swing (docs/runtime.md, "Pre-check against ground truth")
  basis: motion
  motion_threshold: 20      # a pixel moved if max over channels |pred - reference| > 20
                            # (0..255; reference: the model's own zero-action rollout)
  max_moved_pixels: 4       # moved pixels allowed inside the regions per step (default 0)
  regions:
    - name: left-of-arm
      polygon: {poly}
# joint limits on start state + summed actions (rad, m for prismatic joints), one per DoF
# of the cell, in the controller's channel order and signs (those of the actions and of
# --joint-state): here the Kinova Gen3's limits in the sample cell's convention
joint_limits:
  lower: {vec(lower)}
  upper: {vec(upper)}
# per-step action bound: one value for every DoF, or one per DoF (rad|m per step)
max_step_action: {MAX_STEP_RAD:g}
# the last predicted frame must resemble the goal image (path relative to this file)
goal:
  image: goal.png
  min_ssim: 0.6
"""


def build(out: Path) -> Path:
    """Render the truth, write the kit into ``out`` and return its manifest path."""
    from edge.episode import load_episode
    from edge.fileio import sha256_file, write_json_atomic
    from edge.metrics import ssim
    from edge.precheck.rules import load_rules, rasterise
    from edge.visual import write_png
    from export.cells.generate import CellGenerator, GenerateOptions
    from export.cells.sampling import chunk_seed, sample_cell
    from export.cells.scene import require_mujoco

    mujoco = require_mujoco()
    sample_manifest = json.loads((SAMPLE / "manifest.json").read_text())
    test = load_episode(SAMPLE / "test.npz")
    q = np.asarray(test.joint_positions, np.float64)  # (T, A) controller order
    cell = sample_cell(np.random.default_rng(chunk_seed("test_all", 0)), "test_all",
                       "sample-cell")
    if json.loads(json.dumps(cell.to_json_dict())) != sample_manifest["cell"]:
        raise SystemExit("the sample cell's parameters differ from samples/cell_sample/"
                         "manifest.json; regenerate the sample cell first")
    names, actions, what = candidates(q)
    conv = cell.convention
    with CellGenerator(GenerateOptions(motion_episodes=0, motion_frames=STEPS + 1)) as gen:
        truth = [gen.render_episode(cell, conv.to_canonical(
            np.vstack([q[0], q[0] + np.cumsum(a.astype(np.float64), 0)])), "validation")
            for a in actions]
    frames = np.stack([e.frames for e in truth])  # (N, T+1, H, W, 3)
    masks = np.stack([e.robot_mask for e in truth])  # (N, T+1, H, W)
    if not np.array_equal(frames[1, 0], test.frames[0]):
        raise SystemExit("the rendered start frame differs from samples/cell_sample/test.npz "
                         "frame 0 (another MuJoCo build?)")
    goal = frames[0, -1]
    if not np.array_equal(goal, test.frames[GOAL_FRAME]):
        raise SystemExit(f"reach's rendered last frame differs from test.npz frame {GOAL_FRAME}")
    out.mkdir(parents=True, exist_ok=True)
    lower, upper = joint_limits(ROOT / "samples" / "robots" / f"{cell.robot}.yaml",
                                conv.perm, conv.signs)
    (out / "rules.yaml").write_text(rules_text(lower, upper))
    write_png(out / "goal.png", goal)
    (out / "candidates.json").write_text(json.dumps(
        {"names": names, "candidates": [[[float(x) for x in step] for step in c]
                                        for c in actions]}, indent=None) + "\n")
    buf = io.BytesIO()
    np.savez_compressed(buf, frames=frames, robot_mask=masks, names=np.asarray(names, str))
    (out / "truth.npz").write_bytes(buf.getvalue())
    rules = load_rules(out / "rules.yaml")  # the file just written, checked by the runtime
    assert rules.keep_out is not None and rules.joint_limits is not None
    region = rasterise(rules.keep_out.regions, *goal.shape[:2]).astype(bool)
    lo, hi = np.asarray(lower), np.asarray(upper)
    facts = []
    for i, name in enumerate(names):
        qs = q[0] + np.cumsum(actions[i].astype(np.float64), 0)  # (T, A) after each step
        inside = (masks[i, 1:] & region).sum((1, 2))  # (T,) true robot px in the region
        out_of = np.flatnonzero(((qs < lo) | (qs > hi)).any(1))
        fast = np.flatnonzero((np.abs(actions[i]) > np.float32(MAX_STEP_RAD)).any(1))
        facts.append({
            "name": name, "what": what[i],
            "max_step_rad": round(float(np.abs(actions[i]).max()), 6),
            "first_step_over_bound": int(fast[0]) if len(fast) else None,
            "first_step_outside_joint_limits": int(out_of[0]) if len(out_of) else None,
            "true_keep_out_px_max": int(inside.max()),
            "first_step_truly_in_keep_out": (int(np.flatnonzero(inside >= 4)[0])
                                             if (inside >= 4).any() else None),
            "true_last_frame_ssim_to_goal": round(float(ssim(frames[i, -1], goal)), 4)})
    manifest = {
        "what": "pre-check kit for samples/cell_sample: candidates from test.npz's start "
                "state, rules that fit the cell, a goal image; the truth rendered by MuJoCo",
        "command": COMMAND,
        "renderer": {"mujoco": mujoco.__version__},
        "sample_cell": {"test.npz": sample_manifest["files"]["test.npz"]["sha256"],
                        "goal_frame": GOAL_FRAME},
        "steps": STEPS,
        "truly_enters_keep_out": "at least 4 true robot-mask pixels inside the region at a step",
        "candidates": facts,
        "files": {p.name: {"sha256": sha256_file(p), "bytes": p.stat().st_size}
                  for p in sorted(out.iterdir()) if p.name != "manifest.json"},
    }
    return write_json_atomic(out / "manifest.json", manifest)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``--out DIR``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path, help="kit folder (samples/precheck)")
    args = p.parse_args(argv)
    print(build(args.out))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
