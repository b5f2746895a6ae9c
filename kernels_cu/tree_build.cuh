// Launch geometry of tree_build: the dynamic shared-memory layout, for the kernel (tree_build.cu), the
// engine's host code and the Python wrapper (through the tree_build_geometry query kernel).
#pragma once
#include "common.cuh"
#include "tree_build_variants.cuh"

// Rank tuples are packed 6 ranks of 10 bits per 64-bit word (see tree_build.cu).
constexpr int kTreeBuildRanksPerWord = 6;
constexpr int kTreeBuildRankBits = 10;
static_assert(CONTRACT_MAX_TOPK <= (1 << kTreeBuildRankBits), "a rank must fit its 10-bit field");
static_assert(CONTRACT_MAX_TREE <= 32767, "frontier entries hold node indices in int16");

// The frontier's slots: lane l of warp 0 owns slots j*32 + l, j < tree_build_lane_slots(B). The lane-cached
// pop (tb::kLanePop) puts every new sibling in the popping lane's freed slot and deals first children out
// round robin, so a lane never holds more than 1 + ceil(B/32) entries; the scan pop (tb::kHeapPop) uses
// the first D slots as one array (32 * slots >= D + 31).
KERNEL_HD constexpr int tree_build_lane_slots(int B) { return (B + 31) / 32 + 2; }

KERNEL_HD constexpr int tree_build_rank_words(int L) {
  return L > 0 ? (L + kTreeBuildRanksPerWord - 1) / kTreeBuildRanksPerWord : 1;
}

// The select-then-verify build (a variant that selects) keeps its candidate set U in the space the replay's
// frontier and tuple words use (the replay runs only when the selection fails, after U is dead). Per
// candidate: score (double), rank-tuple words, then four ints (meta, first child, two scratch words).
KERNEL_HD constexpr long long tree_build_select_node_bytes(int L) { return 8 + 8LL * tree_build_rank_words(L) + 16; }
// U's indices (root included) must fit the 13-bit parent field of a candidate's meta; 8191 marks a dropped parent.
constexpr int kTreeBuildSelectMaxCap = 8190;

// Byte offsets of the arrays in dynamic shared memory (16-byte entries first, then 8-byte, then 4-byte
// arrays: every array stays aligned), and the total. `select_cap` candidates of the select-then-verify
// build share the first region (frontier + words) with the replay; 0 when the variant does not select. When
// the replay races the selection (tb::kRace) the two run at once, so the selection gets its own region
// after the replay's: its nodes in pop order (tree_build_race_out_bytes), then the candidates.
struct TreeBuildSmem {
  long long frontier, words, select, score, parent, depth, rank, first, next, last, lp, total;
};

KERNEL_HD constexpr long long tree_build_max(long long a, long long b) { return a > b ? a : b; }

// The selection's own copy of the arrays the outputs are written from (score, then parent, depth, rank, first
// child, next sibling), D of each, rounded up to 16 bytes.
KERNEL_HD constexpr long long tree_build_race_out_bytes(int B) { return ((B + 1) * 28LL + 15) / 16 * 16; }

KERNEL_HD constexpr TreeBuildSmem tree_build_smem(int B, int L, int K, bool stage_lp, int select_cap = 0,
                                                bool race = false) {
  const long long D = B + 1;
  TreeBuildSmem s{};
  const long long F = 32LL * tree_build_lane_slots(B);  // frontier slots (>= D)
  s.frontier = 0;                                       // [F] slots of 16 bytes (Entry, or score, meta, generator)
  s.words = s.frontier + F * 16;                        // uint64 [D * rank words]
  const long long replay_end = s.words + D * tree_build_rank_words(L) * 8;
  const long long candidates = select_cap * tree_build_select_node_bytes(L);
  s.select = race ? replay_end : 0;  // the race's outputs of the selection, then U; U alone at 0 otherwise
  s.score = race ? replay_end + (select_cap > 0 ? tree_build_race_out_bytes(B) + candidates : 0)
                 : tree_build_max(replay_end, candidates);  // double [D]
  s.parent = s.score + D * 8;                           // int [D] each below
  s.depth = s.parent + D * 4;
  s.rank = s.depth + D * 4;
  s.first = s.rank + D * 4;
  s.next = s.first + D * 4;
  s.last = s.next + D * 4;
  s.lp = s.last + D * 4;                                // float [L * K] when the log-probs are staged
  s.total = s.lp + (stage_lp ? (long long)L * K * 4 : 0);
  return s;
}

// The kernel's static shared variables (up to 512 bytes: select_verify's; select_race has 112) share the
// per-block limit with the dynamic layout, which therefore stays 1 KB under smem_limit wherever it is sized to
// fill it: the staged log-probs and the select-then-verify candidates alike (the limits the hosts pass keep 64
// bytes more). On the H200 no staged layout comes within 1 KB of the limit, so this changes nothing there; on a
// 99 KB sm_120 block, staging up to the limit itself left select_race 48 bytes over (spec/build.md KB.1.7).
constexpr long long kTreeBuildStaticReserve = 1024;

