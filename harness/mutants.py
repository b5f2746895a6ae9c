"""Deliberately broken variants of the references: the conformance suite must catch every one.

A pytest plugin: `pytest -p harness.mutants --mutant NAME conformance/...` patches the reference before
collection. meta/test_mutants.py runs the op's conformance tests against each mutant in a subprocess and
requires a failure. Mutants either replace one named arithmetic step of a reference or wrap the public
function and corrupt one output, so the references themselves carry no mutation switches.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

import contract.op
from contract import BF16, DRAFT_TOPK, TREE_VERIFY, Verified, limits, paged
from reference import draft_topk as dt
from reference import tree_accept as ta
from reference import tree_build as tb
from reference import tree_verify as tv


def _wrap(module, name, post):
    """Replace module.name by a wrapper that post-processes its result."""
    orig = getattr(module, name)

    @functools.wraps(orig)
    def wrapped(*a, **k):
        return post(orig(*a, **k), *a, **k)

    setattr(module, name, wrapped)


def _set(module, name, value):
    setattr(module, name, value)


def _relink_descending(t, *a, **k):
    bs, _D = t.parents.shape
    t.first_child[:] = -1
    t.next_sibling[:] = -1
    for b in range(bs):
        for i in range(1, int(t.n_nodes[b])):  # prepend in ascending index: LIFO (descending) sibling order
            p = t.parents[b, i]
            t.next_sibling[b, i] = t.first_child[b, p]
            t.first_child[b, p] = i
    return t


def _mask_parent_only(t, *a, **k):
    bs, _D, W = t.visibility.shape
    for b in range(bs):
        for i in range(1, int(t.n_nodes[b])):
            row = np.zeros(W, np.uint32)
            for j in (i, int(t.parents[b, i])):
                row[j // 32] |= np.uint32(1 << (j % 32))
            t.visibility[b, i] = row
    return t


def _clear_self_bits(t, *a, **k):
    _bs, D, _W = t.visibility.shape
    for i in range(1, D):
        t.visibility[:, i, i // 32] &= ~np.uint32(1 << (i % 32))
    return t


def _bit_reverse(t, *a, **k):
    v = t.visibility
    t.visibility[:] = (
        np.unpackbits(v.view(np.uint8), bitorder="little")
        .reshape(v.shape + (32,))[..., ::-1]
        .reshape(-1, 32)
        .dot(1 << np.arange(32, dtype=np.uint64))
        .astype(np.uint32)
        .reshape(v.shape)
        if v.size
        else v
    )
    return t


def _pads_visible_to_root(t, *a, **k):
    for b in range(t.parents.shape[0]):
        for i in range(int(t.n_nodes[b]), t.parents.shape[1]):
            t.visibility[b, 0, i // 32] |= np.uint32(1 << (i % 32))
    return t


def _positions_plus_one(t, *a, **k):
    t.positions += 1
    return t


_counter = iter(range(1 << 62))


def _commit_decreasing(kv_cache, block_table, prefix_lens, accept):
    ps = kv_cache.shape[1]
    for b in range(len(prefix_lens)):
        P = int(prefix_lens[b])
        for j in range(int(accept.accept_len[b]), 0, -1):
            s, d = P + int(accept.accept_path[b, j]), P + j
            kv_cache[block_table[b, d // ps], d % ps] = kv_cache[block_table[b, s // ps], s % ps]


def _matching_child_last(tokens_b, fc_b, ns_b, u, want):
    c, found = fc_b[u], -1
    while c != -1:
        if tokens_b[c] == want:
            found = int(c)
        c = ns_b[c]
    return found


def _bonus_from_parent(acc, tokens, fc, ns, target, max_depth, **k):
    for b in range(len(acc.accept_len)):
        n = int(acc.accept_len[b])
        if n:
            acc.bonus[b] = target[b, acc.accept_path[b, n - 1]]
            acc.emitted[b, n] = acc.bonus[b]
    return acc


def _leaky_visibility(orig):
    def unpack(vis, D):
        # every query also sees the tree row after itself (an invisible row leaks in)
        bits = orig(vis, D).copy()
        i = np.arange(D - 1)
        bits[..., i, i + 1] = True
        return bits

    return unpack


def _scale_changed(change):
    """tree_verify called with softmax_scale replaced by change(softmax_scale), whatever the call's form."""
    orig = tv.tree_verify

    def mutated(*a, **k):
        named = TREE_VERIFY.bind(*a, **k)
        named["softmax_scale"] = change(named["softmax_scale"])
        return orig(**named)

    return mutated


