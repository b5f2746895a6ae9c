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
// variant (TB_SELECT, below) checks that the heap would pop its selection and replays where not.
//
// Launch: grid = bs, block = KERNEL_BLOCK threads (>= 32), dynamic shared memory laid out by tree_build_smem()
// in tree_build.cuh, which the host reads through tree_build_geometry below. lp_in_smem = 1 stages the
// L*K log-probs there. Inputs are validated on the host first (contract/tree_build.py): shapes, sorted rows,
// no NaN, limits. full_mask == nullptr skips the (opt-in) FULL_MASK layout.
#include "tree_build.cuh"

#ifndef TB_POP
#define TB_POP 0  // 0: warp argmin scan over the frontier; 1: lane-cached bests (lane_cached_replay)
#endif
#ifndef TB_SELECT
#define TB_SELECT 0  // 1: select-then-verify first, the lane-cached replay (TB_POP 1) where it fails
#endif
#ifndef TB_WARPGEN
#define TB_WARPGEN 0  // with TB_SELECT: warp 0 generates the candidates (warp_generate, below)
#endif
#ifndef TB_SELECT_MIN_B
#define TB_SELECT_MIN_B 0  // budgets below this go straight to the replay
#endif
#ifndef TB_FALLBACK
// What a failed selection does: 1 replays the heap (always, in a build); 2 replays it and reports why in
// n_nodes (-1 a check failed, -2 U overflowed: lab/tree_build_dev.py measures the fallback rate). The
// harness's fallback mutant sets 0: it keeps an unverified selection.
#define TB_FALLBACK 1
#endif
#ifndef TB_RACE
// 1: the selection (warp 0 generating, then every warp but warp 1 ranking and checking) and the lane-cached
// replay (warp 1) run at once, each in its own shared memory, and the first to finish with the heap's tree wins
// (both are exact: the replay by construction, the selection once checked); the loser stops at its next level
// or pop. Only in a build that replays on failure (TB_FALLBACK 1): the measuring and mutant builds keep the
// layout but run the selection first and the replay after it, so that what they report is the selection's.
#define TB_RACE 0
#endif
#define TB_RACING (TB_RACE && TB_FALLBACK == 1)
#ifndef TB_RACE_POLL
#define TB_RACE_POLL 4  // pops between the replay's looks at the race
#endif
static_assert(!TB_RACE || (TB_SELECT && TB_WARPGEN && TB_POP == 1 && KERNEL_BLOCK >= 128),
              "a race needs the warp build's selection, the lane-cached replay and warps besides those two");

namespace {

constexpr int kRanksPerWord = kTreeBuildRanksPerWord;
constexpr int kRankBits = kTreeBuildRankBits;
static_assert(KERNEL_BLOCK >= 32 && KERNEL_BLOCK % 32 == 0, "warp 0 does the pops; the rest help with layouts");

struct Entry {          // a pending candidate in the frontier
  double score;
  int16_t parent;       // tree index of its parent (0 = root)
  int16_t rank;         // rank at its own depth
  int16_t depth;        // 1-based
  int16_t pad;
};

__device__ __forceinline__ uint64_t rank_bits(int depth, int rank, int word) {
  // position depth-1 lives in word (depth-1)/6 at bit 50 - 10*((depth-1)%6)
  const int pos = depth - 1;
  return (pos / kRanksPerWord == word) ? (uint64_t(rank) << (50 - kRankBits * (pos % kRanksPerWord))) : 0ull;
}

// Is candidate a strictly better (popped earlier) than b?  tuple(x) = tuple(parent(x)) + (rank(x)).
__device__ __forceinline__ bool better(const Entry& a, const Entry& b, const uint64_t* words, int nwords) {
  if (a.score != b.score) return a.score > b.score;
  for (int w = 0; w < nwords; ++w) {
    const uint64_t wa = words[a.parent * nwords + w] | rank_bits(a.depth, a.rank, w);
    const uint64_t wb = words[b.parent * nwords + w] | rank_bits(b.depth, b.rank, w);
    if (wa != wb) return wa < wb;
  }
  return a.depth < b.depth;
}

// ---- the lane-cached pop's entries (TB_POP = 1) ------------------------------------------------------
// A frontier entry as (score, meta): meta packs parent (11 bits), rank (10 bits) and depth (6 bits).
__device__ __forceinline__ int pack_meta(int parent, int rank, int depth) {
  return parent | (rank << 11) | (depth << 21);
}
__device__ __forceinline__ Entry unpack(double s, int m) {
  return Entry{s, int16_t(m & 2047), int16_t((m >> 11) & 1023), int16_t(m >> 21), 0};
}
// Does (sa, ma) pop before (sb, mb)? The same total order as better(), on packed entries.
__device__ __forceinline__ bool before(double sa, int ma, double sb, int mb, const uint64_t* words, int nwords) {
  return better(unpack(sa, ma), unpack(sb, mb), words, nwords);
}
// An unsigned key whose order is the score order: -0.0 and +0.0 (equal scores, ordered by rank tuple) get
// one key, so lanes whose bests tie in score tie in key and go to the tuple comparison.
__device__ __forceinline__ uint64_t order_key(double s) {
  const uint64_t u = uint64_t(__double_as_longlong(s == 0.0 ? 0.0 : s));
  return (u >> 63) ? ~u : (u | (1ull << 63));
}

// ---- select-then-verify (TB_SELECT = 1) ------------------------------------------------------------
// The heap pops, in order, the set S of its first B nodes. Instead of replaying it pop by pop, the block
// (1) selects a candidate set U level by level, pruned by a score threshold tau that only rises (after each
// level, tau = the B-th best score of U, so tau never passes the B-th best score of the whole tree) and by
// a staircase bound (the parent ranked j-th in its level keeps at most floor(B / (j + 1)) children: each of
// the j better parents has a child better than any of those), (2) ranks U in the heap's total order and
// takes the first B as S, and (3) verifies, node by node, the three conditions under which the heap pops
// exactly S in that order:
//   (a) S is closed under generators (a node's previous sibling, or its parent for rank 0),
//   (b) every successor (next sibling, first child) of a node of S with a finite score is in S, or comes
//       after the last node of S in the total order (and S holds B nodes),
//   (c) no node of S comes before its generator (only an ulp of float64 rounding can make a next sibling's
//       score exceed its predecessor's).
// Then the heap's best is always the next node of S (its generator was popped before it, and every other
// frontier entry is a later node of S or after all of S), so the replay would pop S in rank order. Where a
// check fails, U overflows its capacity, or a sibling chain is not stable (below), the kernel replays the heap.
// Scores: rank r >= 1 of a sibling chain is (s_{r-1} - lp[r-1]) + lp[r]; when every t_r = s_r - lp[r] of
// the chain equals t_0 (checked per element), s_r = t_0 + lp[r] needs no chain, and it is non-increasing in r
// (one rounding of a non-increasing function), so a binary search finds the ranks at or above tau.
constexpr int kMaxRankWords = (CONTRACT_MAX_DEPTH + kRanksPerWord - 1) / kRanksPerWord;
constexpr int kMetaParentBits = 13;           // U index of the parent (0 = the root)
constexpr int kMetaDropped = (1 << kMetaParentBits) - 1;  // the parent was pruned (the check (a) fails)
static_assert(kTreeBuildSelectMaxCap < kMetaDropped, "a U index must not read as the dropped mark");

__device__ __forceinline__ int sel_meta(int parent, int rank, int depth) {
  return parent | (rank << kMetaParentBits) | (depth << (kMetaParentBits + kRankBits));
}
__device__ __forceinline__ int sel_parent(int m) { return m & kMetaDropped; }
__device__ __forceinline__ int sel_rank(int m) { return (m >> kMetaParentBits) & ((1 << kRankBits) - 1); }
__device__ __forceinline__ int sel_depth(int m) { return m >> (kMetaParentBits + kRankBits); }

struct SelectSet {  // U, in the space of the replay's frontier and tuple words
  double* score;    // [cap]
  uint64_t* words;  // [cap * nwords] rank tuple (tree_build.cu's packing)
  int* meta;        // [cap] sel_meta(parent, rank, depth)
  int* first;       // [cap] U index of the first child, -1 if none in U
  int* aux;         // [cap] scratch: staircase rank, keep flag, heap rank
  int* aux2;        // [cap] scratch: child counts -> offsets, new indices
  int nwords;
};

// Is U[i] before U[j] in the heap's total order (score descending, rank tuple ascending, prefix first)?
__device__ __forceinline__ bool sel_before(const SelectSet& u, int i, int j) {
  const double a = u.score[i], b = u.score[j];
  if (a != b) return a > b;
  for (int w = 0; w < u.nwords; ++w) {
    const uint64_t wa = u.words[i * u.nwords + w], wb = u.words[j * u.nwords + w];
    if (wa != wb) return wa < wb;
  }
  return sel_depth(u.meta[i]) < sel_depth(u.meta[j]);
}

// In-place exclusive prefix sum of a[0, n) in shared memory by the whole block; returns the total.
// Chunks of KERNEL_BLOCK: warp shuffles, then the warps' sums through `warp_sums`.
__device__ __forceinline__ int block_exclusive_scan(int* a, int n, int* warp_sums) {
  constexpr int kWarps = KERNEL_BLOCK / 32;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int carry = 0;
  for (int base = 0; base < n; base += KERNEL_BLOCK) {
    const int i = base + tid;
    const int v = i < n ? a[i] : 0;
    int x = v;
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, x, o);
      if (lane >= o) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
      int w = lane < kWarps ? warp_sums[lane] : 0;
      for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, w, o);
        if (lane >= o) w += y;
      }
      if (lane < kWarps) warp_sums[lane] = w;  // inclusive sums of the warps
    }
    __syncthreads();
    const int before = carry + (warp ? warp_sums[warp - 1] : 0) + x - v;
    const int chunk = warp_sums[kWarps - 1];
    if (i < n) a[i] = before;
    __syncthreads();  // warp_sums is rewritten by the next chunk
    carry += chunk;
  }
  return carry;
}

