// The device copy ceiling (harness/bench/ceilings.py), not an op: a plain streaming copy that reads and
// writes each 16-byte vector once. cuMemcpyDtoD reaches about a third less on the H200 than a copy kernel
// does, so the memory roofline the benchmarks divide by is measured with this kernel instead.
//
// copy_kernel: each thread moves kVectors vectors spaced one block apart (coalesced), loads first, then
// stores, so every thread has kVectors independent 16-byte loads in flight. Launch: block = kThreads,
// grid = ceil(n / (kThreads * kVectors)).
// fill_kernel: a hash of the index, so the copy never runs on zeros or on one repeated value.
// read_kernel: the read ceiling. A kernel that only reads (MLA decode streams its cache in and writes little)
// can go faster than the copy's read + write count suggests, so memory-bound kernels are set against this one
// too: grid-stride 16-byte streaming loads (evict-first), kVectors in flight per thread, every word XORed into
// one value per block, written to out[blockIdx.x] so no load can be optimised away (the host checks the XOR).
// Launch: block = kThreads, grid = SMs x kReadBlocksPerSM.
#include "common.cuh"

namespace {
constexpr int kThreads = 256;
constexpr int kVectors = 4;
}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads) read_kernel(const uint4* __restrict__ src, unsigned long long n,
                                                                   uint32_t* __restrict__ out) {
  const unsigned long long stride = (unsigned long long)gridDim.x * kThreads;
  unsigned long long i = (unsigned long long)blockIdx.x * kThreads + threadIdx.x;
  uint32_t acc = 0;
  for (; i + (kVectors - 1) * stride < n; i += kVectors * stride) {
    uint4 v[kVectors];
#pragma unroll
    for (int k = 0; k < kVectors; ++k) v[k] = __ldcs(src + i + k * stride);
#pragma unroll
    for (int k = 0; k < kVectors; ++k) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = __ldcs(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  __shared__ uint32_t warps[kThreads / 32];
  if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t r = 0;
    for (int w = 0; w < kThreads / 32; ++w) r ^= warps[w];
    out[blockIdx.x] = r;
  }
}

extern "C" __global__ void __launch_bounds__(kThreads) copy_kernel(const uint4* __restrict__ src,
                                                                   uint4* __restrict__ dst, unsigned long long n) {
  const unsigned long long base = (unsigned long long)blockIdx.x * (kThreads * kVectors) + threadIdx.x;
  uint4 v[kVectors];
#pragma unroll
  for (int k = 0; k < kVectors; ++k) {
    const unsigned long long i = base + (unsigned long long)k * kThreads;
    if (i < n) v[k] = src[i];
  }
#pragma unroll
  for (int k = 0; k < kVectors; ++k) {
    const unsigned long long i = base + (unsigned long long)k * kThreads;
    if (i < n) dst[i] = v[k];
  }
}

extern "C" __global__ void __launch_bounds__(kThreads) fill_kernel(uint32_t* __restrict__ dst, unsigned long long n,
                                                                   uint32_t seed) {
  const unsigned long long stride = (unsigned long long)gridDim.x * kThreads;
  for (unsigned long long i = (unsigned long long)blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) {
    uint32_t x = uint32_t(i) ^ uint32_t(i >> 32) ^ seed;  // a 32-bit integer hash (lowbias32)
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    dst[i] = x;
  }
}
