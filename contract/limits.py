"""Every limit of the ops' contracts, written once.

The CUDA and C++ side get these values from `kernels_cu/contract_limits.cuh`, generated from this module
by `contract/gen_limits_header.py` (a meta test fails when the header is stale). Encodings that depend on a
limit `static_assert` against the generated constants.
"""

from __future__ import annotations

# Requests per call.
MAX_BATCH = 1024
# Draft tree: non-root nodes (budget B), depth (L, drafter steps), top-k per depth (K_in).
MAX_BUDGET = 1024
MAX_DEPTH = 32
MAX_TOPK = 1024
# Vocabulary of draft_topk's logits rows (Kimi-K2 163,840, DeepSeek-V3 129,280, Qwen 151,936; room above).
MAX_VOCAB = 262_144
# Tree width D = 1 + B (the root counts), also tree_verify's query count Q.
MAX_TREE = 1 + MAX_BUDGET
# Context: prefix_len + tree width, Kimi-K2's 256K window. Positions and page arithmetic fit int32 with room.
MAX_CONTEXT = 262_144
# MLA absorb form: 512 latent (c_kv, absorbed q_nope) + 64 rope (k_pe, q_pe) columns per cache row.
LATENT = 512
ROPE = 64
HEAD_DIM = LATENT + ROPE
# Query heads: DeepSeek-V3 has 128, Kimi-K2 64; tensor-parallel shards have fewer.
MAX_HEADS = 128
# Rows per cache page (FlashMLA uses 64, SGLang 1, vLLM 16); any size in range, not only powers of two.
MAX_PAGE_SIZE = 1024
# Physical cache rows (num_pages * page_size): row indices fit int32 (139 GiB holds ~1.2e8 bf16 rows).
MAX_CACHE_ROWS = 2**31 - 1
# Token ids are int32 >= 0; -1 is the padding value of every token output.
MAX_TOKEN = 2**31 - 1
# The SGLang FULL_MASK layout (opt-in): D * (prefix_len + D) bytes per request; its flat offsets fit int32.
MAX_FULL_MASK_BYTES = 2**31 - 1

# Everything above, for the generated header and the meta test that compares the two.
ALL = {
    name: value
    for name, value in dict(globals()).items()
    if name.isupper() and name != "ALL" and isinstance(value, int)
}