// Children of the parent U[p] (depth d, its score sp) that may belong to S: their number, the first
// child's score s0 and the chain's t0 (for s_r = t0 + lp[r], r >= 1). Block-uniform arguments only.
struct ChildChain { double s0, t0; };
__device__ __forceinline__ ChildChain child_chain(double sp, int d, const float* lp, int K_in) {
  const double l0 = double(lp[size_t(d) * K_in]);
  const double s0 = d == 0 ? l0 : __dadd_rn(sp, l0);  // the first node is float(lp[0][0]), no addition
  return ChildChain{s0, __dsub_rn(s0, l0)};
}

// How many children of a parent (score sp, depth d) score at least `tau` among its first `cap_r` ranks: rank 0
// by its own score, ranks 1.. by t0 + lp[r], which is non-increasing in r (a binary search).
__device__ __forceinline__ int children_at_or_above(double sp, int d, int cap_r, uint64_t tau, const float* lp,
                                                    int K_in) {
  const ChildChain c = child_chain(sp, d, lp, K_in);
  if (cap_r <= 0 || c.s0 == -CUDART_INF || order_key(c.s0) < tau) return 0;
  const float* row = lp + size_t(d) * K_in;
  int lo = 1, hi = cap_r;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    const double sm = __dadd_rn(c.t0, double(row[mid]));
    if (sm != -CUDART_INF && order_key(sm) >= tau) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// The score of an order key (order_key's inverse; -0.0 comes back as +0.0, which compares equal).
__device__ __forceinline__ double key_score(uint64_t k) {
  return __longlong_as_double((long long)((k >> 63) ? (k & ~(1ull << 63)) : ~k));
}

// Trial thresholds of a raise of tau: kThresholds scores from hi (k = 0) down to lo (k = kThresholds - 1).
constexpr int kThresholds = 32;
constexpr int kRefineRounds = 4;
#ifndef TB_STAIR_MAX
#define TB_STAIR_MAX 256
#endif
constexpr int kStairMax = TB_STAIR_MAX;
__device__ __forceinline__ double trial_score(double hi, double lo, int k) {
  return k == kThresholds - 1 ? lo : hi - (hi - lo) * (double(k) / (kThresholds - 1));
}

// Raise *tau (block-uniform, in shared memory) to the highest of kThresholds trial scores, spread between the
// best and the worst score of the candidates, that at least B candidates reach; `rounds` times, each round
// spreading its trials between the last one reached and the first one not. The candidates: U[1, n), and the
// children of the parents U[pb, pb + P) at depth d within their caps (aux) when P > 0. At least B nodes of
// the tree score >= *tau afterwards, so the B-th best score of the tree is at least *tau.
__device__ __forceinline__ void raise_tau(const SelectSet& u, int n, int pb, int P, int d, const float* lp, int K_in,
                                          int B, int rounds, unsigned long long* tau_p) {
  __shared__ unsigned long long lo_k, hi_k, trial_key[kThresholds];
  __shared__ int count[kThresholds];
  const int tid = threadIdx.x;
  if (tid == 0) { lo_k = ~0ull; hi_k = 0ull; }
  uint64_t lo = ~0ull, hi = 0ull;  // this thread's part of the range; one shared atomic per warp below
  for (int i = pb + tid; i < pb + P; i += KERNEL_BLOCK) {  // the children's best and worst scores
    const int c = u.aux[i];
    if (c <= 0) continue;
    const ChildChain ch = child_chain(u.score[i], d, lp, K_in);
    if (ch.s0 == -CUDART_INF) continue;
    const double worst = c == 1 ? ch.s0 : __dadd_rn(ch.t0, double(lp[size_t(d) * K_in + c - 1]));
    hi = max(hi, order_key(ch.s0));
    if (worst != -CUDART_INF) lo = min(lo, order_key(worst));
  }
  for (int i = 1 + tid; i < n; i += KERNEL_BLOCK) {
    const uint64_t k = order_key(u.score[i]);
    hi = max(hi, k);
    lo = min(lo, k);
  }
  for (int o = 16; o > 0; o >>= 1) {
    lo = min(lo, (uint64_t)__shfl_xor_sync(0xffffffffu, (unsigned long long)lo, o));
    hi = max(hi, (uint64_t)__shfl_xor_sync(0xffffffffu, (unsigned long long)hi, o));
  }
  __syncthreads();  // lo_k, hi_k initialised
  if ((tid & 31) == 0) {
    atomicMin(&lo_k, (unsigned long long)lo);
    atomicMax(&hi_k, (unsigned long long)hi);
  }
  __syncthreads();
  for (int round = 0; round < rounds; ++round) {
    const uint64_t tau = *tau_p;
    if (tid < kThresholds) {  // the trials' keys, once per round (a float64 division each)
      const double h = key_score(hi_k > tau ? hi_k : tau), l = key_score(lo_k > tau ? lo_k : tau);
      trial_key[tid] = order_key(trial_score(h, l, tid));
      count[tid] = 0;
    }
    __syncthreads();
    const int items = (n - 1 + P) * kThresholds;  // (U node or parent) x trial
    for (int q = tid; q < items; q += KERNEL_BLOCK) {
      const int k = q % kThresholds, x = q / kThresholds;
      const uint64_t th = trial_key[k];
      const int c = x < n - 1 ? int(order_key(u.score[1 + x]) >= th)
                              : children_at_or_above(u.score[pb + x - (n - 1)], d, u.aux[pb + x - (n - 1)], th, lp,
                                                     K_in);
      if (c) atomicAdd(&count[k], c);
    }
    __syncthreads();
    int best = kThresholds - 1;  // the highest trial that B candidates reach
    while (best > 0 && count[best - 1] >= B) --best;
    const uint64_t raised = trial_key[best];
    const bool reached = count[best] >= B;
    const uint64_t above = trial_key[best > 0 ? best - 1 : 0];
    __syncthreads();
    if (tid == 0) {
      if (reached && raised > tau) *tau_p = raised;
      if (best > 0) hi_k = above;  // reached by fewer than B
      lo_k = *tau_p;
    }
    __syncthreads();
  }
}

// Status of select_build: the selection is the heap's (kSelected), or why not.
enum SelectStatus { kSelected = 0, kUnverified = 1, kOverflow = 2 };
// A race's outcome (TB_RACE): undecided, or which build finished first. The race's word holds it in its low
// two bits and, when the selection won, 1 + the selection's node count above them (kRaceCountShift): the winner's
// one atomic write hands over both, so the layouts read nothing the losing side may still write.
enum RaceState { kUndecided = 0, kSelectWon = 1, kReplayWon = 2 };
constexpr int kRaceCountShift = 2;
__device__ __forceinline__ int race_winner(int word) { return word & ((1 << kRaceCountShift) - 1); }

// The threads that finish a selection (rank, check, write S): the whole block (race == nullptr), or in a race
// every warp but the replay's (warp 1), synchronised by the named barrier 1 so that the racing warp never has
// to join, and stopping when the race's word says the replay has won.
struct SelectGroup {
  int tid, size;
  const volatile int* race;
  __device__ __forceinline__ void sync() const {
    if (race != nullptr) asm volatile("bar.sync 1, %0;" ::"r"(size) : "memory");
    else __syncthreads();
  }
};

// A race's state as one warp sees it (lane 0's read, so that the warp decides as one).
__device__ __forceinline__ int race_state(const volatile int* race) {
  return race_winner(__shfl_sync(0xffffffffu, *race, 0));
}

// Where a build writes its nodes in pop order, for the layouts (D of each; index 0 is the root).
struct BuiltNodes {
  double* score;
  int *parent, *depth, *rank, *first, *next;
};

// Steps (2) and (3) of the select-then-verify build, on the threads of g, for any candidate set U[0, n) (U[0] the
// root; siblings adjacent and in rank order; `first` and the meta's parent in U): rank U in the heap's total
// order, take the first B as S, check (a)-(c), and on success write S in pop order to o and 1 + |S| to *count.
// `chain_failed` (uniform over g): a sibling chain of U was not stable, so the selection is not trusted. lp has
// row stride ls. Returns kSelected, or kUnverified (o untouched unless TB_FALLBACK is 0).
__device__ __forceinline__ int select_finish(const SelectSet& u, int n, int chain_failed, const float* lp, int ls,
                                             int L, int K, int B, const BuiltNodes& o, int* count,
                                             const SelectGroup g) {
  __shared__ int sh_fail, sh_last;
  // In a race, whether the replay has won, sampled by thread 0 once per sort stage into its own word (read by
  // every thread after the next barrier, so all of g leave together; a word is never rewritten).
  __shared__ int sh_lost[16];
  static_assert(kTreeBuildSelectMaxCap < (1 << 15), "a sort of U has at most 15 stages, one word each");
  const int tid = g.tid, nw = u.nwords;
  double* s_score = o.score;
  int *s_parent = o.parent, *s_depth = o.depth, *s_rank = o.rank, *s_first = o.first, *s_next = o.next;
  if (tid == 0) sh_fail = chain_failed;
  g.sync();
  // (2) the heap rank of each candidate; S = the first min(|U| - 1, B). A bitonic sort of the indices of U[1, n)
  // in aux2 (any length: a compare whose partner is past the end is skipped, the "mirror" form of each merge
  // keeps that exact), then aux = the rank.
  const int ns = n - 1 < B ? n - 1 : B;
  const int nc = n - 1;  // candidates to sort: U[1, n)
  for (int t = tid; t < nc; t += g.size) u.aux2[t] = t + 1;
  g.sync();
  int stage = 0;
  for (int k = 2; k / 2 < nc; k <<= 1, ++stage) {
    if (g.race != nullptr) {
      if (tid == 0) sh_lost[stage] = race_winner(*g.race) == kReplayWon;
      g.sync();
      if (sh_lost[stage]) return kOverflow;  // lost the race: the replay's tree is taken
    }
    for (int j = k / 2; j > 0; j >>= 1) {
      for (int t = tid; t < nc; t += g.size) {
        const int off = t & (k - 1);
        int p = -1;
        if (j == k / 2 && off < j) p = (t & ~(k - 1)) + k - 1 - off;  // mirror: the merge's first step
        if (j < k / 2 && (t & j) == 0) p = t + j;                      // half-cleaners
        if (p < 0 || p >= nc) continue;
        const int a = u.aux2[t], c = u.aux2[p];
        if (sel_before(u, c, a)) {
          u.aux2[t] = c;
          u.aux2[p] = a;
        }
      }
      g.sync();
    }
  }
  for (int t = tid; t < nc; t += g.size) {
    u.aux[u.aux2[t]] = t;
    if (t == ns - 1) sh_last = u.aux2[t];
  }
  if (tid == 0 && ns == 0 && double(lp[0]) != -CUDART_INF) sh_fail = 1;  // (0) is finite and not selected
  g.sync();
  // (3) the checks (a), (b), (c), node by node
  const int last = ns > 0 ? sh_last : 0;
  for (int i = 1 + tid; i < n; i += g.size) {
    if (u.aux[i] >= ns) continue;
    const int m = u.meta[i], p = sel_parent(m), r = sel_rank(m), d = sel_depth(m);
    const double sc = u.score[i];
    const uint64_t* wi = u.words + size_t(i) * nw;
    bool ok = p != kMetaDropped && (p == 0 || u.aux[p] < ns);                       // (a) parent
    if (ok && r > 0) {                                                               // (a), (c) previous sibling
      const int q = i - 1;  // siblings are adjacent in U, in rank order (U[0], the root, is nobody's sibling)
      ok = q >= 1 && sel_parent(u.meta[q]) == p && sel_rank(u.meta[q]) == r - 1 && u.aux[q] < ns && !(sc > u.score[q]);
    } else if (ok && p != 0) {
      ok = !(sc > u.score[p]);                                                       // (c) parent
    }
    if (ok && r + 1 < K) {                                                           // (b) next sibling
      const float* row = lp + size_t(d - 1) * ls;
      const double ys = __dadd_rn(__dsub_rn(sc, double(row[r])), double(row[r + 1]));
      const int q = i + 1;
      const bool in = q < n && sel_parent(u.meta[q]) == p && sel_rank(u.meta[q]) == r + 1 && u.aux[q] < ns;
      if (ys != -CUDART_INF && !in) {
        bool after = ns == B;
        if (after && u.score[last] != ys) {
          after = u.score[last] > ys;
        } else if (after) {  // equal scores: the tuples decide (y's is i's with rank r + 1)
          int w = 0;
          for (; w < nw; ++w) {
            const uint64_t wy = wi[w] + rank_bits(d, 1, w), wl = u.words[size_t(last) * nw + w];
            if (wl != wy) { after = wl < wy; break; }
          }
          if (w == nw) after = sel_depth(u.meta[last]) < d;
        }
        ok = after;
      }
    }
    if (ok && d < L) {                                                               // (b) first child
      const double zs = __dadd_rn(sc, double(lp[size_t(d) * ls]));
      const int f = u.first[i];
      const bool in = f >= 0 && u.aux[f] < ns;
      if (zs != -CUDART_INF && !in) {
        bool after = ns == B;
        if (after && u.score[last] != zs) {
          after = u.score[last] > zs;
        } else if (after) {  // equal scores: z's tuple is i's plus rank 0, one deeper
          int w = 0;
          for (; w < nw; ++w) {
            const uint64_t wl = u.words[size_t(last) * nw + w];
            if (wl != wi[w]) { after = wl < wi[w]; break; }
          }
          if (w == nw) after = sel_depth(u.meta[last]) < d + 1;
        }
        ok = after;
      }
    }
    if (!ok) sh_fail = 1;
  }
  g.sync();
  const int status = sh_fail ? kUnverified : kSelected;
  if (status != kSelected && TB_FALLBACK != 0) return status;
  // S in pop order. (Only the fallback mutant gets here unverified: the guards keep its writes in bounds.)
  for (int i = 1 + tid; i < n; i += g.size) {
    const int o = u.aux[i] + 1;
    if (o > ns) continue;
    const int m = u.meta[i], p = sel_parent(m), r = sel_rank(m);
    const int po = p == 0 ? 0 : (p == kMetaDropped || u.aux[p] >= ns) ? -1 : u.aux[p] + 1;
    s_score[o] = u.score[i];
    s_parent[o] = po < 0 ? 0 : po;
    s_depth[o] = sel_depth(m);
    s_rank[o] = r;
    if (r == 0 && po >= 0) s_first[po] = o;
    if (r > 0 && i > 1 && u.aux[i - 1] < ns && sel_parent(u.meta[i - 1]) == p) s_next[u.aux[i - 1] + 1] = o;
  }
  if (tid == 0) *count = ns + 1;
  return status;
}

// The whole block. On kSelected (and, for the fallback mutant, kUnverified) the nodes are in s_* in pop
// order and *count holds 1 + their number; otherwise s_* are untouched.
__device__ __forceinline__ int select_build(const SelectSet& u, int cap, const float* lp, int L, int K_in, int K, int B,
                                            const BuiltNodes& o, int* count) {
  __shared__ int warp_sums[KERNEL_BLOCK / 32];
  __shared__ int sh_n, sh_pb, sh_fail;
  __shared__ unsigned long long sh_tau;
  const int tid = threadIdx.x, nw = u.nwords;
  if (tid == 0) {  // U[0] is the root
    u.score[0] = 0.0;
    u.meta[0] = sel_meta(0, 0, 0);
    u.first[0] = -1;
    sh_n = 1; sh_pb = 0; sh_fail = 0;
    sh_tau = order_key(-1.7976931348623157e308);  // the lowest finite score: -inf is never selected
  }
  for (int w = tid; w < nw; w += KERNEL_BLOCK) u.words[w] = 0ull;
  __syncthreads();
  for (int d = 0; d < L; ++d) {
    const int pb = sh_pb, n = sh_n, P = n - pb;
    if (P == 0) break;
    // staircase rank of each parent within its level (same-level U order is rank-tuple order): aux = its cap.
    // An O(P^2) count, so only on levels of at most kStairMax parents (elsewhere rank 0, the cap K: a larger
    // cap only costs threshold rounds, never exactness).
    for (int i = pb + tid; i < n; i += KERNEL_BLOCK) {
      const uint64_t ki = order_key(u.score[i]);
      int j = 0;
      for (int x = pb; x < n && P <= kStairMax; ++x) {
        const uint64_t kx = order_key(u.score[x]);
        j += kx > ki || (kx == ki && x < i);
      }
      const int stair = j < B ? B / (j + 1) : 0;
      u.aux[i] = stair < K ? stair : K;
      u.first[i] = -1;
    }
    __syncthreads();
    uint64_t tau = sh_tau;
    int total = 0;
    for (int round = 0;; ++round) {
      for (int i = pb + tid; i < n; i += KERNEL_BLOCK)
        u.aux2[i] = children_at_or_above(u.score[i], d, u.aux[i], tau, lp, K_in);
      __syncthreads();
      total = block_exclusive_scan(u.aux2 + pb, P, warp_sums);  // offsets of each parent's children
      if (n + total <= cap) break;  // block-uniform: total and n are the same in every thread
      if (round == kRefineRounds) return kOverflow;
      // Too many: raise tau (the B-th best score of the tree is at least as high), then count again.
      raise_tau(u, n, pb, P, d, lp, K_in, B, 2, &sh_tau);
      tau = sh_tau;
    }
    if (total == 0) break;
    // the children, one thread each; the parent by binary search over the offsets
    for (int k = tid; k < total; k += KERNEL_BLOCK) {
      int lo = 0, hi = P - 1;  // the last parent whose offset is <= k
      while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (u.aux2[pb + mid] <= k) lo = mid; else hi = mid - 1;
      }
      const int p = pb + lo, r = k - u.aux2[p], idx = n + k;
      const ChildChain c = child_chain(u.score[p], d, lp, K_in);
      double sc = c.s0;
      if (r > 0) {
        const double l = double(lp[size_t(d) * K_in + r]);
        sc = __dadd_rn(c.t0, l);
        if (__dsub_rn(sc, l) != c.t0) sh_fail = 1;  // the chain is not stable here
      } else if (d > 0) {
        u.first[p] = idx;
      }
      u.score[idx] = sc;
      u.meta[idx] = sel_meta(p, r, d + 1);
      u.first[idx] = -1;
      for (int w = 0; w < nw; ++w) u.words[size_t(idx) * nw + w] = u.words[size_t(p) * nw + w] | rank_bits(d + 1, r, w);
    }
    if (d == 0 && tid == 0) u.first[0] = n;  // the root's first child (rank 0 is always kept when any is)
    __syncthreads();
    const int n2 = n + total;
    if (tid == 0) { sh_pb = n; sh_n = n2; }
    if (n2 - 1 > B) {  // prune: tau rises as far as B nodes of U reach it; the nodes below it go
      raise_tau(u, n2, n2, 0, d, lp, K_in, B, 2, &sh_tau);
      const uint64_t tau_kept = sh_tau;
      for (int i = 1 + tid; i < n2; i += KERNEL_BLOCK) {
        const int keep = order_key(u.score[i]) >= tau_kept;
        u.aux[i] = keep;
        u.aux2[i] = keep;
      }
      if (tid == 0) { u.aux[0] = 1; u.aux2[0] = 1; }
      __syncthreads();
      const int kept = block_exclusive_scan(u.aux2, n2, warp_sums);  // aux2 = new index of a kept node
      // move the kept nodes down, one chunk of KERNEL_BLOCK at a time: targets never pass the chunk's end
      for (int base = 0; base < n2; base += KERNEL_BLOCK) {
        const int i = base + tid;
        const bool mine = i < n2 && u.aux[i];
        double sc = 0.0;
        int m = 0, f = -1;
        uint64_t wd[kMaxRankWords];
        if (mine) {
          sc = u.score[i];
          m = u.meta[i];
          f = u.first[i];
#pragma unroll
          for (int w = 0; w < kMaxRankWords; ++w) wd[w] = w < nw ? u.words[size_t(i) * nw + w] : 0ull;
        }
        __syncthreads();
        if (mine) {
          const int j = u.aux2[i];
          const int p = sel_parent(m);
          const int np = i == 0 ? 0 : (u.aux[p] ? u.aux2[p] : kMetaDropped);
          u.score[j] = sc;
          u.meta[j] = (m & ~kMetaDropped) | np;
          u.first[j] = (f >= 0 && u.aux[f]) ? u.aux2[f] : -1;
#pragma unroll
          for (int w = 0; w < kMaxRankWords; ++w)
            if (w < nw) u.words[size_t(j) * nw + w] = wd[w];
        }
        __syncthreads();
      }
      if (tid == 0) {
        sh_pb = u.aux2[n];  // the new level starts where its first kept node went (n < n2 here)
        sh_n = kept;
      }
    }
    __syncthreads();
  }
  return select_finish(u, sh_n, sh_fail, lp, K_in, L, K, B, o, count, SelectGroup{tid, KERNEL_BLOCK, nullptr});
}

