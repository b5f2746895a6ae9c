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
// The row and split kernels take a flag (DT.4.5): nullptr when the contract checked the values on the host first
// (no NaN, no +inf; -inf is a token the drafter masked), else set on the device when a refused value is read.
#include "draft_topk.cuh"

#ifndef CUDART_INF_F
#define CUDART_INF_F __int_as_float(0x7f800000)
#endif

typedef unsigned long long u64;

extern "C" __global__ void draft_topk_geometry(int V, int K, long long rows, long long* out) {
  draft_topk_geometry_fields(V, K, rows, out);
}

__device__ __forceinline__ float to_float(float x) { return x; }
// Free functions that are neither templates nor inline are static: the engine links every variant of this source
// into one binary.
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

// A split's tokens in registers: a thread's item j is its (j % VEC)-th token of its (j / VEC)-th run of VEC
// consecutive tokens, the block's threads' runs side by side, so one warp's load of a run each covers 32 x 16
// contiguous bytes when VEC is a 16-byte vector of the dtype (DT_VEC_LOADS; VEC 1: token j * DT_THREADS + thread).
// Within a thread the tokens rise with j, which thread_best_key relies on.
template <int VEC> __device__ __forceinline__ int split_token(int j) {
  return (j / VEC) * (DT_THREADS * VEC) + int(threadIdx.x) * VEC + j % VEC;
}
template <class T> __device__ __forceinline__ constexpr int vec_of() { return DT_VEC_LOADS ? 16 / int(sizeof(T)) : 1; }

// Where a block's keys come from, each thread its own (every thread visits the same number of keys).
template <int VEC>
struct RegisterKeys {  // DT_ITEMS logits per thread (their order-preserving bits) in registers: the split's
                       // token i = split_token<VEC>(j), id first_id + i, for i < n
  const uint32_t* ord;
  uint32_t first_id;
  int n;
  template <class F> __device__ __forceinline__ void operator()(F f) const {
#pragma unroll
    for (int j = 0; j < DT_ITEMS; ++j) {
      const int i = split_token<VEC>(j);
      f(i < n ? (u64(ord[j]) << 32) | u64(uint32_t(DT_ID_BITS(first_id + uint32_t(i)))) : DT_NO_KEY);
    }
  }
};
// The prefilter's two looks at a block's keys (prefilter_select, with DT_REGISTER_LOOKS): the thread's largest key,
// and whether any of its keys may be >= a bound. Any visitor answers them by visiting its keys; the split's registers
// answer on the 32-bit logit order alone (a fraction of the instructions per logit, where most of the split kernel's
// work is): 1.3-1.7x faster than the generic visit from bs 8 on an H100 (lab/draft_topk_dev.py, 2026-12-06).
template <class ForEach>
__device__ __forceinline__ u64 thread_best_key(const ForEach& for_each_key) {
  u64 best = DT_NO_KEY;
  for_each_key([&](u64 key) { best = key > best ? key : best; });
  return best;
}
template <class ForEach>
__device__ __forceinline__ bool thread_may_reach(const ForEach&, u64) {
  return true;
}
#if DT_REGISTER_LOOKS
template <int VEC>
__device__ __forceinline__ u64 thread_best_key(const RegisterKeys<VEC>& r) {
  uint32_t best = r.ord[0];
  int at = 0;
#pragma unroll
  for (int j = 1; j < DT_ITEMS; ++j) {  // the first of equal logits has the lower id: the larger key
    if (r.ord[j] > best) { best = r.ord[j]; at = j; }
  }
  const int i = split_token<VEC>(at);  // padding (i >= n) holds -inf's order: it wins only a padded thread
  return i < r.n ? (u64(best) << 32) | u64(uint32_t(DT_ID_BITS(r.first_id + uint32_t(i)))) : DT_NO_KEY;
}
template <int VEC>
__device__ __forceinline__ bool thread_may_reach(const RegisterKeys<VEC>& r, u64 bound) {
  const uint32_t hi = uint32_t(bound >> 32);  // a key >= bound has its logit order >= the bound's
  bool any = false;
#pragma unroll
  for (int j = 0; j < DT_ITEMS; ++j) any |= r.ord[j] >= hi;
  return any;
}
#endif

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
  // One past the last candidate: the last split keeps min(kept, its tokens).
  __device__ __forceinline__ int end() const {
    return (splits - 1) * kept + min(kept, V - (splits - 1) * draft_topk_chunk());
  }
  template <class F> __device__ __forceinline__ void operator()(F f) const {
    const int n = splits * kept, tiles = (n + draft_topk_chunk() - 1) / draft_topk_chunk();
    const int end = this->end();
    for (int tile = 0; tile < tiles; ++tile) {
#pragma unroll 4
      for (int j = 0; j < DT_ITEMS; ++j) {
        const int i = tile * draft_topk_chunk() + j * DT_THREADS + threadIdx.x;
        f(i < end ? key[i] : DT_NO_KEY);
      }
    }
  }
  // The first tile (all of them when splits * kept <= draft_topk_chunk()) into registers, as the visit orders them.
  __device__ __forceinline__ void load(u64 (&out)[DT_ITEMS]) const {
    const int end = this->end();
#pragma unroll
    for (int j = 0; j < DT_ITEMS; ++j) {
      const int i = j * DT_THREADS + threadIdx.x;
      out[j] = i < end ? key[i] : DT_NO_KEY;
    }
  }
};

