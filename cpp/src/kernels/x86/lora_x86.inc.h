// LoRA products (kernels/lora_kernels.h) in 256-bit AVX2/FMA/F16C, included by the avx2 and
// avx512 units (the work is a stream of A / Bᵀ elements, one multiply-add each per column:
// wider vectors would not read memory faster). Register tiles: down 4 A rows × 2 columns (× 4
// in the avx512 unit), up one 16-row block of Bᵀ × 4 columns. Both prefetch ahead in software:
// an adapter's matrices are short streams (tens of KB) that the hardware prefetchers barely ramp
// up on.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/kernels.h"

namespace edgellm::kernels {
namespace {

constexpr size_t kUpPrefetch = 2048;

template <bool F16>
inline __m256 lora_load8(const void* m, int64_t i) {
  if constexpr (F16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(m) + i)));
  } else {
    return _mm256_loadu_ps(static_cast<const float*>(m) + i);
  }
}

template <bool F16>
inline float lora_load1(const void* m, int64_t i) {
  if constexpr (F16) {
    return _cvtsh_ss(static_cast<const uint16_t*>(m)[i]);
  } else {
    return static_cast<const float*>(m)[i];
  }
}

inline float lora_hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// low[c][r] for A rows [r0, r0 + R) and columns [c0, c0 + C).
template <bool F16, int R, int C>
void lora_down_tile(const LoraDownArgs& a, int64_t r0, int64_t c0) {
  const size_t es = F16 ? 2 : 4;
  const void* w[R];
  for (int r = 0; r < R; ++r) w[r] = static_cast<const uint8_t*>(a.a) + static_cast<size_t>((r0 + r) * a.K) * es;
  const float* x[C];
  for (int c = 0; c < C; ++c) x[c] = a.x + a.rows[c0 + c] * a.ldx;
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= a.K; i += 8) {
    for (int r = 0; r < R; ++r)  // the next tile's rows, in step with this one's
      _mm_prefetch(static_cast<const char*>(w[r]) + static_cast<size_t>((R * a.K + i)) * es, _MM_HINT_T0);
    __m256 xv[C];
    for (int c = 0; c < C; ++c) xv[c] = _mm256_loadu_ps(x[c] + i);
    for (int r = 0; r < R; ++r) {
      const __m256 wv = lora_load8<F16>(w[r], i);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(wv, xv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      float s = lora_hsum(acc[r][c]);
      for (int64_t j = i; j < a.K; ++j) s += lora_load1<F16>(w[r], j) * x[c][j];
      a.low[(c0 + c) * a.rank + r0 + r] = s * a.scale[c0 + c];
    }
}

template <bool F16, int C>
void lora_down_cols(const LoraDownArgs& a, int64_t c0) {
  int64_t r = 0;
  for (; r + 4 <= a.rank; r += 4) lora_down_tile<F16, 4, C>(a, r, c0);
  for (; r < a.rank; ++r) lora_down_tile<F16, 1, C>(a, r, c0);
}

template <bool F16>
void lora_down_x86(const LoraDownArgs& a) {
  int64_t c = 0;
#ifdef __AVX512F__
  // 32 vector registers: 4 columns a pass (16 accumulators), so a group of 4 sequences (16
  // streams over 4 adapters) reads its A once instead of once per column pair.
  for (; c + 4 <= a.ncols; c += 4) lora_down_cols<F16, 4>(a, c);
#endif
  for (; c + 2 <= a.ncols; c += 2) lora_down_cols<F16, 2>(a, c);
  if (c < a.ncols) lora_down_cols<F16, 1>(a, c);
}

// y_c[o, o + n) += Σ_r low_c[r] · Bᵀ[r][o, o + n) for columns [c0, c0 + C): one 16-row block
// of Bᵀ (rank × 16 contiguous elements), n = 16 or the last block's rows.
template <bool F16, int C>
void lora_up_block(const LoraUpArgs& a, int64_t o, int64_t n, int64_t c0) {
  const size_t es = F16 ? 2 : 4;
  const uint8_t* b = static_cast<const uint8_t*>(a.bt) + static_cast<size_t>(o * a.rank) * es;
  const size_t block_bytes = static_cast<size_t>(a.rank) * kLoraBlock * es;
  // kUpPrefetch bytes ahead: sequential, but an adapter's short streams start cold
  for (size_t off = 0; off < block_bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(b + kUpPrefetch + off), _MM_HINT_T0);
  __m256 acc[C][2];
  for (int c = 0; c < C; ++c) acc[c][0] = acc[c][1] = _mm256_setzero_ps();
  const float* low = a.low + c0 * a.rank;
  for (int64_t r = 0; r < a.rank; ++r, b += kLoraBlock * es) {
    const __m256 b0 = lora_load8<F16>(b, 0), b1 = lora_load8<F16>(b, 8);
    for (int c = 0; c < C; ++c) {
      const __m256 l = _mm256_broadcast_ss(low + c * a.rank + r);
      acc[c][0] = _mm256_fmadd_ps(l, b0, acc[c][0]);
      acc[c][1] = _mm256_fmadd_ps(l, b1, acc[c][1]);
    }
  }
  for (int c = 0; c < C; ++c) {
    float* y = a.y + a.rows[c0 + c] * a.ldy + o;
    if (n == kLoraBlock) {
      _mm256_storeu_ps(y, _mm256_add_ps(_mm256_loadu_ps(y), acc[c][0]));
      _mm256_storeu_ps(y + 8, _mm256_add_ps(_mm256_loadu_ps(y + 8), acc[c][1]));
    } else {
      alignas(32) float t[kLoraBlock];
      _mm256_store_ps(t, acc[c][0]);
      _mm256_store_ps(t + 8, acc[c][1]);
      for (int64_t i = 0; i < n; ++i) y[i] += t[i];
    }
  }
}

template <bool F16>
void lora_up_x86(const LoraUpArgs& a) {
  for (int64_t o = a.o0; o < a.o1; o += kLoraBlock) {
    const int64_t n = std::min<int64_t>(kLoraBlock, a.o1 - o);
    int64_t c = 0;
    for (; c + 4 <= a.ncols; c += 4) lora_up_block<F16, 4>(a, o, n, c);
    for (; c < a.ncols; ++c) lora_up_block<F16, 1>(a, o, n, c);
  }
}

void lora_down_dispatch(const LoraDownArgs& a) {
  if (a.type == DType::F16) lora_down_x86<true>(a);
  else lora_down_x86<false>(a);
}

void lora_up_dispatch(const LoraUpArgs& a) {
  if (a.type == DType::F16) lora_up_x86<true>(a);
  else lora_up_x86<false>(a);
}

}  // namespace
}  // namespace edgellm::kernels
