#!/usr/bin/env bash
# The GPU runner job: conformance on the GPU (cuda and reference), the broken-kernel check, the kernels
# under compute-sanitizer, the benchmarks, and (on several GPUs) the one-GPU-per-worker scaling.
# Usage: tools/gpu_suite.sh OUT [stages...]
#   stages: conformance mutants sanitizer perf scaling (default: all but scaling)
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
run() { local name=$1; shift; local t0=$SECONDS; "$@" >"$OUT/logs/$name.log" 2>&1; local rc=$?;
        summary "$name: rc=$rc, $((SECONDS - t0)) s; $(grep -E '(passed|failed|error)' "$OUT/logs/$name.log" | tail -1)";
        grep -hE 'SUMMARY:' "$OUT/logs/$name.log" | sed "s/^/  $name: /" | tee -a "$OUT/summary.txt";
        [ $rc -eq 0 ] || status=1; }
{ date -u; echo "git revision: $GIT_REVISION"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  $PY -c 'import sys; print(sys.version)'; } > "$OUT/env.txt" 2>&1
summary "kdtree-conformance GPU suite, revision $GIT_REVISION, $NGPU GPU(s), $(date -u +%FT%TZ)"
for stage in $STAGES; do case $stage in
  conformance)
    run conformance $PY -m pytest conformance meta --impl cuda --impl reference --require-gpu -n 8 -q \
        -p no:cacheprovider --report-dir "$OUT" --deselect meta/test_mutants.py ;;
  mutants)
    run kernel_mutants $PY -m pytest meta/test_kernel_mutants.py -n 8 -q -p no:cacheprovider --report-dir "$OUT/logs/mutants"
    grep -E '^\| k_|^## Mutants' "$OUT/logs/mutants/conformance.md" | tee -a "$OUT/summary.txt" ;;
  sanitizer)
    for tool in memcheck racecheck initcheck synccheck; do
      HYPOTHESIS_PROFILE=dev run "sanitizer_$tool" compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 \
          $PY -m pytest conformance/test_tree_build.py conformance/test_tree_accept.py conformance/test_fixtures.py \
          conformance/test_device_arrays.py conformance/test_extremes.py conformance/test_kernels_build.py \
          --impl cuda --require-gpu -p no:xdist -q -p no:cacheprovider \
          -k "not deterministic and not machine" --report-dir "$OUT/logs/san_$tool"
    done ;;
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
