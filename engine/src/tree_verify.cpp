// Tree-verify attention on the CPU. See tree_verify.hpp for the numerics and the exact properties.
#include "kdtree/tree_verify.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kdtree/bf16.hpp"
#include "kdtree/checks.hpp"
#include "kdtree/contract.hpp"
#include "kdtree/error_text.hpp"
#include "kdtree/paged.hpp"
#include "kdtree/threads.hpp"

namespace kdtree {
namespace {

// A 576-term dot product with eight fixed partial sums, combined in a fixed tree: the same order for
// every query, key and thread (and vectorizable without reassociating anything).
inline float dot576(const float* a, const float* b) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < kHeadDim; i += 8)
    for (int64_t l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

inline bool bit(const uint32_t* row, int64_t j) { return (row[j / 32] >> (j % 32)) & 1u; }

std::string req_row(int64_t b, int64_t i) { return "request " + std::to_string(b) + " row " + std::to_string(i); }

}  // namespace

void check_visibility(const char* arg, const uint32_t* vis, int64_t bs, int64_t Q) {
  // word-based, O(bs * Q * W): bits j <= i ("allowed") and bit i ("own") of row i, as contract/trees.py
  const int64_t W = (Q + 31) / 32;
  auto row = [&](int64_t b, int64_t i) { return vis + (b * Q + i) * W; };
  auto allowed = [](int64_t i, int64_t w) -> uint32_t {  // bits j <= i within word w
    const int64_t top = i - 32 * w;
    return top < 0 ? 0u : top >= 31 ? ~0u : (uint32_t(2) << top) - 1u;
  };
  auto own = [](int64_t i, int64_t w) -> uint32_t { return i / 32 == w ? uint32_t(1) << (i % 32) : 0u; };
  if (Q % 32)
    for (int64_t r = 0; r < bs * Q; ++r)
      if (vis[r * W + W - 1] >> (Q % 32)) fail(arg, "bits beyond Q=" + std::to_string(Q) + " are set");
  for (int64_t b = 0; b < bs; ++b)
    for (int64_t i = 0; i < Q; ++i)
      if (!bit(row(b, i), i)) fail(arg, req_row(b, i) + " does not see itself");
  for (int64_t b = 0; b < bs; ++b)
    for (int64_t i = 0; i < Q; ++i)
      if (!bit(row(b, i), 0)) fail(arg, req_row(b, i) + " does not see the root");
  for (int64_t b = 0; b < bs; ++b)
    for (int64_t i = 0; i < Q; ++i)
      for (int64_t w = W; w-- > 0;) {  // the highest later row seen, as the contract names it
        const uint32_t later = row(b, i)[w] & ~allowed(i, w);
        if (later)
          fail(arg, req_row(b, i) + " sees a later row " + std::to_string(32 * w + 31 - __builtin_clz(later)) +
                        " (not a tree with parents before children)");
      }
  for (int64_t b = 0; b < bs; ++b)
    for (int64_t i = 1; i < Q; ++i) {
      int64_t parent = 0;  // the highest other bit of row i (bits above i are clear by now)
      for (int64_t w = i / 32; w >= 0; --w) {
        const uint32_t others = row(b, i)[w] & ~own(i, w);
        if (others) {
          parent = 32 * w + 31 - __builtin_clz(others);
          break;
        }
      }
      for (int64_t w = 0; w < W; ++w)
        if (row(b, i)[w] != (row(b, parent)[w] | own(i, w)))
          fail(arg, req_row(b, i) + " is not its parent's row plus itself (not an ancestor closure)");
    }
}

void validate_tree_verify(const TreeVerifyArgs& a) {
  // the structural limits and the scale, for callers without an op file's structural pass
  check_symbol("q", sym::kBs, a.bs);
  check_symbol("q", sym::kQ, a.Q);
  check_symbol("q", sym::kH, a.H);
  check_symbol("kv_cache", sym::kNumPages, a.num_pages);
  check_symbol("kv_cache", sym::kPageSize, a.page_size);
  check_symbol("block_table", sym::kMaxPages, a.max_pages);
  check_positive_float32("softmax_scale", a.softmax_scale);
  // contract/tree_verify.py _check_values, in its order
  check_cache_shape(a.num_pages, a.page_size);
  check_non_negative("prefix_lens", a.prefix_lens, {a.bs}, "length");
  check_context(a.prefix_lens, a.bs, a.Q);
  check_pages(a.num_pages, a.page_size, a.block_table, a.max_pages, a.prefix_lens, a.bs, a.Q);
  check_visibility("visibility", a.visibility, a.bs, a.Q);
}

void attend_rows(const float* q, int64_t H, const float* const* rows, int64_t n, float scale, bool round_p_bf16,
                 float* out, float* lse, float* s) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t h = 0; h < H; ++h) s[h * n + j] = dot576(q + h * kHeadDim, rows[j]) * scale;
  for (int64_t h = 0; h < H; ++h) {
    float* sh = s + h * n;
    float m = sh[0];
    for (int64_t j = 1; j < n; ++j) m = std::max(m, sh[j]);
    float l = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      sh[j] = std::exp(sh[j] - m);
      l += sh[j];
    }
    for (int64_t j = 0; j < n; ++j) sh[j] = round_p_bf16 ? round_bf16(sh[j] / l) : sh[j] / l;
    lse[h] = m + std::log(l);
    std::fill(out + h * kLatent, out + h * kLatent + kLatent, 0.0f);
  }
  for (int64_t j = 0; j < n; ++j) {
    const float* v = rows[j];
    for (int64_t h = 0; h < H; ++h) {
      const float p = s[h * n + j];
      float* o = out + h * kLatent;
      for (int64_t d = 0; d < kLatent; ++d) o[d] += p * v[d];
    }
  }
}

