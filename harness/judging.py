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
