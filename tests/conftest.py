"""Shared pytest configuration: markers that skip cleanly where a capability is missing."""

from __future__ import annotations

import os
import shutil

import pytest


def _cuda_available() -> bool:
    if shutil.which("nvidia-smi") is None and not os.path.exists("/dev/nvidiactl"):
        return False
    try:
        import ctypes

        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    return lib.cuInit(0) == 0 and lib.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0


def _can_use_netns() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("ip") is not None


@pytest.fixture(scope="session", autouse=True)
def _state_root_of_the_session(tmp_path_factory: pytest.TempPathFactory):
    """The state root (``SYNCEDGE_HOME``) the tests write to by default: one folder of the
    session, never the user's own (a test that needs its own sets it itself)."""
    if os.environ.get("SYNCEDGE_HOME"):
        yield
        return
    os.environ["SYNCEDGE_HOME"] = str(tmp_path_factory.mktemp("syncedge-home"))
    try:
        yield
    finally:
        os.environ.pop("SYNCEDGE_HOME", None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    cuda = _cuda_available()
    netns = _can_use_netns()
    skip_gpu = pytest.mark.skip(reason="needs an NVIDIA GPU with a CUDA driver (none found)")
    skip_net = pytest.mark.skip(reason="needs root and iproute2 for network namespaces")
    for item in items:
        if "gpu" in item.keywords and not cuda:
            item.add_marker(skip_gpu)
        if "net" in item.keywords and not netns:
            item.add_marker(skip_net)
