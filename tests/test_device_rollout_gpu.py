"""The shipped model's rollout on a GPU through CudaRolloutStep, PyTorch modules as the
device executors (no TensorRT here), against the CPU rollout: frames, and the per-step
robot-mask pixels inside a keep-out mask counted on the GPU (gpu marker: skips cleanly
without a CUDA driver; needs pycuda and PyTorch with CUDA there)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu


def test_shipped_model_on_the_gpu_equals_the_cpu_rollout_with_no_host_copies():
    torch = pytest.importorskip("torch")
    pytest.importorskip("pycuda.driver")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    from bench.bench_device_rollout import (
        ROOT,
        _cpu_reference,
        _one_batch,
        device_modules,
        right_keepout,
    )
    from kernels.launcher import KernelLauncher

    ref = _cpu_reference(ROOT / "models/reference", 2, 6, right_keepout(64, 64))
    assert ref["robot_counts"].shape == (2, 6) and ref["robot_counts"].any()
    mods = device_modules(ROOT / "models/reference", ROOT / "models/reference-checkpoints",
                          ref["batch"])
    with KernelLauncher() as launcher:
        row = _one_batch(launcher, mods, ref, horizon=6, runs=2)
    for mode in ("eager", "graph"):
        r = row[mode]
        assert "error" not in r, r.get("traceback")
        assert r["frames_max_abs_diff_u8"] <= 2, mode
        assert r["host_copies_per_step"] == 0, mode
        # PyTorch and ONNX Runtime masks differ by float noise: a pixel within it of 0.5
        # may count on one side only
        assert r["robot_counts_max_abs_diff"] <= 4, (mode, r["robot_counts"])
    assert row["graph"]["memcpy_nodes_per_step"] == 0
    assert row["graph"]["node_counts"]["kernel"] >= 10  # the count and its store among them
