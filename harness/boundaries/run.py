"""Running a boundary case on an implementation: refused naming its argument with its check's words, or accepted
with the result the oracle gives; and what running it costs (skipped, with the reason, where it cannot run)."""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np
import pytest

import contract
from contract import InputError
from contract.trees import parents_from_links

from .core import ENGINE_FILE_LIMIT, Boundary, TooLarge


def _available_memory() -> int:
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def cost(op: str, args: dict) -> int:
    """Memory running a case takes beyond its arguments (the reference's and the oracle's work arrays)."""
    if op == "tree_verify":  # float64 keys of the longest request, a few copies
        return 12 * 576 * (int(np.max(args["prefix_lens"])) + np.shape(args["q"])[1])
    if op == "tree_build" and args.get("with_full_mask"):
        return 3 * contract.full_mask_bytes(np.asarray(args["prefix_lens"]), 1 + int(args["budget"]))
    return 0


def _file_bytes(op: str, args: dict) -> int:
    """The larger of the op file and its result file (a FULL_MASK result can be 2 GiB)."""
    given = sum(np.asarray(v).nbytes for v in args.values() if isinstance(v, np.ndarray))
    mask = cost(op, args) // 3 if op == "tree_build" else 0
    return max(given, mask)


def run_case(impl, case: Boundary, args: dict):
    """Call `impl` with the case's arguments: the engine straight through an op file wherever a file can
    carry them (its own checks, not the Python adapter's), everything else through its Python entry.
    Returns (result, the committed cache or None)."""
    from harness import engine
    from harness.cases import Case, run

    c = contract.OPS[case.op]
    if impl.kind.startswith("engine") and case.in_file:
        size = _file_bytes(case.op, args)
        if size > ENGINE_FILE_LIMIT:
            pytest.skip(
                f"the op file or its result would hold {size / 2**30:.1f} GiB (the engine's cases stop "
                f"at {ENGINE_FILE_LIMIT >> 20} MiB)"
            )
        out = engine.run_op(case.op, c.kdtr_inputs(args), device="cuda" if impl.kind == "engine-cuda" else "cpu")
        return c.result(**{n: out[n] for n in c.output_names}), out.get("kv_cache")
    got = run(impl, Case(case.op, args))
    return got, args.get("kv_cache")


def check(impl, case: Boundary) -> None:
    """Run one boundary case on `impl`: refused naming its argument with its check's words, or accepted with
    the result the oracle gives. Skips (with the reason) what cannot run here. A refusal of an accepted case (or
    a crash on it) fails the case's own clause; a wrong result fails the clause of the result's check."""
    from harness import verdict

    verdict.checked_only()
    try:
        args = case.make()
    except TooLarge as e:
        pytest.skip(str(e))
    need = 0 if case.refused_by else cost(case.op, args)
    if need > _available_memory() // 2:
        pytest.skip(
            f"needs about {need / 2**30:.1f} GiB of work memory, this machine has "
            f"{_available_memory() / 2**30:.1f} GiB available"
        )
    before = {k: (np.array(v) if isinstance(v, np.ndarray) and v.nbytes < 1 << 30 else v) for k, v in args.items()}
    if case.refused_by is not None:
        with verdict.clause(case.clause):
            try:
                run_case(impl, case, args)
            except InputError as e:
                msg = str(e)
                assert msg.startswith(f"{case.refused_by}: "), f"{case.id}: refused naming another: {msg}"
                assert re.search(case.words, msg), f"{case.id}: not its check's error: {msg}"
                return
            raise AssertionError(f"{case.id}: accepted, must be refused naming {case.refused_by}")
    with verdict.clause(case.clause):  # at the limit: accepted, without a crash
        got, committed = run_case(impl, case, args)
    EXPECT[case.op](case, before, got, committed)


def _expect_tree(case: Boundary, a: dict, got, _committed) -> None:
    """Every field against the brute-force oracle's tree and its layouts, each difference failing its clause;
    FULL_MASK request by request (it can be 2 GiB)."""
    from harness import tree_results
    from reference.tree_build import layouts

    lp, ids, roots, B = a["top_logp"], a["top_ids"], a["root_tokens"], int(a["budget"])
    prefix = a.get("prefix_lens")
    prefix = np.zeros(len(roots), np.int32) if prefix is None else prefix
    want = tree_results.oracle_tree(lp, ids, roots, B, prefix)  # without its FULL_MASK: compared below, in pieces
    full = np.asarray(got.full_mask)
    tree_results.check_tree(_without_full_mask(got), want, {"case": case.id})
    vis = layouts(want.parents, want.depths, want.n_nodes, prefix)[0]
    _expect_full_mask(full, vis, prefix, 1 + B, bool(a.get("with_full_mask")))


def _without_full_mask(got):
    """The result with an empty FULL_MASK (check_tree compares the rest; the mask is checked in pieces)."""
    fields = {f: getattr(got, f) for f in contract.Tree.FIELDS}
    fields["full_mask"] = np.zeros(0, bool)
    return contract.Tree(**fields)


