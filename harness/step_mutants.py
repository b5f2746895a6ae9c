"""Deliberately broken DDTree steps (kernels_cu/step.py): each replaces one named part of `Step`, so the step itself
carries no mutation switches. The advance's own mutant is a kernel patch (harness/kernel_mutants.py,
k_ta_advance_off_by_one: the advance lives in tree_accept's kernel).

A pytest plugin: `pytest -p harness.step_mutants --step-mutant NAME conformance/test_step.py` patches the step
before collection. meta/test_step_mutants.py runs the step's conformance tests against each one on a GPU and
requires a failure."""

from __future__ import annotations


def _stale_plan(Step):
    """tree_verify plans and attends over a copy of prefix_lens taken when the graph was made (a plan sized from a
    stale prefix length): every later round's verify reads the first round's lengths."""

    def stale(self):
        x = self.prefix_lens
        return x.clone() if hasattr(x, "clone") else x.copy()

    Step._verify_prefix_lens = stale


def _flag_cleared(Step):
    """The graph clears the shared error flag at the start of every round: a refused round stops only itself."""
    from kernels_cu.arrays import DeviceArray, check, driver

    calls = Step._round_calls

    def cleared(self):
        ptr, s = DeviceArray(self.error_flag, "error_flag").ptr, self.staging.g.stream.handle
        return [lambda: check(driver().cuMemsetD32Async(ptr, 0, 1, s)), *calls(self)]

    Step._round_calls = cleared


def _previous_logits(Step):
    """A round's inputs are written after its replay is enqueued: the replay reads the previous round's."""

    def late(self, **arrays):
        self.replay()
        self.write(**arrays)

    Step.round = late


MUTANTS = {
    "s_verify_plans_a_stale_prefix": _stale_plan,
    "s_flag_cleared_each_round": _flag_cleared,
    "s_replay_reads_the_previous_inputs": _previous_logits,
}


def apply(name: str) -> None:
    """Patch kernels_cu.step.Step with mutant `name`."""
    from kernels_cu import step

    MUTANTS[name](step.Step)


def pytest_addoption(parser):
    parser.addoption("--step-mutant", choices=sorted(MUTANTS), help="break kernels_cu.step.Step this way")


def pytest_configure(config):
    name = config.getoption("--step-mutant")
    if name:
        apply(name)
