#!/usr/bin/env bash
# Every GPU check of the PyTorch operators (kdtree_torch, spec/step.md ST.3), in about 6 minutes on one H100/H200:
#   cpu_checks   meta/test_torch_ops.py on this torch (schemas, fake implementations, a traced round)
#   gpu_tests    conformance/test_torch_ops.py: opcheck on each operator, the CUDA-graph round and the
#                torch.compile(fullgraph=True) round against kernels_cu.step.Step bit for bit, refused values
#   conformance  every op's clauses through the operators: pytest conformance --impl torch-ops (the op test files,
#                the boundary cases, the extremes, the golden fixtures), profile quick unless HYPOTHESIS_PROFILE says
#   bench        perf/bench_torch_ops.py: the operators' round beside Step (in-graph difference, eager per-call
#                overhead), printed and in OUT/bench.json; run alone, after the others
# The first three run side by side on the one GPU. Usage: tools/torch_ops_gpu_check.sh OUT (a folder; created).
# Runs from the repository root without installing the project (python3 with torch+CUDA, cuda-python, pytest,
# pytest-xdist, pytest-benchmark and hypothesis); PYTHON picks the interpreter. OUT gets summary.txt (also printed),
# env.txt and one log per stage.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${1:?usage: tools/torch_ops_gpu_check.sh OUT}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PYTHONUNBUFFERED=1 KDTREE_CACHE_DIR=${KDTREE_CACHE_DIR:-$OUT/.cache}
export GIT_REVISION=${GIT_REVISION:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
{ date -u; echo "git revision: $GIT_REVISION"; nvidia-smi --query-gpu=name,driver_version --format=csv
  "$PY" -c 'import sys, torch; print(sys.version); print("torch", torch.__version__, torch.version.cuda)'
  "$PY" -m pip list 2>/dev/null | grep -iE '^(torch|triton|cuda-|pytest|hypothesis)'
} > "$OUT/env.txt" 2>&1
: > "$OUT/summary.txt"
summary() { echo "$*" >> "$OUT/summary.txt"; }
# run NAME LIMIT_S cmd...: the command under a time limit (SIGINT first: pytest still reports), its log in OUT
run() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout -s INT -k 20 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  summary "$name: rc=$rc, $((SECONDS - t0)) s; $(grep -E '(passed|failed|error|skipped)' "$OUT/$name.log" | tail -1)"
  [ "$rc" -eq 0 ] || grep -hE '^(FAILED|ERROR) ' "$OUT/$name.log" | head -n 12 | cut -c1-400 | sed "s/^/  $name: /" \
    >> "$OUT/summary.txt"
  return "$rc"
}
OP_FILES=(conformance/test_draft_topk.py conformance/test_tree_build.py conformance/test_tree_verify.py
          conformance/test_tree_accept.py conformance/test_boundaries.py conformance/test_extremes.py
          conformance/test_extremes_verify.py conformance/test_fixtures.py)
run cpu_checks 120 "$PY" -m pytest meta/test_torch_ops.py -p no:xdist -q -p no:cacheprovider &
run gpu_tests 270 "$PY" -m pytest conformance/test_torch_ops.py --require-gpu -p no:xdist -q -p no:cacheprovider \
    --report-dir "$OUT/gpu-tests" --durations=10 &
run conformance 270 env HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-quick}" "$PY" -m pytest "${OP_FILES[@]}" \
    --impl torch-ops --require-gpu -n "${JOBS:-6}" -q -p no:cacheprovider --report-dir "$OUT/conformance" \
    --durations=10 &
wait
if [ "${SKIP_BENCH:-0}" != 1 ]; then  # SKIP_BENCH=1: a caller that times the benchmark itself, with the GPU alone
  run bench 150 "$PY" -m pytest perf/bench_torch_ops.py --require-gpu -p no:xdist -q -s -p no:cacheprovider \
      --benchmark-json="$OUT/bench.json" --benchmark-columns=median,rounds
  grep -h '^\[torch-ops ' "$OUT/bench.log" >> "$OUT/summary.txt"
fi
cat "$OUT/summary.txt"
! grep -q 'rc=[1-9]' "$OUT/summary.txt"
