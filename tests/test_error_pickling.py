"""Errors cross process boundaries whole: a worker's error (``syncedge cells generate
--workers 2``, the quantisation and evaluation pools) reaches the parent with its message
and attributes, not as a broken pool."""

from __future__ import annotations

import pickle
from concurrent.futures import ProcessPoolExecutor

import pytest

from edge.cache.values import CacheCorruptError
from edge.calibrate.errors import RecordingError
from edge.calibrate.ingest import IngestError
from edge.errors import EpisodeError, MissingDependencyError

CASES = [
    (MissingDependencyError("mujoco", "train", "rendering cells"),
     {"library": "mujoco", "extra": "train"}),
    (IngestError("unseen", "DoF 'j2': no frame near 0.75", dof="j2", frames=(3, 9)),
     {"code": "unseen", "dof": "j2", "frames": (3, 9)}),
    (EpisodeError("expected uint8", path="cal.npz", field="frames"),
     {"path": "cal.npz", "field": "frames", "file": "cal.npz", "key_path": "frames"}),
    (RecordingError("camera lost at frame 12", partial_path="rec.partial.npz"),
     {"partial_path": "rec.partial.npz"}),
    (CacheCorruptError("checksum differs", key=None, role="row", file="idx.json"),
     {"key": None, "role": "row", "file": "idx.json"}),
]


@pytest.mark.parametrize("err, attrs", CASES, ids=[type(c[0]).__name__ for c in CASES])
def test_round_trip_keeps_type_message_and_attributes(err, attrs):
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert str(back) == str(err)
    for name, value in attrs.items():
        assert getattr(back, name) == value, name


def _raise_missing():
    raise MissingDependencyError("mujoco", "train", "rendering cells")


def test_worker_error_reaches_the_parent_whole():
    with ProcessPoolExecutor(max_workers=1) as pool:
        with pytest.raises(MissingDependencyError, match="pip install 'syncedge\\[train\\]'"):
            pool.submit(_raise_missing).result()
