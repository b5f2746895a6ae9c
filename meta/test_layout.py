"""One slug per op in every layer, and every path the README names exists (the guards against README/tree
drift)."""

import pathlib
import re

import pytest

from harness.impls import OPS
from kdtr import gen_corpus

ROOT = pathlib.Path(__file__).resolve().parent.parent
LAYERS = {
    "reference": "reference/{op}.py",
    "spec": "spec/{op}.md",
    "conformance": "conformance/test_{op}.py",
    "perf": "perf/bench_{op}.py",
}


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_every_op_has_every_layer(op, layer):
    assert (ROOT / LAYERS[layer].format(op=op)).is_file(), f"{LAYERS[layer].format(op=op)} is missing"


@pytest.mark.parametrize("op", ["tree_build", "tree_accept"])
def test_kernel_source_exists(op):
    assert (ROOT / "kernels_cu" / f"{op}.cu").is_file()


def test_kdtr_corpus_is_fresh():
    """The committed golden KDTR files are exactly what kdtr/gen_corpus.py makes (make corpus)."""
    for rel, data in gen_corpus.generate().items():
        p = ROOT / "kdtr" / "corpus" / rel
        assert p.is_file() and p.read_bytes() == data, f"kdtr/corpus/{rel} is stale: run `make corpus`"


# What the README names but a run makes (setup, make kdtr-coverage, a local pytest run): not in a fresh clone.
GENERATED = ("build/", ".venv/", "reports/conformance.", "reports/kdtr-coverage.txt", "reports/perf")


def readme_paths() -> list[str]:
    """The repository paths the README names in backticks: a first component that exists at the root, no
    placeholders (<arch>, *, $OUT, {md,json}), not a generated output; `pkg/module.attr` names pkg/module.py."""
    top = {p.name for p in ROOT.iterdir()}
    out = set()
    for t in re.findall(r"`([^`\s]+)`", (ROOT / "README.md").read_text()):
        t = t.rstrip(".,:;)")
        if t.split("/")[0] not in top or ("/" not in t and "." not in t):
            continue
        if re.search(r"[<>*{}$]", t) or t.startswith(GENERATED):
            continue
        out.add(t)
    return sorted(out)


def test_every_path_the_readme_names_exists():
    def exists(t):
        head, _, attr = t.rpartition(".")
        return (ROOT / t).exists() or (attr.isidentifier() and (ROOT / f"{head}.py").is_file())

    paths = readme_paths()
    assert len(paths) > 40, paths  # the README's folder map alone names more
    assert [t for t in paths if not exists(t)] == []
