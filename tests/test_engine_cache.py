"""Engine cache key and rebuild decisions (no TensorRT: fake build/deserialise)."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from edge.runtime.engine_cache import EngineCache, EngineCacheError, EngineKey

KEY = EngineKey(onnx_sha256="ab" * 32, trt_version="10.3.0.30", compute_capability="8.7",
                precision="typed", shapes=(("frames", (1, 3, 8, 8), "uint8"),),
                options=(("workspace_bytes", "1073741824"),))


def _deser(blob: bytes):
    return SimpleNamespace(blob=blob) if blob.startswith(b"ENGINE") else None


class Counter:
    def __init__(self, blob: bytes = b"ENGINE-1"):
        self.n, self.blob = 0, blob

    def __call__(self) -> bytes:
        self.n += 1
        return self.blob


def test_key_digest_is_stable_and_covers_every_field():
    assert KEY.digest() == dataclasses.replace(KEY).digest()
    assert len(KEY.digest()) == 32
    changes = [{"onnx_sha256": "cd" * 32}, {"trt_version": "10.3.0.26"},
               {"compute_capability": "11.0"}, {"precision": "flag-fp16"},
               {"shapes": (("frames", (2, 3, 8, 8), "uint8"),)},
               {"shapes": (("frames", (1, 3, 8, 8), "float32"),)},
               {"options": (("workspace_bytes", "1"),)}]
    digests = {dataclasses.replace(KEY, **c).digest() for c in changes}
    assert KEY.digest() not in digests and len(digests) == len(changes)


def test_missing_then_hit(tmp_path):
    cache, build = EngineCache(tmp_path), Counter()
    r = cache.get_or_build(KEY, build, _deser)
    assert (r.action, r.reason, build.n) == ("built", "missing", 1)
    assert r.path == tmp_path / KEY.onnx_sha256[:16] / f"{KEY.digest()}.engine"
    r = cache.get_or_build(KEY, build, _deser)
    assert (r.action, r.reason, build.n) == ("loaded", "", 1)
    assert r.engine.blob == b"ENGINE-1"


def test_forced_rebuild(tmp_path):
    cache, build = EngineCache(tmp_path), Counter()
    cache.get_or_build(KEY, build, _deser)
    r = cache.get_or_build(KEY, build, _deser, force=True)
    assert (r.action, r.reason, build.n) == ("built", "forced", 2)


def test_corrupt_engine_bytes_mean_rebuild(tmp_path):
    cache, build = EngineCache(tmp_path), Counter()
    path = cache.get_or_build(KEY, build, _deser).path
    path.write_bytes(b"ENGINE-garbled")
    r = cache.get_or_build(KEY, build, _deser)
    assert r.action == "built" and r.reason.startswith("corrupt: engine bytes") and build.n == 2
    assert cache.get_or_build(KEY, build, _deser).action == "loaded"


def test_unreadable_sidecar_means_rebuild(tmp_path):
    cache, build = EngineCache(tmp_path), Counter()
    path = cache.get_or_build(KEY, build, _deser).path
    path.with_suffix(".json").write_text("{not json")
    r = cache.get_or_build(KEY, build, _deser)
    assert r.action == "built" and r.reason.startswith("corrupt: unreadable")


def test_deserialisation_failure_means_rebuild_never_a_crash(tmp_path):
    cache = EngineCache(tmp_path)
    cache.store(KEY, b"PLAN-from-an-older-build")  # consistent entry TensorRT rejects

    def raising(blob: bytes):
        if not blob.startswith(b"ENGINE"):
            raise RuntimeError("Serialization assertion failed")
        return blob

    build = Counter()
    r = cache.get_or_build(KEY, build, raising)
    assert (r.action, build.n) == ("built", 1)
    assert r.reason == "corrupt: cached engine did not deserialise"


def test_entry_for_another_key_under_the_same_name_is_rebuilt(tmp_path):
    cache, build = EngineCache(tmp_path), Counter()
    path = cache.get_or_build(KEY, build, _deser).path
    side = path.with_suffix(".json")
    meta = json.loads(side.read_text())
    meta["key"]["trt_version"] = "9.9"
    side.write_text(json.dumps(meta))
    r = cache.get_or_build(KEY, build, _deser)
    assert r.action == "built" and r.reason.startswith("mismatch")


@pytest.mark.parametrize("change", [{"trt_version": "10.16.0.1"}, {"compute_capability": "11.0"}])
def test_tensorrt_or_gpu_change_builds_a_new_engine(tmp_path, change):
    cache, build = EngineCache(tmp_path), Counter()
    old = cache.get_or_build(KEY, build, _deser)
    new = cache.get_or_build(dataclasses.replace(KEY, **change), build, _deser)
    assert (new.action, new.reason, build.n) == ("built", "missing", 2)
    assert new.path != old.path and old.path.exists()


def test_freshly_built_engine_that_does_not_deserialise_is_an_error(tmp_path):
    cache = EngineCache(tmp_path)
    with pytest.raises(EngineCacheError, match="does not deserialise with TensorRT 10.3.0.30"):
        cache.get_or_build(KEY, Counter(b"broken"), _deser)
    assert not cache.path_for(KEY).exists()


def test_timing_cache_path(tmp_path):
    p = EngineCache(tmp_path).timing_cache_path("10.3.0.30", "8.7")
    assert p == tmp_path / "timing" / "10.3.0.30-sm87.cache"
