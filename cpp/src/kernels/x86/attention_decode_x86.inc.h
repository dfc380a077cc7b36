// The one-token path of the x86 paged attention (attention_x86.inc.h, attention512_x86.inc.h): a
// decode step's queries — one token, the n_q ≤ 8 query heads that share this KV head — against
// the cached keys, reading each K and V row straight from the cache (F16 → f32 in the load, F32,
// or Q8_0 blocks). Written once over lane traits D (DirectVec8 below for AVX2, DirectVec16 in
// attention512_x86.inc.h for AVX-512).
//
// Why: the tiled path converts every key run into f32 scratch first and puts the queries on the
// vector lanes, so a decode block of 4 queries (Gemma 3: 4 heads per KV head, head dim 256) fills
// 4 of 16 lanes — per key ~256 broadcast-FMAs for the scores plus a converted copy of K and V
// written and read back; the row-wise path converts too and sums each score alone. Here the head
// dim is on the lanes: per key and vector of dims one convert and n_q FMAs for the scores, one
// convert and n_q FMAs for P·V, and the n_q score sums reduced together (D::reduce4). The online
// softmax runs per page run over the run's scores, as the reference does; only the rounding of
// the sums differs.
//
// Measured against the tiled and row-wise paths (F16 KV, Zen 4, AVX-512, one call on the same
// pages): n_q 4 / head dim 256 at 256 keys 20.7 → 6.8 µs, at 1024 keys 83 → 28; 3/64 6.2 → 2.3;
// 7/64 7.8 → 4.3; 6/128 26.5 → 11.2; 1/64 5.4 → 2.5.
//
// Head dims must be multiples of the lane count (attention_decode_direct_fits); otherwise the
// tiled or row-wise path runs.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/fp16.h"
#include "kernels/attention.h"
#include "kernels/x86/attention_x86.inc.h"  // AttnVec8, attention_first_key, exp_ps, hsum

namespace edgellm::kernels {
namespace {

constexpr int kDirectMaxQueries = 8;
// How far ahead of its computation a call requests K/V lines into L2 (a quarter of Zen 4's L2).
constexpr size_t kDirectL2Ahead = 256 * 1024;
// The largest run (one page of one head's K or V rows) whose lines are also requested into L1.
constexpr size_t kDirectL1Run = 8 * 1024;

template <class D>
inline bool attention_decode_direct_fits(const PagedAttentionArgs& a) {
  return a.n_q <= kDirectMaxQueries && a.head_dim_k % D::W == 0 && a.head_dim_v % D::W == 0 &&
         (a.kv_type == DType::F16 || a.kv_type == DType::F32 || a.kv_type == DType::Q8_0);
}

// Requests the cache lines of the run at p0 (attention_run): its K rows and / or its V rows, into
// the cache level Hint (_MM_HINT_T0: L1, T1: L2). A prefetch never faults. Returns the run's p1.
template <int Hint>
inline int32_t prefetch_run(const PagedAttentionArgs& a, int32_t p0, int32_t last, bool k, bool v) {
  const AttentionRun run = attention_run(a, p0, last);
  const size_t rows = static_cast<size_t>(run.p1 - p0 + 1);
  auto lines = [](const uint8_t* p, size_t bytes) {
    const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
    for (uintptr_t l = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63}; l < end; l += 64)
      _mm_prefetch(reinterpret_cast<const char*>(l), static_cast<_mm_hint>(Hint));
  };
  if (k) lines(run.k, rows * a.k_row_bytes);
  if (v) lines(run.v, rows * a.v_row_bytes);
  return run.p1;
}

// A Q8_0 K/V row's element i (34-byte blocks of an f16 scale and 32 int8): the block's scale in
// *d, a pointer to the element's int8.
inline const int8_t* q8_0_at(const uint8_t* row, int i, float* d) {
  const uint8_t* b = row + 34 * (i / 32);
  uint16_t dh;
  std::memcpy(&dh, b, 2);
  *d = half_to_float(dh);
  return reinterpret_cast<const int8_t*>(b + 2 + i % 32);
}

// 8-lane (AVX2) traits of the direct path (16-lane: DirectVec16, attention512_x86.inc.h).
struct DirectVec8 : AttnVec8 {  // load, store, set1, zero, fma, mul, add, max, softcap
  using V = __m256;
  static constexpr int W = 8;
  // P·V: output vectors per query held in registers (NQ × that accumulators of 16 registers).
  template <int NQ>
  static constexpr int pv_vecs() { return NQ <= 4 ? 2 : 1; }
  static V exp(V x) { return exp_ps(x); }
  static float hsum(V v) { return ::edgellm::kernels::hsum(v); }
  static float hmax(V v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }
  static __m256i tail_mask(int n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }
  // Lanes < n from p, the rest `fill`; and the store of lanes < n.
  static V load_tail(const float* p, int n, float fill) {
    const __m256i m = tail_mask(n);
    return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
  }
  static void store_tail(float* p, int n, V v) { _mm256_maskstore_ps(p, tail_mask(n), v); }
  // Lanes < n of v, the rest 0.
  static V head(V v, int n) { return _mm256_and_ps(v, _mm256_castsi256_ps(tail_mask(n))); }
  // The four horizontal sums of a0..a3 in lanes 0..3.
  static __m128 reduce4(V a0, V a1, V a2, V a3) {
    const __m256 c = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
  }
  // Elements i..i+7 of a K/V row as f32 (i a multiple of 8).
  template <DType KT>
  static V kv(const uint8_t* row, int i) {
    if constexpr (KT == DType::F32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
    } else if constexpr (KT == DType::F16) {
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
    } else {
      float d;
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q8_0_at(row, i, &d)));
      return _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
    }
  }
};

