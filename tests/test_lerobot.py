"""LeRobot v3.0 datasets: round trip, and the written layout checked against the format."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from edge.errors import EpisodeError
from edge.lerobot import read_lerobot, write_lerobot
from tests.fixtures.lerobot_episodes import test_episodes
from tests.helpers import make_episode

LEROBOT_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "lerobot_0_4_4"


@pytest.fixture()
def dataset(tmp_path: Path):
    eps = test_episodes()
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
    assert info["total_episodes"] == 2 and info["total_frames"] == 12 and info["fps"] == 10
    assert isinstance(info["fps"], int)  # as LeRobot writes it
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
    assert set(stats["observation.state"]) >= {"min", "max", "mean", "std", "count"}
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
    info["codebase_version"] = "v1.6"
    info_path.write_text(json.dumps(info))
    with pytest.raises(EpisodeError, match=r"field 'codebase_version': expected one of "
                                           r"\['v3.0', 'v2.1', 'v2.0'\] .*found 'v1.6'"):
        read_lerobot(root)
    with pytest.raises(EpisodeError, match="differs from episode 0"):
        write_lerobot([make_episode(h=8), make_episode(h=10)], tmp_path / "x")
    assert not (tmp_path / "x").exists()


def _v21_dataset(root: Path, episodes, nan_at: tuple[int, int] | None = None) -> Path:
    """``episodes`` in LeRobot's v2.1 layout (one data and one video file per episode,
    meta/episodes.jsonl), with columns a real dataset has beside the state; NaN in
    ``observation.state`` at (episode, frame) ``nan_at``."""
    import av
    import pyarrow as pa

    key = "observation.images.front"
    h, w = episodes[0].frames.shape[1:3]
    n = episodes[0].num_dof
    info = {"codebase_version": "v2.1", "robot_type": "so100", "fps": 10, "chunks_size": 1000,
            "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
            "video_path": "videos/chunk-{episode_chunk:03d}/{video_key}/"
                          "episode_{episode_index:06d}.mp4",
            "features": {key: {"dtype": "video", "shape": [h, w, 3]},
                         "observation.state": {"dtype": "float32", "shape": [n],
                                               "names": {"motors": ["a", "b", "c"]}},
                         "observation.effort": {"dtype": "float32", "shape": [n]}}}
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "info.json").write_text(json.dumps(info))
    lines = []
    for e, ep in enumerate(episodes):
        q = ep.joint_positions.astype(np.float32).copy()
        if nan_at is not None and nan_at[0] == e:
            q[nan_at[1], 1] = np.nan
        data = root / f"data/chunk-000/episode_{e:06d}.parquet"
        data.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"observation.state": list(q), "observation.effort": list(q),
                                 "frame_index": np.arange(len(q)),
                                 "episode_index": np.full(len(q), e)}), data)
        video = root / f"videos/chunk-000/{key}/episode_{e:06d}.mp4"
        video.parent.mkdir(parents=True, exist_ok=True)
        with av.open(str(video), mode="w", format="mp4") as container:
            stream = container.add_stream("libx264", rate=10)
            stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
            stream.options = {"crf": "8", "g": "1"}
            for frame in ep.frames:
                container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
            container.mux(stream.encode(None))
        lines.append(json.dumps({"episode_index": e, "length": len(q), "tasks": ["t"]}))
    (root / "meta" / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_a_v21_dataset_is_read_episode_by_episode(tmp_path: Path) -> None:
    """LeRobot v2.1 (per-episode files; many published datasets): read as v3.0 is, only
    the episodes asked for; a non-finite state names the episode, the column, the frame and
    the joint."""
    from edge.lerobot import lerobot_episode_indices

    eps = test_episodes()
    root = _v21_dataset(tmp_path / "v21", eps)
    assert lerobot_episode_indices(root) == [0, 1]
    (one,) = read_lerobot(root, episodes=[1])
    assert one.num_frames == eps[1].num_frames and one.metadata.dof_names == ("a", "b", "c")
    np.testing.assert_allclose(one.joint_positions, eps[1].joint_positions, atol=1e-5)
    assert np.abs(one.frames.astype(int) - eps[1].frames.astype(int)).mean() < 2.0
    with pytest.raises(EpisodeError, match=r"no episode 5; the dataset has episodes 0-1"):
        read_lerobot(root, episodes=[5])
    bad = _v21_dataset(tmp_path / "nan", eps, nan_at=(1, 3))
    assert read_lerobot(bad, episodes=[0])[0].num_frames == eps[0].num_frames  # not read
    with pytest.raises(EpisodeError, match=r"episode 1: column 'observation.state' has a "
                                           r"non-finite value \(nan\) at frame 3, joint b"):
        read_lerobot(bad, episodes=[1])


def test_a_v30_episode_table_without_the_camera_s_columns_is_named(dataset) -> None:
    _, root = dataset
    (f,) = (root / "meta" / "episodes").glob("chunk-*/file-*.parquet")
    table = pq.read_table(f)
    pq.write_table(table.drop([c for c in table.column_names if c.startswith("videos/")]), f)
    with pytest.raises(EpisodeError, match=r"file-000.parquet.*videos/observation.images.main"
                                           r"/chunk_index"):
        read_lerobot(root)


# -- against what LeRobot 0.4.4's writer writes (tests/fixtures/lerobot_0_4_4) -------------
#
# The fixture was made from LeRobot 0.4.4's published wheel by
# tests/fixtures/make_lerobot_fixture.py: LeRobot's own statistics code (compute_stats.py,
# and utils.py's flatten_dict/serialize_dict/load_image_as_numpy) ran unmodified; the
# episode buffer, the episode rows and the file writing around it were reproduced from
# lerobot_dataset.py's source. LeRobot's writer itself was not run (it needs torch < 2.11).

STAT_KEYS = ["min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"]


def _shape(x: object) -> tuple:
    return np.asarray(x).shape


def _close_to_lerobot(ours: dict, theirs: dict, what: str, image: bool) -> None:
    """Stats of one feature against LeRobot's: exact moments, quantiles within LeRobot's
    histogram bin (5000 bins over [min, max]). LeRobot 0.4.4's image std is computed from
    uint8 squares that wrap around (0.0058 for a channel whose std is 0.22), so an image
    std is checked against the frames, not against it."""
    span = np.asarray(theirs["max"], float) - np.asarray(theirs["min"], float)
    tol = 2 * span / 5000 + 1e-9
    for k in STAT_KEYS:
        a, b = np.asarray(ours[k], float), np.asarray(theirs[k], float)
        assert a.shape == b.shape, (what, k, a.shape, b.shape)
        if k == "std" and image:
            continue
        if k.startswith("q"):
            assert np.all(np.abs(a - b) <= tol), (what, k, a.ravel(), b.ravel())
        elif k == "std":  # LeRobot: sqrt(E[x^2] - E[x]^2) in float32 for float32 features
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7, err_msg=f"{what} {k}")
        else:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7, err_msg=f"{what} {k}")


@pytest.mark.parametrize("which", ["data/chunk-000/file-000.parquet",
                                   "meta/episodes/chunk-000/file-000.parquet"])
def test_a_damaged_parquet_file_is_named(dataset, which: str) -> None:
    _, root = dataset
    path = root / which
    path.write_bytes(path.read_bytes()[:-20])  # cut short: no footer
    with pytest.raises(EpisodeError, match=rf"{which}: cannot read it as Parquet \(.*\); "
                                           r"the dataset is damaged"):
        read_lerobot(root)


def test_a_parquet_file_without_a_column_is_named(dataset) -> None:
    import pyarrow.parquet as pq

    _, root = dataset
    path = root / "data/chunk-000/file-000.parquet"
    pq.write_table(pq.read_table(path).drop(["frame_index"]), path)
    with pytest.raises(EpisodeError, match=r"file-000.parquet: field 'frame_index': missing "
                                           r"column 'frame_index'"):
        read_lerobot(root)


def test_stats_json_has_what_lerobots_writer_writes(dataset) -> None:
    eps, root = dataset
    ours = json.loads((root / "meta/stats.json").read_text())
    theirs = json.loads((LEROBOT_FIXTURE / "stats.json").read_text())
    assert sorted(ours) == sorted(theirs)  # every feature, indices and timestamp included
    for feature, st in theirs.items():
        assert list(ours[feature]) == list(st), feature  # quantiles q01..q99 included
        for k in STAT_KEYS:  # ints stay ints (min/max of int64 features, counts)
            flat_o = np.asarray(ours[feature][k]).ravel().tolist()
            flat_t = np.asarray(st[k]).ravel().tolist()
            assert [type(x) for x in flat_o] == [type(x) for x in flat_t], (feature, k)
        _close_to_lerobot(ours[feature], st, feature, feature.startswith("observation.images"))
    cam = np.concatenate([e.frames for e in eps]).reshape(-1, 3) / 255.0
    np.testing.assert_allclose(np.asarray(ours["observation.images.main"]["std"]).ravel(),
                               cam.std(0), rtol=1e-9)


def test_episodes_parquet_has_lerobots_per_episode_stats_columns(dataset) -> None:
    _, root = dataset
    table = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet")
    fixture = json.loads((LEROBOT_FIXTURE / "episodes.json").read_text())
    import re

    def types(schema: list[list[str]]) -> list[list[str]]:  # list field names vary by version
        return [[n, re.sub(r"list<\w+: ", "list<", t)] for n, t in schema]

    assert types([[f.name, str(f.type)] for f in table.schema]) == types(fixture["schema"])
    for ours, theirs in zip(table.to_pylist(), fixture["rows"], strict=True):
        for feature in {k.split("/")[1] for k in theirs if k.startswith("stats/")}:
            pick = {k.split("/")[2]: v for k, v in theirs.items()
                    if k.startswith(f"stats/{feature}/")}
            mine = {k.split("/")[2]: v for k, v in ours.items()
                    if k.startswith(f"stats/{feature}/")}
            _close_to_lerobot(mine, pick, f"episode {theirs['episode_index']} {feature}",
                              feature.startswith("observation.images"))


def test_lerobot_fixture_matches_its_manifest() -> None:
    import hashlib

    man = json.loads((LEROBOT_FIXTURE / "manifest.json").read_text())
    assert man["lerobot"] == "0.4.4" and "pip download lerobot==0.4.4" in man["recipe"]
    assert "was not run" in man["made_by"]
    for name, digest in man["files"].items():
        assert hashlib.sha256((LEROBOT_FIXTURE / name).read_bytes()).hexdigest() == digest


def test_writing_refuses_a_folder_of_other_files_and_a_file_and_replaces_a_dataset(
        tmp_path: Path, dataset) -> None:
    import os
    import stat

    eps, root = dataset
    mine = tmp_path / "userdata"
    (mine / "sub").mkdir(parents=True)
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError) as info:
        write_lerobot(eps, mine)
    assert info.value.filename == str(mine)
    assert (mine / "notes.txt").read_text() == "keep me" and (mine / "sub").is_dir()
    image = tmp_path / "ref.png"
    image.write_bytes(b"\x89PNG")
    with pytest.raises(FileExistsError):
        write_lerobot(eps, image)
    assert image.read_bytes() == b"\x89PNG"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no leftovers
    # an earlier dataset is replaced, and its folder is readable by others as mkdir makes it
    again = write_lerobot(eps[:1], root)
    assert len(read_lerobot(again)) == 1
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(again.stat().st_mode) == 0o777 & ~mask