struct LoadedKeys {  // DT_ITEMS keys per thread in registers (the merge's candidates when they fit one split)
  const u64* key;
  template <class F> __device__ __forceinline__ void operator()(F f) const {
#pragma unroll
    for (int j = 0; j < DT_ITEMS; ++j) f(key[j]);
  }
};

struct SelectShared {
  int hist[256];
  u64 prefix;
  int k;      // keys still to take inside the current bucket
  int done;   // the current bucket is taken whole: every key >= prefix is selected
  int count;  // gathered keys
  float red[32];
  u64 bound[DT_THREADS / 32];  // the prefilter's per-warp bounds
  int ncand;                   // the prefilter's candidates (may exceed DT_CAND_CAP: then the radix passes select)
  u64 cand[DT_CAND_CAP];
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

// The j-th largest (1 <= j <= 32) of the warp's 32 values, in every lane: a bitonic sort across the lanes,
// descending.
__device__ __forceinline__ u64 warp_jth_largest(u64 v, int j) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int k = 2; k <= 32; k <<= 1) {
#pragma unroll
    for (int d = k >> 1; d > 0; d >>= 1) {
      const u64 o = __shfl_xor_sync(0xffffffffu, v, d);
      const bool keep_larger = ((lane & d) == 0) == ((lane & k) == 0);
      v = keep_larger ? (v > o ? v : o) : (v < o ? v : o);
    }
  }
  return __shfl_sync(0xffffffffu, v, j - 1);
}

// The prefilter (DT_PREFILTER): the `take` largest keys without the radix passes, where a cheap bound leaves few
// candidates. With j = ceil(take / warps), each warp's j-th largest thread-best key is a key with j keys of the warp
// at or above it, so at least warps * j >= take keys lie at or above their minimum b: every selected key is >= b.
// The keys >= b (usually a few more than take: keys are distinct, ties included) are gathered into shared memory
// and each is ranked by counting the candidates above it; `write(rank, key)` gets the take best, rank 0 the
// largest. Returns false (the block's decision, nothing written) when j > 32 or the candidates outnumber
// DT_CAND_CAP: the caller then selects by the radix passes.
template <class ForEach, class Write>
__device__ bool prefilter_select(SelectShared& sh, int take, ForEach for_each_key, Write write) {
  constexpr int kWarps = DT_THREADS / 32;
  const int j = (take + kWarps - 1) / kWarps;
  if (j > 32) return false;
  const int lane = threadIdx.x & 31;
  const u64 wb = warp_jth_largest(thread_best_key(for_each_key), j);
  if (lane == 0) sh.bound[threadIdx.x >> 5] = wb;
  if (threadIdx.x == 0) sh.ncand = 0;
  __syncthreads();
  u64 b = sh.bound[0];
  for (int w = 1; w < kWarps; ++w) b = sh.bound[w] < b ? sh.bound[w] : b;
#if DT_REGISTER_LOOKS  // most warps hold no key >= b: they skip the gather (the whole warp's test: ballots stay whole)
  if (__any_sync(0xffffffffu, thread_may_reach(for_each_key, b)))
#endif
  for_each_key([&](u64 key) {  // every lane visits as many keys: the ballot is the whole warp's
    const bool in = key != DT_NO_KEY && key >= b;
    const unsigned ballot = __ballot_sync(0xffffffffu, in);
    if (ballot == 0) return;
    const int leader = __ffs(ballot) - 1;
    int base = 0;
    if (lane == leader) base = atomicAdd(&sh.ncand, __popc(ballot));
    base = __shfl_sync(0xffffffffu, base, leader);
    const int at = base + __popc(ballot & ((1u << lane) - 1u));
    if (in && at < DT_CAND_CAP) sh.cand[at] = key;
  });
  __syncthreads();
  const int n = sh.ncand;
  if (n > DT_CAND_CAP) return false;
  for (int i = threadIdx.x; i < n; i += DT_THREADS) {
    const u64 c = sh.cand[i];
    int rank = 0;
    for (int k = 0; k < n; ++k) rank += sh.cand[k] > c;
    if (rank < take) write(rank, c);
  }
  return true;
}

