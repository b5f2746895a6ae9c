// The decode loop (decoder.hpp). One round per step: draft (DDTree only), tree_build, target forward
// over the tree with tree_verify as attention, argmax per node, tree_accept walk, commit per layer.
#include "kdtree/decoder.hpp"

#include <algorithm>
#include <chrono>

#include "kdtree/contract.hpp"
#include "kdtree/drafter.hpp"
#include "kdtree/linalg.hpp"
#include "kdtree/tree_accept.hpp"
#include "kdtree/tree_build.hpp"

namespace kdtree {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr int64_t kPageSize = 16;
constexpr int64_t kPrefillChunk = 256;  // prompt rows per forward (a chain is a tree: Q <= 1 + 1024)

// The visibility of a chain of Q rows (row i sees rows 0..i): a tree, so prefill is one tree_verify.
std::vector<uint32_t> chain_visibility(int64_t Q) {
  const int64_t W = (Q + 31) / 32;
  std::vector<uint32_t> vis(sz(Q * W), 0u);
  for (int64_t i = 0; i < Q; ++i)
    for (int64_t j = 0; j <= i; ++j) vis[sz(i * W + j / 32)] |= uint32_t(1) << (j % 32);
  return vis;
}

// A phase of the decode: its seconds and its host<->device traffic, added to the result's totals when it ends.
class Phase {
 public:
  Phase(const Compute& comp, double& seconds, DeviceTraffic& io)
      : comp_(comp), seconds_(seconds), io_(io), t0_(Clock::now()), io0_(comp.traffic()) {}
  ~Phase() {
    seconds_ += since(t0_);
    io_ += comp_.traffic() - io0_;
  }
  Phase(const Phase&) = delete;
  Phase& operator=(const Phase&) = delete;

 private:
  const Compute& comp_;
  double& seconds_;
  DeviceTraffic& io_;
  Clock::time_point t0_;
  DeviceTraffic io0_;
};

// The tree of one round for the active requests (tree_build's outputs).
struct Tree {
  int64_t D = 0;
  std::vector<int32_t> n_nodes, parents, depths, tokens, ranks, positions, first_child, next_sibling;
  std::vector<double> scores;
  std::vector<uint32_t> visibility;
  explicit Tree(int64_t bs, int64_t budget) : D(1 + budget) {
    const size_t n = sz(bs * D);
    n_nodes.resize(sz(bs));
    for (auto* v : {&parents, &depths, &tokens, &ranks, &positions, &first_child, &next_sibling}) v->resize(n);
    scores.resize(n);
    visibility.resize(sz(bs * D * ((D + 31) / 32)));
  }
};

class Decoder {
 public:
  Decoder(const Model& m, const std::vector<std::vector<int32_t>>& prompts, const DecodeSettings& s,
          const Compute& comp)
      : m_(m), c_(m.config()), prompts_(prompts), s_(s), comp_(comp), bs_(int64_t(prompts.size())),
        cache_(c_.n_layers, bs_, capacity(), kPageSize) {
    r_.bs = bs_;
    r_.max_new = s.max_new;
    r_.tokens.assign(sz(bs_ * s.max_new), -1);
    r_.margins.assign(sz(bs_ * s.max_new), 0.0f);
    r_.accept_lens.resize(sz(bs_));
    r_.path_max_rank.resize(sz(bs_));
    P_.resize(sz(bs_));
    root_.resize(sz(bs_));
    emitted_.assign(sz(bs_), 0);
    if (s_.dump_cache) committed_rows_.resize(sz(c_.n_layers * bs_));
  }

