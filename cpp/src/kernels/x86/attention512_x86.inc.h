// 16-lane (AVX-512) traits for the tiled paged-attention path of attention_x86.inc.h; included
// only by the avx512 unit. Same algorithm, twice the queries per vector: the scores tile is
// 8 keys × up to 3 vectors (48 queries, 24 accumulators, key scalars as embedded broadcasts), the P·V
// tile 4 queries × 4 vectors (64 outputs, 16 accumulators: 4 V loads + 4 broadcasts feed 16 FMAs).
// On cores with two full-width FMA pipes this doubles the peak of the 8-lane tiles, which the
// prefill blocks already run close to.
#pragma once
#include "kernels/x86/attention_decode_x86.inc.h"

namespace edgellm::kernels {
namespace {

// simd_x86.h's exp_ps on 16 lanes: the same Cody–Waite reduction, degree-7 polynomial
// and two-step 2^n scaling, so both widths round identically.
inline __m512 exp_ps512(__m512 x) {
  const __mmask16 nan_mask = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
  const __m512 fn = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(0.693145751953125f), xc);
  r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i n = _mm512_cvtps_epi32(fn);
  const __m512i n1 = _mm512_srai_epi32(n, 1);
  const __m512i n2 = _mm512_sub_epi32(n, n1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
  const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
  const __m512 res = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
  return _mm512_mask_blend_ps(nan_mask, res, x);
}

struct AttnVec16 {
  using V = __m512;
  static constexpr int W = 16;
  static constexpr int kKeyTile = 8;
  static constexpr int kQVecs = 3;
  static constexpr int kPvQueries = 4;
  static constexpr int kPvVecs = 4;
  static constexpr bool kOutlineScores = false;
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V bcast(const float* p) { return _mm512_set1_ps(*p); }
  static V zero() { return _mm512_setzero_ps(); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V visible(V s, V p, V lo, V hi) {
    const __mmask16 hidden = _mm512_cmp_ps_mask(p, hi, _CMP_GT_OQ) | _mm512_cmp_ps_mask(lo, p, _CMP_GT_OQ);
    return _mm512_mask_blend_ps(hidden, s, _mm512_set1_ps(-INFINITY));
  }
  static V weight(V s, V m) {
    const __mmask16 kept = _mm512_cmp_ps_mask(s, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
    return _mm512_maskz_mov_ps(kept, exp_ps512(_mm512_sub_ps(s, m)));
  }
  static V rescale(V m_old, V m_new) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(m_new, m_old, _CMP_GT_OQ), _mm512_set1_ps(1.0f),
                                exp_ps512(_mm512_sub_ps(m_old, m_new)));
  }
  // AttnVec8::softcap on 16 lanes, the same operations in the same order.
  static V softcap(V s, float cap) {
    const V e = exp_ps512(_mm512_mul_ps(_mm512_set1_ps(2.0f), _mm512_div_ps(s, _mm512_set1_ps(cap))));
    const V t = _mm512_sub_ps(_mm512_set1_ps(1.0f),
                              _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
    const __mmask16 masked = _mm512_cmp_ps_mask(s, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ);
    return _mm512_mask_blend_ps(masked, _mm512_mul_ps(_mm512_set1_ps(cap), t), s);
  }
};

// 16-lane traits of the one-token direct path (attention_decode_x86.inc.h, DirectVec8 there).
struct DirectVec16 : AttnVec16 {  // load, store, set1, zero, fma, mul, add, max, softcap
  using V = __m512;
  static constexpr int W = 16;
  template <int NQ>
  static constexpr int pv_vecs() { return NQ <= 4 ? 4 : 2; }  // NQ × that ≤ 16 of 32 registers
  static V exp(V x) { return exp_ps512(x); }
  static float hsum(V v) { return _mm512_reduce_add_ps(v); }
  static float hmax(V v) { return _mm512_reduce_max_ps(v); }
  static __mmask16 tail_mask(int n) { return static_cast<__mmask16>((1u << n) - 1); }
  static V load_tail(const float* p, int n, float fill) { return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), tail_mask(n), p); }
  static void store_tail(float* p, int n, V v) { _mm512_mask_storeu_ps(p, tail_mask(n), v); }
  static V head(V v, int n) { return _mm512_maskz_mov_ps(tail_mask(n), v); }
  static __m128 reduce4(V a0, V a1, V a2, V a3) {
    auto half = [](V v) {
      return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    };
    return DirectVec8::reduce4(half(a0), half(a1), half(a2), half(a3));
  }
  template <DType KT>
  static V kv(const uint8_t* row, int i) {
    if constexpr (KT == DType::F32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i);
    } else if constexpr (KT == DType::F16) {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i)));
    } else {
      float d;
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q8_0_at(row, i, &d)));
      return _mm512_mul_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
    }
  }
};

// Blocks that take tiles (attention_use_tiles) use the 16-lane ones from 8 queries, or at head dim
// 256 (measured on Zen 5: 16 lanes beat 8 from 8 queries even with 7 or 8 padding lanes, e.g. -25%
// at 3-4 tokens × 3 heads; below that the 8-lane tiles win by 3-8% at head dim 64).
//
// Under exact_rows (attention_use_tiles) the lane width may still follow the whole block: per lane
// the 16-lane tiles compute what the 8-lane ones do (the same FMA chains, exp_ps512 is exp_ps
// step for step), except the scalar tail of P·V over head dims that are not a multiple of 16,
// where the width a one-token block would take is kept.
//
// One-token blocks whose group and head dims fit (attention_decode_direct_fits: decode) take the
// direct path of attention_decode_x86.inc.h instead, and so, token by token, do exact_rows
// blocks of such shapes.
void paged_attention_x86_512(const PagedAttentionArgs& a) {
  if (a.n_tokens == 1 || a.exact_rows) {
    if (attention_decode_direct_fits<DirectVec16>(a)) return attention_decode_direct<DirectVec16>(a);
    if (attention_decode_direct_fits<DirectVec8>(a)) return attention_decode_direct<DirectVec8>(a);  // head dims 8k
  }
  if (!attention_use_tiles(a)) {
    paged_attention_rowwise(a);
    return;
  }
  bool wide = a.n_tokens * a.n_q >= 8 || a.head_dim_k >= 256;
  if (a.exact_rows && a.head_dim_v % 16 != 0) wide = a.n_q >= 8 || a.head_dim_k >= 256;  // one token's width
  if (wide) paged_attention_tiled<AttnVec16>(a);
  else paged_attention_tiled<AttnVec8>(a);
}

}  // namespace
}  // namespace edgellm::kernels