// Block-wide max and sum (every thread gets the result; a fixed tree, so the same bits run to run).
static __device__ float block_max(SelectShared& sh, float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0) sh.red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = sh.red[0];
  for (int w = 1; w < DT_THREADS / 32; ++w) v = fmaxf(v, sh.red[w]);
  __syncthreads();
  return v;
}
static __device__ float block_sum(SelectShared& sh, float v) {
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

// DT.1.2 on the device (the deferred path, DT.4.5): NaN and +inf are refused. A thread notes what it read and
// sets the call's flag once; the wrapper raises the contract's error (naming the first bad index, found on the
// host) when the results are read. flag == nullptr: the values were checked on the host before the launch.
__device__ __forceinline__ bool is_refused(float v) { return !(v <= 3.402823466e38f) && v != -CUDART_INF_F; }
__device__ __forceinline__ void flag_if(unsigned* flag, bool bad) {
  if (flag != nullptr && bad) atomicOr(flag, 1u);
}

// One split's n <= draft_topk_chunk() logits into registers (each thread DT_ITEMS, its item j token
// split_token<vec_of<T>()>(j), past n -inf), and the block's largest logit m and Σ exp(x - m) (every thread gets
// both). A whole split at a 16-byte address is read in 16-byte vectors, any other token by token.
template <class T>
__device__ __forceinline__ void load_split(SelectShared& sh, const T* __restrict__ x, int n, uint32_t (&ord)[DT_ITEMS],
                                           float& m, float& s, unsigned* flag) {
  constexpr int VEC = vec_of<T>();
  static_assert(DT_ITEMS % VEC == 0, "a thread's items are whole vectors");
  float v[DT_ITEMS];
  if (VEC > 1 && n == draft_topk_chunk() && (reinterpret_cast<uintptr_t>(x) & 15) == 0) {
#pragma unroll
    for (int r = 0; r < DT_ITEMS / VEC; ++r) {
      const uint4 u = *reinterpret_cast<const uint4*>(x + split_token<VEC>(r * VEC));
      T e[VEC];
      memcpy(e, &u, sizeof(u));
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[r * VEC + k] = to_float(e[k]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < DT_ITEMS; ++j) {
      const int i = split_token<VEC>(j);
      v[j] = i < n ? to_float(x[i]) : -CUDART_INF_F;
    }
  }
  m = -CUDART_INF_F;
  bool bad = false;
#pragma unroll
  for (int j = 0; j < DT_ITEMS; ++j) {
    bad |= is_refused(v[j]);
    m = fmaxf(m, v[j]);
    ord[j] = logit_order(v[j]);
  }
  flag_if(flag, bad);
  m = block_max(sh, m);
  s = 0.0f;
#pragma unroll
  for (int j = 0; j < DT_ITEMS; ++j) s += exp_term(order_logit(ord[j]), m);
  s = block_sum(sh, s);
}

// Gather every key >= t into keys[] (at most K of them by construction).
__device__ __forceinline__ void gather(SelectShared& sh, u64* keys, u64 key, u64 t) {
  if (key != DT_NO_KEY && key >= t) keys[atomicAdd(&sh.count, 1)] = key;
}

// Sort the K selected keys (padded to a power of two with DT_NO_KEY) descending.
static __device__ void sort_keys(u64* keys, int K) {
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
}

// The row's outputs from its K keys sorted descending.
static __device__ void write_row(const u64* keys, int K, double m, double log_sum, float* __restrict__ out_logp,
                                 int* __restrict__ out_ids) {
  for (int i = threadIdx.x; i < K; i += blockDim.x) {
    const u64 key = keys[i];
    const float x = key_logit(key);
    // (x - m) - log Σ exp(x - m), rounded once (as the reference); an all -inf row (m = -inf) gives -inf
    out_logp[i] = (x == -CUDART_INF_F || m == -CUDART_INF) ? -CUDART_INF_F : float((double(x) - m) - log_sum);
    out_ids[i] = key_id(key);
  }
}

// The K largest of the keys `for_each_key` visits into keys[0, K), sorted descending: ranked by the prefilter
// where it applies, else by the radix passes, a gather and a sort.
template <class ForEach>
__device__ void select_sorted(SelectShared& sh, int K, ForEach for_each_key, u64* keys) {
  if (!DT_PREFILTER || !prefilter_select(sh, K, for_each_key, [&](int r, u64 c) { keys[r] = c; })) {
    const u64 t = radix_threshold(sh, K, for_each_key);
    if (threadIdx.x == 0) sh.count = 0;
    __syncthreads();
    for_each_key([&](u64 key) { gather(sh, keys, key, t); });
    __syncthreads();
    sort_keys(keys, K);
  }
  __syncthreads();
}

// One block, one whole row: its keys in registers when the row fits (V <= chunk), else streamed from global
// memory at each pass (K larger than an eighth of a split: rare, and exact all the same).
template <class T>
__device__ void row_kernel(const T* __restrict__ logits, int V, int K, float* __restrict__ out_logp,
                           int* __restrict__ out_ids, unsigned* flag) {
  __shared__ SelectShared sh;
  const long long row = blockIdx.x;
  const T* x = logits + row * V;
  __shared__ double s_m, s_log_sum;
  if (V <= draft_topk_chunk()) {
    uint32_t ord[DT_ITEMS];
    float m, s;
    load_split(sh, x, V, ord, m, s, flag);
    if (threadIdx.x == 0) { s_m = m; s_log_sum = log(double(s)); }
    select_sorted(sh, K, RegisterKeys<vec_of<T>()>{ord, 0u, V}, dyn_keys);
  } else {
    float m = -CUDART_INF_F;
    bool bad = false;
    for (int i = threadIdx.x; i < V; i += DT_THREADS) {
      const float v = to_float(x[i]);
      bad |= is_refused(v);
      m = fmaxf(m, v);
    }
    flag_if(flag, bad);
    m = block_max(sh, m);
    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += DT_THREADS) s += exp_term(to_float(x[i]), m);
    s = block_sum(sh, s);
    if (threadIdx.x == 0) { s_m = m; s_log_sum = log(double(s)); }
    select_sorted(sh, K, LogitKeys<T>{x, V}, dyn_keys);
  }
  write_row(dyn_keys, K, s_m, s_log_sum, out_logp + row * K, out_ids + row * K);
}

// One split of one row: its K best keys (unsorted; a short last split keeps fewer) and its (max, sum) pair.
template <class T>
__device__ void split_kernel(const T* __restrict__ logits, int V, int K, u64* __restrict__ ws_keys,
                             float2* __restrict__ ws_lse, unsigned* flag) {
  __shared__ SelectShared sh;
  const int split = blockIdx.x, splits = gridDim.x;
  const long long row = blockIdx.y;
  const int start = split * draft_topk_chunk();
  const int n = min(draft_topk_chunk(), V - start);
  const int kept = draft_topk_kept(V, K), take = min(kept, n);
  const T* x = logits + row * V + start;
  uint32_t ord[DT_ITEMS];
  float m, s;
  load_split(sh, x, n, ord, m, s, flag);
  if (threadIdx.x == 0) ws_lse[row * splits + split] = make_float2(m, s);
  const RegisterKeys<vec_of<T>()> keys{ord, uint32_t(start), n};
  u64* out = ws_keys + (row * splits + split) * (long long)kept;
  if (DT_PREFILTER && prefilter_select(sh, take, keys, [&](int r, u64 c) { out[r] = c; })) return;
  const u64 t = radix_threshold(sh, take, keys);
  if (threadIdx.x == 0) sh.count = 0;
  __syncthreads();
  keys([&](u64 key) { gather(sh, out, key, t); });
}

// The row's K among its splits' candidates, and its logsumexp from the splits' (max, sum) pairs, joined in double
// by warp 0 (each lane its splits in order, then a fixed tree: the same bits run to run).
// (At least one block per SM, no more asked: ptxas's own target held sm_120's build to 64 registers and spilled.)
extern "C" __global__ void __launch_bounds__(DT_THREADS, 1) draft_topk_merge(const u64* __restrict__ ws_keys,
    const float2* __restrict__ ws_lse, int splits, int V, int K, float* __restrict__ out_logp,
    int* __restrict__ out_ids) {
  __shared__ SelectShared sh;
  __shared__ double s_m, s_log_sum;
  const long long row = blockIdx.x;
  const int kept = draft_topk_kept(V, K), n = splits * kept;
  const u64* cand = ws_keys + row * n;
  const float2* pairs = ws_lse + row * splits;
  if (threadIdx.x < 32) {
    float mf = -CUDART_INF_F;
    for (int i = threadIdx.x; i < splits; i += 32) mf = fmaxf(mf, pairs[i].x);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mf = fmaxf(mf, __shfl_xor_sync(0xffffffffu, mf, o));
    const double M = mf;
    double S = 0.0;
    if (mf != -CUDART_INF_F)
      for (int i = threadIdx.x; i < splits; i += 32) {
        const float2 p = pairs[i];
        if (p.x != -CUDART_INF_F) S += double(p.y) * exp(double(p.x) - M);
      }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) S += __shfl_xor_sync(0xffffffffu, S, o);
    if (threadIdx.x == 0) {
      s_m = M;
      s_log_sum = mf == -CUDART_INF_F ? 0.0 : log(S);
    }
  }
  const StoredKeys stored{cand, splits, kept, V};
  if (n <= draft_topk_chunk()) {  // the candidates fit one split: into registers once
    u64 key[DT_ITEMS];
    stored.load(key);
    select_sorted(sh, K, LoadedKeys{key}, dyn_keys);
  } else {
    select_sorted(sh, K, stored, dyn_keys);
  }
  write_row(dyn_keys, K, s_m, s_log_sum, out_logp + row * K, out_ids + row * K);
}

