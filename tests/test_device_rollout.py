"""The GPU rollout behind ``Rollout`` and ``simulate --backend tensorrt``, on the CPU: fake
TensorRT engines, the real ``KernelLauncher`` and ``CudaRolloutStep`` on a fake driver whose
kernels are the NumPy twins, stream capture simulated (docs/runtime.md says what this
does and does not prove)."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
from device_fakes import Fakes, export_engine, make_slot

from edge.commands import precheck, simulate
from edge.episode import save_episode
from edge.runtime.context import encode_calibration
from edge.runtime.device_copies import copy_counts, host_copy
from edge.runtime.errors import BackendError, CallOrderError, RolloutInputError
from edge.runtime.model import load_model
from edge.runtime.rollout import Rollout
from kernels import reference as ref
from tests.fixtures.runtime import calibration_episode, motion_episode


@pytest.fixture
def fakes(monkeypatch, tmp_path) -> Fakes:
    return Fakes(monkeypatch, tmp_path)


@pytest.fixture
def slot(tmp_path):
    yield from make_slot(tmp_path)


def _cpu_and_device(fakes, slot):
    """The slot's model on the CPU and on the (fake) device, and one context; checks that
    the device memory is freed after the test."""
    export_engine(slot)
    cpu = load_model(slot, backend="cpu", intra_op_num_threads=1)
    dev = load_model(slot, backend="tensorrt")
    ctx = encode_calibration(cpu, calibration_episode(3, 4, 16, 16, seed=3))
    yield cpu, dev, ctx
    dev.deactivate()
    cpu.deactivate()
    assert not fakes.cuda.live, "device memory left allocated"
    assert fakes.cuda.context_depth == 0


@pytest.fixture
def cpu_and_device(fakes, slot):
    yield from _cpu_and_device(fakes, slot)


def _inputs(n: int, t: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    start = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
    return start, rng.normal(0, 0.2, (n, t, 3)).astype(np.float32)


@pytest.mark.parametrize("n", [1, 3, 6])  # b1; b4 padded; two chunks of b4
def test_device_rollout_equals_the_host_rollout(fakes, cpu_and_device, n):
    cpu, dev, ctx = cpu_and_device
    assert dev.on_device and not cpu.on_device
    start, actions = _inputs(n, 5, seed=n)
    want = Rollout(cpu, ctx, max_horizon=5, max_candidates=6).run(start, actions)
    r = Rollout(dev, ctx, max_horizon=5, max_candidates=6)
    assert r.path == "device"
    got = r.run(start, actions)
    assert got.shape == want.shape == (n, 5, 16, 16, 3)
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
    assert np.array_equal(r.run(start, actions), got)  # replay of the captured graphs
    live = len(fakes.cuda.live)
    r.close()  # frees this rollout's device buffers before the model goes
    assert len(fakes.cuda.live) < live
    with pytest.raises(CallOrderError, match="reset"):
        r.step()


def _steps_copy_nothing(fakes, r: Rollout) -> None:
    """A warm-up step (then the capture), then 5 steps that copy nothing between host and
    device, counted by host_copy and by the fake driver (nothing bypassed host_copy)."""
    r.step(fetch=False)
    c0, raw0 = copy_counts(), sum(fakes.cuda.raw_copies.values())
    for _ in range(5):
        assert r.step(fetch=False) is None
    assert (copy_counts() - c0).total == 0
    assert sum(fakes.cuda.raw_copies.values()) == raw0


def test_a_step_copies_nothing_between_host_and_device(fakes, cpu_and_device):
    _, dev, ctx = cpu_and_device
    start, actions = _inputs(4, 6)
    r = Rollout(dev, ctx, max_horizon=6, max_candidates=4)
    r.reset(start, actions)
    _steps_copy_nothing(fakes, r)
    g = r.device_graph
    assert g["memcpy_nodes_per_step"] == 0 and g["node_counts"]["kernel"] >= 8
    c0 = copy_counts()
    frames = r.frames()
    assert frames.shape == (4, 6, 16, 16, 3) and (copy_counts() - c0).dtoh > 0
    # a fetched step is counted: its frames and the NaN counter
    r.reset(start, actions)
    c0 = copy_counts()
    one = r.step()
    assert (copy_counts() - c0).dtoh == 2 and np.array_equal(one, frames[:, 0])


class CopyingExecutor:
    """A step executor that (wrongly) copies its output to the host every step."""

    def __init__(self, runner, cuda, launcher):
        self.runner, self.cuda, self.launcher = runner, cuda, launcher
        self.host = np.zeros(runner.tensor_spec("next_latent")[0], np.float32)

    def enqueue(self, inputs, outputs, stream_handle):
        self.runner.enqueue(inputs, outputs, stream_handle)
        host_copy(self.cuda, "dtoh", self.host, outputs["next_latent"], self.launcher.stream)

    def __getattr__(self, name):
        return getattr(self.runner, name)


def test_an_executor_that_copies_to_the_host_is_caught(fakes, cpu_and_device, monkeypatch):
    _, dev, ctx = cpu_and_device
    bad = CopyingExecutor(dev.runner("step_b4"), fakes.cuda, dev.kernel_launcher)
    monkeypatch.setitem(dev._runners, "step_b4", bad)
    start, actions = _inputs(4, 4)
    r = Rollout(dev, ctx, max_horizon=4, max_candidates=4)
    r.reset(start, actions)
    c0 = copy_counts()
    for _ in range(4):
        r.step(fetch=False)
    assert (copy_counts() - c0).dtoh == 2  # the eager warm-up step and the captured one
    assert r.device_graph["memcpy_nodes_per_step"] == 1  # and every replay copies again


def test_policy_actions_per_step_on_the_device(cpu_and_device):
    cpu, dev, ctx = cpu_and_device
    start, actions = _inputs(2, 4, seed=5)
    out = {}
    for name, m in (("cpu", cpu), ("dev", dev)):
        r = Rollout(m, ctx, max_horizon=4, max_candidates=2)
        r.reset(np.stack([start, start[::-1]]), horizon=4)
        out[name] = np.stack([r.step(actions[:, t]).copy() for t in range(4)], axis=1)
    assert np.abs(out["cpu"].astype(int) - out["dev"].astype(int)).max() <= 1


def test_nan_from_the_decoder_engine_is_an_error(fakes, cpu_and_device, monkeypatch):
    _, dev, ctx = cpu_and_device
    runner = dev.runner("decoder_b1")

    class NanDecoder:
        def enqueue(self, inputs, outputs, stream_handle):
            runner.enqueue(inputs, outputs, stream_handle)
            view = fakes.cuda.view(outputs["frames"], np.float32, (1, 3, 16, 16))
            fakes.cuda.enqueue(stream_handle, "kernel", lambda: view.__setitem__((0, 0, 0), np.nan))

        def __getattr__(self, name):
            return getattr(runner, name)

    monkeypatch.setitem(dev._runners, "decoder_b1", NanDecoder())
    r = Rollout(dev, ctx, max_horizon=3)
    start, actions = _inputs(1, 3)
    r.reset(start, actions)
    for _ in range(3):
        r.step(fetch=False)
    with pytest.raises(RolloutInputError, match=r"decoder produced NaN .*found 48 NaN value"):
        r.frames()


def test_kernels_that_cannot_load_are_a_clear_error_not_a_cpu_fallback(fakes, slot,
                                                                       monkeypatch):
    export_engine(slot)

    def refuse(data):
        raise fakes.cuda.Error("no kernel image is available for execution on the device")

    monkeypatch.setattr(fakes.cuda, "module_from_buffer", refuse)
    monkeypatch.setattr("kernels.launcher.KernelLauncher._cached_cubin",
                        lambda self, arch: (_ for _ in ()).throw(
                            __import__("kernels.errors").errors.KernelBuildError("nvcc missing")))
    import pycuda.driver

    monkeypatch.setattr(pycuda.driver, "module_from_buffer", refuse)
    with pytest.raises(BackendError, match=r"backend 'tensorrt': the rollout kernels cannot "
                                           r"load on this device: .*no kernel image.*nvcc missing"):
        load_model(slot, backend="tensorrt")
    assert not fakes.cuda.live and fakes.cuda.context_depth == 0


def test_simulate_with_tensorrt_uses_the_engines_of_export_engine(fakes, slot, tmp_path,
                                                                 capsys):
    assert export_engine(slot) == 0
    builds = fakes.builds
    cal = save_episode(calibration_episode(3, 4, 16, 16, seed=1), tmp_path / "cal.npz")
    ep = save_episode(motion_episode(3, 7, 16, 16, seed=2), tmp_path / "ep.npz")
    parser = argparse.ArgumentParser(prog="syncedge")
    simulate.register(parser.add_subparsers(dest="command"))
    out = {}
    for backend in ("tensorrt", "cpu"):
        args = parser.parse_args(["simulate", "--calibration", str(cal), "--start", str(ep),
                                  "--model", str(slot), "--backend", backend, "--threads", "1",
                                  "--out", str(tmp_path / backend)])
        assert args.func(args) == 0
        out[backend] = json.loads((tmp_path / backend / "metrics.json").read_text())
    assert fakes.builds == builds  # every engine came from the cache export engine filled
    m = out["tensorrt"]
    assert (m["backend"], m["rollout_path"]) == ("tensorrt", "device")
    assert {e["action"] for e in m["engines"].values()} == {"loaded"}
    assert m["host_copies_steps_2_to_T"]["htod"] == 0
    assert m["device_graph"]["memcpy_nodes_per_step"] == 0
    assert (out["cpu"]["rollout_path"], out["cpu"]["engines"]) == ("host", None)
    for t in (m["timings_s"], out["cpu"]["timings_s"]):  # the first step is timed apart
        assert t["first_frame"] > 0 and t["frames_per_s"] > 0
        assert t["frames_per_s_note"] == "steps 2..T (the first step is first_frame)"
    for a, b in zip(m["per_step"], out["cpu"]["per_step"], strict=True):
        assert a["psnr_db"] == pytest.approx(b["psnr_db"], abs=0.05)
    assert not fakes.cuda.live


@pytest.fixture
def mask_slot(tmp_path):
    yield from make_slot(tmp_path, robot_mask=True)


KEEPOUT_RULES = """keep_out:
  basis: {basis}
  motion_threshold: 20
  max_robot_pixels: 5
  regions:
    - name: corner
      polygon: [[0, 0], [0.3, 0], [0, 0.3]]
