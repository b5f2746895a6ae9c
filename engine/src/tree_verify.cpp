// Tree-verify attention on the CPU. See tree_verify.hpp for the numerics and the exact properties.
#include "kdtree/tree_verify.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kdtree/bf16.hpp"
#include "kdtree/contract.hpp"
#include "kdtree/format.hpp"
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

void check_paged_rows(int64_t num_pages, int64_t page_size, const int32_t* block_table, int64_t max_pages,
                      const int32_t* prefix_lens, int64_t bs, int64_t rows) {
  for (int64_t b = 0; b < bs; ++b) {
    const int64_t need = (int64_t(prefix_lens[b]) + rows + page_size - 1) / page_size;
    if (need > max_pages)
      fail("block_table", "request " + std::to_string(b) + " needs " + std::to_string(need) + " pages for prefix " +
                              std::to_string(prefix_lens[b]) + " + " + std::to_string(rows) + " rows, the table has " +
                              std::to_string(max_pages));
  }
  for (int64_t b = 0; b < bs; ++b) {
    const int64_t need = (int64_t(prefix_lens[b]) + rows + page_size - 1) / page_size;
    for (int64_t j = 0; j < need; ++j) {
      const int32_t p = block_table[b * max_pages + j];
      if (p < 0 || p >= num_pages)
        fail("block_table", "[" + std::to_string(b) + ", " + std::to_string(j) + "] = " + std::to_string(p) +
                                " is not a page index in 0.." + std::to_string(num_pages - 1));
    }
  }
}

void check_visibility(const char* arg, const uint32_t* vis, int64_t bs, int64_t Q) {
  const int64_t W = (Q + 31) / 32;
  auto row = [&](int64_t b, int64_t i) { return vis + (b * Q + i) * W; };
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
      for (int64_t j = i + 1; j < Q; ++j)
        if (bit(row(b, i), j))
          fail(arg, req_row(b, i) + " sees a later row " + std::to_string(j) +
                        " (not a tree with parents before children)");
  for (int64_t i = 1; i < Q; ++i)
    for (int64_t b = 0; b < bs; ++b) {
      int64_t parent = i - 1;
      while (parent > 0 && !bit(row(b, i), parent)) --parent;
      // row i must equal row parent plus bit i (bits above i are already known to be clear)
      bool ok = true;
      for (int64_t j = 0; j < Q && ok; ++j) ok = bit(row(b, i), j) == (j == i || bit(row(b, parent), j));
      if (!ok) fail(arg, req_row(b, i) + " is not its parent's row plus itself (not an ancestor closure)");
    }
}

void validate_tree_verify(const TreeVerifyArgs& a) {
  if (a.bs < 1 || a.bs > kMaxBatch)
    fail("q", "batch size " + std::to_string(a.bs) + " is outside 1.." + std::to_string(kMaxBatch));
  if (a.Q < 1 || a.Q > 1 + kMaxBudget)
    fail("q", "Q=" + std::to_string(a.Q) + " is outside 1.." + std::to_string(1 + kMaxBudget));
  if (a.H < 1) fail("q", "needs at least one head");
  if (a.num_pages < 1 || a.page_size < 1)
    fail("kv_cache", "shape " + tuple_str({a.num_pages, a.page_size, kHeadDim}) + ", expected [num_pages >= 1, " +
                         "page_size >= 1, " + std::to_string(kHeadDim) + "]");
  if (!std::isfinite(a.softmax_scale) || a.softmax_scale <= 0)
    fail("softmax_scale", float_repr(a.softmax_scale) + " must be a finite float > 0");
  for (int64_t b = 0; b < a.bs; ++b)
    if (a.prefix_lens[b] < 0) fail("prefix_lens", "negative length at " + tuple_str({b}));
  check_paged_rows(a.num_pages, a.page_size, a.block_table, a.max_pages, a.prefix_lens, a.bs, a.Q);
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
