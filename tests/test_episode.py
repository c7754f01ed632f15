"""Episode format: round trip, atomic writes and every validation error."""

from __future__ import annotations

import dataclasses
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from edge.episode import (
    EPISODE_SCHEMA_VERSION,
    Episode,
    actions_from_positions,
    load_episode,
    save_episode,
)
from edge.errors import EpisodeError
from tests.helpers import make_episode


def test_round_trip_keeps_every_array_and_field(tmp_path: Path) -> None:
    ep = make_episode(kind="calibration")
    path = save_episode(ep, tmp_path / "e.npz")
    back = load_episode(path)
    for key in ("frames", "actions", "timestamps", "joint_positions", "ee_px", "robot_mask"):
        a, b = getattr(ep, key), getattr(back, key)
        assert a.dtype == b.dtype and np.array_equal(a, b), key
    assert back.metadata == ep.metadata


def test_round_trip_without_optional_arrays(tmp_path: Path) -> None:
    ep = make_episode(with_extras=False)
    back = load_episode(save_episode(ep, tmp_path / "e.npz"))
    assert back.joint_positions is None and back.ee_px is None and back.robot_mask is None


def test_file_is_compressed(tmp_path: Path) -> None:
    ep = make_episode(t=20, h=32, w=32)
    ep = dataclasses.replace(ep, frames=np.zeros_like(ep.frames))
    path = save_episode(ep, tmp_path / "e.npz")
    assert path.stat().st_size < ep.frames.nbytes / 10
    with zipfile.ZipFile(path) as z:
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in z.infolist())


def test_actions_from_positions_is_next_minus_current_with_zero_last_row() -> None:
    q = np.array([[0.0, 1.0], [0.5, 1.0], [0.25, 3.0]])
    a = actions_from_positions(q)
    assert a.dtype == np.float32
    np.testing.assert_allclose(a, [[0.5, 0.0], [-0.25, 2.0], [0.0, 0.0]])


def _bad(ep: Episode, **changes: object) -> Episode:
    return dataclasses.replace(ep, **changes)


def _meta(ep: Episode, **changes: object) -> Episode:
    return dataclasses.replace(ep, metadata=dataclasses.replace(ep.metadata, **changes))


@pytest.mark.parametrize("mutate, field, words", [
    (lambda e: _bad(e, frames=e.frames.astype(np.float32)), "frames", "dtype uint8"),
    (lambda e: _bad(e, frames=e.frames[..., :2]), "frames", "(T, H, W, 3)"),
    (lambda e: _bad(e, frames=e.frames[0]), "frames", "4 dimensions"),
    (lambda e: _bad(e, actions=e.actions.astype(np.float64)), "actions", "dtype float32"),
    (lambda e: _bad(e, actions=e.actions[:-1]), "actions", "expected 6 rows"),
    (lambda e: _bad(e, actions=np.where(np.eye(6, 3, dtype=bool), np.nan, e.actions)
                    .astype(np.float32)), "actions", "non-finite value nan at row 0"),
    (lambda e: _bad(e, actions=np.full_like(e.actions, np.inf)), "actions", "non-finite"),
    (lambda e: _bad(e, timestamps=e.timestamps.astype(np.float32)), "timestamps",
     "dtype float64"),
    (lambda e: _bad(e, timestamps=e.timestamps[::-1].copy()), "timestamps",
     "strictly increasing"),
    (lambda e: _bad(e, timestamps=np.zeros(6)), "timestamps", "strictly increasing"),
    (lambda e: _bad(e, timestamps=np.array([0, 1, np.nan, 3, 4, 5.0])), "timestamps",
     "non-finite"),
    (lambda e: _bad(e, timestamps=e.timestamps[:-1]), "timestamps", "expected 6 values"),
    (lambda e: _meta(e, dof_names=("a", "b")), "metadata.dof_names", "expected 3 names"),
    (lambda e: _meta(e, dof_names=("a", "a", "b")), "metadata.dof_names", "duplicated"),
    (lambda e: _meta(e, dof_units=("rad", "deg", "m")), "metadata.dof_units", "rad"),
    (lambda e: _meta(e, fps=0.0), "metadata.fps", "positive frame rate"),
    (lambda e: _meta(e, kind="other"), "metadata.kind", "calibration"),
    (lambda e: _meta(e, cell_id=""), "metadata.cell_id", "non-empty string"),
    (lambda e: _bad(e, joint_positions=e.joint_positions[:, :2]), "joint_positions",
     "expected shape (6, 3)"),
    (lambda e: _bad(e, ee_px=e.ee_px[:3]), "ee_px", "expected shape (6, 2)"),
    (lambda e: _bad(e, robot_mask=e.robot_mask.astype(np.uint8)), "robot_mask", "dtype bool"),
])
def test_every_validation_error_names_file_and_field(tmp_path: Path, mutate, field: str,
                                                     words: str) -> None:
    target = tmp_path / "bad.npz"
    with pytest.raises(EpisodeError) as info:
        save_episode(mutate(make_episode()), target)
    msg = str(info.value)
    assert str(target) in msg and f"field '{field}'" in msg and words in msg, msg
    assert info.value.field == field
    assert not target.exists() and list(tmp_path.iterdir()) == []


