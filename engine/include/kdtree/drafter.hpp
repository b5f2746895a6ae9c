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

// Target logits [L, V] of depths 1..L after the root at position P -> the drafter's logits `out` [L, V] (`out`
// may be `logits`: in place), each perturbed in float64 (logit / temperature + noise * n(seed, P, d, v)) and
// rounded to float32. Their per-depth top-k, tree_build's input, is the draft_topk op on them (ranked by logit, ties to the lower token
// id; spec/draft_topk.md), run by the decoder's Compute (the CPU, or the GPU kernel with --device cuda).
void perturb_logits(const float* logits, int64_t L, int64_t V, int64_t P, const DraftParams& p, float* out);

}  // namespace kdtree
