#!/usr/bin/env bash
# Build pycuda from its source archive on a machine without a package registry.
# usage: scripts/build_pycuda.sh WHEELS TARGET
#   WHEELS: folder with pycuda-*.tar.gz and wheels of pytools, platformdirs, mako and siphash24
#           (markupsafe and typing_extensions must be installed or be wheels there too);
#   TARGET: folder to install into; afterwards put TARGET and TARGET/pycuda-src on PYTHONPATH.
# Needs nvcc (its cuda.h), the CUDA driver (libcuda.so.1), g++, setuptools and numpy.
# curand is left out (the kernels do not use it). Exit status non-zero if the build fails.
set -euo pipefail
wheels=$(readlink -f "${1:?usage: scripts/build_pycuda.sh WHEELS TARGET}")
target=$(readlink -f "${2:?usage: scripts/build_pycuda.sh WHEELS TARGET}")
command -v nvcc >/dev/null || { echo "build_pycuda: expected nvcc on PATH, found none" >&2; exit 1; }
ls "$wheels"/pycuda-*.tar.gz >/dev/null 2>&1 \
  || { echo "build_pycuda: expected pycuda-*.tar.gz in $wheels, found none" >&2; exit 1; }
mkdir -p "$target"
shopt -s nullglob
deps=("$wheels"/*.whl)
[ ${#deps[@]} -eq 0 ] || python3 -m pip install -q --no-index --no-deps --no-compile \
  --no-cache-dir --target "$target" "${deps[@]}"
sdist=$(ls "$wheels"/pycuda-*.tar.gz | head -1)
rm -rf "$target/pycuda-src" && mkdir -p "$target/pycuda-src"
tar xzf "$sdist" -C "$target/pycuda-src" --strip-components=1
cd "$target/pycuda-src"
# the CUDA toolkit: $CUDA_ROOT, else the folder above nvcc's bin/, else /usr/local/cuda
root=${CUDA_ROOT:-}
if [ -z "$root" ]; then
  for cand in "$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")" /usr/local/cuda; do
    if [ -f "$cand/include/cuda.h" ] && grep -q cuInit "$cand/include/cuda.h"; then
      root=$cand; break
    fi
  done
fi
[ -n "$root" ] && [ -f "$root/include/cuda.h" ] \
  || { echo "build_pycuda: expected the CUDA toolkit's include/cuda.h; set CUDA_ROOT" >&2; exit 1; }
# link against the driver itself when the toolkit has no stub libcuda.so
libcuda=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}' || true)
[ -n "$libcuda" ] || libcuda=$(find / -name 'libcuda.so.1' 2>/dev/null | head -1 || true)
[ -n "$libcuda" ] || { echo "build_pycuda: expected the NVIDIA driver's libcuda.so.1, found none" >&2; exit 1; }
mkdir -p "$target/cudalib" && ln -sf "$libcuda" "$target/cudalib/libcuda.so"
cudart=$(find "$root" -name 'libcudart.so*' 2>/dev/null | head -1 || true)
echo "CUDA_ROOT $root; libcuda $libcuda"
python3 configure.py --cuda-root="$root" --no-cuda-enable-curand \
  --cudadrv-lib-dir="$target/cudalib" --cudart-lib-dir="$(dirname "${cudart:-$root/lib64/x}")" \
  >/dev/null
python3 setup.py build_ext --inplace -j "$(nproc)" >build.log 2>&1 \
  || { tail -40 build.log; exit 1; }
echo "pycuda built in $target/pycuda-src"
