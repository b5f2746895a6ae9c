// The decode subcommand: options and files around decoder.cpp.
#include "kdtree/decode.hpp"

#include <memory>
#include <string>
#include <vector>

#include "kdtree/cli.hpp"
#include "kdtree/contract.hpp"
#include "kdtree/cuda.hpp"
#include "kdtree/decoder.hpp"
#include "kdtree/model.hpp"
#include "kdtree/tensors.hpp"
#include "kdtree/threads.hpp"

namespace kdtree {
namespace {

// tokens i32 [bs, len] and optional lengths i32 [bs] (default: every row is a whole prompt).
std::vector<std::vector<int32_t>> load_prompts(const std::string& path, int64_t vocab) {
  kdtr::FileSource src;
  kdtr::File f;
  open_kdtr(path, src, f);
  try {
    Reader r(f, &src);
    const View tok = r.array("tokens", {kI32}, 2);
    const int64_t bs = tok.shape[0], len = tok.shape[1];
    if (bs < 1 || bs > kMaxBatch) fail("tokens", "batch size " + std::to_string(bs) + " is outside 1..1024");
    if (len < 1) fail("tokens", "prompts need at least one token");
    std::vector<int32_t> lengths(sz(bs), int32_t(len));
    if (r.has("lengths")) {
      const View lv = r.array("lengths", {kI32}, 1);
      expect_shape("lengths", lv, {bs});
      lengths = r.copy<int32_t>(lv);
    }
    r.reject_unknown("a prompt tensor (tokens, lengths)");
    const std::vector<int32_t> t = r.copy<int32_t>(tok);
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t b = 0; b < bs; ++b) {
      if (lengths[sz(b)] < 1 || lengths[sz(b)] > len)
        fail("lengths", "[" + std::to_string(b) + "] = " + std::to_string(lengths[sz(b)]) + " is outside 1.." +
                            std::to_string(len));
      prompts.emplace_back(t.begin() + b * len, t.begin() + b * len + lengths[sz(b)]);
      for (int64_t i = 0; i < lengths[sz(b)]; ++i)
        if (prompts.back()[sz(i)] < 0 || prompts.back()[sz(i)] >= vocab)
          fail("tokens", "[" + std::to_string(b) + ", " + std::to_string(i) + "] = " +
                             std::to_string(prompts.back()[sz(i)]) + " is not a token id in 0.." +
                             std::to_string(vocab - 1));
    }
    return prompts;
  } catch (const InputError& e) {
    throw InputError(path, e.what());
  }
}

// The host<->device traffic of each phase as int64 scalars io_<phase>_<counter>, as the times are time_<phase>.
void add_traffic(TensorList& out, const DecodeResult& r) {
  const std::pair<const char*, const DeviceTraffic*> phases[] = {{"decode", &r.io_decode},
                                                                  {"drafter", &r.io_drafter},
                                                                  {"draft_topk", &r.io_draft_topk},
                                                                  {"tree_build", &r.io_tree_build},
                                                                  {"tree_accept", &r.io_tree_accept}};
  for (const auto& ph : phases) {
    const DeviceTraffic& t = *ph.second;
    const std::pair<const char*, int64_t> counts[] = {{"h2d_bytes", t.h2d_bytes},
                                                      {"d2h_bytes", t.d2h_bytes},
                                                      {"h2d_copies", t.h2d_copies},
                                                      {"d2h_copies", t.d2h_copies},
                                                      {"syncs", t.syncs}};
    for (const auto& c : counts)
      out.add(std::string("io_") + ph.first + "_" + c.first, kI64, {}, std::vector<int64_t>{c.second});
  }
}

void write_result(const std::string& path, const DecodeResult& r, const ModelConfig& c, const DecodeSettings& s,
                  const std::string& device) {
  TensorList out;
  out.add("tokens", kI32, {r.bs, r.max_new}, r.tokens);
  out.add("margins", kF32, {r.bs, r.max_new}, r.margins);
  int64_t R = 0;
  for (const auto& v : r.accept_lens) R = std::max<int64_t>(R, int64_t(v.size()));
  std::vector<int32_t> rounds, acc(sz(r.bs * R), -1), top(sz(r.bs * R), -1);
  for (int64_t b = 0; b < r.bs; ++b) {
    const auto& a = r.accept_lens[sz(b)];
    rounds.push_back(int32_t(a.size()));
    std::copy(a.begin(), a.end(), acc.begin() + b * R);
    std::copy(r.path_max_rank[sz(b)].begin(), r.path_max_rank[sz(b)].end(), top.begin() + b * R);
  }
  out.add("rounds", kI32, {r.bs}, rounds);
  out.add("accept_lens", kI32, {r.bs, R}, acc);
  out.add("path_max_rank", kI32, {r.bs, R}, top);
  out.add("lengths", kI32, {r.bs}, r.lengths);
  const std::pair<const char*, double> times[] = {
      {"time_prefill", r.prefill},         {"time_decode", r.decode},
      {"time_drafter", r.drafter},         {"time_draft_topk", r.draft_topk},
      {"time_tree_build", r.tree_build}, {"time_tree_verify", r.tree_verify},
      {"time_tree_accept", r.tree_accept}, {"time_model", r.model}};
  for (const auto& t : times) out.add(t.first, kF64, {}, std::vector<double>{t.second});
  add_traffic(out, r);
  if (s.dump_cache) {
    out.add("cache", kF32, {c.n_layers, r.bs, r.T, kHeadDim}, r.cache);
    out.add("committed", kF32, {c.n_layers, r.bs, r.T, kHeadDim}, r.committed);
  }
  write_file(path, out.serialize({{"mode", s.ddtree ? "ddtree" : "ar"},
                                  {"budget", std::to_string(s.budget)},
                                  {"depth", std::to_string(s.depth)},
                                  {"threads", std::to_string(s.threads)},
                                  {"draft_topk", s.ddtree && s.budget > 0 ? r.draft_topk_source : "none"},
                                  {"engine", "kdtree-engine " + device}}));
}

}  // namespace

