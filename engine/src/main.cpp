// kdtree-engine: the DDTree ops over KDTR files, a batch/serve mode, and a decoder that runs an MLA+MoE
// model autoregressively or with DDTree speculation using those same ops. Run with --help.
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include "kdtree/cli.hpp"
#include "kdtree/contract.hpp"
#include "kdtree/cuda.hpp"
#include "kdtree/decode.hpp"
#include "kdtree/ops.hpp"
#include "kdtree/serve.hpp"
#include "kdtree/threads.hpp"

namespace {

const char* kOverview = R"(kdtree-engine: DDTree tree speculative decoding ops (CPU and CUDA backends) over KDTR files.

usage: kdtree-engine SUBCOMMAND [options]      kdtree-engine SUBCOMMAND --help

subcommands:
  op OP --in IN.kdtr --out OUT.kdtr    run one op (tree_build, tree_verify, tree_accept, draft_topk)
  batch [LIST]                         run many op files in one process (LIST or standard input)
  serve                                like batch on standard input, for a driving process
  decode --model M --prompt P ...      generate tokens with an MLA+MoE model, autoregressive or DDTree
  variants                             the CUDA kernel variants compiled in (SLUG, VARIANT, ARCHS, SOURCE
                                       per line, tab separated; nothing without the CUDA backend)
  help [SUBCOMMAND]                    this text, or a subcommand's

Exit status: 0 success, 1 bad input data (the message names the file or tensor), 2 bad command line,
3 internal error, 4 no usable GPU for --device cuda. Tensor names, dtypes and shapes of the op files are the contract's (spec/<op>.md).
)";

const char* kOpHelp = R"(usage: kdtree-engine op OP --in IN.kdtr --out OUT.kdtr [--device cpu|cuda] [--variant V] [--threads N]

Runs one op on the CPU, or with --device cuda on the GPU. OP is tree_build, tree_verify, tree_accept or draft_topk.
IN holds the op's inputs as tensors named like its arguments (Python scalars as rank-0 tensors); OUT receives the
result fields as tensors, with metadata op=OP. An optional metadata key `op` in IN must equal OP.

  tree_build   in:  top_logp f32 [bs,L,K_in], top_ids i32 [bs,L,K_in], root_tokens i32 [bs],
                    budget i32 (), prefix_lens i32 [bs], with_full_mask bool () (optional, default false)
               out: n_nodes, parents, depths, tokens, ranks, scores (f64), visibility (u32), positions,
                    first_child, next_sibling, full_mask (bool; shape (0,) unless with_full_mask)
  tree_verify  in:  q f32|bf16 [bs,Q,H,576], kv_cache [pages,page_size,576] (same dtype),
                    block_table i32 [bs,max_pages], prefix_lens i32 [bs], visibility u32 [bs,Q,ceil(Q/32)],
                    softmax_scale f64 ()
               out: out [bs,Q,H,512] (input dtype), lse f32 [bs,Q,H]
  tree_accept  in:  tokens, first_child, next_sibling, target_tokens i32 [bs,D], max_depth i32 (),
                    and for the commit all of kv_cache f32|bf16 [pages,page_size,576], block_table, prefix_lens
               out: accept_len [bs], accept_path [bs,1+max_depth], emitted [bs,1+max_depth], bonus [bs],
                    new_lens [bs], and kv_cache (the committed cache) when one was given
  draft_topk   in:  logits f32|f16|bf16 [bs,L,V], K i32 ()
               out: top_logp f32 [bs,L,K], top_ids i32 [bs,L,K] (tree_build's top_logp and top_ids)

Every input is validated first, by the contract's rules and in its order (the first error is the one the
Python contract reports): dtypes and shapes, then the values. A bad one gets "TENSOR: problem" and exit
status 1, OUT untouched.
  limits       bs @BS@, L @L@, K_in @K@, budget B @B@, heads H @H@,
               tree width Q (verify) or D (accept) @D@, page_size @PS@, max_pages @MP@,
               num_pages * page_size <= @ROWS@, prefix_lens >= 0, prefix_len + tree rows <= @CTX@
               (the context limit, checked before the page addressing)
  tree_build   no NaN, log-probs <= 0 or -inf and non-increasing per row; token ids >= 0 and distinct per
               row; root tokens >= 0; with_full_mask's layout (D*(prefix_len + D) bytes per request) at
               most @FULL@ bytes
  tree_verify  softmax_scale a finite value whose float32 value is finite and > 0; every page a request
               needs is in its block_table row and in range; visibility is a tree's ancestor closure
  tree_accept  tokens and target_tokens >= 0; the links form a tree off node 0 (forward links, one
               incoming link per node, no root sibling) no deeper than max_depth; the commit needs
               kv_cache, block_table and prefix_lens together, every page in range, and the rows
               prefix_len .. prefix_len + D - 1 of all requests distinct physical cache rows
  draft_topk   V @V@, K 1..@KMAX@ and K <= V; no logit NaN or +inf (-inf masks a token)
