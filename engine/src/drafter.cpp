// The test drafter (drafter.hpp); the arithmetic order follows reference/drafter.py exactly.
#include "kdtree/drafter.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kdtree/contract.hpp"

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

void draft_topk(const float* logits, int64_t L, int64_t V, int64_t P, int64_t K, const DraftParams& p, float* top_logp,
                int32_t* top_ids) {
  std::vector<double> z(sz(V));
  std::vector<int32_t> order(sz(V));
  for (int64_t d = 1; d <= L; ++d) {
    const float* t = logits + (d - 1) * V;
    for (int64_t v = 0; v < V; ++v) z[sz(v)] = double(t[v]) / p.temperature + p.noise * draft_noise(p.seed, P, d, v);
    const double m = *std::max_element(z.begin(), z.end());
    double sum = 0.0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(z[sz(v)] - m);
    const double lse = m + std::log(sum);
    for (int64_t v = 0; v < V; ++v) {
      z[sz(v)] = z[sz(v)] - lse;
      order[sz(v)] = int32_t(v);
    }
    std::partial_sort(order.begin(), order.begin() + K, order.end(), [&z](int32_t a, int32_t b) {
      return z[sz(a)] > z[sz(b)] || (z[sz(a)] == z[sz(b)] && a < b);
    });
    for (int64_t k = 0; k < K; ++k) {
      top_ids[(d - 1) * K + k] = order[sz(k)];
      top_logp[(d - 1) * K + k] = float(z[sz(order[sz(k)])]);
    }
  }
}

}  // namespace kdtree
