// The MLA + MoE decoder (model.hpp), step by step as reference/model.py.
#include "kdtree/model.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "kdtree/contract.hpp"
#include "kdtree/draft_topk.hpp"
#include "kdtree/linalg.hpp"
#include "kdtree/tensors.hpp"
#include "kdtree/tree_verify.hpp"

namespace kdtree {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Reads one config value from metadata `model.NAME` (InputError naming the file and key).
double meta_number(const kdtr::File& f, const std::string& path, const std::string& name) {
  for (const auto& kv : f.meta)
    if (kv.first == "model." + name) {
      char* end = nullptr;
      const double v = std::strtod(kv.second.c_str(), &end);
      if (kv.second.empty() || *end != '\0' || !std::isfinite(v))
        fail(path, "metadata model." + name + " = '" + kv.second + "' is not a number");
      return v;
    }
  fail(path, "metadata model." + name + " is missing (not a reference/model.py weights file?)");
}

int64_t meta_int(const kdtr::File& f, const std::string& path, const std::string& name, int64_t lo, int64_t hi) {
  const double v = meta_number(f, path, name);
  if (v != std::floor(v) || v < double(lo) || v > double(hi))
    fail(path, "metadata model." + name + " = " + std::to_string(v) + " is not an integer in " + std::to_string(lo) +
                   ".." + std::to_string(hi));
  return int64_t(v);
}

}  // namespace

void Compute::matmul(const float* x, int64_t x_stride, int64_t N, int64_t in, const float* W, int64_t out, float* y,
                     int64_t y_stride) const {
  kdtree::matmul(x, x_stride, N, in, W, out, y, y_stride, threads_);
}

void Compute::rows_written(const PagedCache&, int64_t, const std::vector<int64_t>&) const {}

void Compute::tree_verify(const PagedCache&, int64_t, const TreeVerifyArgs& a, const TreeVerifyOut& o) const {
  kdtree::tree_verify(a, o, threads_);
}

void Compute::tree_build(const TreeBuildArgs& a, const TreeBuildOut& o) const { kdtree::tree_build(a, o, threads_); }

void Compute::draft_topk(const float* logits, int64_t rows, int64_t V, int64_t K, float* top_logp,
                         int32_t* top_ids) const {
  DraftTopkArgs a;
  a.logits = logits;
  a.bs = rows;  // rows of one depth each: the op's rows are independent (DT.4.2)
  a.L = 1;
  a.V = V;
  a.K = K;
  kdtree::draft_topk(a, DraftTopkOut{top_logp, top_ids}, threads_);
}

void Compute::tree_accept(const TreeAcceptArgs& a, const TreeAcceptOut& o, PagedCache& cache) const {
  TreeAcceptArgs walk = a;
  walk.kv_cache = nullptr;
  kdtree::tree_accept(walk, o, threads_);
  cache.commit(a, o);
}

void PagedCache::commit(const TreeAcceptArgs& a, const TreeAcceptOut& o) {
  TreeAcceptArgs each = a;
  each.dtype = DType::F32;
  each.num_pages = num_pages;
  each.page_size = page_size;
  each.max_pages = max_pages;
  for (int64_t l = 0; l < layers; ++l) {
    each.kv_cache = pools[sz(l)].data();
    commit_accepted(each, o.accept_len, o.accept_path);
  }
}

double ModelConfig::softmax_scale() const { return std::pow(double(nope + rope), -0.5); }

PagedCache::PagedCache(int64_t layers_, int64_t bs_, int64_t rows_per_request, int64_t page_size_)
    : bs(bs_), page_size(page_size_), layers(layers_) {
  max_pages = (rows_per_request + page_size - 1) / page_size;
  num_pages = bs * max_pages;
  block_table.resize(sz(bs * max_pages));
  // Pages of the requests interleaved (page j of request b is j * bs + b), so that paging is exercised.
  for (int64_t b = 0; b < bs; ++b)
    for (int64_t j = 0; j < max_pages; ++j) block_table[sz(b * max_pages + j)] = int32_t(j * bs + b);
  pools.assign(sz(layers), std::vector<float>(sz(num_pages * page_size * kHeadDim), 0.0f));
}

