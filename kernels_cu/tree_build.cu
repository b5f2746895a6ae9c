// tree_build: DDTree best-first draft tree, one CTA per request (spec/tree_build.md).
//
// Exactness first: the kernel replays the reference heap pop for pop. Scores are float64, computed with
// explicit round-to-nearest adds in the reference's order (no contraction, no reassociation):
//   first node  s = lp[0][0];  first child  s + lp[d][0];  next sibling  (s - lp[d-1][r]) + lp[d-1][r+1].
// Each pop takes the best frontier entry under the total order (score descending, rank tuple ascending).
// Instead of a sequential heap, warp 0 finds that entry with a parallel argmin over the frontier (size <= B),
// so a pop costs O(B/32 + log 32) instead of O(log B) dependent shared-memory round trips.
// Rank tuples are packed into 64-bit words, 6 ranks of 10 bits per word from the most significant end,
// zero padded: comparing the words and then the depth is exactly lexicographic order with prefixes first.
// Sorting the top-B set instead of replaying pops is faster, but it differs from the heap when float64
// rounding makes a sibling beat its predecessor by an ulp (round-half-even can): the select-then-verify
// variants (select_verify and the builds after it) check that the heap would pop their selection and replay where
// not.
//
// The variants are types (tree_build_variants.cuh): this file is one kernel template, build_tree<V>, whose code
// each variant's strategy picks by `if constexpr`, instantiated once per build as tree_build_kernel for the variant
// its spec names (TB_VARIANT); each strategy's device functions are in tree_build_device/ (heap_pop, lane_pop,
// select and level_select, warp_select, race). Which build a launch runs and with what geometry is decided in one
// place, tree_build_launch() in tree_build.cuh.
//
// Launch: grid = bs, block = KERNEL_BLOCK threads (>= 32), dynamic shared memory laid out by tree_build_smem()
// in tree_build.cuh, which the host reads through tree_build_geometry below. lp_in_smem = 1 stages the
// L*K log-probs there. Inputs are validated on the host first (contract/tree_build.py): shapes, sorted rows,
// no NaN, limits. full_mask == nullptr skips the (opt-in) FULL_MASK layout.
#include "tree_build.cuh"
#include "tree_build_device/heap_pop.cuh"
#include "tree_build_device/lane_pop.cuh"
#include "tree_build_device/level_select.cuh"
#include "tree_build_device/race.cuh"
#include "tree_build_device/select.cuh"
#include "tree_build_device/warp_select.cuh"

#ifndef TB_VARIANT
#error "a tree_build build names its variant type: -DTB_VARIANT=heap_smem (kernels_cu/specs.py)"
#endif
#ifndef TB_SELECT_MIN_B
#define TB_SELECT_MIN_B 0  // a design knob (lab/tree_build_dev.py): budgets below this go straight to the replay
#endif

namespace tb {
static_assert(KERNEL_BLOCK >= 32 && KERNEL_BLOCK % 32 == 0, "warp 0 does the pops; the rest help with layouts");

// The variant this build instantiates: the spec's type, with the policies a design build of lab/tree_build_dev.py
// may override (TB_STAGE_LP, TB_SELECT_CAP, TB_RACE_MIN_B; kernels_cu/tree_build_ops.policy() reads the same
// defines, and no registered spec names one: conformance/test_kernels_build.py).
struct Built : TB_VARIANT {
#ifdef TB_STAGE_LP
  static constexpr int stage_lp = TB_STAGE_LP;
#endif
#ifdef TB_SELECT_CAP
  static constexpr int select_cap = TB_SELECT_CAP;
#endif
#ifdef TB_RACE_MIN_B
  static constexpr int race_min_b = TB_RACE_MIN_B;
#endif
};
}  // namespace tb

// Host-side geometry, evaluated by the same constexpr functions the kernel uses: out[0] = dynamic shared
// memory bytes, out[1] = lp_in_smem, out[2] = select_cap, for budget B, depth L, K_in and the device's
// per-block limit.
extern "C" __global__ void tree_build_geometry(int B, int L, int K_in, long long smem_limit, long long* out) {
  const TreeBuildGeometry g = tree_build_geometry_of(tb::policy_of<tb::Built>(), B, L, K_in, smem_limit);
  out[0] = g.smem;
  out[1] = g.stage_lp ? 1 : 0;
  out[2] = g.select_cap;
}

