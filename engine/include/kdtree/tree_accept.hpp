// CPU greedy tree accept and KV commit (spec/tree_accept.md), bit-exact with reference/tree_accept.py.
#pragma once
#include <cstdint>

#include "kdtree/tree_verify.hpp"  // DType

namespace kdtree {

struct TreeAcceptArgs {
  const int32_t* tokens = nullptr;         // [bs, D]
  const int32_t* first_child = nullptr;    // [bs, D]
  const int32_t* next_sibling = nullptr;   // [bs, D]
  const int32_t* target_tokens = nullptr;  // [bs, D]
  int64_t bs = 0, D = 0, max_depth = 0;
  // The commit, when kv_cache is set: [num_pages, page_size, 576] of dtype, modified in place.
  void* kv_cache = nullptr;
  DType dtype = DType::F32;
  int64_t num_pages = 0, page_size = 0, max_pages = 0;
  const int32_t* block_table = nullptr;  // [bs, max_pages]
  const int32_t* prefix_lens = nullptr;  // [bs]
};

struct TreeAcceptOut {
  int32_t* accept_len = nullptr;   // [bs]
  int32_t* accept_path = nullptr;  // [bs, 1 + max_depth]
  int32_t* emitted = nullptr;      // [bs, 1 + max_depth]
  int32_t* bonus = nullptr;        // [bs]
  int32_t* new_lens = nullptr;     // [bs]
};

// TA.1 on the values (the caller checked dtypes, shapes and the commit group), in the contract's order and
// words (contract/tree_accept.py): the bs/D/max_depth/page limits (again, for a caller without an op
// file's structural pass), non-negative tokens and target tokens, links that form a tree hanging off node
// 0 (no root sibling, forward links, one incoming link per node), depth <= max_depth, and for the commit
// the cache's row count, non-negative prefix lengths within the context limit, the paged addressing of
// prefix_len + D rows and those rows being distinct physical rows. Throws InputError naming the argument.
void validate_tree_accept(const TreeAcceptArgs& a);

// The walk of every request (in parallel) and, with a cache, the commit; new_lens as the reference.
void tree_accept(const TreeAcceptArgs& a, const TreeAcceptOut& out, int threads);

// The commit alone for an already walked batch: rows prefix_len + j <- prefix_len + path[j] for
// j = 1..accept_len, in increasing j, requests in batch order. Used per layer by the decoder.
void commit_accepted(const TreeAcceptArgs& a, const int32_t* accept_len, const int32_t* accept_path);

}  // namespace kdtree
