// The MLA + MoE decoder of reference/model.py, in C++, over a paged 576-wide latent cache.
// Its attention is the tree_verify op (tree_verify.hpp) with each call's visibility: a query sees its
// request's prefix and the rows of its own call that its visibility row marks. The maths is the golden
// model's, row by row (see the module docstring of reference/model.py).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

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

class Model {
 public:
  // Loads and checks reference/model.py's KDTR weights (InputError naming the file or the tensor).
  static Model load(const std::string& path);
  const ModelConfig& config() const { return cfg_; }
  // Logits [n*Q, vocab] of the rows; writes their cache rows first.
  std::vector<float> forward(const Rows& rows, PagedCache& cache, ForwardTimes& times, int threads) const;

 private:
  struct Layer {
    std::vector<float> attn_norm, wq_a, q_norm, wq_b, wkv_a, kv_norm, w_uk, w_uv, wo, ffn_norm;
    std::vector<float> w1, w3, w2;                        // dense layers
    std::vector<float> gate, e_w1, e_w3, e_w2, s_w1, s_w3, s_w2;  // MoE layers
  };
  void attention(int64_t l, const Rows& rows, std::vector<float>& x, PagedCache& cache, ForwardTimes& times,
                 int threads) const;
  void feed_forward(int64_t l, std::vector<float>& x, int64_t N, int threads) const;
  void rope(float* v, int64_t stride, int64_t count, int32_t position) const;

  ModelConfig cfg_;
  std::vector<float> embed_, final_norm_, lm_head_, rope_cos_, rope_sin_;
  std::vector<Layer> layers_;
};

}  // namespace kdtree
