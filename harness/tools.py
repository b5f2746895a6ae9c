"""Locating the project's built executables (made by `make setup`: build/kdtr/...)."""

from __future__ import annotations

import json
import os
import pathlib
import resource
import subprocess
import sys
from typing import NoReturn

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = pathlib.Path(os.environ.get("KDTREE_BUILD_DIR", ROOT / "build"))
BINARIES = {
    "kdtr-inspect": BUILD / "kdtr" / "kdtr-inspect",
    "kdtr-test": BUILD / "kdtr" / "kdtr-test",
    "kdtr-fuzz": BUILD / "fuzz" / "kdtr-fuzz",
    "kdtree-engine": BUILD / "engine" / "kdtree-engine",
    "kdtree-engine-fuzz": BUILD / "engine-fuzz" / "kdtree-engine-fuzz",
}
LIBRARIES = {"kdtree_cpu": BUILD / "engine" / "libkdtree_cpu.so"}


class ToolMissing(Exception):
    pass


def binary(name: str) -> pathlib.Path:
    """The built executable `name`, or ToolMissing saying how to build it."""
    p = BINARIES[name]
    if not p.is_file() or not os.access(p, os.X_OK):
        where = p.relative_to(ROOT) if p.is_relative_to(ROOT) else p
        raise ToolMissing(f"{name} is not built ({where}); run `make setup`")
    return p


def library(name: str) -> pathlib.Path:
    """Path of a built shared library (ToolMissing when `make setup` has not built it)."""
    p = LIBRARIES[name]
    if not p.is_file():
        where = p.relative_to(ROOT) if p.is_relative_to(ROOT) else p
        raise ToolMissing(f"lib{name}.so is not built ({where}); run `make setup`")
    return p


def missing(config, why: str) -> NoReturn:
    """A project tool (a build, a package, NVRTC) a test needs is missing: a failure under --require-tools
    (CI and the GPU runners), else a skip saying why."""
    import pytest

    (pytest.fail if config.getoption("--require-tools") else pytest.skip)(why)
    raise AssertionError("unreachable")  # pytest.fail and pytest.skip raise


def required_binary(config, name: str) -> pathlib.Path:
    """binary(name) for a test: missing() when it is not built."""
    try:
        return binary(name)
    except ToolMissing as e:
        missing(config, str(e))


def required_library(config, name: str) -> pathlib.Path:
    """library(name) for a test: missing() when it is not built."""
    try:
        return library(name)
    except ToolMissing as e:
        missing(config, str(e))


# libFuzzer's memory budget per run of a fuzz target (its default -rss_limit_mb).
FUZZ_MEMORY_MB = 2048


def fuzz_memory_flags() -> list[str]:
    """libFuzzer flags for a fuzz run started from this process. Linux keeps ru_maxrss across execve and
    subprocess starts children with vfork, so a fuzzer started from a test worker that once held gigabytes
    reports that peak as its own RSS from the first input on (a spurious out-of-memory). Its RSS limit
    therefore counts from this process's peak, and a single allocation over FUZZ_MEMORY_MB still fails."""
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024  # KiB on Linux
    return [f"-rss_limit_mb={peak_mb + FUZZ_MEMORY_MB}", f"-malloc_limit_mb={FUZZ_MEMORY_MB}"]


# A fork from a test worker would start with the worker's own high-water mark (Linux keeps ru_maxrss across
# exec), so a minimal interpreter forks the command, limits its address space if asked, and reports the
# command's peak alone (wait4).
_LAUNCHER = (
    "import os, resource, sys\n"
    "limit = int(sys.argv[1])\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    if limit:\n        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
    "    os.execv(sys.argv[2], sys.argv[2:])\n"
    "_, status, usage = os.wait4(pid, 0)\n"
    "sys.stderr.write(f'\\nmaxrss_kib={usage.ru_maxrss}\\n')\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def run_measured(
    cmd: list[str],
    *,
    address_space: int | None = None,
    timeout: float = 60,
    input: str | None = None,
    cwd: str | os.PathLike | None = None,
) -> tuple[subprocess.CompletedProcess, int]:
    """Run `cmd` (an executable path and its arguments) from `cwd`, optionally under an address-space limit
    (RLIMIT_AS, bytes); returns the finished process (text output, the peak line removed from stderr) and the
    command's own peak RSS in bytes. subprocess.TimeoutExpired when it runs past `timeout` seconds."""
    out = subprocess.run(
        [sys.executable, "-S", "-c", _LAUNCHER, str(address_space or 0), *map(str, cmd)],
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
        cwd=cwd,
    )
    err, _, kib = out.stderr.rpartition("\nmaxrss_kib=")
    out.stderr = err
    return out, int(kib) * 1024


def inspect(path, *, verify: bool = True, rewrite=None) -> dict:
    """Run kdtr-inspect and return its JSON (`ok` true with the content, or false with `code`)."""
    cmd = [str(binary("kdtr-inspect")), str(path)]
    if not verify:
        cmd.append("--no-verify")
    if rewrite is not None:
        cmd += ["--rewrite", str(rewrite)]
    out = subprocess.run(cmd, capture_output=True, timeout=60)
    if out.returncode not in (0, 1):
        raise RuntimeError(f"kdtr-inspect exited {out.returncode} on {path}: {out.stderr.decode(errors='replace')}")
    return json.loads(out.stdout)
