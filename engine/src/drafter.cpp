// The test drafter (drafter.hpp); the arithmetic order follows reference/drafter.py exactly.
#include "kdtree/drafter.hpp"

namespace kdtree {
namespace {

inline uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr double kSqrt3 = 1.7320508075688772;  // the same float64 as reference/drafter.py's SQRT3

}  // namespace

double draft_noise(uint64_t seed, int64_t P, int64_t d, int64_t v) {
  const uint64_t key = splitmix64(splitmix64(splitmix64(seed) ^ uint64_t(P)) ^ uint64_t(d));
  const uint64_t base = key ^ (uint64_t(v) * 4u);
  double u[4];
  for (uint64_t j = 0; j < 4; ++j) u[j] = double(splitmix64(base ^ j) >> 11) * 0x1p-53;
  return (((u[0] + u[1]) + u[2]) + u[3] - 2.0) * kSqrt3;
}

void perturb_logits(const float* logits, int64_t L, int64_t V, int64_t P, const DraftParams& p, float* out) {
  for (int64_t d = 1; d <= L; ++d) {
    const float* t = logits + (d - 1) * V;
    float* z = out + (d - 1) * V;
    for (int64_t v = 0; v < V; ++v)
      z[v] = static_cast<float>(double(t[v]) / p.temperature + p.noise * draft_noise(p.seed, P, d, v));
  }
}

}  // namespace kdtree
