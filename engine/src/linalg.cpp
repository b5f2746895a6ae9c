// Row-wise float32 kernels (see linalg.hpp for the order guarantees).
#include "kdtree/linalg.hpp"

#include <algorithm>
#include <cmath>

#include "kdtree/threads.hpp"

namespace kdtree {
namespace {

constexpr int64_t kRowBlock = 4;     // rows sharing one pass over W
constexpr int64_t kColBlock = 128;   // output columns per work item
constexpr int64_t kMinParallel = 1 << 17;  // multiply-adds below which threads cost more than they save

}  // namespace

void matmul(const float* x, int64_t x_stride, int64_t N, int64_t in, const float* W, int64_t out, float* y,
            int64_t y_stride, int threads) {
  const int64_t row_blocks = (N + kRowBlock - 1) / kRowBlock;
  const int64_t col_blocks = (out + kColBlock - 1) / kColBlock;
  auto tile = [&](int64_t t) {
    const int64_t r0 = (t / col_blocks) * kRowBlock, r1 = std::min(N, r0 + kRowBlock);
    const int64_t c0 = (t % col_blocks) * kColBlock, c1 = std::min(out, c0 + kColBlock);
    for (int64_t r = r0; r < r1; ++r) std::fill(y + r * y_stride + c0, y + r * y_stride + c1, 0.0f);
    for (int64_t k = 0; k < in; ++k) {
      const float* w = W + k * out;
      for (int64_t r = r0; r < r1; ++r) {
        const float xv = x[r * x_stride + k];
        float* yr = y + r * y_stride;
        for (int64_t j = c0; j < c1; ++j) yr[j] += xv * w[j];
      }
    }
  };
  const bool big = N * in * out >= kMinParallel;
  parallel_for(row_blocks * col_blocks, big ? threads : 1, tile);
}

void rmsnorm(const float* x, int64_t x_stride, int64_t N, int64_t dim, const float* w, float eps, float* y,
             int64_t y_stride) {
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * x_stride;
    float* yr = y + n * y_stride;
    float ss = 0.0f;
    for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    const float r = 1.0f / std::sqrt(ss / float(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] * r) * w[i];
  }
}

void swiglu(float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = a[i] / (1.0f + std::exp(-a[i])) * b[i];
}

int32_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return int32_t(best);
}

float top2_margin(const float* x, int64_t n) {
  float a = std::max(x[0], x[1]), b = std::min(x[0], x[1]);
  for (int64_t i = 2; i < n; ++i) {
    if (x[i] > a) {
      b = a;
      a = x[i];
    } else if (x[i] > b) {
      b = x[i];
    }
  }
  return a - b;
}

}  // namespace kdtree
