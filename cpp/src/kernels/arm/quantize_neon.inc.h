// Activation quantizers (f32 → Q8_0, Q8_1, Q8_K, F16, BF16). Outputs are bit-identical to
// quant::quantize_row: the same scale arithmetic, round-half-even (fcvtns, which ignores the
// FPCR mode), the same choice of the signed maximum for Q8_K, and the reference's canonical
// quiet NaN for F16 (the instruction would keep a NaN's payload bits).
#pragma once
#include "kernels/arm/simd_neon.h"
#include "kernels/kernel_errors.h"
#include "kernels/kernels.h"
#include "quant/blocks.h"

namespace edgellm::kernels {
namespace {

// Four int32x4 in [-128, 127] → 16 int8 in order.
inline int8x16_t neon_narrow_i32x16(int32x4_t a, int32x4_t b, int32x4_t c, int32x4_t d) {
  const int16x8_t ab = vcombine_s16(vqmovn_s32(a), vqmovn_s32(b));
  const int16x8_t cd = vcombine_s16(vqmovn_s32(c), vqmovn_s32(d));
  return vcombine_s8(vqmovn_s16(ab), vqmovn_s16(cd));
}

// One 32-element Q8 block (Q8_0 / Q8_1 rule): writes qs, returns d and the sum of the quants.
inline float neon_quantize_q8_block32(const float* x, int8_t* qs, int32_t* sum) {
  float32x4_t v[8];
  float32x4_t m = vdupq_n_f32(0.0f);
  for (int k = 0; k < 8; ++k) {
    v[k] = vld1q_f32(x + 4 * k);
    m = vmaxnmq_f32(m, vabsq_f32(v[k]));  // maxNum: a NaN is skipped, as in the reference
  }
  const float amax = vmaxnmvq_f32(m);
  const float d = amax / 127.0f;
  const float32x4_t id = vdupq_n_f32(amax != 0.0f ? 127.0f / amax : 0.0f);
  int32x4_t q[8];
  for (int k = 0; k < 8; ++k) q[k] = vcvtnq_s32_f32(vmulq_f32(v[k], id));
  vst1q_s8(qs, neon_narrow_i32x16(q[0], q[1], q[2], q[3]));
  vst1q_s8(qs + 16, neon_narrow_i32x16(q[4], q[5], q[6], q[7]));
  int32x4_t s = vaddq_s32(vaddq_s32(q[0], q[1]), vaddq_s32(q[2], q[3]));
  s = vaddq_s32(s, vaddq_s32(vaddq_s32(q[4], q[5]), vaddq_s32(q[6], q[7])));
  *sum = vaddvq_s32(s);
  return d;
}

void neon_quantize_q8_0(const float* x, void* y, int64_t n) {
  if (n % QK8_0 != 0) throw_bad_row_length("quantize", DType::Q8_0, n);
  auto* out = static_cast<block_q8_0*>(y);
  for (int64_t b = 0; b < n / QK8_0; ++b) {
    int32_t sum;
    out[b].d = float_to_half(neon_quantize_q8_block32(x + b * QK8_0, out[b].qs, &sum));
  }
}

void neon_quantize_q8_1(const float* x, void* y, int64_t n) {
  if (n % QK8_1 != 0) throw_bad_row_length("quantize", DType::Q8_1, n);
  auto* out = static_cast<block_q8_1*>(y);
  for (int64_t b = 0; b < n / QK8_1; ++b) {
    int32_t sum;
    const float d = neon_quantize_q8_block32(x + b * QK8_1, out[b].qs, &sum);
    out[b].d = float_to_half(d);
    out[b].s = float_to_half(d * static_cast<float>(sum));
  }
}

void neon_quantize_q8_K(const float* x, void* y, int64_t n) {
  if (n % QK_K != 0) throw_bad_row_length("quantize", DType::Q8_K, n);
  auto* out = static_cast<block_q8_K*>(y);
  for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
    block_q8_K& blk = out[b];
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int i = 0; i < QK_K; i += 4) m = vmaxnmq_f32(m, vabsq_f32(vld1q_f32(x + i)));
    const float amax = vmaxnmvq_f32(m);
    if (!(amax > 0.0f)) {
      blk.d = 0.0f;
      std::memset(blk.qs, 0, sizeof blk.qs);
      std::memset(blk.bsums, 0, sizeof blk.bsums);
      continue;
    }
    // The scale's sign comes from the first element whose |x| is the maximum (as the reference).
    float max = 0.0f;
    for (int i = 0; i < QK_K; ++i)
      if (__builtin_fabsf(x[i]) == amax) {
        max = x[i];
        break;
      }
    const float iscale = -127.0f / max;
    const float32x4_t is = vdupq_n_f32(iscale);
    const int32x4_t q127 = vdupq_n_s32(127);
    for (int i = 0; i < QK_K; i += 16) {
      int32x4_t q[4];
      for (int k = 0; k < 4; ++k) q[k] = vminq_s32(vcvtnq_s32_f32(vmulq_f32(is, vld1q_f32(x + i + 4 * k))), q127);
      vst1q_s8(blk.qs + i, neon_narrow_i32x16(q[0], q[1], q[2], q[3]));
      blk.bsums[i / 16] = static_cast<int16_t>(vaddvq_s32(vaddq_s32(vaddq_s32(q[0], q[1]), vaddq_s32(q[2], q[3]))));
    }
    blk.d = 1.0f / iscale;
  }
}

