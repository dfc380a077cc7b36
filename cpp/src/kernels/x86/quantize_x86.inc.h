// Activation quantizers (f32 → Q8_0, Q8_1, Q8_K, F16, BF16), shared by the AVX2 and AVX-512
// units. Integer outputs are bit-identical to quant::quantize_row: same scale, same
// round-half-even, same choice of the signed maximum for Q8_K. See simd_x86.h for why this is
// all in an anonymous namespace.
#pragma once
#include "kernels/kernel_errors.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"
#include "kernels/x86/simd_x86.h"
#include "quant/blocks.h"

namespace edgellm::kernels {
namespace {

inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// round-half-even(v · scale) as int32 (the current rounding mode is not trusted: explicit round).
inline __m256i round_scaled(__m256 v, __m256 scale) {
  return _mm256_cvtps_epi32(
      _mm256_round_ps(_mm256_mul_ps(v, scale), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// Four vectors of 8 int32 (each in [-128, 127]) → 32 int8 in element order.
inline __m256i pack_i32x32_to_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b);  // a0..3 b0..3 | a4..7 b4..7
  const __m256i cd = _mm256_packs_epi32(c, d);
  const __m256i bytes = _mm256_packs_epi16(ab, cd);  // a0..3 b0..3 c0..3 d0..3 | a4..7 ...
  return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// One 32-element Q8 block: returns the int sum of its quants (for Q8_1's s).
inline int32_t quantize_q8_block32(const float* x, int8_t* qs, float* d_out) {
  const __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
  const __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
  const __m256 m = _mm256_max_ps(_mm256_max_ps(abs_ps(v0), abs_ps(v1)),
                                 _mm256_max_ps(abs_ps(v2), abs_ps(v3)));
  const float amax = hmax(m);
  const float d = amax / 127.0f;
  const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
  const __m256i q0 = round_scaled(v0, id), q1 = round_scaled(v1, id);
  const __m256i q2 = round_scaled(v2, id), q3 = round_scaled(v3, id);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), pack_i32x32_to_i8(q0, q1, q2, q3));
  *d_out = d;
  return hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q0, q1), _mm256_add_epi32(q2, q3)));
}

void quantize_q8_0_x86(const float* x, void* y, int64_t n) {
  if (n % QK8_0 != 0) throw_bad_row_length("quantize", DType::Q8_0, n);
  auto* out = static_cast<block_q8_0*>(y);
  for (int64_t b = 0; b < n / QK8_0; ++b) {
    float d;
    quantize_q8_block32(x + b * QK8_0, out[b].qs, &d);
    out[b].d = float_to_half(d);
  }
}

void quantize_q8_1_x86(const float* x, void* y, int64_t n) {
  if (n % QK8_1 != 0) throw_bad_row_length("quantize", DType::Q8_1, n);
  auto* out = static_cast<block_q8_1*>(y);
  for (int64_t b = 0; b < n / QK8_1; ++b) {
    float d;
    const int32_t sum = quantize_q8_block32(x + b * QK8_1, out[b].qs, &d);
    out[b].d = float_to_half(d);
    out[b].s = float_to_half(d * static_cast<float>(sum));
  }
}

// Q8_R (kernels/packed.h): Q8_0's quants, its fp16-rounded scale as f32, and the quant sums of
// the two 16-element halves.
void quantize_q8_r_x86(const float* x, void* y, int64_t n) {
  if (n % 32 != 0) throw_bad_row_length("quantize", DType::Q8_R, n);
  auto* out = static_cast<block_q8_r*>(y);
  const __m256i ones8 = _mm256_set1_epi8(1);
  for (int64_t b = 0; b < n / 32; ++b) {
    float d;
    quantize_q8_block32(x + b * 32, out[b].qs, &d);
    out[b].d = half_to_float(float_to_half(d));
    // Σ of each 16-byte half: pairs (maddubs with ones), then quads, then within each 128-bit lane.
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(out[b].qs));
    const __m256i q4 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), _mm256_set1_epi16(1));
    __m128i lo = _mm256_castsi256_si128(q4), hi = _mm256_extracti128_si256(q4, 1);
    lo = _mm_add_epi32(lo, _mm_shuffle_epi32(lo, _MM_SHUFFLE(1, 0, 3, 2)));
    hi = _mm_add_epi32(hi, _mm_shuffle_epi32(hi, _MM_SHUFFLE(1, 0, 3, 2)));
    lo = _mm_add_epi32(lo, _mm_shuffle_epi32(lo, _MM_SHUFFLE(2, 3, 0, 1)));
    hi = _mm_add_epi32(hi, _mm_shuffle_epi32(hi, _MM_SHUFFLE(2, 3, 0, 1)));
    out[b].s[0] = static_cast<int16_t>(_mm_cvtsi128_si32(lo));
    out[b].s[1] = static_cast<int16_t>(_mm_cvtsi128_si32(hi));
  }
}