# --- the contract's checks moved off their edge (conformance/test_boundaries.py must catch each) -----------
def _pages_off_by_one(orig):
    def check_pages(kv_shape, block_table, prefix_lens, rows):
        return orig((kv_shape[0] + 1, *kv_shape[1:]), block_table, prefix_lens, rows)  # page num_pages passes

    return check_pages


def _context_strict(prefix_lens, rows, what):
    if (prefix_lens.astype(np.int64) + rows >= limits.MAX_CONTEXT).any():  # the limit itself refused
        contract.checks.fail("prefix_lens", f"prefix + {rows} {what} exceeds the context limit {limits.MAX_CONTEXT}")


def _dtype_agreement_one_way(orig):
    def check_array(self, a, v, dims, values=True, host=False):
        if a.name == "kv_cache" and dims.get("T") == BF16:  # a bf16 q takes either cache dtype
            dims = {k: d for k, d in dims.items() if k != "T"}
        return orig(self, a, v, dims, values, host)

    return check_array


def _symbol_check_hi_plus_one(orig):
    """The range check of every symbol one too wide at the top (the symbols themselves, which the boundary
    cases are made from, unchanged)."""

    def symbol(self, name):
        s = orig(self, name)
        return dataclasses.replace(s, hi=s.hi + 1)

    return symbol


def _integer_hi_plus_one(orig, arg):
    def integer(name, v, lo, hi):
        return orig(name, v, lo, hi + 1 if name == arg else hi)

    return integer


# --- draft_topk -------------------------------------------------------------------------------------------------
def _ranked_higher_id_first(x, K):
    """Ties broken by the higher token id (a descending sort of the reversed row)."""
    V = len(x)
    return (V - 1 - np.argsort(-x[::-1], kind="stable"))[:K]


