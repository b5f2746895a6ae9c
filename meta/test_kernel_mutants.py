"""Every deliberately broken kernel (harness/kernel_mutants.py) must fail the GPU conformance suite: the same
tests as the GPU suite's conformance stage (extremes, boundaries, fixtures and every clause), not only its op's."""

import pathlib
import re
import subprocess
import sys

import pytest

from harness import judging, kernel_mutants
from kernels_cu import runtime

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", sorted(kernel_mutants.MUTANTS) + sorted(kernel_mutants.SLOWDOWNS))
def test_mutant_patch_applies_and_compiles(name):
    """CPU-side half: the patch still matches the source and the broken (or slowed) kernel still compiles."""
    for spec in kernel_mutants.mutated_specs(name):
        assert runtime.compile_kernel(spec, spec.archs[0]).cubin


def test_mutants_run_what_the_conformance_stage_runs():
    """The GPU suite's conformance stage and the kernel-mutant stage select the same tests (the mutants' run
    narrowed to those that can run a kernel)."""
    script = (ROOT / "tools" / "gpu_suite.sh").read_text()
    stage = script[script.index("stage_conformance() {") : script.index("stage_mutants() {")]
    selected = re.search(r"\$\{CONFORMANCE_PATHS:-([^}]*)\}", stage).group(1).split()  # the stage's default paths
    assert selected == list(kernel_mutants.CONFORMANCE_PATHS), selected
    assert re.findall(r"--deselect (\S+)", stage) == list(kernel_mutants.CONFORMANCE_DESELECT)
    cmd = kernel_mutants.judging_command(sorted(kernel_mutants.MUTANTS)[0], "OUT")
    assert all(p in cmd for p in kernel_mutants.CONFORMANCE_PATHS) and "conformance/test_extremes.py" not in cmd
    assert cmd[cmd.index("-k") + 1] == "cuda or gpu"


def test_judging_runs_the_ops_own_tests_first(tmp_path):
    """The judging command collects the op's tests, then the fixtures and the device-array tests, then the rest."""
    name = "k_ta_last_match"
    cmd = [sys.executable, "-m", "pytest", *kernel_mutants.judging_command(name, tmp_path), "--collect-only"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    files = list(dict.fromkeys(re.findall(r"^(conformance/test_\w+\.py)::", out.stdout, re.M)))
    assert files[:4] == ["conformance/test_tree_accept.py", "conformance/test_fixtures.py",
                         "conformance/test_device_arrays.py", "conformance/test_boundaries.py"], (
        files, out.stdout[-2000:])  # fmt: skip
    # the test that killed the mutant last time (harness/judging.py) goes before even the op's own tests
    killer = re.search(r"^(conformance/test_boundaries\.py::\S+)$", out.stdout, re.M).group(1)
    cmd += ["-p", "harness.judging", "--judge-first", killer]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert re.search(r"^conformance/\S+", out.stdout, re.M).group(0) == killer, out.stdout[-2000:]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(kernel_mutants.MUTANTS))
def test_kernel_mutant_is_killed(name, request, tmp_path):
    judge(name, request, tmp_path)


TWINNED = sorted(n for n in kernel_mutants.MUTANTS if kernel_mutants.twin_variants(n))


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("name", TWINNED)
def test_kernel_mutant_is_killed_on_the_twins(name, request, tmp_path):
    """The same mutant with only its sm_120 twins (`_99k`) under test: they must kill it on their own (the
    twins whose machine code the patch changes; a patch of code no twin builds is not theirs to kill)."""
    if name in kernel_mutants.PLANNED_SCHEDULE_ONLY:
        pytest.skip(f"{name} patches the planned schedule, which only sm90a_planned runs: the twins never run it")
    twins = kernel_mutants.twins_changed(name)
    if not twins:
        pytest.skip(f"{name} leaves the machine code of {', '.join(kernel_mutants.twin_variants(name))} unchanged")
    judge(name, request, tmp_path, twins, label=f"{name}@99k")


@pytest.mark.parametrize("name,twin,changes", [("k_tb_lane_tie_first_lane", "heap_smem_99k", False),
                                               ("k_tb_ties_reversed", "heap_smem_99k", True)])  # fmt: skip
def test_twins_changed_reads_machine_code(name, twin, changes):
    """A mutant of lane_cached's pop leaves heap_smem's twin's code as it was; one of the tie order every
    build shares does not."""
    assert (twin in kernel_mutants.twins_changed(name)) == changes


@pytest.mark.parametrize("name", sorted(kernel_mutants.WRITTEN_TO_KILL))
def test_judging_runs_the_test_written_to_kill_first(name, tmp_path):
    """A mutant no judging has killed yet starts with the test written for it (WRITTEN_TO_KILL), which the
    judging's selection must hold: a node id that no longer exists would silently leave the old order."""
    written = kernel_mutants.WRITTEN_TO_KILL[name]
    cmd = [sys.executable, "-m", "pytest", *kernel_mutants.judging_command(name, tmp_path),
           *judging.first_args(name, written), "--collect-only"]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    collected = re.findall(r"^(conformance/\S+)$", out.stdout, re.M)
    first = [t for t in dict.fromkeys((judging.last_killer(name), *written)) if t]  # a recorded killer goes before
    assert collected[: len(first)] == first, (collected[:5], out.stdout[-2000:])


def test_planned_schedule_mutants_run_only_on_the_planned_variant():
    """The twins' judging skips the planned schedule's mutants because no twin runs that code: true only while
    the planned schedule is sm90a_planned's alone (no `_99k` twin is planned)."""
    from kernels_cu import specs

    assert kernel_mutants.PLANNED_SCHEDULE_ONLY
    assert [s.variant for s in specs.for_op("tree_verify") if "planned" in s.variant] == ["sm90a_planned"]


def test_twinned_mutants_are_the_twins_sources():
    """Every mutant of a source that a twin is built from is judged on the twins too (tree_build and the
    portable tree_verify, not sm90a)."""
    assert any(n.startswith("k_tb_") for n in TWINNED) and any(n.startswith("k_tv_") for n in TWINNED)
    assert not any(n.startswith("k_tv90_") for n in TWINNED)


def judge(name, request, tmp_path, variants=None, label=None):
    """Run the judging command; the report's mutant table gets a row (under `label`, default the name)."""
    slug = kernel_mutants.MUTANTS[name][0]
    description = f"CUDA {slug}" + (f" on {', '.join(variants)} alone" if variants else "")
    written = kernel_mutants.WRITTEN_TO_KILL.get(name, ()) if variants is None else ()  # written for the sm_90 builds
    judging.judge(request, label or name, kernel_mutants.judging_command(name, tmp_path, variants), description,
                  written=written)  # fmt: skip
