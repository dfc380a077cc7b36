// The one-token path of the AVX-512 paged attention (attention512_x86.inc.h): a decode step's
// queries — one token, the n_q ≤ 8 query heads that share this KV head — against the cached keys,
// reading each K and V row straight from the cache (F16 → f32 in the load, F32, or Q8_0 blocks).
//
// Why: the tiled path converts every key run into f32 scratch first and puts the queries on the
// vector lanes, so a decode block of 4 queries (Gemma 3: 4 heads per KV head, head dim 256) fills
// 4 of 16 lanes — per key ~256 broadcast-FMAs for the scores plus a converted copy of K and V
// written and read back. Here the head dim is on the lanes: per key and 16 dims one convert and
// n_q FMAs for the scores, one convert and n_q FMAs for P·V, and the n_q score sums reduced
// together (reduce4). The online softmax runs per page run over the run's scores, as the
// reference does; only the rounding of the sums differs.
//
// Head dims must be multiples of 16 (attention_decode_direct_fits); otherwise the tiled or
// row-wise path runs. Measured against them (F16 KV, Zen 4, one call; /tmp harness timing the
// three paths on the same pages): n_q 4 / head dim 256 at 256 keys 20.7 → 6.8 µs, at 1024 keys
// 83 → 28; 3/64 6.2 → 2.3; 7/64 7.8 → 4.3; 6/128 26.5 → 11.2; 1/64 5.4 → 2.5.
// Included by attention512_x86.inc.h after AttnVec16 (its softcap and exp_ps512).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/fp16.h"
#include "kernels/attention.h"

namespace edgellm::kernels {
namespace {

constexpr int kDirectMaxQueries = 8;

inline bool attention_decode_direct_fits(const PagedAttentionArgs& a) {
  return a.n_q <= kDirectMaxQueries && a.head_dim_k % 16 == 0 && a.head_dim_v % 16 == 0 &&
         (a.kv_type == DType::F16 || a.kv_type == DType::F32 || a.kv_type == DType::Q8_0);
}

// Elements i..i+15 of a K/V row as f32 (i a multiple of 16).
template <DType KT>
inline __m512 kv_row16(const uint8_t* row, int i) {
  if constexpr (KT == DType::F32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i);
  } else if constexpr (KT == DType::F16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i)));
  } else {  // Q8_0: 34-byte blocks of an f16 scale and 32 int8
    const uint8_t* b = row + 34 * (i / 32);
    uint16_t dh;
    std::memcpy(&dh, b, 2);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + i % 32));
    return _mm512_mul_ps(_mm512_set1_ps(half_to_float(dh)), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
  }
}

// The four horizontal sums of a0..a3 in lanes 0..3.
inline __m128 reduce4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  auto half = [](__m512 v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  };
  const __m256 b01 = _mm256_hadd_ps(half(a0), half(a1));  // a0 pairs, a1 pairs | (upper 128)
  const __m256 b23 = _mm256_hadd_ps(half(a2), half(a3));
  const __m256 c = _mm256_hadd_ps(b01, b23);  // a0 a1 a2 a3 (lower 128 halves) | (upper)
  return _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
}

// s[q·ls + r] = q_q · K[r] for the run's rows r < rows (rows ldk bytes apart from k).
template <DType KT, int NQ>
inline void direct_scores(const float* const* q, const uint8_t* k, size_t ldk, int rows, int hd, float* s, int ls) {
  for (int r = 0; r < rows; ++r, k += ldk) {
    __m512 acc[4 * ((NQ + 3) / 4)];
    for (auto& x : acc) x = _mm512_setzero_ps();
    for (int i = 0; i < hd; i += 16) {
      const __m512 kv = kv_row16<KT>(k, i);
#pragma GCC unroll 8
      for (int h = 0; h < NQ; ++h) acc[h] = _mm512_fmadd_ps(kv, _mm512_loadu_ps(q[h] + i), acc[h]);
    }
#pragma GCC unroll 2
    for (int h0 = 0; h0 < NQ; h0 += 4) {
      alignas(16) float t[4];
      _mm_store_ps(t, reduce4(acc[h0], acc[h0 + 1], acc[h0 + 2], acc[h0 + 3]));
      for (int h = h0; h < std::min(NQ, h0 + 4); ++h) s[h * ls + r] = t[h - h0];
    }
  }
}

// o_q[i..i+16·CV) = c_q · o_q + Σ_r w[q·ls + r] · V[r][..], for the NQ queries.
template <DType KT, int NQ, int CV>
inline void direct_pv_chunk(float* const* o, int i, const float* c, const float* w, int ls, const uint8_t* v,
                            size_t ldv, int rows) {
  __m512 acc[NQ][CV];
#pragma GCC unroll 8
  for (int h = 0; h < NQ; ++h) {
    const __m512 ch = _mm512_set1_ps(c[h]);
#pragma GCC unroll 4
    for (int j = 0; j < CV; ++j) acc[h][j] = _mm512_mul_ps(_mm512_loadu_ps(o[h] + i + 16 * j), ch);
  }
  for (int r = 0; r < rows; ++r, v += ldv) {
    __m512 vv[CV];
#pragma GCC unroll 4
    for (int j = 0; j < CV; ++j) vv[j] = kv_row16<KT>(v, i + 16 * j);
#pragma GCC unroll 8
    for (int h = 0; h < NQ; ++h) {
      const __m512 wh = _mm512_set1_ps(w[h * ls + r]);
#pragma GCC unroll 4
      for (int j = 0; j < CV; ++j) acc[h][j] = _mm512_fmadd_ps(wh, vv[j], acc[h][j]);
    }
  }
#pragma GCC unroll 8
  for (int h = 0; h < NQ; ++h)
#pragma GCC unroll 4
    for (int j = 0; j < CV; ++j) _mm512_storeu_ps(o[h] + i + 16 * j, acc[h][j]);
}

