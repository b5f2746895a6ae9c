"""How a mutant's judging run ended, read from its pytest output: killed (a named test failed), survived (every
test passed), or not judged (the run itself broke: a collection error, a crash, no tests). A broken run kills
nothing, and must not be reported as a survival either: a judging once read "survived" for two mutants whose
runs had only failed to collect a file another test was deleting."""

import json
import pathlib
import re

import pytest

# The test that killed each mutant in the last recorded judging (label -> pytest node id; `python -m
# tools.mutant_killers REPORT.json ...` writes it from the reports' mutant tables). A judging runs that test before
# every other, so a mutant it still kills dies in seconds instead of after the minutes of passing tests before it
# (32-400 s a kernel mutant on an H100 with the ci profile, 2026-12-07). The verdict does not depend on the order: a
# mutant is killed when any selected test fails (-x only stops the run at the first), and a killer that no longer
# fails (or no longer exists) leaves the rest to run as before.
KILLERS = pathlib.Path(__file__).with_name("mutant_killers.json")


def verdict(returncode: int, stdout: str) -> dict:
    """The report's row for one judging run: `killed`, `by` (the first failing test) and `error` (why the run
    judged nothing; None when it did)."""
    killer = re.search(r"^FAILED (\S+)", stdout, re.M)
    if returncode == 1 and killer:
        return {"killed": True, "by": killer.group(1), "error": None}
    if returncode == 0:
        return {"killed": False, "by": None, "error": None}
    broke = re.search(r"^ERROR (.+)$", stdout, re.M)
    return {"killed": False, "by": None, "error": broke.group(1) if broke else f"pytest exited with {returncode}"}


def describe(name: str, row: dict) -> str:
    """One line for an assertion message: why the mutant was not killed."""
    if row["error"]:
        return f"mutant {name} was not judged: its run broke ({row['error']})"
    return f"mutant {name} survived"


def last_killer(label: str) -> str | None:
    """The node id of the test that killed mutant `label` when it was last judged (KILLERS), or None."""
    return json.loads(KILLERS.read_text()).get(label) if KILLERS.is_file() else None


def first_args(label: str, written: tuple[str, ...] = ()) -> list[str]:
    """The pytest arguments that run first the test that killed mutant `label` last time (KILLERS), then the tests
    `written` to kill it (for a mutant no judging has killed yet); [] when there are none."""
    first = list(dict.fromkeys(t for t in (last_killer(label), *written) if t))
    return ["-p", "harness.judging", *(a for t in first for a in ("--judge-first", t))] if first else []


def pytest_addoption(parser):
    parser.addoption("--judge-first", action="append", default=[], metavar="NODEID",
                     help="run this test before every other (the one that killed the mutant last time)")  # fmt: skip


@pytest.hookimpl(trylast=True)  # after any other plugin's order (harness.kernel_mutants puts the op's tests first)
def pytest_collection_modifyitems(config, items):
    first = config.getoption("--judge-first")
    if first:
        items.sort(key=lambda item: item.nodeid not in first)  # stable: the rest keep their order


def judge(
    request, name: str, pytest_args: list[str], description: str, env: dict | None = None, written: tuple[str, ...] = ()
) -> dict:
    """Run one mutant's judging (`python -m pytest *pytest_args` from the repository root, HYPOTHESIS_PROFILE=ci
    unless `env` says otherwise), give the report's mutant table its row (under `name`, with `description`) and
    fail the calling test unless the mutant was killed. The test that killed it last time (KILLERS) runs first,
    then the tests `written` to kill it (first_args). Returns the row (with `seconds`, the run's wall time, and
    `first`, the recorded killer run first or None)."""
    import os
    import subprocess
    import sys
    import time

    root = pathlib.Path(__file__).resolve().parent.parent
    env = {**os.environ, "HYPOTHESIS_PROFILE": "ci", **(env or {})}
    env.pop("PYTEST_XDIST_WORKER", None)  # the judging run is no xdist worker, whoever runs it
    killer = last_killer(name)
    cmd = [sys.executable, "-m", "pytest", *pytest_args, *first_args(name, written)]
    t0 = time.monotonic()
    out = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=900)
    # the judging's wall time: what a split of the mutants stage over time-limited runs is planned from
    row = {
        **verdict(out.returncode, out.stdout),
        "description": description,
        "seconds": round(time.monotonic() - t0, 1),
        "first": killer,
    }
    request.node.user_properties.append(("mutants", {name: row}))
    assert row["killed"], f"{describe(name, row)} ({description}): rc={out.returncode}\n{out.stdout[-3000:]}"
    return row
