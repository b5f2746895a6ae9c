// draft_topk: the drafter's front end (spec/draft_topk.md). For every row of logits [bs, L, V] (bf16, fp16 or
// fp32): the K best tokens in the order (logit descending, token id ascending), and each one's log-probability,
// the logit minus the row's logsumexp, rounded to float32. Ids and their order are exact. The logsumexp: the
// block's largest logit m first, then Σ exp(x - m) in fp32 (16 terms a thread, then a fixed tree: no rescaling
// and a short summation chain, inside DT.2.4's class), the splits' (m, Σ) pairs joined in double.
//
// Selection by radix on distinct 64-bit keys. A token's key is its logit's order-preserving 32 bits (+0.0 and
// -0.0 made one value, so that they tie) above the complement of its id: every key differs, a larger key is a
// better token, and "the K largest keys" is the op's top-K with its tie order, bf16's many exact ties included.
// Eight passes of 8 bits find the K-th largest key T (each pass counts the keys that share the prefix found so
// far, by digit, and stops early once the digit's whole bucket is taken); the selection is then every key >= T,
// exactly K keys, gathered in any order and sorted by a bitonic sort in shared memory.
//
// Launch (draft_topk.cuh): draft_topk_splits(V, K) == 1: draft_topk_row_<dtype> with grid = rows; else
// draft_topk_split_<dtype> with grid (splits, rows), then draft_topk_merge with grid = rows. Block DT_THREADS;
// dynamic shared memory draft_topk_smem_bytes(K) for the kernels that write the row (row, merge).
// Values are checked on the host first (contract): no NaN, no +inf; -inf is a token the drafter masked.
#include "draft_topk.cuh"

#ifndef CUDART_INF_F
#define CUDART_INF_F __int_as_float(0x7f800000)
#endif

typedef unsigned long long u64;

extern "C" __global__ void draft_topk_geometry(int V, int K, long long rows, long long* out) {
  draft_topk_geometry_fields(V, K, rows, out);
}

__device__ __forceinline__ float to_float(float x) { return x; }
struct bf16_t { uint16_t bits; };
struct f16_t { uint16_t bits; };
__device__ __forceinline__ float to_float(bf16_t x) { return __uint_as_float(uint32_t(x.bits) << 16); }
__device__ __forceinline__ float to_float(f16_t x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
}

