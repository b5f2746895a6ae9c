// Strategy kLevelSelect (select_verify): the whole block selects the candidates level by level under a rising
// score threshold, then select_finish (select.cuh) ranks and checks them.
#pragma once
#include "tree_build_device/select.cuh"

namespace tb {


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
  return select_finish(u, sh_n, sh_fail, lp, K_in, L, K, B, o, count, SelectGroup{tid, KERNEL_BLOCK, nullptr, 0u});
}

}  // namespace tb
