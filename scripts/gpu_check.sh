#!/usr/bin/env bash
# The one GPU check of kernels/, edge/runtime/cuda_step.py and the GPU rollout, run from the
# repository root on an NVIDIA GPU machine (CUDA driver, nvcc, python3 with numpy, pytest,
# setuptools, onnxruntime and PyTorch with CUDA). Nothing is downloaded there.
#
# pycuda (the kernels' launcher) is built from its source archive by scripts/build_pycuda.sh
# unless it is importable already: $WHEELS must hold pycuda-*.tar.gz and wheels of pytools,
# platformdirs, mako and siphash24. Fetch them on a machine with the registry, into a folder
# of the checkout that git ignores, and carry that folder:
#   python3 -m pip download --no-deps --no-binary :all: -d .whl pycuda==2026.1
#   python3 -m pip download --no-deps --only-binary :all: -d .whl pytools platformdirs mako siphash24
# TensorRT cannot be installed there either: the step and decoder run as the checkpoint's
# PyTorch modules (bench/torch_executor.py) behind the executor interface the engines use.
#
# Steps (each under its own time limit; about 7 minutes in all at most):
#   1. the environment (nvidia-smi, nvcc, python, torch);
#   2. pycuda from source if needed; the fatbin manifest check; the sm_90 cubin built with
#      this nvcc;
#   3. pytest -m gpu on tests/test_kernels_gpu.py, tests/test_device_rollout_gpu.py and
#      tests/test_device_modules.py;
#   4. bench/bench_kernels.py (toy executors) and bench/bench_device_rollout.py (the shipped
#      model at batches 1, 4 and 16, median of 20 rollouts: step latency with and without
#      the CUDA graph, memcpy nodes and host copies per step, frames against the CPU rollout);
#   5. the whole fatbin rebuilt with this nvcc and compared with the committed one (last: it
#      matters least, and a run cut short keeps the figures above).
# Writes 7 files to $OUT: env.txt, build.log, pytest_gpu.txt, pytest_gpu.xml, bench.txt,
# bench_kernels.json, bench_device_rollout.json. Exit status: that of the GPU tests, else
# of the benchmarks.
#   usage: WHEELS=.whl OUT=out/gpu_check scripts/gpu_check.sh
set -uo pipefail
OUT="${OUT:-out/gpu_check}"
WHEELS="${WHEELS:-.whl}"
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
{ date -u; nvidia-smi; nvcc --version; python3 --version
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
} >"$OUT/env.txt" 2>&1

{
  if ! python3 -c "import pycuda.driver" 2>/dev/null; then
    site="${PYCUDA_SITE:-/tmp/pycuda-site}"
    echo "== pycuda: building from $WHEELS"
    timeout 240 scripts/build_pycuda.sh "$WHEELS" "$site" || echo "pycuda build failed"
    export PYTHONPATH="$site:$site/pycuda-src${PYTHONPATH:+:$PYTHONPATH}"
  fi
  python3 -c "import pycuda.driver as d; print('pycuda', d.get_version(), 'driver', d.get_driver_version())"
  echo "== fatbin manifest"
  python3 -m kernels.build --check
  echo "== sm_90 cubin with this nvcc"
  timeout 120 python3 -c "from kernels.build import compile_cubin; print(compile_cubin('90', '/tmp/sm90'))"
} >"$OUT/build.log" 2>&1
export PYTHONPATH="${PYCUDA_SITE:-/tmp/pycuda-site}:${PYCUDA_SITE:-/tmp/pycuda-site}/pycuda-src:.${PYTHONPATH:+:$PYTHONPATH}"

timeout 240 python3 -m pytest -m gpu -v -rs -p no:cacheprovider --junitxml="$OUT/pytest_gpu.xml" \
    tests/test_kernels_gpu.py tests/test_device_rollout_gpu.py tests/test_device_modules.py >"$OUT/pytest_gpu.txt" 2>&1
tests=$?
tail -n 20 "$OUT/pytest_gpu.txt"
{ timeout 90 python3 bench/bench_kernels.py --out "$OUT/bench_kernels.json"; k=$?
  timeout 150 python3 bench/bench_device_rollout.py --runs 20 --batches 1 4 16 \
    --out "$OUT/bench_device_rollout.json"; r=$?
  echo "bench_kernels exit $k, bench_device_rollout exit $r"; [ $k -eq 0 ] && [ $r -eq 0 ]
} 2>&1 | tee "$OUT/bench.txt"
bench=${PIPESTATUS[0]}
# last, as it matters least: the whole fatbin rebuilt with this nvcc, against the committed one
{ echo "== the whole fatbin with this nvcc"
  timeout 180 python3 -m kernels.build --out-dir /tmp/fatbin \
    && sha256sum /tmp/fatbin/rollout_kernels.fatbin kernels/rollout_kernels.fatbin
} >>"$OUT/build.log" 2>&1
[ "$tests" -ne 0 ] && exit "$tests"
exit "$bench"
