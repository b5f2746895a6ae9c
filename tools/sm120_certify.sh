#!/usr/bin/env bash
# What an sm_120 GPU runs, run on an sm_90 GPU (an H200): the builds at sm_120's 99 KB shared-memory budget (the
# *_99k twins of kernels_cu/specs.py) through every clause, the kernel mutants of their sources, compute-sanitizer
# and the benchmarks beside the variants they mirror; then the short table of tools/sm120_summary.py.
# Usage: tools/sm120_certify.sh OUT [stages...]   (stages: check mutants_tb perf summary; default all, in order;
#        each of check, mutants_tb and perf fits 10 minutes on an H200, so they may be run one per call into OUT)
# OUT: a folder under the ignored runs/ (e.g. runs/h200-sm120-$(date +%F)); to commit a run, copy its summary into
#   reports/<device>/<date>/ (reports/README.md).
#   check:      the twins' conformance (+ the device's arch-limit row and query-kernel geometry), the tree_verify
#               kernel mutants (k_tv_*: on portable and portable_99k together, then on the twin alone), compute-sanitizer (four tools) on
#               portable_99k's sanitize cases and on the tree_build twins' conformance tests, side by side
#   mutants_tb: the tree_build kernel mutants (k_tb_*), judged on every tree_build variant, then on the twins alone
#               (those whose machine code the patch changes: meta/test_kernel_mutants.py)
#   perf:       the quick perf grid without comparators, every variant (twins beside their bases) -> OUT/perf-sm120.json
#   summary:    tools/sm120_summary.py OUT (exit 1 if a row failed, a mutant survived or a sanitizer run failed)
# Env: PYTHON (python3), JOBS (6), KDTREE_STAGE_TIMEOUT (540 s per run).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${1:?usage: tools/sm120_certify.sh OUT [stages]}; shift
STAGES=${*:-check mutants_tb perf summary}
PY=${PYTHON:-python3}
"$PY" -m harness.env_names || exit 2  # a variable still under its old KDTR_ name
LIMIT=${KDTREE_STAGE_TIMEOUT:-540}
mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-ci} KDTREE_CACHE_DIR=${KDTREE_CACHE_DIR:-$OUT/.cache}
export GIT_REVISION=${GIT_REVISION:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
TWINS=$("$PY" -c 'from kernels_cu import specs; print(*(s.variant for s in specs.sm120_twins()))')
TB_TWINS=$("$PY" -c 'from kernels_cu import specs; print(*(s.variant for s in specs.sm120_twins("tree_build")))')
summary() { echo "$*" | tee -a "$OUT/summary.txt"; }
run() {  # name command...: its log, rc, time and last result line go to the summary
  local name=$1; shift; local t0=$SECONDS
  timeout -k 30 "$LIMIT" "$@" >"$OUT/logs/$name.log" 2>&1; local rc=$?
  summary "$name: rc=$rc, $((SECONDS - t0)) s; $(grep -E '(passed|failed|ERROR SUMMARY|RACECHECK SUMMARY)' \
    "$OUT/logs/$name.log" | tail -1)"
}
{ date -u; echo "git revision: $GIT_REVISION"; nvidia-smi --query-gpu=name,driver_version --format=csv; } \
  >"$OUT/logs/env.txt" 2>&1
summary "sm_120 certification on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>&1 | head -1), revision \
$GIT_REVISION, $(date -u +%FT%TZ), stages: $STAGES; twins: $TWINS"
impls=(); for v in $TWINS; do impls+=(--impl "cuda:$v"); done
tb_impls=(); for v in $TB_TWINS; do tb_impls+=(--impl "cuda:$v"); done
for s in $STAGES; do case $s in
  check)
    run conformance "$PY" -m pytest conformance meta/test_kernel_geometry.py "${impls[@]}" --require-gpu \
      -n "${JOBS:-6}" -q -p no:cacheprovider --report-dir "$OUT" &
    run mutants_tv "$PY" -m pytest meta/test_kernel_mutants.py -k "killed and k_tv_ and not k_tv90" -n 8 -q \
      -p no:cacheprovider --report-dir "$OUT/mutants" &
    ( for tool in memcheck racecheck initcheck synccheck; do
        run "sanitizer_${tool}_portable_99k" compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 \
          "$PY" -m lab.tree_verify_dev sanitize --variant portable_99k
      done ) &
    for tool in memcheck racecheck initcheck synccheck; do
      HYPOTHESIS_PROFILE=dev run "sanitizer_${tool}_tree_build_99k" compute-sanitizer --tool "$tool" \
        --error-exitcode 99 --print-limit 20 "$PY" -m pytest conformance/test_tree_build.py "${tb_impls[@]}" \
        --require-gpu -p no:xdist -q -p no:cacheprovider -k "not deterministic and not machine" \
        --report-dir "$OUT/logs/san_$tool" &
    done
    wait ;;
  mutants_tb)
    run mutants_tb "$PY" -m pytest meta/test_kernel_mutants.py -k "killed and k_tb_" -n 8 -q -p no:cacheprovider \
      --report-dir "$OUT/mutants_tb" ;;
  perf)
    run perf "$PY" -m pytest perf/bench_tree_verify.py perf/bench_tree_build.py --perf-quick --perf-no-comparators \
      -p no:xdist -q -p no:cacheprovider --benchmark-json="$OUT/perf-sm120.json" --report-dir "$OUT/logs/perf" ;;
  summary) "$PY" -m tools.sm120_summary "$OUT" | tee "$OUT/sm120.md" ;;
  *) summary "unknown stage: $s"; exit 2 ;;
esac; done
