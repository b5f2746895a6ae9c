// tree_build's device side, shared by every strategy: frontier entries, rank tuples and the heap's total order,
// the arrays a build writes its nodes to, and a race's word (tree_build.cu includes the strategies' headers).
#pragma once
#include "tree_build.cuh"

namespace tb {

constexpr int kRanksPerWord = kTreeBuildRanksPerWord;
constexpr int kRankBits = kTreeBuildRankBits;

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

// ---- the lane-cached pop's entries (lane_pop.cuh) ------------------------------------------------------
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

// A race's outcome (race.cuh): undecided, or which build finished first. The race's word holds it in its low
// two bits and, when the selection won, 1 + the selection's node count above them (kRaceCountShift): the winner's
// one atomic write hands over both, so the layouts read nothing the losing side may still write.
enum RaceState { kUndecided = 0, kSelectWon = 1, kReplayWon = 2 };
constexpr int kRaceCountShift = 2;
__device__ __forceinline__ int race_winner(int word) { return word & ((1 << kRaceCountShift) - 1); }

// A race's state as one warp sees it (lane 0's read, so that the warp decides as one).
__device__ __forceinline__ int race_state(const volatile int* race) {
  return race_winner(__shfl_sync(0xffffffffu, *race, 0));
}

// Where a build writes its nodes in pop order, for the layouts (D of each; index 0 is the root).
struct BuiltNodes {
  double* score;
  int *parent, *depth, *rank, *first, *next;
};


}  // namespace tb
