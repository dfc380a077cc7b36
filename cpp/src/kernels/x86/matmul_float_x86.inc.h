// Matmul for float weights: F32 × F32, F16 × F16 (F16C), BF16 × BF16 (bf16 → f32 is a 16-bit
// shift). Products are accumulated in f32 lanes; each 8-element weight slice is converted once
// per tile and reused for C activation columns. K need not be a multiple of 8 (scalar tail).
#pragma once
#include "kernels/x86/matmul_tiling_x86.inc.h"
#include "kernels/x86/simd_x86.h"

namespace edgellm::kernels {
namespace {

struct FloatF32 {
  using Elem = float;
  static __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
  static float load1(const float* p) { return *p; }
};
struct FloatF16 {
  using Elem = uint16_t;
  static __m256 load8(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float load1(const uint16_t* p) { return half_to_float(*p); }
};
struct FloatBF16 {
  using Elem = uint16_t;
  static __m256 load8(const uint16_t* p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
  static float load1(const uint16_t* p) {
    const uint32_t u = static_cast<uint32_t>(*p) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

template <class T>
struct FloatTile {
  template <int R, int C>
  struct Fn {
    static void run(const MatmulArgs& a, int64_t r, int64_t c) {
      using E = typename T::Elem;
      const E* w[R];
      const E* x[C];
      for (int i = 0; i < R; ++i) w[i] = static_cast<const E*>(a.w) + (r + i) * a.K;
      for (int j = 0; j < C; ++j)
        x[j] = reinterpret_cast<const E*>(static_cast<const uint8_t*>(a.x) + (c + j) * a.x_stride);
      __m256 acc[R][C];
      for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) acc[i][j] = _mm256_setzero_ps();
      int64_t k = 0;
      constexpr int64_t kLine = 64 / sizeof(E);  // elements per cache line
      for (; k + 8 <= a.K; k += 8) {
        if (k % kLine == 0)  // the next row group's line, one tile ahead (see matmul_kquant_x86.inc.h)
          for (int i = 0; i < R; ++i) _mm_prefetch(reinterpret_cast<const char*>(w[i] + k + R * a.K), _MM_HINT_T0);
        __m256 wv[R];
        for (int i = 0; i < R; ++i) wv[i] = T::load8(w[i] + k);
        for (int j = 0; j < C; ++j) {
          const __m256 xv = T::load8(x[j] + k);
          for (int i = 0; i < R; ++i) acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
        }
      }
      for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) {
          float s = hsum(acc[i][j]);
          for (int64_t t = k; t < a.K; ++t) s += T::load1(w[i] + t) * T::load1(x[j] + t);
          a.y[(c + j) * a.ldy + r + i] = s;
        }
    }
  };
};

template <class T, int kDecodeRows, int kTileRows>
void matmul_float(const MatmulArgs& a) {
  run_tiles<FloatTile<T>::template Fn, kDecodeRows, kTileRows>(a);
}

template <int kDecodeRows, int kTileRows>
void fill_matmul_float_x86(KernelTable& t) {
  t.matmul[static_cast<int>(DType::F32)] = matmul_float<FloatF32, kDecodeRows, kTileRows>;
  t.matmul[static_cast<int>(DType::F16)] = matmul_float<FloatF16, kDecodeRows, kTileRows>;
  t.matmul[static_cast<int>(DType::BF16)] = matmul_float<FloatBF16, kDecodeRows, kTileRows>;
}

}  // namespace
}  // namespace edgellm::kernels