// ---- the warp build's candidates (TB_WARPGEN = 1) ---------------------------------------------------
// The same select-then-verify contract (any U works: (a)-(c) decide), generated by warp 0 alone so that a level
// costs warp collectives instead of block barriers. Level by level, each parent keeps the children whose score
// reaches tau (a galloping search of the non-increasing chain t0 + lp[r]), capped by its dominator count: the
// node y = (r_1..r_d) comes after every (r'_1..r'_e) with e <= d and r'_i <= r_i (each step to a smaller rank or
// a shorter prefix keeps or raises the score, and wins ties by the tuple), dom(y) = sum_e prod_{i<=e}(r_i + 1)
// of them, so y is in S only if dom(y) <= B. tau rises, and the nodes below it leave U (an order-keeping
// compaction), when U holds more than 2B nodes after a level or a level's children do not fit: to the highest
// 20-bit prefix of the order keys that at least B nodes of U reach (so never past the tree's B-th best score).
// A level whose children do not fit is expanded in parts, a prune between parts; no room even then: overflow.
constexpr int kPruneBits = 20;  // resolution of a raise of tau: sign, exponent and 8 bits of the score
constexpr int kPrefixShift = 64 - kPruneBits;  // an order key's kPruneBits-bit prefix
#ifndef TB_PRUNE_PCT
#define TB_PRUNE_PCT 200  // a level that leaves U with more than this percentage of B nodes is pruned
#endif
constexpr int kPruneAtPct = TB_PRUNE_PCT;

