// Row-wise float32 kernels for the model. Every output element is a sum in a fixed order that depends
// only on its own row (never on the other rows, the tiling or the thread count), so the model's result
// for a token is the same bits whether it runs alone, in a batch, or as a tree node.
#pragma once
#include <cstdint>

namespace kdtree {

// y[n, :] = x[n, :] @ W for n < N; x rows `x_stride` floats apart, y rows `y_stride` apart; W is
// [in, out] row-major. Each y[n, j] accumulates x[n, k] * W[k, j] for k = 0..in-1 in order.
void matmul(const float* x, int64_t x_stride, int64_t N, int64_t in, const float* W, int64_t out, float* y,
            int64_t y_stride, int threads);

// y[n] = x[n] * (1 / sqrt(mean(x[n]²) + eps)) * w, rows of `dim`; x and y may alias.
void rmsnorm(const float* x, int64_t x_stride, int64_t N, int64_t dim, const float* w, float eps, float* y,
             int64_t y_stride);

// silu(a) * b elementwise into a: a / (1 + exp(-a)) * b.
void swiglu(float* a, const float* b, int64_t n);

// The first index of the maximum of x[0..n) (ties to the lower index, as numpy.argmax).
int32_t argmax(const float* x, int64_t n);

// The largest minus the second largest of x[0..n) (0 when they tie), for n >= 2.
float top2_margin(const float* x, int64_t n);

}  // namespace kdtree
