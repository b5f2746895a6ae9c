// The engine's own kernels for the model's dense layers (not ops of the spec): a matmul whose every output is
// the same float32 sum as linalg.cpp's (k = 0..in-1 in order, products and sums rounded separately, no FMA),
// so a row's result depends on nothing but its own input row, and the scatter of new cache rows.
#pragma once
#include <cstdint>

namespace kdtree {
namespace cuda {

// y[n, j] = sum_k x[n, k] * W[k, j] for n < N, j < out (device arrays; x rows x_stride apart, y rows out apart).
void dense_matmul(const float* x, int64_t x_stride, int64_t N, int64_t in, const float* W, int64_t out, float* y);

// pool[offsets[r] .. + 576) = rows[r, :] for r < n (device arrays).
void scatter_rows(const float* rows, const int64_t* offsets, int64_t n, float* pool);

}  // namespace cuda
}  // namespace kdtree
