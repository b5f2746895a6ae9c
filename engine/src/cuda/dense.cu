// The model's dense-layer kernels (dense.hpp).
#include "dense.hpp"

#include "device.hpp"
#include "kdtree/contract.hpp"

namespace kdtree {
namespace cuda {
namespace {

constexpr int kCols = 128;  // output columns per block (one thread each); blockIdx.y is the row

// One thread per output: the row's x values are the same for the whole block (broadcast loads), W's reads are
// coalesced across the columns. __fmul_rn/__fadd_rn keep every product and sum rounded on its own (no FMA),
// in the order of linalg.cpp's loop, whatever nvcc's contraction flags.
__global__ void __launch_bounds__(kCols) matmul_rows(const float* __restrict__ x, long long x_stride, int in,
                                                     const float* __restrict__ W, int out, float* __restrict__ y) {
  const int j = blockIdx.x * kCols + threadIdx.x;
  if (j >= out) return;
  const float* xr = x + blockIdx.y * x_stride;
  float acc = 0.0f;
  for (int k = 0; k < in; ++k) acc = __fadd_rn(acc, __fmul_rn(xr[k], W[(long long)k * out + j]));
  y[(long long)blockIdx.y * out + j] = acc;
}

__global__ void scatter(const float* __restrict__ rows, const long long* __restrict__ offsets,
                        float* __restrict__ pool) {
  const float* src = rows + (long long)blockIdx.x * CONTRACT_HEAD_DIM;
  float* dst = pool + offsets[blockIdx.x];
  for (int i = threadIdx.x; i < CONTRACT_HEAD_DIM; i += blockDim.x) dst[i] = src[i];
}

}  // namespace

void dense_matmul(const float* x, int64_t x_stride, int64_t N, int64_t in, const float* W, int64_t out, float* y) {
  for (int64_t r0 = 0; r0 < N; r0 += 65535) {  // grid y is at most 65535 rows
    const int64_t rows = N - r0 < 65535 ? N - r0 : 65535;
    const dim3 grid(unsigned((out + kCols - 1) / kCols), unsigned(rows));
    if (out) matmul_rows<<<grid, kCols>>>(x + r0 * x_stride, x_stride, int(in), W, int(out), y + r0 * out);
    check(cudaGetLastError(), "dense matmul launch");
  }
}

void scatter_rows(const float* rows, const int64_t* offsets, int64_t n, float* pool) {
  if (n == 0) return;
  scatter<<<unsigned(n), 192>>>(rows, reinterpret_cast<const long long*>(offsets), pool);
  check(cudaGetLastError(), "cache row scatter launch");
}

}  // namespace cuda
}  // namespace kdtree