// How many children of the parent U[i] (depth d) score at least tau within its dominator cap; aux holds the
// parent's dom | wt << 16 (wt = prod (r_i + 1)). row = lp[d], l0 = lp[d][0].
__device__ __forceinline__ int warp_child_count(const SelectSet& u, int i, int d, double l0, const float* row,
                                                uint64_t tau, int B, int K) {
  const int dw = u.aux[i], dom = dw & 0xffff, wt = dw >> 16;
  int cap = dom < B ? (B - dom) / wt : 0;
  cap = cap < K ? cap : K;
  if (cap <= 0) return 0;
  const double s0 = d == 0 ? l0 : __dadd_rn(u.score[i], l0);  // the first node is float(lp[0][0])
  if (s0 == -CUDART_INF || order_key(s0) < tau) return 0;
  const double t0 = __dsub_rn(s0, l0);
  // Ranks 1..3 at once (independent loads: most parents keep one to three children), then a gallop from 4.
  int n3 = 1;
#pragma unroll
  for (int r = 1; r <= 3; ++r) {
    const double sr = r < cap ? __dadd_rn(t0, double(row[r])) : -CUDART_INF;
    n3 += sr != -CUDART_INF && order_key(sr) >= tau;
  }
  if (n3 < 4 || cap == 4) return n3;
  int lo = 4, hi = cap;  // ranks [0, lo) reach tau; the answer is in [lo, hi]
  for (int step = 1; lo < hi; step <<= 1) {
    const int probe = lo + step - 1 < hi - 1 ? lo + step - 1 : hi - 1;
    const double sp = __dadd_rn(t0, double(row[probe]));
    if (sp != -CUDART_INF && order_key(sp) >= tau) {
      lo = probe + 1;
    } else {
      hi = probe;
      break;
    }
  }
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    const double sm = __dadd_rn(t0, double(row[mid]));
    if (sm != -CUDART_INF && order_key(sm) >= tau) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// The highest tau' >= tau (a 20-bit key prefix) that at least B of the nodes U[1, n) reach; tau when fewer
// than B do. The items' 20-bit prefixes v = key >> kPrefixShift (0 below tau) sit in registers up to
// 32 * kRaiseRegItems of them, beyond that in aux2. The answer is searched in [tau's prefix, the highest prefix], the range cut in
// W = TB_RAISE_WAYS parts a step (W - 1 warp sums of the lanes' counts), so a step reads the items once for
// log2(W) bits: with W = 8 about 7 steps instead of the 20 of a bit-by-bit search, which costs as much in
// registers but twice as much once the items are read from shared memory (lab/PERF_NOTES.md).
#ifndef TB_RAISE_WAYS
#define TB_RAISE_WAYS 8
#endif
constexpr int kRaiseRegItems = 16;
constexpr int kRaiseWays = TB_RAISE_WAYS;
static_assert(kRaiseWays >= 2, "the search cuts the range in at least two parts a step");
__device__ __forceinline__ uint64_t warp_raise_tau(const SelectSet& u, int n, uint64_t tau, int B, int lane) {
  if (n - 1 < B) return tau;
  const bool in_regs = n - 1 <= 32 * kRaiseRegItems;
  unsigned hv[kRaiseRegItems];
  unsigned top = 0;  // this lane's highest prefix
#pragma unroll
  for (int q = 0; q < kRaiseRegItems; ++q) hv[q] = 0u;
  if (in_regs) {
#pragma unroll
    for (int q = 0; q < kRaiseRegItems; ++q) {
      const int i = 1 + lane + 32 * q;
      const uint64_t k = i < n ? order_key(u.score[i]) : 0ull;
      hv[q] = k >= tau ? unsigned(k >> kPrefixShift) : 0u;  // a finite score's prefix is nonzero
      top = hv[q] > top ? hv[q] : top;
    }
  } else {
    for (int i = 1 + lane; i < n; i += 32) {
      const uint64_t k = order_key(u.score[i]);
      const unsigned v = k >= tau ? unsigned(k >> kPrefixShift) : 0u;
      u.aux2[i] = int(v);
      top = v > top ? v : top;
    }
  }
  // Each lane reads back only its own items (no warp sync needed). Invariant: at least B items reach lo
  // (checked first), fewer than B reach hi + 1 (none do).
  unsigned lo = unsigned(tau >> kPrefixShift), hi = __reduce_max_sync(0xffffffffu, top);
  {
    int c = 0;
    if (in_regs) {
#pragma unroll
      for (int q = 0; q < kRaiseRegItems; ++q) c += hv[q] >= lo;
    } else {
      for (int i = 1 + lane; i < n; i += 32) c += unsigned(u.aux2[i]) >= lo;
    }
    if (__reduce_add_sync(0xffffffffu, c) < B) return tau;
  }
  while (lo < hi) {
    unsigned t[kRaiseWays - 1];
    int c[kRaiseWays - 1];
#pragma unroll
    for (int w = 0; w < kRaiseWays - 1; ++w) {  // lo < t[0] <= t[1] <= ... <= hi
      t[w] = lo + unsigned((uint64_t(hi - lo) * (w + 1) + kRaiseWays - 1) / kRaiseWays);
      c[w] = 0;
    }
    if (in_regs) {
#pragma unroll
      for (int q = 0; q < kRaiseRegItems; ++q)
#pragma unroll
        for (int w = 0; w < kRaiseWays - 1; ++w) c[w] += hv[q] >= t[w];
    } else {
      for (int i = 1 + lane; i < n; i += 32) {
        const unsigned v = unsigned(u.aux2[i]);
#pragma unroll
        for (int w = 0; w < kRaiseWays - 1; ++w) c[w] += v >= t[w];
      }
    }
    // The parts [lo, t[0]), [t[0], t[1]), ..., [t[W-2], hi]: the answer is in the last part whose start at
    // least B items reach (the counts fall with w). Selected without indexing t[] (it stays in registers).
    unsigned nlo = lo, nhi = hi;
#pragma unroll
    for (int w = kRaiseWays - 2; w >= 0; --w) {
      if (__reduce_add_sync(0xffffffffu, c[w]) >= B && nlo == lo) {
        nlo = t[w];
        nhi = w + 1 < kRaiseWays - 1 ? t[w + 1] - 1 : hi;
      }
    }
    if (nlo == lo) nhi = t[0] - 1;
    lo = nlo;
    hi = nhi;
  }
  const uint64_t raised = uint64_t(lo) << kPrefixShift;
  return raised > tau ? raised : tau;
}

// Drop the nodes of U[1, n) below tau, keeping the order, in two passes of 32-node chunks. First each node's new
// index (aux2 = j kept, ~j dropped, j = the nodes kept before it: a ballot a chunk, no data moved) with every
// first-child link cleared; then the moves, each chunk reading its nodes and their parents' new indices (parents
// come before their children), then writing them down (a chunk's targets lie below the next chunk's sources, so
// only the lanes of one chunk need a warp sync between their reads and writes). A dropped parent reads
// kMetaDropped, which check (a) rejects; each kept rank-0 child re-links its parent's first child. idx[0..2] are
// U indices (or n) that come back as the index of the first kept node at or after them. Returns the new n.
__device__ __forceinline__ int warp_compact(const SelectSet& u, int n, uint64_t tau, int* idx, int lane) {
  const int nw = u.nwords;
  int kept = 0;
  for (int base = 0; base < n; base += 32) {
    const int i = base + lane;
    const bool keep = i < n && (i == 0 || order_key(u.score[i]) >= tau);
    const unsigned mask = __ballot_sync(0xffffffffu, keep);
    const int j = kept + __popc(mask & ((1u << lane) - 1u));
    if (i < n) {
      u.aux2[i] = keep ? j : ~j;
      u.first[i] = -1;
    }
    kept += __popc(mask);
  }
  __syncwarp();
#pragma unroll
  for (int x = 0; x < 3; ++x) idx[x] = idx[x] >= n ? kept : (u.aux2[idx[x]] >= 0 ? u.aux2[idx[x]] : ~u.aux2[idx[x]]);
  for (int base = 0; base < n; base += 32) {
    const int i = base + lane;
    const int j = i < n ? u.aux2[i] : -1;
    int m = 0, dw = 0, np = kMetaDropped;
    double sc = 0.0;
    uint64_t wd[kMaxRankWords];
    if (j >= 0) {
      sc = u.score[i];
      m = u.meta[i];
      dw = u.aux[i];
#pragma unroll
      for (int w = 0; w < kMaxRankWords; ++w) wd[w] = w < nw ? u.words[size_t(i) * nw + w] : 0ull;
      const int p = sel_parent(m);
      np = i == 0 ? 0 : (p == kMetaDropped || u.aux2[p] < 0) ? kMetaDropped : u.aux2[p];
    }
    __syncwarp();
    if (j >= 0) {
      u.score[j] = sc;
      u.meta[j] = (m & ~kMetaDropped) | np;
      u.aux[j] = dw;
#pragma unroll
      for (int w = 0; w < kMaxRankWords; ++w)
        if (w < nw) u.words[size_t(j) * nw + w] = wd[w];
      if (i > 0 && sel_rank(m) == 0 && np != kMetaDropped) u.first[np] = j;
    }
  }
  __syncwarp();
  return kept;
}

// Write child r of U[p] (depth d + 1) to U[idx]: score by the reference's recursion (the chain shortcut for
// r >= 1), meta, words, dominator count. Returns whether the shortcut is not the chain's value here.
__device__ __forceinline__ bool warp_write_child(const SelectSet& u, int p, int r, int idx, int d, double l0,
                                                 const float* row) {
  const int nw = u.nwords;
  const double s0 = d == 0 ? l0 : __dadd_rn(u.score[p], l0);
  double sc = s0;
  bool unstable = false;
  if (r > 0) {
    const double l = double(row[r]), t0 = __dsub_rn(s0, l0);
    sc = __dadd_rn(t0, l);
    unstable = __dsub_rn(sc, l) != t0;
  } else {
    u.first[p] = idx;
  }
  const int dw = u.aux[p], wt = (dw >> 16) * (r + 1);
  u.score[idx] = sc;
  u.meta[idx] = sel_meta(p, r, d + 1);
  u.first[idx] = -1;
  u.aux[idx] = ((dw & 0xffff) + wt) | (wt << 16);
  for (int w = 0; w < nw; ++w) u.words[size_t(idx) * nw + w] = u.words[size_t(p) * nw + w] | rank_bits(d + 1, r, w);
  return unstable;
}

// Warp 0's generation of U (lp with row stride ls, staged or global). Returns kSelected with *n_out = |U| and
// *chain_failed set where a sibling chain was not stable, or kOverflow.
__device__ __forceinline__ int warp_generate(const SelectSet& u, int cap, const float* lp, int ls, int L, int K,
                                             int B, int* n_out, int* chain_failed, const volatile int* race) {
  const int lane = threadIdx.x & 31, nw = u.nwords;
  if (lane == 0) {  // U[0] is the root: dom 0, wt 1
    u.score[0] = 0.0;
    u.meta[0] = sel_meta(0, 0, 0);
    u.first[0] = -1;
    u.aux[0] = 1 << 16;
  }
  for (int w = lane; w < nw; w += 32) u.words[w] = 0ull;
  __syncwarp();
  uint64_t tau = order_key(-1.7976931348623157e308);  // the lowest finite score: -inf is never selected
  int n = 1, pb = 0, fail = 0;
  for (int d = 0; d < L && pb < n; ++d) {
    if (race != nullptr && race_state(race) == kReplayWon) return kOverflow;  // lost the race
    const float* row = lp + size_t(d) * ls;
    const double l0 = double(row[0]);
    int cur = pb, end = n;  // parents [cur, end) still to expand; their children go to U[n, ...)
    while (cur < end) {
      // Chunks of 32 parents, a lane each: count, scan, write the children that fit. Where a chunk's children
      // do not fit, the level stops at the first parent whose children do not (parts: a prune comes first).
      int stop = end, took = 0;
      for (int base = cur; base < end; base += 32) {
        const int i = base + lane;
        const int c = i < end ? warp_child_count(u, i, d, l0, row, tau, B, K) : 0;
        int x;  // inclusive scan: this lane's children end at U[n + x)
        const unsigned le = 0xffffffffu >> (31 - lane);
        if (__all_sync(0xffffffffu, c <= 3)) {  // the common case: two ballots instead of five shuffles
          x = __popc(__ballot_sync(0xffffffffu, c & 1) & le) + 2 * __popc(__ballot_sync(0xffffffffu, c & 2) & le);
        } else {
          x = c;
          for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, x, o);
            if (lane >= o) x += y;
          }
        }
        const int ex = x - c;
        const int fit = __popc(__ballot_sync(0xffffffffu, i < end && x <= cap - n));  // a prefix of the lanes
        const int m = fit ? __shfl_sync(0xffffffffu, x, fit - 1) : 0;
        const int maxc = __reduce_max_sync(0xffffffffu, lane < fit ? c : 0);
        if (maxc <= (m + 31) / 32 + 2) {  // few children per parent: each lane writes its own
          for (int r = 0; lane < fit && r < c; ++r) fail |= warp_write_child(u, i, r, n + ex + r, d, l0, row);
        } else {  // the chunk's children over the lanes; a child's parent by a search over the lanes' offsets
          for (int kb = 0; kb < m; kb += 32) {
            const int k = kb + lane;
            int j = 0;  // the last lane below `fit` whose first child is at or before k
            for (int st = 16; st > 0; st >>= 1) {
              const int e = __shfl_sync(0xffffffffu, ex, (j + st) & 31);
              if (j + st < fit && e <= k) j += st;
            }
            const int ej = __shfl_sync(0xffffffffu, ex, j);
            if (k < m) fail |= warp_write_child(u, base + j, k - ej, n + k, d, l0, row);
          }
        }
        n += m;
        took += m;
        if (fit < 32 && base + fit < end) {
          stop = base + fit;
          break;
        }
      }
      __syncwarp();
      const bool parts = stop < end;
      cur = stop;
      if (parts || n - 1 > kPruneAtPct * B / 100) {  // prune: tau rises, the nodes below it go
        if (race != nullptr && race_state(race) == kReplayWon) return kOverflow;  // lost
        const uint64_t raised = warp_raise_tau(u, n, tau, B, lane);
        __syncwarp();
        if (raised > tau) {
          tau = raised;
          int idx[3] = {cur, end, pb};
          n = warp_compact(u, n, tau, idx, lane);
          cur = idx[0]; end = idx[1]; pb = idx[2];
        } else if (parts && took == 0) {
          return kOverflow;  // no room for the next parent's children, and tau cannot rise
        }
      }
    }
    pb = end;
  }
  if (n - 1 > B + B / 4 + 32) {  // a last prune keeps the parallel ranking small
    const uint64_t raised = warp_raise_tau(u, n, tau, B, lane);
    __syncwarp();
    if (raised > tau) {
      int idx[3] = {n, n, n};
      n = warp_compact(u, n, raised, idx, lane);
    }
  }
  *n_out = n;
  *chain_failed = __any_sync(0xffffffffu, fail);
  return kSelected;
}
}  // namespace

