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
// Sorting the top-B set instead of replaying pops would be faster, but it differs from the heap when float64
// rounding makes a sibling beat its predecessor by an ulp (round-half-even can), so it is not used.
//
// Launch: grid = bs, block = KDTR_BLOCK threads (>= 32), dynamic shared memory laid out by tree_build_smem()
// in tree_build.cuh, which the host reads through tree_build_geometry below. lp_in_smem = 1 stages the
// L*K log-probs there. Inputs are validated on the host first (contract/tree_build.py): shapes, sorted rows,
// no NaN, limits. full_mask == nullptr skips the (opt-in) FULL_MASK layout.
#include "tree_build.cuh"

#ifndef KDTR_TB_POP
#define KDTR_TB_POP 0  // 0: warp argmin scan over the frontier; 1: lane-cached bests (see the pop loops)
#endif

namespace {

constexpr int kRanksPerWord = kTreeBuildRanksPerWord;
constexpr int kRankBits = kTreeBuildRankBits;
static_assert(KDTR_BLOCK >= 32 && KDTR_BLOCK % 32 == 0, "warp 0 does the pops; the rest help with layouts");

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

// ---- the lane-cached pop (KDTR_TB_POP = 1) ---------------------------------------------------------------
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

}  // namespace

// Host-side geometry, evaluated by the same constexpr functions the kernel uses: out[0] = dynamic shared
// memory bytes, out[1] = lp_in_smem, for budget B, depth L, K_in and the device's per-block limit.
extern "C" __global__ void tree_build_geometry(int B, int L, int K_in, long long smem_limit, long long* out) {
  const int K = B < K_in ? B : K_in;
  const bool stage = tree_build_stages_lp(B, L, K, smem_limit, KDTR_TB_STAGE_LP);
  out[0] = tree_build_smem(B, L, K, stage).total;
  out[1] = stage ? 1 : 0;
}

