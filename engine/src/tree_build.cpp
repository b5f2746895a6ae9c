// The DDTree best-first heap, translated from reference/tree_build.py line by line where it matters:
// the three score steps, the -inf rule and the total order. Compile without -ffast-math and with
// -ffp-contract=off (CMakeLists.txt does): TB.2.1 is a bit-exact clause.
#include "kdtree/tree_build.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kdtree/checks.hpp"
#include "kdtree/contract.hpp"
#include "kdtree/error_text.hpp"
#include "kdtree/paged.hpp"
#include "kdtree/threads.hpp"

namespace kdtree {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// The reference's three arithmetic steps, in its operation order.
inline double first_score(float lp0) { return double(lp0); }
inline double child_score(double s, float lp_child0) { return s + double(lp_child0); }
inline double sibling_score(double s, float lp_r, float lp_r1) { return (s - double(lp_r)) + double(lp_r1); }
inline bool selectable(double s) { return s != kNegInf; }  // TB.2.5

// A heap entry. Its rank tuple is its parent node's tuple followed by `rank`.
struct Cand {
  double s;
  int32_t parent, depth, rank;
};

// Rank tuples of the popped nodes, one row of L entries per node (ranks < K <= 1024 fit in 16 bits).
class Tuples {
 public:
  Tuples(int64_t nodes, int64_t L) : L_(L), t_(sz(nodes * L)) {}
  uint16_t at(const Cand& c, int32_t k) const {
    return k < c.depth - 1 ? t_[sz(c.parent * L_ + k)] : uint16_t(c.rank);
  }
  void store(int64_t node, const Cand& c) {
    for (int32_t k = 0; k < c.depth; ++k) t_[sz(node * L_ + k)] = at(c, k);
  }

 private:
  int64_t L_;
  std::vector<uint16_t> t_;
};

// True when a pops before b: score descending, then rank tuple lexicographically ascending
// (a proper prefix comes first, as Python tuple comparison has it). -0.0 and +0.0 are equal scores.
inline bool before(const Cand& a, const Cand& b, const Tuples& tup) {
  if (a.s != b.s) return a.s > b.s;
  const int32_t m = std::min(a.depth, b.depth);
  for (int32_t k = 0; k < m; ++k) {
    const uint16_t ra = tup.at(a, k), rb = tup.at(b, k);
    if (ra != rb) return ra < rb;
  }
  return a.depth < b.depth;
}

// One request: fills slots 1..n of the padded rows and returns n (the non-root nodes built).
int64_t build_one(const float* lp, const int32_t* ids, int64_t L, int64_t K_in, int64_t budget, int32_t* parents,
                  int32_t* depths, int32_t* tokens, int32_t* ranks, double* scores) {
  const int64_t K = std::min(budget, K_in);
  if (budget == 0 || L == 0 || K == 0) return 0;
  Tuples tup(1 + budget, L);
  std::vector<Cand> heap;
  heap.reserve(sz(2 * budget + 2));
  auto lower = [&tup](const Cand& x, const Cand& y) { return before(y, x, tup); };  // max-heap on "pops first"
  auto push = [&](const Cand& c) {
    heap.push_back(c);
    std::push_heap(heap.begin(), heap.end(), lower);
  };
  const double s0 = first_score(lp[0]);
  if (selectable(s0)) push({s0, 0, 1, 0});
  int64_t n = 0;
  while (!heap.empty() && n < budget) {
    std::pop_heap(heap.begin(), heap.end(), lower);
    const Cand e = heap.back();
    heap.pop_back();
    const int64_t i = ++n;
    tup.store(i, e);
    const float* row = lp + (e.depth - 1) * K_in;
    parents[i] = e.parent;
    depths[i] = e.depth;
    tokens[i] = ids[(e.depth - 1) * K_in + e.rank];
    ranks[i] = e.rank;
    scores[i] = e.s;
    if (e.rank + 1 < K) {
      const double s2 = sibling_score(e.s, row[e.rank], row[e.rank + 1]);
      if (selectable(s2)) push({s2, e.parent, e.depth, e.rank + 1});
    }
    if (e.depth < L) {
      const double s3 = child_score(e.s, lp[e.depth * K_in]);
      if (selectable(s3)) push({s3, int32_t(i), e.depth + 1, 0});
    }
  }
  return n;
}

// reference.tree_build.layouts for one request: visibility, positions, links, FULL_MASK block.
void layouts_one(int64_t D, int64_t n_nodes, int32_t prefix, const int32_t* parents, const int32_t* depths,
                 uint32_t* vis, int32_t* positions, int32_t* first_child, int32_t* next_sibling, uint8_t* full) {
  const int64_t W = (D + 31) / 32;
  std::vector<int32_t> last_child(sz(D), -1);
  for (int64_t i = 0; i < D; ++i) {
    uint32_t* row = vis + i * W;
    if (i == 0) {
      std::fill(row, row + W, 0u);
    } else if (i >= n_nodes) {  // pads: the root and themselves, linked to nothing
      std::copy(vis, vis + W, row);
    } else {
      const int32_t p = parents[i];
      std::copy(vis + p * W, vis + p * W + W, row);
      if (last_child[sz(p)] < 0)
        first_child[p] = int32_t(i);
      else
        next_sibling[last_child[sz(p)]] = int32_t(i);
      last_child[sz(p)] = int32_t(i);
    }
    row[i / 32] |= uint32_t(1) << (i % 32);
  }
  for (int64_t i = 0; i < D; ++i)  // int32 wrap-around, as numpy's astype(int32) of the int64 sum
    positions[i] = int32_t(uint32_t(int64_t(prefix) + depths[i]));
  if (!full) return;
  const int64_t cols = prefix + D;
  for (int64_t i = 0; i < D; ++i) {
    uint8_t* r = full + i * cols;
    std::fill(r, r + prefix, uint8_t(1));
    for (int64_t j = 0; j < D; ++j) r[prefix + j] = uint8_t((vis[i * W + j / 32] >> (j % 32)) & 1u);
  }
}

std::string row_name(int64_t b, int64_t d) { return "row [" + std::to_string(b) + ", " + std::to_string(d) + "]"; }

}  // namespace

