"""Branch coverage of both KDTR readers under the KDTR tests, and the gate on it.

    python -m kdtr.coverage_gate     # from the repository root; `make kdtr-coverage` (and `make test`) run it

Runs conformance/test_kdtr*.py (without the timed fuzz and kill runs) once, with the Python reader under
coverage.py (branch mode) and the C++ tools built with clang source-based coverage, then:
- Python: kdtr/format.py (the reader) must have every line and both outcomes of every branch covered;
- C++: every function in kdtr/include/kdtr.hpp must have run and every branch condition in it (reader,
  sources, writer checks) must have been seen both true and false (llvm-cov counts each operand of &&
  and || on its own; a function that never runs has no branch counts, hence the function rule).
Both outcomes, not just "the line ran": a check whose failing side never runs can be wrong or
unreachable without any test noticing. Then the golden corpus alone (kdtr/corpus, every file with data
verification on and off, nothing else): every rejecting statement of a reader check (a `raise KdtrError`
in the Python reader's checks, a `return fail(...)` in the C++ reader's open_source and take_name) must be
taken by at least one file in each reader, so that no check is reached only by a unit test's injected
state. The exceptions are listed with their reason (E32: no file of 2^48 bytes can be made; E91: the
memory for the index copy cannot be taken away by a file). Other kdtr modules are reported, not gated.
Prints the numbers, writes reports/kdtr-coverage.txt, exits 1 when the gate fails (2 when a tool is missing).
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "coverage"
LLVM = {t: shutil.which(f"{t}-14") or shutil.which(t) for t in ("clang++", "llvm-profdata", "llvm-cov")}
GATED_PY = "kdtr/format.py"
HEADER = ROOT / "kdtr" / "include" / "kdtr.hpp"
# the package's own tools, not the container's code: left out of the coverage table
TOOLS_PY = ("kdtr/gen_corpus.py", "kdtr/fuzz.py", "kdtr/coverage_gate.py")


def run(cmd, **kw):
    """Run cmd from the repo root; stop with its output when it fails."""
    out = subprocess.run(cmd, cwd=ROOT, text=True, capture_output=True, **kw)
    if out.returncode != 0:
        sys.exit(f"kdtr-coverage: {' '.join(map(str, cmd))} failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    return out.stdout


def build() -> None:
    """kdtr-inspect and kdtr-test with -fprofile-instr-generate -fcoverage-mapping, under build/coverage/kdtr."""
    run(["cmake", "-S", "kdtr", "-B", OUT / "kdtr", "-DKDTR_COVERAGE=ON", f"-DCMAKE_CXX_COMPILER={LLVM['clang++']}"])
    run(["cmake", "--build", OUT / "kdtr", "-j", str(os.cpu_count() or 2), "--target", "kdtr-inspect", "kdtr-test"])


def run_tests() -> None:
    """The KDTR tests once: Python under coverage.py, the C++ tools writing raw profiles."""
    shutil.rmtree(OUT / "prof", ignore_errors=True)
    for f in OUT.glob(".coverage*"):
        f.unlink()
    env = dict(
        os.environ,
        KDTREE_BUILD_DIR=str(OUT),  # harness.tools picks the instrumented tools from here
        LLVM_PROFILE_FILE=str(OUT / "prof" / "kdtr-%4m.profraw"),  # a pool of 4 files merged online
        KDTREE_REQUIRE_TOOLS="1",
        # few examples, fixed seed: the gate must not depend on luck (the boundary cases and the golden
        # corpus reach every branch on their own; the full hypothesis runs are in the main suite)
        HYPOTHESIS_PROFILE="dev",
    )
    tests = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "conformance").glob("test_kdtr*.py"))
    cmd = [sys.executable, "-m", "coverage", "run", "--branch", "--source=kdtr", f"--data-file={OUT / '.coverage'}"]
    cmd += [f"--omit={','.join(str(ROOT / t) for t in TOOLS_PY)}"]
    cmd += ["-m", "pytest", *tests, "-m", "not slow", "-p", "no:xdist", "-q", "-p", "no:cacheprovider"]
    cmd += ["--hypothesis-seed=0", "--durations=5", "--report-dir", str(OUT / "report")]  # keep the suite's own report
    out = subprocess.run(cmd, cwd=ROOT, env=env, text=True, capture_output=True)
    if out.returncode != 0:
        sys.exit(f"kdtr-coverage: the KDTR tests failed under coverage:\n{out.stdout[-4000:]}{out.stderr[-2000:]}")


def python_report() -> tuple[list[str], bool]:
    """coverage.py's table for the kdtr package; ok when the reader module has nothing missing."""
    data = f"--data-file={OUT / '.coverage'}"
    table = run([sys.executable, "-m", "coverage", "report", data, "--show-missing", "--precision=1"])
    gate = subprocess.run(
        [sys.executable, "-m", "coverage", "report", data, f"--include={GATED_PY}", "--fail-under=100"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return table.splitlines(), gate.returncode == 0


_BRANCH = re.compile(r"Branch \((\d+):(\d+)\): \[True: ([\d.kMG]+), False: ([\d.kMG]+)\]")


def cpp_report() -> tuple[list[str], list[str], list[str], bool]:
    """llvm-cov's summary for kdtr.hpp, the branches that lack an outcome, the exempt ones; ok when none lack.

    A branch is exempt only where its source line says `coverage-exempt: why` (a system call failing in a
    way no test can provoke); the report lists each one with its reason.
    """
    merged = OUT / "kdtr.profdata"
    run([LLVM["llvm-profdata"], "merge", "-sparse", *sorted((OUT / "prof").glob("*.profraw")), "-o", merged])
    objects = [OUT / "kdtr" / "kdtr-inspect", "-object", OUT / "kdtr" / "kdtr-test"]
    common = [f"-instr-profile={merged}", *objects, HEADER]
    summary = run([LLVM["llvm-cov"], "report", "-show-branch-summary", *common]).splitlines()
    shown = run([LLVM["llvm-cov"], "show", "-show-branches=count", "-show-line-counts=false", *common])
    lines = HEADER.read_text().splitlines()
    missing, exempt, seen = [], [], set()
    for m in _BRANCH.finditer(shown):
        line, col, t, f = int(m[1]), int(m[2]), m[3], m[4]
        if (line, col) in seen:
            continue
        seen.add((line, col))
        if (t == "0" or f == "0") and "coverage-exempt:" in lines[line - 1]:
            exempt.append(f"kdtr.hpp:{line} {lines[line - 1].split('coverage-exempt:')[1].strip()}")
        elif t == "0" or f == "0":
            side = "never true" if t == "0" else "never false"
            missing.append(f"kdtr.hpp:{line}:{col} {side}: {lines[line - 1].strip()[:100]}")
    # a function never called has no branch counts at all: every function must have run as well
    totals = json.loads(run([LLVM["llvm-cov"], "export", "-summary-only", *common]))["data"][0]["totals"]
    uncalled = totals["functions"]["count"] - totals["functions"]["covered"]
    if uncalled:
        missing.append(f"{uncalled} function(s) of kdtr.hpp never called (llvm-cov report -show-functions)")
    return summary, missing, exempt, not missing and bool(seen)


# --- the corpus alone: every rejecting statement of a reader check taken by a golden file ------------------
CORPUS = ROOT / "kdtr" / "corpus"
READER_FUNCTIONS_PY = ("check_file_size", "_take_name", "_check_structure", "_check_data")
READER_FUNCTIONS_CPP = ("take_name", "open_source")
# rejections no file can cause, with why (codes as the readers write them)
NO_FILE_CAN = {
    "HOST_LIMIT": "E32: a file over 2^48 bytes cannot be made (kdtr-test and test_kdtr_files.py drive it)",
    "ALLOC": "E91: a file cannot make the index copy fail (its size is bounded by the limit and the file)",
}


def read_corpus(corpus: pathlib.Path) -> None:
    """Every corpus file through the Python reader, data verification on and off (run under coverage.py)."""
    import kdtr  # here, not at the top: the gate itself reads no KDTR file

    for path in sorted(corpus.rglob("*.kdtr")):
        for verify in (True, False):
            with contextlib.suppress(kdtr.KdtrError):
                kdtr.loads(path.read_bytes(), verify_data=verify)


def python_sites() -> list[tuple[int, str]]:
    """(line, code) of each `raise KdtrError(...)` in the Python reader's check functions."""
    tree = ast.parse((ROOT / GATED_PY).read_text())
    sites = []
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and fn.name in READER_FUNCTIONS_PY:
            for node in ast.walk(fn):
                call = node.exc if isinstance(node, ast.Raise) else None
                if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "KdtrError":
                    sites.append((node.lineno, ast.unparse(call.args[0]).removeprefix("Code.")))
    return sorted(sites)


def cpp_sites() -> list[tuple[int, int, str]]:
    """(line, column, code) of each `return fail(...)` in the C++ reader's check functions."""
    lines = HEADER.read_text().splitlines()
    sites, depth, inside = [], 0, False
    for n, text in enumerate(lines, start=1):
        if not inside and re.match(rf"inline Error ({'|'.join(READER_FUNCTIONS_CPP)})\(", text):
            inside, depth = True, 0
        if inside:
            for m in re.finditer(r"return fail\(([\w:.]+)", text):
                sites.append((n, m.start() + 1, m[1].removeprefix("Code::")))
            depth += text.count("{") - text.count("}")
            if depth == 0 and "}" in text:
                inside = False
    return sites


def corpus_python() -> list[tuple[str, bool]]:
    """(site description, taken) for every Python reader check, the corpus alone under coverage.py."""
    OUT.mkdir(parents=True, exist_ok=True)
    data = OUT / ".coverage-corpus"
    data.unlink(missing_ok=True)
    run(
        [
            sys.executable,
            "-m",
            "coverage",
            "run",
            f"--data-file={data}",
            "--source=kdtr",
            "-m",
            "kdtr.coverage_gate",
            "--read-corpus",
            CORPUS,
        ]
    )
    import coverage

    cov = coverage.CoverageData(basename=str(data))
    cov.read()
    executed = set(cov.lines(str(ROOT / GATED_PY)) or ())
    return [(f"{GATED_PY}:{line} {code}", line in executed) for line, code in python_sites()]


def _count_at(segments: list, line: int, col: int) -> int:
    """The execution count of the code region at (line, col), from llvm-cov's segments."""
    count = 0
    for seg_line, seg_col, seg_count, has_count, *_ in segments:
        if (seg_line, seg_col) > (line, col):
            break
        if has_count:
            count = seg_count
    return count


def corpus_cpp() -> list[tuple[str, bool]]:
    """(site description, taken) for every C++ reader check: the instrumented kdtr-inspect over the corpus
    alone, data verification on and off."""
    prof = OUT / "prof-corpus"
    shutil.rmtree(prof, ignore_errors=True)
    env = dict(os.environ, LLVM_PROFILE_FILE=str(prof / "corpus-%4m.profraw"))
    for path in sorted(CORPUS.rglob("*.kdtr")):
        for flags in ([], ["--no-verify"]):
            out = subprocess.run([OUT / "kdtr" / "kdtr-inspect", *flags, path], env=env, capture_output=True)
            if out.returncode not in (0, 1):
                sys.exit(f"kdtr-coverage: kdtr-inspect exited {out.returncode} on {path}")
    merged = OUT / "corpus.profdata"
    run([LLVM["llvm-profdata"], "merge", "-sparse", *sorted(prof.glob("*.profraw")), "-o", merged])
    exported = json.loads(run([LLVM["llvm-cov"], "export", f"-instr-profile={merged}", OUT / "kdtr" / "kdtr-inspect"]))
    segments = next(f["segments"] for f in exported["data"][0]["files"] if f["filename"] == str(HEADER))
    return [(f"kdtr.hpp:{line} {code}", _count_at(segments, line, col) > 0) for line, col, code in cpp_sites()]


def corpus_gate() -> tuple[list[str], bool]:
    """The report lines of the corpus gate and whether it passed."""
    lines, ok = [], True
    for reader, sites in (("Python", corpus_python()), ("C++", corpus_cpp())):
        exempt = [s for s, _ in sites if s.split()[-1] in NO_FILE_CAN]
        gated = [(s, t) for s, t in sites if s.split()[-1] not in NO_FILE_CAN]
        missing = [s for s, taken in gated if not taken]
        ok = ok and not missing and len(gated) > 0
        lines.append(
            f"{reader}: {len(gated) - len(missing)} of {len(gated)} rejecting statements taken by a corpus file"
        )
        lines += [f"  NEVER TAKEN: {s}" for s in missing]
        lines += [f"  no file can: {s} ({NO_FILE_CAN[s.split()[-1]]})" for s in exempt]
    return lines, ok


def main() -> int:
    """Build, run, report, gate."""
    absent = [t for t, p in LLVM.items() if p is None]
    if absent:
        print(f"kdtr-coverage: {', '.join(absent)} missing (clang-14 / llvm-14); run `make setup` as root")
        return 2
    build()
    run_tests()
    py_table, py_ok = python_report()
    cpp_summary, cpp_missing, cpp_exempt, cpp_ok = cpp_report()
    corpus_lines, corpus_ok = corpus_gate()
    report = ["KDTR reader branch coverage under conformance/test_kdtr*.py (not slow)", ""]
    report += ["Python (coverage.py, branch mode):", *py_table, ""]
    report += [f"gate: {GATED_PY} 100% of lines and branch outcomes: {'ok' if py_ok else 'FAILED'}", ""]
    report += ["C++ (clang source-based coverage, llvm-cov):", *cpp_summary, ""]
    report += [
        f"gate: every function of kdtr.hpp run, every branch seen true and false: {'ok' if cpp_ok else 'FAILED'}"
    ]
    report += [f"  {m}" for m in cpp_missing]
    report += [f"  exempt (one outcome, by design): {m}" for m in cpp_exempt]
    report += ["", f"The golden corpus alone ({CORPUS.relative_to(ROOT)}, verification on and off):", *corpus_lines]
    report += [f"gate: every rejecting statement of both readers taken by a file: {'ok' if corpus_ok else 'FAILED'}"]
    text = "\n".join(report) + "\n"
    print(text)
    (ROOT / "reports").mkdir(exist_ok=True)
    (ROOT / "reports" / "kdtr-coverage.txt").write_text(text)
    return 0 if py_ok and cpp_ok and corpus_ok else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--read-corpus"]:
        read_corpus(pathlib.Path(sys.argv[2]))
        sys.exit(0)
    sys.exit(main())
