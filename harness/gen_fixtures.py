"""Generate the golden fixtures fixtures/<op>/*.kdtr from the references, and fixtures/MANIFEST.json.

Each fixture holds `in.*` tensors (the op's inputs by the contract's KDTR names, scalars rank-0), `out.*`
tensors (the reference's outputs, and arguments written in place) and metadata (op, case, spec clause,
generator, description). MANIFEST.json records each file's sha256 and a hash of the sources
that generate them; conformance/test_fixtures.py fails when either is stale.

    python -m harness.gen_fixtures     # from the repository root; `make fixtures` runs it
"""

from __future__ import annotations

import hashlib
import json
import pathlib

import numpy as np

import contract
import kdtr
from reference.draft_topk import draft_topk
from reference.tree_accept import tree_accept
from reference.tree_build import layouts, tree_build
from reference.tree_verify import tree_verify

from . import strategies as hh

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "fixtures"
SOURCES = [
    "harness/gen_fixtures.py",
    "reference/tree_build.py",
    "reference/tree_accept.py",
    "reference/tree_verify.py",
    "reference/draft_topk.py",
    "reference/numerics.py",
    "contract/op.py",
    "contract/tree_build.py",
    "contract/tree_accept.py",
    "contract/tree_verify.py",
    "contract/draft_topk.py",
    "harness/strategies.py",
    "kdtr/format.py",
    "kdtr/writer.py",
]
GENERATOR = "reference"  # the implementation whose outputs the fixtures hold


def source_hash() -> str:
    """sha256 over each source's path and bytes: the fixtures are stale when a generating source changes."""
    h = hashlib.sha256()
    for s in SOURCES:
        h.update(s.encode() + b"\0" + (ROOT / s).read_bytes())
    return h.hexdigest()


def _fixture(op: str, case: str, clause: str, note: str, args: dict, call) -> tuple:
    """Run `call(**args)` and record the inputs as they were before it (the commit writes in place)."""
    c = contract.OPS[op]
    tensors = {f"in.{k}": v.copy() for k, v in c.kdtr_inputs(args).items()}
    result = call(**args)
    tensors.update({f"out.{k}": v for k, v in c.kdtr_outputs(result, args).items()})
    meta = {"op": op, "case": case, "spec": clause, "generator": GENERATOR, "note": note}
    return f"{op}/{case}.kdtr", tensors, meta


def _tb(case, note, **args):
    args.setdefault("with_full_mask", True)
    return _fixture("tree_build", case, "TB.4.3", note, args, tree_build)


def tree_build_cases():
    # sgl-kernel test_build_tree_kernel_efficient, request 0 (prefix 5): every score ties, so the rank-tuple
    # order alone yields its tree; expected positions [5,6,6,7,7,8,8,9], next_token [1,3,4,5,6,7,-1,-1],
    # next_sibling [-1,2,-1,-1,-1,-1,-1,-1] (asserted in conformance/test_fixtures.py as well).
    lp = np.array([[[-1, -1], [-1, -10], [-1, -10], [-1, -10]]], np.float32)
    ids = np.array([[[11, 12], [21, 22], [31, 32], [41, 42]]], np.int32)
    yield _tb(
        "sgl_golden_request0",
        "sgl-kernel build_tree golden, request 0, produced by DDTree ties",
        top_logp=lp,
        top_ids=ids,
        root_tokens=np.array([7], np.int32),
        budget=7,
        prefix_lens=np.array([5], np.int32),
    )
    rng = np.random.default_rng(20261202)
    for case, (bs, L, K, B, style, inf) in {
        "ties_bf16": (4, 4, 8, 16, "bf16", 0.0),
        "coarse_inf_tails": (4, 5, 6, 40, "coarse", 0.5),
        "budget_zero": (2, 3, 3, 0, "bf16", 0.0),
        "budget_exceeds_candidates": (2, 2, 2, 20, "coarse", 0.0),
        "wide_magnitudes": (3, 6, 8, 32, "wide", 0.0),
        "kimi_l15_b64": (8, 15, 64, 64, "bf16", 0.0),
    }.items():
        lp = hh.logp_rows(rng, (bs, L, K), style, inf)
        ids = np.stack([np.stack([rng.choice(160_000, K, replace=False) for _ in range(L)]) for _ in range(bs)])
        yield _tb(
            case,
            f"bs={bs} L={L} K_in={K} B={B} style={style} inf_frac={inf}",
            top_logp=lp,
            top_ids=ids.astype(np.int32),
            root_tokens=rng.integers(0, 160_000, bs).astype(np.int32),
            budget=B,
            prefix_lens=rng.choice([0, 1, 64, 65], bs).astype(np.int32),
        )


def _ta(case, note, tokens, first_child, next_sibling, target, max_depth, kv=None, bt=None, prefix=None):
    commit = {} if kv is None else {"kv_cache": kv, "block_table": bt, "prefix_lens": prefix}
    args = hh.accept_case(None, None, tokens, first_child, next_sibling, target, max_depth, **commit).args
    return _fixture("tree_accept", case, "TA.4.2", note, args, tree_accept)


