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

__all__ = ["CODEBASE_VERSION", "READ_VERSIONS", "lerobot_episode_indices", "read_lerobot",
           "write_lerobot"]

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
            # LeRobot writes an integer rate; a fractional one stays a number
            "fps": int(fps) if fps.is_integer() else fps,
            "splits": {"train": f"0:{len(episodes)}"},
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


def _decode_range(path: Path, start: int, length: int) -> np.ndarray:
    """Frames ``start .. start + length - 1`` of a video, uint8 ``[<=length, H, W, 3]``
    (fewer where the video ends first); the frames before are decoded and dropped, the
    decoding stops after the last."""
    import av

    frames = []
    try:
        with av.open(str(path)) as container:
            for i, f in enumerate(container.decode(video=0)):
                if i >= start + length:
                    break
                if i >= start:
                    frames.append(f.to_ndarray(format="rgb24"))
    except (av.error.FFmpegError, ValueError) as exc:
        raise EpisodeError(f"cannot decode video: {exc}", path=path) from None
    if not frames:
        return np.zeros((0, 1, 1, 3), np.uint8)
    return np.stack(frames)


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


#: LeRobot layouts :func:`read_lerobot` reads: v3.0 (episodes packed into shared data and
#: video files, ``meta/episodes/*.parquet``) and v2.0/v2.1 (one data and one video file per
#: episode, ``meta/episodes.jsonl``); :func:`write_lerobot` writes v3.0.
READ_VERSIONS = ("v3.0", "v2.1", "v2.0")


def read_lerobot(root: str | os.PathLike[str], camera_key: str | None = None,
                 episodes: Sequence[int] | None = None) -> list[Episode]:
    """Read a LeRobot dataset's episodes (absolute targets converted to deltas).

    Only the episodes asked for are read and decoded (a v3.0 video file holds many
    episodes: the frames before an episode's are decoded and dropped, none kept), so
    importing one episode of a large dataset takes the memory of that episode.

    Args:
        root: dataset folder (layout v3.0, v2.1 or v2.0: :data:`READ_VERSIONS`).
        camera_key: which video feature to use (default: the only or first one).
        episodes: which episode indices, in this order (default: every one).

    Raises:
        EpisodeError: naming the file, the episode and the field when the layout is another
            version or is malformed (a missing column or file, a non-finite
            ``observation.state``, frames and states of different counts), or an episode
            index the dataset does not have.
    """
    ds = _Dataset(Path(root), camera_key)
    wanted = ds.indices() if episodes is None else list(episodes)
    return [ds.episode(e) for e in wanted]


def lerobot_episode_indices(root: str | os.PathLike[str]) -> list[int]:
    """The episode indices a LeRobot dataset holds (from its metadata; nothing decoded).

    Raises:
        EpisodeError: as :func:`read_lerobot`.
    """
    return _Dataset(Path(root), None).indices()


def lerobot_video_keys(root: str | os.PathLike[str]) -> list[str]:
    """The video features (cameras) a LeRobot dataset holds, in ``meta/info.json``'s
    order (the first is what :func:`read_lerobot` reads without a ``camera_key``).

    Raises:
        EpisodeError: as :func:`read_lerobot`.
    """
    return list(_Dataset(Path(root), None).videos)


