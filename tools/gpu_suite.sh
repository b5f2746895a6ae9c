#!/usr/bin/env bash
# The GPU runner job: conformance on the GPU (cuda and reference), the broken-kernel check, the kernels under
# compute-sanitizer, the perf stages (each one pytest run that fits in 10 minutes on an H200), the regression
# gate's planted-slowdown and planted-fallback checks, the comparison with a stored baseline, and the benchmark report.
# Usage: tools/gpu_suite.sh OUT [stages...]
# OUT: a folder under the ignored runs/ (e.g. runs/h200-$(date +%F)); to commit a run, copy its summary into
#   reports/<device>/<date>/ (reports/README.md).
#   stages: conformance mutants sanitizer perf_build perf_verify_h64 perf_verify_h128 perf_verify_sweep
#           perf_draft_topk_bf16 perf_draft_topk_fp32 gate gate_fallback baseline report scaling engine_cuda tb_dev
#           dt_dev perf_verify_peers perf_step
#   gate_fallback: the tree_build select variants' fallback rates, gated exactly: two runs of their cases at two cells
#           (--perf-stage gate_fallback) must give the same rates, and a run of a planted build whose every selection
#           fails its check (slow_tb_always_fallback, harness/kernel_mutants.py) must fail
#           `perf_gate.py compare --fallback-only` (times not compared there: that is the gate stage's); ~1 min
#   perf_verify_peers (not in `perf`): our kernels on chains beside FlashMLA and FlashInfer MLA; the peers must be
#           importable (pip install '.[peers]', or PYTHONPATH=.peers/site from tools/peers_setup.sh: docs/ADAPTERS.md)
#   tb_dev: `python -m lab.tree_build_dev` fallbacks and time (every tree_build design side by side, bit-checked)
#   dt_dev: `python -m lab.draft_topk_dev time --knockouts` (every draft_topk design side by side, bit-checked, and
#           where the time goes)
#   engine_cuda: builds kdtree-engine with its CUDA backend (nvcc; KDTREE_ENGINE_PREBUILT=1 takes build/engine as it is),
#           then runs every op clause with
#           --impl engine-cuda (the boundary cases included), the engine-cuda = NVRTC bit-identity and CUDA decode
#           tests (conformance/test_engine_cuda.py, test_decode_ties.py) and tools/engine_numbers.py for both
#           devices (OUT/engine-numbers/)
#   aliases: perf = the perf_* stages but perf_verify_peers, gate, gate_fallback and report; all (default) =
#            conformance mutants sanitizer perf;
#            check = conformance, mutants and sanitizer side by side (one wall-clock bound)
#   baseline: compares OUT/perf-*.json with KDTREE_PERF_BASELINE/perf-*.json (a folder; skipped when unset)
# Env: PYTHON (python3), KDTREE_PERF_QUICK=1 (reduced grids), KDTREE_STAGE_TIMEOUT (570 s per pytest run), JOBS (8
#   xdist workers), CONFORMANCE_PATHS (the conformance stage's test paths, "conformance meta"; a subset splits the stage
#   over runs that each fit a time limit), SANITIZER_TOOLS (the sanitizer stage's compute-sanitizer tools, "memcheck
#   racecheck initcheck synccheck"; the four take more than 10 minutes), SANITIZER_JOBS (4: the sanitizer stage's
#   processes at a time, one per cuda variant), SANITIZER_PROFILE (their hypothesis profile, quick), MUTANT_NAMES
#   (the mutants stage's mutants, name substrings: all).
# OUT gets summary.txt, conformance.{json,md}, mutants.json, perf-<stage>.json, gate-*.json, docs/BENCHMARKS.md and
# docs/benchmarks/*.png, env.txt and logs.tar.gz (every log). Stages may be run one per call into one OUT.
# The job may run lab scripts (lab/README.md): the `sanitizer` stage launches the tree_verify kernels through
# `python -m lab.tree_verify_dev sanitize`, and `tb_dev` is lab/tree_build_dev.py (`python -m` works because the
# script runs from the repository root: the project need not be pip-installed).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${1:?usage: tools/gpu_suite.sh OUT [stages]}; shift
PERF=(perf_build perf_verify_h64 perf_verify_h128 perf_verify_sweep perf_draft_topk_bf16 perf_draft_topk_fp32
      perf_step gate gate_fallback report)
