// bfloat16 as its uint16 bit pattern: widening is exact, narrowing rounds to nearest even like ml_dtypes.
#pragma once
#include <cstdint>
#include <cstring>

namespace kdtree {

inline float bf16_to_float(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x0040u);  // NaN stays a quiet NaN
  const uint32_t bias = 0x7FFFu + ((u >> 16) & 1u);
  return uint16_t((u + bias) >> 16);
}

// Round a float to the nearest bf16 value and widen it back (P rounded before P·V, TV.2.2).
inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

}  // namespace kdtree
