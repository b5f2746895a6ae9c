#!/usr/bin/env bash
# The GPU runner job: conformance on the GPU (cuda and reference), the broken-kernel check, the kernels
# under compute-sanitizer, the benchmarks, and (on several GPUs) the one-GPU-per-worker scaling.
# Usage: tools/gpu_suite.sh OUT [stages...]
#   stages: conformance mutants sanitizer perf scaling (default: all but scaling); `check` runs conformance,
#   mutants and sanitizer side by side (they use the GPU lightly and the host's cores; one wall-clock bound).
#   STAGE_TIMEOUT (seconds, default 1800) bounds each stage, so a hung stage still leaves its log.
# OUT gets summary.txt, conformance.{json,md}, perf.{json,md}, env.txt and logs.tar.gz (every log).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: tools/gpu_suite.sh OUT [stages]}; shift
STAGES=${*:-conformance mutants sanitizer perf}
PY=${PYTHON:-python3}
mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-ci} KDTR_CACHE_DIR=${KDTR_CACHE_DIR:-$OUT/.cache}
export GIT_REVISION=${GIT_REVISION:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
status=0
summary() { echo "$*" | tee -a "$OUT/summary.txt"; }
run() { local name=$1; shift; local t0=$SECONDS; timeout "${STAGE_TIMEOUT:-1800}" "$@" >"$OUT/logs/$name.log" 2>&1; local rc=$?;
        summary "$name: rc=$rc, $((SECONDS - t0)) s; $(grep -E '(passed|failed|error)' "$OUT/logs/$name.log" | tail -1)";
        grep -hE 'SUMMARY:' "$OUT/logs/$name.log" | sed "s/^/  $name: /" | tee -a "$OUT/summary.txt";
        [ $rc -eq 0 ] || status=1; }
{ date -u; echo "git revision: $GIT_REVISION"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  $PY -c 'import sys; print(sys.version)'; } > "$OUT/env.txt" 2>&1
summary "kdtree-conformance GPU suite, revision $GIT_REVISION, $NGPU GPU(s), $(date -u +%FT%TZ)"
stage_conformance() {
  # every clause on the GPU for every cuda variant and the reference (the CPU-only reference mutants and the
  # kernel mutants, which have their own stage, are left out)
  run conformance $PY -m pytest conformance meta --impl cuda --impl reference --require-gpu -n "${JOBS:-8}" -q \
      -p no:cacheprovider --report-dir "$OUT" --deselect meta/test_mutants.py --deselect meta/test_kernel_mutants.py
}
stage_mutants() {
  run kernel_mutants $PY -m pytest meta/test_kernel_mutants.py -n "${JOBS:-8}" -q -p no:cacheprovider \
      --report-dir "$OUT/logs/mutants"
  grep -E '^\| k_|^## Mutants' "$OUT/logs/mutants/conformance.md" | tee -a "$OUT/summary.txt"
}
stage_sanitizer() {
  # tree_build and tree_accept through their conformance tests; tree_verify through the dev tool's sanitize
  # case list (every dtype path, forced splits, page sizes: its hypothesis tests take too long under a tool)
  for tool in memcheck racecheck initcheck synccheck; do
    HYPOTHESIS_PROFILE=dev run "sanitizer_$tool" compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 \
        $PY -m pytest conformance/test_tree_build.py conformance/test_tree_accept.py conformance/test_fixtures.py \
        conformance/test_device_arrays.py conformance/test_extremes.py conformance/test_kernels_build.py \
        --impl cuda --require-gpu -p no:xdist -q -p no:cacheprovider \
        -k "not deterministic and not machine" --report-dir "$OUT/logs/san_$tool"
    run "sanitizer_${tool}_tree_verify" compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 \
        $PY tools/tree_verify_dev.py sanitize
  done
}
for stage in $STAGES; do case $stage in
  conformance) stage_conformance ;;
  mutants) stage_mutants ;;
  sanitizer) stage_sanitizer ;;
  check)
    JOBS=${JOBS:-6}
    stage_conformance & stage_mutants & stage_sanitizer & wait
    grep -q 'rc=[1-9]' "$OUT/summary.txt" && status=1 ;;
  perf)
    run perf $PY -m pytest perf -p no:xdist -q -p no:cacheprovider --benchmark-enable --benchmark-json="$OUT/perf.json" \
        --benchmark-columns=median,min,rounds --report-dir "$OUT/logs/perf"
    $PY tools/perf_table.py "$OUT/perf.json" > "$OUT/perf.md" 2>&1; cat "$OUT/perf.md" ;;
  scaling)  # one worker per GPU against the same workers all on the first GPU (needs 2+ GPUs)
    if [ "$NGPU" -lt 2 ]; then summary "scaling: skipped, $NGPU GPU(s)"; continue; fi
    for gpus in "0" "$(seq -s, 0 $((NGPU - 1)))"; do
      t0=$SECONDS
      KDTR_GPUS=$gpus run "scaling_gpus_${gpus//,/_}" $PY -m pytest conformance --impl cuda --require-gpu -n "$NGPU" -q \
          -p no:cacheprovider --report-dir "$OUT/logs/scaling_${gpus//,/_}"
      summary "scaling: $NGPU workers on GPUs {$gpus}: $((SECONDS - t0)) s wall"
    done ;;
esac; done
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs" "$OUT/.cache"
exit $status