void quantize_q8_K_x86(const float* x, void* y, int64_t n) {
  if (n % QK_K != 0) throw_bad_row_length("quantize", DType::Q8_K, n);
  auto* out = static_cast<block_q8_K*>(y);
  for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
    block_q8_K& blk = out[b];
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < QK_K; i += 8) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + i)));
    const float amax = hmax(m);
    if (amax == 0.0f) {
      blk.d = 0.0f;
      std::memset(blk.qs, 0, sizeof blk.qs);
      std::memset(blk.bsums, 0, sizeof blk.bsums);
      continue;
    }
    // The scale's sign comes from the first element whose |x| is the maximum (as the reference).
    const __m256 am = _mm256_set1_ps(amax);
    float max = 0.0f;
    for (int i = 0; i < QK_K; i += 8) {
      const int hit = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + i)), am, _CMP_EQ_OQ));
      if (hit) {
        max = x[i + __builtin_ctz(static_cast<unsigned>(hit))];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m256 is = _mm256_set1_ps(iscale);
    const __m256i q127 = _mm256_set1_epi32(127);
    for (int i = 0; i < QK_K; i += 32) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k)
        q[k] = _mm256_min_epi32(round_scaled(_mm256_loadu_ps(x + i + 8 * k), is), q127);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk.qs + i), pack_i32x32_to_i8(q[0], q[1], q[2], q[3]));
      blk.bsums[i / 16] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(q[0], q[1])));
      blk.bsums[i / 16 + 1] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(q[2], q[3])));
    }
    blk.d = 1.0f / iscale;
  }
}

void quantize_f16_x86(const float* x, void* y, int64_t n) {
  auto* out = static_cast<uint16_t*>(y);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) out[i] = float_to_half(x[i]);
}

// f32 → bf16, round to nearest even; NaN stays NaN (quiet bit forced), as fp16.h's fp32_to_bf16.
inline __m128i f32x8_to_bf16(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
  const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                            _mm256_set1_epi32(0x7f800000));
  const __m256i r = _mm256_blendv_epi8(rounded, _mm256_and_si256(nan, _mm256_set1_epi32(0xffff)), is_nan);
  // 8 × u32 (values < 65536) → 8 × u16
  const __m256i packed = _mm256_packus_epi32(r, r);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, _MM_SHUFFLE(3, 1, 2, 0)));
}

void quantize_bf16_x86(const float* x, void* y, int64_t n) {
  auto* out = static_cast<uint16_t*>(y);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), f32x8_to_bf16(_mm256_loadu_ps(x + i)));
  for (; i < n; i += 8) {  // tail: through a padded 8-lane buffer
    float tmp[8] = {};
    uint16_t o[8];
    for (int64_t k = i; k < n; ++k) tmp[k - i] = x[k];
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o), f32x8_to_bf16(_mm256_loadu_ps(tmp)));
    for (int64_t k = i; k < n; ++k) out[k] = o[k - i];
  }
}

void fill_quantizers_x86(KernelTable& t) {
  t.quantize[static_cast<int>(DType::Q8_0)] = quantize_q8_0_x86;
  t.quantize[static_cast<int>(DType::Q8_1)] = quantize_q8_1_x86;
  t.quantize[static_cast<int>(DType::Q8_R)] = quantize_q8_r_x86;
  t.quantize[static_cast<int>(DType::Q8_K)] = quantize_q8_K_x86;
  t.quantize[static_cast<int>(DType::F16)] = quantize_f16_x86;
  t.quantize[static_cast<int>(DType::BF16)] = quantize_bf16_x86;
}

}  // namespace
}  // namespace edgellm::kernels