int decode_main(int argc, char** argv, int first) {
  Options o(argc, argv, first,
            {"--model", "--prompt", "--mode", "--budget", "--max-new", "--out", "--depth", "--noise", "--draft-temp",
             "--seed", "--threads", "--device", "--variant"},
            {"--dump-cache", "--host-topk"});
  const DeviceChoice dev = device_choice(o);
  if (!o.positional().empty()) throw UsageError("unexpected argument '" + o.positional()[0] + "'");
  DecodeSettings s;
  const std::string mode = o.str("--mode");
  if (mode != "ar" && mode != "ddtree") throw UsageError("--mode: '" + mode + "' is not ar or ddtree");
  s.ddtree = mode == "ddtree";
  s.budget = o.integer("--budget", 0, kMaxBudget, 0);
  if (!s.ddtree && s.budget != 0) throw UsageError("--budget: ar mode builds root-only trees (leave it out or 0)");
  if (s.ddtree && !o.has("--budget")) throw UsageError("--budget: required with --mode ddtree");
  s.max_new = o.integer("--max-new", 1, 1 << 20);
  s.depth = o.integer("--depth", 1, kMaxDepth, 8);
  s.draft.noise = o.real("--noise", 0.0, 1e6, 0.5);
  s.draft.temperature = o.real("--draft-temp", 1e-6, 1e6, 1.0);
  s.draft.seed = uint64_t(o.integer("--seed", 0, INT64_MAX, 0));
  s.threads = int(o.integer("--threads", 0, kMaxThreads, 0));
  s.dump_cache = o.has("--dump-cache");
  s.host_topk = o.has("--host-topk");
  const std::string out_path = o.str("--out");
  const std::string model_path = o.str("--model"), prompt_path = o.str("--prompt");

  const Model model = Model::load(model_path);
  const auto prompts = load_prompts(prompt_path, model.config().vocab);
  // RoPE positions: a round starts at most at longest - 2 + max_new and its tree (or the drafter) reaches
  // `depth` further, so positions 0 .. longest - 2 + max_new + depth must have table rows.
  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max<int64_t>(longest, int64_t(p.size()));
  const int64_t last = longest - 2 + s.max_new + (s.ddtree && s.budget > 0 ? s.depth : 0);
  if (last >= model.config().max_pos)
    throw UsageError("--max-new: the longest prompt (" + std::to_string(longest) + ") + max-new + depth need " +
                     "position " + std::to_string(last) + ", past the model's max_pos " +
                     std::to_string(model.config().max_pos));
  const std::unique_ptr<Compute> comp =
      dev.cuda ? cuda::make_compute(dev.variant) : std::make_unique<Compute>(s.threads);
  const DecodeResult r = decode(model, prompts, s, *comp);
  write_result(out_path, r, model.config(), s, comp->name());
  return 0;
}

}  // namespace kdtree