// f32 → f16, round to nearest even; every NaN becomes sign | 0x7E00 as in fp16.h.
inline uint16x4_t neon_f32x4_to_f16(float32x4_t v) {
  const uint16x4_t h = vreinterpret_u16_f16(vcvt_f16_f32(v));
  const uint16x4_t is_nan = vmovn_u32(vmvnq_u32(vceqq_f32(v, v)));
  const uint16x4_t sign = vand_u16(vmovn_u32(vshrq_n_u32(vreinterpretq_u32_f32(v), 16)), vdup_n_u16(0x8000));
  return vbsl_u16(is_nan, vorr_u16(sign, vdup_n_u16(0x7E00)), h);
}

void neon_quantize_f16(const float* x, void* y, int64_t n) {
  auto* out = static_cast<uint16_t*>(y);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1_u16(out + i, neon_f32x4_to_f16(vld1q_f32(x + i)));
  if (i < n) {  // tail through a padded 4-lane buffer: the same arithmetic as the body
    float t[4] = {};
    uint16_t o[4];
    for (int64_t k = i; k < n; ++k) t[k - i] = x[k];
    vst1_u16(o, neon_f32x4_to_f16(vld1q_f32(t)));
    for (int64_t k = i; k < n; ++k) out[k] = o[k - i];
  }
}

// f32 → bf16, round to nearest even; NaN stays NaN with the quiet bit forced (fp16.h's rule).
inline uint16x4_t neon_f32x4_to_bf16(float32x4_t v) {
  const uint32x4_t u = vreinterpretq_u32_f32(v);
  const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
  const uint32x4_t rounded = vshrq_n_u32(vaddq_u32(vaddq_u32(u, vdupq_n_u32(0x7fff)), lsb), 16);
  const uint32x4_t nan = vorrq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(64));
  const uint32x4_t is_nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffff)), vdupq_n_u32(0x7f800000));
  return vmovn_u32(vbslq_u32(is_nan, nan, rounded));
}

void neon_quantize_bf16(const float* x, void* y, int64_t n) {
  auto* out = static_cast<uint16_t*>(y);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1_u16(out + i, neon_f32x4_to_bf16(vld1q_f32(x + i)));
  if (i < n) {
    float t[4] = {};
    uint16_t o[4];
    for (int64_t k = i; k < n; ++k) t[k - i] = x[k];
    vst1_u16(o, neon_f32x4_to_bf16(vld1q_f32(t)));
    for (int64_t k = i; k < n; ++k) out[k] = o[k - i];
  }
}

void fill_quantizers_neon(KernelTable& t) {
  t.quantize[static_cast<int>(DType::Q8_0)] = neon_quantize_q8_0;
  t.quantize[static_cast<int>(DType::Q8_1)] = neon_quantize_q8_1;
  t.quantize[static_cast<int>(DType::Q8_K)] = neon_quantize_q8_K;
  t.quantize[static_cast<int>(DType::F16)] = neon_quantize_f16;
  t.quantize[static_cast<int>(DType::BF16)] = neon_quantize_bf16;
}

}  // namespace
}  // namespace edgellm::kernels
