"""The layers point one way: the contract at the bottom imports no other project package; the references
import the contract (and their own numeric helpers), never each other, the kernels or the harness; the
kernels and the adapters of external implementations import the contract only, never the references or the
harness; the PyTorch operators (kdtree_torch) import the kernels, the contract and the adapter protocol. Checked
on the source's imports."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROJECT = {"contract", "reference", "kernels_cu", "harness", "kdtr", "engine", "tools", "perf", "conformance", "meta"}
PROJECT |= {"adapters", "lab", "kdtree_torch"}
OPS = ("tree_build", "tree_verify", "tree_accept", "draft_topk")

# package -> project packages it may import
ALLOWED = {
    "contract": {"contract"},
    "reference": {"contract", "reference", "kdtr"},  # the golden model's weights are a KDTR file
    "kernels_cu": {"contract", "kernels_cu"},
    "kdtr": {"kdtr"},
    "adapters": {"contract", "adapters"},  # external implementations sit beside the kernels: contract only
    # the kernels as PyTorch operators and their adapter: above the kernels, below the harness
    "kdtree_torch": {"contract", "kernels_cu", "adapters", "kdtree_torch"},
}


def imports(path: pathlib.Path) -> set[str]:
    """Project modules a file imports (absolute, and relative resolved against its package)."""
    pkg = path.parent.relative_to(ROOT).parts
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(pkg[: len(pkg) - node.level + 1])
                mod = f"{base}.{node.module}" if node.module else base
                out |= {mod} | {f"{mod}.{a.name}" for a in node.names}
            elif node.module:
                out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return {m for m in out if m.split(".")[0] in PROJECT}


FILES = [p for pkg in ALLOWED for p in sorted((ROOT / pkg).rglob("*.py"))]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_layer_direction(path):
    pkg = path.relative_to(ROOT).parts[0]
    bad = sorted(m for m in imports(path) if m.split(".")[0] not in ALLOWED[pkg])
    assert not bad, f"{path.relative_to(ROOT)} ({pkg}) imports {bad}: layers point one way ({ALLOWED[pkg]})"


@pytest.mark.parametrize("op", OPS)
def test_references_do_not_import_each_other(op):
    mods = imports(ROOT / "reference" / f"{op}.py")
    others = sorted(m for m in mods for o in OPS if o != op and m.startswith(f"reference.{o}"))
    assert not others, f"reference/{op}.py imports {others}: shared helpers live in contract/"


def test_the_checker_sees_imports():
    """The checker itself finds an import of the reference from a kernel module (so a pass means something)."""
    tree = ROOT / "kernels_cu" / "ops.py"
    assert "kernels_cu.specs" in imports(tree)
    fake = ROOT / "kernels_cu" / "_layer_probe_tmp.py"
    try:
        fake.write_text("from reference import tree_build\nfrom . import runtime\n")
        found = imports(fake)
    finally:
        fake.unlink()
    assert "reference" in found and "kernels_cu.runtime" in found
