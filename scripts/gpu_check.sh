#!/usr/bin/env bash
# GPU checks of kernels/ and edge/cuda_step.py, run from the repository root on an NVIDIA GPU
# machine (CUDA driver + nvcc + python3 with numpy, pytest, setuptools). Nothing is downloaded:
# pycuda is built from its source archive, found with its pure-Python dependencies (pytools,
# platformdirs, mako, siphash24 as wheels) in $WHEELS by scripts/build_pycuda.sh.
# Writes at most 7 files to $OUT. Exit status: that of the GPU tests, else of the benchmark.
set -uo pipefail
OUT="${OUT:-out/gpu_check}"
WHEELS="${WHEELS:-shared/wheels}"
mkdir -p "$OUT"
{ nvidia-smi; nvcc --version; python3 --version; } >"$OUT/env.txt" 2>&1

if ! python3 -c "import pycuda.driver" 2>/dev/null; then
    site="${PYCUDA_SITE:-$OUT/pycuda}"
    scripts/build_pycuda.sh "$WHEELS" "$site" >"$OUT/pycuda_build.log" 2>&1 \
        || { echo "pycuda build failed: see $OUT/pycuda_build.log"; exit 3; }
    export PYTHONPATH="$site:$site/pycuda-src${PYTHONPATH:+:$PYTHONPATH}"
fi

python3 -m kernels.build --check >"$OUT/manifest.txt" 2>&1
python3 -m pytest -m gpu -v -rs -p no:cacheprovider \
    --junitxml="$OUT/pytest_gpu.xml" tests/test_kernels_gpu.py >"$OUT/pytest_gpu.txt" 2>&1
tests=$?
tail -n 15 "$OUT/pytest_gpu.txt"
python3 bench/bench_kernels.py --out "$OUT/bench_kernels.json" 2>&1 | tee "$OUT/bench_kernels.txt"
bench=${PIPESTATUS[0]}
[ "$tests" -ne 0 ] && exit "$tests"
exit "$bench"
