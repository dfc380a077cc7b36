// f32 vector ops for the x86 tables: rmsnorm, softmax, dot, axpy, silu·up, gelu_tanh·up, add.
// Reductions that the reference does in double (rmsnorm's sum of squares, softmax's sum) are
// done in double lanes here too. exp is simd_x86.h's exp_ps; tanh-GELU is evaluated as x·sigmoid(2y), the
// same function as 0.5x(1 + tanh y) without its cancellation for negative x.
#pragma once
#include <cmath>

#include "kernels/kernels.h"
#include "kernels/x86/simd_x86.h"

namespace edgellm::kernels {
namespace {

// Runs f(v) → v over n floats in 8-lane steps; the tail goes through a zero-padded buffer so it
// sees exactly the same arithmetic as the body.
template <class F>
inline void map3(const float* a, const float* b, float* out, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, f(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  if (i < n) {
    float ta[8] = {}, tb[8] = {}, to[8];
    for (int64_t k = i; k < n; ++k) ta[k - i] = a[k], tb[k - i] = b[k];
    _mm256_storeu_ps(to, f(_mm256_loadu_ps(ta), _mm256_loadu_ps(tb)));
    for (int64_t k = i; k < n; ++k) out[k] = to[k - i];
  }
}

void silu_mul_x86(const float* gate, const float* up, float* out, int64_t n) {
  map3(gate, up, out, n, [](__m256 g, __m256 u) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
  });
}

void gelu_mul_x86(const float* gate, const float* up, float* out, int64_t n) {
  map3(gate, up, out, n, [](__m256 g, __m256 u) {
    const __m256 g2 = _mm256_mul_ps(g, g);
    const __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(g2, _mm256_set1_ps(0.044715f)), g, g);
    // −2y = −2·√(2/π)·(x + 0.044715x³)
    const __m256 e = exp_ps(_mm256_mul_ps(inner, _mm256_set1_ps(-2.0f * 0.79788456080286535588f)));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
  });
}

void add_f32_x86(const float* x, float* y, int64_t n) {
  map3(x, y, y, n, [](__m256 a, __m256 b) { return _mm256_add_ps(a, b); });
}

void axpy_f32_x86(float a, const float* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  map3(x, y, y, n, [av](__m256 xv, __m256 yv) { return _mm256_fmadd_ps(av, xv, yv); });
}

float dot_f32_x86(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float s = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Σ x² in double lanes (the reference accumulates in double).
inline double sum_squares_pd(const float* x, int64_t n) {
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    acc0 = _mm256_fmadd_pd(lo, lo, acc0);
    acc1 = _mm256_fmadd_pd(hi, hi, acc1);
  }
  double s = hsum_pd(_mm256_add_pd(acc0, acc1));
  for (; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

void rmsnorm_x86(const float* x, const float* w, float* y, int64_t n, float eps) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(sum_squares_pd(x, n) / n) + eps);
  const __m256 sv = _mm256_set1_ps(scale);
  int64_t i = 0;
  if (w) {
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), sv), _mm256_loadu_ps(w + i)));
    for (; i < n; ++i) y[i] = x[i] * scale * w[i];
  } else {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), sv));
    for (; i < n; ++i) y[i] = x[i] * scale;
  }
}

void softmax_x86(float* x, int64_t n) {
  if (n <= 0) return;
  __m256 mv = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  float mx = _mm_cvtss_f32(m4);
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;

  const __m256 mxv = _mm256_set1_ps(mx);
  __m256d sum = _mm256_setzero_pd();
  i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), mxv));
    _mm256_storeu_ps(x + i, e);
    sum = _mm256_add_pd(sum, _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(e)),
                                           _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1))));
  }
  double s = hsum_pd(sum);
  if (i < n) {
    float t[8];
    for (int k = 0; k < 8; ++k) t[k] = i + k < n ? x[i + k] : -INFINITY;
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(t), mxv));
    _mm256_storeu_ps(t, e);
    for (int64_t k = i; k < n; ++k) x[k] = t[k - i], s += t[k - i];
  }
  const __m256 inv = _mm256_set1_ps(static_cast<float>(1.0 / s));
  i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
  const float inv_s = static_cast<float>(1.0 / s);
  for (; i < n; ++i) x[i] *= inv_s;
}

void fill_float_ops_x86(KernelTable& t) {
  t.rmsnorm = rmsnorm_x86;
  t.softmax = softmax_x86;
  t.dot_f32 = dot_f32_x86;
  t.axpy_f32 = axpy_f32_x86;
  t.silu_mul = silu_mul_x86;
  t.gelu_mul = gelu_mul_x86;
  t.add_f32 = add_f32_x86;
}

}  // namespace
}  // namespace edgellm::kernels
