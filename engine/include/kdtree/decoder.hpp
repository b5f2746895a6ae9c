// Greedy decoding with the model, autoregressive or DDTree, every step made of the three ops:
// tree_build (root-only in AR mode), the target forward whose attention is tree_verify, and tree_accept
// (the greedy walk, then its commit applied to every layer's cache). Requests are batched: each round
// runs all unfinished requests together, each at its own prefix length.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kdtree/drafter.hpp"
#include "kdtree/model.hpp"

namespace kdtree {

struct DecodeSettings {
  bool ddtree = false;
  int64_t budget = 0;  // non-root nodes per tree (DDTree)
  int64_t depth = 8;   // draft depth L (DDTree)
  int64_t max_new = 0;
  DraftParams draft;
  // The drafter's top-k by the CPU op even on the GPU backend (the engine's path before issue #33), so that
  // one build reports the traffic of both paths.
  bool host_topk = false;
  bool dump_cache = false;
  int threads = 0;
};

struct DecodeResult {
  int64_t bs = 0, max_new = 0;
  std::vector<int32_t> tokens;                       // [bs, max_new]
  std::vector<float> margins;                        // [bs, max_new]: top-1 minus top-2 logit behind each token
  std::vector<std::vector<int32_t>> accept_lens;     // per request, per round: drafts accepted
  std::vector<std::vector<int32_t>> path_max_rank;   // per request, per round: highest rank on the path (-1: none)
  std::vector<int32_t> lengths;                      // committed cache rows per request at the end
  // seconds: prefill; the decode loop; inside it the drafter (and inside that its top-k, draft_topk), and the
  // step's tree_build, tree_verify (the target's attention), tree_accept (walk and commit) and the rest of the
  // target forward
  double prefill = 0, decode = 0, drafter = 0, draft_topk = 0, tree_build = 0, tree_verify = 0, tree_accept = 0,
         model = 0;
  // host<->device traffic (Compute::traffic) of the same phases: the decode loop, the drafter, its top-k,
  // tree_build and tree_accept (zeros on the CPU)
  DeviceTraffic io_decode, io_drafter, io_draft_topk, io_tree_build, io_tree_accept;
  std::string draft_topk_source;  // what ran the drafter's top-k (Compute::draft_topk_source)
  int64_t T = 0;                     // rows of the dumps (the longest committed length)
  std::vector<float> cache;          // [layers, bs, T, 576]: the final committed rows (dump_cache)
  std::vector<float> committed;      // [layers, bs, T, 576]: each row as the round that committed it left it
};

// prompts[b] are token ids in 0..vocab-1 (at least one each); checked by the caller. The arithmetic and the
// ops run on `comp` (the CPU's Compute, or the CUDA backend's).
DecodeResult decode(const Model& model, const std::vector<std::vector<int32_t>>& prompts, const DecodeSettings& s,
                    const Compute& comp);

}  // namespace kdtree