// s[h·ls + r] = q_h · K[r] for the run's rows r < rows (rows ldk bytes apart from k).
template <class D, DType KT, int NQ>
inline void direct_scores(const float* const* q, const uint8_t* k, size_t ldk, int rows, int hd, float* s, int ls) {
  using V = typename D::V;
  for (int r = 0; r < rows; ++r, k += ldk) {
    V acc[4 * ((NQ + 3) / 4)];
    for (auto& x : acc) x = D::zero();
    for (int i = 0; i < hd; i += D::W) {
      const V kv = D::template kv<KT>(k, i);
#pragma GCC unroll 8
      for (int h = 0; h < NQ; ++h) acc[h] = D::fma(kv, D::load(q[h] + i), acc[h]);
    }
#pragma GCC unroll 2
    for (int h0 = 0; h0 < NQ; h0 += 4) {
      alignas(16) float t[4];
      _mm_store_ps(t, D::reduce4(acc[h0], acc[h0 + 1], acc[h0 + 2], acc[h0 + 3]));
      for (int h = h0; h < std::min(NQ, h0 + 4); ++h) s[h * ls + r] = t[h - h0];
    }
  }
}

// o_h[i..i+W·CV) = c_h · o_h + Σ_r w[h·ls + r] · V[r][..], for the NQ queries.
template <class D, DType KT, int NQ, int CV>
inline void direct_pv_chunk(float* const* o, int i, const float* c, const float* w, int ls, const uint8_t* v,
                            size_t ldv, int rows) {
  using V = typename D::V;
  V acc[NQ][CV];
#pragma GCC unroll 8
  for (int h = 0; h < NQ; ++h) {
    const V ch = D::set1(c[h]);
#pragma GCC unroll 4
    for (int j = 0; j < CV; ++j) acc[h][j] = D::mul(D::load(o[h] + i + D::W * j), ch);
  }
  for (int r = 0; r < rows; ++r, v += ldv) {
    V vv[CV];
#pragma GCC unroll 4
    for (int j = 0; j < CV; ++j) vv[j] = D::template kv<KT>(v, i + D::W * j);
#pragma GCC unroll 8
    for (int h = 0; h < NQ; ++h) {
      const V wh = D::set1(w[h * ls + r]);
#pragma GCC unroll 4
      for (int j = 0; j < CV; ++j) acc[h][j] = D::fma(wh, vv[j], acc[h][j]);
    }
  }
#pragma GCC unroll 8
  for (int h = 0; h < NQ; ++h)
#pragma GCC unroll 4
    for (int j = 0; j < CV; ++j) D::store(o[h] + i + D::W * j, acc[h][j]);
}

