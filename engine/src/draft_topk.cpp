// CPU draft_topk (draft_topk.hpp), step for step reference/draft_topk.py.
#include "kdtree/draft_topk.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "kdtree/bf16.hpp"
#include "kdtree/checks.hpp"
#include "kdtree/contract.hpp"
#include "kdtree/threads.hpp"

namespace kdtree {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// IEEE binary16 to double, exactly (subnormals, infinities and NaN included).
double half_to_double(uint16_t h) {
  const int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1F, frac = h & 0x3FF;
  double v;
  if (exp == 0)
    v = std::ldexp(double(frac), -24);
  else if (exp == 31)
    v = frac ? std::numeric_limits<double>::quiet_NaN() : kInf;
  else
    v = std::ldexp(double(frac | 0x400), exp - 25);
  return sign ? -v : v;
}

double logit_at(const DraftTopkArgs& a, int64_t i) {
  switch (a.dtype) {
    case LogitType::F32:
      return double(static_cast<const float*>(a.logits)[i]);
    case LogitType::F16:
      return half_to_double(static_cast<const uint16_t*>(a.logits)[i]);
    case LogitType::BF16:
      return double(bf16_to_float(static_cast<const uint16_t*>(a.logits)[i]));
  }
  return 0.0;
}

std::string where(const DraftTopkArgs& a, int64_t i) {
  const int64_t v = i % a.V, d = (i / a.V) % a.L, b = i / (a.V * a.L);
  return "[request " + std::to_string(b) + ", depth " + std::to_string(d) + ", token " + std::to_string(v) + "]";
}

// float32 of a float64 value, round to nearest even: below -FLT_MAX by half an ulp (2^103) or more it is -inf
// (the conversion itself is undefined there in C++).
float to_float(double v) {
  const double edge = double(FLT_MAX) + 0x1p103;
  if (v <= -edge) return -std::numeric_limits<float>::infinity();
  return static_cast<float>(v);
}

// One row of float64 logits (±0.0 already one value): the reference's ranked, row_lse and log_probs.
void row(std::vector<double>& x, std::vector<int32_t>& order, int64_t K, float* lp, int32_t* ids) {
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + K, order.end(), [&x](int32_t p, int32_t q) {
    return x[sz(p)] > x[sz(q)] || (x[sz(p)] == x[sz(q)] && p < q);
  });
  const double m = *std::max_element(x.begin(), x.end());
  double log_sum = 0.0;
  if (m != -kInf) {
    double s = 0.0;
    for (double v : x) s += std::exp(v - m);
    log_sum = std::log(s);
  }
  for (int64_t k = 0; k < K; ++k) {
    const int32_t id = order[sz(k)];
    ids[k] = id;
    lp[k] = m == -kInf ? -std::numeric_limits<float>::infinity() : to_float((x[sz(id)] - m) - log_sum);
  }
}

}  // namespace

void validate_draft_topk(const DraftTopkArgs& a) {
  check_symbol("logits", Symbol{"bs", 1, kMaxBatch, "batch size"}, a.bs);
  check_symbol("logits", Symbol{"L", 0, kMaxDepth, "depth"}, a.L);
  check_symbol("logits", Symbol{"V", 1, kMaxVocab, "vocabulary"}, a.V);
  if (a.K < 1 || a.K > kMaxTopK) fail("K", std::to_string(a.K) + " is outside 1.." + std::to_string(kMaxTopK));
  if (a.K > a.V)
    fail("K", std::to_string(a.K) + " > V=" + std::to_string(a.V) +
                  " (the vocabulary size: K tokens cannot be chosen from V)");
  const int64_t n = a.bs * a.L * a.V;
  for (int64_t i = 0; i < n; ++i)
    if (std::isnan(logit_at(a, i))) fail("logits", "NaN at " + where(a, i));
  for (int64_t i = 0; i < n; ++i)
    if (logit_at(a, i) == kInf)
      fail("logits", "+inf at " + where(a, i) + " (-inf masks a token; +inf has no log-prob)");
}

void draft_topk(const DraftTopkArgs& a, const DraftTopkOut& out, int threads) {
  parallel_for(a.bs * a.L, threads, [&](int64_t r) {
    std::vector<double> x(sz(a.V));
    std::vector<int32_t> order(sz(a.V));
    for (int64_t v = 0; v < a.V; ++v) x[sz(v)] = logit_at(a, r * a.V + v) + 0.0;  // -0.0 -> +0.0
    row(x, order, a.K, out.top_logp + r * a.K, out.top_ids + r * a.K);
  });
}

void draft_topk_row(const float* x, int64_t V, int64_t K, float* top_logp, int32_t* top_ids) {
  std::vector<double> x64(sz(V));
  std::vector<int32_t> order(sz(V));
  for (int64_t v = 0; v < V; ++v) x64[sz(v)] = double(x[v]) + 0.0;
  row(x64, order, K, top_logp, top_ids);
}

}  // namespace kdtree
