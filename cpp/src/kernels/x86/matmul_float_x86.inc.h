// The x86 f32 vector of the float-weight matmul (kernels/matmul_float.inc.h): 8 lanes, FMA, F16
// through F16C, BF16 → f32 as a 16-bit shift. The AVX2 and AVX-512 units use it as is (AVX-512's 32
// registers only allow larger tiles).
#pragma once
#include "kernels/matmul_float.inc.h"
#include "kernels/x86/simd_x86.h"

namespace edgellm::kernels {
namespace {

struct FloatVecX86 {
  using F = __m256;
  static constexpr int kLanes = 8;
  static constexpr bool kPrefetch = true;
  static F zero() { return _mm256_setzero_ps(); }
  static F fmadd(F a, F b, F acc) { return _mm256_fmadd_ps(a, b, acc); }
  static float sum(F v) { return hsum(v); }
  static float half_to_float(uint16_t h) { return kernels::half_to_float(h); }
  static void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }
  template <DType T, class E>
  static F load(const E* p) {
    if constexpr (T == DType::F32) {
      return _mm256_loadu_ps(p);
    } else if constexpr (T == DType::F16) {
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    } else {
      const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
  }
};

template <int kDecodeRows, int kTileRows>
void fill_matmul_float_x86(KernelTable& t) {
  fill_matmul_float<FloatVecX86, kDecodeRows, kTileRows>(t);
}

}  // namespace
}  // namespace edgellm::kernels
