"""Every deliberately broken step (harness/step_mutants.py) must fail the step's conformance tests on a GPU."""

import pytest

from harness import judging, step_mutants

# the step with tree_accept's kernel variant (its other ops run the step's defaults)
IMPL = "cuda:pointer_jump"


def judging_command(name: str) -> list[str]:
    return ["-p", "harness.step_mutants", "--step-mutant", name, "conformance/test_step.py", "--impl", IMPL,
            "--require-gpu", "-x", "-q", "-p", "no:xdist", "-p", "no:cacheprovider"]  # fmt: skip


@pytest.mark.parametrize("name", sorted(step_mutants.MUTANTS))
def test_step_mutant_replaces_a_part_of_the_step(name, monkeypatch):
    """CPU-side half: the part each mutant replaces still exists, and the mutant changes it."""
    from kernels_cu import step

    before = dict(vars(step.Step))
    for attr in ("_verify_prefix_lens", "_round_calls", "round"):
        monkeypatch.setattr(step.Step, attr, before[attr])  # restored after the test
    step_mutants.apply(name)
    changed = [k for k in ("_verify_prefix_lens", "_round_calls", "round") if vars(step.Step)[k] is not before[k]]
    assert len(changed) == 1, changed


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(step_mutants.MUTANTS))
def test_step_mutant_is_killed(name, request):
    judging.judge(request, name, judging_command(name), "the step (kernels_cu/step.py)")
