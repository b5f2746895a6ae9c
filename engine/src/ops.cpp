// Op files in, op files out: the dtype and shape checks in the Python contract's order, then the value
// checks and the op itself (tree_build.cpp, tree_verify.cpp, tree_accept.cpp).
#include "kdtree/ops.hpp"

#include "kdtree/bf16.hpp"
#include "kdtree/contract.hpp"
#include "kdtree/format.hpp"
#include "kdtree/tree_accept.hpp"
#include "kdtree/tree_build.hpp"
#include "kdtree/tree_verify.hpp"

namespace kdtree {
namespace {

using Meta = std::vector<std::pair<std::string, std::string>>;

TensorList op_tree_build(Reader& r, int threads) {
  const View lp = r.array("top_logp", {kF32}, 3);
  const int64_t bs = lp.shape[0], L = lp.shape[1], K_in = lp.shape[2];
  if (bs < 1 || bs > kMaxBatch)
    fail("top_logp", "batch size " + std::to_string(bs) + " is outside 1.." + std::to_string(kMaxBatch));
  if (L > kMaxDepth) fail("top_logp", "depth L=" + std::to_string(L) + " is more than " + std::to_string(kMaxDepth));
  if (K_in > kMaxTopK) fail("top_logp", "K_in=" + std::to_string(K_in) + " is more than " + std::to_string(kMaxTopK));
  const View ids = r.array("top_ids", {kI32}, 3);
  expect_shape("top_ids", ids, lp.shape);
  const View roots = r.array("root_tokens", {kI32}, 1);
  expect_shape("root_tokens", roots, {bs});
  const int64_t B = r.integer("budget", 0, kMaxBudget);
  const View pre = r.array("prefix_lens", {kI32}, 1);
  expect_shape("prefix_lens", pre, {bs});
  const bool full = r.has("with_full_mask") && r.flag("with_full_mask");
  r.reject_unknown("an input of tree_build");

  const auto lp_v = copy_of<float>(lp);
  const auto ids_v = copy_of<int32_t>(ids);
  const auto roots_v = copy_of<int32_t>(roots);
  const auto pre_v = copy_of<int32_t>(pre);
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
  tree_build(a, o, threads);

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

TensorList op_tree_verify(Reader& r, int threads) {
  const View q = r.array("q", {kF32, kBF16}, 4);
  const int64_t bs = q.shape[0], Q = q.shape[1], H = q.shape[2];
  if (q.shape[3] != kHeadDim)
    fail("q", "last dim " + std::to_string(q.shape[3]) + ", expected " + std::to_string(kHeadDim) +
                  " (512 absorbed q_nope + 64 q_pe)");
  if (bs < 1 || bs > kMaxBatch)
    fail("q", "batch size " + std::to_string(bs) + " is outside 1.." + std::to_string(kMaxBatch));
  if (Q < 1 || Q > 1 + kMaxBudget) fail("q", "Q=" + std::to_string(Q) + " is outside 1.." + std::to_string(1 + kMaxBudget));
  if (H < 1) fail("q", "needs at least one head");
  const View kv = r.array("kv_cache", {q.t->dtype}, 3);
  if (kv.shape[2] != kHeadDim || kv.shape[0] < 1 || kv.shape[1] < 1)
    fail("kv_cache", "shape " + tuple_str(kv.shape) + ", expected [num_pages >= 1, page_size >= 1, " +
                         std::to_string(kHeadDim) + "]");
  const View bt = r.array("block_table", {kI32}, 2);
  if (bt.shape[0] != bs) fail("block_table", "shape " + tuple_str(bt.shape) + ", expected [" + std::to_string(bs) + ", max_pages]");
  const View pre = r.array("prefix_lens", {kI32}, 1);
  expect_shape("prefix_lens", pre, {bs});
  const int64_t W = (Q + 31) / 32;
  const View vis = r.array("visibility", {kU32}, 3);
  expect_shape("visibility", vis, {bs, Q, W});
  const double scale = r.real("softmax_scale");
  r.reject_unknown("an input of tree_verify");

  const bool bf16 = q.t->dtype == kBF16;
  const size_t item = bf16 ? 2 : 4;
  std::vector<uint8_t> q_v(static_cast<size_t>(q.t->nbytes)), kv_v(static_cast<size_t>(kv.t->nbytes));
  if (q.t->nbytes) std::memcpy(q_v.data(), q.t->data, q_v.size());
  if (kv.t->nbytes) std::memcpy(kv_v.data(), kv.t->data, kv_v.size());
  const auto bt_v = copy_of<int32_t>(bt);
  const auto pre_v = copy_of<int32_t>(pre);
  const auto vis_v = copy_of<uint32_t>(vis);
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
  tree_verify(a, TreeVerifyOut{out_v.data(), lse.data()}, threads);
  TensorList out;
  out.add_bytes("out", bf16 ? kBF16 : kF32, {bs, Q, H, kLatent}, out_v.data(), out_v.size());
  out.add("lse", kF32, {bs, Q, H}, lse);
  return out;
}

TensorList op_tree_accept(Reader& r, int threads) {
  const View tok = r.array("tokens", {kI32}, 2);
  const int64_t bs = tok.shape[0], D = tok.shape[1];
  if (bs < 1 || bs > kMaxBatch || D < 1 || D > 1 + kMaxBudget)
    fail("tokens", "shape " + tuple_str(tok.shape) + ": batch must be 1.." + std::to_string(kMaxBatch) +
                       ", tree width 1.." + std::to_string(1 + kMaxBudget));
  const View fc = r.array("first_child", {kI32}, 2);
  expect_shape("first_child", fc, {bs, D});
  const View ns = r.array("next_sibling", {kI32}, 2);
  expect_shape("next_sibling", ns, {bs, D});
  const View tgt = r.array("target_tokens", {kI32}, 2);
  expect_shape("target_tokens", tgt, {bs, D});
  const int64_t L = r.integer("max_depth", 0, kMaxDepth);
  const auto tok_v = copy_of<int32_t>(tok), fc_v = copy_of<int32_t>(fc), ns_v = copy_of<int32_t>(ns),
             tgt_v = copy_of<int32_t>(tgt);
  TreeAcceptArgs a;
  a.tokens = tok_v.data();
  a.first_child = fc_v.data();
  a.next_sibling = ns_v.data();
  a.target_tokens = tgt_v.data();
  a.bs = bs;
  a.D = D;
  a.max_depth = L;
  validate_tree_accept(a);  // the tree first, as the contract orders its checks

  const bool commit = r.has("kv_cache") || r.has("block_table") || r.has("prefix_lens");
  std::vector<uint8_t> kv_v;
  std::vector<int32_t> bt_v, pre_v;
  std::vector<int64_t> kv_shape;
  uint16_t kv_code = kF32;
  if (commit) {
    if (!r.has("kv_cache") || !r.has("block_table") || !r.has("prefix_lens"))
      fail("kv_cache", "the commit needs kv_cache, block_table and prefix_lens together");
    const View kv = r.array("kv_cache", {kF32, kBF16}, 3);
    if (kv.shape[2] != kHeadDim)
      fail("kv_cache", "shape " + tuple_str(kv.shape) + ", expected [num_pages, page_size, " + std::to_string(kHeadDim) + "]");
    const View bt = r.array("block_table", {kI32}, 2);
    if (bt.shape[0] != bs)
      fail("block_table", "shape " + tuple_str(bt.shape) + ", expected [" + std::to_string(bs) + ", max_pages]");
    const View pre = r.array("prefix_lens", {kI32}, 1);
    expect_shape("prefix_lens", pre, {bs});
    kv_v.resize(static_cast<size_t>(kv.t->nbytes));
    if (kv.t->nbytes) std::memcpy(kv_v.data(), kv.t->data, kv_v.size());
    bt_v = copy_of<int32_t>(bt);
    pre_v = copy_of<int32_t>(pre);
    kv_shape = kv.shape;
    kv_code = kv.t->dtype;
    a.kv_cache = kv_v.data();
    a.dtype = kv_code == kBF16 ? DType::BF16 : DType::F32;
    a.num_pages = kv.shape[0];
    a.page_size = kv.shape[1];
    a.max_pages = bt.shape[1];
    a.block_table = bt_v.data();
    a.prefix_lens = pre_v.data();
  }
  r.reject_unknown("an input of tree_accept");
  if (commit) validate_tree_accept(a);

  std::vector<int32_t> accept_len(sz(bs)), path(sz(bs * (1 + L))), emitted(path.size()), bonus(sz(bs)),
      new_lens(sz(bs));
  tree_accept(a, TreeAcceptOut{accept_len.data(), path.data(), emitted.data(), bonus.data(), new_lens.data()}, threads);
  TensorList out;
  out.add("accept_len", kI32, {bs}, accept_len);
  out.add("accept_path", kI32, {bs, 1 + L}, path);
  out.add("emitted", kI32, {bs, 1 + L}, emitted);
  out.add("bonus", kI32, {bs}, bonus);
  out.add("new_lens", kI32, {bs}, new_lens);
  if (commit) out.add("kv_cache", kv_code, kv_shape, kv_v);
  return out;
}

}  // namespace

const std::vector<std::string>& op_slugs() {
  static const std::vector<std::string> slugs{"tree_build", "tree_verify", "tree_accept"};
  return slugs;
}

TensorList run_op(const std::string& op, const kdtr::File& in, int threads) {
  for (const auto& kv : in.meta)
    if (kv.first == "op" && kv.second != op)
      fail("op", "the file's metadata says op=" + kv.second + ", but " + op + " was asked for");
  Reader r(in);
  if (op == "tree_build") return op_tree_build(r, threads);
  if (op == "tree_verify") return op_tree_verify(r, threads);
  if (op == "tree_accept") return op_tree_accept(r, threads);
  fail("op", "'" + op + "' is not one of tree_build, tree_verify, tree_accept");
}

void run_op_file(const std::string& op, const std::string& in_path, const std::string& out_path, int threads) {
  std::vector<uint8_t> buf;
  kdtr::File f;
  open_kdtr(in_path, buf, f);
  const TensorList out = run_op(op, f, threads);
  write_file(out_path, out.serialize({{"op", op}}));
}

}  // namespace kdtree
