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

[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test,report]'

cmake -S kdtr -B build/kdtr -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/kdtr -j "$(nproc)" >/dev/null
cmake --install build/kdtr --prefix .venv >/dev/null  # kdtr-inspect on the environment's PATH
# The engine: kdtree-engine and libkdtree_cpu.so under build/engine/
cmake -S engine -B build/engine -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/engine -j "$(nproc)" >/dev/null
if command -v clang++-14 >/dev/null; then
  cmake -S kdtr -B build/fuzz -DKDTR_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++-14 >/dev/null
  cmake --build build/fuzz -j "$(nproc)" --target kdtr-fuzz >/dev/null
  cmake -S engine -B build/engine-fuzz -DKDTREE_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++-14 >/dev/null
  cmake --build build/engine-fuzz -j "$(nproc)" --target kdtree-engine-fuzz >/dev/null
fi
built=$(ls .venv/bin/kdtr-inspect build/fuzz/kdtr-fuzz build/engine/kdtree-engine build/engine-fuzz/kdtree-engine-fuzz \
  2>/dev/null | tr '\n' ' ')
echo "setup: ok ($(.venv/bin/python --version), $built)"
