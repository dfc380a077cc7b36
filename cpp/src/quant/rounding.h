// Round-half-to-even float -> int without a libm call (x86-64 baseline has no roundss, so
// std::nearbyint is a function call in the middle of every quantizer loop). Same result as
// nearbyint / _mm256_round_ps(_MM_ROUND_NEAREST) for |v| < 2^22; larger values are clamped
// first, and NaN gives some int rather than undefined behaviour.
#pragma once
#include <cstdint>
#include <cstring>

namespace edgellm::quant {

inline int nearest_int(float v) {
  constexpr float kLimit = 4194303.0f;  // 2^22 - 1
  v = v > kLimit ? kLimit : (v < -kLimit ? -kLimit : v);
  // Adding 1.5·2^23 puts the integer part in the low mantissa bits, rounded by the FPU (ties to even).
  const float shifted = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

}  // namespace edgellm::quant