def _expect_full_mask(got: np.ndarray, vis: np.ndarray, prefix: np.ndarray, D: int, asked: bool) -> None:
    """FULL_MASK (TB.3.4), request by request without building the expected layout (it can be 2 GiB): a
    [D, prefix_len + D] block of rows, every prefix column set, the tree columns the visibility's bits."""
    from contract.trees import unpack_visibility
    from harness.compare import assert_bit_exact
    from harness.verdict import expect

    if not asked:
        expect(got.shape == (0,), "TB.3.4", f"full_mask {got.shape} without with_full_mask")
        return
    sizes = D * (prefix.astype(np.int64) + D)
    expect(got.shape == (int(sizes.sum()),) and got.dtype == np.bool_, "TB.3.4", f"full_mask {got.dtype}{got.shape}")
    start = 0
    for b, n in enumerate(sizes):
        block = got[start : start + n].reshape(D, -1)
        start += int(n)
        P = int(prefix[b])
        expect(block[:, :P].all(), "TB.3.4", f"request {b}: a prefix column of full_mask is not set")
        assert_bit_exact(block[:, P:], unpack_visibility(vis[b], D), what=f"full_mask[{b}]", spec_id="TB.3.4")


_ORACLE: dict[str, Any] = {}


def _oracle(key: str, compute):
    """The last case's oracle, kept for the next implementation run on the same case in this process."""
    if key not in _ORACLE:
        _ORACLE.clear()
        _ORACLE[key] = compute()
    return _ORACLE[key]


def _expect_verify(case: Boundary, a: dict, got, _committed) -> None:
    """out and lse within the dtype's clauses of the float64 oracle, and the cosine check."""
    from harness.compare import assert_close, assert_cosine
    from harness.spec import clause
    from reference.tree_verify import tree_verify_float64

    dtype = a["q"].dtype
    o64, l64 = _oracle(case.id, lambda: tree_verify_float64(**a))
    oc, lc = ("TV.2.1", "TV.2.3") if dtype == np.float32 else ("TV.2.2", "TV.2.9")
    from harness.tree_results import check_verified_shapes

    check_verified_shapes(a["q"], got, oc, lc)
    assert_close(got.out.astype(np.float64), o64, what="out", spec_id=oc, **clause(oc).tolerance())
    assert_close(got.lse.astype(np.float64), l64, what="lse", spec_id=lc, **clause(lc).tolerance())
    for b in range(a["q"].shape[0]):
        assert_cosine(got.out[b].astype(np.float64), o64[b], what=f"out[{b}]", spec_id="TV.2.7")


def _expect_accept(case: Boundary, a: dict, got, committed) -> None:
    """The walk from the parents the links give (children in index order, the first matching one), and the
    commit as the spec's sequential copy."""
    from harness.compare import assert_bit_exact

    tok, tgt, L = a["tokens"], a["target_tokens"], int(a["max_depth"])
    par = parents_from_links(a["first_child"], a["next_sibling"])
    bs = tok.shape[0]
    path = np.full((bs, 1 + L), -1, np.int32)
    emitted = np.full((bs, 1 + L), -1, np.int32)
    n_acc = np.zeros(bs, np.int32)
    for b in range(bs):
        u, k = 0, 0
        path[b, 0] = 0
        while True:
            kids = [v for v in range(len(par[b])) if par[b, v] == u and tok[b, v] == tgt[b, u]]
            if not kids:
                break
            u, k = kids[0], k + 1
            path[b, k], emitted[b, k - 1] = u, tok[b, u]
        n_acc[b], emitted[b, k] = k, tgt[b, u]
    from harness import tree_results

    for b in range(bs):  # a wrong step fails the walk's clause it breaks, before the fields
        tree_results.check_walk(got, b, path[b, : n_acc[b] + 1].tolist(), par[b], tok[b], tgt[b])
    assert_bit_exact(got.accept_len, n_acc, what="accept_len", spec_id="TA.2.1")
    assert_bit_exact(got.accept_path, path, what="accept_path", spec_id="TA.2.3")
    assert_bit_exact(got.emitted, emitted, what="emitted", spec_id="TA.2.3")
    assert_bit_exact(got.bonus, tgt[np.arange(bs), path[np.arange(bs), n_acc]], what="bonus", spec_id="TA.2.3")
    pre = a.get("prefix_lens")
    n_got = np.asarray(got.accept_len)  # the length and the commit of its own walk (a wrong walk failed above)
    assert_bit_exact(
        got.new_lens, ((0 if pre is None else pre) + 1 + n_got).astype(np.int32), what="new_lens", spec_id="TA.3.3"
    )
    if pre is None:
        return
    tree_results.check_commit(committed, a["kv_cache"], a["block_table"], pre, np.asarray(got.accept_path), n_got)


def _expect_topk(case: Boundary, a: dict, got, _committed) -> None:
    """ids bit for bit and log-probs within DT.2.4 of the float64 oracle, and tree_build's TB.1.3 check."""
    from harness import topk

    topk.assert_matches_oracle(got, a["logits"], int(a["K"]), id_clause="DT.2.1", context={"case": case.id})


EXPECT = {
    "tree_build": _expect_tree,
    "tree_verify": _expect_verify,
    "tree_accept": _expect_accept,
    "draft_topk": _expect_topk,
}