// ---- the lane-cached pop (TB_POP = 1) ---------------------------------------------------------------
// One warp replays the heap. Lane l owns the frontier slots j*32 + l and caches in registers the best of them
// (score, meta) and that best's two successor scores (its next sibling's and its first child's), computed when
// the entry becomes the lane's best. A pop is two warp max-reductions of the lanes' 64-bit order keys and a
// ballot (a warp-uniform loop of rank-tuple compares only when several lanes tie in score), then one shuffle of
// the winner's meta and first-child score: the popping lane records the node and puts the next sibling in the
// popped slot, the lane whose turn it is (round robin, so no lane holds more than 1 + ceil(B/32) entries) takes
// the first child, and those two lanes rescan their own slots on one code path. The node is linked to its
// previous sibling through the generator index each slot keeps, so no per-parent last-child array is read.
// (Computing the successors at pop time, after the broadcast, and lane 0's bookkeeping made the first version
// 10-12 % slower at B = 64: lab/PERF_NOTES.md.)
// Frontier: score [F], meta [F], generator node [F], F = 32 * tree_build_lane_slots(B) (16 bytes a slot).
__device__ __forceinline__ void lane_successors(double s, int m, const float* lp, int ls, int L, int K, double* s2,
                                                double* s3) {
  const Entry e = unpack(s, m);
  const float* row = lp + size_t(e.depth - 1) * ls;
  *s2 = e.rank + 1 < K ? __dadd_rn(__dsub_rn(e.score, double(row[e.rank])), double(row[e.rank + 1])) : -CUDART_INF;
  *s3 = e.depth < L ? __dadd_rn(e.score, double(lp[size_t(e.depth) * ls])) : -CUDART_INF;
}