--threads N: worker threads across requests (0 = one per core, the default; at most 256; CPU only).
--device cuda runs the kernels of kernels_cu/ (compiled by nvcc with their build specs, kernels_cu/specs.py);
--variant V picks one of OP's kernel variants (default: the first one built for this GPU). Compiled here:
  @VARIANTS@
Validation is the same for both devices and happens before anything reaches the GPU.
)";

// The op help with the contract's limits filled in (kernels_cu/contract_limits.cuh, via contract.hpp).
std::string op_help() {
  std::string s = kOpHelp;
  auto range = [](int64_t lo, int64_t hi) { return std::to_string(lo) + ".." + std::to_string(hi); };
  const std::pair<const char*, std::string> fill[] = {
      {"@BS@", range(1, kdtree::kMaxBatch)},     {"@L@", range(0, kdtree::kMaxDepth)},
      {"@K@", range(0, kdtree::kMaxTopK)},       {"@B@", range(0, kdtree::kMaxBudget)},
      {"@D@", range(1, kdtree::kMaxTree)},       {"@H@", range(1, kdtree::kMaxHeads)},
      {"@PS@", range(1, kdtree::kMaxPageSize)},  {"@ROWS@", std::to_string(kdtree::kMaxCacheRows)},
      {"@MP@", range(1, kdtree::kMaxContext)},   {"@CTX@", std::to_string(kdtree::kMaxContext)},
      {"@FULL@", std::to_string(kdtree::kMaxFullMaskBytes)},
      {"@V@", range(1, kdtree::kMaxVocab)},      {"@KMAX@", std::to_string(kdtree::kMaxTopK)}};
  for (const auto& f : fill) s.replace(s.find(f.first), std::strlen(f.first), f.second);
  s.replace(s.find("@VARIANTS@"), 10, kdtree::cuda::describe_variants());
  return s;
}

const char* kBatchHelp = R"(usage: kdtree-engine batch [LIST|-] [--device cpu|cuda] [--variant V] [--threads N]
       kdtree-engine serve [--device cpu|cuda] [--variant V] [--threads N]

Runs many op files in one process. Each request line is
    OP<TAB>IN.kdtr<TAB>OUT.kdtr        (a line without a TAB is split on spaces)
and gets one answer line on standard output, flushed at once:
    ok<TAB>SECONDS                     OUT was written
    error<TAB>MESSAGE                  MESSAGE names the file or tensor; OUT was not written
Blank lines and '#' comments get no answer. A bad request never stops the loop.
batch reads LIST (or standard input for '-' or no LIST) and exits 1 if any request failed;
serve reads standard input until it closes and exits 0. --device cuda runs the ops on the GPU; --variant V
uses kernel variant V for the op that has it (see op --help).
)";

const char* kDecodeHelp = R"(usage: kdtree-engine decode --model M.kdtr --prompt P.kdtr --mode ar|ddtree --budget B
                            --max-new N --out OUT.kdtr [--depth L] [--noise S] [--draft-temp T]
                            [--seed X] [--threads N] [--dump-cache] [--device cpu|cuda] [--variant V]
                            [--host-topk]

Greedy generation with the MLA+MoE model in M (written by reference/model.py) for every prompt in P
(tokens i32 [bs,len], lengths i32 [bs]). Every step is the three ops: the target's attention is
tree_verify over the paged 576-wide latent cache with the tree's visibility, the tree is tree_build's,
and the greedy walk and KV commit are tree_accept's.
  --mode ar       one token per step (a root-only tree: budget 0)
  --mode ddtree   the drafter runs the target L steps ahead (greedy) and perturbs its logits with seeded
                  noise; tree_build makes a B-node tree of its per-depth top-k; one verify per round
  --budget B      non-root tree nodes per round (ddtree; 0..1024)
  --depth L       draft depth (default 8), --noise S noise scale (default 0.5), --draft-temp T
                  temperature of the draft logits (default 1.0), --seed X noise seed (default 0)
  --threads N     worker threads (0 = one per core, the default)
  --device cuda   the whole step on the GPU: the three ops by the kernels of kernels_cu/ (--variant V picks
                  one, see op --help) and every matmul of the model (the dense layers) by the engine's own
                  row-independent kernels (a fixed summation order per output, no FMA: the CPU's bits);
                  the drafter's top-k by the draft_topk kernel (its perturbed float32 logits formed on the
                  host and uploaded once per round); norms, RoPE and routing stay on the host
  --host-topk     the drafter's top-k by the CPU op even with --device cuda (the path before the kernel, to
                  compare its traffic)
OUT holds tokens i32 [bs,N], margins f32 [bs,N] (top-1 minus top-2 logit behind each token),
rounds i32 [bs], accept_lens i32 [bs,R] and path_max_rank i32 [bs,R] (-1 padded), lengths i32 [bs]
(committed cache rows), the phase times (time_* f64 scalars, seconds: prefill, decode, and inside decode
drafter, draft_topk (inside drafter), tree_build, tree_verify, tree_accept, model), the host<->device traffic
of the phases decode, drafter, draft_topk, tree_build and tree_accept (io_PHASE_COUNTER i64 scalars, COUNTER
h2d_bytes, d2h_bytes, h2d_copies, d2h_copies, syncs: every call that waits for the GPU, a copy included;
counted where the CUDA backend makes them, zeros on the CPU), metadata draft_topk (what ran the drafter's
top-k: cpu, or cuda and the kernel variant; none in ar mode), and with --dump-cache the final committed latent
cache and every row as the round that committed it left it (cache, committed f32 [layers,bs,T,576]).
)";

