// Strategy kRace (select_race): select_warp's selection (warp 0 generating, then every warp but warp 1 ranking and
// checking) and the lane-cached replay (warp 1) run at once, each in its own shared memory, and the first to finish
// with the heap's tree wins (both are exact: the replay by construction, the selection once checked); the loser
// stops at its next level or pop. Only in a build that replays on failure (TB_FALLBACK 1, select.cuh): the
// measuring and mutant builds keep the layout but run select_warp's sequence, the selection and then the replay.
#pragma once
#include "tree_build_device/lane_pop.cuh"
#include "tree_build_device/warp_select.cuh"

namespace tb {

// The race's synchronisation of the selection's threads (SelectGroup, select.cuh): an mbarrier that expects one
// arrival of each of them per phase, initialised by thread 0 before the block barrier that starts the race.
__device__ __forceinline__ void mbarrier_init(unsigned bar, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}

// The whole block. select_on: whether the launch selects (tree_build_selection_on); u: the candidates, in the race's
// region (after the selection's own nodes, `selected`); the replay writes `replayed` and 1 + its node count to
// *count. *race ends as the winner's word (race_winner; the selection's count above kRaceCountShift): the caller
// reads it after a block barrier.
__device__ __forceinline__ void race_build(bool select_on, const SelectSet& u, int cap, const float* lp, int ls,
                                           int L, int K, int B, void* frontier, uint64_t* words, int nwords,
                                           const BuiltNodes& replayed, const BuiltNodes& selected, int* count,
                                           int* race) {
  static_assert(KERNEL_BLOCK >= 128, "a race needs warps besides the selection's generator and the replay");
  __shared__ int s_gen[3];  // warp 0's outcome, |U|, chain failed
  __shared__ __align__(8) unsigned long long s_bar;
  const int tid = threadIdx.x, D = B + 1;
  constexpr int kGroup = KERNEL_BLOCK - 32;  // the selection's threads: every warp but warp 1
  const unsigned bar = static_cast<unsigned>(__cvta_generic_to_shared(&s_bar));
  if (select_on)
    for (int i = tid; i < D; i += blockDim.x) {
      selected.parent[i] = -1; selected.depth[i] = 0; selected.rank[i] = -1; selected.first[i] = -1;
      selected.next[i] = -1; selected.score[i] = i == 0 ? 0.0 : -CUDART_INF;
    }
  if (tid == 0) {
    *race = kUndecided;
    mbarrier_init(bar, kGroup);
  }
  __syncthreads();
  if (select_on) {
    if ((tid >> 5) != 1) {  // warp 1 runs the replay below meanwhile; no block barrier until both are done
      const SelectGroup g{tid < 32 ? tid : tid - 32, kGroup, race, bar};
      if (tid < 32) {
        int n_u = 0, chain_failed = 0;
        const int st = warp_generate(u, cap, lp, ls, L, K, B, &n_u, &chain_failed, race);
        if (tid == 0) { s_gen[0] = st; s_gen[1] = n_u; s_gen[2] = chain_failed; }
      }
      g.sync();
      int count_sel = 0;  // g.tid 0's: select_finish writes it there, and the same thread hands it over
      const int st = s_gen[0] != kSelected
                         ? s_gen[0]
                         : select_finish(u, s_gen[1], s_gen[2], lp, ls, L, K, B, selected, &count_sel, g);
      if (g.tid == 0 && st == kSelected)
        atomicCAS(race, kUndecided, kSelectWon | count_sel << kRaceCountShift);
    }
  }
  if ((tid >> 5) == 1) {  // the replay: warp 1
    const int lane = tid & 31;
    for (int x = lane; x < nwords; x += 32) words[x] = 0ull;  // the root's tuple
    __syncwarp();
    lane_cached_replay(frontier, words, nwords, lp, ls, L, K, B, replayed, count, lane, race);
    if (lane == 0) atomicCAS(race, kUndecided, kReplayWon);  // no-op when the selection won first
  }
}

}  // namespace tb
