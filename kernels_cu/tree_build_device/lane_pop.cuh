// Strategy kLanePop: one warp replays the heap, each lane caching the best of its own frontier slots (lane_cached;
// the replay of every select variant where its selection fails, and the racing replay of select_race).
#pragma once
#include "tree_build_device/nodes.cuh"

namespace tb {

#ifndef TB_RACE_POLL
#define TB_RACE_POLL 4  // pops between the replay's looks at the race
#endif

// ---- the lane-cached pop (tb::kLanePop) ----------------------------------------------------------------
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

}  // namespace tb