template <DType KT, int NQ>
void attention_decode_direct_nq(const PagedAttentionArgs& a) {
  const int hd_k = a.head_dim_k, hd_v = a.head_dim_v, P = a.page_size;
  const int ls = (P + 15) / 16 * 16;  // scores of one query against one run, whole vectors
  // Scratch: NQ score rows, then per query the running max m, sum l and last rescale factor c.
  float* s = a.scratch;
  float* m = s + static_cast<size_t>(NQ) * ls;
  float* l = m + NQ;
  float* c = l + NQ;
  const float* q[NQ];
  float* o[NQ];
  for (int h = 0; h < NQ; ++h) {
    q[h] = a.q + h * a.q_head_stride;
    o[h] = a.out + h * a.out_head_stride;
    std::memset(o[h], 0, sizeof(float) * hd_v);
    m[h] = -INFINITY;
    l[h] = 0.0f;
  }
  const int32_t last = a.q_pos0;
  for (int32_t p0 = attention_first_key(a); p0 <= last;) {
    const int32_t p1 = std::min<int32_t>(last, (p0 / P + 1) * P - 1);
    const size_t page = static_cast<size_t>(a.pages[p0 / P]);
    const size_t slot = static_cast<size_t>(p0 % P);
    const int rows = p1 - p0 + 1;
    const uint8_t* k = a.k_base + page * a.page_stride + slot * a.k_row_bytes;
    const uint8_t* v = a.v_base + page * a.page_stride + slot * a.v_row_bytes;
    direct_scores<KT, NQ>(q, k, a.k_row_bytes, rows, hd_k, s, ls);
    const __mmask16 tail = static_cast<__mmask16>((1u << (rows % 16)) - 1);
    for (int h = 0; h < NQ; ++h) {
      float* sh = s + h * ls;
      if (a.softcap > 0.0f)  // Gemma 2: cap the scores before the softmax sees them
        for (int r = 0; r < rows; r += 16) _mm512_storeu_ps(sh + r, AttnVec16::softcap(_mm512_loadu_ps(sh + r), a.softcap));
      __m512 mx = _mm512_set1_ps(-INFINITY);
      int r = 0;
      for (; r + 16 <= rows; r += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(sh + r));
      if (tail) mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), tail, sh + r));
      const float mn = std::max(m[h], _mm512_reduce_max_ps(mx));
      c[h] = mn > m[h] ? std::exp(m[h] - mn) : 1.0f;  // 0 on the first run (m = -inf)
      m[h] = mn;
      const __m512 mv = _mm512_set1_ps(mn);
      __m512 sum = _mm512_setzero_ps();
      for (r = 0; r + 16 <= rows; r += 16) {
        const __m512 w = exp_ps512(_mm512_sub_ps(_mm512_loadu_ps(sh + r), mv));
        _mm512_storeu_ps(sh + r, w);
        sum = _mm512_add_ps(sum, w);
      }
      if (tail) {
        const __m512 w = _mm512_maskz_mov_ps(tail, exp_ps512(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, sh + r), mv)));
        _mm512_mask_storeu_ps(sh + r, tail, w);
        sum = _mm512_add_ps(sum, w);
      }
      l[h] = l[h] * c[h] + _mm512_reduce_add_ps(sum);
    }
    constexpr int CV = NQ <= 4 ? 4 : 2;  // NQ × CV ≤ 16 accumulators
    int i = 0;
    for (; i + 16 * CV <= hd_v; i += 16 * CV) direct_pv_chunk<KT, NQ, CV>(o, i, c, s, ls, v, a.v_row_bytes, rows);
    for (; i < hd_v; i += 16) direct_pv_chunk<KT, NQ, 1>(o, i, c, s, ls, v, a.v_row_bytes, rows);
    p0 = p1 + 1;
  }
  for (int h = 0; h < NQ; ++h) {
    const __m512 f = _mm512_set1_ps(attention_output_scale(m[h], l[h], a.sinks, h));
    for (int i = 0; i < hd_v; i += 16) _mm512_storeu_ps(o[h] + i, _mm512_mul_ps(_mm512_loadu_ps(o[h] + i), f));
  }
}

template <DType KT>
void attention_decode_direct_kt(const PagedAttentionArgs& a) {
  switch (a.n_q) {
    case 1: return attention_decode_direct_nq<KT, 1>(a);
    case 2: return attention_decode_direct_nq<KT, 2>(a);
    case 3: return attention_decode_direct_nq<KT, 3>(a);
    case 4: return attention_decode_direct_nq<KT, 4>(a);
    case 5: return attention_decode_direct_nq<KT, 5>(a);
    case 6: return attention_decode_direct_nq<KT, 6>(a);
    case 7: return attention_decode_direct_nq<KT, 7>(a);
    default: return attention_decode_direct_nq<KT, 8>(a);
  }
}

// One token (a.n_tokens == 1; attention_decode_direct_fits(a)).
inline void attention_decode_direct(const PagedAttentionArgs& a) {
  switch (a.kv_type) {
    case DType::F32: return attention_decode_direct_kt<DType::F32>(a);
    case DType::F16: return attention_decode_direct_kt<DType::F16>(a);
    default: return attention_decode_direct_kt<DType::Q8_0>(a);
  }
}

}  // namespace
}  // namespace edgellm::kernels
