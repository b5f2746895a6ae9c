"""The example's op functions: each has the contract's signature (`@CONTRACT.implements` checks it and
appends the contract to the docstring) and validates its inputs with the contract before any work."""

from __future__ import annotations

import numpy as np

from contract import DRAFT_TOPK, TREE_ACCEPT, TREE_BUILD, TREE_VERIFY, TopK, Verified, limits
from contract.paged import cache_rows
from contract.trees import unpack_visibility
from reference import draft_topk as _ref_topk
from reference import tree_accept as _ref_accept
from reference import tree_build as _ref_build
from reference import tree_verify as _ref_verify


# ------------------------------------------------------------------------------------------- tree_build
@TREE_BUILD.implements
def tree_build(top_logp, top_ids, root_tokens, budget, prefix_lens=None, *, with_full_mask=False):
    """The reference's DDTree heap."""
    return _ref_build.tree_build(top_logp, top_ids, root_tokens, budget, prefix_lens, with_full_mask=with_full_mask)


@TREE_BUILD.implements
def tree_build_id_ties(top_logp, top_ids, root_tokens, budget, prefix_lens=None, *, with_full_mask=False):
    """BUG: re-sorts each row by (log-prob descending, token id ascending) before building, so candidates
    with equal log-probs are ranked by token id instead of the drafter's order."""
    TREE_BUILD.validate_host(top_logp, top_ids, root_tokens, budget, prefix_lens, with_full_mask=with_full_mask)
    order = np.lexsort((top_ids, -top_logp.astype(np.float64)), axis=-1)
    lp = np.take_along_axis(top_logp, order, axis=-1)
    ids = np.take_along_axis(top_ids, order, axis=-1)
    return _ref_build.tree_build(lp, ids, root_tokens, budget, prefix_lens, with_full_mask=with_full_mask)


# ------------------------------------------------------------------------------------------- tree_accept
@TREE_ACCEPT.implements
def tree_accept(
    tokens, first_child, next_sibling, target_tokens, *, max_depth, kv_cache=None, block_table=None, prefix_lens=None
):
    """The reference's greedy walk and commit."""
    return _ref_accept.tree_accept(
        tokens, first_child, next_sibling, target_tokens, max_depth=max_depth, kv_cache=kv_cache,
        block_table=block_table, prefix_lens=prefix_lens,
    )  # fmt: skip


@TREE_ACCEPT.implements
def tree_accept_pushed_front(
    tokens, first_child, next_sibling, target_tokens, *, max_depth, kv_cache=None, block_table=None, prefix_lens=None
):
    """BUG: rebuilds each node's sibling list by pushing children to the front (a linked-list habit), so
    siblings are walked last to first and the last matching child wins."""
    TREE_ACCEPT.validate_host(
        tokens, first_child, next_sibling, target_tokens, max_depth=max_depth, kv_cache=kv_cache,
        block_table=block_table, prefix_lens=prefix_lens,
    )  # fmt: skip
    fc, ns = np.full_like(first_child, -1), np.full_like(next_sibling, -1)
    for b in range(first_child.shape[0]):
        for parent in range(first_child.shape[1]):
            child = int(first_child[b, parent])
            while child != -1:  # push each child in front of the ones seen so far
                ns[b, child] = fc[b, parent]
                fc[b, parent] = child
                child = int(next_sibling[b, child])
    # the reference's walk and commit on the rebuilt lists (its checks ran on the given ones above: backward
    # sibling links are this bug's own, not the caller's bad input)
    acc = _ref_accept.walk(tokens, fc, ns, target_tokens, max_depth)
    if kv_cache is not None:
        _ref_accept.commit(kv_cache, block_table, prefix_lens, acc)
        acc.new_lens = (prefix_lens + 1 + acc.accept_len).astype(np.int32)
    else:
        acc.new_lens = (1 + acc.accept_len).astype(np.int32)
    return acc


