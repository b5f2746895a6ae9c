// Strategy kHeapPop: warp 0 replays the heap, each pop a warp argmin over the frontier (heap_smem, heap_global).
#pragma once
#include "tree_build_device/nodes.cuh"

namespace tb {

// Warp 0 (lane = its lane): replays the heap, writing the popped nodes to o (index 0, the root, preset) and 1 + their
// number to *count_out. The frontier is one array of Entry (its first D slots); s_last[p] is the last child of p so
// far (-1 preset), for the sibling links.
__device__ __forceinline__ void heap_pop_replay(Entry* frontier, uint64_t* words, int nwords, const float* lp,
                                                int lp_stride, int L, int K, int B, const BuiltNodes& o, int* s_last,
                                                int* count_out, int lane) {
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
      o.parent[node] = e.parent; o.depth[node] = e.depth; o.rank[node] = e.rank; o.score[node] = e.score;
      if (s_last[e.parent] < 0) o.first[e.parent] = node; else o.next[s_last[e.parent]] = node;
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
  if (lane == 0) *count_out = count + 1;
}

}  // namespace tb
