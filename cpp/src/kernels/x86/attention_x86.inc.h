// Paged attention for the x86 tables (contract in kernels/attention.h; scalar reference in
// generic/attention_ref.cpp).
//
// Keys are walked one page run at a time: the run's K and V rows are converted to f32 once into
// scratch (F16 via F16C, Q8_0 via sign-extended bytes × scale) and used by every query of the
// block (up to 16 tokens × the GQA group) that sees any of those positions while they are in L1.
// Two paths share that walk: blocks of more than a few queries (prefill, decode with a large GQA
// group) run the tiled path (scores and P·V as small register-blocked GEMMs with the queries on
// the vector lanes, see below); smaller ones the row-wise path (per query: 8-wide dots, the run's max, one
// rescale, vectorized exp, Σ w·v with the output slice in registers). The softmax is online
// across runs, exactly like the reference, so only the rounding differs; attention sinks enter
// each query's final scale (attention_output_scale), as in the reference.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kernels/x86/simd_x86.h"  // exp_ps

namespace edgellm::kernels {
namespace {

// Converts n_rows rows (row_bytes apart) of n elements into dense f32 rows n floats apart.
inline void attention_load_rows(DType t, const uint8_t* src, size_t row_bytes, int n_rows, int n, float* dst) {
  for (int r = 0; r < n_rows; ++r, src += row_bytes, dst += n) {
    switch (t) {
      case DType::F32: std::memcpy(dst, src, sizeof(float) * n); break;
      case DType::F16: {
        const uint16_t* h = reinterpret_cast<const uint16_t*>(src);
        int i = 0;
        for (; i + 8 <= n; i += 8)
          _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
        for (; i < n; ++i) dst[i] = half_to_float(h[i]);
        break;
      }
      default: {  // Q8_0: 34-byte blocks of an f16 scale and 32 int8 (n is a multiple of 32)
        const uint8_t* b = src;
        for (int i = 0; i < n; i += 32, b += 34) {
          uint16_t dh;
          std::memcpy(&dh, b, 2);
          const __m256 d = _mm256_set1_ps(half_to_float(dh));
          for (int k = 0; k < 4; ++k) {
            const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * k));
            _mm256_storeu_ps(dst + i + 8 * k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8))));
          }
        }
        break;
      }
    }
  }
}

inline float attention_dot(const float* a, const float* b, int n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float s = hsum(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline void attention_scale(float* o, float c, int n) {
  const __m256 cv = _mm256_set1_ps(c);
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_loadu_ps(o + i), cv));
  for (; i < n; ++i) o[i] *= c;
}

// o[0..n) += Σ_r w[r] · v[r][0..n), rows n floats apart; 32 output floats stay in registers.
inline void attention_accumulate(float* o, const float* w, const float* v, int n_rows, int n) {
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 a0 = _mm256_loadu_ps(o + i), a1 = _mm256_loadu_ps(o + i + 8);
    __m256 a2 = _mm256_loadu_ps(o + i + 16), a3 = _mm256_loadu_ps(o + i + 24);
    const float* vr = v + i;
    for (int r = 0; r < n_rows; ++r, vr += n) {
      const __m256 wr = _mm256_set1_ps(w[r]);
      a0 = _mm256_fmadd_ps(wr, _mm256_loadu_ps(vr), a0);
      a1 = _mm256_fmadd_ps(wr, _mm256_loadu_ps(vr + 8), a1);
      a2 = _mm256_fmadd_ps(wr, _mm256_loadu_ps(vr + 16), a2);
      a3 = _mm256_fmadd_ps(wr, _mm256_loadu_ps(vr + 24), a3);
    }
    _mm256_storeu_ps(o + i, a0);
    _mm256_storeu_ps(o + i + 8, a1);
    _mm256_storeu_ps(o + i + 16, a2);
    _mm256_storeu_ps(o + i + 24, a3);
  }
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_loadu_ps(o + i);
    for (int r = 0; r < n_rows; ++r) a = _mm256_fmadd_ps(_mm256_set1_ps(w[r]), _mm256_loadu_ps(v + r * n + i), a);
    _mm256_storeu_ps(o + i, a);
  }
  for (; i < n; ++i) {
    float a = o[i];
    for (int r = 0; r < n_rows; ++r) a += w[r] * v[r * n + i];
    o[i] = a;
  }
}