void tree_verify(const TreeVerifyArgs& a, const TreeVerifyOut& o, int threads) {
  const int64_t W = (a.Q + 31) / 32, H = a.H;
  const bool bf16 = a.dtype == DType::BF16;
  const float scale = float(a.softmax_scale);
  parallel_for(a.bs * a.Q, threads, [&](int64_t item) {
    const int64_t b = item / a.Q, i = item % a.Q;
    const int64_t P = a.prefix_lens[b];
    const uint32_t* vrow = a.visibility + item * W;
    std::vector<int64_t> pos;
    pos.reserve(sz(P + a.Q));
    for (int64_t p = 0; p < P; ++p) pos.push_back(p);
    for (int64_t j = 0; j <= i; ++j)
      if (bit(vrow, j)) pos.push_back(P + j);
    const int64_t n = int64_t(pos.size());
    std::vector<const float*> rows(sz(n));
    std::vector<float> widened;  // bf16 rows widened to float32 (exact)
    if (bf16) widened.resize(sz(n * kHeadDim));
    for (int64_t j = 0; j < n; ++j) {
      const int64_t p = pos[sz(j)];
      const int64_t r = int64_t(a.block_table[b * a.max_pages + p / a.page_size]) * a.page_size + p % a.page_size;
      if (bf16) {
        const uint16_t* src = static_cast<const uint16_t*>(a.kv_cache) + r * kHeadDim;
        float* dst = widened.data() + j * kHeadDim;
        for (int64_t d = 0; d < kHeadDim; ++d) dst[d] = bf16_to_float(src[d]);
        rows[sz(j)] = dst;
      } else {
        rows[sz(j)] = static_cast<const float*>(a.kv_cache) + r * kHeadDim;
      }
    }
    std::vector<float> qf(sz(H * kHeadDim)), out(sz(H * kLatent)), scratch(sz(H * n));
    const int64_t q0 = item * H * kHeadDim;
    for (int64_t k = 0; k < H * kHeadDim; ++k)
      qf[sz(k)] = bf16 ? bf16_to_float(static_cast<const uint16_t*>(a.q)[q0 + k]) : static_cast<const float*>(a.q)[q0 + k];
    attend_rows(qf.data(), H, rows.data(), n, scale, bf16, out.data(), o.lse + item * H, scratch.data());
    const int64_t o0 = item * H * kLatent;
    for (int64_t k = 0; k < H * kLatent; ++k) {
      if (bf16)
        static_cast<uint16_t*>(o.out)[o0 + k] = float_to_bf16(out[sz(k)]);
      else
        static_cast<float*>(o.out)[o0 + k] = out[sz(k)];
    }
  });
}

}  // namespace kdtree