void validate_tree_build(const TreeBuildArgs& a) {
  // the structural limits, for callers without an op file's structural pass (the C ABI, the decoder)
  check_symbol("top_logp", sym::kBs, a.bs);
  check_symbol("top_logp", sym::kL, a.L);
  check_symbol("top_logp", sym::kKIn, a.K_in);
  if (a.budget < 0 || a.budget > kMaxBudget)
    fail("budget", std::to_string(a.budget) + " is outside 0.." + std::to_string(kMaxBudget));
  // contract/tree_build.py _check_values, in its order
  const int64_t n = a.bs * a.L * a.K_in, K = a.K_in;
  const std::vector<int64_t> shape{a.bs, a.L, a.K_in};
  for (int64_t i = 0; i < n; ++i)
    if (std::isnan(a.top_logp[i])) fail("top_logp", "NaN at " + tuple_str(unravel(i, shape)));
  for (int64_t i = 0; i < n; ++i)
    if (a.top_logp[i] > 0.0f)
      fail("top_logp", "log-prob > 0 at " + tuple_str(unravel(i, shape)) + " (values must be <= 0 or -inf)");
  for (int64_t row = 0; row < a.bs * a.L && K > 1; ++row)
    for (int64_t r = 1; r < K; ++r)
      if (a.top_logp[row * K + r] > a.top_logp[row * K + r - 1])
        fail("top_logp", row_name(row / a.L, row % a.L) + " is not non-increasing at rank " + std::to_string(r));
  check_non_negative("top_ids", a.top_ids, shape, "token id");
  std::vector<int32_t> sorted(sz(K));
  for (int64_t row = 0; row < a.bs * a.L && K > 1; ++row) {
    std::copy(a.top_ids + row * K, a.top_ids + row * K + K, sorted.begin());
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      fail("top_ids", row_name(row / a.L, row % a.L) + " has duplicate token ids");
  }
  check_non_negative("root_tokens", a.root_tokens, {a.bs}, "token id");
  check_non_negative("prefix_lens", a.prefix_lens, {a.bs}, "length");
  const int64_t D = 1 + a.budget;
  check_context(a.prefix_lens, a.bs, D);
  if (a.with_full_mask) {
    const int64_t size = full_mask_size(a.prefix_lens, a.bs, D);
    if (size > kMaxFullMaskBytes)
      fail("with_full_mask", "the FULL_MASK layout would take " + std::to_string(size) +
                                 " bytes (D·(prefix_len + D) per request), more than " +
                                 std::to_string(kMaxFullMaskBytes) + "; use the visibility bitmask");
  }
}

int64_t full_mask_size(const int32_t* prefix_lens, int64_t bs, int64_t D) {
  int64_t sum = 0;
  for (int64_t b = 0; b < bs; ++b) sum += prefix_lens[b];
  return D * (sum + bs * D);
}

void tree_build(const TreeBuildArgs& a, const TreeBuildOut& o, int threads) {
  const int64_t D = 1 + a.budget, W = (D + 31) / 32;
  std::vector<int64_t> full_offset(sz(a.bs) + 1, 0);
  for (int64_t b = 0; b < a.bs; ++b) full_offset[sz(b) + 1] = full_offset[sz(b)] + D * (a.prefix_lens[b] + D);
  parallel_for(a.bs, threads, [&](int64_t b) {
    int32_t* par = o.parents + b * D;
    int32_t* dep = o.depths + b * D;
    int32_t* tok = o.tokens + b * D;
    int32_t* rk = o.ranks + b * D;
    double* sc = o.scores + b * D;
    std::fill(par, par + D, -1);
    std::fill(dep, dep + D, 0);
    std::fill(tok, tok + D, a.root_tokens[b]);
    std::fill(rk, rk + D, -1);
    std::fill(sc, sc + D, kNegInf);
    sc[0] = 0.0;
    const int64_t stride = a.L * a.K_in;
    const int64_t n = build_one(a.top_logp + b * stride, a.top_ids + b * stride, a.L, a.K_in, a.budget, par, dep, tok,
                                rk, sc);
    o.n_nodes[b] = int32_t(1 + n);
    std::fill(o.first_child + b * D, o.first_child + b * D + D, -1);
    std::fill(o.next_sibling + b * D, o.next_sibling + b * D + D, -1);
    uint8_t* full = a.with_full_mask ? o.full_mask + full_offset[sz(b)] : nullptr;
    layouts_one(D, 1 + n, a.prefix_lens[b], par, dep, o.visibility + b * D * W, o.positions + b * D,
                o.first_child + b * D, o.next_sibling + b * D, full);
  });
}

}  // namespace kdtree
