// Greedy walk over first-child/next-sibling lists and the in-place KV commit.
#include "kdtree/tree_accept.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kdtree/checks.hpp"
#include "kdtree/contract.hpp"
#include "kdtree/error_text.hpp"
#include "kdtree/paged.hpp"
#include "kdtree/threads.hpp"

namespace kdtree {
namespace {

std::string at(int64_t b, int64_t u) { return "[" + std::to_string(b) + ", " + std::to_string(u) + "]"; }

// contract/trees.py check_links: no root sibling, forward links inside the tree, at most one incoming link
// per node.
void check_links(const TreeAcceptArgs& a) {
  for (int64_t b = 0; b < a.bs; ++b)
    if (a.next_sibling[b * a.D] != -1) fail("next_sibling", "root of request " + std::to_string(b) + " has a sibling");
  const char* names[2] = {"first_child", "next_sibling"};
  const int32_t* arrays[2] = {a.first_child, a.next_sibling};
  for (int k = 0; k < 2; ++k)
    for (int64_t b = 0; b < a.bs; ++b)
      for (int64_t u = 0; u < a.D; ++u) {
        const int32_t c = arrays[k][b * a.D + u];
        if (c != -1 && (c <= u || c >= a.D))
          fail(names[k], at(b, u) + " = " + std::to_string(c) + " must be -1 or an index in " + std::to_string(u + 1) +
                             ".." + std::to_string(a.D - 1) + " (cyclic or non-prefix tree)");
      }
  std::vector<int32_t> count(sz(a.D));
  for (int64_t b = 0; b < a.bs; ++b) {
    std::fill(count.begin(), count.end(), 0);
    for (int k = 0; k < 2; ++k)
      for (int64_t u = 0; u < a.D; ++u)
        if (arrays[k][b * a.D + u] >= 0) ++count[sz(arrays[k][b * a.D + u])];
    for (int64_t u = 0; u < a.D; ++u)
      if (count[sz(u)] > 1)
        fail("first_child", "request " + std::to_string(b) + ": node " + std::to_string(u) +
                                " has more than one incoming link (first_child/next_sibling do not form a tree)");
  }
}

// contract/trees.py parents_from_links + depths_from_parents, then the max_depth check: the depth of every
// node reached from the root (links point forward, so one pass in index order settles each node); nodes
// the root does not reach (pads) count as depth 0, whatever links they hold.
void check_depths(const TreeAcceptArgs& a) {
  std::vector<int64_t> depth(sz(a.D));
  std::vector<uint8_t> reached(sz(a.D));
  for (int64_t b = 0; b < a.bs; ++b) {
    std::fill(depth.begin(), depth.end(), 0);
    std::fill(reached.begin(), reached.end(), uint8_t(0));
    reached[0] = 1;
    const int32_t* fc = a.first_child + b * a.D;
    const int32_t* ns = a.next_sibling + b * a.D;
    for (int64_t u = 0; u < a.D; ++u) {
      if (!reached[sz(u)]) continue;
      for (int32_t c = fc[u]; c != -1; c = ns[c]) {
        depth[sz(c)] = depth[sz(u)] + 1;
        reached[sz(c)] = 1;
      }
    }
    for (int64_t u = 0; u < a.D; ++u)
      if (depth[sz(u)] > a.max_depth)
        fail("first_child", "request " + std::to_string(b) + " node " + std::to_string(u) + " is at depth " +
                                std::to_string(depth[sz(u)]) + " > max_depth " + std::to_string(a.max_depth));
  }
}

int32_t matching_child(const int32_t* tokens, const int32_t* fc, const int32_t* ns, int32_t u, int32_t want) {
  for (int32_t c = fc[u]; c != -1; c = ns[c])
    if (tokens[c] == want) return c;
  return -1;
}

}  // namespace

void validate_tree_accept(const TreeAcceptArgs& a) {
  // the structural limits, for callers without an op file's structural pass
  check_symbol("tokens", sym::kBs, a.bs);
  check_symbol("tokens", sym::kD, a.D);
  if (a.max_depth < 0 || a.max_depth > kMaxDepth)
    fail("max_depth", std::to_string(a.max_depth) + " is outside 0.." + std::to_string(kMaxDepth));
  if (a.kv_cache) {
    check_symbol("kv_cache", sym::kNumPages, a.num_pages);
    check_symbol("kv_cache", sym::kPageSize, a.page_size);
    check_symbol("block_table", sym::kMaxPages, a.max_pages);
  }
  // contract/tree_accept.py _check_values, in its order
  check_non_negative("tokens", a.tokens, {a.bs, a.D}, "token id");
  check_non_negative("target_tokens", a.target_tokens, {a.bs, a.D}, "token id");
  check_links(a);
  check_depths(a);
  if (!a.kv_cache) return;
  check_cache_shape(a.num_pages, a.page_size);
  check_non_negative("prefix_lens", a.prefix_lens, {a.bs}, "length");
  check_context(a.prefix_lens, a.bs, a.D);
  check_pages(a.num_pages, a.page_size, a.block_table, a.max_pages, a.prefix_lens, a.bs, a.D);
  check_distinct_rows(a.block_table, a.max_pages, a.page_size, a.prefix_lens, a.bs, a.D);
}

void commit_accepted(const TreeAcceptArgs& a, const int32_t* accept_len, const int32_t* accept_path) {
  const size_t row_bytes = sz(kHeadDim) * (a.dtype == DType::BF16 ? 2 : 4);
  auto* base = static_cast<uint8_t*>(a.kv_cache);
  const int64_t width = 1 + a.max_depth;
  auto row = [&](int64_t b, int64_t pos) {
    const int64_t page = a.block_table[b * a.max_pages + pos / a.page_size];
    return base + sz(page * a.page_size + pos % a.page_size) * row_bytes;
  };
  // Sequential over requests, in batch order as the reference commits (validated commits never alias rows
  // across requests; the decoder's per-layer commits go through here too).
  for (int64_t b = 0; b < a.bs; ++b) {
    const int64_t P = a.prefix_lens[b];
    for (int64_t j = 1; j <= accept_len[b]; ++j)
      std::memmove(row(b, P + j), row(b, P + accept_path[b * width + j]), row_bytes);
  }
}

void tree_accept(const TreeAcceptArgs& a, const TreeAcceptOut& o, int threads) {
  const int64_t width = 1 + a.max_depth;
  parallel_for(a.bs, threads, [&](int64_t b) {
    const int32_t* tok = a.tokens + b * a.D;
    const int32_t* fc = a.first_child + b * a.D;
    const int32_t* ns = a.next_sibling + b * a.D;
    const int32_t* tgt = a.target_tokens + b * a.D;
    int32_t* path = o.accept_path + b * width;
    int32_t* emit = o.emitted + b * width;
    std::fill(path, path + width, -1);
    std::fill(emit, emit + width, -1);
    int32_t u = 0, n = 0;
    path[0] = 0;
    for (;;) {
      const int32_t c = matching_child(tok, fc, ns, u, tgt[u]);
      if (c < 0) break;
      ++n;
      path[n] = c;
      emit[n - 1] = tok[c];
      u = c;
    }
    o.accept_len[b] = n;
    o.bonus[b] = tgt[u];
    emit[n] = tgt[u];
  });
  if (a.kv_cache) commit_accepted(a, o.accept_len, o.accept_path);
  for (int64_t b = 0; b < a.bs; ++b) {  // int32 wrap-around, as numpy's int32 arithmetic
    const int64_t base = a.kv_cache ? int64_t(a.prefix_lens[b]) : 0;
    o.new_lens[b] = int32_t(uint32_t(base + 1 + o.accept_len[b]));
  }
}

}  // namespace kdtree
