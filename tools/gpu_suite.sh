#!/usr/bin/env bash
# The GPU runner job: conformance on the GPU (cuda and reference), the broken-kernel check, the kernels
# under compute-sanitizer, and the benchmarks. Writes logs, the conformance report and perf JSON to OUT.
# Usage: tools/gpu_suite.sh OUT [stages...]   stages: conformance mutants sanitizer perf (default: all)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: tools/gpu_suite.sh OUT [stages]}; shift
STAGES=${*:-conformance mutants sanitizer perf}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-ci} KDTR_CACHE_DIR=${KDTR_CACHE_DIR:-$OUT/.cache}
status=0
run() { local name=$1; shift; echo "== $name: $*"; local t0=$SECONDS; "$@" >"$OUT/$name.log" 2>&1; local rc=$?;
        echo "   rc=$rc in $((SECONDS - t0)) s; $(grep -E '(passed|failed|error)' "$OUT/$name.log" | tail -1)";
        [ $rc -eq 0 ] || status=1; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; $PY -c 'import sys; print(sys.version)'; } > "$OUT/env.txt" 2>&1
for stage in $STAGES; do case $stage in
  conformance)
    run conformance $PY -m pytest conformance meta --impl cuda --impl reference --require-gpu -n 8 -q \
        -p no:cacheprovider --report-dir "$OUT" --deselect meta/test_mutants.py ;;
  mutants)
    run kernel_mutants $PY -m pytest meta/test_kernel_mutants.py -n 8 -q -p no:cacheprovider --report-dir "$OUT/mutants" ;;
  sanitizer)
    for tool in memcheck racecheck initcheck synccheck; do
      HYPOTHESIS_PROFILE=dev run "sanitizer_$tool" compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 \
          $PY -m pytest conformance/test_tree_build.py conformance/test_tree_accept.py conformance/test_fixtures.py \
          --impl cuda --require-gpu -p no:xdist -q -p no:cacheprovider -k "not deterministic" --report-dir "$OUT/san_$tool"
    done ;;
  perf)
    run perf $PY -m pytest perf -p no:xdist -q -p no:cacheprovider --benchmark-enable --benchmark-json="$OUT/perf.json" \
        --benchmark-columns=median,min,rounds --report-dir "$OUT/perf"
    $PY tools/perf_table.py "$OUT/perf.json" > "$OUT/perf.md" 2>&1; cat "$OUT/perf.md" ;;
esac; done
exit $status