// The token's key: order-preserving logit bits (the zeros made one), then ~id (a smaller id is a larger key).
__device__ __forceinline__ uint32_t logit_order(float x) {
  if (x == 0.0f) x = 0.0f;  // -0.0 == +0.0: they tie, and the id decides
  const uint32_t b = __float_as_uint(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
// A key's low half from the token id and back (the complement: its own inverse, so one definition serves both).
#define DT_ID_BITS(id) (~(id))
__device__ __forceinline__ u64 token_key(float x, uint32_t id) {
  return (u64(logit_order(x)) << 32) | u64(uint32_t(DT_ID_BITS(id)));
}
__device__ __forceinline__ float order_logit(uint32_t ord) {
  return __uint_as_float((ord & 0x80000000u) ? (ord & 0x7fffffffu) : ~ord);
}
__device__ __forceinline__ float key_logit(u64 key) { return order_logit(uint32_t(key >> 32)); }
__device__ __forceinline__ int key_id(u64 key) { return int(uint32_t(DT_ID_BITS(uint32_t(key)))); }
extern __shared__ u64 dyn_keys[];  // the row's K selected keys, padded to a power of two

// Padding: below every real key (the smallest, -inf's, is 0x007fffff'xxxxxxxx), never selected while K <= V.
#define DT_NO_KEY 0ULL

// Where a block's keys come from, each thread its own (every thread visits the same number of keys).
struct RegisterKeys {  // DT_ITEMS logits per thread (their order-preserving bits) in registers: the split's
                       // token i = j * DT_THREADS + threadIdx.x, id first_id + i, for i < n
  const uint32_t* ord;
  uint32_t first_id;
  int n;
  template <class F> __device__ __forceinline__ void operator()(F f) const {
#pragma unroll
    for (int j = 0; j < DT_ITEMS; ++j) {
      const int i = j * DT_THREADS + threadIdx.x;
      f(i < n ? (u64(ord[j]) << 32) | u64(uint32_t(DT_ID_BITS(first_id + uint32_t(i)))) : DT_NO_KEY);
    }
  }
};
template <class T>
struct LogitKeys {  // a row's logits [0, n), read from global memory at each visit
  const T* x;
  int n;
  template <class F> __device__ __forceinline__ void operator()(F f) const {
    const int tiles = (n + draft_topk_chunk() - 1) / draft_topk_chunk();
    for (int tile = 0; tile < tiles; ++tile) {
#pragma unroll 4
      for (int j = 0; j < DT_ITEMS; ++j) {
        const int i = tile * draft_topk_chunk() + j * DT_THREADS + threadIdx.x;
        f(i < n ? token_key(to_float(x[i]), uint32_t(i)) : DT_NO_KEY);
      }
    }
  }
};
struct StoredKeys {  // the splits' candidates in global memory: `kept` slots per split, of which a short last
                     // split fills fewer (the slots past its tokens are never written, and never read)
  const u64* key;
  int splits, kept, V;
  template <class F> __device__ __forceinline__ void operator()(F f) const {
    const int n = splits * kept, tiles = (n + draft_topk_chunk() - 1) / draft_topk_chunk();
    const int last = min(kept, V - (splits - 1) * draft_topk_chunk());  // the last split's candidates
    const int end = (splits - 1) * kept + last;
    for (int tile = 0; tile < tiles; ++tile) {
#pragma unroll 4
      for (int j = 0; j < DT_ITEMS; ++j) {
        const int i = tile * draft_topk_chunk() + j * DT_THREADS + threadIdx.x;
        f(i < end ? key[i] : DT_NO_KEY);
      }
    }
  }
};

struct SelectShared {
  int hist[256];
  u64 prefix;
  int k;      // keys still to take inside the current bucket
  int done;   // the current bucket is taken whole: every key >= prefix is selected
  int count;  // gathered keys
  float red[32];
};

// One pass's digit: the bucket d holding the k-th largest key among those counted, found by warp 0 (lane l owns
// digits 255 - 8l down to 248 - 8l).
__device__ __forceinline__ void choose_digit(SelectShared& sh, int shift) {
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  const int k = sh.k;
  __syncwarp();  // every lane has read k before the one lane that finds the digit writes it
  int c[8], sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) sum += (c[i] = sh.hist[255 - 8 * lane - i]);
  int incl = sum;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  int above = incl - sum;
  if (above < k && k <= incl) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      if (above + c[i] >= k) {
        const int d = 255 - 8 * lane - i;
        sh.prefix |= u64(d) << shift;
        sh.k = k - above;
        sh.done = (c[i] == k - above);
        break;
      }
      above += c[i];
    }
  }
}

// Count `key` into the histogram by its digit when it shares the prefix (every lane of the warp calls this
// together: equal digits are added once per warp, so that a bucket most keys share costs no contention).
__device__ __forceinline__ void count_key(SelectShared& sh, u64 key, u64 mask, int shift) {
  const bool in = (key & mask) == sh.prefix && key != DT_NO_KEY;
  const int digit = in ? int((key >> shift) & 0xff) : 256;
  const unsigned peers = __match_any_sync(0xffffffffu, digit);
  if (in && (threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&sh.hist[digit], __popc(peers));
}

// The K-th largest key among the keys `for_each_key` visits (each thread its own, every thread the same number
// of times); the selection is every key >= the result. K <= the number of real keys.
template <class ForEach>
__device__ u64 radix_threshold(SelectShared& sh, int K, ForEach for_each_key) {
  if (threadIdx.x == 0) { sh.prefix = 0; sh.k = K; sh.done = 0; }
  u64 mask = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) sh.hist[i] = 0;
    __syncthreads();
    for_each_key([&](u64 key) { count_key(sh, key, mask, shift); });
    __syncthreads();
    choose_digit(sh, shift);
    __syncthreads();
    mask |= u64(0xff) << shift;
    if (sh.done) break;
  }
  const u64 t = sh.prefix;
  __syncthreads();  // everyone has read the result before the shared state is reused
  return t;
}

