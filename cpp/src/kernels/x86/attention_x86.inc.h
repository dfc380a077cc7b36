// Paged attention for the x86 tables (contract in kernels/attention.h; scalar reference in
// generic/attention_ref.cpp).
//
// Keys are walked one page run at a time: the run's K and V rows are converted to f32 once into
// scratch (F16 via F16C, Q8_0 via sign-extended bytes × scale), then every query of the block
// (up to 16 tokens × the GQA group) that sees any of those positions uses them while they are in
// L1. Per query and run: the scores (8-wide dots), the run's maximum, one rescale of the running
// output if the maximum grew, vectorized exp of the weights, and Σ w·v with the output slice held
// in registers. The softmax is online across runs, exactly like the reference, so only the
// rounding differs.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kernels/x86/simd_x86.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "kernels/x86/float_ops_x86.inc.h"  // exp_ps
#pragma GCC diagnostic pop

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

void paged_attention_x86(const PagedAttentionArgs& a) {
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
  const int32_t first = a.window > 0 && a.q_pos0 - a.window + 1 > 0 ? a.q_pos0 - a.window + 1 : 0;
  for (int32_t p0 = first; p0 <= last;) {
    const int32_t p1 = std::min<int32_t>(last, (p0 / P + 1) * P - 1);  // run ends with its page
    const size_t page = static_cast<size_t>(a.pages[p0 / P]);
    const size_t slot = static_cast<size_t>(p0 % P);
    const int rows = p1 - p0 + 1;
    attention_load_rows(a.kv_type, a.k_base + page * a.page_stride + slot * a.k_row_bytes, a.k_row_bytes, rows, hd_k,
                        kbuf);
    attention_load_rows(a.kv_type, a.v_base + page * a.page_stride + slot * a.v_row_bytes, a.v_row_bytes, rows, hd_v,
                        vbuf);
    for (int j = 0; j < a.n_tokens; ++j) {
      const int32_t pos = a.q_pos0 + j;
      const int32_t lo = std::max(p0, a.window > 0 ? pos - a.window + 1 : 0);
      const int32_t hi = std::min(p1, pos);
      if (lo > hi) continue;  // the whole run is in this token's future or outside its window
      const int r0 = lo - p0, n = hi - lo + 1;
      for (int h = 0; h < a.n_q; ++h) {
        const float* q = a.q + j * a.q_token_stride + h * a.q_head_stride;
        float mx = -INFINITY;
        for (int r = 0; r < n; ++r) {
          s[r] = attention_dot(q, kbuf + static_cast<size_t>(r0 + r) * hd_k, hd_k);
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
    for (int h = 0; h < a.n_q; ++h) {
      const float lq = l[j * a.n_q + h];
      attention_scale(out_row(j, h), lq > 0.0f ? 1.0f / lq : 0.0f, hd_v);
    }
}

}  // namespace
}  // namespace edgellm::kernels
