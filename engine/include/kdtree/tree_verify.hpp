// CPU tree-verify attention in MLA absorb form (spec/tree_verify.md).
// Each (request, query) is computed whole by one thread, over its visible keys in position order
// (prefix 0..P-1, then the tree rows its visibility row marks, ascending): only visible rows are read,
// so invisible rows cannot change a bit (TV.3.1), and neither the thread count nor the rest of the
// batch can change a request's bits (TV.3.2, TV.3.3). Numerics as TV.2.1/TV.2.2: float32 logits scaled
// by float32(softmax_scale), float32 softmax, P rounded to bf16 before P·V for bf16 inputs, float32
// accumulation, output rounded to the input dtype, lse = m + log(l) in natural log.
#pragma once
#include <cstdint>

namespace kdtree {

enum class DType { F32, BF16 };

struct TreeVerifyArgs {
  const void* q = nullptr;            // [bs, Q, H, 576] of dtype
  const void* kv_cache = nullptr;     // [num_pages, page_size, 576] of dtype
  DType dtype = DType::F32;
  const int32_t* block_table = nullptr;  // [bs, max_pages]
  const int32_t* prefix_lens = nullptr;  // [bs]
  const uint32_t* visibility = nullptr;  // [bs, Q, ceil(Q / 32)]
  int64_t bs = 0, Q = 0, H = 0, num_pages = 0, page_size = 0, max_pages = 0;
  double softmax_scale = 0.0;
};

struct TreeVerifyOut {
  void* out = nullptr;   // [bs, Q, H, 512] of dtype
  float* lse = nullptr;  // [bs, Q, H]
};

// TV.1 on the values (the caller checked dtypes and shapes), in the contract's order and words
// (contract/tree_verify.py): the bs/Q/H/page limits and the scale's float32 value (again, for a caller
// without an op file's structural pass), the cache's row count, non-negative prefix lengths within the
// context limit, the paged addressing of prefix_len + Q rows, and the visibility being a tree's ancestor
// closure.
void validate_tree_verify(const TreeVerifyArgs& a);

// The visibility check of TV.1.3 (contract/trees.py check_visibility), naming `arg`; O(bs * Q * W).
void check_visibility(const char* arg, const uint32_t* visibility, int64_t bs, int64_t Q);

void tree_verify(const TreeVerifyArgs& a, const TreeVerifyOut& out, int threads);

// One query's attention over an explicit list of key rows (used by tree_verify and by the model):
// rows[j] points at a 576-wide float32 key/value row; q is [H, 576]; out [H, 512]; lse [H].
// `round_p_bf16` applies TV.2.2's rounding of the probabilities. `scratch` must hold H * n floats.
void attend_rows(const float* q, int64_t H, const float* const* rows, int64_t n, float scale, bool round_p_bf16,
                 float* out, float* lse, float* scratch);

}  // namespace kdtree
