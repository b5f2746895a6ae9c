#!/usr/bin/env bash
# One-time (idempotent) setup: system packages when missing, the virtual environment, the C++ tools.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
command -v clang++-14 >/dev/null || need+=(clang-14)
command -v llvm-cov-14 >/dev/null || need+=(llvm-14)  # llvm-cov, llvm-profdata: make kdtr-coverage
ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || need+=(libclang-rt-14-dev)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing ${need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "setup: missing ${need[*]}; install them (without clang the libFuzzer test is skipped)" >&2
  fi
fi

# The builds' own output (pip's warnings, ptxas notes) goes to build/setup.log, shown when a step fails.
mkdir -p build
LOG=build/setup.log
: > "$LOG"
quietly() { "$@" >>"$LOG" 2>&1 || { echo "setup: failed: $*" >&2; tail -n 40 "$LOG" >&2; exit 1; }; }

[ -x .venv/bin/python ] || "$PY" -m venv .venv
# The Python packages are (re)installed only when what they are installed from changed: an editable install
# follows the sources by itself, so a second `make conformance` starts the tests at once.
stamp=.venv/.kdtr-setup
want=$(cat pyproject.toml examples/kdtree_example_impl/pyproject.toml | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing the Python packages into .venv (pyproject.toml is new or changed)"
  quietly .venv/bin/python -m pip install -q --upgrade pip
  quietly .venv/bin/python -m pip install -q -e '.[test,report]'
  # the example user package (examples/kdtree_example_impl): `--impl example-correct` / `example-wrong` by entry point
  quietly .venv/bin/python -m pip install -q --no-deps -e examples/kdtree_example_impl
  echo "$want" > "$stamp"
else
  echo "setup: Python packages up to date"
fi

echo "setup: building the KDTR tools, the engine and the fuzz targets under build/ (CMake; log: $LOG)"
quietly cmake -S kdtr -B build/kdtr -DCMAKE_BUILD_TYPE=Release
quietly cmake --build build/kdtr -j "$(nproc)"
quietly cmake --install build/kdtr --prefix .venv  # kdtr-inspect on the environment's PATH
# nvcc for the engine's CUDA backend (it needs no GPU): on PATH, in CUDA_HOME or /usr/local/cuda, else the
# CUDA 13.0 compiler wheels from the package index into .venv (13.0: what driver 580 loads; the four are pinned
# together, since nvcc refuses a newer nvvm's PTX). Without any, the engine is built for the CPU only.
find_nvcc() {
  local c
  for c in "$(command -v nvcc || true)" "${CUDA_HOME:-/nonexistent}/bin/nvcc" /usr/local/cuda/bin/nvcc \
           .venv/lib/python*/site-packages/nvidia/cu13/bin/nvcc; do
    [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return 0; }
  done
  return 1
}
NVCC=$(find_nvcc || true)
if [ -z "$NVCC" ]; then
  echo "setup: no nvcc found; installing the CUDA 13.0 compiler wheels into .venv"
  if .venv/bin/python -m pip install -q "nvidia-cuda-nvcc==13.0.*" "nvidia-nvvm==13.0.*" "nvidia-cuda-crt==13.0.*" \
       "nvidia-cuda-runtime==13.0.*" >>"$LOG" 2>&1; then
    for d in .venv/lib/python*/site-packages/nvidia/cu13; do
      [ -e "$d/lib64" ] || ln -s lib "$d/lib64"  # nvcc.profile and CMake look for lib64
    done
    NVCC=$(find_nvcc || true)
  fi
fi
if [ -n "$NVCC" ]; then
  CUDA_FLAGS=(-DKDTREE_CUDA=ON "-DCMAKE_CUDA_COMPILER=$(readlink -f "$NVCC")")
else
  echo "setup: no nvcc (none on PATH, in CUDA_HOME or /usr/local/cuda, and the nvidia-cuda-nvcc wheels did not" \
       "install): building kdtree-engine without its CUDA backend (--device cuda will say so)" >&2
  CUDA_FLAGS=(-DKDTREE_CUDA=OFF)
fi
# The engine: kdtree-engine and libkdtree_cpu.so under build/engine/
quietly cmake -S engine -B build/engine -DCMAKE_BUILD_TYPE=Release "${CUDA_FLAGS[@]}"
quietly cmake --build build/engine -j "$(nproc)"
if command -v clang++-14 >/dev/null; then
  quietly cmake -S kdtr -B build/fuzz -DKDTR_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++-14
  quietly cmake --build build/fuzz -j "$(nproc)" --target kdtr-fuzz
  quietly cmake -S engine -B build/engine-fuzz -DKDTREE_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++-14
  quietly cmake --build build/engine-fuzz -j "$(nproc)" --target kdtree-engine-fuzz
fi
built=$(ls .venv/bin/kdtr-inspect build/fuzz/kdtr-fuzz build/engine/kdtree-engine build/engine-fuzz/kdtree-engine-fuzz \
  2>/dev/null | tr '\n' ' ')
echo "setup: ok ($(.venv/bin/python --version), $built; engine CUDA backend: ${NVCC:-none})"
