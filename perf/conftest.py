"""Fixtures of the perf suite (the options and the stage selection are in the root conftest)."""

import pytest

from harness import impls, timing
from harness.bench import ceilings as _ceilings
from harness.bench import peers


@pytest.fixture(scope="session")
def ceilings():
    """This run's measured copy and bf16 matrix rates (measured once, on first use by a GPU case)."""
    return _ceilings.Ceilings()


@pytest.fixture(scope="session")
def perf_policy():
    """Repetitions for one device measurement: 3 warm-ups, 5 to 200 repetitions, ~1 s (KDTREE_PERF_BUDGET_S)."""
    return timing.policy_from_env()


@pytest.fixture(scope="session")
def cpu_policy():
    """Repetitions for one CPU comparator: 1 warm-up, 3 to 50 repetitions, ~1 s (a call may take seconds)."""
    return timing.policy_from_env(warmup=1, min_reps=3, max_reps=50)


@pytest.fixture(scope="session")
def with_comparators(request):
    return not request.config.getoption("--perf-no-comparators")


@pytest.fixture(scope="session")
def impl(request):
    """An implementation named by --impl (the root conftest parametrizes it); the built-ins' own cases are
    the grid's, so this fixture serves the external ones (adapters.protocol)."""
    try:
        return impls.get(request.param)
    except impls.Unavailable as e:
        pytest.skip(str(e))


def pytest_benchmark_update_machine_info(config, machine_info):
    """The peers' package versions beside the project's (None where not installed)."""
    machine_info["peers"] = peers.versions()