int64_t PagedCache::offset(int64_t b, int64_t pos) const {
  const int64_t page = block_table[sz(b * max_pages + pos / page_size)];
  return (page * page_size + pos % page_size) * kHeadDim;
}

float* PagedCache::row(int64_t layer, int64_t b, int64_t pos) { return pools[sz(layer)].data() + offset(b, pos); }

const float* PagedCache::row(int64_t layer, int64_t b, int64_t pos) const {
  return pools[sz(layer)].data() + offset(b, pos);
}

Model Model::load(const std::string& path) {
  Model m;
  kdtr::FileSource src;
  kdtr::File f;
  open_kdtr(path, src, f);
  ModelConfig& c = m.cfg_;
  c.vocab = meta_int(f, path, "vocab", 2, 1 << 20);
  c.hidden = meta_int(f, path, "hidden", 1, 1 << 14);
  c.n_layers = meta_int(f, path, "n_layers", 1, 256);
  c.n_heads = meta_int(f, path, "n_heads", 1, 256);
  c.q_lora = meta_int(f, path, "q_lora", 1, 1 << 14);
  c.kv_lora = meta_int(f, path, "kv_lora", kLatent, kLatent);
  c.nope = meta_int(f, path, "nope", 1, 1024);
  c.rope = meta_int(f, path, "rope", kRope, kRope);
  c.v_head = meta_int(f, path, "v_head", 1, 1024);
  c.dense_layers = meta_int(f, path, "dense_layers", 0, c.n_layers);
  c.ffn_inter = meta_int(f, path, "ffn_inter", 1, 1 << 16);
  c.n_experts = meta_int(f, path, "n_experts", 1, 1024);
  c.top_k = meta_int(f, path, "top_k", 1, c.n_experts);
  c.expert_inter = meta_int(f, path, "expert_inter", 1, 1 << 16);
  c.shared_inter = meta_int(f, path, "shared_inter", 1, 1 << 16);
  c.max_pos = meta_int(f, path, "max_pos", 1, 1 << 20);
  c.rms_eps = meta_number(f, path, "rms_eps");
  c.rope_theta = meta_number(f, path, "rope_theta");
  c.lm_scale = meta_number(f, path, "lm_scale");

  Reader r(f, &src);
  auto take = [&](const std::string& name, const std::vector<int64_t>& shape) {
    try {
      const View v = r.array(name, {kF32}, int(shape.size()));
      expect_shape(name, v, shape);
      return r.copy<float>(v);
    } catch (const InputError& e) {
      throw InputError(path, std::string("weights: ") + e.what());
    }
  };
  const int64_t d = c.hidden, H = c.n_heads, qk = c.nope + c.rope;
  m.embed_ = take("embed", {c.vocab, d});
  m.final_norm_ = take("final_norm", {d});
  m.lm_head_ = take("lm_head", {d, c.vocab});
  m.rope_cos_ = take("rope_cos", {c.max_pos, c.rope / 2});
  m.rope_sin_ = take("rope_sin", {c.max_pos, c.rope / 2});
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    Layer L;
    L.attn_norm = take(p + "attn_norm", {d});
    L.wq_a = take(p + "wq_a", {d, c.q_lora});
    L.q_norm = take(p + "q_norm", {c.q_lora});
    L.wq_b = take(p + "wq_b", {c.q_lora, H * qk});
    L.wkv_a = take(p + "wkv_a", {d, c.kv_lora + c.rope});
    L.kv_norm = take(p + "kv_norm", {c.kv_lora});
    const std::vector<float> kvb = take(p + "wkv_b", {c.kv_lora, H * (c.nope + c.v_head)});
    // The absorbed halves per head: W_UK [H, nope, kv_lora] and W_UV [H, kv_lora, v_head].
    L.w_uk.resize(sz(H * c.nope * c.kv_lora));
    L.w_uv.resize(sz(H * c.kv_lora * c.v_head));
    const int64_t width = H * (c.nope + c.v_head);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t ch = 0; ch < c.kv_lora; ++ch) {
        const float* src = kvb.data() + ch * width + h * (c.nope + c.v_head);
        for (int64_t k = 0; k < c.nope; ++k) L.w_uk[sz((h * c.nope + k) * c.kv_lora + ch)] = src[k];
        for (int64_t j = 0; j < c.v_head; ++j) L.w_uv[sz((h * c.kv_lora + ch) * c.v_head + j)] = src[c.nope + j];
      }
    L.wo = take(p + "wo", {H * c.v_head, d});
    L.ffn_norm = take(p + "ffn_norm", {d});
    if (i < c.dense_layers) {
      L.w1 = take(p + "w1", {d, c.ffn_inter});
      L.w3 = take(p + "w3", {d, c.ffn_inter});
      L.w2 = take(p + "w2", {c.ffn_inter, d});
    } else {
      const int64_t E = c.n_experts, I = c.expert_inter, S = c.shared_inter;
      L.gate = take(p + "gate", {d, E});
      L.e_w1 = take(p + "experts.w1", {E, d, I});
      L.e_w3 = take(p + "experts.w3", {E, d, I});
      L.e_w2 = take(p + "experts.w2", {E, I, d});
      L.s_w1 = take(p + "shared.w1", {d, S});
      L.s_w3 = take(p + "shared.w3", {d, S});
      L.s_w2 = take(p + "shared.w2", {S, d});
    }
    m.layers_.push_back(std::move(L));
  }
  try {
    r.reject_unknown("a weight of this model");
  } catch (const InputError& e) {
    throw InputError(path, e.what());
  }
  return m;
}

