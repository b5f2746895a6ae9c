// The deterministic test drafter of reference/drafter.py: the target's greedy continuation's logits,
// perturbed with counter-based seeded noise, as tree_build's per-depth top-k (same noise bits as numpy).
#pragma once
#include <cstdint>

namespace kdtree {

struct DraftParams {
  uint64_t seed = 0;
  double noise = 1.0;        // scale of the noise added to the logits
  double temperature = 1.0;  // the target logits are divided by it first
};

// n(seed, P, d, v): the approximately normal variate of reference.drafter.noise (mean 0, variance 1).
double draft_noise(uint64_t seed, int64_t P, int64_t d, int64_t v);

// Target logits [L, V] of depths 1..L after the root at position P -> top_logp [L, K] (float32
// log-probs, descending) and top_ids [L, K]: the perturbed logits rounded to float32, then the draft_topk op
// on them (ranked by logit, ties to the lower token id; spec/draft_topk.md).
void draft_topk(const float* logits, int64_t L, int64_t V, int64_t P, int64_t K, const DraftParams& p, float* top_logp,
                int32_t* top_ids);

}  // namespace kdtree
