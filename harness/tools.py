"""Locating the project's built executables (made by `make setup`: build/kdtr/...)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = pathlib.Path(os.environ.get("KDTR_BUILD_DIR", ROOT / "build"))
BINARIES = {
    "kdtr-inspect": BUILD / "kdtr" / "kdtr-inspect",
    "kdtr-test": BUILD / "kdtr" / "kdtr-test",
    "kdtr-fuzz": BUILD / "fuzz" / "kdtr-fuzz",
}


class ToolMissing(Exception):
    pass


def binary(name: str) -> pathlib.Path:
    """The built executable `name`, or ToolMissing saying how to build it."""
    p = BINARIES[name]
    if not p.is_file() or not os.access(p, os.X_OK):
        where = p.relative_to(ROOT) if p.is_relative_to(ROOT) else p
        raise ToolMissing(f"{name} is not built ({where}); run `make setup`")
    return p


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
