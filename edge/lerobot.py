"""Read and write LeRobot datasets (layout v3.0) as syncedge episodes.

Layout (LeRobot dataset format v3.0, as documented with LeRobot's ``LeRobotDataset``)::

    ROOT/meta/info.json                                 codebase_version "v3.0", fps, features,
                                                        data_path, video_path, totals
    ROOT/meta/stats.json                                per feature: min/max/mean/std/count
                                                        and quantiles q01..q99
    ROOT/meta/tasks.parquet                             task (index) -> task_index
    ROOT/meta/episodes/chunk-000/file-000.parquet       one row per episode: length, tasks,
                                                        data/* and videos/<key>/* locations,
                                                        stats/<feature>/<stat>
    ROOT/data/chunk-000/file-000.parquet                one row per frame
    ROOT/videos/<video_key>/chunk-000/file-000.mp4      episodes concatenated, one per camera

LeRobot stores absolute joint targets: ``observation.state`` holds joint positions and
``action`` the commanded next position. syncedge's action is the measured position change
(docs/architecture.md), so :func:`read_lerobot` converts on import:
``actions[t] = state[t+1] - state[t]``, last row zero. :func:`write_lerobot` writes
``observation.state = joint_positions`` and ``action = state[t+1]`` (last: ``state[T-1]``).
syncedge's own metadata (ids, units, segments) travels in ``meta/syncedge_episodes.json``,
a file LeRobot ignores; without it, ids are derived from the dataset and units are ``rad``.

Video is H.264, yuv420p (lossy: frames round-trip to within a few grey levels).

Statistics (``meta/stats.json`` and the per-episode ``stats/*`` columns) are those LeRobot
0.4.4's writer stores, for every feature (timestamp and indices included): see
:mod:`edge.lerobot_stats`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from edge.episode import Episode, EpisodeMetadata, continuous_joints
from edge.errors import EpisodeError
from edge.fileio import _umask, check_folder_target
from edge.lerobot_stats import (
    STAT_KEYS,
    aggregate_stats,
    feature_stats,
    image_stats,
    stats_to_json,
)

__all__ = ["CODEBASE_VERSION", "read_lerobot", "write_lerobot"]

CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
SIDECAR = "meta/syncedge_episodes.json"


def _pandas_index_metadata(index: str, column: str) -> bytes:
    """pandas' parquet schema metadata marking ``index`` as the DataFrame index.

    Format: pandas documentation, "Storing pandas DataFrame objects in Apache Parquet
    format" (the ``pandas`` key of the Arrow schema metadata).
    """
    return json.dumps({
        "index_columns": [index],
        "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode",
                            "numpy_type": "object", "metadata": {"encoding": "UTF-8"}}],
        "columns": [
            {"name": column, "field_name": column, "pandas_type": "int64",
             "numpy_type": "int64", "metadata": None},
            {"name": index, "field_name": index, "pandas_type": "unicode",
             "numpy_type": "object", "metadata": None},
        ],
        "creator": {"library": "pyarrow", "version": "any"},
        "pandas_version": "2.2.0",
    }).encode()


def write_lerobot(episodes: Sequence[Episode], root: str | os.PathLike[str],
                  camera_key: str = "observation.images.main", task: str = "syncedge episode",
                  robot_type: str | None = None) -> Path:
    """Write episodes as one LeRobot v3.0 dataset at ``root`` (replaced atomically).

    All episodes must share resolution, DoF names and frame rate. ``root`` may be missing,
    an empty folder or an earlier LeRobot dataset (a folder with ``meta/info.json``), which
    is replaced; anything else is refused before any work, so nothing of the user's is lost.
    The dataset's folders get the permissions of the process's umask, as ``mkdir`` would.

    Raises:
        EpisodeError: if the episodes disagree on resolution, DoF names or rate.
        FileExistsError: ``root`` is an existing file, or a folder of other files
            (``filename`` is ``root``).
    """
    import av
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not episodes:
        raise EpisodeError("no episodes to write", path=root)
    first = episodes[0]
    h, w = first.resolution
    names = list(first.metadata.dof_names)
    fps = float(first.metadata.fps)
    for i, ep in enumerate(episodes):
        ep.validate()
        if ep.resolution != (h, w) or list(ep.metadata.dof_names) != names \
                or ep.metadata.fps != fps:
            raise EpisodeError(f"episode {i} differs from episode 0 in resolution, DoF names or "
                               f"rate ({ep.resolution}, {list(ep.metadata.dof_names)}, "
                               f"{ep.metadata.fps}); expected {(h, w)}, {names}, {fps}",
                               path=root)
    root = check_folder_target(root, "meta/info.json")
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp's 0700 would hide it from other users
    try:
        states: list[np.ndarray] = []  # per frame: joint state row (A,)
        acts: list[np.ndarray] = []  # per frame: action row (A,)
        ts: list[np.float32] = []  # per frame: timestamp within its episode, s
        fidx: list[int] = []  # per frame: frame index within its episode
        eidx: list[int] = []  # per frame: episode index
        ep_rows: dict[str, list[Any]] = {k: [] for k in (
            "episode_index", "tasks", "length", "data/chunk_index", "data/file_index",
            "dataset_from_index", "dataset_to_index", f"videos/{camera_key}/chunk_index",
            f"videos/{camera_key}/file_index", f"videos/{camera_key}/from_timestamp",
            f"videos/{camera_key}/to_timestamp", "meta/episodes/chunk_index",
            "meta/episodes/file_index")}
        video = tmp / VIDEO_PATH.format(video_key=camera_key, chunk_index=0, file_index=0)
        video.parent.mkdir(parents=True)
        offset = 0
        ep_stats: list[dict[str, dict[str, np.ndarray]]] = []  # per episode: feature -> stats
        with av.open(str(video), mode="w", format="mp4") as container:
            stream = container.add_stream("libx264", rate=Fraction(fps).limit_denominator(1000))
            stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
            stream.options = {"crf": "8", "g": "1"}
            for e, ep in enumerate(episodes):
                t = ep.num_frames
                q = ep.joint_positions if ep.joint_positions is not None else np.vstack(
                    [np.zeros((1, ep.num_dof)), np.cumsum(ep.actions[:-1], axis=0)])
                q = q.astype(np.float32)
                target = np.vstack([q[1:], q[-1:]])
                states.extend(q)
                acts.extend(target)
                ts.extend((np.arange(t) / fps).astype(np.float32))
                fidx.extend(range(t))
                eidx.extend([e] * t)
                for frame in ep.frames:
                    for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                        container.mux(packet)
                # the features in info.json's order, as LeRobot's episode buffer holds them
                columns = {"observation.state": q, "action": target,
                           "timestamp": np.arange(t) / fps,  # float64, as LeRobot's buffer
                           "frame_index": np.arange(t, dtype=np.int64),
                           "episode_index": np.full(t, e, np.int64),
                           "index": np.arange(offset, offset + t, dtype=np.int64),
                           "task_index": np.zeros(t, np.int64)}
                ep_stats.append({camera_key: image_stats(ep.frames),
                                 **{k: feature_stats(v) for k, v in columns.items()}})
                for key, value in (("episode_index", e), ("tasks", [task]), ("length", t),
                                   ("data/chunk_index", 0), ("data/file_index", 0),
                                   ("dataset_from_index", offset),
                                   ("dataset_to_index", offset + t),
                                   (f"videos/{camera_key}/chunk_index", 0),
                                   (f"videos/{camera_key}/file_index", 0),
                                   (f"videos/{camera_key}/from_timestamp", offset / fps),
                                   (f"videos/{camera_key}/to_timestamp", (offset + t) / fps),
                                   ("meta/episodes/chunk_index", 0),
                                   ("meta/episodes/file_index", 0)):
                    ep_rows[key].append(value)
                offset += t
            for packet in stream.encode():
                container.mux(packet)
        a = len(names)
        vec = pa.list_(pa.float32(), a)
        data = pa.table({
            "observation.state": pa.array([list(map(float, s)) for s in states], type=vec),
            "action": pa.array([list(map(float, s)) for s in acts], type=vec),
            "timestamp": pa.array(ts, type=pa.float32()),
            "frame_index": pa.array(fidx, type=pa.int64()),
            "episode_index": pa.array(eidx, type=pa.int64()),
            "index": pa.array(range(offset), type=pa.int64()),
            "task_index": pa.array([0] * offset, type=pa.int64()),
        })
        data_path = tmp / DATA_PATH.format(chunk_index=0, file_index=0)
        data_path.parent.mkdir(parents=True)
        pq.write_table(data, data_path)
        eps_path = tmp / EPISODES_PATH.format(chunk_index=0, file_index=0)
        eps_path.parent.mkdir(parents=True)
        meta_cols = {k: ep_rows.pop(k) for k in ("meta/episodes/chunk_index",
                                                  "meta/episodes/file_index")}
        for feature in ep_stats[0]:  # stats/<feature>/<stat>, before meta/episodes/*
            ep_rows.update(_stat_columns(feature, ep_stats))
        ep_rows.update(meta_cols)
        pq.write_table(pa.table(ep_rows), eps_path)
        tasks = pa.table({"task_index": pa.array([0], pa.int64()), "task": [task]})
        tasks = tasks.replace_schema_metadata({b"pandas": _pandas_index_metadata("task",
                                                                                 "task_index")})
        pq.write_table(tasks, tmp / "meta" / "tasks.parquet")
        scalar = {"dtype": None, "shape": [1], "names": None}
        info = {
            "codebase_version": CODEBASE_VERSION,
            "robot_type": robot_type or first.metadata.robot,
            "total_episodes": len(episodes), "total_frames": offset, "total_tasks": 1,
            "chunks_size": 1000, "data_files_size_in_mb": 100, "video_files_size_in_mb": 200,
            "fps": fps, "splits": {"train": f"0:{len(episodes)}"},
            "data_path": DATA_PATH, "video_path": VIDEO_PATH,
            "features": {
                camera_key: {"dtype": "video", "shape": [h, w, 3],
                             "names": ["height", "width", "channels"],
                             "info": {"video.height": h, "video.width": w,
                                      "video.codec": "h264", "video.pix_fmt": "yuv420p",
                                      "video.is_depth_map": False, "video.fps": fps,
                                      "video.channels": 3, "has_audio": False}},
                "observation.state": {"dtype": "float32", "shape": [a], "names": names},
                "action": {"dtype": "float32", "shape": [a], "names": names},
                "timestamp": {**scalar, "dtype": "float32"},
                "frame_index": {**scalar, "dtype": "int64"},
                "episode_index": {**scalar, "dtype": "int64"},
                "index": {**scalar, "dtype": "int64"},
                "task_index": {**scalar, "dtype": "int64"},
            },
        }
        (tmp / "meta" / "info.json").write_text(json.dumps(info, indent=4))
        stats = {f: aggregate_stats([st[f] for st in ep_stats]) for f in ep_stats[0]}
        (tmp / "meta" / "stats.json").write_text(json.dumps(stats_to_json(stats), indent=4))
        (tmp / SIDECAR).write_text(json.dumps(
            [ep.metadata.to_json_dict() for ep in episodes], indent=1))
        if root.exists():
            old = root.with_name(f".{root.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(root, old)
            os.replace(tmp, root)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root


def _stat_columns(feature: str, ep_stats: Sequence[dict[str, dict[str, np.ndarray]]]
                  ) -> dict[str, list[Any]]:
    """``stats/<feature>/<stat>`` -> one value per episode (nested lists; int64 stays int)."""
    per = [stats_to_json({feature: st[feature]})[feature] for st in ep_stats]
    return {f"stats/{feature}/{k}": [p[k] for p in per] for k in STAT_KEYS}


def _decode_all(path: Path) -> np.ndarray:
    import av

    try:
        with av.open(str(path)) as container:
            return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
    except (av.error.FFmpegError, ValueError) as exc:
        raise EpisodeError(f"cannot decode video: {exc}", path=path) from None


def _read_parquet(pq: Any, path: Path) -> Any:
    """``pq.read_table(path)``; a damaged or unreadable file raises :class:`EpisodeError`
    naming it (pyarrow's own errors name neither the file nor what to do)."""
    import pyarrow as pa

    try:
        return pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise EpisodeError(f"cannot read it as Parquet ({exc}); the dataset is damaged: "
                           "copy or export it again", path=path) from None


def _require_columns(table: Any, columns: Sequence[str], path: Path) -> None:
    """Raise :class:`EpisodeError` naming ``path`` and the first of ``columns`` that the
    pyarrow ``table`` lacks."""
    for col in columns:
        if col not in table.column_names:
            raise EpisodeError(f"missing column {col!r}", path=path, field=col)


def read_lerobot(root: str | os.PathLike[str], camera_key: str | None = None) -> list[Episode]:
    """Read a LeRobot v3.0 dataset into episodes (absolute targets converted to deltas).

    Args:
        root: dataset folder.
        camera_key: which video feature to use (default: the only or first one).

    Raises:
        EpisodeError: naming the file and field when the layout is not v3.0 or is malformed.
    """
    import pyarrow.parquet as pq

    root = Path(root)
    info_path = root / "meta" / "info.json"
    try:
        info = json.loads(info_path.read_text())
    except FileNotFoundError:
        raise EpisodeError("missing: not a LeRobot dataset", path=info_path) from None
    except json.JSONDecodeError as exc:
        raise EpisodeError(f"invalid JSON: {exc}", path=info_path) from None
    version = info.get("codebase_version")
    if version != CODEBASE_VERSION:
        raise EpisodeError(f"expected codebase_version {CODEBASE_VERSION!r}, found {version!r}",
                           path=info_path, field="codebase_version")
    feats = info.get("features", {})
    videos = [k for k, v in feats.items() if v.get("dtype") == "video"]
    if camera_key is None:
        if not videos:
            raise EpisodeError("no video feature", path=info_path, field="features")
        camera_key = videos[0]
    elif camera_key not in videos:
        raise EpisodeError(f"no video feature {camera_key!r}; found {videos}", path=info_path,
                           field="features")
    for key in ("observation.state",):
        if key not in feats:
            raise EpisodeError(f"missing feature {key!r}", path=info_path, field="features")
    names = feats["observation.state"].get("names") or [
        f"dof{i}" for i in range(feats["observation.state"]["shape"][0])]
    if isinstance(names, dict):  # older layouts: {"motors": [...]}
        names = next(iter(names.values()))
    fps = float(info["fps"])
    sidecar_path = root / SIDECAR
    try:
        sidecar = json.loads(sidecar_path.read_text()) if sidecar_path.is_file() else None
    except json.JSONDecodeError as exc:
        raise EpisodeError(f"invalid JSON: {exc}", path=sidecar_path) from None
    episodes_dir = root / "meta" / "episodes"
    ep_files = sorted(episodes_dir.glob("chunk-*/file-*.parquet"))
    if not ep_files:
        raise EpisodeError("no episode metadata files", path=episodes_dir)
    ep_rows = []
    for f in ep_files:
        table = _read_parquet(pq, f)
        _require_columns(table, ("episode_index", "length", "data/chunk_index",
                                 "data/file_index"), f)
        ep_rows += table.to_pylist()
    data_cache: dict[Path, dict[str, Any]] = {}
    video_cache: dict[Path, np.ndarray] = {}
    out = []
    for row in sorted(ep_rows, key=lambda r: r["episode_index"]):
        e = int(row["episode_index"])
        dpath = root / info["data_path"].format(chunk_index=row["data/chunk_index"],
                                                file_index=row["data/file_index"])
        if dpath not in data_cache:
            if not dpath.is_file():
                raise EpisodeError("missing data file", path=dpath)
            table = _read_parquet(pq, dpath)
            _require_columns(table, ("episode_index", "frame_index", "observation.state"),
                             dpath)
            data_cache[dpath] = table.to_pydict()
        d = data_cache[dpath]
        sel = np.asarray(d["episode_index"]) == e
        state = np.asarray(d["observation.state"], dtype=np.float64)[sel]
        order = np.argsort(np.asarray(d["frame_index"])[sel])
        state = state[order]
        vpath = root / info["video_path"].format(
            video_key=camera_key, chunk_index=row[f"videos/{camera_key}/chunk_index"],
            file_index=row[f"videos/{camera_key}/file_index"])
        if vpath not in video_cache:
            if not vpath.is_file():
                raise EpisodeError("missing video file", path=vpath)
            video_cache[vpath] = _decode_all(vpath)
        start = int(round(float(row[f"videos/{camera_key}/from_timestamp"]) * fps))
        length = int(row["length"])
        frames = video_cache[vpath][start:start + length]
        if len(frames) != length or len(state) != length:
            raise EpisodeError(f"episode {e}: expected {length} frames and states, found "
                               f"{len(frames)} frames and {len(state)} states", path=vpath)
        actions = np.zeros(state.shape, np.float32)
        actions[:-1] = np.diff(state, axis=0)
        if sidecar is not None and e < len(sidecar):
            meta = EpisodeMetadata.from_json_dict(sidecar[e], path=sidecar_path)
        else:
            meta = EpisodeMetadata(
                cell_id=root.name, camera_id=camera_key,
                robot_id=str(info.get("robot_type") or "unknown"),
                robot=str(info.get("robot_type") or "unknown"), dof_names=tuple(names),
                dof_units=("rad",) * len(names), fps=fps, kind="motion",
                source=f"lerobot:{root}")
        ts = np.arange(length, dtype=np.float64) / fps
        out.append(continuous_joints(Episode(
            frames=np.ascontiguousarray(frames), actions=actions, timestamps=ts, metadata=meta,
            joint_positions=state).validate(root)))
    return out