void Model::rope(float* v, int64_t stride, int64_t count, int32_t position) const {
  const int64_t half = cfg_.rope / 2;
  const float* cs = rope_cos_.data() + int64_t(position) * half;
  const float* sn = rope_sin_.data() + int64_t(position) * half;
  for (int64_t n = 0; n < count; ++n) {
    float* x = v + n * stride;
    for (int64_t i = 0; i < half; ++i) {
      const float x0 = x[2 * i], x1 = x[2 * i + 1];
      x[2 * i] = x0 * cs[i] - x1 * sn[i];
      x[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
    }
  }
}

void Model::attention(int64_t l, const Rows& rows, std::vector<float>& x, PagedCache& cache, ForwardTimes& times,
                      const Compute& comp) const {
  const auto t0 = Clock::now();
  const ModelConfig& c = cfg_;
  const Layer& L = layers_[sz(l)];
  const int64_t N = int64_t(rows.tokens.size()), d = c.hidden, H = c.n_heads, qk = c.nope + c.rope;
  const float eps = float(c.rms_eps);
  std::vector<float> h(sz(N * d)), qa(sz(N * c.q_lora)), q(sz(N * H * qk)), kv(sz(N * (c.kv_lora + c.rope)));
  rmsnorm(x.data(), d, N, d, L.attn_norm.data(), eps, h.data(), d);
  comp.matmul(h.data(), d, N, d, L.wq_a.data(), c.q_lora, qa.data(), c.q_lora);
  rmsnorm(qa.data(), c.q_lora, N, c.q_lora, L.q_norm.data(), eps, qa.data(), c.q_lora);
  comp.matmul(qa.data(), c.q_lora, N, c.q_lora, L.wq_b.data(), H * qk, q.data(), H * qk);
  comp.matmul(h.data(), d, N, d, L.wkv_a.data(), c.kv_lora + c.rope, kv.data(), c.kv_lora + c.rope);
  // The query: q_nope absorbed through W_UK, then the roped q_pe ([N, H, 576]).
  std::vector<float> q_full(sz(N * H * kHeadDim));
  std::vector<int64_t> written(sz(N));
  for (int64_t hd = 0; hd < H; ++hd)
    comp.matmul(q.data() + hd * qk, H * qk, N, c.nope, L.w_uk.data() + hd * c.nope * c.kv_lora, c.kv_lora,
           q_full.data() + hd * kHeadDim, H * kHeadDim);
  for (int64_t n = 0; n < N; ++n) {
    rope(q.data() + n * H * qk + c.nope, qk, H, rows.positions[sz(n)]);
    for (int64_t hd = 0; hd < H; ++hd)
      std::copy_n(q.data() + (n * H + hd) * qk + c.nope, c.rope, q_full.data() + (n * H + hd) * kHeadDim + c.kv_lora);
    // The cache row: rmsnorm(c_kv) ‖ roped k_pe, at the request's prefix + slot.
    float* kvr = kv.data() + n * (c.kv_lora + c.rope);
    rmsnorm(kvr, 0, 1, c.kv_lora, L.kv_norm.data(), eps, kvr, 0);
    rope(kvr + c.kv_lora, 0, 1, rows.positions[sz(n)]);
    const int64_t b = n / rows.Q, slot = n % rows.Q;
    float* dst = cache.row(l, rows.requests[sz(b)], rows.prefix_lens[sz(b)] + slot);
    std::copy_n(kvr, kHeadDim, dst);
    written[sz(n)] = dst - cache.pools[sz(l)].data();
  }
  comp.rows_written(cache, l, written);
  // Attention is the tree_verify op over this layer's pool, with the requests' block-table rows.
  const int64_t n_req = int64_t(rows.requests.size());
  std::vector<int32_t> table(sz(n_req * cache.max_pages));
  for (int64_t b = 0; b < n_req; ++b)
    std::copy_n(cache.block_table.data() + rows.requests[sz(b)] * cache.max_pages, cache.max_pages,
                table.data() + b * cache.max_pages);
  TreeVerifyArgs a;
  a.q = q_full.data();
  a.kv_cache = cache.pools[sz(l)].data();
  a.dtype = DType::F32;
  a.block_table = table.data();
  a.prefix_lens = rows.prefix_lens.data();
  a.visibility = rows.visibility.data();
  a.bs = n_req;
  a.Q = rows.Q;
  a.H = H;
  a.num_pages = cache.num_pages;
  a.page_size = cache.page_size;
  a.max_pages = cache.max_pages;
  a.softmax_scale = c.softmax_scale();
  std::vector<float> latent(sz(N * H * kLatent)), lse(sz(N * H));
  times.other += since(t0);
  const auto t1 = Clock::now();
  comp.tree_verify(cache, l, a, TreeVerifyOut{latent.data(), lse.data()});
  times.attention += since(t1);
  const auto t2 = Clock::now();
  // Back through W_UV per head, then wo, added to the residual.
  std::vector<float> o(sz(N * H * c.v_head)), delta(sz(N * d));
  for (int64_t hd = 0; hd < H; ++hd)
    comp.matmul(latent.data() + hd * kLatent, H * kLatent, N, c.kv_lora, L.w_uv.data() + hd * c.kv_lora * c.v_head,
           c.v_head, o.data() + hd * c.v_head, H * c.v_head);
  comp.matmul(o.data(), H * c.v_head, N, H * c.v_head, L.wo.data(), d, delta.data(), d);
  for (int64_t i = 0; i < N * d; ++i) x[sz(i)] += delta[sz(i)];
  times.other += since(t2);
}

void Model::feed_forward(int64_t l, std::vector<float>& x, int64_t N, const Compute& comp) const {
  const ModelConfig& c = cfg_;
  const Layer& L = layers_[sz(l)];
  const int64_t d = c.hidden;
  std::vector<float> h(sz(N * d)), out(sz(N * d));
  rmsnorm(x.data(), d, N, d, L.ffn_norm.data(), float(c.rms_eps), h.data(), d);
  auto mlp = [&](const float* in, int64_t rows, const float* w1, const float* w3, const float* w2, int64_t inter,
                 float* y) {
    std::vector<float> a(sz(rows * inter)), g(sz(rows * inter));
    comp.matmul(in, d, rows, d, w1, inter, a.data(), inter);
    comp.matmul(in, d, rows, d, w3, inter, g.data(), inter);
    swiglu(a.data(), g.data(), rows * inter);
    comp.matmul(a.data(), inter, rows, inter, w2, d, y, d);
  };
  if (l < c.dense_layers) {
    mlp(h.data(), N, L.w1.data(), L.w3.data(), L.w2.data(), c.ffn_inter, out.data());
  } else {
    const int64_t E = c.n_experts, K = c.top_k, I = c.expert_inter;
    mlp(h.data(), N, L.s_w1.data(), L.s_w3.data(), L.s_w2.data(), c.shared_inter, out.data());
    std::vector<float> score(sz(N * E));
    comp.matmul(h.data(), d, N, d, L.gate.data(), E, score.data(), E);
    for (float& s : score) s = 1.0f / (1.0f + std::exp(-s));
    // Route: the top-k scores per row (ties to the lower expert), weights normalized over the k chosen.
    std::vector<float> weight(sz(N * E), 0.0f);
    std::vector<uint8_t> chosen(sz(N * E), 0);
    std::vector<int64_t> order(sz(E));
    for (int64_t n = 0; n < N; ++n) {
      const float* s = score.data() + n * E;
      for (int64_t e = 0; e < E; ++e) order[sz(e)] = e;
      std::stable_sort(order.begin(), order.end(), [s](int64_t a, int64_t b) { return s[a] > s[b]; });
      float total = 0.0f;
      for (int64_t k = 0; k < K; ++k) total += s[order[sz(k)]];
      for (int64_t k = 0; k < K; ++k) {
        weight[sz(n * E + order[sz(k)])] = s[order[sz(k)]] / total;
        chosen[sz(n * E + order[sz(k)])] = 1;
      }
    }
    // Each expert once over the rows that chose it; contributions added in expert-index order.
    std::vector<float> hin, y;
    for (int64_t e = 0; e < E; ++e) {
      std::vector<int64_t> rows;
      for (int64_t n = 0; n < N; ++n)
        if (chosen[sz(n * E + e)]) rows.push_back(n);
      if (rows.empty()) continue;
      const int64_t R = int64_t(rows.size());
      hin.resize(sz(R * d));
      y.resize(sz(R * d));
      for (int64_t r = 0; r < R; ++r) std::copy_n(h.data() + rows[sz(r)] * d, d, hin.data() + r * d);
      mlp(hin.data(), R, L.e_w1.data() + e * d * I, L.e_w3.data() + e * d * I, L.e_w2.data() + e * I * d, I, y.data());
      for (int64_t r = 0; r < R; ++r) {
        const float g = weight[sz(rows[sz(r)] * E + e)];
        float* o = out.data() + rows[sz(r)] * d;
        for (int64_t i = 0; i < d; ++i) o[i] += g * y[sz(r * d + i)];
      }
    }
  }
  for (int64_t i = 0; i < N * d; ++i) x[sz(i)] += out[sz(i)];
}

std::vector<float> Model::forward(const Rows& rows, PagedCache& cache, ForwardTimes& times, const Compute& comp) const {
  const ModelConfig& c = cfg_;
  const int64_t N = int64_t(rows.tokens.size()), d = c.hidden;
  std::vector<float> x(sz(N * d));
  for (int64_t n = 0; n < N; ++n) std::copy_n(embed_.data() + int64_t(rows.tokens[sz(n)]) * d, d, x.data() + n * d);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    attention(l, rows, x, cache, times, comp);
    const auto t0 = Clock::now();
    feed_forward(l, x, N, comp);
    times.other += since(t0);
  }
  const auto t0 = Clock::now();
  std::vector<float> h(sz(N * d)), logits(sz(N * c.vocab));
  rmsnorm(x.data(), d, N, d, final_norm_.data(), float(c.rms_eps), h.data(), d);
  comp.matmul(h.data(), d, N, d, lm_head_.data(), c.vocab, logits.data(), c.vocab);
  times.other += since(t0);
  return logits;
}

}  // namespace kdtree
