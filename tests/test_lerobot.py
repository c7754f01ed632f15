"""LeRobot v3.0 datasets: round trip, and the written layout checked against the format."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from edge.errors import EpisodeError
from edge.lerobot import read_lerobot, write_lerobot
from tests.helpers import make_episode


def _smooth_episode(seed: int, t: int) -> object:
    ep = make_episode(t=t, a=3, h=32, w=48, seed=seed)
    yy, xx = np.mgrid[0:32, 0:48]
    frames = np.stack([np.stack([xx * 4 + i * 3, yy * 6,
                                 np.full_like(xx, 40 * seed)], -1) for i in range(t)])
    import dataclasses

    return dataclasses.replace(ep, frames=frames.astype(np.uint8), ee_px=None, robot_mask=None)


@pytest.fixture()
def dataset(tmp_path: Path):
    eps = [_smooth_episode(1, 7), _smooth_episode(2, 5)]
    return eps, write_lerobot(eps, tmp_path / "ds")


def test_round_trip_converts_targets_back_to_deltas(dataset) -> None:
    eps, root = dataset
    back = read_lerobot(root)
    assert len(back) == 2
    for a, b in zip(eps, back, strict=True):
        assert b.frames.shape == a.frames.shape
        err = np.abs(a.frames.astype(int) - b.frames.astype(int))
        assert err.mean() < 2.0 and err.max() < 24
        np.testing.assert_allclose(b.actions, a.actions, atol=1e-5)
        np.testing.assert_allclose(b.joint_positions, a.joint_positions, atol=1e-5)
        assert b.metadata == a.metadata
        assert np.all(b.actions[-1] == 0)


def test_layout_follows_lerobot_v3(dataset) -> None:
    eps, root = dataset
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0"
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["video_path"] == ("videos/{video_key}/chunk-{chunk_index:03d}/"
                                  "file-{file_index:03d}.mp4")
    assert info["total_episodes"] == 2 and info["total_frames"] == 12 and info["fps"] == 10.0
    feats = info["features"]
    cam = feats["observation.images.main"]
    assert cam["dtype"] == "video" and cam["shape"] == [32, 48, 3]
    assert cam["info"]["video.codec"] == "h264" and cam["info"]["video.pix_fmt"] == "yuv420p"
    assert feats["observation.state"] == {"dtype": "float32", "shape": [3],
                                          "names": ["j0", "j1", "j2"]}
    for key in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
        assert feats[key]["shape"] == [1]
    data = pq.read_table(root / info["data_path"].format(chunk_index=0, file_index=0))
    assert set(data.column_names) == set(feats) - {"observation.images.main"}
    rows = data.to_pydict()
    assert rows["index"] == list(range(12))
    assert rows["frame_index"] == list(range(7)) + list(range(5))
    # LeRobot's action is the absolute next target: state[t+1], last repeated.
    s = np.asarray(rows["observation.state"])
    a = np.asarray(rows["action"])
    np.testing.assert_allclose(a[:6], s[1:7])
    np.testing.assert_allclose(a[6], s[6])
    ep_table = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [r["length"] for r in ep_table] == [7, 5]
    assert [(r["dataset_from_index"], r["dataset_to_index"]) for r in ep_table] == [(0, 7),
                                                                                   (7, 12)]
    assert ep_table[1]["videos/observation.images.main/from_timestamp"] == pytest.approx(0.7)
    assert ep_table[0]["tasks"] == ["syncedge episode"]
    tasks = pq.read_table(root / "meta/tasks.parquet")
    pandas_meta = json.loads(tasks.schema.metadata[b"pandas"])
    assert pandas_meta["index_columns"] == ["task"]
    stats = json.loads((root / "meta/stats.json").read_text())
    assert set(stats["observation.state"]) == {"min", "max", "mean", "std", "count"}
    import av

    with av.open(str(root / "videos/observation.images.main/chunk-000/file-000.mp4")) as c:
        assert sum(1 for _ in c.decode(video=0)) == 12


def test_import_without_sidecar_uses_dataset_names(dataset) -> None:
    _, root = dataset
    (root / "meta/syncedge_episodes.json").unlink()
    back = read_lerobot(root)
    assert back[0].metadata.dof_names == ("j0", "j1", "j2")
    assert back[0].metadata.source.startswith("lerobot:")


def test_bad_datasets_are_refused_by_file(tmp_path: Path, dataset) -> None:
    with pytest.raises(EpisodeError, match=r"info.json: missing: not a LeRobot dataset"):
        read_lerobot(tmp_path / "nothing")
    _, root = dataset
    info_path = root / "meta/info.json"
    info = json.loads(info_path.read_text())
    info["codebase_version"] = "v2.1"
    info_path.write_text(json.dumps(info))
    with pytest.raises(EpisodeError, match=r"expected codebase_version 'v3.0', found 'v2.1'"):
        read_lerobot(root)
    with pytest.raises(EpisodeError, match="differs from episode 0"):
        write_lerobot([make_episode(h=8), make_episode(h=10)], tmp_path / "x")
    assert not (tmp_path / "x").exists()