class _Dataset:
    """A LeRobot dataset's metadata (``meta/info.json``, the episode table) and the reading
    of one episode from it."""

    def __init__(self, root: Path, camera_key: str | None) -> None:
        self.root = root
        info_path = root / "meta" / "info.json"
        try:
            info = json.loads(info_path.read_text())
        except (FileNotFoundError, NotADirectoryError):
            raise EpisodeError("missing: not a LeRobot dataset", path=info_path) from None
        except json.JSONDecodeError as exc:
            raise EpisodeError(f"invalid JSON: {exc}", path=info_path) from None
        version = info.get("codebase_version")
        if version not in READ_VERSIONS:
            raise EpisodeError(f"expected one of {list(READ_VERSIONS)} (the LeRobot layouts "
                               f"this syncedge reads), found {version!r}: convert the dataset "
                               f"with LeRobot's own conversion script to v3.0",
                               path=info_path, field="codebase_version")
        self.version = version
        feats = info.get("features", {})
        videos = [k for k, v in feats.items() if v.get("dtype") == "video"]
        self.videos = videos
        if camera_key is None:
            if not videos:
                raise EpisodeError("no video feature", path=info_path, field="features")
            camera_key = videos[0]
        elif camera_key not in videos:
            raise EpisodeError(f"no video feature {camera_key!r}; found {videos}",
                               path=info_path, field="features")
        self.camera_key = camera_key
        if "observation.state" not in feats:
            raise EpisodeError("missing feature 'observation.state'", path=info_path,
                               field="features")
        shape = feats["observation.state"].get("shape")
        width = int(shape[0]) if isinstance(shape, list) and shape and \
            isinstance(shape[0], int) else None
        names = feats["observation.state"].get("names") or [
            f"dof{i}" for i in range(width or 0)]
        if isinstance(names, dict):  # older layouts: {"motors": [...]}
            names = next(iter(names.values()))
        self.names = [str(n) for n in names]
        if width is not None and len(self.names) != width:
            raise EpisodeError(f"features.observation.state: {len(self.names)} names "
                               f"{self.names} for a shape of [{width}]; expected one name "
                               f"per state column", path=info_path,
                               field="features.observation.state.names")
        for key in ("fps", "data_path", "video_path"):
            if key not in info:
                raise EpisodeError(f"missing key {key!r}", path=info_path, field=key)
        self.info = info
        self.fps = float(info["fps"])
        sidecar_path = root / SIDECAR
        try:
            self.sidecar = json.loads(sidecar_path.read_text()) if sidecar_path.is_file() \
                else None
        except json.JSONDecodeError as exc:
            raise EpisodeError(f"invalid JSON: {exc}", path=sidecar_path) from None
        self.rows = self._v3_rows() if version == "v3.0" else self._v2_rows()
        self._tables: dict[Path, dict[str, Any]] = {}

    def _v3_rows(self) -> dict[int, dict[str, Any]]:
        import pyarrow.parquet as pq

        episodes_dir = self.root / "meta" / "episodes"
        ep_files = sorted(episodes_dir.glob("chunk-*/file-*.parquet"))
        if not ep_files:
            raise EpisodeError("no episode metadata files", path=episodes_dir)
        k = self.camera_key
        rows = {}
        for f in ep_files:
            table = _read_parquet(pq, f)
            _require_columns(table, ("episode_index", "length", "data/chunk_index",
                                     "data/file_index", f"videos/{k}/chunk_index",
                                     f"videos/{k}/file_index", f"videos/{k}/from_timestamp"),
                             f)
            for r in table.to_pylist():
                rows[int(r["episode_index"])] = {
                    "length": int(r["length"]), "meta": f,
                    "data": self.info["data_path"].format(
                        chunk_index=r["data/chunk_index"], file_index=r["data/file_index"]),
                    "video": self.info["video_path"].format(
                        video_key=k, chunk_index=r[f"videos/{k}/chunk_index"],
                        file_index=r[f"videos/{k}/file_index"]),
                    "video_start": int(round(float(r[f"videos/{k}/from_timestamp"])
                                             * self.fps))}
        return rows

    def _v2_rows(self) -> dict[int, dict[str, Any]]:
        path = self.root / "meta" / "episodes.jsonl"
        try:
            lines = path.read_text().splitlines()
        except (FileNotFoundError, NotADirectoryError):
            raise EpisodeError("missing: the episode table of a LeRobot "
                               f"{self.version} dataset", path=path) from None
        chunk = int(self.info.get("chunks_size") or 1000)
        rows = {}
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                e, length = int(r["episode_index"]), int(r["length"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise EpisodeError(f"line {n}: expected a JSON object with episode_index "
                                   f"and length ({exc})", path=path) from None
            rows[e] = {"length": length, "meta": path, "video_start": 0,
                       "data": self.info["data_path"].format(episode_chunk=e // chunk,
                                                             episode_index=e),
                       "video": self.info["video_path"].format(
                           episode_chunk=e // chunk, episode_index=e,
                           video_key=self.camera_key)}
        if not rows:
            raise EpisodeError("no episodes listed", path=path)
        return rows

    def indices(self) -> list[int]:
        return sorted(self.rows)

    def _table(self, path: Path) -> dict[str, Any]:
        import pyarrow.parquet as pq

        if path not in self._tables:
            if not path.is_file():
                raise EpisodeError("missing data file", path=path)
            table = _read_parquet(pq, path)
            _require_columns(table, ("episode_index", "frame_index", "observation.state"),
                             path)
            cols = ["episode_index", "frame_index", "observation.state"] + \
                (["timestamp"] if "timestamp" in table.column_names else [])
            self._tables = {path: table.select(cols).to_pydict()}
        return self._tables[path]

    def episode(self, e: int) -> Episode:
        if e not in self.rows:
            raise EpisodeError(f"no episode {e}; the dataset has episodes "
                               f"{_ranges(self.indices())}", path=self.root)
        row = self.rows[e]
        dpath = self.root / row["data"]
        d = self._table(dpath)
        sel = np.asarray(d["episode_index"]) == e
        state = np.asarray(d["observation.state"], dtype=np.float64)[sel]
        order = np.argsort(np.asarray(d["frame_index"])[sel])
        state = state[order]
        if "timestamp" in d and int(sel.sum()) >= 3:
            stamps = np.asarray(d["timestamp"], np.float64)[sel][order]
            step = float(np.median(np.diff(stamps)))
            if step > 0 and abs(step * self.fps - 1.0) > 0.01:
                raise EpisodeError(
                    f"episode {e}: meta/info.json says fps {self.fps:g}, but the frames' "
                    f"'timestamp' column steps {step * 1e3:.1f} ms ({1.0 / step:.3g} Hz): "
                    f"the video would be read from the wrong place and paired with the wrong "
                    f"states; correct 'fps' in meta/info.json", path=dpath)
        bad = ~np.isfinite(state)
        if bad.any():
            r, c = np.argwhere(bad)[0]
            name = self.names[c] if c < len(self.names) else f"channel {c}"
            raise EpisodeError(f"episode {e}: column 'observation.state' has a non-finite "
                               f"value ({state[r, c]}) at frame {r}, joint {name} "
                               f"({int(bad.any(axis=1).sum())} frame(s) in all); the "
                               f"recording of that episode is damaged: import another "
                               f"episode, or repair the dataset", path=dpath)
        length = row["length"]
        vpath = self.root / row["video"]
        if not vpath.is_file():
            raise EpisodeError(f"episode {e}: missing video file", path=vpath)
        frames = _decode_range(vpath, row["video_start"], length)
        if len(frames) != length or len(state) != length:
            raise EpisodeError(f"episode {e}: expected {length} frames and states (the "
                               f"episode table {row['meta'].name}), found {len(frames)} "
                               f"frames in the video and {len(state)} states in "
                               f"{dpath.name}", path=vpath)
        actions = np.zeros(state.shape, np.float32)
        actions[:-1] = np.diff(state, axis=0)
        if self.sidecar is not None and e < len(self.sidecar):
            meta = EpisodeMetadata.from_json_dict(self.sidecar[e], path=self.root / SIDECAR)
        else:
            robot = str(self.info.get("robot_type") or "unknown")
            meta = EpisodeMetadata(
                cell_id=self.root.name, camera_id=self.camera_key, robot_id=robot,
                robot=robot, dof_names=tuple(self.names),
                dof_units=("rad",) * len(self.names), fps=self.fps, kind="motion",
                source=f"lerobot:{self.root}")
        ts = np.arange(length, dtype=np.float64) / self.fps
        return continuous_joints(Episode(
            frames=np.ascontiguousarray(frames), actions=actions, timestamps=ts, metadata=meta,
            joint_positions=state).validate(self.root))


def _ranges(indices: Sequence[int]) -> str:
    """``0-3, 7`` for ``[0, 1, 2, 3, 7]``."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
