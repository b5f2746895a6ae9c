"""How a mutant's judging run ended, read from its pytest output: killed (a named test failed), survived (every
test passed), or not judged (the run itself broke: a collection error, a crash, no tests). A broken run kills
nothing, and must not be reported as a survival either: a judging once read "survived" for two mutants whose
runs had only failed to collect a file another test was deleting."""

import re


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


def judge(request, name: str, pytest_args: list[str], description: str, env: dict | None = None) -> dict:
    """Run one mutant's judging (`python -m pytest *pytest_args` from the repository root, HYPOTHESIS_PROFILE=ci
    unless `env` says otherwise), give the report's mutant table its row (under `name`, with `description`) and
    fail the calling test unless the mutant was killed. Returns the row (with `seconds`, the run's wall time)."""
    import os
    import pathlib
    import subprocess
    import sys
    import time

    root = pathlib.Path(__file__).resolve().parent.parent
    env = {**os.environ, "HYPOTHESIS_PROFILE": "ci", **(env or {})}
    env.pop("PYTEST_XDIST_WORKER", None)  # the judging run is no xdist worker, whoever runs it
    cmd = [sys.executable, "-m", "pytest", *pytest_args]
    t0 = time.monotonic()
    out = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=900)
    # the judging's wall time: what a split of the mutants stage over time-limited runs is planned from
    row = {
        **verdict(out.returncode, out.stdout),
        "description": description,
        "seconds": round(time.monotonic() - t0, 1),
    }
    request.node.user_properties.append(("mutants", {name: row}))
    assert row["killed"], f"{describe(name, row)} ({description}): rc={out.returncode}\n{out.stdout[-3000:]}"
    return row