def _ranked_kth_tie_by_arrival(x, K):
    """Everything above the K-th logit, then the K-th place's ties in the order a 32-lane strided scan meets
    them (lane v % 32 first, then v // 32), as a parallel selection that keeps whichever tied token arrives
    first; the chosen K sorted by (logit descending, id ascending) afterwards."""
    order = np.argsort(-x, kind="stable")
    kth = x[order[K - 1]]
    above = order[: int((x > kth).sum())]
    tied = np.flatnonzero(x == kth)
    arrived = tied[np.lexsort((tied // 32, tied % 32))]
    chosen = np.concatenate([above, arrived[: K - len(above)]])
    return chosen[np.lexsort((chosen, -x[chosen]))]


def _lse_truncated(orig):
    def row_lse(x):  # the row's last logit left out of the max and the sum (a dropped tail block)
        return orig(x[:-1]) if len(x) > 1 else orig(x)

    return row_lse


def _neg_inf_as_lowest(orig):
    def topk_row(x, K):  # -inf read as the lowest finite float32 value: a masked token is counted as a value
        return orig(np.where(x == -np.inf, -float(np.finfo(np.float32).max), x), K)

    return topk_row


def _check_lets_through(value):
    """draft_topk's contract check with `value` (NaN or +inf) replaced by 0 before it looks: let through."""
    orig = DRAFT_TOPK.check_values

    def check_values(a, dims):
        x = a["logits"].astype(np.float64)
        hide = np.isnan(x) if value != value else (x == value)
        return orig({**a, "logits": np.where(hide, 0.0, x)}, dims)

    object.__setattr__(DRAFT_TOPK, "check_values", check_values)


MUTANTS = {
    # tree_build: algorithm
    "tb_ties_reversed": (
        "tree_build",
        "rank tuples compared in descending order",
        lambda: _set(tb, "heap_key", lambda s, r: (-s, tuple(-x for x in r))),
    ),
    "tb_ties_insertion_order": (
        "tree_build",
        "ties broken by insertion order (FIFO)",
        lambda: _set(tb, "heap_key", lambda s, r: (-s, next(_counter))),
    ),
    "tb_float32_scores": (
        "tree_build",
        "scores accumulated in float32",
        lambda: (
            _set(tb, "child_score", lambda s, c: float(np.float32(s) + np.float32(c))),
            _set(tb, "sibling_score", lambda s, a, b: float((np.float32(s) - np.float32(a)) + np.float32(b))),
        ),
    ),
    "tb_reassociated_sibling": (
        "tree_build",
        "sibling score s + (lp[r+1] - lp[r]) instead of (s - lp[r]) + lp[r+1]",
        lambda: _set(tb, "sibling_score", lambda s, a, b: s + (float(b) - float(a))),
    ),
    "tb_first_score_plus_zero": (
        "tree_build",
        "first score 0.0 + lp[0][0] (loses -0.0)",
        lambda: _set(tb, "first_score", lambda x: 0.0 + float(x)),
    ),
    "tb_inf_candidates_popped": (
        "tree_build",
        "-inf candidates pushed and popped",
        lambda: _set(tb, "selectable", lambda s: True),
    ),
    "tb_budget_counts_root": (
        "tree_build",
        "B - 1 pops (root counted in the budget)",
        lambda: _set(tb, "build_one", (lambda o: lambda lp, ids, B: o(lp, ids, max(B - 1, 0)))(tb.build_one)),
    ),
    # tree_build: layouts
    "tb_positions_off_by_one": (
        "tree_build",
        "positions = prefix + depth + 1",
        lambda: _wrap(tb, "tree_build", _positions_plus_one),
    ),
    "tb_mask_without_self": (
        "tree_build",
        "visibility rows miss their own bit",
        lambda: _wrap(tb, "tree_build", _clear_self_bits),
    ),
    "tb_mask_parent_only": (
        "tree_build",
        "visibility = parent and self only",
        lambda: _wrap(tb, "tree_build", _mask_parent_only),
    ),
    "tb_big_endian_bits": (
        "tree_build",
        "bit order reversed within each word",
        lambda: _wrap(tb, "tree_build", _bit_reverse),
    ),
    "tb_siblings_descending": (
        "tree_build",
        "siblings linked in descending index (prepend)",
        lambda: _wrap(tb, "tree_build", _relink_descending),
    ),
    "tb_pad_rows_visible": (
        "tree_build",
        "pad slots visible to the root",
        lambda: _wrap(tb, "tree_build", _pads_visible_to_root),
    ),
    # tree_verify
    "tv_wrong_scale": (
        "tree_verify",
        "1/sqrt(576) instead of the given softmax_scale",
        lambda: _set(tv, "tree_verify", _scale_changed(lambda s: 576**-0.5)),
    ),
    "tv_scale_squared": (
        "tree_verify",
        "scale applied twice",
        lambda: _set(tv, "tree_verify", _scale_changed(lambda s: s * s)),
    ),
    "tv_lse_base2": (
        "tree_verify",
        "lse in base 2",
        lambda: _wrap(tv, "tree_verify", lambda r, *a, **k: Verified(r.out, (r.lse / math.log(2)).astype(r.lse.dtype))),
    ),
    "tv_invisible_row_leaks": (
        "tree_verify",
        "each query also attends to one row it cannot see",
        lambda: _set(tv, "unpack_visibility", _leaky_visibility(tv.unpack_visibility)),
    ),
    "tv_no_bf16_p_rounding": (
        "tree_verify",
        "P kept in fp32 for bf16 inputs",
        lambda: _set(tv, "round_probabilities", lambda p, d: p),
    ),
    # tree_accept
    "ta_last_matching_sibling": (
        "tree_accept",
        "the last matching sibling is taken",
        lambda: _set(ta, "matching_child", _matching_child_last),
    ),
    "ta_bonus_from_parent": (
        "tree_accept",
        "bonus read at the parent of the last accepted node",
        lambda: _wrap(ta, "walk", _bonus_from_parent),
    ),
    "ta_commit_decreasing": (
        "tree_accept",
        "commit copies rows in decreasing j",
        lambda: _set(ta, "commit", _commit_decreasing),
    ),
    "ta_accept_len_counts_root": (
        "tree_accept",
        "accept_len includes the root",
        lambda: _wrap(ta, "walk", lambda acc, *a, **k: (setattr(acc, "accept_len", acc.accept_len + 1), acc)[1]),
    ),
    "ta_commit_skips_last": (
        "tree_accept",
        "the last accepted row is not copied",
        lambda: _set(
            ta,
            "commit",
            (
                lambda o: (
                    lambda kv, bt, p, acc: o(
                        kv,
                        bt,
                        p,
                        type(acc)(
                            np.maximum(acc.accept_len - 1, 0), acc.accept_path, acc.emitted, acc.bonus, acc.new_lens
                        ),
                    )
                )
            )(ta.commit),
        ),
    ),
    "ta_emitted_without_bonus": (
        "tree_accept",
        "emitted lacks the bonus token",
        lambda: _wrap(
            ta,
            "walk",
            lambda acc, *a, **k: (acc.emitted.__setitem__((np.arange(len(acc.accept_len)), acc.accept_len), -1), acc)[
                1
            ],
        ),
    ),
    # draft_topk
    "topk_ties_higher_id": (
        "draft_topk",
        "tied logits ranked by the higher token id",
        lambda: _set(dt, "ranked", _ranked_higher_id_first),
    ),
    "topk_kth_tie_by_arrival": (
        "draft_topk",
        "the K-th place's ties kept in a strided scan's arrival order, not the lowest ids",
        lambda: _set(dt, "ranked", _ranked_kth_tie_by_arrival),
    ),
    "topk_lse_truncated_row": (
        "draft_topk",
        "the log-sum-exp over the row without its last logit",
        lambda: _set(dt, "row_lse", _lse_truncated(dt.row_lse)),
    ),
    "topk_neg_inf_counted": (
        "draft_topk",
        "-inf counted as a value (the lowest finite float32)",
        lambda: _set(dt, "topk_row", _neg_inf_as_lowest(dt.topk_row)),
    ),
    "topk_nan_let_through": (
        "draft_topk",
        "NaN logits not refused",
        lambda: _check_lets_through(float("nan")),
    ),
    "topk_plus_inf_let_through": (
        "draft_topk",
        "+inf logits not refused",
        lambda: _check_lets_through(float("inf")),
    ),
    # the contracts' checks off their edge: every implementation validates with them
    "edge_page_index_off_by_one": (
        "tree_verify",
        "a block-table entry equal to num_pages passes as a page index",
        lambda: _set(paged, "check_pages", _pages_off_by_one(paged.check_pages)),
    ),
    "edge_context_limit_refused": (
        "tree_build",
        "prefix_len + rows = MAX_CONTEXT refused (>= for >)",
        lambda: _set(paged, "check_context", _context_strict),
    ),
    "edge_dtype_pair_one_way": (
        "tree_verify",
        "q and kv_cache must agree only when q is float32 (a bf16 q takes a float32 cache)",
        lambda: _set(
            contract.op.OpContract, "_check_array", _dtype_agreement_one_way(contract.op.OpContract._check_array)
        ),
    ),
    "edge_max_depth_check_plus_one": (
        "tree_accept",
        "the max_depth check accepts 33",
        lambda: _set(contract.checks, "integer", _integer_hi_plus_one(contract.checks.integer, "max_depth")),
    ),
    "edge_symbol_check_hi_plus_one": (
        "tree_verify",
        "every symbol's range check one too wide at the top (1026 queries, 129 heads, ...)",
        lambda: _set(contract.op.OpContract, "symbol", _symbol_check_hi_plus_one(contract.op.OpContract.symbol)),
    ),
}


def pytest_addoption(parser):
    parser.addoption("--mutant", choices=sorted(MUTANTS), help="run against this broken reference (meta tests)")


def pytest_configure(config):
    name = config.getoption("--mutant")
    if name:
        MUTANTS[name][2]()
