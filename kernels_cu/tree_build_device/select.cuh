// The select-then-verify builds' common part (select_verify, select_warp, select_race): the candidate set U, and
// its ranking and checks (select_finish), whichever strategy generated it (level_select.cuh, warp_select.cuh).
#pragma once
#include "tree_build_device/nodes.cuh"

namespace tb {

#ifndef TB_FALLBACK
// What a failed selection does: 1 replays the heap (always, in a build); 2 replays it and reports why in
// n_nodes (-1 a check failed, -2 U overflowed: lab/tree_build_dev.py measures the fallback rate). The
// harness's fallback mutant sets 0: it keeps an unverified selection. A race (race.cuh) races only where it is 1:
// the measuring and mutant builds keep the race's layout but run the selection first and the replay after it, so
// that what they report is the selection's.
#define TB_FALLBACK 1
#endif
// ---- select-then-verify (tb::kLevelSelect, tb::kWarpSelect, tb::kRace) -----------------------------------
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

// U at `base` in shared memory, `cap` candidates: at the start of shared memory (over the replay's frontier, which a
// replay after the selection rewrites), or in a race's layout in the selection's region after its nodes.
__device__ __forceinline__ SelectSet candidate_set(unsigned char* base, int cap, int nwords) {
  double* u_score = reinterpret_cast<double*>(base);
  uint64_t* u_words = reinterpret_cast<uint64_t*>(u_score + cap);
  int* u_meta = reinterpret_cast<int*>(u_words + size_t(cap) * nwords);
  return SelectSet{u_score, u_words, u_meta, u_meta + cap, u_meta + 2 * cap, u_meta + 3 * cap, nwords};
}

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

// Status of select_build: the selection is the heap's (kSelected), or why not.
enum SelectStatus { kSelected = 0, kUnverified = 1, kOverflow = 2 };

// The threads that finish a selection (rank, check, write S): the whole block (race == nullptr), or in a race
// every warp but the replay's (warp 1), synchronised by the race's mbarrier (race.cuh; `bar` is its shared-memory
// address, `size` its arrival count) so that the racing warp never has to join, and stopping when the race's word
// says the replay has won. (A named barrier, bar.sync 1 with `size` threads, synchronised the same threads before:
// compute-sanitizer's racecheck does not order shared-memory accesses across one against a later __syncthreads() and
// reported hazards on some inputs, lab/sanitizer/named_barrier_race.cu; it models an mbarrier's arrive and wait.)
__device__ __forceinline__ void mbarrier_arrive_and_wait(unsigned bar) {
  unsigned long long state;
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];\n" : "=l"(state) : "r"(bar) : "memory");
  asm volatile(
      "{\n.reg .pred p;\nWAIT:\nmbarrier.try_wait.shared::cta.b64 p, [%0], %1;\n@!p bra WAIT;\n}\n" ::"r"(bar),
      "l"(state)
      : "memory");
}

struct SelectGroup {
  int tid, size;
  const volatile int* race;
  unsigned bar;
  __device__ __forceinline__ void sync() const {
    if (race != nullptr) mbarrier_arrive_and_wait(bar);
    else __syncthreads();
  }
};

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

}  // namespace tb