def tree_accept_cases():
    # sgl-kernel test_verify_tree_greedy: request 0 as is; request 1 relabelled so links point forward
    # (old nodes 0,4,1,5,2,3 -> new 0..5). Expected: accept_len [3, 2], paths [0,3,4,5] and [0,1,3]
    # (= global [6,10,11] in the original numbering), bonus 18 for both.
    tokens = np.array([[0, 1, 2, 3, 4, 5], [7, 11, 8, 12, 9, 10]], np.int32)
    fc = np.array([[1, 2, -1, 4, 5, -1], [1, 3, 4, -1, 5, -1]], np.int32)
    ns = np.array([[-1, 3, -1, -1, -1, -1], [-1, 2, -1, -1, -1, -1]], np.int32)
    target = np.array([[3, 18, 18, 4, 5, 18], [11, 12, 18, 18, 18, 18]], np.int32)
    yield _ta("sgl_golden", "sgl-kernel verify_tree_greedy golden, adapted to forward links", tokens, fc, ns, target, 3)
    rng = np.random.default_rng(1202)
    for case, (dtype, page_size) in {"commit_fp32_page4": (np.float32, 4), "commit_bf16_page1": ("bf16", 1)}.items():
        import ml_dtypes

        dt = ml_dtypes.bfloat16 if dtype == "bf16" else dtype
        bs, D = 2, 8
        par = np.full((bs, D), -1, np.int32)
        fcs, nss = np.full((bs, D), -1, np.int32), np.full((bs, D), -1, np.int32)
        for b in range(bs):
            par[b, 1:] = [rng.integers(0, i) for i in range(1, D)]
            fcs[b], nss[b] = hh.links_of(par[b], D)
        toks = rng.integers(0, 3, (bs, D)).astype(np.int32)
        tgt = rng.integers(0, 3, (bs, D)).astype(np.int32)
        prefix = np.array([0, 9], np.int32)
        _, kv, bt = hh.build_paged_cache(rng, dt, prefix, D, page_size, 1)
        depth = max(int(hh.depths_of(par[b]).max()) for b in range(bs))
        yield _ta(
            case,
            f"random trees over a 3-token vocabulary, {dtype} cache, page {page_size}",
            toks,
            fcs,
            nss,
            tgt,
            depth,
            kv,
            bt,
            prefix,
        )


def tree_verify_cases():
    import ml_dtypes

    for dtype in (np.float32, ml_dtypes.bfloat16):
        yield from _tv(np.dtype(dtype))


def _tv(dtype):
    rng = np.random.default_rng(5)
    par = np.array([[-1, 0, 0, 1, 3], [-1, 0, 1, 1, -1]], np.int32)
    n = np.array([5, 4], np.int32)
    dep = np.stack(
        [hh.depths_of(np.where(np.arange(5) < k, p, -1)[:k]).tolist() + [0] * (5 - k) for p, k in zip(par, n)]
    )
    prefix = np.array([20, 3], np.int32)
    vis = layouts(par, dep.astype(np.int32), n, prefix)[0]
    q, kv, bt = hh.build_paged_cache(rng, dtype, prefix, 5, 8, 2)
    args = {
        "q": q,
        "kv_cache": kv,
        "block_table": bt,
        "prefix_lens": prefix,
        "visibility": vis,
        "softmax_scale": 0.130861,
    }
    name = {"float32": "fp32", "bfloat16": "bf16"}[dtype.name] + "_h2_prefix20"
    yield _fixture("tree_verify", name, "TV.3.4", "H=2, page 8, NaN-poisoned spare rows", args, tree_verify)


def draft_topk_cases():
    import ml_dtypes

    bf16 = np.dtype(ml_dtypes.bfloat16)
    rng = np.random.default_rng(20261205)
    for case, (bs, L, V, K, dtype, style) in {
        "bf16_ties": (2, 3, 500, 16, bf16, "normal"),
        "fp32_inf_tails": (3, 2, 40, 8, np.float32, "inf_tail"),
        "fp16_all_inf_rows": (2, 3, 24, 6, np.float16, "all_inf"),
        "fp16_signed_zeros_k_eq_v": (1, 2, 16, 16, np.float16, "signed_zeros"),
        "fp32_near_max": (2, 2, 12, 12, np.float32, "huge"),
        "bf16_one_finite": (2, 2, 64, 4, bf16, "one_finite"),
        "kimi_vocab_bf16": (1, 1, 163_840, 64, bf16, "normal"),
        "fp16_subnormals": (2, 3, 48, 8, np.float16, "subnormal"),
    }.items():
        logits = hh.logit_rows(rng, (bs, L, V), dtype, style)
        yield _fixture(
            "draft_topk",
            case,
            "DT.4.3",
            f"bs={bs} L={L} V={V} K={K} {np.dtype(dtype).name} logits, style {style}",
            {"logits": logits, "K": K},
            draft_topk,
        )


def generate():
    for gen in (tree_build_cases, tree_accept_cases, tree_verify_cases, draft_topk_cases):
        yield from gen()


def main() -> None:
    files = {}
    for rel, tensors, meta in generate():
        p = OUT / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        kdtr.save(p, tensors, {k: str(v) for k, v in meta.items()})
        files[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    manifest = {"source_hash": source_hash(), "sources": SOURCES, "files": files}
    (OUT / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(files)} fixtures, {sum((OUT / f).stat().st_size for f in files) // 1024} KiB")


if __name__ == "__main__":
    main()