template <class D, DType KT, int NQ>
void attention_decode_direct_nq(const PagedAttentionArgs& a) {
  using V = typename D::V;
  constexpr int W = D::W;
  const int hd_k = a.head_dim_k, hd_v = a.head_dim_v, P = a.page_size;
  const int ls = (P + W - 1) / W * W;  // scores of one query against one run, whole vectors
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
  const int32_t last = a.q_pos0, first = attention_first_key(a);
  // A decode step reads the cache once, after the step's weights have pushed it out of the
  // caches, and one run (≤ a page) computes in less time than a DRAM round trip: the call's K and
  // V lines are requested into L2 up to kDirectL2Ahead bytes ahead of the run being computed (all
  // of them at short contexts), each run's V into L1 while its scores are computed and the next
  // run's K while its softmax and P·V run. Qwen2.5-Coder-0.5B / Gemma 3, 16 streams × (128 + 128),
  // decode step 21.1-22.5 / 12.4-12.9 ms → 19.2-20.6 / 11.5-12.1 ms; the L1 prefetches alone
  // gained 2-3 %, the L2 ones alone about half of the whole.
  int32_t ahead = first;  // the first position not yet requested into L2
  for (size_t bytes = 0; ahead <= last && bytes < kDirectL2Ahead;) {
    const int32_t p1 = prefetch_run<_MM_HINT_T1>(a, ahead, last, true, true);
    bytes += static_cast<size_t>(p1 - ahead + 1) * (a.k_row_bytes + a.v_row_bytes);
    ahead = p1 + 1;
  }
  // L1 prefetches only while a run's K or V fits a quarter of L1 (Gemma 3's head dim 256 makes
  // 16 KB runs: requesting them into L1 evicted what the run was using).
  const bool l1 = static_cast<size_t>(P) * std::max(a.k_row_bytes, a.v_row_bytes) <= kDirectL1Run;
  if (l1 && first <= last) prefetch_run<_MM_HINT_T0>(a, first, last, true, false);
  for (int32_t p0 = first; p0 <= last;) {
    const AttentionRun run = attention_run(a, p0, last);
    const int rows = run.p1 - p0 + 1, full = rows / W * W, tail = rows - full;
    if (l1) prefetch_run<_MM_HINT_T0>(a, p0, last, false, true);
    direct_scores<D, KT, NQ>(q, run.k, a.k_row_bytes, rows, hd_k, s, ls);
    if (l1 && run.p1 < last) prefetch_run<_MM_HINT_T0>(a, run.p1 + 1, last, true, false);
    if (ahead <= last) ahead = prefetch_run<_MM_HINT_T1>(a, ahead, last, true, true) + 1;
    for (int h = 0; h < NQ; ++h) {
      float* sh = s + h * ls;
      if (a.softcap > 0.0f)  // Gemma 2: cap the scores before the softmax sees them
        for (int r = 0; r < rows; r += W) D::store(sh + r, D::softcap(D::load(sh + r), a.softcap));
      V mx = D::set1(-INFINITY);
      for (int r = 0; r < full; r += W) mx = D::max(mx, D::load(sh + r));
      if (tail) mx = D::max(mx, D::load_tail(sh + full, tail, -INFINITY));
      const float mn = std::max(m[h], D::hmax(mx));
      c[h] = mn > m[h] ? std::exp(m[h] - mn) : 1.0f;  // 0 on the first run (m = -inf)
      m[h] = mn;
      const V neg = D::set1(-mn);
      V sum = D::zero();
      for (int r = 0; r < full; r += W) {
        const V w = D::exp(D::add(D::load(sh + r), neg));
        D::store(sh + r, w);
        sum = D::add(sum, w);
      }
      if (tail) {
        const V w = D::head(D::exp(D::add(D::load_tail(sh + full, tail, mn), neg)), tail);
        D::store_tail(sh + full, tail, w);
        sum = D::add(sum, w);
      }
      l[h] = l[h] * c[h] + D::hsum(sum);
    }
    constexpr int CV = D::template pv_vecs<NQ>();
    int i = 0;
    for (; i + W * CV <= hd_v; i += W * CV) direct_pv_chunk<D, KT, NQ, CV>(o, i, c, s, ls, run.v, a.v_row_bytes, rows);
    for (; i < hd_v; i += W) direct_pv_chunk<D, KT, NQ, 1>(o, i, c, s, ls, run.v, a.v_row_bytes, rows);
    p0 = run.p1 + 1;
  }
  for (int h = 0; h < NQ; ++h) {
    const V f = D::set1(attention_output_scale(m[h], l[h], a.sinks, h));
    for (int i = 0; i < hd_v; i += W) D::store(o[h] + i, D::mul(D::load(o[h] + i), f));
  }
}

template <class D, DType KT>
void attention_decode_direct_kt(const PagedAttentionArgs& a) {
  switch (a.n_q) {
    case 1: return attention_decode_direct_nq<D, KT, 1>(a);
    case 2: return attention_decode_direct_nq<D, KT, 2>(a);
    case 3: return attention_decode_direct_nq<D, KT, 3>(a);
    case 4: return attention_decode_direct_nq<D, KT, 4>(a);
    case 5: return attention_decode_direct_nq<D, KT, 5>(a);
    case 6: return attention_decode_direct_nq<D, KT, 6>(a);
    case 7: return attention_decode_direct_nq<D, KT, 7>(a);
    default: return attention_decode_direct_nq<D, KT, 8>(a);
  }
}

// The block's tokens one at a time (a one-token block, or exact_rows: each token exactly as it
// would be alone); attention_decode_direct_fits<D>(a).
template <class D>
void attention_decode_direct(const PagedAttentionArgs& a) {
  for (int j = 0; j < a.n_tokens; ++j) {
    PagedAttentionArgs b = a;
    b.n_tokens = 1;
    b.q_pos0 = a.q_pos0 + j;
    b.q = a.q + j * a.q_token_stride;
    b.out = a.out + j * a.out_token_stride;
    switch (a.kv_type) {
      case DType::F32: attention_decode_direct_kt<D, DType::F32>(b); break;
      case DType::F16: attention_decode_direct_kt<D, DType::F16>(b); break;
      default: attention_decode_direct_kt<D, DType::Q8_0>(b); break;
    }
  }
}

}  // namespace
}  // namespace edgellm::kernels

namespace edgellm::kernels {
namespace {

// The avx2 table's paged attention: one-token blocks (and exact_rows blocks, token by token) of
// shapes that fit take the direct path above, other blocks the tiled or row-wise path
// (attention_use_tiles).
inline void paged_attention_x86(const PagedAttentionArgs& a) {
  if (attention_decode_direct_fits<DirectVec8>(a) && (a.n_tokens == 1 || a.exact_rows)) attention_decode_direct<DirectVec8>(a);
  else if (attention_use_tiles(a)) paged_attention_tiled<AttnVec8>(a);
  else paged_attention_rowwise(a);
}

}  // namespace
}  // namespace edgellm::kernels
