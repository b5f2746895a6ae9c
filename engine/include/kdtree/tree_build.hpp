// CPU DDTree tree build (spec/tree_build.md): the best-first heap of reference/tree_build.py, bit for bit.
// Scores are float64 sums in the reference's operation order (this file's translation unit is compiled
// without fast-math and without FP contraction), ties are broken by the rank tuple, and every layout
// (visibility bitmask, positions, first-child/next-sibling, optional FULL_MASK) is derived from the
// parent array exactly as reference.tree_build.layouts does. Requests are built in parallel.
#pragma once
#include <cstdint>

namespace kdtree {

struct TreeBuildArgs {
  const float* top_logp = nullptr;       // [bs, L, K_in]
  const int32_t* top_ids = nullptr;      // [bs, L, K_in]
  const int32_t* root_tokens = nullptr;  // [bs]
  const int32_t* prefix_lens = nullptr;  // [bs]
  int64_t bs = 0, L = 0, K_in = 0, budget = 0;
  bool with_full_mask = false;
};

// Output buffers, owned by the caller. D = 1 + budget, W = ceil(D / 32).
struct TreeBuildOut {
  int32_t* n_nodes = nullptr;       // [bs]
  int32_t* parents = nullptr;       // [bs, D]
  int32_t* depths = nullptr;        // [bs, D]
  int32_t* tokens = nullptr;        // [bs, D]
  int32_t* ranks = nullptr;         // [bs, D]
  double* scores = nullptr;         // [bs, D]
  uint32_t* visibility = nullptr;   // [bs, D, W]
  int32_t* positions = nullptr;     // [bs, D]
  int32_t* first_child = nullptr;   // [bs, D]
  int32_t* next_sibling = nullptr;  // [bs, D]
  uint8_t* full_mask = nullptr;     // [full_mask_size(...)] bools; unused unless with_full_mask
};

// TB.1.2-TB.1.3 on the values (the caller checked dtypes and shapes), in the contract's order and words
// (contract/tree_build.py): the bs/L/K_in/budget limits, no NaN, log-probs <= 0 and non-increasing per
// row, distinct non-negative ids, non-negative roots and prefix lengths, prefix_len + 1 + budget within
// the context limit, and with_full_mask's layout within kMaxFullMaskBytes. Throws InputError naming the
// argument.
void validate_tree_build(const TreeBuildArgs& a);

// Number of bools in the FULL_MASK layout: D * (sum(prefix_lens) + bs * D) (contract.full_mask_bytes).
int64_t full_mask_size(const int32_t* prefix_lens, int64_t bs, int64_t D);

// Builds every request's tree (inputs must have passed validate_tree_build).
void tree_build(const TreeBuildArgs& a, const TreeBuildOut& out, int threads);

}  // namespace kdtree
