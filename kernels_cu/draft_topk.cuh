// Launch geometry of draft_topk, for the kernels, the engine's host code and the Python wrapper (through the
// draft_topk_geometry query kernel).
//
// A row (one request's logits at one depth, V tokens) is cut into splits of draft_topk_chunk() tokens when V is
// larger than one split and K is small beside it: each split keeps its K best (token, logit) keys and its partial
// logsumexp in a workspace, and a merge kernel selects the row's K among the splits' candidates. Otherwise one
// block takes the whole row. The split size is fixed, never derived from the batch, so a row's result does not
// depend on the rows beside it (batch invariance).
#pragma once
#include "common.cuh"

// The kernels' block (their spec's `block` must say the same: the wrapper launches draft_topk_threads()) and the
// logits per thread of one split, held in registers through the selection's passes. Written here, not taken from
// the build's block define, so that the host library reads the geometry the kernels run.
#ifndef DT_THREADS
#define DT_THREADS 256
#endif
#ifndef DT_ITEMS
#define DT_ITEMS 16
#endif

// The selection: DT_PREFILTER 1 ranks the few keys above a cheap bound and falls back to the radix passes when they
// are more than DT_CAND_CAP; 0 always takes the radix passes (draft_topk.cu). Both select the same keys.
#ifndef DT_PREFILTER
#define DT_PREFILTER 1
#endif
#ifndef DT_CAND_CAP
#define DT_CAND_CAP 512
#endif
// The prefilter's looks at a split's registers on the 32-bit logit order (draft_topk.cu); 0: every look through the
// generic 64-bit key visit (the build certified at 38b0d82, kept as a design in lab/draft_topk_dev.py).
#ifndef DT_REGISTER_LOOKS
#define DT_REGISTER_LOOKS 1
#endif

// A split's logits read in 16-byte vectors (1) or token by token (0, the build certified at 38b0d82); either way
// every key and so every result is the same (draft_topk.cu's split_token).
#ifndef DT_VEC_LOADS
#define DT_VEC_LOADS 1
#endif

KERNEL_HD constexpr int draft_topk_threads() { return DT_THREADS; }
KERNEL_HD constexpr int draft_topk_chunk() { return DT_THREADS * DT_ITEMS; }
// Splits per row: 1 (one block per row) when the row fits one split or K is larger than an eighth of a split
// (the candidates would outgrow the logits), else one per chunk of the row.
KERNEL_HD constexpr int draft_topk_splits(int V, int K) {
  return (V <= draft_topk_chunk() || 8 * K > draft_topk_chunk()) ? 1 : (V + draft_topk_chunk() - 1) / draft_topk_chunk();
}
// Candidates each split keeps (the workspace's stride): K, at most a split's tokens.
KERNEL_HD constexpr int draft_topk_kept(int V, int K) { return K < draft_topk_chunk() ? K : draft_topk_chunk(); }
// Workspace bytes for `rows` rows: 8-byte candidate keys, then a (max, sum) float pair per split.
KERNEL_HD constexpr long long draft_topk_workspace_bytes(long long rows, int V, int K) {
  return draft_topk_splits(V, K) == 1 ? 0
         : rows * draft_topk_splits(V, K) * (8LL * draft_topk_kept(V, K) + 8LL);
}
// Dynamic shared memory of the kernels that sort the row's K results: the keys padded to a power of two.
KERNEL_HD constexpr int draft_topk_pow2(int K) {
  int p = 1;
  while (p < K) p <<= 1;
  return p;
}
KERNEL_HD constexpr long long draft_topk_smem_bytes(int K) { return 8LL * draft_topk_pow2(K); }
// The fields the wrapper reads (through the geometry library and the query kernel, both calling this): splits per
// row, candidates kept per split, workspace bytes for `rows` rows, dynamic shared memory of the kernels that write a
// row, tokens per split, threads per block.
KERNEL_HD inline void draft_topk_geometry_fields(int V, int K, long long rows, long long* out) {
  out[0] = draft_topk_splits(V, K);
  out[1] = draft_topk_kept(V, K);
  out[2] = draft_topk_workspace_bytes(rows, V, K);
  out[3] = draft_topk_smem_bytes(K);
  out[4] = draft_topk_chunk();
  out[5] = draft_topk_threads();
}
