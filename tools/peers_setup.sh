#!/usr/bin/env bash
# Prepare the public MLA peers (FlashMLA, FlashInfer MLA) for an offline GPU runner, on a machine with network
# and nvcc but no GPU:  tools/peers_setup.sh [OUT]   (default OUT = .peers, ignored by git)
#
# OUT/site/ becomes one PYTHONPATH folder the runner imports the peers from (it needs torch with CUDA already):
#   flash_mla (sgl-flash-mla), tvm_ffi (apache-tvm-ffi, FlashInfer's FFI), flashinfer (flashinfer-python, trimmed
#   to what flashinfer.mla and flashinfer.topk need, its package __init__ replaced by a minimal one: the full one
#   imports packages the runner lacks), with FlashInfer's MLA modules (fa3 and fa2, bf16 q/kv/out, int32 indices,
#   head dims 512/64) and its top-k module (the one `topk` module behind flashinfer.topk.top_k: radix and CUB
#   paths, fp32/fp16/bf16 inputs; its JIT build is too long for one runner call) prebuilt for sm_90a into
#   flashinfer/data/aot/, where FlashInfer loads a module without building it.
# On the runner: PYTHONPATH=OUT/site FLASHINFER_DISABLE_JIT=1 (a missing module then raises instead of compiling).
# Needs: pip, unzip-capable python, nvcc (CUDA 13.0 here), ninja, strip, and a python with torch (CPU is enough),
# packaging, requests, tqdm and nvidia-ml-py for the prebuild: PREBUILD_PYTHON (default: python3 with torch
# importable, e.g. PYTHONPATH set to a torch install; a venv with
# `pip install torch packaging requests tqdm nvidia-ml-py` does). The top-k module takes long on few cores (nvcc, one job per source: MAX_JOBS, default 2; PEERS_SKIP_TOPK=1 skips it); a rerun into
# the same OUT reuses the objects already compiled (the unpacked sources keep their archive times, so ninja finds them
# up to date).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-.peers}
RUNNER_PY=${RUNNER_PYTHON_VERSION:-3.12}   # the GPU runner's Python (wheels are picked for it)
BUILD_PY=${PREBUILD_PYTHON:-python3}
FLASH_MLA=sgl-flash-mla==1.0.0
FLASHINFER=flashinfer-python==0.7.2.post1
TVM_FFI=apache-tvm-ffi==0.1.15.post2
CURAND=nvidia-curand==10.4.0.35   # only its headers, where the toolkit lacks cuRAND (CUDA 13.0's)
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64)
mkdir -p "$OUT/wheels" "$OUT/build"
rm -rf "$OUT/site" && mkdir -p "$OUT/site"

echo "peers_setup: downloading wheels for Python $RUNNER_PY"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$RUNNER_PY" --implementation cp \
  "${PLATFORMS[@]}" -d "$OUT/wheels" "$FLASH_MLA" "$FLASHINFER" "$TVM_FFI"