  DecodeResult run() {
    const auto t0 = Clock::now();
    for (int64_t b = 0; b < bs_; ++b) prefill(b);
    r_.prefill = since(t0);
    r_.draft_topk_source = s_.host_topk ? comp_.Compute::draft_topk_source() : comp_.draft_topk_source();
    {
      const Phase loop(comp_, r_.decode, r_.io_decode);
      for (;;) {
        std::vector<int32_t> active;
        for (int64_t b = 0; b < bs_; ++b)
          if (emitted_[sz(b)] < s_.max_new) active.push_back(int32_t(b));
        if (active.empty()) break;
        round(active);
      }
    }
    r_.lengths.assign(P_.begin(), P_.end());
    if (s_.dump_cache) dump();
    return r_;
  }

 private:
  int64_t capacity() const {
    int64_t longest = 0;
    for (const auto& p : prompts_) longest = std::max(longest, int64_t(p.size()));
    return longest + s_.max_new + 1 + s_.budget + s_.depth + 1;
  }

  std::vector<float> forward(Rows& rows, ForwardTimes& t) { return m_.forward(rows, cache_, t, comp_); }

  void prefill(int64_t b) {
    const auto& p = prompts_[sz(b)];
    const int64_t n = int64_t(p.size());
    ForwardTimes t;
    for (int64_t c0 = 0; c0 < n - 1; c0 += kPrefillChunk) {
      const int64_t Q = std::min(kPrefillChunk, n - 1 - c0);
      Rows rows;
      rows.requests = {int32_t(b)};
      rows.Q = Q;
      rows.prefix_lens = {int32_t(c0)};
      for (int64_t i = 0; i < Q; ++i) {
        rows.tokens.push_back(p[sz(c0 + i)]);
        rows.positions.push_back(int32_t(c0 + i));
      }
      rows.visibility = chain_visibility(Q);
      forward(rows, t);
      if (s_.dump_cache) note_committed(b, c0, c0 + Q);
    }
    P_[sz(b)] = int32_t(n - 1);
    root_[sz(b)] = p[sz(n - 1)];
  }

  // The drafter: `depth` greedy target steps from each root (on scratch rows past the committed ones),
  // then the top-K of each depth's perturbed logits, by draft_topk over the whole round in one call (the GPU
  // kernel with --device cuda). Returns (top_logp, top_ids) [A, depth, K].
  void draft(const std::vector<int32_t>& A, int64_t K, std::vector<float>& lp, std::vector<int32_t>& ids) {
    const int64_t n = int64_t(A.size()), L = s_.depth, V = c_.vocab;
    std::vector<float> seq(sz(n * L * V));
    std::vector<int32_t> tok(sz(n));
    for (int64_t a = 0; a < n; ++a) tok[sz(a)] = root_[sz(A[sz(a)])];
    ForwardTimes t;
    for (int64_t k = 0; k < L; ++k) {
      Rows rows;
      rows.requests = A;
      rows.Q = 1;
      rows.tokens = tok;
      rows.visibility.assign(sz(n), 1u);
      for (int64_t a = 0; a < n; ++a) {
        rows.positions.push_back(int32_t(P_[sz(A[sz(a)])] + k));
        rows.prefix_lens.push_back(int32_t(P_[sz(A[sz(a)])] + k));
      }
      const std::vector<float> logits = forward(rows, t);
      for (int64_t a = 0; a < n; ++a) {
        std::copy_n(logits.data() + a * V, V, seq.data() + (a * L + k) * V);
        tok[sz(a)] = argmax(logits.data() + a * V, V);
      }
    }
    // Perturbed on the host, in place: the float32 values both top-k paths rank (drafter.hpp).
    for (int64_t a = 0; a < n; ++a)
      perturb_logits(seq.data() + a * L * V, L, V, P_[sz(A[sz(a)])], s_.draft, seq.data() + a * L * V);
    lp.resize(sz(n * L * K));
    ids.resize(sz(n * L * K));
    const Phase topk(comp_, r_.draft_topk, r_.io_draft_topk);
    // --host-topk: the CPU op on any backend (the base class's draft_topk, by a qualified call)
    if (s_.host_topk)
      comp_.Compute::draft_topk(seq.data(), n * L, V, K, lp.data(), ids.data());
    else
      comp_.draft_topk(seq.data(), n * L, V, K, lp.data(), ids.data());
  }

