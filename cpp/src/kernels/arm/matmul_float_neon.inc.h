// The NEON f32 vector of the float-weight matmul (kernels/matmul_float.inc.h): 4 lanes, F16 by
// fcvtl widening, BF16 → f32 as a 16-bit shift; no software prefetch.
#pragma once
#include "kernels/arm/simd_neon.h"
#include "kernels/matmul_float.inc.h"

namespace edgellm::kernels {
namespace {

struct FloatVecNeon {
  using F = float32x4_t;
  static constexpr int kLanes = 4;
  static constexpr bool kPrefetch = false;
  static F zero() { return vdupq_n_f32(0.0f); }
  static F fmadd(F a, F b, F acc) { return vfmaq_f32(acc, a, b); }
  static float sum(F v) { return vaddvq_f32(v); }
  static float half_to_float(uint16_t h) { return kernels::half_to_float(h); }
  static void prefetch(const void*) {}
  template <DType T, class E>
  static F load(const E* p) {
    if constexpr (T == DType::F32)
      return vld1q_f32(p);
    else if constexpr (T == DType::F16)
      return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
    else
      return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
  }
};

template <int kDecodeRows, int kTileRows>
void fill_matmul_float_neon(KernelTable& t) {
  fill_matmul_float<FloatVecNeon, kDecodeRows, kTileRows>(t);
}

}  // namespace
}  // namespace edgellm::kernels
