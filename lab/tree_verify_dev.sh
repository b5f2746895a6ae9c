#!/usr/bin/env bash
# tree_verify kernel development run on a GPU machine: smoke checks, the tree_verify conformance tests, the
# kernel mutants and compute-sanitizer (in parallel, all correctness), then the timing table alone.
# Usage: lab/tree_verify_dev.sh OUT [stages...]   (stages: smoke check time versus profile; default all)
# MUTANTS=0 leaves the kernel mutants out of `check`.
# OUT gets summary.txt, timing.md, timing.json, versus.md, versus.json and logs.tar.gz. `versus` times the sm90a
# variant beside portable.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: lab/tree_verify_dev.sh OUT [stages]}; shift
STAGES=${*:-smoke check time versus profile}
PY=${PYTHON:-python3}
mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-dev} KDTREE_CACHE_DIR=${KDTREE_CACHE_DIR:-$OUT/.cache}
# reports name this revision (set it when the tree is a copy without .git, or inside another checkout)
export GIT_REVISION=${GIT_REVISION:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
summary() { echo "$*" | tee -a "$OUT/summary.txt"; }
stage() {  # name timeout_s command...: the command's log, rc and last result line go to the summary
  local name=$1 t=$2; shift 2; local t0=$SECONDS
  timeout "$t" "$@" >"$OUT/logs/$name.log" 2>&1; local rc=$?
  summary "$name: rc=$rc, $((SECONDS - t0)) s; $(grep -E '(passed|failed|error|ERROR SUMMARY|RACECHECK SUMMARY|failure)' \
    "$OUT/logs/$name.log" | tail -1)"
}
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; $PY --version
  ${CXX:-c++} --version | head -1; } >"$OUT/logs/env.log" 2>&1
summary "tree_verify dev run, $(date -u +%FT%TZ), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>&1 | head -1)"
for s in $STAGES; do case $s in
  smoke) stage smoke 120 $PY -m lab.tree_verify_dev smoke
    stage smoke_sm90a 120 $PY -m lab.tree_verify_dev smoke --variant sm90a ;;
  check)
    stage conformance 270 $PY -m pytest conformance/test_tree_verify.py conformance/test_fixtures.py \
      conformance/test_kernels_build.py meta/test_kernel_geometry.py --impl cuda --impl cuda:sm90a --require-gpu -n 6 -q \
      -p no:cacheprovider --report-dir "$OUT/logs/conformance" &
    [ "${MUTANTS:-1}" = 0 ] || stage kernel_mutants 270 $PY -m pytest meta/test_kernel_mutants.py -k k_tv -n 8 -q \
      -p no:cacheprovider --report-dir "$OUT/logs/mutants" &
    for v in portable sm90a; do  # each variant's kernels (sm90a's fp32 / odd-page calls run portable's)
      ( for tool in memcheck racecheck initcheck synccheck; do
          stage "sanitizer_${v}_$tool" 70 compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 \
            $PY -m lab.tree_verify_dev sanitize --variant "$v"
        done ) &
    done
    wait
    grep -E '^\| k_tv|^## Mutants' "$OUT/logs/mutants/conformance.md" 2>/dev/null | tee -a "$OUT/summary.txt" ;;
  time)
    stage timing 180 $PY -m lab.tree_verify_dev time --json "$OUT/timing.json"
    grep -E '^\||^ceilings' "$OUT/logs/timing.log" >"$OUT/timing.md"
    cat "$OUT/timing.md" ;;
  versus)
    stage versus 300 $PY -m lab.tree_verify_dev versus --json "$OUT/versus.json"
    grep -E '^\||^ceilings' "$OUT/logs/versus.log" >"$OUT/versus.md"
    cat "$OUT/versus.md" ;;
  profile)  # Nsight Compute on one compute-bound launch (clocks left as they are)
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    for v in ${PROFILE_VARIANTS:-portable sm90a}; do
      k=tree_verify_bf16_kernel; [ "$v" = sm90a ] && k=tree_verify_sm90a_kernel
      stage "ncu_$v" 120 "$NCU" --clock-control none --kernel-name "$k" --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
        --section WarpStateStats --section Occupancy --section LaunchStats $PY -m lab.tree_verify_dev profile \
        --variant "$v"
      grep -E "Duration|Throughput|Pipe|Stall|Warp Cycles|Issue|Bank|Registers|Achieved Occupancy|SM Frequency" \
        "$OUT/logs/ncu_$v.log" | head -60 >"$OUT/ncu_$v.txt"
    done ;;
esac; done
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs" "$OUT/.cache"
