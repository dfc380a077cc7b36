// Matmul for float weights: F32 × F32, F16 × F16 (fcvtl widening), BF16 × BF16 (bf16 → f32 is a
// 16-bit shift). Products accumulate in f32 lanes; each 4-element weight slice is converted once
// per tile and reused for C activation columns. K need not be a multiple of 4 (scalar tail).
#pragma once
#include "kernels/arm/matmul_tiling_neon.inc.h"
#include "kernels/arm/simd_neon.h"

namespace edgellm::kernels {
namespace {

struct NeonF32 {
  using Elem = float;
  static float32x4_t load4(const float* p) { return vld1q_f32(p); }
  static float load1(const float* p) { return *p; }
};
struct NeonF16 {
  using Elem = uint16_t;
  static float32x4_t load4(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
  static float load1(const uint16_t* p) { return half_to_float(*p); }
};
struct NeonBF16 {
  using Elem = uint16_t;
  static float32x4_t load4(const uint16_t* p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }
  static float load1(const uint16_t* p) {
    const uint32_t u = static_cast<uint32_t>(*p) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

template <class T>
struct NeonFloatTile {
  template <int R, int C>
  struct Fn {
    static void run(const MatmulArgs& a, int64_t r, int64_t c) {
      using E = typename T::Elem;
      const E* w[R];
      const E* x[C];
      for (int i = 0; i < R; ++i) w[i] = static_cast<const E*>(a.w) + (r + i) * a.K;
      for (int j = 0; j < C; ++j)
        x[j] = reinterpret_cast<const E*>(static_cast<const uint8_t*>(a.x) + (c + j) * a.x_stride);
      float32x4_t acc[R][C];
      for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) acc[i][j] = vdupq_n_f32(0.0f);
      int64_t k = 0;
      for (; k + 4 <= a.K; k += 4) {
        float32x4_t wv[R];
        for (int i = 0; i < R; ++i) wv[i] = T::load4(w[i] + k);
        for (int j = 0; j < C; ++j) {
          const float32x4_t xv = T::load4(x[j] + k);
          for (int i = 0; i < R; ++i) acc[i][j] = vfmaq_f32(acc[i][j], wv[i], xv);
        }
      }
      for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) {
          float s = vaddvq_f32(acc[i][j]);
          for (int64_t t = k; t < a.K; ++t) s += T::load1(w[i] + t) * T::load1(x[j] + t);
          a.y[(c + j) * a.ldy + r + i] = s;
        }
    }
  };
};

template <class T, int kDecodeRows, int kTileRows>
void neon_matmul_float(const MatmulArgs& a) {
  neon_run_tiles<NeonFloatTile<T>::template Fn, kDecodeRows, kTileRows>(a);
}

template <int kDecodeRows, int kTileRows>
void fill_matmul_float_neon(KernelTable& t) {
  t.matmul[static_cast<int>(DType::F32)] = neon_matmul_float<NeonF32, kDecodeRows, kTileRows>;
  t.matmul[static_cast<int>(DType::F16)] = neon_matmul_float<NeonF16, kDecodeRows, kTileRows>;
  t.matmul[static_cast<int>(DType::BF16)] = neon_matmul_float<NeonBF16, kDecodeRows, kTileRows>;
}

}  // namespace
}  // namespace edgellm::kernels
