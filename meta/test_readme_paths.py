"""The README and the tree agree (issue 28, item 5).

- Every repository path the README names exists: a token in backticks or a Markdown link target that looks like a
  path (contains a `/` or ends in a known file extension), unless it is a placeholder or glob (`<arch>`, `*`,
  `{md,json}`, `$OUT`), a run's output (`OUT/...`, `runs/`), a build output (`build/`, `.venv/`) or a local report
  that runs write and git ignores (`reports/conformance.*`). A path in a table row may be relative to a folder the
  row's first cell names (`include/kdtr.hpp` in the `kdtr/` row); a bare file name may be any tracked file's name.
  `pkg/module.attr` names pkg/module.py.
- The folder map (the README's table under "## Folder map") names every top-level folder git tracks, and every
  path in its first column exists (up to its first placeholder).
- The root holds only the project's own files (no stray `log` or scratch file).
- `reports/` holds, per device, only the runs that device's README names: `reports/README.md` (the rule and the
  index of removed runs) and one folder per device. A device folder holds a README.md, dated run folders
  (`YYYY-MM-DD`, a letter for a later session of the same day) each with its own README.md and no subfolders, and
  loose files (a perf JSON the docs were generated from); every dated run folder and every loose file is named in
  the device README, every device folder in `reports/README.md`, and no plot is kept under `reports/` (plots live
  once, in `docs/`).

The checkers are functions of text and file lists, so that the synthetic tests below show each of them failing.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
from collections.abc import Callable, Iterable

ROOT = pathlib.Path(__file__).resolve().parent.parent

EXTENSIONS = (".py", ".md", ".sh", ".cu", ".cuh", ".hpp", ".cpp", ".h", ".json", ".toml", ".ini", ".yml", ".yaml")
EXTENSIONS += (".txt", ".kdtr", ".png", ".cmake", ".cfg", ".dict", ".so", ".gz", ".log")
# what a build, a setup or a run makes: named by the README, not in a fresh clone
GENERATED = ("build/", ".venv", "runs/", "OUT/", ".peers/", "reports/conformance.", "reports/kdtr-coverage.txt")
GENERATED += ("reports/perf.json", "reports/perf-report")
GENERATED_NAMES = ("summary.txt", "libkdtree_cpu.so", "kdtree-engine")
PLACEHOLDER = re.compile(r"[<>*{}$()\[\]\"'=|]")
# the files the root may hold; anything else at the root is a stray (a `log`, a scratch script)
ROOT_FILES = {".gitignore", ".pre-commit-config.yaml", "Makefile", "README.md", "conftest.py", "pyproject.toml"}
ROOT_FILES |= {"pytest.ini"}
RUN_FOLDER = re.compile(r"\d{4}-\d{2}-\d{2}[a-z]?")


def _tokens(line: str) -> list[str]:
    found = re.findall(r"`([^`\s]+)`", line) + re.findall(r"\]\(([^)\s]+)\)", line)
    return [t.rstrip(".,:;") for t in found]


def looks_like_path(token: str) -> bool:
    if "://" in token or token.startswith(("-", "/", "#")) or PLACEHOLDER.search(token):
        return False
    return "/" in token or token.endswith(EXTENSIONS)


def _row_bases(line: str) -> list[str]:
    """The folders a table row's first cell names: paths in the row's other cells may be relative to them."""
    if not line.startswith("|"):
        return []
    first = line.split("|")[1]
    return [t.split("<")[0].rsplit("/", 1)[0] for t in _tokens(first) if "/" in t]


def _names_something(path: str, exists: Callable[[str], bool]) -> bool:
    """path exists, or it is `pkg/module.attr` and pkg/module.py exists."""
    head, _, attr = path.rpartition(".")
    return exists(path.rstrip("/")) or ("/" in head and attr.isidentifier() and exists(f"{head}.py"))


def missing_paths(text: str, exists: Callable[[str], bool], names: set[str]) -> list[str]:
    """The path-like tokens of text (README markdown) that name nothing: exists(relpath) says whether a repository
    path exists; names holds every tracked file's base name (a bare file name may be any of them)."""
    missing = []
    for line in text.splitlines():
        bases = _row_bases(line)
        for t in _tokens(line):
            if not looks_like_path(t) or t.startswith(GENERATED) or t in GENERATED_NAMES:
                continue
            if any(_names_something(c, exists) for c in [t] + [f"{b}/{t}" for b in bases]):
                continue
            if "/" not in t.rstrip("/") and t.rstrip("/") in names:
                continue
            missing.append(t)
    return sorted(set(missing))


