// The CUDA backend's two faces (cuda.hpp): the op backend of op files (host arrays staged to the GPU for
// each call) and the decoder's Compute (weights and the paged latent cache resident on the GPU).
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "dense.hpp"
#include "device.hpp"
#include "kdtree/cli.hpp"
#include "kdtree/contract.hpp"
#include "launch.hpp"

namespace kdtree {
namespace cuda {
namespace {

size_t item(DType t) { return t == DType::BF16 ? 2 : 4; }

// The variant each op uses: `requested` for the op that has it, otherwise the op's default.
struct Chosen {
  const Variant* build;
  const Variant* verify;
  const Variant* accept;
  const Variant* topk;
};

// UsageError unless `requested` ("" = none) names a compiled variant (of `only_op`, when given).
void check_variant_name(const std::string& requested, const std::string& only_op) {
  if (!requested.empty()) {
    bool known = false;
    std::string have;
    for (const Variant* v : variants()) {
      known = known || ((only_op.empty() || only_op == v->slug) && requested == v->variant);
      if (only_op.empty() || only_op == v->slug) have += (have.empty() ? "" : ", ") + std::string(v->variant);
    }
    if (!known)
      throw UsageError("--variant: '" + requested + "' is not a kernel variant" +
                       (only_op.empty() ? "" : " of " + only_op) + " (have: " + have + ")");
  }
}

// The variant of `slug` to run: `requested` when it is one of slug's, else slug's default for `dtype`.
const Variant& variant_for(const char* slug, const std::string& requested, const std::string& dtype) {
  bool mine = false;
  for (const Variant* v : variants(slug)) mine = mine || requested == v->variant;
  return pick(slug, mine ? requested : "", dtype);
}

Chosen choose(const std::string& requested, const std::string& verify_dtype) {
  return Chosen{&variant_for("tree_build", requested, ""), &variant_for("tree_verify", requested, verify_dtype),
                &variant_for("tree_accept", requested, ""), &variant_for("draft_topk", requested, "")};
}

// Op files: every array staged to the GPU for the call and the results read back.
class CudaOps : public OpBackend {
 public:
  CudaOps(const std::string& variant, const std::string& op) : requested_(variant) {
    check_variant_name(variant, op);  // a usage error before the GPU is asked for anything
    choose(variant, "");              // no usable GPU, or the variant not built for it: say so before any request
  }

  void tree_build(const TreeBuildArgs& a, const TreeBuildOut& o) const override {
    const Variant& v = variant("tree_build", "");
    const int64_t bs = a.bs, D = 1 + a.budget, W = (D + 31) / 32, n = bs * a.L * a.K_in;
    DevBuf lp(a.top_logp, sz(n) * 4), ids(a.top_ids, sz(n) * 4), roots(a.root_tokens, sz(bs) * 4),
        pre(a.prefix_lens, sz(bs) * 4);
    const size_t nd = sz(bs * D);
    DevBuf n_nodes(sz(bs) * 4), parents(nd * 4), depths(nd * 4), tokens(nd * 4), ranks(nd * 4), scores(nd * 8),
        vis(nd * sz(W) * 4), positions(nd * 4), fc(nd * 4), ns(nd * 4);
    const size_t mask = a.with_full_mask ? sz(full_mask_size(a.prefix_lens, bs, D)) : 0;
    DevBuf full(mask);
    launch_tree_build(v, BuildOnDevice{lp.as<float>(), ids.as<int32_t>(), roots.as<int32_t>(), pre.as<int32_t>(),
                                       bs, a.L, a.K_in, a.budget, n_nodes.as<int32_t>(), parents.as<int32_t>(),
                                       depths.as<int32_t>(), tokens.as<int32_t>(), ranks.as<int32_t>(),
                                       scores.as<double>(), vis.as<uint32_t>(), positions.as<int32_t>(),
                                       fc.as<int32_t>(), ns.as<int32_t>(),
                                       a.with_full_mask ? full.as<uint8_t>() : nullptr});
    n_nodes.download(o.n_nodes, sz(bs) * 4);
    parents.download(o.parents, nd * 4);
    depths.download(o.depths, nd * 4);
    tokens.download(o.tokens, nd * 4);
    ranks.download(o.ranks, nd * 4);
    scores.download(o.scores, nd * 8);
    vis.download(o.visibility, nd * sz(W) * 4);
    positions.download(o.positions, nd * 4);
    fc.download(o.first_child, nd * 4);
    ns.download(o.next_sibling, nd * 4);
    if (mask) full.download(o.full_mask, mask);
  }

