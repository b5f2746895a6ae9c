// libkdtree_cpu.so: the C ABI over tree_build (see include/kdtree/capi.h). No exception crosses it.
#include "kdtree/capi.h"

#include <cstring>
#include <exception>
#include <string>

#include "kdtree/contract.hpp"
#include "kdtree/drafter.hpp"
#include "kdtree/tree_build.hpp"

namespace {

void copy_message(const std::string& msg, char* err, size_t err_len) {
  if (!err || err_len == 0) return;
  const size_t n = msg.size() < err_len - 1 ? msg.size() : err_len - 1;
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) const char* kdtree_cpu_version(void) { return "kdtree-cpu 1"; }

__attribute__((visibility("default"))) int64_t kdtree_cpu_full_mask_size(const int32_t* prefix_lens, int64_t bs,
                                                                         int64_t budget) {
  return kdtree::full_mask_size(prefix_lens, bs, 1 + budget);
}

__attribute__((visibility("default"))) int kdtree_cpu_tree_build(
    const float* top_logp, const int32_t* top_ids, const int32_t* root_tokens, const int32_t* prefix_lens, int64_t bs,
    int64_t L, int64_t K_in, int64_t budget, int with_full_mask, int validate, int threads, int32_t* n_nodes,
    int32_t* parents, int32_t* depths, int32_t* tokens, int32_t* ranks, double* scores, uint32_t* visibility,
    int32_t* positions, int32_t* first_child, int32_t* next_sibling, uint8_t* full_mask, int64_t full_mask_len,
    char* err, size_t err_len) {
  try {
    kdtree::TreeBuildArgs a;
    a.top_logp = top_logp;
    a.top_ids = top_ids;
    a.root_tokens = root_tokens;
    a.prefix_lens = prefix_lens;
    a.bs = bs;
    a.L = L;
    a.K_in = K_in;
    a.budget = budget;
    a.with_full_mask = with_full_mask != 0;
    if (bs < 0 || L < 0 || K_in < 0) kdtree::fail("top_logp", "negative dimension");
    if (validate) kdtree::validate_tree_build(a);
    if (a.with_full_mask && (!full_mask || full_mask_len < kdtree::full_mask_size(prefix_lens, bs, 1 + budget)))
      kdtree::fail("full_mask", "the buffer is missing or shorter than kdtree_cpu_full_mask_size()");
    kdtree::TreeBuildOut o{n_nodes, parents, depths, tokens, ranks, scores, visibility,
                           positions, first_child, next_sibling, full_mask};
    kdtree::tree_build(a, o, threads);
    return 0;
  } catch (const kdtree::InputError& e) {
    copy_message(e.what(), err, err_len);
    return 1;
  } catch (const std::exception& e) {
    copy_message(std::string("internal error: ") + e.what(), err, err_len);
    return 2;
  }
}

__attribute__((visibility("default"))) void kdtree_cpu_draft_noise(uint64_t seed, int64_t P, int64_t d, int64_t vocab,
                                                                  double* out) {
  for (int64_t v = 0; v < vocab; ++v) out[v] = kdtree::draft_noise(seed, P, d, v);
}

}  // extern "C"