// Block-wide max and sum (every thread gets the result; a fixed tree, so the same bits run to run).
__device__ float block_max(SelectShared& sh, float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0) sh.red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = sh.red[0];
  for (int w = 1; w < DT_THREADS / 32; ++w) v = fmaxf(v, sh.red[w]);
  __syncthreads();
  return v;
}
__device__ float block_sum(SelectShared& sh, float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) sh.red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = sh.red[0];
  for (int w = 1; w < DT_THREADS / 32; ++w) v += sh.red[w];
  __syncthreads();
  return v;
}
// exp(x - m) of one logit against the block's largest m: 0 for -inf (never -inf - -inf).
__device__ __forceinline__ float exp_term(float x, float m) { return x == -CUDART_INF_F ? 0.0f : expf(x - m); }

// One split's n <= draft_topk_chunk() logits into registers (each thread DT_ITEMS, token j * DT_THREADS + thread, the
// rest -inf), and the block's largest logit m and Σ exp(x - m) (every thread gets both).
template <class T>
__device__ __forceinline__ void load_split(SelectShared& sh, const T* __restrict__ x, int n, uint32_t (&ord)[DT_ITEMS],
                                           float& m, float& s) {
  m = -CUDART_INF_F;
#pragma unroll
  for (int j = 0; j < DT_ITEMS; ++j) {
    const int i = j * DT_THREADS + threadIdx.x;
    const float v = i < n ? to_float(x[i]) : -CUDART_INF_F;
    m = fmaxf(m, v);
    ord[j] = logit_order(v);
  }
  m = block_max(sh, m);
  s = 0.0f;
#pragma unroll
  for (int j = 0; j < DT_ITEMS; ++j) s += exp_term(order_logit(ord[j]), m);
  s = block_sum(sh, s);
}

// Sort the K selected keys (padded to a power of two with DT_NO_KEY) descending, and write the row's outputs.
__device__ void sort_and_write(u64* keys, int K, double m, double log_sum, float* __restrict__ out_logp,
                               int* __restrict__ out_ids) {
  const int P = draft_topk_pow2(K);
  for (int i = K + threadIdx.x; i < P; i += blockDim.x) keys[i] = DT_NO_KEY;
  __syncthreads();
  for (int k2 = 2; k2 <= P; k2 <<= 1) {
    for (int j = k2 >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < P; i += blockDim.x) {
        const int p = i ^ j;
        if (p > i) {
          const u64 a = keys[i], b = keys[p];
          if (((i & k2) == 0) ? (a < b) : (a > b)) { keys[i] = b; keys[p] = a; }
        }
      }
      __syncthreads();
    }
  }
  for (int i = threadIdx.x; i < K; i += blockDim.x) {
    const u64 key = keys[i];
    const float x = key_logit(key);
    // (x - m) - log Σ exp(x - m), rounded once (as the reference); an all -inf row (m = -inf) gives -inf
    out_logp[i] = (x == -CUDART_INF_F || m == -CUDART_INF) ? -CUDART_INF_F : float((double(x) - m) - log_sum);
    out_ids[i] = key_id(key);
  }
}

// Gather every key >= t into keys[] (at most K of them by construction).
__device__ __forceinline__ void gather(SelectShared& sh, u64* keys, u64 key, u64 t) {
  if (key != DT_NO_KEY && key >= t) keys[atomicAdd(&sh.count, 1)] = key;
}

// One block, one whole row: its keys in registers when the row fits (V <= chunk), else streamed from global
// memory at each pass (K larger than an eighth of a split: rare, and exact all the same).
template <class T>
__device__ void row_kernel(const T* __restrict__ logits, int V, int K, float* __restrict__ out_logp,
                           int* __restrict__ out_ids) {
  __shared__ SelectShared sh;
  const long long row = blockIdx.x;
  const T* x = logits + row * V;
  __shared__ double s_m, s_log_sum;
  if (V <= draft_topk_chunk()) {
    uint32_t ord[DT_ITEMS];
    float m, s;
    load_split(sh, x, V, ord, m, s);
    if (threadIdx.x == 0) { s_m = m; s_log_sum = log(double(s)); }
    const RegisterKeys keys{ord, 0u, V};
    const u64 t = radix_threshold(sh, K, keys);
    if (threadIdx.x == 0) sh.count = 0;
    __syncthreads();
    keys([&](u64 key) { gather(sh, dyn_keys, key, t); });
  } else {
    float m = -CUDART_INF_F;
    for (int i = threadIdx.x; i < V; i += DT_THREADS) m = fmaxf(m, to_float(x[i]));
    m = block_max(sh, m);
    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += DT_THREADS) s += exp_term(to_float(x[i]), m);
    s = block_sum(sh, s);
    if (threadIdx.x == 0) { s_m = m; s_log_sum = log(double(s)); }
    const LogitKeys<T> for_each{x, V};
    const u64 t = radix_threshold(sh, K, for_each);
    if (threadIdx.x == 0) sh.count = 0;
    __syncthreads();
    for_each([&](u64 key) { gather(sh, dyn_keys, key, t); });
  }
  __syncthreads();
  sort_and_write(dyn_keys, K, s_m, s_log_sum, out_logp + row * K, out_ids + row * K);
}