BUILD_TAG=$("$BUILD_PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$BUILD_TAG" --implementation cp \
  "${PLATFORMS[@]}" -d "$OUT/build/wheels" "$TVM_FFI"

# (the members keep their archive times, so a rerun's ninja finds the objects it built up to date)
unpack() { python3 - "$1" "$2" <<'PYEOF'
import os, sys, time, zipfile

with zipfile.ZipFile(sys.argv[1]) as z:
    for info in z.infolist():
        path = z.extract(info, sys.argv[2])
        t = time.mktime(info.date_time + (0, 0, -1))
        os.utime(path, (t, t))
PYEOF
}
unpack "$OUT"/wheels/sgl_flash_mla-*.whl "$OUT/site"
unpack "$(ls "$OUT"/wheels/apache_tvm_ffi-*cp"${RUNNER_PY/./}"*.whl)" "$OUT/site"
unpack "$OUT"/wheels/flashinfer_python-*.whl "$OUT/site"
# the build tree: the whole FlashInfer (sources to compile from) and tvm_ffi for the build Python
rm -rf "$OUT/build/site" && mkdir -p "$OUT/build/site"
unpack "$OUT"/wheels/flashinfer_python-*.whl "$OUT/build/site"
unpack "$(ls "$OUT"/build/wheels/apache_tvm_ffi-*cp"${BUILD_TAG/./}"*.whl)" "$OUT/build/site"

MINIMAL_INIT='"""flashinfer, trimmed by tools/peers_setup.sh to what flashinfer.mla and flashinfer.topk need: the full
package __init__ imports packages an offline GPU runner lacks (cuda-tile, cudnn-frontend, cutlass-dsl). Import
those two modules by name (flashinfer.topk.top_k is what the full package exports as flashinfer.top_k)."""

from .version import __git_commit__ as __git_commit__
from .version import __version__ as __version__
'
for site in "$OUT/site" "$OUT/build/site"; do printf '%s' "$MINIMAL_INIT" > "$site/flashinfer/__init__.py"; done

# A CUDA tree FlashInfer's link line expects ($CUDA_HOME/lib64, and lib64/stubs/libcuda.so, absent without a
# driver): links to the toolkit, and a stub libcuda with the driver's soname (the runner's driver provides it).
# The top-k sources include <curand.h> (its device API is header-only): a toolkit without cuRAND gets the headers
# of the nvidia-curand wheel that belongs to CUDA 13.0 in its include folder.
CUDA_ROOT=""
for c in "${CUDA_HOME:-}" /usr/local/cuda /usr/local/cuda-13.0; do
  if [ -n "$c" ] && [ -x "$c/bin/nvcc" ]; then CUDA_ROOT=$c; break; fi
done
[ -n "$CUDA_ROOT" ] || { echo "peers_setup: no CUDA toolkit (set CUDA_HOME)" >&2; exit 1; }
CUDA_TREE="$PWD/$OUT/build/cuda"
rm -rf "$CUDA_TREE" && mkdir -p "$CUDA_TREE/lib64/stubs"
# (targets too: nvcc's own include path is bin/../targets/..., which ninja's dependency log keeps as written)
for d in bin nvvm targets; do
  if [ -e "$CUDA_ROOT/$d" ]; then ln -s "$(readlink -f "$CUDA_ROOT/$d")" "$CUDA_TREE/$d"; fi
done
mkdir -p "$CUDA_TREE/include"
for f in "$(readlink -f "$CUDA_ROOT/include")"/*; do ln -s "$f" "$CUDA_TREE/include/"; done
if [ ! -e "$CUDA_TREE/include/curand.h" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_27_x86_64 -d "$OUT/build/wheels" \
    "$CURAND"
  python3 - "$(ls "$OUT"/build/wheels/nvidia_curand-*.whl)" "$CUDA_TREE/include" <<'PYEOF'
import os, pathlib, sys, time, zipfile

with zipfile.ZipFile(sys.argv[1]) as z:
    for info in z.infolist():
        if "/include/" in info.filename and info.filename.endswith(".h"):
            path = pathlib.Path(sys.argv[2], pathlib.PurePosixPath(info.filename).name)
            path.write_bytes(z.read(info))
            t = time.mktime(info.date_time + (0, 0, -1))
            os.utime(path, (t, t))
PYEOF
fi
for f in "$(readlink -f "$CUDA_ROOT/lib64")"/*; do ln -s "$f" "$CUDA_TREE/lib64/"; done
if [ -e "$CUDA_ROOT/lib64/stubs/libcuda.so" ]; then
  ln -s "$(readlink -f "$CUDA_ROOT/lib64/stubs/libcuda.so")" "$CUDA_TREE/lib64/stubs/libcuda.so"
else
  echo "" | cc -x c -shared -Wl,-soname,libcuda.so.1 -o "$CUDA_TREE/lib64/stubs/libcuda.so" -
fi
export CUDA_HOME="$CUDA_TREE"

echo "peers_setup: prebuilding FlashInfer's MLA and top-k modules for sm_90a (nvcc; the top-k one is long)"
export FLASHINFER_CUDA_ARCH_LIST="9.0a" FLASHINFER_WORKSPACE_BASE="$PWD/$OUT/build/ws" TVM_FFI_DISABLE_TORCH_C_DLPACK=1
PYTHONPATH="$PWD/$OUT/build/site${PYTHONPATH:+:$PYTHONPATH}" MAX_JOBS=${MAX_JOBS:-2} "$BUILD_PY" - "$PWD/$OUT/site" <<'PYEOF'
import os, pathlib, shutil, sys, time

import torch
from flashinfer.jit.attention import gen_batch_mla_module
from flashinfer.jit.topk import gen_topk_module

aot = pathlib.Path(sys.argv[1]) / "flashinfer" / "data" / "aot"
mla = lambda backend: gen_batch_mla_module(  # noqa: E731
    backend, torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.int32, 512, 64, False
)
# (what, spec, required): fa2 is optional (the fa3 module is what the MLA peers need); the top-k module is one
# module for every dtype and index width flashinfer.topk.top_k takes (its sources dispatch on them inside)
# PEERS_SKIP_TOPK=1 leaves the long top-k build out (the tree_verify comparisons need only the MLA modules)
skip_topk = os.environ.get("PEERS_SKIP_TOPK") == "1"
for what, spec, required in (("mla fa3", mla("fa3"), True), ("mla fa2", mla("fa2"), False),
                             *(() if skip_topk else (("top-k", gen_topk_module(), False),))):
    t = time.time()
    try:
        spec.build()
    except Exception as e:
        print(f"peers_setup: {what}: {spec.name}: build failed ({type(e).__name__}: {str(e)[-500:]})")
        if required:
            raise
        continue
    dest = aot / spec.name / f"{spec.name}.so"
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(spec.jit_library_path, dest)
    print(f"peers_setup: {spec.name} built in {time.time() - t:.0f} s -> {dest} ({dest.stat().st_size >> 20} MiB)",
          flush=True)
PYEOF

echo "peers_setup: trimming FlashInfer to what flashinfer.mla and flashinfer.topk import, and tvm_ffi to what runs"
# the top-level flashinfer modules and packages `import flashinfer.mla, flashinfer.topk` loads (lazy imports on
# their paths stay inside them: mla, topk, jit, utils), found by importing them in the build tree
PYTHONPATH="$PWD/$OUT/build/site${PYTHONPATH:+:$PYTHONPATH}" "$BUILD_PY" -c '
import sys
import flashinfer.mla  # noqa: F401
import flashinfer.topk  # noqa: F401
print("\n".join(sorted({m.split(".")[1] for m in sys.modules if m.startswith("flashinfer.")})))
' > "$OUT/build/flashinfer_keep.txt"
FI="$OUT/site/flashinfer"
for entry in "$FI"/*; do
  base=$(basename "$entry"); mod=${base%.py}
  case "$base" in data|__init__.py|py.typed) continue ;; esac
  grep -qx "$mod" "$OUT/build/flashinfer_keep.txt" || rm -rf "$entry"
done
rm -rf "$FI/data/cutlass" "$FI/data/cccl" "$FI/data/spdlog" "$FI/data/include"
find "$FI/data/csrc" -type f ! -name 'batch_mla*' -delete
# (tvm_ffi's libtvm_ffi_testing.so stays: tvm_ffi loads it at import)
rm -rf "$OUT/site/tvm_ffi/3rdparty" "$OUT/site/tvm_ffi/include" "$OUT/site/tvm_ffi/src" "$OUT/site/tvm_ffi/cython"
rm -rf "$OUT/site/build_backend.py" "$OUT/site/build_utils.py" "$OUT/site/b12x"  # flashinfer's build helpers, extra
# pure-Python packages flashinfer imports that a torch image may lack (torch's own deps are assumed present)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$RUNNER_PY" --implementation cp \
  "${PLATFORMS[@]}" -d "$OUT/wheels/deps" requests urllib3 idna charset-normalizer certifi tqdm packaging nvidia-ml-py
for w in "$OUT"/wheels/deps/*.whl; do unpack "$w" "$OUT/site"; done
rm -f "$OUT/site/example.py"  # nvidia-ml-py's example script
find "$OUT/site" -name '*.dist-info' -prune -o -type d \( -name tests -o -name docs -o -name examples \) -print0 \
  | xargs -0 rm -rf
find "$OUT/site" -name '__pycache__' -prune -exec rm -rf {} +
# what no loader reads, to keep the folder well under what a device call carries (the top-k module alone is
# ~15 MB): the static symbol tables of FlashInfer's prebuilt modules (--strip-unneeded keeps the dynamic symbols
# tvm_ffi looks up), the host debug sections of FlashMLA's extensions (--strip-debug: 23 MB -> 8 MB; their
# device code is untouched), and the full wheels' file lists (RECORD; METADATA, which gives the versions, stays)
find "$FI/data/aot" -name '*.so' -exec strip --strip-unneeded {} +
strip --strip-debug "$OUT"/site/flash_mla/*.so
rm -f "$OUT"/site/*.dist-info/RECORD
du -sh "$OUT/site"
echo "peers_setup: ok: PYTHONPATH=$OUT/site FLASHINFER_DISABLE_JIT=1 TVM_FFI_DISABLE_TORCH_C_DLPACK=1"
