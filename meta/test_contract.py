"""The contract layer: limits written once and reaching the CUDA side, one validate() per op, the KDTR
names, and every implementation's signature equal to its contract's."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pathlib

import numpy as np
import pytest

import contract
from contract import gen_limits_header as gen
from contract import limits

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_limits_header_is_generated_from_the_contract():
    assert gen.HEADER.read_text() == gen.render(), "kernels_cu/contract_limits.cuh is stale: run `make limits`"
    for name, value in limits.ALL.items():
        assert f"#define CONTRACT_{name} {value}" in gen.render()


def test_no_limit_is_restated_in_the_kernels():
    """The kernels get every limit from the generated header: no other #define of a CONTRACT_MAX_ name."""
    for path in (ROOT / "kernels_cu").glob("*.cu*"):
        if path.name == "contract_limits.cuh":
            continue
        for line in path.read_text().splitlines():
            assert not line.strip().startswith("#define CONTRACT_MAX_"), f"{path.name} restates a limit: {line}"


def test_limits_are_consistent():
    assert limits.MAX_TREE == 1 + limits.MAX_BUDGET
    assert limits.HEAD_DIM == limits.LATENT + limits.ROPE == 576
    assert limits.MAX_CONTEXT + limits.MAX_TREE < 2**31  # positions and page arithmetic fit int32
    assert limits.MAX_TOPK <= 1 << 10  # tree_build packs ranks in 10 bits (static_assert in tree_build.cuh)


@pytest.mark.parametrize("module,op", [(f"reference.{op}", op) for op in contract.OPS])
def test_reference_signature_is_the_contract(module, op):
    fn = getattr(importlib.import_module(module), op)
    assert inspect.signature(fn) == contract.OPS[op].signature()
    assert "Contract (" in fn.__doc__ and "Limits:" in fn.__doc__, "help() shows the contract"


@pytest.mark.parametrize("op", list(contract.OPS))
def test_cuda_signature_is_the_contract(op):
    from kernels_cu import ops, specs

    for spec in specs.for_op(op):
        fn = ops.function(op, spec.variant)
        assert inspect.signature(fn) == contract.OPS[op].signature()
        assert spec.variant in fn.__doc__ and "Limits:" in fn.__doc__


def test_implements_refuses_a_wrong_signature():
    with pytest.raises(TypeError, match="does not match the tree_build contract"):

        @contract.TREE_BUILD.implements
        def tree_build(top_logp, top_ids, root_tokens, budget):  # prefix_lens and with_full_mask missing
            pass


@pytest.mark.parametrize("op", list(contract.OPS))
def test_kdtr_names_round_trip(op):
    """Inputs written as KDTR tensors (scalars rank 0) read back as the same arguments."""
    c = contract.OPS[op]
    named = {}
    for a in c.args:
        if a.kind == "array":
            named[a.name] = np.zeros([2] * len(a.shape), np.dtype(a.dtypes[0]) if a.dtypes[0] != "bfloat16" else None)
        elif a.kind == "int":
            named[a.name] = 3
        elif a.kind == "real":
            named[a.name] = 0.25
        else:
            named[a.name] = True
    tensors = c.kdtr_inputs(named)
    assert set(tensors) == set(c.arg_names)
    for a in c.args:
        if a.kind != "array":
            assert tensors[a.name].ndim == 0, f"{a.name}: scalars are rank-0 tensors"
    back = c.args_from_kdtr(tensors)
    assert back.keys() == named.keys()
    for k, v in named.items():
        assert np.array_equal(np.asarray(back[k]), np.asarray(v)) and type(back[k]) is type(v)


def test_validate_is_the_only_input_check():
    """No module outside contract/ raises InputError by hand or defines its own fail() helper, except the
    checks that only the CUDA layer can make: device arrays (library, contiguity, alignment) and a kernel's
    own tuning knobs (tree_verify's split_chunk)."""
    allowed = {"kernels_cu/arrays.py", "kernels_cu/tree_verify_ops.py"}
    for pkg in ("reference", "kernels_cu", "harness"):
        for path in (ROOT / pkg).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            text = path.read_text()
            if rel not in allowed:
                assert "raise InputError" not in text and "def fail(" not in text, f"{rel} checks inputs itself"