STAGES=()
[ $# -gt 0 ] || set -- all
for s in "$@"; do case $s in
  all) STAGES+=(conformance mutants sanitizer "${PERF[@]}") ;;
  perf) STAGES+=("${PERF[@]}") ;;
  *) STAGES+=("$s") ;;
esac; done
PY=${PYTHON:-python3}
"$PY" -m harness.env_names || exit 2  # a variable still under its old KDTR_ name
LIMIT=${KDTREE_STAGE_TIMEOUT:-570}
mkdir -p "$OUT/logs"
[ -f "$OUT/logs.tar.gz" ] && tar -xzf "$OUT/logs.tar.gz" -C "$OUT"  # a later call adds to the same logs
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-ci} KDTREE_CACHE_DIR=${KDTREE_CACHE_DIR:-$OUT/.cache}
export GIT_REVISION=${GIT_REVISION:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
# checked beside `--impl cuda` (each op's default builds) by the conformance and sanitizer stages: the planned mode
# of tree_verify is no default build
NON_DEFAULT_VARIANTS="sm90a_planned"
status=0
summary() { echo "$*" | tee -a "$OUT/summary.txt"; }
run() { local name=$1; shift; local t0=$SECONDS; "$@" >"$OUT/logs/$name.log" 2>&1; local rc=$?;
        summary "$name: rc=$rc, $((SECONDS - t0)) s; $(grep -E '(passed|failed|error|skipped)' "$OUT/logs/$name.log" | tail -1)";
        grep -hE 'SUMMARY:' "$OUT/logs/$name.log" | sed "s/^/  $name: /" | tee -a "$OUT/summary.txt";
        # a failed run's first failures with their messages (pytest's -rfE lines) in the summary itself, so the
        # cause is in what a runner prints even when the logs do not come back
        [ $rc -eq 0 ] || grep -hE '^(FAILED|ERROR) ' "$OUT/logs/$name.log" | head -n 5 | cut -c1-400 \
            | sed "s/^/  $name: /" | tee -a "$OUT/summary.txt";
        [ $rc -eq 0 ] || status=1; return $rc; }
# One perf pytest run, without xdist (pytest-benchmark is off under it); SIGINT at the limit still writes the JSON.
perf_run() { local name=$1 json=$2; shift 2
  run "$name" timeout -s INT -k 30 "$LIMIT" "$PY" -m pytest perf -p no:xdist -q -p no:cacheprovider \
      --benchmark-json="$json" --benchmark-columns=median,min,rounds --report-dir "$OUT/logs/$name" "$@"; }
{ date -u; echo "git revision: $GIT_REVISION"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  "$PY" -c 'import sys; print(sys.version)'; "$PY" -m pip list 2>/dev/null | grep -iE '^(torch|cuda-|nvidia-cu|pytest|matplotlib) '
} > "$OUT/env.txt" 2>&1
summary "kdtree-conformance GPU suite, revision $GIT_REVISION, $NGPU GPU(s), $(date -u +%FT%TZ), stages: ${STAGES[*]}"
stage_conformance() {
  # every clause on the GPU for every cuda variant and the reference (the CPU-only reference mutants and the
  # kernel mutants, which have their own stage, are left out)
  # SIGINT at the limit: pytest still prints what failed, the slowest tests and the report of what ran
  local paths extra=() v; read -r -a paths <<< "${CONFORMANCE_PATHS:-conformance meta}"
  for v in $NON_DEFAULT_VARIANTS; do extra+=(--impl "cuda:$v"); done
  run conformance timeout -s INT -k 30 "$LIMIT" "$PY" -m pytest "${paths[@]}" --impl cuda "${extra[@]}" \
      --impl reference --require-gpu -n "${JOBS:-8}" -q -p no:cacheprovider --report-dir "$OUT" --durations=30 \
      --deselect meta/test_mutants.py --deselect meta/test_kernel_mutants.py
}
stage_mutants() {
  # the kernels' mutants and the step's (harness/step_mutants.py: the step's own parts, judged on its tests);
  # MUTANT_NAMES (name substrings) narrows them, to split the stage over calls
  local only=(); [ -n "${MUTANT_NAMES:-}" ] && only=(-k "${MUTANT_NAMES// / or }")
  run kernel_mutants timeout -s INT -k 30 "$LIMIT" "$PY" -m pytest meta/test_kernel_mutants.py \
      meta/test_step_mutants.py "${only[@]}" -n "${JOBS:-8}" -q -p no:cacheprovider --report-dir "$OUT/logs/mutants"
  grep -E '^\| [ks]_|^## Mutants' "$OUT/logs/mutants/conformance.md" | tee -a "$OUT/summary.txt"
  # the mutant rows kept beside the logs: `python -m tools.mutant_killers OUT/mutants.json` records each killer, which
  # the next judging of that mutant runs first (harness/judging.py)
  cp "$OUT/logs/mutants/conformance.json" "$OUT/mutants.json" 2>/dev/null
}
stage_sanitizer() {
  local TV_VARIANTS CUDA_VARIANTS tool pair v op n first  # from the specs, not a second list
  TV_VARIANTS=$("$PY" -c 'from kernels_cu import specs; print(*(s.variant for s in specs.for_op("tree_verify")))')
  CUDA_VARIANTS=$("$PY" -c 'import sys; from kernels_cu import specs
print(*(f"{s.variant}:{s.slug}" for s in specs.SPECS if s.default or s.variant in sys.argv[1:]))' $NON_DEFAULT_VARIANTS)
  first=$(($(wc -l < "$OUT/summary.txt") + 1))  # this stage's lines of the summary (a later call adds to it)
  # tree_build, tree_accept, draft_topk and the step through their conformance tests, one process per variant
  # (SANITIZER_JOBS at a time: one process over every variant took more than 200 s under each tool, an H100,
  # 2026-12-07), each process the tests of its variant's op (`-k OP`: its own file, its deferred, fixture and
  # extreme cases) and the step's; `--impl cuda:V` builds the other ops at their defaults, whose tests the
  # default variants' processes run. The quick profile (SANITIZER_PROFILE): every fixed case, 10 random examples a
  # property; under the dev profile's 30, racecheck processes ran past a 544 s bound (an H100, 2026-12-07, 17 at
  # once beside other work). tree_verify through the dev tool's sanitize case list (every dtype path, forced
  # splits, page sizes: its hypothesis tests take too long under a tool)
  for tool in ${SANITIZER_TOOLS:-memcheck racecheck initcheck synccheck}; do  # a subset splits the stage over runs
    n=0
    for pair in $CUDA_VARIANTS; do  # tree_build's also test_extremes: two of its cases there do not name the op
      v=${pair%%:*} op=${pair#*:}
      HYPOTHESIS_PROFILE=${SANITIZER_PROFILE:-quick} run "sanitizer_${tool}_$v" timeout -k 30 "$LIMIT" \
          compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 "$PY" -m pytest conformance/test_tree_build.py \
          conformance/test_tree_accept.py conformance/test_draft_topk.py conformance/test_fixtures.py \
          conformance/test_device_arrays.py conformance/test_extremes.py conformance/test_step.py \
          --impl "cuda:$v" --require-gpu -p no:xdist -q -p no:cacheprovider \
          -k "not deterministic and not machine and ($op or test_step$([ "$op" = tree_build ] && echo ' or test_extremes'))" \
          --report-dir "$OUT/logs/san_${tool}_$v" &
      (( ++n % ${SANITIZER_JOBS:-4} == 0 )) && wait
    done
    wait
    for v in $TV_VARIANTS; do  # every tree_verify variant (portable_99k: sm_120's tiles, built for sm_90)
      run "sanitizer_${tool}_tree_verify_$v" timeout -k 30 "$LIMIT" compute-sanitizer --tool "$tool" \
          --error-exitcode 99 --print-limit 20 "$PY" -m lab.tree_verify_dev sanitize --variant "$v"
    done
  done
  tail -n +"$first" "$OUT/summary.txt" | grep -qE '^sanitizer_.*: rc=[1-9]' && status=1  # the background runs' failures
}
stage_engine_cuda() {
  local nvcc; nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  if [ -n "${KDTREE_ENGINE_PREBUILT:-}" ]; then  # an engine built elsewhere with -DKDTREE_CUDA=ON (nvcc needs no GPU)
    run engine_cuda_build build/engine/kdtree-engine variants || return
  else run engine_cuda_build bash -c "cmake -S engine -B build/engine -DCMAKE_BUILD_TYPE=Release -DKDTREE_CUDA=ON \
      -DCMAKE_CUDA_COMPILER=$nvcc && cmake --build build/engine -j $(nproc) && build/engine/kdtree-engine variants" \
      || return; fi
  run engine_cuda_conformance timeout -k 30 "$LIMIT" "$PY" -m pytest conformance/test_tree_build.py \
      conformance/test_tree_verify.py conformance/test_tree_accept.py conformance/test_fixtures.py \
      conformance/test_extremes.py conformance/test_extremes_verify.py conformance/test_device_arrays.py \
      conformance/test_boundaries.py \
      --impl engine-cuda --require-gpu \
      -n "${JOBS:-8}" -q -p no:cacheprovider --report-dir "$OUT/logs/engine_cuda"
  run engine_cuda_equivalence timeout -k 30 "$LIMIT" "$PY" -m pytest conformance/test_engine_cuda.py \
      conformance/test_decode_ties.py --require-gpu \
      --require-tools -n 4 -q -p no:cacheprovider -rA --report-dir "$OUT/logs/engine_cuda_equivalence"
  grep -hE 'vs|bit-exact|acceptance|traffic' "$OUT/logs/engine_cuda_equivalence.log" | sed 's/^/  /' | tee -a "$OUT/summary.txt"
  run engine_numbers timeout -k 30 "$LIMIT" "$PY" -m tools.engine_numbers "$OUT/engine-numbers" --device cuda \
      --device cpu --repeat 1
}
for stage in "${STAGES[@]}"; do case $stage in
  engine_cuda) stage_engine_cuda ;;
  conformance) stage_conformance ;;
  mutants) stage_mutants ;;
  sanitizer) stage_sanitizer ;;
  check)  # conformance, mutants and sanitizer side by side (light on the GPU, heavy on the host's cores)
    JOBS=${JOBS:-6}
    stage_conformance & stage_mutants & stage_sanitizer & wait
    grep -qE ': rc=[1-9]' "$OUT/summary.txt" && status=1 ;;
  perf_build)  # the C++ builder (libkdtree_cpu.so) is a comparator: built first where missing (a bare runner);
    # 0.3 s per measurement keeps the stage near 5 minutes on an H200 (KDTREE_PERF_BUDGET_S overrides)
    engine_dir=${KDTREE_BUILD_DIR:-build}/engine  # where harness.tools looks for the library
    if [ ! -f "$engine_dir/libkdtree_cpu.so" ]; then
      run engine_configure cmake -S engine -B "$engine_dir" -DCMAKE_BUILD_TYPE=Release &&
        run engine_build cmake --build "$engine_dir" -j "$(nproc)" --target kdtree_cpu
    fi
    KDTREE_PERF_BUDGET_S=${KDTREE_PERF_BUDGET_S:-0.3} perf_run "$stage" "$OUT/perf-build.json" --perf-stage build \
        --require-gpu ;;
  perf_verify_h64|perf_verify_h128|perf_verify_sweep)
    perf_run "$stage" "$OUT/${stage/perf_/perf-}.json" --perf-stage "${stage#perf_}" --require-gpu ;;
  perf_draft_topk_bf16|perf_draft_topk_fp32)  # 144 shapes x (2 variants + 2-3 comparators): 0.1 s per measurement
    # to fit the window (about 6.5 min each on an H100); flashinfer.top_k where FlashInfer is importable
    # (PYTHONPATH=.peers/site, as below)
    KDTREE_PERF_BUDGET_S=${KDTREE_PERF_BUDGET_S:-0.1} perf_run "$stage" "$OUT/${stage/perf_/perf-}.json" \
        --perf-stage "${stage#perf_}" --require-gpu ;;
  perf_step)  # 18 shapes x (the step, its four ops alone, two users' rounds); the C++ builder row needs the engine's
    # library (build/engine/libkdtree_cpu.so, as perf_build makes it)
    KDTREE_PERF_BUDGET_S=${KDTREE_PERF_BUDGET_S:-0.3} perf_run "$stage" "$OUT/perf-step.json" --perf-stage step \
        --require-gpu ;;
  perf_verify_peers)  # 90 shapes x (kernel variants + 3 peers): 0.3 s per measurement to fit the window
    KDTREE_PERF_BUDGET_S=${KDTREE_PERF_BUDGET_S:-0.3} perf_run "$stage" "$OUT/perf-verify_peers.json" \
        --perf-stage verify_peers --require-gpu ;;
  gate)  # three reruns and one planted slowdown of the gate's cases; the gate must pass the rerun, fail the slowdown
    for r in a b c; do
      perf_run "gate_run_$r" "$OUT/gate-$r.json" --perf-stage gate --perf-no-comparators --require-gpu
    done
    perf_run gate_run_slow "$OUT/gate-slow.json" --perf-stage gate --perf-no-comparators --require-gpu \
        -p harness.kernel_mutants --kernel-mutant slow_tb_spin_10us
    "$PY" -m tools.perf_gate calibrate "$OUT/gate-a.json" "$OUT/gate-b.json" -o "$OUT/gate-calibration.json" \
        | tee -a "$OUT/summary.txt"
    "$PY" -m tools.perf_gate compare "$OUT/gate-a.json" "$OUT/gate-c.json" --calibration "$OUT/gate-calibration.json" \
        > "$OUT/logs/gate_rerun.txt" 2>&1; rc_rerun=$?
    "$PY" -m tools.perf_gate compare "$OUT/gate-a.json" "$OUT/gate-slow.json" --calibration "$OUT/gate-calibration.json" \
        > "$OUT/logs/gate_slow.txt" 2>&1; rc_slow=$?
    summary "gate: rerun rc=$rc_rerun (want 0): $(tail -1 "$OUT/logs/gate_rerun.txt")"
    summary "gate: planted slowdown rc=$rc_slow (want 1): $(tail -1 "$OUT/logs/gate_slow.txt")"
    [ "$rc_rerun" -eq 0 ] && [ "$rc_slow" -eq 1 ] || status=1 ;;
  gate_fallback)  # a selection that stops working stays exact (the replay takes over) and may not be slower: the
    # fallback rates are gated exactly; a rerun must give the same rates, the planted always-fallback build must fail
    for r in a b; do
      perf_run "gate_fallback_run_$r" "$OUT/gate-fallback-$r.json" --perf-stage gate_fallback --perf-no-comparators \
          --require-gpu
    done
    perf_run gate_fallback_run_planted "$OUT/gate-fallback-planted.json" --perf-stage gate_fallback \
        --perf-no-comparators --require-gpu -p harness.kernel_mutants --kernel-mutant slow_tb_always_fallback
    "$PY" -m tools.perf_gate compare "$OUT/gate-fallback-a.json" "$OUT/gate-fallback-b.json" --fallback-only \
        > "$OUT/logs/gate_fallback_rerun.txt" 2>&1; rc_rerun=$?
    "$PY" -m tools.perf_gate compare "$OUT/gate-fallback-a.json" "$OUT/gate-fallback-planted.json" --fallback-only \
        > "$OUT/logs/gate_fallback_planted.txt" 2>&1; rc_planted=$?
    summary "gate_fallback: rerun rc=$rc_rerun (want 0): $(tail -1 "$OUT/logs/gate_fallback_rerun.txt")"
    summary "gate_fallback: planted always-fallback rc=$rc_planted (want 1): $(tail -1 "$OUT/logs/gate_fallback_planted.txt")"
    grep -E 'FALLBACK RATE ROSE' "$OUT/logs/gate_fallback_planted.txt" | head -6 | sed 's/^/  /' | tee -a "$OUT/summary.txt"
    [ "$rc_rerun" -eq 0 ] && [ "$rc_planted" -eq 1 ] || status=1 ;;
  dt_dev)  # draft_topk designs side by side (each checked against the first's bits) and the knock-outs
    run dt_dev_time timeout -k 30 "$LIMIT" "$PY" -m lab.draft_topk_dev time ${KDTREE_PERF_QUICK:+--quick} --knockouts \
        --json "$OUT/dt-designs.json" ;;
  tb_dev)  # tree_build designs side by side, and how often the select variants replay (lab/PERF_NOTES.md)
    run tb_dev_fallbacks timeout -k 30 "$LIMIT" "$PY" -m lab.tree_build_dev fallbacks --json "$OUT/tb-fallbacks.json"
    run tb_dev_time timeout -k 30 "$LIMIT" "$PY" -m lab.tree_build_dev time ${KDTREE_PERF_QUICK:+--quick} \
        --json "$OUT/tb-designs.json" ;;
  baseline)  # the CI gate: this run's perf files against stored ones from the same kind of GPU
    if [ -z "${KDTREE_PERF_BASELINE:-}" ]; then summary "baseline: skipped (KDTREE_PERF_BASELINE not set)"; continue; fi
    cal=(); [ -f "$OUT/gate-calibration.json" ] && cal=(--calibration "$OUT/gate-calibration.json")
    for base in "$KDTREE_PERF_BASELINE"/perf-*.json; do
      [ -f "$base" ] && [ -f "$OUT/$(basename "$base")" ] || continue
      name=baseline_$(basename "$base" .json)
      "$PY" -m tools.perf_gate compare "$base" "$OUT/$(basename "$base")" "${cal[@]}" > "$OUT/logs/$name.txt" 2>&1
      rc=$?; summary "$name: rc=$rc; $(tail -1 "$OUT/logs/$name.txt")"; [ $rc -eq 0 ] || status=1
    done ;;
  report)
    files=("$OUT"/perf-*.json)
    if [ -f "${files[0]}" ]; then
      run report "$PY" -m tools.bench_report "${files[@]}" --out "$OUT/docs"
      summary "report: $OUT/docs/BENCHMARKS.md and $OUT/docs/benchmarks/*.png (copy both into docs/ to publish)"
    else summary "report: no perf-*.json in $OUT"; fi ;;
  scaling)  # one worker per GPU against the same workers all on the first GPU (needs 2+ GPUs)
    if [ "$NGPU" -lt 2 ]; then summary "scaling: skipped, $NGPU GPU(s)"; continue; fi
    for gpus in "0" "$(seq -s, 0 $((NGPU - 1)))"; do
      t0=$SECONDS
      KDTREE_GPUS=$gpus run "scaling_gpus_${gpus//,/_}" "$PY" -m pytest conformance --impl cuda --require-gpu -n "$NGPU" -q \
          -p no:cacheprovider --report-dir "$OUT/logs/scaling_${gpus//,/_}"
      summary "scaling: $NGPU workers on GPUs {$gpus}: $((SECONDS - t0)) s wall"
    done ;;
  *) summary "unknown stage: $stage"; status=2 ;;
esac; done
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs" "$OUT/.cache"
summary "outputs: $OUT/summary.txt, $OUT/perf-*.json, $OUT/gate-*.json, $OUT/docs/BENCHMARKS.md, $OUT/logs.tar.gz; status $status"
exit $status
