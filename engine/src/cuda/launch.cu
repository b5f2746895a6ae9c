// Launchers of the kernels of kernels_cu/ (launch.hpp). The shapes were validated by the contract's checks
// before anything gets here.
#include "launch.hpp"

#include <cuda.h>  // CUtensorMap (the sm90a kernel's cache descriptor); the driver is reached through cudart
#include <cudaTypedefs.h>

#include <stdexcept>
#include <string>

#include "arch_limits.cuh"
#include "draft_topk.cuh"
#include "kdtree/cli.hpp"
#include "kdtree/contract.hpp"
#include "tree_accept.cuh"
#include "tree_build.cuh"
#include "tree_verify.cuh"

namespace kdtree {
namespace cuda {
namespace {

void needs_source(const Variant& v, const char* source) {
  if (std::string(v.source) != source)
    throw UsageError("--variant: " + v.name() + " (kernels_cu/" + v.source +
                     ") has no launcher in the engine yet (engine/src/cuda/launch.cu launches " + source + ")");
}

// The variant of tree_verify built from `source` (the sm90a variant hands the calls it does not take to it).
const Variant& verify_variant_of(const char* source) {
  for (const Variant* v : variants("tree_verify"))
    if (std::string(v->source) == source) return *v;
  throw DeviceError(std::string("no tree_verify variant of kernels_cu/") + source + " is compiled into the engine");
}

// The sm90a kernel's TMA descriptor of the cache (as kernels_cu/tree_verify_ops.py's kv_tensor_map):
// [pages][page_size][576] bf16, innermost first below, 128-byte swizzle, boxes of 64 columns x
// min(page_size, 64) rows of one page. cuTensorMapEncodeTiled is a driver function: cudart hands its address.
CUtensorMap kv_tensor_map(const void* kv, int64_t num_pages, int64_t page_size) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    check(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found),
          "cuTensorMapEncodeTiled: entry point");
    if (found != cudaDriverEntryPointSuccess || !fn) throw DeviceError("cuTensorMapEncodeTiled: not in this driver");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  const cuuint64_t row = cuuint64_t(kHeadDim) * 2;
  cuuint64_t dims[3] = {cuuint64_t(kHeadDim), cuuint64_t(page_size), cuuint64_t(num_pages)};
  cuuint64_t strides[2] = {row, row * cuuint64_t(page_size)};
  cuuint32_t box[3] = {64, cuuint32_t(page_size < 64 ? page_size : 64), 1};
  cuuint32_t elem[3] = {1, 1, 1};
  CUtensorMap map{};
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(kv), dims, strides, box,
                            elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) throw InputError("kv_cache", "cuTensorMapEncodeTiled failed (" + std::to_string(int(r)) + ")");
  return map;
}

// A spec's own shared-memory budget (its KERNEL_SMEM_BUDGET: the *_99k variants), 0 when it names none.
long long spec_smem_budget(const Variant& v) { return std::stoll(v.define_or("KERNEL_SMEM_BUDGET", "0")); }

// tree_build's limit (as kernels_cu/tree_build_ops.py's smem_limit): the GPU's, or 64 bytes under the spec's
// own budget where that is smaller.
long long tree_build_limit(const Variant& v) {
  const long long own = spec_smem_budget(v) - (spec_smem_budget(v) > 0 ? 64 : 0);
  return own > 0 && own < gpu().smem_optin ? own : gpu().smem_optin;
}

// The variant type a tree_build build instantiates (its TB_VARIANT: a `_99k` twin's is its base's), as its index in
// tree_build_variants.cuh's table.
int tree_build_type(const Variant& v) {
  const std::string type = v.define("TB_VARIANT");
  for (int id = 0; id < tb::kVariants; ++id)
    if (type == tb::variant_name(id)) return id;
  throw std::logic_error(v.name() + ": TB_VARIANT=" + type + " names no type of tree_build_variants.cuh");
}

}  // namespace