namespace tb {

// The select path holds more live state than the replay: ptxas's default register target for the select
// variant spilled (64 registers on sm_90); one CTA per SM at least lets it take what it needs.
#ifndef TB_MIN_BLOCKS
#define TB_MIN_BLOCKS 1
#endif

template <class V>
__device__ __forceinline__ void build_tree(
    const float* __restrict__ top_logp,   // [bs, L, K_in]
    const int* __restrict__ top_ids,      // [bs, L, K_in]
    const int* __restrict__ root_tokens,  // [bs]
    const int* __restrict__ prefix_lens,  // [bs]
    int L, int K_in, int B, int lp_in_smem, int select_cap,
    int* __restrict__ n_nodes,            // [bs]
    int* __restrict__ parents, int* __restrict__ depths, int* __restrict__ tokens, int* __restrict__ ranks,
    double* __restrict__ scores,          // [bs, D]
    uint32_t* __restrict__ visibility,    // [bs, D, W]
    int* __restrict__ positions, int* __restrict__ first_child, int* __restrict__ next_sibling,
    uint8_t* __restrict__ full_mask) {    // flat, per request [D, prefix + D]
  constexpr bool kSelects = selects(V::strategy);
  constexpr bool kRaceLayout = races(V::strategy);                 // the race's shared-memory layout
  constexpr bool kRacing = kRaceLayout && TB_FALLBACK == 1;        // and the race itself (race.cuh)
  extern __shared__ __align__(16) unsigned char smem[];
  const int b = blockIdx.x;
  const int D = B + 1;
  const int W = (D + 31) / 32;
  const int K = B < K_in ? B : K_in;
  const int nwords = tree_build_rank_words(L);
  const TreeBuildSmem lay = tree_build_smem(B, L, K, lp_in_smem != 0, select_cap, kRaceLayout);
  Entry* frontier = reinterpret_cast<Entry*>(smem + lay.frontier);  // [D]
  uint64_t* words = reinterpret_cast<uint64_t*>(smem + lay.words);  // [D * nwords]
  double* s_score = reinterpret_cast<double*>(smem + lay.score);    // [D]
  int* s_parent = reinterpret_cast<int*>(smem + lay.parent);        // [D]
  int* s_depth = reinterpret_cast<int*>(smem + lay.depth);          // [D]
  int* s_rank = reinterpret_cast<int*>(smem + lay.rank);            // [D]
  int* s_first = reinterpret_cast<int*>(smem + lay.first);          // [D]
  int* s_next = reinterpret_cast<int*>(smem + lay.next);            // [D]
  int* s_last = reinterpret_cast<int*>(smem + lay.last);            // [D] last child so far
  float* s_lp = reinterpret_cast<float*>(smem + lay.lp);            // [L * K] when lp_in_smem
  __shared__ int s_count;
  __shared__ long long s_prefix_sum;

  const float* g_lp = top_logp + size_t(b) * L * K_in;
  const int* ids = top_ids + size_t(b) * L * K_in;
  const int tid = threadIdx.x;
  // Every log-prob a pop can read is lp[d][r] with r < K. Staging that block in shared memory turns the
  // two or three dependent global loads of each pop into shared-memory loads.
  if (lp_in_smem)
    for (int k = tid; k < L * K; k += blockDim.x) s_lp[k] = g_lp[size_t(k / K) * K_in + k % K];
  const float* lp = lp_in_smem ? s_lp : g_lp;
  const int lp_stride = lp_in_smem ? K : K_in;

  for (int i = tid; i < D; i += blockDim.x) {
    s_parent[i] = -1; s_depth[i] = 0; s_rank[i] = -1; s_first[i] = -1; s_next[i] = -1; s_last[i] = -1;
    s_score[i] = i == 0 ? 0.0 : -CUDART_INF;
  }
  for (int i = tid; i < nwords; i += blockDim.x) words[i] = 0ull;  // the root's (empty) tuple
  if (tid == 0) s_prefix_sum = 0;
  __syncthreads();
  if (full_mask != nullptr) {  // sum(prefix_lens[:b]), where this request's FULL_MASK block starts
    long long part = 0;
    for (int i = tid; i < b; i += blockDim.x) part += prefix_lens[i];
    if (part) atomicAdd(reinterpret_cast<unsigned long long*>(&s_prefix_sum), (unsigned long long)part);
  }
  __syncthreads();

  // the replay's nodes in pop order (the heap's pops, or a sequential selection's S)
  const BuiltNodes replayed{s_score, s_parent, s_depth, s_rank, s_first, s_next};
  // a race's selection's own nodes, in its region ahead of U (the replay writes s_*; the layouts read the winner's)
  double* r_score = reinterpret_cast<double*>(smem + lay.select);
  int* r_parent = reinterpret_cast<int*>(r_score + D);
  const BuiltNodes selected{r_score, r_parent, r_parent + D, r_parent + 2 * D, r_parent + 3 * D, r_parent + 4 * D};
  __shared__ int s_race;           // a race's word (race.cuh)
  __shared__ int s_select_status;  // a reporting build's (TB_FALLBACK 2) outcome of the selection
  // whether this launch selects at all (the geometry gave it candidates, and the budget is one it selects for)
  [[maybe_unused]] const bool select_on = tree_build_selection_on(V::strategy, select_cap, B, L, K, TB_SELECT_MIN_B);

  if constexpr (V::strategy == kHeapPop) {
    // ---- the pops: warp 0 only, an argmin scan over the frontier (heap_pop.cuh) ----------------------------
    if (tid < 32) heap_pop_replay(frontier, words, nwords, lp, lp_stride, L, K, B, replayed, s_last, &s_count, tid);
  } else if constexpr (kRacing) {
    // ---- the race: the selection on every warp but warp 1, the lane-cached replay on warp 1 (race.cuh) -----
    const SelectSet u = candidate_set(smem + lay.select + tree_build_race_out_bytes(B), select_cap, nwords);
    race_build(select_on, u, select_cap, lp, lp_stride, L, K, B, frontier, words, nwords, replayed, selected,
               &s_count, &s_race);
  } else {
    bool replay = true;
    if constexpr (kSelects) {
      if (select_on) {
        // ---- the selection, on the whole block (level_select.cuh, warp_select.cuh) -------------------------
        // U over the replay's frontier (which the replay after it rewrites), or in a race's layout (its reporting and
        // mutant builds run the selection and then the replay) in the selection's region after its nodes
        const SelectSet u = candidate_set(smem + lay.select + (kRaceLayout ? tree_build_race_out_bytes(B) : 0),
                                          select_cap, nwords);
        int st;
        if constexpr (warp_generates(V::strategy))
          st = warp_select(u, select_cap, lp, lp_stride, L, K, B, replayed, &s_count);
        else
          st = select_build(u, select_cap, g_lp, L, K_in, K, B, replayed, &s_count);
        replay = st == kOverflow || (st == kUnverified && TB_FALLBACK != 0);
        if constexpr (TB_FALLBACK == 2)
          if (tid == 0) s_select_status = st;
        __syncthreads();  // U is dead from here on: the replay reuses its space
      }
    }
    // ---- the pops: warp 0, each lane caching the best of its own slots (lane_pop.cuh) ------------------------
    if (replay && (tid >> 5) == 0) {
      const int lane = tid & 31;
      for (int x = lane; x < nwords; x += 32) words[x] = 0ull;  // the root's tuple (a failed selection used it)
      __syncwarp();
      lane_cached_replay(frontier, words, nwords, lp, lp_stride, L, K, B, replayed, &s_count, lane, nullptr);
    }
  }
  __syncthreads();

  // ---- outputs, all threads -----------------------------------------------------------------------------
  const int race_word = kRacing ? s_race : 0;
  const bool selection_won = kRacing && race_winner(race_word) == kSelectWon;
  // The replay's arrays again, from a base the compiler cannot see through: otherwise it keeps their six 64-bit
  // addresses live across the pops, and nvcc's build of lane_cached for sm_90 spilled one to an 8-byte stack
  // frame (KB.1.2; NVRTC's PTX did not), where recomputing them here costs a few integer adds.
  unsigned char* out_smem = smem;
  asm volatile("" : "+l"(out_smem));
  const BuiltNodes again{reinterpret_cast<double*>(out_smem + lay.score), reinterpret_cast<int*>(out_smem + lay.parent),
                         reinterpret_cast<int*>(out_smem + lay.depth), reinterpret_cast<int*>(out_smem + lay.rank),
                         reinterpret_cast<int*>(out_smem + lay.first), reinterpret_cast<int*>(out_smem + lay.next)};
  const BuiltNodes built = selection_won ? selected : again;
  const int n = selection_won ? race_word >> kRaceCountShift : s_count;
  const int root = root_tokens[b];
  const int P = prefix_lens[b];
  const size_t row0 = size_t(b) * D;
  if (tid == 0) n_nodes[b] = n;
  if constexpr (kSelects && TB_FALLBACK == 2)
    if (tid == 0 && select_on && s_select_status != kSelected)
      n_nodes[b] = -s_select_status;  // measuring: -1 unverified, -2 overflow
  for (int i = tid; i < D; i += blockDim.x) {
    const bool real = i < n;
    const int d = built.depth[i];
    parents[row0 + i] = real ? built.parent[i] : -1;
    depths[row0 + i] = d;
    tokens[row0 + i] = (real && i > 0) ? ids[size_t(d - 1) * K_in + built.rank[i]] : root;
    ranks[row0 + i] = built.rank[i];
    scores[row0 + i] = built.score[i];
    positions[row0 + i] = P + d;
    first_child[row0 + i] = built.first[i];
    next_sibling[row0 + i] = built.next[i];
    // Row i word by word from the top down, in one walk up the ancestor chain (indices only decrease):
    // stores only, since a read-modify-write of global memory per ancestor waits a round trip each time.
    // Real rows see themselves and their ancestors; pads the root and themselves only.
    uint32_t* vrow = visibility + (row0 + i) * W;
    int cw = i >> 5;
    for (int w = W - 1; w > cw; --w) vrow[w] = 0u;
    uint32_t acc = 0u;
    for (int j = i;;) {
      for (const int jw = j >> 5; cw > jw; --cw) {
        vrow[cw] = acc;
        acc = 0u;
      }
      acc |= 1u << (j & 31);
      if (j == 0) break;
      // A parent is always an earlier node; a broken build (a kernel mutant) may say otherwise, and then the walk
      // goes to the root instead of looping: its wrong parents still fail the checks, and the launch ends.
      const int p = real ? built.parent[j] : 0;
      j = p >= 0 && p < j ? p : 0;
    }
    vrow[0] = acc;
  }
  if (full_mask == nullptr) return;  // the FULL_MASK layout is opt-in
  __syncthreads();  // visibility rows of this request are complete (block-local global writes)
  // FULL_MASK: request b starts at D*D*b + D*sum(prefix_lens[:b]); row-major [D, P + D]
  const long long cols = (long long)P + D;
  uint8_t* fm = full_mask + (long long)D * D * b + (long long)D * s_prefix_sum;
  const uint32_t* vis_b = visibility + row0 * W;
  for (int r = 0; r < D; ++r) {  // row by row: coalesced byte stores, no division
    uint8_t* out = fm + r * cols;
    const uint32_t* vrow = vis_b + size_t(r) * W;
    for (long long c = tid; c < cols; c += blockDim.x) {
      const long long j = c - P;
      out[c] = j < 0 ? uint8_t(1) : uint8_t((vrow[j >> 5] >> (j & 31)) & 1u);
    }
  }
}
}  // namespace tb

