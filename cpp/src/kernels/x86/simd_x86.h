// x86 SIMD building blocks shared by the AVX2 and AVX-512 units.
//
// This header (and the *_x86.inc.h kernel bodies) is included by translation units compiled with
// different -m flags. Everything here therefore lives in an anonymous namespace: each unit gets
// its own copy, so the linker can never pick an AVX-512 body of an inline function for code that
// runs on an AVX2-only CPU (an ODR trap with plain `inline`). For the same reason these units do
// not call inline helpers of shared headers (fp16.h, dtype.h's row_bytes) that the compiler might
// emit out of line; they use the instructions directly.
//
// The int8 dot product is the one place the two levels differ: AVX-512 VNNI (VL, 256-bit form)
// fuses u8×s8 multiply + 4-way add + accumulate in `vpdpbusd`; AVX2 needs maddubs + madd + add.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

// GCC 12's AVX-512 insert/convert intrinsics start from _mm512_undefined_*() and trip its own
// -W(maybe-)uninitialized inside <avx512fintrin.h> (a false positive; the lanes are all written).
// Not popped: the warnings surface where the kernel templates are instantiated, at a unit's end.
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define EDGELLM_X86_VNNI 1
#else
#define EDGELLM_X86_VNNI 0
#endif

namespace edgellm::kernels {
namespace {

// acc[i] += Σ_{j<4} u[4i+j] · s[4i+j]   (u unsigned bytes, s signed bytes).
// Without VNNI the pairwise int16 sums must not saturate: callers keep |u·s| pairs ≤ 32767
// (u ≤ 128 and |s| ≤ 127 everywhere in this code).
inline __m256i dot_u8s8_acc(__m256i acc, __m256i u, __m256i s) {
#if EDGELLM_X86_VNNI
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  const __m256i p16 = _mm256_maddubs_epi16(u, s);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
#endif
}

// acc[i] += a[2i]·b[2i] + a[2i+1]·b[2i+1]   (int16 × int16 → int32)
inline __m256i madd16_acc(__m256i acc, __m256i a, __m256i b) {
#if EDGELLM_X86_VNNI
  return _mm256_dpwssd_epi32(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

// Signed × signed int8 dot via the sign trick: |w| is unsigned, x takes w's sign.
inline __m256i dot_s8s8_acc(__m256i acc, __m256i w_abs, __m256i w, __m256i x) {
  return dot_u8s8_acc(acc, w_abs, _mm256_sign_epi8(x, w));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

inline double hsum_pd(__m256d v) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
  return _mm_cvtsd_f64(s);
}

// e^x on 8 lanes: Cody–Waite reduction x = n·ln2 + r, a degree-7 polynomial for e^r and a
// two-step 2^n scaling (max rel. error ≈ 2 ulp on the normal range; NaN stays NaN). Shared by
// the float ops (softmax, SiLU, GELU) and paged attention.
inline __m256 exp_ps(__m256 x) {
  const __m256 nan_mask = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  // Below −104 the result underflows to 0, above 89 it overflows to inf; clamping keeps n in int
  // range and the two-step 2^n scaling below produces both ends (and subnormals) correctly.
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.0f)), _mm256_set1_ps(89.0f));
  const __m256 fn = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(fn, _mm256_set1_ps(0.693145751953125f), xc);
  r = _mm256_fnmadd_ps(fn, _mm256_set1_ps(1.428606765330187045e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i n = _mm256_cvtps_epi32(fn);
  const __m256i n1 = _mm256_srai_epi32(n, 1);
  const __m256i n2 = _mm256_sub_epi32(n, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  const __m256 res = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  return _mm256_blendv_ps(res, x, nan_mask);
}

// 4 bytes as one int32 (an activation group to broadcast).
inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// IEEE half → float with F16C (exact, like fp16.h's scalar conversion).
inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }
inline uint16_t float_to_half(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// 16 bytes of packed nibbles → 32 bytes: low nibbles in bytes 0..15, high nibbles in 16..31.
// This is the legacy-block order (element j = low nibble of qs[j], element j+16 = high nibble).
inline __m256i unpack_nibbles_16(const uint8_t* qs) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Legacy Q5 high bits: a little-endian u32 whose bit j is element j's 5th bit → 32 bytes of 0x10/0x00.
inline __m256i expand_q5_high_bits(const uint8_t* qh4) {
  uint32_t bits;
  std::memcpy(&bits, qh4, 4);
  // Byte i of the result takes byte i/8 of `bits`, then tests bit i%8 of it.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

}  // namespace
}  // namespace edgellm::kernels