  void tree_verify(const TreeVerifyArgs& a, const TreeVerifyOut& o) const override {
    const bool bf16 = a.dtype == DType::BF16;
    const Variant& v = variant("tree_verify", bf16 ? "bf16" : "fp32");
    const size_t it = item(a.dtype), rows = sz(a.bs * a.Q * a.H), W = sz((a.Q + 31) / 32);
    DevBuf q(a.q, rows * sz(kHeadDim) * it), kv(a.kv_cache, sz(a.num_pages * a.page_size * kHeadDim) * it),
        bt(a.block_table, sz(a.bs * a.max_pages) * 4), pre(a.prefix_lens, sz(a.bs) * 4),
        vis(a.visibility, sz(a.bs * a.Q) * W * 4), out(rows * sz(kLatent) * it), lse(rows * 4);
    launch_tree_verify(v, VerifyOnDevice{q.as<void>(), kv.as<void>(), bf16, bt.as<int32_t>(), pre.as<int32_t>(),
                                         vis.as<uint32_t>(), a.prefix_lens, a.bs, a.Q, a.H, a.page_size,
                                         a.max_pages, float(a.softmax_scale), out.as<void>(), lse.as<float>(),
                                         a.num_pages});
    out.download(o.out, rows * sz(kLatent) * it);
    lse.download(o.lse, rows * 4);
  }

  void tree_accept(const TreeAcceptArgs& a, const TreeAcceptOut& o) const override {
    const Variant& v = variant("tree_accept", "");
    const size_t nd = sz(a.bs * a.D), np = sz(a.bs * (1 + a.max_depth));
    DevBuf tok(a.tokens, nd * 4), fc(a.first_child, nd * 4), ns(a.next_sibling, nd * 4),
        tgt(a.target_tokens, nd * 4), len(sz(a.bs) * 4), path(np * 4), emitted(np * 4), bonus(sz(a.bs) * 4),
        lens(sz(a.bs) * 4);
    const bool commit = a.kv_cache != nullptr;
    const size_t kv_bytes = commit ? sz(a.num_pages * a.page_size * kHeadDim) * item(a.dtype) : 0;
    DevBuf kv(a.kv_cache, kv_bytes), bt(a.block_table, commit ? sz(a.bs * a.max_pages) * 4 : 0),
        pre(a.prefix_lens, commit ? sz(a.bs) * 4 : 0);
    launch_tree_accept(v, AcceptOnDevice{tok.as<int32_t>(), fc.as<int32_t>(), ns.as<int32_t>(), tgt.as<int32_t>(),
                                         a.bs, a.D, a.max_depth, len.as<int32_t>(), path.as<int32_t>(),
                                         emitted.as<int32_t>(), bonus.as<int32_t>(), lens.as<int32_t>(),
                                         commit ? kv.as<void>() : nullptr, int64_t(kHeadDim * item(a.dtype)),
                                         a.page_size, a.max_pages, bt.as<int32_t>(), pre.as<int32_t>()});
    len.download(o.accept_len, sz(a.bs) * 4);
    path.download(o.accept_path, np * 4);
    emitted.download(o.emitted, np * 4);
    bonus.download(o.bonus, sz(a.bs) * 4);
    lens.download(o.new_lens, sz(a.bs) * 4);
    if (commit) kv.download(a.kv_cache, kv_bytes);
  }

  void draft_topk(const DraftTopkArgs& a, const DraftTopkOut& o) const override {
    const Variant& v = variant("draft_topk", "");
    const size_t rows = sz(a.bs * a.L), it = a.dtype == LogitType::F32 ? 4 : 2;
    DevBuf x(a.logits, rows * sz(a.V) * it), lp(rows * sz(a.K) * 4), ids(rows * sz(a.K) * 4);
    launch_draft_topk(v, DraftTopkOnDevice{x.as<void>(), a.dtype, int64_t(rows), a.V, a.K, lp.as<float>(),
                                           ids.as<int32_t>()});
    lp.download(o.top_logp, rows * sz(a.K) * 4);
    ids.download(o.top_ids, rows * sz(a.K) * 4);
  }

