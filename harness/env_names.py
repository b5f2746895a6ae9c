"""The project's environment variables, renamed from KDTR_* to KDTREE_* (issue 28, item 7).

KDTR is the container format (kdtr/, the "KDTR" magic, kdtr-inspect); the variables belong to the whole
project, so they are named after it: a reader can tell `KDTREE_CACHE_DIR` (an environment variable) from
`KDTR_TB_SELECT` (a kernel's preprocessor macro) and from the format. An old name still set would be ignored
without a word, so it is an error instead: the root conftest.py checks before any test runs, and the GPU scripts
(tools/gpu_suite.sh, tools/sm120_certify.sh) run `python -m harness.env_names` first and stop when it fails.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

# old name -> new name: every environment variable the project reads or documents
RENAMED: dict[str, str] = {
    "KDTR_BUILD_DIR": "KDTREE_BUILD_DIR",  # harness/tools.py: where the built tools are (default build/)
    "KDTR_CACHE_DIR": "KDTREE_CACHE_DIR",  # kernels_cu/runtime.py: the compiled-kernel cache
    "KDTR_DISABLE_CACHE": "KDTREE_DISABLE_CACHE",  # kernels_cu/runtime.py: bypass that cache
    "KDTR_DUMP": "KDTREE_DUMP",  # meta tests: where a pytest subprocess writes what it collected
    "KDTR_ENGINE_PREBUILT": "KDTREE_ENGINE_PREBUILT",  # tools/gpu_suite.sh engine_cuda: take build/engine as it is
    "KDTR_FUZZ_SECONDS": "KDTREE_FUZZ_SECONDS",  # harness/profiles.py: the fuzz smoke runs' length
    "KDTR_GPUS": "KDTREE_GPUS",  # harness/device.py: the GPUs the xdist workers get
    "KDTR_PERF_BASELINE": "KDTREE_PERF_BASELINE",  # tools/gpu_suite.sh baseline: the folder of stored perf files
    "KDTR_PERF_BUDGET_S": "KDTREE_PERF_BUDGET_S",  # harness/timing.py: the time per measurement
    "KDTR_PERF_NO_COMPARATORS": "KDTREE_PERF_NO_COMPARATORS",  # conftest.py: --perf-no-comparators
    "KDTR_PERF_QUICK": "KDTREE_PERF_QUICK",  # conftest.py: --perf-quick (and tools/gpu_suite.sh tb_dev)
    "KDTR_PERF_STAGE": "KDTREE_PERF_STAGE",  # conftest.py: --perf-stage
    "KDTR_PROBE_OUT": "KDTREE_PROBE_OUT",  # meta/test_xdist_gpus.py: where its workers write
    "KDTR_REQUIRE_GPU": "KDTREE_REQUIRE_GPU",  # conftest.py: --require-gpu
    "KDTR_REQUIRE_TOOLS": "KDTREE_REQUIRE_TOOLS",  # conftest.py: --require-tools
    "KDTR_STAGE_TIMEOUT": "KDTREE_STAGE_TIMEOUT",  # the GPU scripts: the limit per pytest run
}


class OldEnvironmentName(RuntimeError):
    """An environment variable is set under its old KDTR_ name."""


def stale(environ: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """(old, new) for each old name set in environ (default os.environ), sorted."""
    env = os.environ if environ is None else environ
    return [(old, new) for old, new in sorted(RENAMED.items()) if old in env]


def message(pairs: list[tuple[str, str]]) -> str:
    lines = [f"  {old} is set: it is now {new} (rename it; the old name is not read)" for old, new in pairs]
    return "environment variables under their old names (issue 28: KDTR_* became KDTREE_*):\n" + "\n".join(lines)


def check(environ: Mapping[str, str] | None = None) -> None:
    """Raise OldEnvironmentName naming every old name set and its new name."""
    pairs = stale(environ)
    if pairs:
        raise OldEnvironmentName(message(pairs))


def main() -> int:
    """`python -m harness.env_names`: exit 1 with the message on stderr when an old name is set."""
    try:
        check()
    except OldEnvironmentName as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