# ------------------------------------------------------------------------------------------- draft_topk
@DRAFT_TOPK.implements
def draft_topk(logits, K):
    """The reference's ranking and float64 log-sum-exp."""
    return _ref_topk.draft_topk(logits, K)


@DRAFT_TOPK.implements
def draft_topk_reversed_ascending(logits, K):
    """BUG: the top K taken from the end of an ascending stable sort (a common idiom), so tied logits come out
    highest token id first."""
    checked = DRAFT_TOPK.validate_host(logits, K)
    x = checked.args["logits"].astype(np.float64) + 0.0
    ids = np.argsort(x, axis=-1, kind="stable")[..., ::-1][..., :K]
    m = x.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", over="ignore"):
        lse = m + np.log(np.sum(np.exp(x - np.where(np.isfinite(m), m, 0.0)), axis=-1, keepdims=True))
        lp = np.where(np.isfinite(m), np.take_along_axis(x, ids, axis=-1) - lse, -np.inf)
    return TopK(lp.astype(np.float32), ids.astype(np.int32))


# ------------------------------------------------------------------------------------------- tree_verify
def _attention(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale, *, natural_log: bool):
    """float64 attention per request over the rows its queries see (gathered, never masked by
    multiplication, so rows no query sees cannot reach an output), rounded once to float32."""
    checked = TREE_VERIFY.validate_host(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale)
    a, d = checked.args, checked.dims
    bs, Q, H = d["bs"], d["Q"], d["H"]
    q = np.ascontiguousarray(a["q"], np.float64)
    scale = float(np.float32(a["softmax_scale"]))
    bits = unpack_visibility(a["visibility"], Q)
    out = np.empty((bs, Q, H, limits.LATENT), np.float32)
    lse = np.empty((bs, Q, H), np.float32)
    for b in range(bs):
        P = int(a["prefix_lens"][b])
        for i in range(Q):
            positions = np.concatenate([np.arange(P), P + np.flatnonzero(bits[b, i])])
            keys = np.ascontiguousarray(cache_rows(a["kv_cache"], a["block_table"], b, positions), np.float64)
            if natural_log:
                s = (q[b, i] @ keys.T) * scale  # [H, n]
                m = s.max(axis=1, keepdims=True)
                e = np.exp(s - m)
                l = e.sum(axis=1)
                lse[b, i] = m[:, 0] + np.log(l)
            else:  # exp2 with log2(e) folded into the scale, as fast kernels do ...
                s2 = (q[b, i] @ keys.T) * (scale * np.log2(np.e))
                m = s2.max(axis=1, keepdims=True)
                e = np.exp2(s2 - m)
                l = e.sum(axis=1)
                lse[b, i] = m[:, 0] + np.log2(l)  # ... and the lse left in base 2
            out[b, i] = (e / l[:, None]) @ keys[:, : limits.LATENT]
    return Verified(out, lse)


@TREE_VERIFY.implements
def tree_verify(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale):
    """float64 numpy attention, float32 in and out."""
    return _attention(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale, natural_log=True)


@TREE_VERIFY.implements
def tree_verify_base2_lse(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale):
    """BUG: the same attention computed with exp2, its lse returned in base 2 instead of the natural log."""
    return _attention(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale, natural_log=False)


@TREE_VERIFY.implements
def tree_verify_chains_only(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale):
    """The reference behind the declaration a causal decode kernel makes (bf16, pages of 64, chains only): it
    refuses anything else, so a harness that sent it other inputs would fail, not pass."""
    checked = TREE_VERIFY.validate_host(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale)
    Q = checked.dims["Q"]
    if checked.dims["page_size"] != 64 or str(checked.args["q"].dtype) != "bfloat16":
        raise NotImplementedError("kv_cache: pages of 64 rows and bfloat16 only")
    if not (unpack_visibility(checked.args["visibility"], Q) == np.tril(np.ones((Q, Q), bool))[None]).all():
        raise NotImplementedError("visibility: chains only (row i sees tree rows 0..i in every request)")
    return _ref_verify.tree_verify(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale)