// The variant's stage_lp (1 = stage the log-probs in shared memory when they fit the
// device's per-block limit, 2 = the same but only up to kTreeBuildStageSmallBytes, which leaves the candidate
// set of the warp build its room at B = 1024, 0 = always read them from global memory) and the bytes to launch with.
constexpr long long kTreeBuildStageSmallBytes = 32 * 1024;
KERNEL_HD constexpr bool tree_build_stages_lp(int B, int L, int K, long long smem_limit, int stage_policy) {
  return stage_policy != 0 && tree_build_smem(B, L, K, true).total <= smem_limit - kTreeBuildStaticReserve &&
         (stage_policy != 2 || 4LL * L * K <= kTreeBuildStageSmallBytes);
}

// Candidates the select-then-verify build holds (the variant's select_cap m >= 1; 0 = it never selects): about
// 4mB + 64 (the tree so far after each level's pruning, plus one level's new children), fewer when the
// device's per-block shared memory (less kTreeBuildStaticReserve, the staged log-probs when `stage`, and the
// replay's region and the selection's outputs when `race`) holds fewer; 0, the replay alone, when fewer than
// B + 2 fit.
KERNEL_HD constexpr int tree_build_select_cap(int B, int L, int K, long long smem_limit, int select_policy,
                                            bool stage, bool race = false) {
  const TreeBuildSmem none = tree_build_smem(B, L, K, stage);
  const long long fixed = none.total - none.score + (race ? none.score + tree_build_race_out_bytes(B) : 0);
  const long long room = smem_limit - kTreeBuildStaticReserve - fixed;
  const long long fit = room > 0 ? room / tree_build_select_node_bytes(L) : 0;
  long long cap = 4LL * select_policy * B + 64 + 1;
  cap = cap < fit ? cap : fit;
  cap = cap < kTreeBuildSelectMaxCap ? cap : kTreeBuildSelectMaxCap;
  return (select_policy != 0 && B > 0 && cap >= B + 2) ? int(cap) : 0;
}

// A race's launch for bs requests on sm_count SMs: whether it races, or hands the batch to the replay's own build
// (the variant's hand_off, lane_cached: 128 threads of 48 registers, ten or more to an SM). The race's CTA (256
// threads of ~100 registers, the candidates in shared memory) runs about one per SM, so beyond one wave of them (two
// at B >= 512, where the selection is 2.5x as fast as the replay) the replay's build finishes the batch first; and
// below the budget min_b (the variant's race_min_b) the replay alone is as fast as the selection on shallow trees
// and faster on deep ones, where the race also slows the replay down (lab/PERF_NOTES.md). A launch of the race
// build with select capacity 0 would replay too, but on the race's big CTA (measured 19 % slower than lane_cached
// at bs 1024, B 64).
KERNEL_HD constexpr bool tree_build_race_selects(int bs, int B, int sm_count, int min_b) {
  return B >= min_b && (long long)bs <= (long long)sm_count * (B >= 512 ? 2 : 1);
}

// Whether a build of `strategy` launched with select capacity select_cap selects at all (else it replays): the
// kernel's own test, which the host asks too (a fallback rate means nothing where nothing is selected).
// select_min_b: the design knob TB_SELECT_MIN_B (0 in every registered build).
KERNEL_HD constexpr bool tree_build_selection_on(int strategy, int select_cap, int B, int L, int K, int select_min_b) {
  return tb::selects(strategy) && select_cap > 0 && B >= select_min_b && B > 0 && L > 0 && K > 0;
}

// A build's launch geometry under the per-block limit smem_limit: whether it stages the log-probs, its select
// capacity and its dynamic shared memory (the query kernel in tree_build.cu evaluates this on the device).
struct TreeBuildGeometry {
  bool stage_lp;
  int select_cap;
  long long smem;
};
KERNEL_HD constexpr TreeBuildGeometry tree_build_geometry_of(tb::Policy p, int B, int L, int K_in, long long smem_limit) {
  const int K = B < K_in ? B : K_in;
  const bool stage = tree_build_stages_lp(B, L, K, smem_limit, p.stage_lp);
  const int cap = tree_build_select_cap(B, L, K, smem_limit, p.select_cap, stage, tb::races(p.strategy));
  return TreeBuildGeometry{stage, cap, tree_build_smem(B, L, K, stage, cap, tb::races(p.strategy)).total};
}

// The one launch rule of tree_build, for the engine's launcher, the Python wrapper (through the host geometry
// library) and nothing else: a launch of variant `variant` (policy p: the table's row, or a design build's) for bs
// requests of budget B, depth L and top-k K_in on a GPU of sm_count SMs whose blocks may use smem_limit bytes runs
// the build of `.variant` (a race's hand-off where it does not race) with this geometry, and selects or not.
// race_min_b < 0: the variant's own; select_min_b: TB_SELECT_MIN_B of the build (0 unless a design names one).
struct TreeBuildLaunch {
  int variant;
  TreeBuildGeometry geometry;
  bool selects;
};
KERNEL_HD constexpr TreeBuildLaunch tree_build_launch(tb::Policy p, int variant, int bs, int B, int L, int K_in,
                                                      long long smem_limit, int sm_count, int race_min_b = -1,
                                                      int select_min_b = 0) {
  if (tb::races(p.strategy) &&
      !tree_build_race_selects(bs, B, sm_count, race_min_b >= 0 ? race_min_b : p.race_min_b)) {
    variant = p.hand_off;
    p = tb::policy(variant);
  }
  const TreeBuildGeometry g = tree_build_geometry_of(p, B, L, K_in, smem_limit);
  const int K = B < K_in ? B : K_in;
  return TreeBuildLaunch{variant, g, tree_build_selection_on(p.strategy, g.select_cap, B, L, K, select_min_b)};
}