extern "C" __global__ void __launch_bounds__(KDTR_BLOCK) tree_build_kernel(
    const float* __restrict__ top_logp,   // [bs, L, K_in]
    const int* __restrict__ top_ids,      // [bs, L, K_in]
    const int* __restrict__ root_tokens,  // [bs]
    const int* __restrict__ prefix_lens,  // [bs]
    int L, int K_in, int B, int lp_in_smem,
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
  const TreeBuildSmem lay = tree_build_smem(B, L, K, lp_in_smem != 0);
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

#if KDTR_TB_POP == 0
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
#elif KDTR_TB_POP == 1
  // ---- the pops: warp 0 only, each lane caching the best of its own slots ---------------------------------
  // A pop is two warp max-reductions of the lanes' 64-bit keys, a ballot, and the broadcast of the winner's
  // entry; no lane scans the whole frontier. Only the popping lane rescans its own slots (at most
  // 1 + ceil(B/32)); the lane that receives the new first child compares it with its cached best.
  if (tid < 32) {
    const int lane = tid;
    double* f_score = reinterpret_cast<double*>(frontier);                      // [32 * slots]
    int* f_meta = reinterpret_cast<int*>(f_score + 32 * tree_build_lane_slots(B));  // [32 * slots]
    int n = 0;          // entries in this lane's slots (slots j*32 + lane, j < n)
    int bj = -1;        // the slot of this lane's best entry, -1 when the lane is empty
    double bs = 0.0;    // its score
    int bm = 0;         // its meta
    int count = 0, rr = 1;  // nodes popped; the lane that gets the next first child
    if (B > 0 && L > 0 && K > 0) {
      const double s0 = double(lp[0]);  // float(lp[0][0]); never an addition (keeps -0.0)
      if (s0 != -CUDART_INF && lane == 0) {
        n = 1; bj = 0; bs = s0; bm = pack_meta(0, 0, 1);
        f_score[0] = s0; f_meta[0] = bm;
      }
    }
    while (count < B) {
      const uint64_t key = bj >= 0 ? order_key(bs) : 0ull;  // a finite score's key has a nonzero high word
      const unsigned hi = unsigned(key >> 32), lo = unsigned(key);
      const unsigned mhi = __reduce_max_sync(0xffffffffu, hi);
      if (mhi == 0u) break;  // the frontier is empty
      const unsigned mlo = __reduce_max_sync(0xffffffffu, hi == mhi ? lo : 0u);
      unsigned tied = __ballot_sync(0xffffffffu, hi == mhi && lo == mlo);
      int w = __ffs(tied) - 1;
      double es = __shfl_sync(0xffffffffu, bs, w);
      int em = __shfl_sync(0xffffffffu, bm, w);
      if (tied & (tied - 1)) {  // equal scores in several lanes: the rank tuples decide (warp-uniform loop)
        for (tied &= tied - 1; tied; tied &= tied - 1) {
          const int o = __ffs(tied) - 1;
          const double os = __shfl_sync(0xffffffffu, bs, o);
          const int om = __shfl_sync(0xffffffffu, bm, o);
          if (before(os, om, es, em, words, nwords)) { w = o; es = os; em = om; }
        }
      }
      const Entry e = unpack(es, em);
      const int node = count + 1;
      for (int x = lane; x < nwords; x += 32)
        words[node * nwords + x] = words[e.parent * nwords + x] | rank_bits(e.depth, e.rank, x);
      if (lane == 0) {
        s_parent[node] = e.parent; s_depth[node] = e.depth; s_rank[node] = e.rank; s_score[node] = e.score;
        if (s_last[e.parent] < 0) s_first[e.parent] = node; else s_next[s_last[e.parent]] = node;
        s_last[e.parent] = node;
      }
      const float* row = lp + size_t(e.depth - 1) * lp_stride;
      const bool has2 = e.rank + 1 < K;
      const double s2 = has2 ? __dadd_rn(__dsub_rn(e.score, double(row[e.rank])), double(row[e.rank + 1]))
                             : -CUDART_INF;
      const bool has3 = e.depth < L;
      const double s3 = has3 ? __dadd_rn(e.score, double(lp[size_t(e.depth) * lp_stride])) : -CUDART_INF;
      const int m3 = pack_meta(node, 0, e.depth + 1);
      __syncwarp();  // the new node's tuple words are visible before any tie comparison below
      if (lane == w) {  // the popped slot takes the next sibling, or the lane's last entry
        const int j = bj;
        if (s2 != -CUDART_INF) {
          f_score[j * 32 + lane] = s2; f_meta[j * 32 + lane] = pack_meta(e.parent, e.rank + 1, e.depth);
        } else {
          n -= 1;
          f_score[j * 32 + lane] = f_score[n * 32 + lane]; f_meta[j * 32 + lane] = f_meta[n * 32 + lane];
        }
      }
      if (s3 != -CUDART_INF) {
        if (lane == rr) {
          f_score[n * 32 + lane] = s3; f_meta[n * 32 + lane] = m3;
          n += 1;
          if (lane != w && (bj < 0 || s3 > bs || (s3 == bs && before(s3, m3, bs, bm, words, nwords)))) {
            bj = n - 1; bs = s3; bm = m3;
          }
        }
        rr = (rr + 1) & 31;
      }
      if (lane == w) {  // rescan this lane's slots
        bj = -1;
        for (int j = 0; j < n; ++j) {
          const double sc = f_score[j * 32 + lane];
          const int mc = f_meta[j * 32 + lane];
          if (bj < 0 || sc > bs || (sc == bs && before(sc, mc, bs, bm, words, nwords))) { bj = j; bs = sc; bm = mc; }
        }
      }
      count = node;
      __syncwarp();
    }
    if (lane == 0) s_count = count + 1;
  }
#endif
  __syncthreads();

  // ---- outputs, all threads -----------------------------------------------------------------------------
  const int n = s_count;
  const int root = root_tokens[b];
  const int P = prefix_lens[b];
  const size_t row0 = size_t(b) * D;
  if (tid == 0) n_nodes[b] = n;
  for (int i = tid; i < D; i += blockDim.x) {
    const bool real = i < n;
    const int d = s_depth[i];
    parents[row0 + i] = real ? s_parent[i] : -1;
    depths[row0 + i] = d;
    tokens[row0 + i] = (real && i > 0) ? ids[size_t(d - 1) * K_in + s_rank[i]] : root;
    ranks[row0 + i] = s_rank[i];
    scores[row0 + i] = s_score[i];
    positions[row0 + i] = P + d;
    first_child[row0 + i] = s_first[i];
    next_sibling[row0 + i] = s_next[i];
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
      j = real ? s_parent[j] : 0;
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
// grid = bs, block = KDTR_BLOCK; the build kernel runs after it whatever the flag (it stays in bounds on any
// values) and its outputs are never handed out when the flag is set.
constexpr int kCheckTable = 2048;  // open addressing for one row's ids
static_assert(kCheckTable >= 2 * KDTR_MAX_TOPK, "the id table must stay at most half full");

extern "C" __global__ void __launch_bounds__(KDTR_BLOCK) tree_build_check_kernel(
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
    bad |= root_tokens[b] < 0 || prefix_lens[b] < 0 || (long long)prefix_lens[b] + 1 + B > KDTR_MAX_CONTEXT;
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