// One warp (lane = its lane); writes the popped nodes to o (index 0, the root, preset) and 1 + their number to
// *count. `race` (nullable): the race's word; the replay stops when the selection has won.
__device__ __forceinline__ void lane_cached_replay(void* frontier, uint64_t* words, int nwords, const float* lp,
                                                   int ls, int L, int K, int B, const BuiltNodes& o, int* count_out,
                                                   int lane, const volatile int* race) {
  const int F = 32 * tree_build_lane_slots(B);
  double* f_score = reinterpret_cast<double*>(frontier);
  int* f_meta = reinterpret_cast<int*>(f_score + F);
  int* f_gen = f_meta + F;  // the node that generated the entry: its previous sibling, or its parent for rank 0
  int n = 0;                // entries in this lane's slots (slots j*32 + lane, j < n)
  int bj = -1;              // the slot of this lane's best entry, -1 when the lane is empty
  double bs = 0.0;          // its score
  int bm = 0;               // its meta
  double s2 = -CUDART_INF, s3 = -CUDART_INF;  // its next sibling's and first child's scores (-inf: none)
  int count = 0, rr = 1;    // nodes popped; the lane that gets the next first child
  if (B > 0 && L > 0 && K > 0) {
    const double s0 = double(lp[0]);  // float(lp[0][0]); never an addition (keeps -0.0)
    if (s0 != -CUDART_INF && lane == 0) {
      n = 1; bj = 0; bs = s0; bm = pack_meta(0, 0, 1);
      f_score[0] = s0; f_meta[0] = bm; f_gen[0] = 0;
      lane_successors(bs, bm, lp, ls, L, K, &s2, &s3);
    }
  }
  uint64_t key = bj >= 0 ? order_key(bs) : 0ull;  // a finite score's key has a nonzero high word
  while (count < B) {
    if (race != nullptr && count % TB_RACE_POLL == 0 && race_state(race) == kSelectWon) break;
    const unsigned hi = unsigned(key >> 32), lo = unsigned(key);
    const unsigned mhi = __reduce_max_sync(0xffffffffu, hi);
    if (mhi == 0u) break;  // the frontier is empty
    const unsigned mlo = __reduce_max_sync(0xffffffffu, hi == mhi ? lo : 0u);
    unsigned tied = __ballot_sync(0xffffffffu, hi == mhi && lo == mlo);
    int w = __ffs(tied) - 1;
    if (tied & (tied - 1)) {  // equal scores in several lanes: the rank tuples decide (warp-uniform loop)
      double es = __shfl_sync(0xffffffffu, bs, w);
      int em = __shfl_sync(0xffffffffu, bm, w);
      for (tied &= tied - 1; tied; tied &= tied - 1) {
        const int o2 = __ffs(tied) - 1;
        const double os = __shfl_sync(0xffffffffu, bs, o2);
        const int om = __shfl_sync(0xffffffffu, bm, o2);
        if (before(os, om, es, em, words, nwords)) { w = o2; es = os; em = om; }
      }
    }
    const int node = count + 1;
    const int em = __shfl_sync(0xffffffffu, bm, w);
    const double c3 = __shfl_sync(0xffffffffu, s3, w);  // the new node's first child (all lanes: rr moves on it)
    const Entry e = unpack(0.0, em);
    for (int x = lane; x < nwords; x += 32)
      words[node * nwords + x] = words[e.parent * nwords + x] | rank_bits(e.depth, e.rank, x);
    const bool child = c3 != -CUDART_INF;
    const int to = rr;
    if (child) rr = (rr + 1) & 31;
    bool changed = false;
    if (lane == w) {  // record the node; the popped slot takes the next sibling, or the lane's last entry
      const int j = bj * 32 + lane;
      const int gen = f_gen[j];
      o.parent[node] = e.parent; o.depth[node] = e.depth; o.rank[node] = e.rank; o.score[node] = bs;
      if (e.rank == 0) o.first[e.parent] = node; else o.next[gen] = node;
      if (s2 != -CUDART_INF) {
        f_score[j] = s2; f_meta[j] = pack_meta(e.parent, e.rank + 1, e.depth); f_gen[j] = node;
      } else {
        n -= 1;
        const int last = n * 32 + lane;
        f_score[j] = f_score[last]; f_meta[j] = f_meta[last]; f_gen[j] = f_gen[last];
      }
      changed = true;
    }
    __syncwarp();  // the new node's tuple words are visible before any tie comparison below
    if (child && lane == to) {
      const int j = n * 32 + lane;
      f_score[j] = c3; f_meta[j] = pack_meta(node, 0, e.depth + 1); f_gen[j] = node;
      n += 1;
      changed = true;
    }
    if (changed) {  // the popping lane and the child's lane find their new bests and those bests' successors
      bj = -1;
      for (int j = 0; j < n; ++j) {
        const double sc = f_score[j * 32 + lane];
        const int mc = f_meta[j * 32 + lane];
        if (bj < 0 || sc > bs || (sc == bs && before(sc, mc, bs, bm, words, nwords))) { bj = j; bs = sc; bm = mc; }
      }
      if (bj >= 0) lane_successors(bs, bm, lp, ls, L, K, &s2, &s3);
      key = bj >= 0 ? order_key(bs) : 0ull;
    }
    count = node;
  }
  if (lane == 0) *count_out = count + 1;
}