def test_segment_outside_episode_is_refused(tmp_path: Path) -> None:
    ep = make_episode(kind="calibration")
    seg = dataclasses.replace(ep.metadata.segments[0], stop=99)
    with pytest.raises(EpisodeError, match=r"metadata.segments\[0\].*stop=99"):
        _meta(ep, segments=(seg,)).validate()
    seg = dataclasses.replace(ep.metadata.segments[0], dof="nope")
    with pytest.raises(EpisodeError, match=r"segments\[0\].dof.*'nope'"):
        _meta(ep, segments=(seg,)).validate()


def _rewrite(path: Path, **arrays: np.ndarray) -> None:
    with np.load(path) as npz:
        data = {k: npz[k] for k in npz.files}
    data.update(arrays)
    np.savez_compressed(path, **data)


def _meta_bytes(meta: dict) -> np.ndarray:
    return np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)


def test_future_schema_version_is_refused(tmp_path: Path) -> None:
    path = save_episode(make_episode(), tmp_path / "e.npz")
    meta = {"schema_version": EPISODE_SCHEMA_VERSION + 1,
            **make_episode().metadata.to_json_dict()}
    _rewrite(path, metadata_json=_meta_bytes(meta))
    with pytest.raises(EpisodeError, match=r"e.npz: field 'metadata.schema_version': schema "
                                           r"version 2 is newer.*upgrade syncedge"):
        load_episode(path)


def test_unknown_and_missing_metadata_keys_are_refused(tmp_path: Path) -> None:
    path = save_episode(make_episode(), tmp_path / "e.npz")
    meta = {"schema_version": 1, **make_episode().metadata.to_json_dict(), "colour": 1}
    _rewrite(path, metadata_json=_meta_bytes(meta))
    with pytest.raises(EpisodeError, match=r"unknown key\(s\) \['colour'\]"):
        load_episode(path)
    del meta["colour"], meta["fps"]
    _rewrite(path, metadata_json=_meta_bytes(meta))
    with pytest.raises(EpisodeError, match=r"field 'metadata': missing key\(s\) \['fps'\]"):
        load_episode(path)


def test_metadata_that_is_not_json_is_refused(tmp_path: Path) -> None:
    path = save_episode(make_episode(), tmp_path / "e.npz")
    _rewrite(path, metadata_json=np.frombuffer(b"{not json", dtype=np.uint8))
    with pytest.raises(EpisodeError, match="metadata is not valid JSON"):
        load_episode(path)


def test_missing_and_unknown_arrays_are_refused(tmp_path: Path) -> None:
    path = save_episode(make_episode(), tmp_path / "e.npz")
    with np.load(path) as npz:
        data = {k: npz[k] for k in npz.files if k != "actions"}
    np.savez_compressed(path, **data)
    with pytest.raises(EpisodeError, match=r"field 'actions': missing array"):
        load_episode(path)
    np.savez_compressed(path, **data, actions=make_episode().actions, extra=np.zeros(1))
    with pytest.raises(EpisodeError, match=r"unknown array\(s\) \['extra'\]"):
        load_episode(path)


def test_truncated_file_is_refused_with_its_name(tmp_path: Path) -> None:
    path = save_episode(make_episode(), tmp_path / "e.npz")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(EpisodeError, match=r"e.npz: corrupt or truncated episode file"):
        load_episode(path)


def test_corrupt_bytes_are_refused(tmp_path: Path) -> None:
    path = save_episode(make_episode(t=30, h=16, w=16), tmp_path / "e.npz")
    data = bytearray(path.read_bytes())
    mid = len(data) // 3
    data[mid:mid + 64] = bytes(64)
    path.write_bytes(bytes(data))
    with pytest.raises(EpisodeError, match=r"e.npz"):
        load_episode(path)


def test_not_an_episode_and_missing_file(tmp_path: Path) -> None:
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(EpisodeError, match="not a syncedge episode file"):
        load_episode(tmp_path / "other.npz")
    with pytest.raises(EpisodeError, match=r"nope.npz: no such episode file"):
        load_episode(tmp_path / "nope.npz")


def test_failed_write_leaves_previous_file_and_no_temporary(tmp_path: Path, monkeypatch) -> None:
    path = save_episode(make_episode(seed=1), tmp_path / "e.npz")
    before = path.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez_compressed", boom)
    with pytest.raises(OSError, match="disk full"):
        save_episode(make_episode(seed=2), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["e.npz"]


def test_metadata_stored_as_a_string_array_is_read_as_the_bytes_are(tmp_path: Path) -> None:
    """A writer of its own storing ``metadata_json`` as ``np.array(json_text)`` (a 0-d
    string array) had valid JSON refused as "Expecting property name enclosed in double
    quotes" (its UTF-32 bytes read as UTF-8); it is read as the uint8 bytes are."""
    ep = make_episode(kind="calibration")
    path = save_episode(ep, tmp_path / "e.npz")
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    text = arrays["metadata_json"].tobytes().decode("utf-8")
    arrays["metadata_json"] = np.array(text)
    np.savez_compressed(tmp_path / "own.npz", **arrays)
    assert load_episode(tmp_path / "own.npz").metadata == ep.metadata
