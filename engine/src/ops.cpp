// Op files in, op files out: the contract's structural pass (dtypes, ranks, shape symbols and their
// ranges, scalars) in argument order, then the op's value checks in the contract's order and the op itself
// (tree_build.cpp, tree_verify.cpp, tree_accept.cpp, draft_topk.cpp): the first error is the one the contract reports.
#include "kdtree/ops.hpp"

#include "kdtree/bf16.hpp"
#include "kdtree/checks.hpp"
#include "kdtree/contract.hpp"
#include "kdtree/draft_topk.hpp"
#include "kdtree/error_text.hpp"
#include "kdtree/tree_accept.hpp"
#include "kdtree/tree_build.hpp"
#include "kdtree/tree_verify.hpp"

namespace kdtree {
namespace {

using Meta = std::vector<std::pair<std::string, std::string>>;

TensorList op_tree_build(Reader& r, const OpBackend& backend) {
  Shapes sh({sym::kBs, sym::kL, sym::kKIn});
  const View lp = sh.array(r, "top_logp", {kF32}, {"bs", "L", "K_in"});
  const View ids = sh.array(r, "top_ids", {kI32}, {"bs", "L", "K_in"});
  const View roots = sh.array(r, "root_tokens", {kI32}, {"bs"});
  const int64_t B = r.integer("budget", 0, kMaxBudget);
  const View pre = sh.array(r, "prefix_lens", {kI32}, {"bs"});
  const bool full = r.has("with_full_mask") && r.flag("with_full_mask");
  r.reject_unknown("an input of tree_build");
  const int64_t bs = sh["bs"], L = sh["L"], K_in = sh["K_in"];

  const auto lp_v = r.copy<float>(lp);
  const auto ids_v = r.copy<int32_t>(ids);
  const auto roots_v = r.copy<int32_t>(roots);
  const auto pre_v = r.copy<int32_t>(pre);
  TreeBuildArgs a;
  a.top_logp = lp_v.data();
  a.top_ids = ids_v.data();
  a.root_tokens = roots_v.data();
  a.prefix_lens = pre_v.data();
  a.bs = bs;
  a.L = L;
  a.K_in = K_in;
  a.budget = B;
  a.with_full_mask = full;
  validate_tree_build(a);

  const int64_t D = 1 + B, W = (D + 31) / 32;
  const size_t n = sz(bs * D);
  std::vector<int32_t> n_nodes(sz(bs)), parents(n), depths(n), tokens(n), ranks(n), positions(n), fc(n), ns(n);
  std::vector<double> scores(n);
  std::vector<uint32_t> vis(sz(bs * D * W));
  std::vector<uint8_t> mask(sz(full ? full_mask_size(pre_v.data(), bs, D) : 0));
  TreeBuildOut o{n_nodes.data(), parents.data(), depths.data(), tokens.data(), ranks.data(), scores.data(),
                 vis.data(),     positions.data(), fc.data(),   ns.data(),     mask.data()};
  backend.tree_build(a, o);

  TensorList out;
  out.add("n_nodes", kI32, {bs}, n_nodes);
  out.add("parents", kI32, {bs, D}, parents);
  out.add("depths", kI32, {bs, D}, depths);
  out.add("tokens", kI32, {bs, D}, tokens);
  out.add("ranks", kI32, {bs, D}, ranks);
  out.add("scores", kF64, {bs, D}, scores);
  out.add("visibility", kU32, {bs, D, W}, vis);
  out.add("positions", kI32, {bs, D}, positions);
  out.add("first_child", kI32, {bs, D}, fc);
  out.add("next_sibling", kI32, {bs, D}, ns);
  out.add("full_mask", kBool, {int64_t(mask.size())}, mask);
  return out;
}

TensorList op_tree_verify(Reader& r, const OpBackend& backend) {
  Shapes sh({sym::kBs, sym::kQ, sym::kH, sym::kNumPages, sym::kPageSize, sym::kMaxPages, sym::kW});
  const View q = sh.array(r, "q", {kF32, kBF16}, {"bs", "Q", "H", kHeadDim});
  const View kv = sh.array(r, "kv_cache", {q.t->dtype}, {"num_pages", "page_size", kHeadDim});  // q's dtype
  const View bt = sh.array(r, "block_table", {kI32}, {"bs", "max_pages"});
  const View pre = sh.array(r, "prefix_lens", {kI32}, {"bs"});
  sh.bind("W", (sh["Q"] + 31) / 32);
  const View vis = sh.array(r, "visibility", {kU32}, {"bs", "Q", "W"});
  const double scale = r.real("softmax_scale");
  check_positive_float32("softmax_scale", scale);
  r.reject_unknown("an input of tree_verify");
  const int64_t bs = sh["bs"], Q = sh["Q"], H = sh["H"];

  const bool bf16 = q.t->dtype == kBF16;
  const size_t item = bf16 ? 2 : 4;
  std::vector<uint8_t> q_v(static_cast<size_t>(q.t->nbytes)), kv_v(static_cast<size_t>(kv.t->nbytes));
  r.read(q, q_v.data());
  r.read(kv, kv_v.data());
  const auto bt_v = r.copy<int32_t>(bt);
  const auto pre_v = r.copy<int32_t>(pre);
  const auto vis_v = r.copy<uint32_t>(vis);
  TreeVerifyArgs a;
  a.q = q_v.data();
  a.kv_cache = kv_v.data();
  a.dtype = bf16 ? DType::BF16 : DType::F32;
  a.block_table = bt_v.data();
  a.prefix_lens = pre_v.data();
  a.visibility = vis_v.data();
  a.bs = bs;
  a.Q = Q;
  a.H = H;
  a.num_pages = kv.shape[0];
  a.page_size = kv.shape[1];
  a.max_pages = bt.shape[1];
  a.softmax_scale = scale;
  validate_tree_verify(a);

  std::vector<uint8_t> out_v(sz(bs * Q * H * kLatent) * item);
  std::vector<float> lse(sz(bs * Q * H));
  backend.tree_verify(a, TreeVerifyOut{out_v.data(), lse.data()});
  TensorList out;
  out.add_bytes("out", bf16 ? kBF16 : kF32, {bs, Q, H, kLatent}, out_v.data(), out_v.size());
  out.add("lse", kF32, {bs, Q, H}, lse);
  return out;
}

TensorList op_tree_accept(Reader& r, const OpBackend& backend) {
  // the commit's group first, as the contract checks it before any argument
  const char* group[3] = {"kv_cache", "block_table", "prefix_lens"};
  std::string missing;
  for (const char* name : group)
    if (!r.has(name)) missing += (missing.empty() ? "" : ", ") + std::string(name);
  const bool commit = missing.empty();
  if (!commit && (r.has("kv_cache") || r.has("block_table") || r.has("prefix_lens")))
    fail("kv_cache", "needs kv_cache, block_table, prefix_lens together (" + missing + " missing)");
  Shapes sh({sym::kBs, sym::kD, sym::kNumPages, sym::kPageSize, sym::kMaxPages});
  const View tok = sh.array(r, "tokens", {kI32}, {"bs", "D"});
  const View fc = sh.array(r, "first_child", {kI32}, {"bs", "D"});
  const View ns = sh.array(r, "next_sibling", {kI32}, {"bs", "D"});
  const View tgt = sh.array(r, "target_tokens", {kI32}, {"bs", "D"});
  const int64_t L = r.integer("max_depth", 0, kMaxDepth);
  const int64_t bs = sh["bs"], D = sh["D"];
  const auto tok_v = r.copy<int32_t>(tok), fc_v = r.copy<int32_t>(fc), ns_v = r.copy<int32_t>(ns),
             tgt_v = r.copy<int32_t>(tgt);
  TreeAcceptArgs a;
  a.tokens = tok_v.data();
  a.first_child = fc_v.data();
  a.next_sibling = ns_v.data();
  a.target_tokens = tgt_v.data();
  a.bs = bs;
  a.D = D;
  a.max_depth = L;
  std::vector<uint8_t> kv_v;
  std::vector<int32_t> bt_v, pre_v;
  std::vector<int64_t> kv_shape;
  uint16_t kv_code = kF32;
  if (commit) {
    const View kv = sh.array(r, "kv_cache", {kF32, kBF16}, {"num_pages", "page_size", kHeadDim});
    const View bt = sh.array(r, "block_table", {kI32}, {"bs", "max_pages"});
    const View pre = sh.array(r, "prefix_lens", {kI32}, {"bs"});
    kv_v.resize(static_cast<size_t>(kv.t->nbytes));
    r.read(kv, kv_v.data());
    bt_v = r.copy<int32_t>(bt);
    pre_v = r.copy<int32_t>(pre);
    kv_shape = kv.shape;
    kv_code = kv.t->dtype;
    a.kv_cache = kv_v.data();
    a.dtype = kv_code == kBF16 ? DType::BF16 : DType::F32;
    a.num_pages = sh["num_pages"];
    a.page_size = sh["page_size"];
    a.max_pages = sh["max_pages"];
    a.block_table = bt_v.data();
    a.prefix_lens = pre_v.data();
  }
  r.reject_unknown("an input of tree_accept");
  validate_tree_accept(a);  // the values, in the contract's order (tree, then the commit's addressing)

  std::vector<int32_t> accept_len(sz(bs)), path(sz(bs * (1 + L))), emitted(path.size()), bonus(sz(bs)),
      new_lens(sz(bs));
  backend.tree_accept(a, TreeAcceptOut{accept_len.data(), path.data(), emitted.data(), bonus.data(), new_lens.data()});
  TensorList out;
  out.add("accept_len", kI32, {bs}, accept_len);
  out.add("accept_path", kI32, {bs, 1 + L}, path);
  out.add("emitted", kI32, {bs, 1 + L}, emitted);
  out.add("bonus", kI32, {bs}, bonus);
  out.add("new_lens", kI32, {bs}, new_lens);
  if (commit) out.add("kv_cache", kv_code, kv_shape, kv_v);
  return out;
}

TensorList op_draft_topk(Reader& r, const OpBackend& backend) {
  Shapes sh({sym::kBs, sym::kL, sym::kV});
  const View x = sh.array(r, "logits", {kBF16, kF16, kF32}, {"bs", "L", "V"});
  const int64_t K = r.integer("K", 1, kMaxTopK);
  r.reject_unknown("an input of draft_topk");
  const int64_t bs = sh["bs"], L = sh["L"], V = sh["V"];
  std::vector<uint8_t> x_v(static_cast<size_t>(x.t->nbytes));
  r.read(x, x_v.data());
  DraftTopkArgs a;
  a.logits = x_v.data();
  a.dtype = x.t->dtype == kF32 ? LogitType::F32 : x.t->dtype == kF16 ? LogitType::F16 : LogitType::BF16;
  a.bs = bs;
  a.L = L;
  a.V = V;
  a.K = K;
  validate_draft_topk(a);
  std::vector<float> lp(sz(bs * L * K));
  std::vector<int32_t> ids(lp.size());
  backend.draft_topk(a, DraftTopkOut{lp.data(), ids.data()});
  TensorList out;
  out.add("top_logp", kF32, {bs, L, K}, lp);
  out.add("top_ids", kI32, {bs, L, K}, ids);
  return out;
}

}  // namespace

void OpBackend::draft_topk(const DraftTopkArgs&, const DraftTopkOut&) const {
  fail("op", "draft_topk has no kernel on this backend (the CPU backend runs it)");
}

const std::vector<std::string>& op_slugs() {
  static const std::vector<std::string> slugs{"tree_build", "tree_verify", "tree_accept", "draft_topk"};
  return slugs;
}

void CpuOps::tree_build(const TreeBuildArgs& a, const TreeBuildOut& o) const { kdtree::tree_build(a, o, threads_); }
void CpuOps::tree_verify(const TreeVerifyArgs& a, const TreeVerifyOut& o) const { kdtree::tree_verify(a, o, threads_); }
void CpuOps::tree_accept(const TreeAcceptArgs& a, const TreeAcceptOut& o) const { kdtree::tree_accept(a, o, threads_); }
void CpuOps::draft_topk(const DraftTopkArgs& a, const DraftTopkOut& o) const { kdtree::draft_topk(a, o, threads_); }

TensorList run_op(const std::string& op, const kdtr::File& in, int threads) { return run_op(op, in, CpuOps(threads)); }

TensorList run_op(const std::string& op, const kdtr::File& in, const OpBackend& backend, const kdtr::Source* src) {
  for (const auto& kv : in.meta)
    if (kv.first == "op" && kv.second != op)
      fail("op", "the file's metadata says op=" + kv.second + ", but " + op + " was asked for");
  Reader r(in, src);
  if (op == "tree_build") return op_tree_build(r, backend);
  if (op == "tree_verify") return op_tree_verify(r, backend);
  if (op == "tree_accept") return op_tree_accept(r, backend);
  if (op == "draft_topk") return op_draft_topk(r, backend);
  fail("op", "'" + op + "' is not one of tree_build, tree_verify, tree_accept, draft_topk");
}

void run_op_file(const std::string& op, const std::string& in_path, const std::string& out_path,
                 const OpBackend& backend) {
  kdtr::FileSource src;
  kdtr::File f;
  open_kdtr(in_path, src, f);
  const TensorList out = run_op(op, f, backend, &src);
  write_file(out_path, out.serialize({{"op", op}}));
}

}  // namespace kdtree