  void round(const std::vector<int32_t>& A) {
    const int64_t n = int64_t(A.size()), V = c_.vocab;
    const bool tree = s_.ddtree && s_.budget > 0;
    const int64_t B = tree ? s_.budget : 0, L = tree ? s_.depth : 0, K = tree ? std::min(B, V) : 0;
    std::vector<float> lp;
    std::vector<int32_t> ids;
    if (tree) {
      const Phase drafter(comp_, r_.drafter, r_.io_drafter);
      draft(A, K, lp, ids);
    }
    std::vector<int32_t> roots(sz(n)), prefix(sz(n));
    for (int64_t a = 0; a < n; ++a) {
      roots[sz(a)] = root_[sz(A[sz(a)])];
      prefix[sz(a)] = P_[sz(A[sz(a)])];
    }
    Tree tr(n, B);
    build(n, B, L, K, lp, ids, roots, prefix, tr);
    // the target over every tree node; its attention is tree_verify
    Rows rows;
    rows.requests = A;
    rows.Q = tr.D;
    rows.tokens = tr.tokens;
    rows.positions = tr.positions;
    rows.prefix_lens = prefix;
    rows.visibility = tr.visibility;
    ForwardTimes ft;
    const std::vector<float> logits = forward(rows, ft);
    const auto t = Clock::now();
    std::vector<int32_t> target(sz(n * tr.D));
    std::vector<float> margin(sz(n * tr.D));
    for (int64_t i = 0; i < n * tr.D; ++i) {
      target[sz(i)] = argmax(logits.data() + i * V, V);
      margin[sz(i)] = top2_margin(logits.data() + i * V, V);
    }
    r_.model += ft.other + since(t);
    r_.tree_verify += ft.attention;
    // tree_accept: the walk once, the commit on every layer's cache
    std::vector<int32_t> accept_len(sz(n)), path(sz(n * (1 + L))), emitted(path.size()), bonus(sz(n)), lens(sz(n));
    {
      const Phase accept(comp_, r_.tree_accept, r_.io_tree_accept);
      TreeAcceptArgs aa;
      aa.tokens = tr.tokens.data();
      aa.first_child = tr.first_child.data();
      aa.next_sibling = tr.next_sibling.data();
      aa.target_tokens = target.data();
      aa.bs = n;
      aa.D = tr.D;
      aa.max_depth = L;
      std::vector<int32_t> table(sz(n * cache_.max_pages));
      for (int64_t a = 0; a < n; ++a)
        std::copy_n(cache_.block_table.data() + A[sz(a)] * cache_.max_pages, cache_.max_pages,
                    table.data() + a * cache_.max_pages);
      aa.block_table = table.data();
      aa.prefix_lens = prefix.data();
      comp_.tree_accept(aa, TreeAcceptOut{accept_len.data(), path.data(), emitted.data(), bonus.data(), lens.data()},
                        cache_);
    }
    for (int64_t a = 0; a < n; ++a)
      record(A[sz(a)], accept_len[sz(a)], path.data() + a * (1 + L), emitted.data() + a * (1 + L), bonus[sz(a)],
             tr.ranks.data() + a * tr.D, margin.data() + a * tr.D);
  }

