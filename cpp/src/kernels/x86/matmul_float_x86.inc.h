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

// n elements of float type T as f32, kLanes at a time through V, the tail one by one.
template <class V, DType T, class E>
inline void widen_x86(const E* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) V::store(dst + i, V::template load_as<T>(src + i));
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

// Rows src[0..8) × elements [k, k+8) of float type T written transposed as f32: dst[kk · ld + i]
// (the GEMM's panel packing; the 8 × 8 transpose of unpack / shuffle / 128-bit permutes).
template <DType T, class E>
inline void pack8x8_x86(const E* const* src, int64_t k, float* dst, int64_t ld) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = FloatVecX86::load<T>(src[i] + k);
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(dst + 0 * ld, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(dst + 1 * ld, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(dst + 2 * ld, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(dst + 3 * ld, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(dst + 4 * ld, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(dst + 5 * ld, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(dst + 6 * ld, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(dst + 7 * ld, _mm256_permute2f128_ps(u3, u7, 0x31));
}

// The GEMM vectors (kernels/matmul_float.inc.h, FloatGemm): AVX2 2 × 8 rows × 6 columns (12 of
// the 16 ymm registers accumulate), AVX-512 2 × 16 rows × 12 columns (24 of 32 zmm; the
// broadcasts fold into the FMAs as {1to16} memory operands).
struct GemmVecAvx2 {
  using F = __m256;
  static constexpr int kLanes = 8, kRowVecs = 2, kCols = 6;
  static constexpr int kPackK = 8;
  template <DType T, class E>
  static void pack_block(const E* const* src, int64_t k, float* dst, int64_t ld) { pack8x8_x86<T>(src, k, dst, ld); }
  static F zero() { return _mm256_setzero_ps(); }
  static F fmadd(F a, F b, F acc) { return _mm256_fmadd_ps(a, b, acc); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static float half_to_float(uint16_t h) { return kernels::half_to_float(h); }
  static F bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  template <DType T, class E>
  static F load_as(const E* p) { return FloatVecX86::load<T>(p); }
  template <DType T, class E>
  static void widen(const E* src, float* dst, int64_t n) { widen_x86<GemmVecAvx2, T>(src, dst, n); }
};

#if defined(__AVX512F__)
struct GemmVecAvx512 {
  using F = __m512;
  static constexpr int kLanes = 16, kRowVecs = 2, kCols = 12;
  static constexpr int kPackK = 8;
  template <DType T, class E>
  static void pack_block(const E* const* src, int64_t k, float* dst, int64_t ld) { pack8x8_x86<T>(src, k, dst, ld); }
  static F zero() { return _mm512_setzero_ps(); }
  static float half_to_float(uint16_t h) { return kernels::half_to_float(h); }
  static F fmadd(F a, F b, F acc) { return _mm512_fmadd_ps(a, b, acc); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static F bcast(const float* p) { return _mm512_set1_ps(*p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  template <DType T, class E>
  static F load_as(const E* p) {
    if constexpr (T == DType::F32) {
      return _mm512_loadu_ps(p);
    } else if constexpr (T == DType::F16) {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    } else {
      const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    }
  }
  template <DType T, class E>
  static void widen(const E* src, float* dst, int64_t n) { widen_x86<GemmVecAvx512, T>(src, dst, n); }
};
#endif

// G: the GEMM vector of the unit (GemmVecAvx2 or GemmVecAvx512).
template <class G, int kDecodeRows, int kTileRows>
void fill_matmul_float_x86(KernelTable& t) {
  fill_matmul_float_gemm<FloatVecX86, G, kDecodeRows, kTileRows>(t);
}

}  // namespace
}  // namespace edgellm::kernels
