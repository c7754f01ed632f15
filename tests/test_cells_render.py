"""MuJoCo-rendered cells: determinism, calibration structure in pixels, CLI, bad renderer."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from edge.cli import main
from edge.episode import load_episode
from export.cells.generate import CellGenerator, GenerateOptions, generate_chunk
from export.cells.sampling import CellParams, chunk_seed, sample_cell
from export.errors import CellError, RendererUnavailableError

SMALL = GenerateOptions(cells_per_chunk=1, motion_episodes=1, motion_frames=8)


@pytest.fixture(scope="module")
def chunk(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cells")
    return generate_chunk("test_convention", 0, out, SMALL, command="test")


def test_chunk_regenerates_identically_and_is_skipped_when_complete(chunk: Path,
                                                                     tmp_path: Path) -> None:
    again = generate_chunk("test_convention", 0, tmp_path, SMALL, command="test")
    a, b = json.loads(chunk.read_text()), json.loads(again.read_text())
    assert a["files"] == b["files"] and len(a["files"]) == 2
    for rel in a["files"]:
        ea, eb = load_episode(chunk.parent / rel), load_episode(again.parent / rel)
        assert np.array_equal(ea.frames, eb.frames) and np.array_equal(ea.actions, eb.actions)
    mtime = again.stat().st_mtime_ns
    generate_chunk("test_convention", 0, tmp_path, SMALL)
    assert again.stat().st_mtime_ns == mtime
    # a complete chunk made with other options is refused, not silently mixed in
    with pytest.raises(CellError, match=r"motion: 'all_joints' there, 'two_joint' asked"):
        generate_chunk("test_convention", 0, tmp_path,
                       dataclasses.replace(SMALL, motion="two_joint"))
    # chunks written before the motion option existed count as all_joints
    old = json.loads(again.read_text())
    del old["options"]["motion"]
    again.write_text(json.dumps(old))
    generate_chunk("test_convention", 0, tmp_path, SMALL)
    assert json.loads(again.read_text()) == old


def test_lit_cells_are_lit_by_their_lights_and_ambient_cells_stay_as_rendered(
        chunk: Path, tmp_path: Path) -> None:
    manifest = json.loads(chunk.read_text())
    cell = CellParams.from_json_dict(manifest["cells"][0])
    assert cell.lighting == "ambient" and "lighting" not in manifest["cells"][0]
    lit = dataclasses.replace(cell, lighting="lit")
    assert CellParams.from_json_dict(lit.to_json_dict()) == lit
    with CellGenerator(SMALL) as gen:
        lit_eps = gen.cell_episodes(lit)
        # the same scene object afterwards: an ambient cell is not lit by stale lights
        amb_eps = gen.cell_episodes(cell)
    for name, ep in amb_eps.items():
        stored = load_episode(chunk.parent / f"{cell.cell_id}/{name}.npz")
        assert np.array_equal(ep.frames, stored.frames), name
        lit_ep = lit_eps[name]
        assert np.array_equal(lit_ep.joint_positions, stored.joint_positions)
        assert np.array_equal(lit_ep.robot_mask, stored.robot_mask)
        # the two lights add diffuse light: every frame is brighter, on the arm too
        assert (lit_ep.frames.astype(float).mean(axis=(1, 2, 3))
                > stored.frames.astype(float).mean(axis=(1, 2, 3)) + 5).all()
        arm = stored.robot_mask
        assert lit_ep.frames[arm].astype(float).mean() > stored.frames[arm].mean() + 5
    # a lit chunk records it, per cell and in its options, and is not mixed with ambient
    lit_manifest = json.loads(generate_chunk(
        "test_convention", 0, tmp_path, dataclasses.replace(SMALL, lighting="lit"),
        command="test").read_text())
    assert lit_manifest["cells"][0]["lighting"] == "lit"
    assert lit_manifest["options"]["lighting"] == "lit"
    with pytest.raises(CellError, match=r"lighting: 'lit' there, 'ambient' asked"):
        generate_chunk("test_convention", 0, tmp_path, SMALL)
    with pytest.raises(CellError, match=r"lighting 'sun': expected one of"):
        GenerateOptions(lighting="sun")
    with pytest.raises(ValueError, match=r"lighting 'sun': expected one of"):
        dataclasses.replace(cell, lighting="sun")


def test_shadowed_cells_cast_the_arm_s_shadow_and_leave_the_other_lightings_as_they_were(
        chunk: Path) -> None:
    manifest = json.loads(chunk.read_text())
    cell = CellParams.from_json_dict(manifest["cells"][0])
    lit = dataclasses.replace(cell, lighting="lit")
    shadowed = dataclasses.replace(cell, lighting="shadowed")
    assert CellParams.from_json_dict(shadowed.to_json_dict()) == shadowed
    with CellGenerator(SMALL) as gen:
        lit_before = gen.cell_episodes(lit)["calibration"]
        shadow = gen.cell_episodes(shadowed)["calibration"]
        # the same scene afterwards: no light left casting shadows, no texture left on
        lit_after = gen.cell_episodes(lit)["calibration"]
        ambient = gen.cell_episodes(cell)["calibration"]
    assert np.array_equal(lit_before.frames, lit_after.frames)
    stored = load_episode(chunk.parent / f"{cell.cell_id}/calibration.npz")
    assert np.array_equal(ambient.frames, stored.frames)
    assert np.array_equal(shadow.robot_mask, lit_before.robot_mask)
    # off the arm, shadows take the lamps' light away: pixels far darker than lit (the
    # texture darkens by at most 22%)...
    scene = ~shadow.robot_mask
    ratio = (shadow.frames.astype(float).sum(-1) + 1) / (lit_before.frames.sum(-1) + 1)
    assert ((ratio < 0.6) & scene).mean() > 0.01
    # ...and the scene darkens where the arm's shadow moves, which lit alone it does not
    off_arm = ~(shadow.robot_mask[1:] | shadow.robot_mask[:1])

    def darkened(frames):
        f = frames.astype(float).sum(-1) + 1
        return ((f[1:] / f[:1] < 0.6) & off_arm).any(0).sum()

    assert darkened(shadow.frames) > 20 and darkened(lit_before.frames) == 0


def test_calibration_episode_sweeps_each_channel_alone_with_visible_motion(chunk: Path) -> None:
    manifest = json.loads(chunk.read_text())
    rel = next(r for r in manifest["files"] if r.endswith("calibration.npz"))
    ep = load_episode(chunk.parent / rel)
    m = ep.metadata
    assert m.kind == "calibration" and m.split == "test_convention"
    assert len(m.segments) == ep.num_dof and {s.dof for s in m.segments} == set(m.dof_names)
    diff = np.abs(np.diff(ep.frames.astype(np.int16), axis=0)).sum(axis=(1, 2, 3))
    for s in m.segments:
        c = m.dof_names.index(s.dof)
        rows = ep.actions[s.start:s.stop]
        assert np.all(np.delete(rows, c, axis=1) == 0)
        assert np.isclose(rows[:3, c].sum(), s.amplitude, atol=1e-5)
        assert diff[s.start:s.start + 3].sum() > 0, f"{s.dof}: no image motion"
        assert diff[s.start + 3] == 0 and diff[s.start + 7] == 0, "pauses are still"
    assert ep.robot_mask is not None and ep.robot_mask.any(axis=(1, 2)).all()
    inside = (ep.ee_px >= 0) & (ep.ee_px < 64)
    assert inside.all(axis=1).mean() > 0.9


def test_controller_convention_is_applied_to_actions_not_frames(chunk: Path) -> None:
    manifest = json.loads(chunk.read_text())
    cell = manifest["cells"][0]
    perm, signs = cell["convention"]["perm"], cell["convention"]["signs"]
    rel = next(r for r in manifest["files"] if "motion" in r)
    ep = load_episode(chunk.parent / rel)
    canon = np.empty_like(ep.joint_positions)
    canon[:, perm] = ep.joint_positions * np.asarray(signs)
    # Re-render the canonical positions: the frames must be the same.
    rng = np.random.default_rng(chunk_seed("test_convention", 0))
    params = sample_cell(rng, "test_convention", cell["cell_id"])
    with CellGenerator(SMALL) as gen:
        again = gen.render_episode(params, canon, "motion")
    assert np.array_equal(again.frames, ep.frames)
    assert np.array_equal(again.actions, ep.actions)


def test_cli_show_and_preview(chunk: Path, tmp_path: Path, capsys) -> None:
    manifest = json.loads(chunk.read_text())
    rel = next(iter(manifest["files"]))
    assert main(["cells", "show", str(chunk.parent / rel)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["resolution"] == [64, 64] and info["fps"] == 10.0
    out = tmp_path / "sheet.png"
    cell_dir = (chunk.parent / rel).parent
    assert main(["cells", "preview", "--episode", str(cell_dir), "--out", str(out)]) == 0
    import cv2

    img = cv2.imread(str(out))
    assert img is not None and img.shape[0] > 64 * 2 and img.std() > 5


def test_cli_reports_bad_episode_in_one_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    assert main(["cells", "show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.npz" in err and "not an episode file: expected a NumPy .npz archive" in err
    assert "Traceback" not in err
    assert main(["cells", "generate", "--split", "train", "--chunks", "3-1"]) == 2
    assert "expected N, A-B" in capsys.readouterr().err


def test_missing_renderer_names_the_debian_packages(monkeypatch) -> None:
    import mujoco

    def no_gl(*a, **k):
        raise RuntimeError("eglInitialize() failed")

    monkeypatch.setattr(mujoco, "Renderer", no_gl)
    from export.cells.scene import CellScene

    with pytest.raises(RendererUnavailableError, match=r"apt-get install libegl1 libegl-mesa0"):
        CellScene("panda")
