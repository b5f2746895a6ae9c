// Launchers of the kernels of kernels_cu/ on device arrays: the launch geometry comes from each kernel's own
// header (tree_build.cuh, tree_verify.cuh, tree_accept.cuh, draft_topk.cuh), evaluated here by the same
// constexpr functions the kernels use. One launcher per kernel source; a variant of another source has none
// (UsageError).
#pragma once
#include <cstdint>
#include <vector>

#include "device.hpp"
#include "kdtree/draft_topk.hpp"

namespace kdtree {
namespace cuda {

struct BuildOnDevice {
  const float* top_logp;
  const int32_t* top_ids;
  const int32_t* root_tokens;
  const int32_t* prefix_lens;
  int64_t bs, L, K_in, budget;
  int32_t *n_nodes, *parents, *depths, *tokens, *ranks;
  double* scores;
  uint32_t* visibility;
  int32_t *positions, *first_child, *next_sibling;
  uint8_t* full_mask;  // nullptr: no FULL_MASK layout
};
void launch_tree_build(const Variant& v, const BuildOnDevice& d);

struct VerifyOnDevice {
  const void* q;
  const void* kv_cache;
  bool bf16;
  const int32_t* block_table;
  const int32_t* prefix_lens;  // device copy of prefix_host
  const uint32_t* visibility;
  const int32_t* prefix_host;  // [bs] on the host: the split-KV plan is made there
  int64_t bs, Q, H, page_size, max_pages;
  float softmax_scale;
  void* out;
  float* lse;
  int64_t num_pages = 0;  // pages in kv_cache (the sm90a variant's TMA descriptor spans them)
};
// An sm90a variant runs the calls tv::sm90a_serves() takes and hands the rest to the portable variant.
void launch_tree_verify(const Variant& v, const VerifyOnDevice& d);

struct AcceptOnDevice {
  const int32_t *tokens, *first_child, *next_sibling, *target_tokens;
  int64_t bs, D, max_depth;
  int32_t *accept_len, *accept_path, *emitted, *bonus, *new_lens;
  void* kv_cache;  // nullptr: the walk only
  int64_t row_bytes, page_size, max_pages;  // a cache row's bytes (576 x itemsize)
  const int32_t* block_table;
  const int32_t* prefix_lens;
};
void launch_tree_accept(const Variant& v, const AcceptOnDevice& d);

struct DraftTopkOnDevice {
  const void* logits;  // [rows, V] of dtype
  LogitType dtype;
  int64_t rows, V, K;  // rows = bs * L
  float* top_logp;     // [rows, K]
  int32_t* top_ids;    // [rows, K]
};
// One block per row, or the split kernel then the merge kernel through a workspace (draft_topk.cuh's rule).
void launch_draft_topk(const Variant& v, const DraftTopkOnDevice& d);

}  // namespace cuda
}  // namespace kdtree