extern "C" __global__ void __launch_bounds__(KERNEL_BLOCK, tb::selects(tb::Built::strategy) ? TB_MIN_BLOCKS : 0)
    tree_build_kernel(const float* __restrict__ top_logp, const int* __restrict__ top_ids,
                      const int* __restrict__ root_tokens, const int* __restrict__ prefix_lens, int L, int K_in, int B,
                      int lp_in_smem, int select_cap, int* __restrict__ n_nodes, int* __restrict__ parents,
                      int* __restrict__ depths, int* __restrict__ tokens, int* __restrict__ ranks,
                      double* __restrict__ scores, uint32_t* __restrict__ visibility, int* __restrict__ positions,
                      int* __restrict__ first_child, int* __restrict__ next_sibling, uint8_t* __restrict__ full_mask,
                      const unsigned* __restrict__ refused) {
  // The deferred path (and a step) passes its error flag: when tree_build_check_kernel, or an earlier op of the
  // round sharing the flag, refused a value, nothing is built. A refused top-k row (NaN log-probs, say) breaks the
  // total order every strategy relies on, and its outputs are never handed out anyway. nullptr: checked on the host.
  if (refused != nullptr && *refused != 0u) return;
  tb::build_tree<tb::Built>(top_logp, top_ids, root_tokens, prefix_lens, L, K_in, B, lp_in_smem, select_cap, n_nodes,
                            parents, depths, tokens, ranks, scores, visibility, positions, first_child, next_sibling,
                            full_mask);
}