// Which build runs a launch and with what geometry: tree_build_launch() in tree_build.cuh, the rule the Python
// wrapper asks too (nothing of it is restated here).
void launch_tree_build(const Variant& v, const BuildOnDevice& d) {
  needs_source(v, "tree_build.cu");
  const int type = tree_build_type(v);
  const TreeBuildLaunch plan = tree_build_launch(tb::policy(type), type, int(d.bs), int(d.budget), int(d.L),
                                                 int(d.K_in), tree_build_limit(v), gpu().sm_count);
  const Variant& runs = plan.variant == type ? v : pick("tree_build", tb::variant_name(plan.variant));
  int L = int(d.L), K_in = int(d.K_in), B = int(d.budget);
  int lp_in_smem = plan.geometry.stage_lp ? 1 : 0, select_cap = plan.geometry.select_cap;
  const unsigned* refused = nullptr;  // the values were checked on the host (the deferred path's flag is not used)
  void* args[] = {(void*)&d.top_logp, (void*)&d.top_ids, (void*)&d.root_tokens, (void*)&d.prefix_lens,
                  (void*)&L, (void*)&K_in, (void*)&B, &lp_in_smem, &select_cap,
                  (void*)&d.n_nodes, (void*)&d.parents, (void*)&d.depths, (void*)&d.tokens, (void*)&d.ranks,
                  (void*)&d.scores, (void*)&d.visibility, (void*)&d.positions, (void*)&d.first_child,
                  (void*)&d.next_sibling, (void*)&d.full_mask, (void*)&refused};
  launch(runs, "tree_build_kernel", dim3(unsigned(d.bs)), dim3(unsigned(runs.block)), size_t(plan.geometry.smem),
         args);
}

void launch_tree_accept(const Variant& v, const AcceptOnDevice& d) {
  needs_source(v, "tree_accept.cu");
  const int D = int(d.D), L = int(d.max_depth);
  const size_t smem = size_t(tree_accept_smem_bytes(D));
  int row_vec = int(d.row_bytes / 16), page_size = d.kv_cache ? int(d.page_size) : 1;
  int max_pages = d.kv_cache ? int(d.max_pages) : 0;
  const int32_t* bt = d.kv_cache ? d.block_table : nullptr;
  const int32_t* pre = d.kv_cache ? d.prefix_lens : nullptr;
  const unsigned* flag = nullptr;  // the values were checked on the host (the deferred path's flag is not used)
  int* no_advance = nullptr;       // the decoder advances its lengths on the host (the step's advance is not used)
  void* args[] = {(void*)&d.tokens, (void*)&d.first_child, (void*)&d.next_sibling, (void*)&d.target_tokens,
                  (void*)&D, (void*)&L, (void*)&d.accept_len, (void*)&d.accept_path, (void*)&d.emitted,
                  (void*)&d.bonus, (void*)&d.new_lens, (void*)&d.kv_cache, &row_vec, &page_size, (void*)&bt,
                  &max_pages, (void*)&pre, (void*)&no_advance, (void*)&no_advance, (void*)&flag};
  launch(v, "tree_accept_kernel", dim3(unsigned(d.bs)), dim3(unsigned(v.block)), smem, args);
}

// draft_topk.cuh's geometry (the rule the Python wrapper reads through the geometry query, not restated here):
// draft_topk_row_<dtype> with a block per row when the row takes one split, else draft_topk_split_<dtype> per
// (split, row) into a workspace of candidate keys and (max, sum) pairs, then draft_topk_merge per row. The
// values were checked on the host: the kernels' flag is not needed (nullptr).
void launch_draft_topk(const Variant& v, const DraftTopkOnDevice& d) {
  needs_source(v, "draft_topk.cu");
  if (d.rows == 0) return;  // L = 0: nothing to select
  const char* type = d.dtype == LogitType::BF16 ? "bf16" : d.dtype == LogitType::F16 ? "f16" : "f32";
  int V = int(d.V), K = int(d.K);
  const int splits = draft_topk_splits(V, K), kept = draft_topk_kept(V, K);
  const dim3 block{unsigned(draft_topk_threads())};
  const size_t smem = size_t(draft_topk_smem_bytes(K));
  unsigned* flag = nullptr;
  if (splits == 1) {
    void* args[] = {(void*)&d.logits, &V, &K, (void*)&d.top_logp, (void*)&d.top_ids, (void*)&flag};
    launch(v, std::string("draft_topk_row_") + type, dim3(unsigned(d.rows)), block, smem, args);
    return;
  }
  DevBuf ws(size_t(draft_topk_workspace_bytes(d.rows, V, K)));
  unsigned long long* keys = ws.as<unsigned long long>();
  float2* lse = reinterpret_cast<float2*>(ws.as<char>() + d.rows * splits * kept * 8);  // after the keys
  void* sargs[] = {(void*)&d.logits, &V, &K, (void*)&keys, (void*)&lse, (void*)&flag};
  launch(v, std::string("draft_topk_split_") + type, dim3(unsigned(splits), unsigned(d.rows)), block, 0, sargs);
  int n_splits = splits;
  void* margs[] = {(void*)&keys, (void*)&lse, &n_splits, &V, &K, (void*)&d.top_logp, (void*)&d.top_ids};
  launch(v, "draft_topk_merge", dim3(unsigned(d.rows)), block, smem, margs);
  // the workspace is freed when this returns: wait for the kernels that use it
  synchronize("draft_topk");
}