 private:
  const Variant& variant(const char* slug, const std::string& dtype) const {
    return variant_for(slug, requested_, dtype);
  }

  std::string requested_;
};

// The decoder's arithmetic: weights uploaded once (by their host address), every layer's cache pool mirrored
// on the GPU (rows uploaded as the model writes them, commits made there by tree_accept and on the host copy
// alike), the attention by tree_verify over the GPU pool.
class CudaCompute : public Compute {
 public:
  explicit CudaCompute(const std::string& variant) : Compute(0) {
    check_variant_name(variant, "");
    const Chosen c = choose(variant, "fp32");  // the model's cache is float32
    verify_ = c.verify;
    accept_ = c.accept;
    topk_ = c.topk;
    ops_ = std::make_unique<CudaOps>(variant, "");  // tree_build on host arrays
  }

  const char* name() const override { return "cuda"; }

  void matmul(const float* x, int64_t x_stride, int64_t N, int64_t in, const float* W, int64_t out, float* y,
              int64_t y_stride) const override {
    if (N == 0) return;
    auto it = weights_.find(W);
    if (it == weights_.end()) it = weights_.emplace(W, DevBuf(W, sz(in * out) * 4)).first;
    float* xd = scratch(x_, sz(N * in) * 4);
    float* yd = scratch(y_, sz(N * out) * 4);
    copy_rows_to_device(xd, sz(in) * 4, x, sz(x_stride) * 4, sz(in) * 4, sz(N), "matmul input");
    dense_matmul(xd, in, N, in, it->second.as<float>(), out, yd);
    copy_rows_to_host(y, sz(y_stride) * 4, yd, sz(out) * 4, sz(out) * 4, sz(N), "matmul output");
  }

  void rows_written(const PagedCache& cache, int64_t layer, const std::vector<int64_t>& offsets) const override {
    float* pool = this->pool(cache, layer);
    std::vector<float> rows(offsets.size() * sz(kHeadDim));
    for (size_t r = 0; r < offsets.size(); ++r)
      std::memcpy(rows.data() + r * sz(kHeadDim), cache.pools[sz(layer)].data() + offsets[r], sz(kHeadDim) * 4);
    DevBuf rd(rows.data(), rows.size() * 4), od(offsets.data(), offsets.size() * 8);
    scatter_rows(rd.as<float>(), od.as<int64_t>(), int64_t(offsets.size()), pool);
    synchronize("cache rows");
  }

  void tree_verify(const PagedCache& cache, int64_t layer, const TreeVerifyArgs& a,
                   const TreeVerifyOut& o) const override {
    const size_t rows = sz(a.bs * a.Q * a.H), W = sz((a.Q + 31) / 32);
    DevBuf q(a.q, rows * sz(kHeadDim) * 4), bt(a.block_table, sz(a.bs * a.max_pages) * 4),
        pre(a.prefix_lens, sz(a.bs) * 4), vis(a.visibility, sz(a.bs * a.Q) * W * 4), out(rows * sz(kLatent) * 4),
        lse(rows * 4);
    launch_tree_verify(*verify_, VerifyOnDevice{q.as<void>(), pool(cache, layer), false, bt.as<int32_t>(),
                                                pre.as<int32_t>(), vis.as<uint32_t>(), a.prefix_lens, a.bs, a.Q,
                                                a.H, a.page_size, a.max_pages, float(a.softmax_scale),
                                                out.as<void>(), lse.as<float>()});
    out.download(o.out, rows * sz(kLatent) * 4);
    lse.download(o.lse, rows * 4);
  }

  void tree_build(const TreeBuildArgs& a, const TreeBuildOut& o) const override { ops_->tree_build(a, o); }