  // tree_build of the round's drafts (root-only trees without them) into tr.
  void build(int64_t n, int64_t B, int64_t L, int64_t K, const std::vector<float>& lp, const std::vector<int32_t>& ids,
             const std::vector<int32_t>& roots, const std::vector<int32_t>& prefix, Tree& tr) {
    const Phase phase(comp_, r_.tree_build, r_.io_tree_build);
    TreeBuildArgs ba;
    ba.top_logp = lp.data();
    ba.top_ids = ids.data();
    ba.root_tokens = roots.data();
    ba.prefix_lens = prefix.data();
    ba.bs = n;
    ba.L = L;
    ba.K_in = K;
    ba.budget = B;
    validate_tree_build(ba);  // the drafter's output meets the contract (cheap next to the forward)
    comp_.tree_build(ba, TreeBuildOut{tr.n_nodes.data(), tr.parents.data(), tr.depths.data(), tr.tokens.data(),
                                      tr.ranks.data(), tr.scores.data(), tr.visibility.data(), tr.positions.data(),
                                      tr.first_child.data(), tr.next_sibling.data(), nullptr});
  }

  // Emitted token j (the j-th accepted draft, then the bonus) is the target's choice at node path[j].
  void record(int64_t b, int32_t k, const int32_t* path, const int32_t* emitted, int32_t bonus, const int32_t* ranks,
              const float* margin) {
    int32_t top = -1;
    for (int32_t j = 1; j <= k; ++j) top = std::max(top, ranks[path[j]]);
    r_.accept_lens[sz(b)].push_back(k);
    r_.path_max_rank[sz(b)].push_back(top);
    for (int32_t j = 0; j <= k && emitted_[sz(b)] < s_.max_new; ++j) {
      r_.margins[sz(b * s_.max_new + emitted_[sz(b)])] = margin[path[j]];
      r_.tokens[sz(b * s_.max_new + emitted_[sz(b)]++)] = emitted[j];
    }
    const int32_t old = P_[sz(b)];
    P_[sz(b)] = old + 1 + k;
    root_[sz(b)] = bonus;
    if (s_.dump_cache) note_committed(b, old, P_[sz(b)]);
  }

  // Copies rows [from, to) of request b, as they are right after their commit, for the dump.
  void note_committed(int64_t b, int64_t from, int64_t to) {
    for (int64_t l = 0; l < c_.n_layers; ++l) {
      auto& rows = committed_rows_[sz(l * bs_ + b)];
      rows.resize(sz(to * kHeadDim));
      for (int64_t p = from; p < to; ++p) std::copy_n(cache_.row(l, b, p), kHeadDim, rows.data() + p * kHeadDim);
    }
  }

  void dump() {
    int64_t T = 0;
    for (int32_t p : P_) T = std::max<int64_t>(T, p);
    r_.T = T;
    r_.cache.assign(sz(c_.n_layers * bs_ * T * kHeadDim), 0.0f);
    r_.committed.assign(r_.cache.size(), 0.0f);
    for (int64_t l = 0; l < c_.n_layers; ++l)
      for (int64_t b = 0; b < bs_; ++b) {
        float* dst = r_.cache.data() + (l * bs_ + b) * T * kHeadDim;
        for (int64_t p = 0; p < P_[sz(b)]; ++p) std::copy_n(cache_.row(l, b, p), kHeadDim, dst + p * kHeadDim);
        const auto& rows = committed_rows_[sz(l * bs_ + b)];
        std::copy_n(rows.data(), std::min<size_t>(rows.size(), sz(T * kHeadDim)),
                    r_.committed.data() + (l * bs_ + b) * T * kHeadDim);
      }
  }

  const Model& m_;
  const ModelConfig& c_;
  const std::vector<std::vector<int32_t>>& prompts_;
  const DecodeSettings& s_;
  const Compute& comp_;
  int64_t bs_;
  PagedCache cache_;
  DecodeResult r_;
  std::vector<int32_t> P_, root_;  // committed rows and the next root token, per request
  std::vector<int64_t> emitted_;
  std::vector<std::vector<float>> committed_rows_;  // [layer * bs + b] -> rows as committed
};

}  // namespace

DecodeResult decode(const Model& model, const std::vector<std::vector<int32_t>>& prompts, const DecodeSettings& s,
                    const Compute& comp) {
  return Decoder(model, prompts, s, comp).run();
}

}  // namespace kdtree