void launch_tree_verify(const Variant& requested, const VerifyOnDevice& d) {
  // portable launches the combine kernel of both variants and the calls sm90a does not take
  const bool sm90a = std::string(requested.source) == "tree_verify_sm90a.cu";
  const Variant& portable = sm90a ? verify_variant_of("tree_verify.cu") : requested;
  needs_source(portable, "tree_verify.cu");
  const bool served = sm90a && tv::sm90a_serves(d.bf16, d.page_size);
  const Variant& v = served ? requested : portable;
  const int var = served ? tv::kSm90a : (d.bf16 ? tv::kBf16 : tv::kF32);
  // the shared memory the variant's kernels were built for on this GPU's arch: it picks portable's tile
  const long long budget = kernel_smem_budget(spec_smem_budget(v), gpu().cc);
  const long long QH = d.Q * d.H;
  // The split-KV plan, per request from its own length (the header's rule), as kernels_cu/tree_verify_ops.py.
  std::vector<long long> chunk(size_t(d.bs)), first(size_t(d.bs), 0);
  long long slots = 0, most = 0;
  for (int64_t b = 0; b < d.bs; ++b) {
    const long long n_keys = (long long)d.prefix_host[b] + d.Q;
    chunk[size_t(b)] = tv::default_split_chunk(n_keys, QH, var, budget);
    const long long n = tv::n_splits(n_keys, chunk[size_t(b)]);
    most = n > most ? n : most;
    if (n > 1) {
      first[size_t(b)] = slots;
      slots += n;
    }
  }
  if (most > 65535) throw InputError("prefix_lens", std::to_string(most) + " splits per request, more than 65535");
  DevBuf chunk_d(chunk.data(), chunk.size() * 8), first_d(first.data(), first.size() * 8);
  DevBuf part_o(size_t(slots * QH * kLatent * 4)), part_lse(size_t(slots * QH * 4));
  const char* attention = served ? "tree_verify_sm90a_kernel" : d.bf16 ? "tree_verify_bf16_kernel" : "tree_verify_f32_kernel";
  // the sm90a kernel reads the cache through its TMA descriptor, kept in device memory for the call
  DevBuf map_d;
  const void* kv_arg = d.kv_cache;
  if (served) {
    const CUtensorMap map = kv_tensor_map(d.kv_cache, d.num_pages, d.page_size);
    map_d = DevBuf(&map, sizeof(map));
    kv_arg = map_d.as<void>();
  }
  const char* combine = d.bf16 ? "tree_verify_combine_bf16_kernel" : "tree_verify_combine_f32_kernel";
  float scale = d.softmax_scale;
  int Q = int(d.Q), H = int(d.H), page_size = int(d.page_size), max_pages = int(d.max_pages);
  const long long* c = chunk_d.as<long long>();
  const long long* f = first_d.as<long long>();
  float* po = part_o.as<float>();
  float* pl = part_lse.as<float>();
  const int* plan_units = nullptr;  // the sm90a kernel's last argument: no planned schedule (the grid says which CTA
                                    // does what); the portable kernels have one argument less, and ignore it
  void* args[] = {(void*)&d.q, (void*)&kv_arg, (void*)&d.block_table, (void*)&d.prefix_lens,
                  (void*)&d.visibility, &scale, &Q, &H, &page_size, &max_pages, (void*)&c, (void*)&f,
                  (void*)&d.out, (void*)&d.lse, (void*)&po, (void*)&pl, (void*)&plan_units};
  launch(v, attention, dim3(unsigned(tv::row_tiles(QH, var, budget)), unsigned(most), unsigned(d.bs)),
         dim3(tv::threads(var)), size_t(tv::smem_bytes(var, budget)), args);
  if (slots) {
    void* cargs[] = {(void*)&po, (void*)&pl, (void*)&c, (void*)&f, (void*)&d.prefix_lens, &Q, &H,
                     (void*)&d.out, (void*)&d.lse};
    launch(portable, combine, dim3(unsigned(tv::combine_blocks(QH)), unsigned(d.bs), 1), dim3(tv::kCombineThreads), 0,
           cargs);
  }
  // the scratch buffers are freed when this returns: wait for the kernels that read them
  synchronize("tree_verify");
}

}  // namespace cuda
}  // namespace kdtree
