"""Fixtures for the device tests on the CPU: the fake CUDA driver (tests/fake_cuda.py) and
the fake TensorRT (tests/fake_tensorrt.py) installed as ``pycuda.driver`` and
``tensorrt``, a state root, and a read-only copy of the tiny model as a bundle slot."""

from __future__ import annotations

import argparse
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from fake_cuda import FakeCuda, install, install_tensorrt
from fake_tensorrt import make_fake_trt

import edge.runtime.backends as backends
from edge.runtime.backends.probe import Availability
from export.cli import register
from tests.fixtures.runtime import tiny_model_dir

__all__ = ["Fakes", "export_engine", "make_slot"]


class Fakes:
    """The fake driver and TensorRT installed for one test, and the state root."""

    def __init__(self, monkeypatch, tmp_path: Path):
        self.monkeypatch, self.tmp = monkeypatch, tmp_path
        self.cuda = FakeCuda(cc=(8, 7))
        install(monkeypatch, self.cuda)
        self.state = tmp_path / "state"
        monkeypatch.setenv("SYNCEDGE_HOME", str(self.state))
        monkeypatch.setattr("edge.bundle.device_target.cuda_compute_capability",
                            lambda device=0: self.cuda.cc)
        monkeypatch.setattr(backends, "cuda_driver_status",
                            lambda: Availability("cuda-driver", True, "fake driver"))
        monkeypatch.setattr("edge.runtime.cuda_step.CapturedGraph", self.cuda.CapturedGraph)
        self.use_trt("10.3.0.30")

    def use_trt(self, version: str) -> None:
        self.trt, self.calls = make_fake_trt(version, cuda=self.cuda)
        install_tensorrt(self.monkeypatch, self.trt)

    @property
    def builds(self) -> int:
        return sum(1 for c in self.calls if c[0] == "build")


def make_slot(tmp_path: Path, robot_mask: bool = False) -> Iterator[Path]:
    """A read-only copy of the tiny model (``robot_mask``: the one whose decoders also
    predict a robot mask), as installed in a bundle slot (a generator for a fixture: yields
    the folder, then makes it writable again)."""
    dst = tmp_path / "bundles" / ("mask" if robot_mask else "a") / "model"
    shutil.copytree(tiny_model_dir(robot_mask=robot_mask), dst)
    for p in [dst, *dst.iterdir()]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    yield dst
    for p in [dst, *dst.iterdir()]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)


def export_engine(model_dir: Path, *extra: str) -> int:
    """Run ``syncedge export engine MODEL_DIR [extra...]``; returns its exit code."""
    parser = argparse.ArgumentParser(prog="syncedge")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["export", "engine", str(model_dir), *extra])
    return args.func(args)