"""


@pytest.mark.parametrize("basis", ["auto", "robot_mask"])
def test_device_precheck_decides_keep_out_on_the_robot_mask_like_the_cpu(
        fakes, mask_slot, tmp_path, monkeypatch, basis):
    """The tiny model with a robot mask, through ``precheck`` on the device (fake TensorRT
    and driver) and on the CPU: the same basis, verdicts, details and robot counts, and the
    counts come from the device kernel."""
    assert export_engine(mask_slot) == 0
    cal = save_episode(calibration_episode(3, 4, 16, 16, seed=1), tmp_path / "cal.npz")
    ep = save_episode(motion_episode(3, 7, 16, 16, seed=2), tmp_path / "ep.npz")
    acts = np.random.default_rng(7).normal(0, 0.3, (6, 5, 3)).astype(np.float32)
    acts[0] = 0.0
    np.save(tmp_path / "cands.npy", acts)
    (tmp_path / "rules.yaml").write_text(KEEPOUT_RULES.format(basis=basis))
    kernel_runs = []
    count_kernel = fakes.cuda._k_se_robot_in_keepout

    def counting(*args):
        kernel_runs.append(args)
        count_kernel(*args)

    monkeypatch.setattr(fakes.cuda, "_k_se_robot_in_keepout", counting, raising=False)
    parser = argparse.ArgumentParser(prog="syncedge")
    precheck.register(parser.add_subparsers(dest="command"))
    rep = {}
    for backend in ("tensorrt", "cpu"):
        args = parser.parse_args(["precheck", "--calibration", str(cal), "--start", str(ep),
                                  "--actions", str(tmp_path / "cands.npy"), "--rules",
                                  str(tmp_path / "rules.yaml"), "--model", str(mask_slot),
                                  "--backend", backend, "--threads", "1",
                                  "--out", str(tmp_path / backend)])
        assert args.func(args) == 0
        rep[backend] = json.loads((tmp_path / backend / "report.json").read_text())
    assert kernel_runs, "the device path did not count on the device"
    dev, cpu = rep["tensorrt"], rep["cpu"]
    assert dev["keepout_basis"] == cpu["keepout_basis"] == "robot_mask"
    keys = ("index", "name", "passed", "rank", "first_fail_step", "first_fail_rule", "detail")
    for d, c in zip(dev["verdicts"], cpu["verdicts"], strict=True):
        assert {k: d[k] for k in keys} == {k: c[k] for k in keys}
        assert d["scores"]["keepout_robot_max"] == c["scores"]["keepout_robot_max"]
    assert (dev["ranking"], dev["chosen"]) == (cpu["ranking"], cpu["chosen"])
    # the case is not trivial: some candidates enter the corner (at different steps), some not
    fails = {v["first_fail_step"] for v in cpu["verdicts"] if not v["passed"]}
    assert len(fails) >= 2 and any(v["passed"] for v in cpu["verdicts"])
    assert all("px of the predicted robot" in v["detail"] for v in cpu["verdicts"]
               if not v["passed"])
    assert not fakes.cuda.live


@pytest.fixture
def mask_models(fakes, mask_slot):
    yield from _cpu_and_device(fakes, mask_slot)


def _corner(h: int = 16, w: int = 16) -> np.ndarray:
    keep = np.zeros((h, w), np.uint8)
    keep[:6, :7] = 1
    return keep


@pytest.mark.parametrize("n", [1, 3, 6])  # b1; b4 padded; two chunks of b4
def test_device_robot_keepout_counts_equal_the_cpu_counts(fakes, mask_models, n):
    cpu, dev, ctx = mask_models
    assert cpu.has_robot_mask and dev.on_device
    start, actions = _inputs(n, 5, seed=n)
    keep = _corner()
    host = Rollout(cpu, ctx, max_horizon=5, max_candidates=6, robot_mask=True, keepout=keep)
    host.run(start, actions)
    want = host.robot_keepout_counts()
    # the host counts are the NumPy twin on the masks it keeps
    masks = host.robot_masks()
    assert np.array_equal(want, ref.robot_in_keepout(masks.reshape(-1, 16, 16), keep)
                          .reshape(n, 5))
    assert want.shape == (n, 5) and want.dtype == np.int32 and want.any() and (want < 42).any()
    only = Rollout(cpu, ctx, max_horizon=5, max_candidates=6, keepout=keep)  # masks not kept
    only.run(start, actions)
    assert np.array_equal(only.robot_keepout_counts(), want)
    r = Rollout(dev, ctx, max_horizon=5, max_candidates=6, keepout=keep.astype(bool))
    assert r.path == "device"
    frames = r.run(start, actions)
    assert np.array_equal(r.robot_keepout_counts(), want)
    assert np.abs(frames.astype(int) - host.frames().astype(int)).max() <= 1
    r.run(start, actions)  # the captured graphs again
    assert np.array_equal(r.robot_keepout_counts(), want)
    r.close()


def test_device_counts_copy_nothing_per_step_and_never_the_masks(fakes, mask_models):
    _, dev, ctx = mask_models
    start, actions = _inputs(4, 6, seed=4)
    r = Rollout(dev, ctx, max_horizon=6, max_candidates=4, keepout=_corner())
    r.reset(start, actions)
    _steps_copy_nothing(fakes, r)
    g = r.device_graph
    assert g["memcpy_nodes_per_step"] == 0
    assert g["node_counts"]["kernel"] >= 10  # the count and its store among them
    c0 = copy_counts()
    counts = r.robot_keepout_counts()
    got = copy_counts() - c0
    # one download at the end: the NaN counter, frames, moved, energy and the counts of
    # every horizon step; the masks (float32 [T, B, 1, H, W]) stay on the device
    t, b, hw = 6, 4, 16 * 16
    assert got.dtoh == 5 and got.htod == 0
    assert got.dtoh_bytes == 4 + t * b * hw * 3 + 3 * t * b * 4
    c0 = copy_counts()
    assert r.frames().shape == (4, 6, 16, 16, 3) and (copy_counts() - c0).total == 0
    assert np.array_equal(r.robot_keepout_counts(), counts)
    r.close()


def test_device_policy_mode_counts_equal_the_cpu(mask_models):
    cpu, dev, ctx = mask_models
    start, actions = _inputs(2, 4, seed=5)
    out = {}
    for name, m in (("cpu", cpu), ("dev", dev)):
        r = Rollout(m, ctx, max_horizon=4, max_candidates=2, keepout=_corner())
        r.reset(np.stack([start, start[::-1]]), horizon=4)
        for t in range(4):
            r.step(actions[:, t])
        out[name] = r.robot_keepout_counts()
    assert out["cpu"].shape == (2, 4) and np.array_equal(out["cpu"], out["dev"])


def test_keepout_counts_need_a_model_with_a_robot_mask(cpu_and_device):
    for m in cpu_and_device[:2]:
        with pytest.raises(RolloutInputError, match="keepout: .*predicts no robot mask"):
            Rollout(m, cpu_and_device[2], max_horizon=2, keepout=_corner())


def test_robot_mask_requests_that_cannot_be_met_are_refused(mask_models):
    cpu, dev, ctx = mask_models
    with pytest.raises(RolloutInputError, match=r"only their counts inside a keep-out mask"):
        Rollout(dev, ctx, max_horizon=2, robot_mask=True)
    for m in (cpu, dev):
        with pytest.raises(RolloutInputError, match=r"keepout: expected a uint8 \(or bool\) "
                                                    r"mask \[16, 16\].*found uint8 \[16, 8\]"):
            Rollout(m, ctx, max_horizon=2, keepout=np.zeros((16, 8), np.uint8))
        with pytest.raises(RolloutInputError, match=r"found float32 \[16, 16\]"):
            Rollout(m, ctx, max_horizon=2, keepout=np.zeros((16, 16), np.float32))
        r = Rollout(m, ctx, max_horizon=2)
        with pytest.raises(CallOrderError, match="reset"):
            r.robot_keepout_counts()
        r.run(*_inputs(1, 2))
        with pytest.raises(CallOrderError, match=r"keepout=\.\.\."):
            r.robot_keepout_counts()
        r.close()