// Host-side geometry, evaluated by the same constexpr functions the kernel uses: out[0] = dynamic shared
// memory bytes, out[1] = lp_in_smem, out[2] = select_cap, for budget B, depth L, K_in and the device's
// per-block limit.
extern "C" __global__ void tree_build_geometry(int B, int L, int K_in, long long smem_limit, long long* out) {
  const int K = B < K_in ? B : K_in;
  const bool stage = tree_build_stages_lp(B, L, K, smem_limit, TB_STAGE_LP);
  const int cap = tree_build_select_cap(B, L, K, smem_limit, TB_SELECT, stage, TB_RACE != 0);
  out[0] = tree_build_smem(B, L, K, stage, cap, TB_RACE != 0).total;
  out[1] = stage ? 1 : 0;
  out[2] = cap;
}

// The select path holds more live state than the replay: ptxas's default register target for the select
// variant spilled (64 registers on sm_90); one CTA per SM at least lets it take what it needs.
#ifndef TB_MIN_BLOCKS
#define TB_MIN_BLOCKS 1
#endif
#if TB_SELECT
#define TB_BOUNDS __launch_bounds__(KERNEL_BLOCK, TB_MIN_BLOCKS)
#else
#define TB_BOUNDS __launch_bounds__(KERNEL_BLOCK)
#endif
extern "C" __global__ void TB_BOUNDS tree_build_kernel(
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
  extern __shared__ __align__(16) unsigned char smem[];
  const int b = blockIdx.x;
  const int D = B + 1;
  const int W = (D + 31) / 32;
  const int K = B < K_in ? B : K_in;
  const int nwords = tree_build_rank_words(L);
  const TreeBuildSmem lay = tree_build_smem(B, L, K, lp_in_smem != 0, select_cap, TB_RACE != 0);
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
#if TB_POP == 0
  // ---- the pops: warp 0 only ----------------------------------------------------------------------------
  if (tid < 32) {
    const int lane = tid;
    int fsize = 0, count = 0;
    if (B > 0 && L > 0 && K > 0) {
      const double s0 = double(lp[0]);  // float(lp[0][0]); never an addition (keeps -0.0)
      if (s0 != -CUDART_INF) {
        if (lane == 0) frontier[0] = Entry{s0, 0, 0, 1, 0};
        fsize = 1;
      }
    }
    __syncwarp();
    while (fsize > 0 && count < B) {
      // argmin over the frontier: scores compared in registers, rank tuples read only on exact ties
      int best = -1;
      double best_score = 0.0;
      for (int i = lane; i < fsize; i += 32) {
        const double sc = frontier[i].score;
        if (best < 0 || sc > best_score || (sc == best_score && better(frontier[i], frontier[best], words, nwords))) {
          best = i;
          best_score = sc;
        }
      }
      // Reduce on the score alone: a converged butterfly gives every lane the best score. Lanes whose best
      // ties it are then compared by rank tuple in a warp-uniform loop. (Calling the tuple compare between
      // shuffles diverges the warp at every shuffle: measured 1.4 µs per pop on the H200.)
      __syncwarp();
      double top = best < 0 ? -CUDART_INF : best_score;
      for (int off = 16; off > 0; off >>= 1) top = fmax(top, __shfl_xor_sync(0xffffffffu, top, off));
      unsigned tied = __ballot_sync(0xffffffffu, best >= 0 && best_score == top);
      int winner = __shfl_sync(0xffffffffu, best, __ffs(tied) - 1);
      for (tied &= tied - 1; tied; tied &= tied - 1) {
        const int other = __shfl_sync(0xffffffffu, best, __ffs(tied) - 1);
        if (better(frontier[other], frontier[winner], words, nwords)) winner = other;
      }
      best = winner;
      const Entry e = frontier[best];
      __syncwarp();  // every lane has read frontier[best] before lane 0 overwrites it below
      const int node = count + 1;
      // every lane builds one word of the new node's tuple
      for (int w = lane; w < nwords; w += 32)
        words[node * nwords + w] = words[e.parent * nwords + w] | rank_bits(e.depth, e.rank, w);
      if (lane == 0) {
        s_parent[node] = e.parent; s_depth[node] = e.depth; s_rank[node] = e.rank; s_score[node] = e.score;
        if (s_last[e.parent] < 0) s_first[e.parent] = node; else s_next[s_last[e.parent]] = node;
        s_last[e.parent] = node;
        frontier[best] = frontier[fsize - 1];  // remove (order in the frontier does not matter)
      }
      fsize -= 1;
      const float* row = lp + size_t(e.depth - 1) * lp_stride;
      if (e.rank + 1 < K) {
        const double s2 = __dadd_rn(__dsub_rn(e.score, double(row[e.rank])), double(row[e.rank + 1]));
        if (s2 != -CUDART_INF) {
          if (lane == 0) frontier[fsize] = Entry{s2, e.parent, int16_t(e.rank + 1), e.depth, 0};
          fsize += 1;
        }
      }
      if (e.depth < L) {
        const double s3 = __dadd_rn(e.score, double(lp[size_t(e.depth) * lp_stride]));
        if (s3 != -CUDART_INF) {
          if (lane == 0) frontier[fsize] = Entry{s3, int16_t(node), 0, int16_t(e.depth + 1), 0};
          fsize += 1;
        }
      }
      count = node;
      __syncwarp();
    }
    if (lane == 0) s_count = count + 1;
  }
#else
  bool replay = true;
  // whether this launch selects at all (the geometry gave it candidates, and the budget is one it selects for)
  [[maybe_unused]] const bool select_on =
      TB_SELECT && select_cap > 0 && B >= TB_SELECT_MIN_B && B > 0 && L > 0 && K > 0;
#if TB_RACING
  // The selection's own nodes, in its region ahead of U; the replay writes s_*, the layouts read the winner's.
  __shared__ int s_race;
  double* r_score = reinterpret_cast<double*>(smem + lay.select);
  int* r_parent = reinterpret_cast<int*>(r_score + D);
  const BuiltNodes selected{r_score, r_parent, r_parent + D, r_parent + 2 * D, r_parent + 3 * D, r_parent + 4 * D};
  if (select_on)
    for (int i = tid; i < D; i += blockDim.x) {
      selected.parent[i] = -1; selected.depth[i] = 0; selected.rank[i] = -1; selected.first[i] = -1;
      selected.next[i] = -1; selected.score[i] = i == 0 ? 0.0 : -CUDART_INF;
    }
  if (tid == 0) s_race = kUndecided;
  __syncthreads();
#endif
#if TB_SELECT
#if TB_FALLBACK == 2
  __shared__ int s_select_status;
#endif
  if (select_on) {
    const int nw = nwords;
    // U: at the start of shared memory (over the replay's frontier, which a replay after it rewrites), or in a
    // race's layout in the selection's region after its nodes
    unsigned char* u_base = smem + lay.select + (TB_RACE ? tree_build_race_out_bytes(B) : 0);
    double* u_score = reinterpret_cast<double*>(u_base);
    uint64_t* u_words = reinterpret_cast<uint64_t*>(u_score + select_cap);
    int* u_meta = reinterpret_cast<int*>(u_words + size_t(select_cap) * nw);
    const SelectSet u{u_score, u_words, u_meta, u_meta + select_cap, u_meta + 2 * select_cap,
                      u_meta + 3 * select_cap, nw};
#if TB_WARPGEN
    __shared__ int s_gen[3];  // warp 0's outcome, |U|, chain failed
#if TB_RACING
    if ((tid >> 5) != 1) {  // warp 1 runs the replay below meanwhile; no block barrier until both are done
      const SelectGroup g{tid < 32 ? tid : tid - 32, KERNEL_BLOCK - 32, &s_race};
      if (tid < 32) {
        int n_u = 0, chain_failed = 0;
        const int st = warp_generate(u, select_cap, lp, lp_stride, L, K, B, &n_u, &chain_failed, &s_race);
        if (tid == 0) { s_gen[0] = st; s_gen[1] = n_u; s_gen[2] = chain_failed; }
      }
      g.sync();
      int count_sel = 0;  // g.tid 0's: select_finish writes it there, and the same thread hands it over
      const int st = s_gen[0] != kSelected
                         ? s_gen[0]
                         : select_finish(u, s_gen[1], s_gen[2], lp, lp_stride, L, K, B, selected, &count_sel, g);
      if (g.tid == 0 && st == kSelected)
        atomicCAS(&s_race, kUndecided, kSelectWon | count_sel << kRaceCountShift);
    }
#else
    if (tid < 32) {
      int n_u = 0, chain_failed = 0;
      const int g = warp_generate(u, select_cap, lp, lp_stride, L, K, B, &n_u, &chain_failed, nullptr);
      if (tid == 0) { s_gen[0] = g; s_gen[1] = n_u; s_gen[2] = chain_failed; }
    }
    __syncthreads();
    const int st = s_gen[0] != kSelected ? s_gen[0]
                                         : select_finish(u, s_gen[1], s_gen[2], lp, lp_stride, L, K, B, replayed,
                                                         &s_count, SelectGroup{tid, KERNEL_BLOCK, nullptr});
#endif
#else
    const int st = select_build(u, select_cap, g_lp, L, K_in, K, B, replayed, &s_count);
#endif
#if !TB_RACING
    replay = st == kOverflow || (st == kUnverified && TB_FALLBACK != 0);
#if TB_FALLBACK == 2
    if (tid == 0) s_select_status = st;
#endif
    __syncthreads();  // U is dead from here on: the replay reuses its space
#endif
  }
#endif
  // ---- the pops: one warp (warp 0, or warp 1 in a race), each lane caching the best of its own slots -------
  if (replay && (tid >> 5) == (TB_RACING ? 1 : 0)) {
    const int lane = tid & 31;
    for (int x = lane; x < nwords; x += 32) words[x] = 0ull;  // the root's tuple (a failed selection used it)
    __syncwarp();
#if TB_RACING
    lane_cached_replay(frontier, words, nwords, lp, lp_stride, L, K, B, replayed, &s_count, lane, &s_race);
    if (lane == 0) atomicCAS(&s_race, kUndecided, kReplayWon);  // no-op when the selection won first
#else
    lane_cached_replay(frontier, words, nwords, lp, lp_stride, L, K, B, replayed, &s_count, lane, nullptr);
#endif
  }
#endif
  __syncthreads();

  // ---- outputs, all threads -----------------------------------------------------------------------------
#if TB_RACING
  const int race_word = s_race;
  const bool selection_won = race_winner(race_word) == kSelectWon;
  const BuiltNodes built = selection_won ? selected : replayed;
  const int n = selection_won ? race_word >> kRaceCountShift : s_count;
#else
  const BuiltNodes built = replayed;
  const int n = s_count;
#endif
  const int root = root_tokens[b];
  const int P = prefix_lens[b];
  const size_t row0 = size_t(b) * D;
  if (tid == 0) n_nodes[b] = n;
#if TB_SELECT && TB_FALLBACK == 2
  if (tid == 0 && select_on && s_select_status != kSelected)
    n_nodes[b] = -s_select_status;  // measuring: -1 unverified, -2 overflow
#endif
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

// Deferred checks (tree_build_ops.prepare_deferred, spec TB.4.5): the contract's value checks of one request
// on the device, so that a call on device-resident inputs needs no host copy and can be graph-captured.
// Any failure sets *flag; the host reads the flag after the call and only then copies the inputs and runs
// the contract's validate(), which raises the named error (the messages are written once, in the contract).
// grid = bs, block = KERNEL_BLOCK; the build kernel runs after it whatever the flag (it stays in bounds on any
// values) and its outputs are never handed out when the flag is set.
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
