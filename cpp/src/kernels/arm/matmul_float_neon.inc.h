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

// The GEMM vector (kernels/matmul_float.inc.h, FloatGemm): 4 × 4 rows × 6 columns, 24 of the 32
// q registers accumulate; broadcasts by ld1r.
struct GemmVecNeon {
  using F = float32x4_t;
  static constexpr int kLanes = 4, kRowVecs = 4, kCols = 6;
  static constexpr int kPackK = 0;  // the panel packed element by element
  template <DType T, class E>
  static void pack_block(const E* const*, int64_t, float*, int64_t) {}
  static F zero() { return vdupq_n_f32(0.0f); }
  static F fmadd(F a, F b, F acc) { return vfmaq_f32(acc, a, b); }
  static F load(const float* p) { return vld1q_f32(p); }
  static float half_to_float(uint16_t h) { return kernels::half_to_float(h); }
  static F bcast(const float* p) { return vld1q_dup_f32(p); }
  static void store(float* p, F v) { vst1q_f32(p, v); }
  template <DType T, class E>
  static void widen(const E* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(dst + i, FloatVecNeon::load<T>(src + i));
    for (; i < n; ++i) {
      if constexpr (T == DType::F32) {
        dst[i] = src[i];
      } else if constexpr (T == DType::F16) {
        dst[i] = half_to_float(src[i]);
      } else {
        const uint32_t u = static_cast<uint32_t>(src[i]) << 16;
        std::memcpy(dst + i, &u, 4);
      }
    }
  }
};

template <int kDecodeRows, int kTileRows>
void fill_matmul_float_neon(KernelTable& t) {
  fill_matmul_float_gemm<FloatVecNeon, GemmVecNeon, kDecodeRows, kTileRows>(t);
}

}  // namespace
}  // namespace edgellm::kernels