def folder_map(text: str) -> list[str]:
    """The first-column paths of the table under '## Folder map'."""
    section = text.split("## Folder map", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [t for row in rows for t in _tokens(row.split("|")[1])]


def folder_map_problems(text: str, tracked_top_folders: Iterable[str], exists: Callable[[str], bool]) -> list[str]:
    """What the folder map misses (a tracked top-level folder no row names) or names wrongly (a path that does not
    exist, checked up to its first placeholder)."""
    paths = folder_map(text)
    problems = []
    for p in paths:
        fixed = re.split(r"[<*{]", p)[0]
        fixed = fixed if fixed.endswith("/") or fixed == p else fixed.rsplit("/", 1)[0] + "/"
        if not exists(fixed.rstrip("/") or "."):
            problems.append(f"the folder map names {p}, which does not exist")
    named = {p.split("/")[0] for p in paths}
    problems += [f"the folder map does not name {d}/" for d in sorted(tracked_top_folders) if d not in named]
    return problems


def reports_problems(tracked: Iterable[str], read: Callable[[str], str]) -> list[str]:
    """tracked: the repository's tracked paths; read(path): a tracked file's text. The module docstring's rule."""
    files = [p.split("/", 1)[1] for p in tracked if p.startswith("reports/")]
    problems = []
    devices = sorted({f.split("/")[0] for f in files if "/" in f})
    problems += [
        f"reports/{f} is a loose file (only README.md and device folders)"
        for f in files
        if "/" not in f and f != "README.md"
    ]
    problems += [f"reports/{f} is a plot: plots live in docs/" for f in files if f.endswith(".png")]
    if "README.md" not in files:
        return [*problems, "reports/README.md is missing"]
    index = read("reports/README.md")
    for device in devices:
        inside = [f.split("/", 1)[1] for f in files if f.startswith(device + "/")]
        if f"{device}/" not in index:
            problems.append(f"reports/README.md does not name the device folder {device}/")
        if "README.md" not in inside:
            problems.append(f"reports/{device}/README.md is missing")
            continue
        names = set(_tokens(read(f"reports/{device}/README.md")))
        names |= {n.rstrip("/") for n in names}
        for entry in sorted({f.split("/")[0] for f in inside} - {"README.md"}):
            kind = "run folder" if any(f.startswith(entry + "/") for f in inside) else "file"
            if kind == "run folder" and not RUN_FOLDER.fullmatch(entry):
                problems.append(f"reports/{device}/{entry}/ is not a dated run folder (YYYY-MM-DD[a-z])")
            elif entry not in names:
                problems.append(f"reports/{device}/{entry}: a {kind} its README does not name")
            if kind == "run folder":
                run = [f.split("/", 1)[1] for f in inside if f.startswith(entry + "/")]
                if "README.md" not in run:
                    problems.append(f"reports/{device}/{entry}/README.md is missing")
                problems += [f"reports/{device}/{entry}/{f}: a subfolder in a run" for f in run if "/" in f]
    return problems


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def _exists(rel: str) -> bool:
    return (ROOT / rel).exists()


# ---- the repository


def test_every_path_the_readme_names_exists():
    text = (ROOT / "README.md").read_text()
    named = [t for line in text.splitlines() for t in _tokens(line) if looks_like_path(t)]
    assert len(named) > 60, named  # the folder map alone names more
    assert missing_paths(text, _exists, {pathlib.PurePath(p).name for p in _tracked()}) == []


def test_the_folder_map_names_every_tracked_top_level_folder():
    top = {p.split("/")[0] for p in _tracked() if "/" in p}
    assert {"harness", "reports", "tools", ".github"} <= top
    assert folder_map_problems((ROOT / "README.md").read_text(), top, _exists) == []


def test_the_root_holds_only_the_projects_files():
    assert sorted(p for p in _tracked() if "/" not in p and p not in ROOT_FILES) == []


def test_reports_hold_the_runs_their_device_readme_names():
    tracked = _tracked()
    assert any(p.startswith("reports/h200/") for p in tracked)
    assert reports_problems(tracked, lambda p: (ROOT / p).read_text()) == []


# ---- the checkers on synthetic text: each one fails where it should


def test_missing_paths_finds_a_bogus_path_in_the_readme():
    text = (ROOT / "README.md").read_text()
    names = {pathlib.PurePath(p).name for p in _tracked()}
    bogus = text + "\nSee `harness/no_such_module.py`, [the notes](lab/NO_NOTES.md) and `no_such_file.json`.\n"
    assert missing_paths(bogus, _exists, names) == ["harness/no_such_module.py", "lab/NO_NOTES.md", "no_such_file.json"]


def test_missing_paths_on_synthetic_text():
    present = {"kdtr", "kdtr/include/kdtr.hpp", "harness/timing.py", "docs", "reports/h200"}
    text = "\n".join(
        [
            "| `kdtr/` | the C++ header `include/kdtr.hpp`, `include/nope.hpp` |",  # relative to the row's folder
            "`harness/timing.measure` `harness/timing.py` `docs/` `reports/h200/` `reports/h200-2026-12-04b`",
            "`spec/<op>.md` `OUT/summary.txt` `perf/baselines/<arch>/` `docs/benchmarks/*.png` `runs/` `build/x`",
            "`https://example.com/a.md` `--perf-quick` `KDTREE_CACHE_DIR` `pytest` `harness.kdtree_cpu` `timing.py`",
        ]
    )
    got = missing_paths(text, lambda p: p in present, {"timing.py"})
    assert got == ["include/nope.hpp", "reports/h200-2026-12-04b"]


def test_folder_map_problems_on_synthetic_text():
    text = "## Folder map\n\n| path | what |\n|---|---|\n| `spec/<op>.md` | clauses |\n| `gone/` | removed |\n"
    text += "| `tools/` | scripts |\n\n## Next\n\n| `elsewhere/` | not the map |\n"
    got = folder_map_problems(text, ["spec", "tools", "harness"], lambda p: p in {"spec", "tools"})
    assert got == ["the folder map names gone/, which does not exist", "the folder map does not name harness/"]
    assert folder_map_problems(text.replace("| `gone/` | removed |\n", ""), ["spec", "tools"], lambda p: True) == []


def test_reports_problems_on_synthetic_trees():
    readmes = {
        "reports/README.md": "- [`h200/`](h200/README.md)\n",
        "reports/h200/README.md": "| [`2026-12-05/`](2026-12-05/README.md) | latest |\n| `perf-build.json` | |\n",
    }
    good = [*readmes, "reports/h200/2026-12-05/README.md", "reports/h200/2026-12-05/conformance.md"]
    good += ["reports/h200/perf-build.json", "README.md"]
    assert reports_problems(good, readmes.__getitem__) == []
    bad = [
        *good,
        "reports/h200/2026-12-04/README.md",  # a run the device README does not name
        "reports/h200/2026-12-05/docs/benchmarks/a.png",  # a plot, in a subfolder of a run
        "reports/h200-2026-12-02/README.md",  # the old layout: a run folder as a device folder
        "reports/log",  # a loose file
    ]
    got = reports_problems(bad, lambda p: readmes.get(p, "# a run\n"))
    assert got == [
        "reports/log is a loose file (only README.md and device folders)",
        "reports/h200/2026-12-05/docs/benchmarks/a.png is a plot: plots live in docs/",
        "reports/h200/2026-12-04: a run folder its README does not name",
        "reports/h200/2026-12-05/docs/benchmarks/a.png: a subfolder in a run",
        "reports/README.md does not name the device folder h200-2026-12-02/",
    ]


def test_the_root_check_catches_a_stray_file():
    tracked = [*_tracked(), "log"]
    assert sorted(p for p in tracked if "/" not in p and p not in ROOT_FILES) == ["log"]