  void tree_accept(const TreeAcceptArgs& a, const TreeAcceptOut& o, PagedCache& cache) const override {
    const size_t nd = sz(a.bs * a.D), np = sz(a.bs * (1 + a.max_depth));
    DevBuf tok(a.tokens, nd * 4), fc(a.first_child, nd * 4), ns(a.next_sibling, nd * 4),
        tgt(a.target_tokens, nd * 4), len(sz(a.bs) * 4), path(np * 4), emitted(np * 4), bonus(sz(a.bs) * 4),
        lens(sz(a.bs) * 4), bt(a.block_table, sz(a.bs * cache.max_pages) * 4), pre(a.prefix_lens, sz(a.bs) * 4);
    // The op once per layer on that layer's GPU pool: the walk (the same each time) and the commit.
    for (int64_t l = 0; l < cache.layers; ++l)
      launch_tree_accept(*accept_, AcceptOnDevice{tok.as<int32_t>(), fc.as<int32_t>(), ns.as<int32_t>(),
                                                  tgt.as<int32_t>(), a.bs, a.D, a.max_depth, len.as<int32_t>(),
                                                  path.as<int32_t>(), emitted.as<int32_t>(), bonus.as<int32_t>(),
                                                  lens.as<int32_t>(), pool(cache, l), int64_t(kHeadDim * 4),
                                                  cache.page_size, cache.max_pages, bt.as<int32_t>(),
                                                  pre.as<int32_t>()});
    len.download(o.accept_len, sz(a.bs) * 4);
    path.download(o.accept_path, np * 4);
    emitted.download(o.emitted, np * 4);
    bonus.download(o.bonus, sz(a.bs) * 4);
    lens.download(o.new_lens, sz(a.bs) * 4);
    cache.commit(a, o);  // the host copy of the cache (what --dump-cache reports) gets the same row copies
  }

  // The drafter's logits are formed on the host (drafter.cpp: the float64 perturbation rounded to float32) and
  // uploaded once per round, every request's depths in one copy: the kernel ranks exactly the float32 values the
  // CPU path ranks, so its ids are the CPU's bit for bit by construction (DT.2.1), with no claim needed about the
  // device's float64 arithmetic. Log-probs and ids come back in one copy (one buffer: log-probs, then ids).
  void draft_topk(const float* logits, int64_t rows, int64_t V, int64_t K, float* top_logp,
                  int32_t* top_ids) const override {
    const size_t n_in = sz(rows * V), n_out = sz(rows * K);
    float* x = scratch(topk_in_, n_in * 4);
    float* lp = scratch(topk_out_, n_out * 8);
    int32_t* ids = reinterpret_cast<int32_t*>(lp + n_out);
    copy_to_device(x, logits, n_in * 4, "draft_topk logits");
    launch_draft_topk(*topk_, DraftTopkOnDevice{x, LogitType::F32, rows, V, K, lp, ids});
    topk_host_.resize(n_out * 2);
    copy_to_host(topk_host_.data(), lp, n_out * 8, "draft_topk results");
    std::memcpy(top_logp, topk_host_.data(), n_out * 4);
    std::memcpy(top_ids, topk_host_.data() + n_out, n_out * 4);
  }

  std::string draft_topk_source() const override { return std::string("cuda ") + topk_->name(); }

  DeviceTraffic traffic() const override { return cuda::traffic(); }

 private:
  // A scratch buffer of at least `bytes`, kept between calls (no cudaMalloc/cudaFree per matmul).
  static float* scratch(DevBuf& b, size_t bytes) {
    if (b.bytes() < bytes) b = DevBuf(bytes * 2);
    return b.as<float>();
  }

  // Layer l's pool on the GPU (zeros until rows are written; the ops only read rows written before).
  float* pool(const PagedCache& cache, int64_t layer) const {
    if (pools_.empty()) {
      for (int64_t l = 0; l < cache.layers; ++l) {
        const size_t bytes = cache.pools[sz(l)].size() * 4;
        pools_.emplace_back(bytes);
        check(cudaMemset(pools_.back().as<void>(), 0, bytes), "cache pool");
      }
    }
    return pools_[sz(layer)].as<float>();
  }

  const Variant* verify_ = nullptr;
  const Variant* accept_ = nullptr;
  const Variant* topk_ = nullptr;
  std::unique_ptr<CudaOps> ops_;
  mutable std::unordered_map<const float*, DevBuf> weights_;
  mutable std::vector<DevBuf> pools_;
  mutable DevBuf x_, y_;  // matmul operands
  mutable DevBuf topk_in_, topk_out_;        // the drafter's logits and its top-k, kept between rounds
  mutable std::vector<uint32_t> topk_host_;  // the top-k's one download (log-prob bits, then ids)
};

}  // namespace

std::unique_ptr<OpBackend> make_ops(const std::string& variant, const std::string& op) {
  return std::make_unique<CudaOps>(variant, op);
}

std::unique_ptr<Compute> make_compute(const std::string& variant) { return std::make_unique<CudaCompute>(variant); }

}  // namespace cuda
}  // namespace kdtree