// One split of one row: its K best keys (unsorted; a short last split keeps fewer) and its (max, sum) pair.
template <class T>
__device__ void split_kernel(const T* __restrict__ logits, int V, int K, u64* __restrict__ ws_keys,
                             float2* __restrict__ ws_lse) {
  __shared__ SelectShared sh;
  const int split = blockIdx.x, splits = gridDim.x;
  const long long row = blockIdx.y;
  const int start = split * draft_topk_chunk();
  const int n = min(draft_topk_chunk(), V - start);
  const int kept = draft_topk_kept(V, K), take = min(kept, n);
  const T* x = logits + row * V + start;
  uint32_t ord[DT_ITEMS];
  float m, s;
  load_split(sh, x, n, ord, m, s);
  if (threadIdx.x == 0) ws_lse[row * splits + split] = make_float2(m, s);
  const RegisterKeys keys{ord, uint32_t(start), n};
  const u64 t = radix_threshold(sh, take, keys);
  if (threadIdx.x == 0) sh.count = 0;
  __syncthreads();
  u64* out = ws_keys + (row * splits + split) * (long long)kept;
  keys([&](u64 key) { gather(sh, out, key, t); });
}

// The row's K among its splits' candidates, and its logsumexp from the splits' pairs (in split order, in double).
extern "C" __global__ void __launch_bounds__(DT_THREADS) draft_topk_merge(const u64* __restrict__ ws_keys,
    const float2* __restrict__ ws_lse, int splits, int V, int K, float* __restrict__ out_logp,
    int* __restrict__ out_ids) {
  __shared__ SelectShared sh;
  __shared__ double s_m, s_log_sum;
  const long long row = blockIdx.x;
  const int kept = draft_topk_kept(V, K), n = splits * kept;
  const u64* cand = ws_keys + row * n;
  if (threadIdx.x == 0) {
    double M = -CUDART_INF, S = 0.0;
    for (int i = 0; i < splits; ++i) M = fmax(M, double(ws_lse[row * splits + i].x));
    if (M != -CUDART_INF)
      for (int i = 0; i < splits; ++i) {
        const float2 p = ws_lse[row * splits + i];
        if (p.x != -CUDART_INF_F) S += double(p.y) * exp(double(p.x) - M);
      }
    s_m = M;
    s_log_sum = M == -CUDART_INF ? 0.0 : log(S);
  }
  const StoredKeys for_each{cand, splits, kept, V};
  const u64 t = radix_threshold(sh, K, for_each);
  if (threadIdx.x == 0) sh.count = 0;
  __syncthreads();
  for_each([&](u64 key) { gather(sh, dyn_keys, key, t); });
  __syncthreads();
  sort_and_write(dyn_keys, K, s_m, s_log_sum, out_logp + row * K, out_ids + row * K);
}

#define DT_ENTRIES(NAME, T)                                                                                  \
  extern "C" __global__ void __launch_bounds__(DT_THREADS) draft_topk_row_##NAME(                            \
      const T* __restrict__ logits, int V, int K, float* __restrict__ out_logp, int* __restrict__ out_ids) { \
    row_kernel<T>(logits, V, K, out_logp, out_ids);                                                          \
  }                                                                                                          \
  extern "C" __global__ void __launch_bounds__(DT_THREADS) draft_topk_split_##NAME(                          \
      const T* __restrict__ logits, int V, int K, u64* __restrict__ ws_keys, float2* __restrict__ ws_lse) {  \
    split_kernel<T>(logits, V, K, ws_keys, ws_lse);                                                          \
  }
DT_ENTRIES(bf16, bf16_t)
DT_ENTRIES(f16, f16_t)
DT_ENTRIES(f32, float)
