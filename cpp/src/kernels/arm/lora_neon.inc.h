// LoRA products (kernels/lora_kernels.h) in Advanced SIMD (armv8-a: F16 widened with fcvtl),
// included by the neon unit (the dotprod / i8mm tables start as copies of its table). The same
// tiles as x86/lora_x86.inc.h: down 4 A rows × 2 columns of 4-lane accumulators, up one 16-row
// block of Bᵀ (4 vectors) × 4 columns; prefetch ahead in software for the same reason (an
// adapter's matrices are short streams that start cold).
#pragma once
#include <algorithm>
#include <cstdint>

#include "kernels/arm/simd_neon.h"
#include "kernels/kernels.h"

namespace edgellm::kernels {
namespace {

constexpr size_t kLoraUpPrefetchNeon = 2048;

template <bool F16>
inline float32x4_t lora_load4(const void* m, int64_t i) {
  if constexpr (F16) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(static_cast<const uint16_t*>(m) + i)));
  } else {
    return vld1q_f32(static_cast<const float*>(m) + i);
  }
}

template <bool F16>
inline float lora_load1(const void* m, int64_t i) {
  if constexpr (F16) {
    return half_to_float(static_cast<const uint16_t*>(m)[i]);
  } else {
    return static_cast<const float*>(m)[i];
  }
}

// low[c][r] for A rows [r0, r0 + R) and columns [c0, c0 + C).
template <bool F16, int R, int C>
void lora_down_tile_neon(const LoraDownArgs& a, int64_t r0, int64_t c0) {
  const size_t es = F16 ? 2 : 4;
  const void* w[R];
  for (int r = 0; r < R; ++r) w[r] = static_cast<const uint8_t*>(a.a) + static_cast<size_t>((r0 + r) * a.K) * es;
  const float* x[C];
  for (int c = 0; c < C; ++c) x[c] = a.x + a.rows[c0 + c] * a.ldx;
  float32x4_t acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 4 <= a.K; i += 4) {
    if ((i & 15) == 0)  // one cache line of F16 holds 32 elements: every 16 is enough for both types
      for (int r = 0; r < R; ++r)
        __builtin_prefetch(static_cast<const char*>(w[r]) + static_cast<size_t>(R * a.K + i) * es);
    float32x4_t xv[C];
    for (int c = 0; c < C; ++c) xv[c] = vld1q_f32(x[c] + i);
    for (int r = 0; r < R; ++r) {
      const float32x4_t wv = lora_load4<F16>(w[r], i);
      for (int c = 0; c < C; ++c) acc[r][c] = vfmaq_f32(acc[r][c], wv, xv[c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      float s = vaddvq_f32(acc[r][c]);
      for (int64_t j = i; j < a.K; ++j) s += lora_load1<F16>(w[r], j) * x[c][j];
      a.low[(c0 + c) * a.rank + r0 + r] = s * a.scale[c0 + c];
    }
}

template <bool F16, int C>
void lora_down_cols_neon(const LoraDownArgs& a, int64_t c0) {
  int64_t r = 0;
  for (; r + 4 <= a.rank; r += 4) lora_down_tile_neon<F16, 4, C>(a, r, c0);
  for (; r < a.rank; ++r) lora_down_tile_neon<F16, 1, C>(a, r, c0);
}

template <bool F16>
void lora_down_neon_t(const LoraDownArgs& a) {
  int64_t c = 0;
  for (; c + 2 <= a.ncols; c += 2) lora_down_cols_neon<F16, 2>(a, c);
  if (c < a.ncols) lora_down_cols_neon<F16, 1>(a, c);
}

// y_c[o, o + n) += Σ_r low_c[r] · Bᵀ[r][o, o + n) for columns [c0, c0 + C): one 16-row block.
template <bool F16, int C>
void lora_up_block_neon(const LoraUpArgs& a, int64_t o, int64_t n, int64_t c0) {
  const size_t es = F16 ? 2 : 4;
  const uint8_t* b = static_cast<const uint8_t*>(a.bt) + static_cast<size_t>(o * a.rank) * es;
  const size_t block_bytes = static_cast<size_t>(a.rank) * kLoraBlock * es;
  for (size_t off = 0; off < block_bytes; off += 64) __builtin_prefetch(b + kLoraUpPrefetchNeon + off);
  float32x4_t acc[C][4];
  for (int c = 0; c < C; ++c)
    for (int k = 0; k < 4; ++k) acc[c][k] = vdupq_n_f32(0.0f);
  const float* low = a.low + c0 * a.rank;
  for (int64_t r = 0; r < a.rank; ++r, b += kLoraBlock * es) {
    float32x4_t bv[4];
    for (int k = 0; k < 4; ++k) bv[k] = lora_load4<F16>(b, 4 * k);
    for (int c = 0; c < C; ++c) {
      const float l = low[c * a.rank + r];
      for (int k = 0; k < 4; ++k) acc[c][k] = vfmaq_n_f32(acc[c][k], bv[k], l);
    }
  }
  for (int c = 0; c < C; ++c) {
    float* y = a.y + a.rows[c0 + c] * a.ldy + o;
    if (n == kLoraBlock) {
      for (int k = 0; k < 4; ++k) vst1q_f32(y + 4 * k, vaddq_f32(vld1q_f32(y + 4 * k), acc[c][k]));
    } else {
      float t[kLoraBlock];
      for (int k = 0; k < 4; ++k) vst1q_f32(t + 4 * k, acc[c][k]);
      for (int64_t i = 0; i < n; ++i) y[i] += t[i];
    }
  }
}

template <bool F16>
void lora_up_neon_t(const LoraUpArgs& a) {
  for (int64_t o = a.o0; o < a.o1; o += kLoraBlock) {
    const int64_t n = std::min<int64_t>(kLoraBlock, a.o1 - o);
    int64_t c = 0;
    for (; c + 4 <= a.ncols; c += 4) lora_up_block_neon<F16, 4>(a, o, n, c);
    for (; c < a.ncols; ++c) lora_up_block_neon<F16, 1>(a, o, n, c);
  }
}

void lora_down_neon(const LoraDownArgs& a) {
  if (a.type == DType::F16) lora_down_neon_t<true>(a);
  else lora_down_neon_t<false>(a);
}

void lora_up_neon(const LoraUpArgs& a) {
  if (a.type == DType::F16) lora_up_neon_t<true>(a);
  else lora_up_neon_t<false>(a);
}

}  // namespace
}  // namespace edgellm::kernels
