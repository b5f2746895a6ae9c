// The contract's checks (contract/checks.py) with its wording.
#include "kdtree/checks.hpp"

#include <cmath>

#include "kdtree/error_text.hpp"

namespace kdtree {

void check_symbol(const std::string& arg, const Symbol& s, int64_t n) {
  if (n < s.lo || n > s.hi)
    fail(arg, std::string(s.doc) + " " + s.name + "=" + std::to_string(n) + " is outside " + std::to_string(s.lo) +
                  ".." + std::to_string(s.hi));
}

void check_positive_float32(const std::string& arg, double v) {
  if (!std::isfinite(v)) fail(arg, float_repr(v) + " is not finite");
  // IEEE round to nearest: values past FLT_MAX (by more than half an ulp) become inf, tiny ones 0
  const float f = static_cast<float>(v);
  if (!std::isfinite(f)) fail(arg, float_repr(v) + " overflows float32 (the kernels use its float32 value)");
  if (f <= 0.0f)
    fail(arg, float_repr(v) + (v > 0 ? " rounds to 0 in float32 (the kernels use its float32 value)" : " must be > 0"));
}

void check_non_negative(const std::string& arg, const int32_t* a, const std::vector<int64_t>& shape,
                        const std::string& what) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  for (int64_t i = 0; i < n; ++i)
    if (a[i] < 0) fail(arg, "negative " + what + " at " + tuple_str(unravel(i, shape)));
}

}  // namespace kdtree
