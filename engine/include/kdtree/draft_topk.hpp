// CPU draft_topk (spec/draft_topk.md): per row of V logits, the K token ids ranked by (logit descending, token
// id ascending) and their log-probs x - lse rounded to float32, as reference/draft_topk.py computes them (the
// ids bit for bit; the log-probs from a float64 log-sum-exp, within DT.2.4 and in practice the same bits).
#pragma once
#include <cstdint>

namespace kdtree {

enum class LogitType { F32, F16, BF16 };

struct DraftTopkArgs {
  const void* logits = nullptr;  // [bs, L, V] of dtype
  LogitType dtype = LogitType::F32;
  int64_t bs = 0, L = 0, V = 0, K = 0;
};

struct DraftTopkOut {
  float* top_logp = nullptr;  // [bs, L, K]
  int32_t* top_ids = nullptr;  // [bs, L, K]
};

// DT.1 on the values, in the contract's order and words (contract/draft_topk.py): the limits again (for a
// caller without an op file's structural pass), K <= V, then the first NaN and the first +inf, each named by
// its [request, depth, token]. Throws InputError naming the argument.
void validate_draft_topk(const DraftTopkArgs& a);

// Every row, in parallel over up to `threads` threads (0 = one per core).
void draft_topk(const DraftTopkArgs& a, const DraftTopkOut& out, int threads);

// One row of float32 logits x [V] (no NaN or +inf; K <= V): what draft_topk gives for it. The test drafter's
// top-k (drafter.cpp).
void draft_topk_row(const float* x, int64_t V, int64_t K, float* top_logp, int32_t* top_ids);

}  // namespace kdtree