// Deferred checks (tree_build_ops.prepare_deferred, spec TB.4.5): the contract's value checks of one request
// on the device, so that a call on device-resident inputs needs no host copy and can be graph-captured.
// Any failure sets *flag; the host reads the flag after the call and only then copies the inputs and runs
// the contract's validate(), which raises the named error (the messages are written once, in the contract).
// grid = bs, block = KERNEL_BLOCK; the build kernel runs after it on the same flag and builds nothing when it is set
// (its `refused` argument), so no strategy ever runs on values the contract refuses.
constexpr int kCheckTable = 2048;  // open addressing for one row's ids
static_assert(kCheckTable >= 2 * CONTRACT_MAX_TOPK, "the id table must stay at most half full");

extern "C" __global__ void __launch_bounds__(KERNEL_BLOCK) tree_build_check_kernel(
    const float* __restrict__ top_logp, const int* __restrict__ top_ids, const int* __restrict__ root_tokens,
    const int* __restrict__ prefix_lens, int L, int K_in, int B, unsigned* __restrict__ flag) {
  __shared__ int table[kCheckTable];
  const int b = blockIdx.x, tid = threadIdx.x;
  const float* lp = top_logp + size_t(b) * L * K_in;
  const int* ids = top_ids + size_t(b) * L * K_in;
  bool bad = false;
  for (int k = tid; k < L * K_in; k += blockDim.x) {  // NaN, > 0, rows non-increasing, ids >= 0
    const float v = lp[k];
    bad |= v != v || v > 0.f || (k % K_in > 0 && v > lp[k - 1]) || ids[k] < 0;
  }
  if (tid == 0)  // root token, prefix length, context limit (prefix_len + D)
    bad |= root_tokens[b] < 0 || prefix_lens[b] < 0 || (long long)prefix_lens[b] + 1 + B > CONTRACT_MAX_CONTEXT;
  for (int d = 0; d < L && K_in > 1; ++d) {  // distinct ids per row
    for (int i = tid; i < kCheckTable; i += blockDim.x) table[i] = -1;
    __syncthreads();
    for (int r = tid; r < K_in; r += blockDim.x) {
      const int id = ids[size_t(d) * K_in + r];
      if (id < 0) continue;  // flagged above
      for (unsigned h = (unsigned(id) * 2654435761u) & (kCheckTable - 1);; h = (h + 1) & (kCheckTable - 1)) {
        const int old = atomicCAS(&table[h], -1, id);
        if (old == -1) break;
        if (old == id) {
          bad = true;
          break;
        }
      }
    }
    __syncthreads();
  }
  if (bad) atomicOr(flag, 1u);
}