// The oldest key position any query of the block sees (its sliding window, or 0).
inline int32_t attention_first_key(const PagedAttentionArgs& a) { return ::edgellm::kernels::attention_first_key(a.window, a.q_pos0); }

// Keys are walked one run at a time: [p0, p1] with p1 the end of p0's page or `last`; k and v
// point at the run's first K and V rows (k_row_bytes / v_row_bytes apart).
struct AttentionRun {
  int32_t p1;
  const uint8_t* k;
  const uint8_t* v;
};
inline AttentionRun attention_run(const PagedAttentionArgs& a, int32_t p0, int32_t last) {
  const int P = a.page_size;
  const size_t page = static_cast<size_t>(a.pages[p0 / P]);
  const size_t slot = static_cast<size_t>(p0 % P);
  return {std::min<int32_t>(last, (p0 / P + 1) * P - 1), a.k_base + page * a.page_stride + slot * a.k_row_bytes,
          a.v_base + page * a.page_stride + slot * a.v_row_bytes};
}

// Converts the run at p0 (attention_run) into kbuf / vbuf and returns its p1.
inline int32_t attention_load_run(const PagedAttentionArgs& a, int32_t p0, int32_t last, float* kbuf, float* vbuf) {
  const AttentionRun run = attention_run(a, p0, last);
  const int rows = run.p1 - p0 + 1;
  attention_load_rows(a.kv_type, run.k, a.k_row_bytes, rows, a.head_dim_k, kbuf);
  attention_load_rows(a.kv_type, run.v, a.v_row_bytes, rows, a.head_dim_v, vbuf);
  return run.p1;
}

// Row-wise path: one query at a time, each score an 8-wide dot + horizontal sum. Kept for blocks
// of a few queries where the tiled path below would leave most lanes idle (attention_use_tiles)
// and the direct one-token path (attention_decode_x86.inc.h) does not fit: a group of more than 8
// heads, head dims not a multiple of 8, or a block of several tokens with few heads.
inline void paged_attention_rowwise(const PagedAttentionArgs& a) {
  const int hd_k = a.head_dim_k, hd_v = a.head_dim_v, P = a.page_size;
  const int nq = a.n_tokens * a.n_q;
  // Scratch: K run, V run, scores of one query against the run (rounded up to whole vectors),
  // running max and sum per query. Fits paged_attention_scratch_floats for any block ≤ 16 tokens.
  float* kbuf = a.scratch;
  float* vbuf = kbuf + static_cast<size_t>(P) * hd_k;
  float* s = vbuf + static_cast<size_t>(P) * hd_v;
  float* m = s + (P + 7) / 8 * 8;
  float* l = m + nq;
  auto out_row = [&](int j, int h) { return a.out + j * a.out_token_stride + h * a.out_head_stride; };
  for (int j = 0; j < a.n_tokens; ++j)
    for (int h = 0; h < a.n_q; ++h) {
      m[j * a.n_q + h] = -INFINITY;
      l[j * a.n_q + h] = 0.0f;
      std::memset(out_row(j, h), 0, sizeof(float) * hd_v);
    }
  const int32_t last = a.q_pos0 + a.n_tokens - 1;
  for (int32_t p0 = attention_first_key(a); p0 <= last;) {
    const int32_t p1 = attention_load_run(a, p0, last, kbuf, vbuf);
    for (int j = 0; j < a.n_tokens; ++j) {
      const int32_t pos = a.q_pos0 + j;
      const int32_t lo = std::max(p0, ::edgellm::kernels::attention_first_key(a.window, pos));
      const int32_t hi = std::min(p1, pos);
      if (lo > hi) continue;  // the whole run is in this token's future or outside its window
      const int r0 = lo - p0, n = hi - lo + 1;
      for (int h = 0; h < a.n_q; ++h) {
        const float* q = a.q + j * a.q_token_stride + h * a.q_head_stride;
        float mx = -INFINITY;
        for (int r = 0; r < n; ++r) {
          s[r] = attention_dot(q, kbuf + static_cast<size_t>(r0 + r) * hd_k, hd_k);
          if (a.softcap > 0.0f) s[r] = a.softcap * std::tanh(s[r] / a.softcap);
          mx = std::max(mx, s[r]);
        }
        float* o = out_row(j, h);
        float& mq = m[j * a.n_q + h];
        float& lq = l[j * a.n_q + h];
        if (mx > mq) {
          const float c = std::exp(mq - mx);  // 0 on the first run (m = -inf)
          if (lq > 0.0f) attention_scale(o, c, hd_v);
          lq *= c;
          mq = mx;
        }
        const __m256 mv = _mm256_set1_ps(mq);
        __m256 sum = _mm256_setzero_ps();
        int r = 0;
        for (; r + 8 <= n; r += 8) {
          const __m256 w = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(s + r), mv));
          _mm256_storeu_ps(s + r, w);
          sum = _mm256_add_ps(sum, w);
        }
        float tail = 0.0f;
        for (; r < n; ++r) tail += (s[r] = std::exp(s[r] - mq));
        lq += hsum(sum) + tail;
        attention_accumulate(o, s, vbuf + static_cast<size_t>(r0) * hd_v, n, hd_v);
      }
    }
    p0 = p1 + 1;
  }
  for (int j = 0; j < a.n_tokens; ++j)
    for (int h = 0; h < a.n_q; ++h)
      attention_scale(out_row(j, h), attention_output_scale(m[j * a.n_q + h], l[j * a.n_q + h], a.sinks, h), hd_v);
}

