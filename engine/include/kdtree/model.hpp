// The MLA + MoE decoder of reference/model.py, in C++, over a paged 576-wide latent cache.
// Its attention is the tree_verify op (tree_verify.hpp) with each call's visibility: a query sees its
// request's prefix and the rows of its own call that its visibility row marks. The maths is the golden
// model's, row by row (see the module docstring of reference/model.py).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kdtree/tree_accept.hpp"
#include "kdtree/tree_build.hpp"
#include "kdtree/tree_verify.hpp"

namespace kdtree {

struct ModelConfig {
  int64_t vocab = 0, hidden = 0, n_layers = 0, n_heads = 0, q_lora = 0, kv_lora = 0, nope = 0, rope = 0, v_head = 0;
  int64_t dense_layers = 0, ffn_inter = 0, n_experts = 0, top_k = 0, expert_inter = 0, shared_inter = 0, max_pos = 0;
  double rms_eps = 0, rope_theta = 0, lm_scale = 0;
  double softmax_scale() const;
};

// The paged latent cache of every layer: one pool [num_pages, page_size, 576] per layer, one block
// table [bs, max_pages] shared by the layers.
struct PagedCache {
  int64_t bs = 0, page_size = 0, max_pages = 0, num_pages = 0, layers = 0;
  std::vector<int32_t> block_table;
  std::vector<std::vector<float>> pools;
  PagedCache(int64_t layers, int64_t bs, int64_t rows_per_request, int64_t page_size);
  float* row(int64_t layer, int64_t b, int64_t pos);  // logical position pos of request b
  const float* row(int64_t layer, int64_t b, int64_t pos) const;
  // tree_accept's commit of the accepted paths into every layer's host pool (`a`'s block_table and prefix_lens,
  // `o` its walk's results).
  void commit(const TreeAcceptArgs& a, const TreeAcceptOut& o);

 private:
  int64_t offset(int64_t b, int64_t pos) const;
};

// One forward call: `Q` rows per request for requests `requests` (indices into the cache's batch);
// row i of request b is token tokens[b*Q+i] at position positions[b*Q+i] and its cache rows go to
// logical position prefix_lens[b] + i. visibility [n, Q, ceil(Q/32)] is tree_build's layout.
struct Rows {
  std::vector<int32_t> requests, tokens, positions, prefix_lens;
  std::vector<uint32_t> visibility;
  int64_t Q = 0;
};

// Seconds spent in the forward, split into the attention (tree_verify) and the rest.
struct ForwardTimes {
  double attention = 0, other = 0;
};

// Host<->device traffic: bytes and copies each way, and the calls that make the host wait for the device
// (syncs). The CUDA backend counts them where its copies, frees and synchronisations are made
// (engine/src/cuda/device.cu); the CPU has none. Differences of two readings give a phase's traffic.
struct DeviceTraffic {
  int64_t h2d_bytes = 0, d2h_bytes = 0, h2d_copies = 0, d2h_copies = 0, syncs = 0;
  DeviceTraffic operator-(const DeviceTraffic& o) const {
    return {h2d_bytes - o.h2d_bytes, d2h_bytes - o.d2h_bytes, h2d_copies - o.h2d_copies, d2h_copies - o.d2h_copies,
            syncs - o.syncs};
  }
  DeviceTraffic& operator+=(const DeviceTraffic& o) {
    h2d_bytes += o.h2d_bytes;
    d2h_bytes += o.d2h_bytes;
    h2d_copies += o.h2d_copies;
    d2h_copies += o.d2h_copies;
    syncs += o.syncs;
    return *this;
  }
};

// Where the model's arithmetic and the decoder's ops run: the CPU (this class) or the GPU (kdtree/cuda.hpp
// overrides it). Every implementation keeps linalg.hpp's guarantee for matmul: each output row depends on its
// own input row only, summed in a fixed order, so a token's bits do not depend on the rows around it.
class Compute {
 public:
  explicit Compute(int threads) : threads_(threads) {}
  virtual ~Compute() = default;
  virtual const char* name() const { return "cpu"; }
  // linalg.hpp's matmul (W is one of the model's weight arrays, or a slice of one, and never changes).
  virtual void matmul(const float* x, int64_t x_stride, int64_t N, int64_t in, const float* W, int64_t out,
                      float* y, int64_t y_stride) const;
  // The rows of layer `layer` at these offsets (floats into its pool) were just written on the host.
  virtual void rows_written(const PagedCache& cache, int64_t layer, const std::vector<int64_t>& offsets) const;
  // The attention of layer `layer`: tree_verify with a.kv_cache = that layer's (host) pool.
  virtual void tree_verify(const PagedCache& cache, int64_t layer, const TreeVerifyArgs& a,
                           const TreeVerifyOut& o) const;
  virtual void tree_build(const TreeBuildArgs& a, const TreeBuildOut& o) const;
  // tree_accept's walk of `a` (its block_table and prefix_lens set, kv_cache unset) and its commit into every
  // layer of `cache`, as that layer's kv_cache.
  virtual void tree_accept(const TreeAcceptArgs& a, const TreeAcceptOut& o, PagedCache& cache) const;
  // The drafter's top-k: draft_topk (spec/draft_topk.md) of `rows` rows of V float32 logits -> top_logp and
  // top_ids [rows, K] (host arrays). Here the CPU op (draft_topk.cpp); the CUDA backend runs its kernel.
  virtual void draft_topk(const float* logits, int64_t rows, int64_t V, int64_t K, float* top_logp,
                          int32_t* top_ids) const;
  // What runs draft_topk above ("cpu", or the kernel variant), for the decode's report.
  virtual std::string draft_topk_source() const { return "cpu"; }
  // The traffic counted so far in this process (zeros on the CPU).
  virtual DeviceTraffic traffic() const { return {}; }

 protected:
  int threads_;
};

class Model {
 public:
  // Loads and checks reference/model.py's KDTR weights (InputError naming the file or the tensor).
  static Model load(const std::string& path);
  const ModelConfig& config() const { return cfg_; }
  // Logits [n*Q, vocab] of the rows; writes their cache rows first.
  std::vector<float> forward(const Rows& rows, PagedCache& cache, ForwardTimes& times, const Compute& comp) const;

 private:
  struct Layer {
    std::vector<float> attn_norm, wq_a, q_norm, wq_b, wkv_a, kv_norm, w_uk, w_uv, wo, ffn_norm;
    std::vector<float> w1, w3, w2;                        // dense layers
    std::vector<float> gate, e_w1, e_w3, e_w2, s_w1, s_w3, s_w2;  // MoE layers
  };
  void attention(int64_t l, const Rows& rows, std::vector<float>& x, PagedCache& cache, ForwardTimes& times,
                 const Compute& comp) const;
  void feed_forward(int64_t l, std::vector<float>& x, int64_t N, const Compute& comp) const;
  void rope(float* v, int64_t stride, int64_t count, int32_t position) const;

  ModelConfig cfg_;
  std::vector<float> embed_, final_norm_, lm_head_, rope_cos_, rope_sin_;
  std::vector<Layer> layers_;
};

}  // namespace kdtree
