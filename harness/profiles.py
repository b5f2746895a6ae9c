"""The suite's budget profiles, named by HYPOTHESIS_PROFILE (the report's header records the name).

- `quick` (`make conformance`'s default): 10 hypothesis examples per property (5 for tree_verify's heavy ones),
  the three fuzz smoke runs 10 s each, and the long cases (marked `full`: the largest context, batches of 1024,
  a 6 GiB file, mask isolation at every query, the two largest accepted boundary cases) run on GPU
  implementations only. Every clause keeps a test for every implementation
  (meta/test_profiles.py checks it); the report says the run was quick.
- `dev` (plain `pytest` without CI): 30 examples (10 for the heavy ones), fuzz 60 s, every case.
- `ci` (`make test`, .ci/run, tools/gpu_suite.sh, `make conformance PROFILE=ci`): 200 examples (40 for the
  heavy ones), derandomized, fuzz 60 s, every case.
- `thorough`: 2000 examples, every case.

Deadlines are off everywhere (the first GPU call pays for NVRTC and module load). KDTREE_FUZZ_SECONDS overrides
the fuzz runs' length in every profile.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

QUICK = "quick"
FULL_CASE = "quick profile: a long case, run here on GPU implementations only (make conformance PROFILE=ci runs it)"
FUZZ_SECONDS = {QUICK: 10}  # any other profile: 60


def register() -> None:
    # print_blob everywhere: a failure's report carries its @reproduce_failure line, a case to paste
    settings.register_profile(
        QUICK, max_examples=10, deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
    )
    settings.register_profile(
        "dev", max_examples=30, deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
    )
    settings.register_profile(
        "ci",
        settings.get_profile("ci"),
        max_examples=200,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    settings.register_profile(
        "thorough",
        max_examples=2000,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def load() -> str:
    """Register the profiles and load HYPOTHESIS_PROFILE's (default: ci when CI is set, else dev)."""
    register()
    name = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
    settings.load_profile(name)
    return name


def current() -> str:
    return settings._current_profile or "default"


def heavy_examples(n: int | None = None) -> int:
    """The examples of a property whose every example is costly: a fifth of the profile's, at least 10; in a
    profile of fewer than 20 (quick), half of its own."""
    n = settings().max_examples if n is None else n
    return max(min(10, n // 2), n // 5)


def fuzz_seconds(profile: str | None = None) -> int:
    """How long each fuzz smoke run lasts: KDTREE_FUZZ_SECONDS, else 10 s in the quick profile and 60 s in any other."""
    return int(os.environ.get("KDTREE_FUZZ_SECONDS") or FUZZ_SECONDS.get(profile or current(), 60))


def left_out(full: bool, on_gpu: bool, profile: str | None = None) -> str | None:
    """Why a test is skipped by the profile, or None: under quick, a `full` case on a CPU implementation (or of
    none: the engine's huge files) skips; GPU implementations run every case, since there it is quick."""
    if (profile or current()) == QUICK and full and not on_gpu:
        return FULL_CASE
    return None