// ---- Tiled path (prefill blocks) -----------------------------------------------------------
//
// The block's queries (token j, head h → query index qi = j·n_q + h) are transposed once into
// qt[d][qi], so that scores become a small GEMM with the queries along the vector lanes:
// S[r][qi] = Σ_d K[r][d] · qt[d][qi], a tile of kKeyTile keys (broadcast scalars) × kQVecs query
// vectors held in registers. No horizontal sums, and nothing is transposed per page run (the
// alternative, K transposed to head_dim × run per run, costs ~3 shuffles per converted vector on
// one port, about as much as the decode-sized score work itself). With the queries on the lanes,
// the online softmax is vectorized across queries too: per lane a masked max over the run's keys,
// one rescale factor, exp of the weights, their sum. Then P·V is a second GEMM: a tile of
// kPvQueries queries × kPvVecs output vectors in registers, each V row load feeding all the
// tile's queries, and the running output's rescale folded into loading the accumulators.
// Queries are processed in groups of up to kQVecs vectors, so a group's scores stay in L1 between
// the three steps. The arithmetic is the reference's (online softmax across page runs, f32
// accumulation), only the summation order differs.

// 8-lane traits (both x86 units; the avx512 unit adds 16-lane ones, attention512_x86.inc.h).
struct AttnVec8 {
  using V = __m256;
  static constexpr int W = 8;
  static constexpr int kKeyTile = 6;    // scores: keys per tile (6 × 2 vectors = 12 accumulators)
  static constexpr int kQVecs = 2;      // scores: query vectors per tile = per group (1..3)
  static constexpr int kPvQueries = 4;  // P·V: queries per tile
  static constexpr int kPvVecs = 2;     // P·V: output vectors per tile (4 × 2 = 8 accumulators)
  static constexpr bool kOutlineScores = true;  // see attention_scores_tile_outlined
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static V zero() { return _mm256_setzero_ps(); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  // s where lo <= p <= hi (the key at position p is visible to the lane's query), else -inf.
  static V visible(V s, V p, V lo, V hi) {
    const V hidden = _mm256_or_ps(_mm256_cmp_ps(p, hi, _CMP_GT_OQ), _mm256_cmp_ps(lo, p, _CMP_GT_OQ));
    return _mm256_blendv_ps(s, _mm256_set1_ps(-INFINITY), hidden);
  }
  // exp(s - m), exactly 0 where s = -inf (a masked key; exp_ps alone would give a denormal, or
  // NaN when m is -inf too).
  static V weight(V s, V m) {
    const V masked = _mm256_cmp_ps(s, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ);
    return _mm256_andnot_ps(masked, exp_ps(_mm256_sub_ps(s, m)));
  }
  // The running output's factor when the max moves from m_old to m_new: exp(m_old - m_new) where
  // it grew, exactly 1 elsewhere (also where both are still -inf).
  static V rescale(V m_old, V m_new) {
    return _mm256_blendv_ps(_mm256_set1_ps(1.0f), exp_ps(_mm256_sub_ps(m_old, m_new)),
                            _mm256_cmp_ps(m_new, m_old, _CMP_GT_OQ));
  }
  // cap · tanh(s / cap), with tanh(x) = 1 - 2 / (exp(2x) + 1) (exact limits ±1: exp_ps saturates
  // to 0 and to inf); -inf (a masked key) stays -inf.
  static V softcap(V s, float cap) {
    const V e = exp_ps(_mm256_mul_ps(_mm256_set1_ps(2.0f), _mm256_div_ps(s, _mm256_set1_ps(cap))));
    const V t = _mm256_sub_ps(_mm256_set1_ps(1.0f),
                              _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
    const V masked = _mm256_cmp_ps(s, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ);
    return _mm256_blendv_ps(_mm256_mul_ps(_mm256_set1_ps(cap), t), s, masked);
  }
};

// s[r][·] = scores of keys r < MR (rows ldk apart) against NV query vectors of qt (rows ldq
// apart), masked to -inf where the key at position p + r is invisible to the lane's query.
template <class T, int MR, int NV>
inline void attention_scores_tile(const float* k, int ldk, int hd, const float* qt, int ldq, float* s, int ls,
                                  float p, const float* lo, const float* hi) {
  using V = typename T::V;
  V acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = T::zero();
  for (int d = 0; d < hd; ++d, qt += ldq) {
    V qv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) qv[v] = T::load(qt + v * T::W);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const V kr = T::bcast(k + r * ldk + d);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = T::fma(kr, qv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    const V lov = T::load(lo + v * T::W), hiv = T::load(hi + v * T::W);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) T::store(s + r * ls + v * T::W, T::visible(acc[r][v], T::set1(p + r), lov, hiv));
  }
}

// An out-of-line copy of the tile, for traits whose tile needs (nearly) all vector registers:
// inlined into paged_attention_tiled, GCC keeps the caller's vector constants live across the d
// loop and spills three of AttnVec8's twelve accumulators to the stack (the loop then runs at the
// store-forwarding latency: 1.25-1.4x slower prefill attention in the avx2 unit). With AVX-512's
// 32 registers there is no such pressure and the tiles stay inlined.
template <class T, int MR, int NV>
__attribute__((noinline)) void attention_scores_tile_outlined(const float* k, int ldk, int hd, const float* qt,
                                                              int ldq, float* s, int ls, float p, const float* lo,
                                                              const float* hi) {
  attention_scores_tile<T, MR, NV>(k, ldk, hd, qt, ldq, s, ls, p, lo, hi);
}

template <class T, int MR, int NV>
inline void attention_scores_mr(const float* k, int ldk, int hd, const float* qt, int ldq, float* s, int ls, float p,
                                const float* lo, const float* hi) {
  if constexpr (T::kOutlineScores) attention_scores_tile_outlined<T, MR, NV>(k, ldk, hd, qt, ldq, s, ls, p, lo, hi);
  else attention_scores_tile<T, MR, NV>(k, ldk, hd, qt, ldq, s, ls, p, lo, hi);
}

template <class T, int NV>
inline void attention_scores(int mr, const float* k, int ldk, int hd, const float* qt, int ldq, float* s, int ls,
                             float p, const float* lo, const float* hi) {
  static_assert(T::kKeyTile <= 8, "extend the switch");
  switch (mr) {
    case 1: attention_scores_mr<T, 1, NV>(k, ldk, hd, qt, ldq, s, ls, p, lo, hi); break;
    case 2: attention_scores_mr<T, 2, NV>(k, ldk, hd, qt, ldq, s, ls, p, lo, hi); break;
    case 3: attention_scores_mr<T, 3, NV>(k, ldk, hd, qt, ldq, s, ls, p, lo, hi); break;
    case 4: attention_scores_mr<T, 4, NV>(k, ldk, hd, qt, ldq, s, ls, p, lo, hi); break;
    case 5: attention_scores_mr<T, 5, NV>(k, ldk, hd, qt, ldq, s, ls, p, lo, hi); break;
    case 6: attention_scores_mr<T, 6, NV>(k, ldk, hd, qt, ldq, s, ls, p, lo, hi); break;
    case 7: attention_scores_mr<T, 7, NV>(k, ldk, hd, qt, ldq, s, ls, p, lo, hi); break;
    default: attention_scores_mr<T, 8, NV>(k, ldk, hd, qt, ldq, s, ls, p, lo, hi); break;
  }
}

// o[q][i .. i + NC·W) = c[q] · o[q][..] + Σ_r w[r][q] · v[r][..] for MQ queries; weights of row r
// at w + r·ls, V rows ld apart.
template <class T, int MQ, int NC>
inline void attention_pv_block(float* const* o, int i, const float* c, const float* w, int ls, const float* v, int ld,
                               int rows) {
  using V = typename T::V;
  V acc[MQ][NC];
#pragma GCC unroll 8
  for (int q = 0; q < MQ; ++q) {
    const V cq = T::bcast(c + q);
#pragma GCC unroll 4
    for (int n = 0; n < NC; ++n) acc[q][n] = T::mul(T::load(o[q] + i + n * T::W), cq);
  }
  const float* vr = v + i;
  for (int r = 0; r < rows; ++r, vr += ld, w += ls) {
    V vv[NC];
#pragma GCC unroll 4
    for (int n = 0; n < NC; ++n) vv[n] = T::load(vr + n * T::W);
#pragma GCC unroll 8
    for (int q = 0; q < MQ; ++q) {
      const V wq = T::bcast(w + q);
#pragma GCC unroll 4
      for (int n = 0; n < NC; ++n) acc[q][n] = T::fma(wq, vv[n], acc[q][n]);
    }
  }
#pragma GCC unroll 8
  for (int q = 0; q < MQ; ++q)
#pragma GCC unroll 4
    for (int n = 0; n < NC; ++n) T::store(o[q] + i + n * T::W, acc[q][n]);
}

template <class T, int MQ>
inline void attention_pv_tile(float* const* o, const float* c, const float* w, int ls, const float* v, int hd_v,
                              int rows) {
  constexpr int NC = T::kPvVecs, W = T::W;
  int i = 0;
  for (; i + NC * W <= hd_v; i += NC * W) attention_pv_block<T, MQ, NC>(o, i, c, w, ls, v, hd_v, rows);
  for (; i + W <= hd_v; i += W) attention_pv_block<T, MQ, 1>(o, i, c, w, ls, v, hd_v, rows);
  for (; i < hd_v; ++i)  // head dims that are not a multiple of the vector width
    for (int q = 0; q < MQ; ++q) {
      float acc = o[q][i] * c[q];
      for (int r = 0; r < rows; ++r) acc += w[r * ls + q] * v[static_cast<size_t>(r) * hd_v + i];
      o[q][i] = acc;
    }
}

template <class T>
inline void attention_pv(int mq, float* const* o, const float* c, const float* w, int ls, const float* v, int hd_v,
                         int rows) {
  static_assert(T::kPvQueries <= 6, "extend the switch");
  switch (mq) {
    case 1: attention_pv_tile<T, 1>(o, c, w, ls, v, hd_v, rows); break;
    case 2: attention_pv_tile<T, 2>(o, c, w, ls, v, hd_v, rows); break;
    case 3: attention_pv_tile<T, 3>(o, c, w, ls, v, hd_v, rows); break;
    case 4: attention_pv_tile<T, 4>(o, c, w, ls, v, hd_v, rows); break;
    case 5: attention_pv_tile<T, 5>(o, c, w, ls, v, hd_v, rows); break;
    default: attention_pv_tile<T, 6>(o, c, w, ls, v, hd_v, rows); break;
  }
}

template <class T>
void paged_attention_tiled(const PagedAttentionArgs& a) {
  using V = typename T::V;
  constexpr int W = T::W;
  const int hd_k = a.head_dim_k, hd_v = a.head_dim_v, P = a.page_size, n_q = a.n_q;
  const int nq = a.n_tokens * n_q;
  const int ldq = (nq + W - 1) / W * W;  // ≤ n_q · kAttentionMaxBlockTokens (a multiple of 16)
  // Scratch (paged_attention_scratch_floats): qt, the run's K and V rows, a group's scores, and
  // per query lane the running max m, sum l, last rescale factor c, and its visible key range.
  float* qt = a.scratch;
  float* kbuf = qt + static_cast<size_t>(hd_k) * ldq;
  float* vbuf = kbuf + static_cast<size_t>(P) * hd_k;
  float* sbuf = vbuf + static_cast<size_t>(P) * hd_v;
  float* m = sbuf + static_cast<size_t>(P) * ldq;
  float* l = m + ldq;
  float* c = l + ldq;
  float* lo = c + ldq;  // positions as floats: exact far beyond any context length
  float* hi = lo + ldq;
  auto out_row = [&](int qi) { return a.out + (qi / n_q) * a.out_token_stride + (qi % n_q) * a.out_head_stride; };
  // Padding lanes: zero queries that see no key. Zeroing all of qt in one go and then storing the
  // real queries costs a quarter of lane-by-lane zeroing when most lanes are padding (decode).
  if (ldq > nq) std::memset(qt, 0, sizeof(float) * hd_k * ldq);
  for (int qi = 0; qi < ldq; ++qi) {
    m[qi] = -INFINITY;
    l[qi] = 0.0f;
    if (qi < nq) {
      const int32_t pos = a.q_pos0 + qi / n_q;
      hi[qi] = static_cast<float>(pos);
      lo[qi] = a.window > 0 ? static_cast<float>(pos - a.window + 1) : -1.0f;
      const float* q = a.q + (qi / n_q) * a.q_token_stride + (qi % n_q) * a.q_head_stride;
      for (int d = 0; d < hd_k; ++d) qt[static_cast<size_t>(d) * ldq + qi] = q[d];
      std::memset(out_row(qi), 0, sizeof(float) * hd_v);
    } else {
      hi[qi] = -1.0f;
      lo[qi] = 1e30f;
    }
  }
  const int32_t last = a.q_pos0 + a.n_tokens - 1;
  for (int32_t p0 = attention_first_key(a); p0 <= last;) {
    const int32_t p1 = attention_load_run(a, p0, last, kbuf, vbuf);
    const int rows = p1 - p0 + 1;
    // Groups of at most kQVecs vectors, balanced (7 vectors → 3 + 2 + 2, not 3 + 3 + 1): a group of
    // one vector loads a key scalar per FMA, its score tile runs well below the FMA peak.
    const int nvec = ldq / W, n_groups = (nvec + T::kQVecs - 1) / T::kQVecs;
    for (int gi = 0, v0 = 0, nv = 0; gi < n_groups; ++gi, v0 += nv) {
      nv = (nvec - v0 + (n_groups - gi) - 1) / (n_groups - gi);
      const int g0 = v0 * W, ls = nv * W, g1 = std::min(nq, g0 + ls);
      // Skip the group when the run is outside every one of its queries' [lo, pos] (their union
      // is one interval: consecutive positions, window ≥ 1).
      const int32_t pos_first = a.q_pos0 + g0 / n_q, pos_last = a.q_pos0 + (g1 - 1) / n_q;
      if (pos_last < p0 || (a.window > 0 && pos_first - a.window + 1 > p1)) continue;
      for (int r0 = 0; r0 < rows; r0 += T::kKeyTile) {
        const int mr = std::min(T::kKeyTile, rows - r0);
        const float* k = kbuf + static_cast<size_t>(r0) * hd_k;
        float* s = sbuf + static_cast<size_t>(r0) * ls;
        const float p = static_cast<float>(p0 + r0);
        if constexpr (T::kQVecs >= 3) {
          if (nv == 3) {
            attention_scores<T, 3>(mr, k, hd_k, hd_k, qt + g0, ldq, s, ls, p, lo + g0, hi + g0);
            continue;
          }
        }
        if (nv == 2) attention_scores<T, 2>(mr, k, hd_k, hd_k, qt + g0, ldq, s, ls, p, lo + g0, hi + g0);
        else attention_scores<T, 1>(mr, k, hd_k, hd_k, qt + g0, ldq, s, ls, p, lo + g0, hi + g0);
      }
      if (a.softcap > 0.0f)  // Gemma 2: cap the scores before the softmax sees them
        for (int r = 0; r < rows; ++r)
          for (int v = 0; v < nv; ++v) {
            float* sv = sbuf + r * ls + v * W;
            T::store(sv, T::softcap(T::load(sv), a.softcap));
          }
      for (int v = 0; v < nv; ++v) {  // online softmax, one lane per query
        const int lane = g0 + v * W;
        V mx = T::set1(-INFINITY);
        for (int r = 0; r < rows; ++r) mx = T::max(mx, T::load(sbuf + r * ls + v * W));
        const V mo = T::load(m + lane), mn = T::max(mo, mx), cv = T::rescale(mo, mn);
        V sum = T::zero();
        for (int r = 0; r < rows; ++r) {
          const V w = T::weight(T::load(sbuf + r * ls + v * W), mn);
          T::store(sbuf + r * ls + v * W, w);
          sum = T::add(sum, w);
        }
        T::store(l + lane, T::fma(T::load(l + lane), cv, sum));
        T::store(m + lane, mn);
        T::store(c + lane, cv);
      }
      for (int q0 = g0; q0 < g1; q0 += T::kPvQueries) {
        const int mq = std::min(T::kPvQueries, g1 - q0);
        float* o[T::kPvQueries];
        for (int q = 0; q < mq; ++q) o[q] = out_row(q0 + q);
        attention_pv<T>(mq, o, c + q0, sbuf + (q0 - g0), ls, vbuf, hd_v, rows);
      }
    }
    p0 = p1 + 1;
  }
  for (int qi = 0; qi < nq; ++qi)  // 1 / l, or with attention sinks the sink's share of the denominator
    attention_scale(out_row(qi), attention_output_scale(m[qi], l[qi], a.sinks, qi % n_q), hd_v);
}

// Which path a block takes, among these two (one-token blocks of shapes the direct path fits
// take that one first, attention_decode_x86.inc.h). The row-wise path's work grows with the query count, the tiled one's
// with the vector width (padding lanes cost as much as queries), so tiles win from a few queries
// up: measured on Zen 5 (F16 KV, decode at 512-1024 keys), 8-lane tiles beat row-wise from 5
// queries at head dims 64-128 (7 queries, Qwen2.5 decode: -25%) and from 4 at head dim 256 (Gemma 3
// decode: -13%), and lose below (3 queries at 64: +20%). Prefill blocks always take tiles.
//
// Under exact_rows the block takes the path a one-token block would: both paths compute each
// query's result independently of the block's other queries (the row-wise one per query, the
// tiled one per lane; keys outside a query's range are skipped or weigh exactly 0, a run the
// query does not see leaves its state exactly unchanged), so the block reproduces its tokens'
// one-token results bit for bit while converting each key row once instead of once per token.
inline bool attention_use_tiles(const PagedAttentionArgs& a) {
  const int nq = (a.exact_rows ? 1 : a.n_tokens) * a.n_q;
  return nq >= 5 || (nq == 4 && a.head_dim_k >= 256);
}

}  // namespace
}  // namespace edgellm::kernels