// The split kernels' residency: DT_SPLIT_MIN_BLOCKS 4 (the prefilter spec's) asks for 4 blocks per SM (64 registers,
// no spill on sm_90 or sm_120), so that more loads are in flight while other blocks select: 5-11 % faster than the 3
// blocks ptxas picks, from bs 8 (an H100, lab/draft_topk_dev.py, 2026-12-06). 0: no minimum (radix: no faster at 4).
#ifndef DT_SPLIT_MIN_BLOCKS
#define DT_SPLIT_MIN_BLOCKS 0
#endif
#if DT_SPLIT_MIN_BLOCKS
#define DT_SPLIT_BOUNDS __launch_bounds__(DT_THREADS, DT_SPLIT_MIN_BLOCKS)
#else
#define DT_SPLIT_BOUNDS __launch_bounds__(DT_THREADS)
#endif

// The row kernels ask for one block per SM, no more, as the merge does: ptxas's own target held sm_120's vector-load
// build to 64 registers and spilled.
#define DT_ENTRIES(NAME, T)                                                                                  \
  extern "C" __global__ void __launch_bounds__(DT_THREADS, 1) draft_topk_row_##NAME(                         \
      const T* __restrict__ logits, int V, int K, float* __restrict__ out_logp, int* __restrict__ out_ids,   \
      unsigned* flag) {                                                                                      \
    row_kernel<T>(logits, V, K, out_logp, out_ids, flag);                                                    \
  }                                                                                                          \
  extern "C" __global__ void DT_SPLIT_BOUNDS draft_topk_split_##NAME(                                        \
      const T* __restrict__ logits, int V, int K, u64* __restrict__ ws_keys, float2* __restrict__ ws_lse,    \
      unsigned* flag) {                                                                                      \
    split_kernel<T>(logits, V, K, ws_keys, ws_lse, flag);                                                    \
  }
DT_ENTRIES(bf16, bf16_t)
DT_ENTRIES(f16, f16_t)
DT_ENTRIES(f32, float)