int usage_error(const std::string& sub, const std::string& msg) {
  const std::string who = sub.empty() ? "kdtree-engine" : "kdtree-engine " + sub;
  std::fprintf(stderr, "%s: %s (see %s --help)\n", who.c_str(), msg.c_str(), who.c_str());
  return 2;
}

bool wants_help(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") return true;
  return false;
}

std::unique_ptr<kdtree::OpBackend> backend(const kdtree::Options& o, int threads, const std::string& op) {
  const kdtree::DeviceChoice dev = kdtree::device_choice(o);
  if (dev.cuda) return kdtree::cuda::make_ops(dev.variant, op);
  return std::make_unique<kdtree::CpuOps>(threads);
}

int cmd_op(int argc, char** argv) {
  kdtree::Options o(argc, argv, 2, {"--in", "--out", "--device", "--variant", "--threads"}, {});
  if (o.positional().size() != 1) throw kdtree::UsageError("expected exactly one OP (tree_build, tree_verify, tree_accept, draft_topk)");
  const std::string op = o.positional()[0];
  bool known = false;
  for (const auto& s : kdtree::op_slugs()) known = known || s == op;
  if (!known) throw kdtree::UsageError("OP '" + op + "' is not one of tree_build, tree_verify, tree_accept, draft_topk");
  const int threads = int(o.integer("--threads", 0, kdtree::kMaxThreads, 0));
  const auto ops = backend(o, threads, op);
  kdtree::run_op_file(op, o.str("--in"), o.str("--out"), *ops);
  return 0;
}

int cmd_batch(int argc, char** argv, bool serve) {
  kdtree::Options o(argc, argv, 2, {"--device", "--variant", "--threads"}, {});
  const int threads = int(o.integer("--threads", 0, kdtree::kMaxThreads, 0));
  const auto ops = backend(o, threads, "");
  if (serve) {
    if (!o.positional().empty()) throw kdtree::UsageError("serve takes no LIST (it reads standard input)");
    kdtree::serve_stream(std::cin, std::cout, *ops);
    return 0;
  }
  if (o.positional().size() > 1) throw kdtree::UsageError("expected at most one LIST");
  const std::string list = o.positional().empty() ? "-" : o.positional()[0];
  if (list == "-") return kdtree::serve_stream(std::cin, std::cout, *ops) ? 1 : 0;
  std::ifstream in(list);
  if (!in) throw kdtree::InputError(list, "cannot open the request list");
  return kdtree::serve_stream(in, std::cout, *ops) ? 1 : 0;
}

int dispatch(int argc, char** argv) {
  const std::string sub = argv[1];
  if (sub == "--help" || sub == "-h" || sub == "help") {
    const std::string what = argc > 2 ? argv[2] : "";
    if (what == "op") std::fputs(op_help().c_str(), stdout);
    else if (what == "batch" || what == "serve") std::fputs(kBatchHelp, stdout);
    else if (what == "decode") std::fputs(kDecodeHelp, stdout);
    else if (what.empty()) std::fputs(kOverview, stdout);
    else return usage_error("", "no subcommand '" + what + "'");
    return 0;
  }
  if (sub == "variants") {
    std::fputs(kdtree::cuda::variant_lines().c_str(), stdout);
    return 0;
  }
  const std::string help = sub == "op"                         ? op_help()
                           : (sub == "batch" || sub == "serve") ? kBatchHelp
                           : sub == "decode"                    ? kDecodeHelp
                                                                : "";
  if (help.empty()) return usage_error("", "no subcommand '" + sub + "'");
  if (wants_help(argc, argv, 2)) {
    std::fputs(help.c_str(), stdout);
    return 0;
  }
  try {
    if (sub == "op") return cmd_op(argc, argv);
    if (sub == "decode") return kdtree::decode_main(argc, argv, 2);
    return cmd_batch(argc, argv, sub == "serve");
  } catch (const kdtree::UsageError& e) {
    return usage_error(sub, e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kOverview, stderr);
    return 2;
  }
  try {
    return dispatch(argc, argv);
  } catch (const kdtree::InputError& e) {
    std::fprintf(stderr, "kdtree-engine %s: %s\n", argv[1], e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "kdtree-engine %s: out of memory\n", argv[1]);
    return 3;
  } catch (const kdtree::cuda::DeviceError& e) {
    std::fprintf(stderr, "kdtree-engine %s: --device cuda: %s\n", argv[1], e.what());
    return 4;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kdtree-engine %s: internal error: %s\n", argv[1], e.what());
    return 3;
  }
}
