"""One slug per op in every layer (the guard against README/tree drift)."""

import pathlib

import pytest

from harness import tools
from harness.impls import OPS

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
    """The committed golden KDTR files are exactly what tools/gen_kdtr_corpus.py makes (make corpus)."""
    gen = tools.load_source("tools/gen_kdtr_corpus.py")
    for rel, data in gen.generate().items():
        p = ROOT / "kdtr" / "corpus" / rel
        assert p.is_file() and p.read_bytes() == data, f"kdtr/corpus/{rel} is stale: run `make corpus`"
