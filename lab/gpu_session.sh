#!/usr/bin/env bash
# One GPU run of the checks and timings a kernel change needs, in one call: the timings alone on the GPU first, then
# the correctness stages side by side (they share the GPU, not its timing). Not part of the suite.
# Usage: lab/gpu_session.sh OUT [stages...]
#   stages (default: step verify race fixed):
#     step     the step's refused rounds (ST.2.3, ST.2.4) on every cuda variant; the original failure's cases under
#              compute-sanitizer memcheck; the kernel mutants named in MUTANTS (space-separated substrings; each
#              must be killed)
#     verify   tree_verify's conformance (its own tests, the device arrays' and the fixtures', tree_build's deferred
#              path) for every cuda variant and sm90a_planned, and the dev tool's smoke checks of both sm90a variants
#     race     python -m lab.tree_verify_race (sm90a builds beside FlashMLA / FlashInfer / the cascades)
#     fixed    Nsight Compute's per-kernel durations of bs-1 calls (python -m lab.tree_verify_race fixed)
#     torch_ops  the PyTorch operators' GPU checks (tools/torch_ops_gpu_check.sh, where it exists)
#     sanitize compute-sanitizer memcheck and racecheck over the dev tool's sanitize cases of both sm90a builds
#     mutants  the kernel mutants named in MUTANTS alone (without the step's checks)
#     profile  ncu --set full of one sm90a_planned launch at lab.tree_verify_race's PROFILED shape, then of FlashMLA's
#              split kernel on the same inputs: each report, its details page and its per-instruction (SASS) source
#              page with the stall samples
# Env: PYTHON (python3), JOBS (12), RACE_ARGS (extra arguments of the race, e.g. --quick), MUTANTS (see step),
# MUTANT_LIMIT (280 s), STEP_LIMIT (200 s): the stages' time limits where they share the GPU. The peers are imported
# from PYTHONPATH (tools/peers_setup.sh's .peers/site). OUT gets summary.txt, env.txt, race.json, race.md and
# logs.tar.gz (every log and the conformance reports).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${1:?usage: lab/gpu_session.sh OUT [stages]}; shift
STAGES=${*:-step verify race fixed}
PY=${PYTHON:-python3}
JOBS=${JOBS:-12}
MUTANTS=${MUTANTS:-k_tb_builds_on_refused_values}
mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-quick}
export GIT_REVISION=${GIT_REVISION:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
summary() { echo "$*" | tee -a "$OUT/summary.txt"; }
stage() {  # name timeout_s command...: its log, rc, last result line and first failures go to the summary
  local name=$1 t=$2; shift 2; local t0=$SECONDS
  timeout -k 20 "$t" "$@" >"$OUT/logs/$name.log" 2>&1; local rc=$?
  summary "$name: rc=$rc, $((SECONDS - t0)) s; $(grep -E '(passed|failed|ERROR SUMMARY|killed|error)' \
    "$OUT/logs/$name.log" | tail -1 | cut -c1-300)"
  [ $rc -eq 0 ] || grep -hE '^(FAILED|ERROR) |Error|error:' "$OUT/logs/$name.log" | head -n 6 | cut -c1-400 \
    | sed "s/^/  $name: /" | tee -a "$OUT/summary.txt"
}
{ date -u; echo "revision $GIT_REVISION"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem \
  --format=csv; "$PY" --version; "$PY" -m pip list 2>/dev/null | grep -iE '^(torch|cuda-|nvidia-cuda-nvrtc|pytest) '
} >"$OUT/env.txt" 2>&1
summary "gpu session $GIT_REVISION on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%FT%TZ): $STAGES"

step_checks() {
  stage step "${STEP_LIMIT:-200}" "$PY" -m pytest --require-gpu -q -p no:cacheprovider conformance/test_step.py -k refused --impl cuda --impl cuda:sm90a_planned -n "$JOBS" \
    --report-dir "$OUT/logs/step" &
  stage step_memcheck 200 compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 "$PY" -m pytest \
    conformance/test_step.py -k stops_the_step --impl cuda:select_verify --impl cuda:select_race \
    --impl cuda:prefilter --require-gpu -q -p no:cacheprovider -p no:xdist --report-dir "$OUT/logs/memcheck" &
  mutant_checks &
  wait
}
mutant_checks() {
  stage mutants "${MUTANT_LIMIT:-280}" "$PY" -m pytest meta/test_kernel_mutants.py \
    -k "is_killed and not twins and (${MUTANTS// / or })" -q -p no:cacheprovider -n 6 -rA
}
sanitize_checks() {
  for v in sm90a sm90a_planned; do
    for tool in memcheck racecheck; do
      stage "sanitize_${tool}_$v" 240 compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 \
        "$PY" -m lab.tree_verify_dev sanitize --variant "$v"
    done
  done
}
verify_checks() {
  stage verify 240 "$PY" -m pytest --require-gpu -q -p no:cacheprovider conformance/test_tree_verify.py \
    conformance/test_device_arrays.py conformance/test_fixtures.py conformance/test_extremes_verify.py \
    -k "tree_verify or tree_build_deferred" --impl cuda --impl cuda:sm90a_planned -n "$JOBS" \
    --report-dir "$OUT/logs/verify" &
  stage smoke_sm90a 150 "$PY" -m lab.tree_verify_dev smoke --variant sm90a &
  stage smoke_planned 150 "$PY" -m lab.tree_verify_dev smoke --variant sm90a_planned &
  wait
}
for s in $STAGES; do case $s in  # the timings first, alone on the GPU
  race) read -r -a race_args <<< "${RACE_ARGS:-}"  # a list of arguments
    stage race 280 "$PY" -m lab.tree_verify_race --json "$OUT/race.json" "${race_args[@]}"
    sed -n '/^## tree_verify/,$p' "$OUT/logs/race.log" > "$OUT/race.md" ;;
  profile)  # ours, then FlashMLA's split kernel on the same shape (its sm_90 decode kernel's name)
    for who in ours flashmla; do
      if [ $who = ours ]; then kernel=tree_verify_sm90a_kernel; args=(); f=profile
      else kernel=flash_fwd_splitkv_mla_kernel; args=(--variant flashmla); f=profile_flashmla; fi
      stage $f 200 ncu --set full --kernel-name "regex:$kernel" --launch-skip 1 --launch-count 1 -f \
        -o "$OUT/logs/$f" "$PY" -m lab.tree_verify_race profile "${args[@]}"
      ncu --import "$OUT/logs/$f.ncu-rep" --page details > "$OUT/logs/${f}_details.txt" 2>&1
      ncu --import "$OUT/logs/$f.ncu-rep" --page source --print-source sass --csv > "$OUT/logs/${f}_sass.csv" 2>&1
      grep -E 'Duration|Compute \(SM\) Throughput|Memory Throughput|Warp Cycles Per Issued|Issued Warp|No Eligible|Executed Instructions  ' \
        "$OUT/logs/${f}_details.txt" | head -n 14 | sed "s/^/  $f: /" | tee -a "$OUT/summary.txt"
    done ;;
  fixed) stage fixed 70 ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none \
    "$PY" -m lab.tree_verify_race fixed
    grep -E '^  [a-zA-Z_].*\(|gpu__time_duration' "$OUT/logs/fixed.log" | paste - - | cut -c1-200 \
      | sed 's/^/  fixed: /' | tee -a "$OUT/summary.txt" ;;
esac; done
for s in $STAGES; do case $s in  # then the correctness stages side by side
  step) step_checks & ;;
  verify) verify_checks & ;;
  torch_ops) stage torch_ops 280 env SKIP_BENCH=1 tools/torch_ops_gpu_check.sh "$OUT/logs/torch_ops" & ;;
  sanitize) sanitize_checks & ;;
  mutants) mutant_checks & ;;
esac; done
wait
for s in $STAGES; do case $s in  # the PyTorch operators' benchmark last, with the GPU alone (TORCH_BENCH=0: none)
  torch_ops) sed 's/^/  torch_ops: /' "$OUT/logs/torch_ops/summary.txt" | tee -a "$OUT/summary.txt"
    [ "${TORCH_BENCH:-1}" = 0 ] && continue
    stage torch_bench 150 "$PY" -m pytest perf/bench_torch_ops.py --require-gpu -p no:xdist -q -s \
      -p no:cacheprovider --benchmark-json="$OUT/torch_ops_bench.json" --benchmark-columns=median,rounds
    grep -h '^\[torch-ops ' "$OUT/logs/torch_bench.log" | tee -a "$OUT/summary.txt" ;;
esac; done
# (a call brings back few files: the logs and reports in one archive)
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
