// f32 vector ops for the NEON tables: rmsnorm, softmax, dot, axpy, silu·up, gelu_tanh·up, add.
// Reductions that the reference does in double (rmsnorm's sum of squares, softmax's sum) are
// done in float64x2 lanes here too. exp is a Cody–Waite range reduction + degree-7 polynomial
// (max rel. error ≈ 2 ulp on the normal range) with a two-step 2^n scaling so that overflow to
// inf and underflow through the subnormals come out right; tanh-GELU is evaluated as
// x·sigmoid(2y), the same function as 0.5x(1 + tanh y) without its cancellation for negative x.
#pragma once
#include <cmath>

#include "kernels/arm/simd_neon.h"
#include "kernels/kernels.h"

namespace edgellm::kernels {
namespace {

inline float32x4_t neon_exp(float32x4_t x) {
  const uint32x4_t is_num = vceqq_f32(x, x);
  const float32x4_t xc = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-104.0f)), vdupq_n_f32(89.0f));
  const float32x4_t fn = vrndnq_f32(vmulq_f32(xc, vdupq_n_f32(1.44269504088896341f)));
  float32x4_t r = vfmsq_f32(xc, fn, vdupq_n_f32(0.693145751953125f));
  r = vfmsq_f32(r, fn, vdupq_n_f32(1.428606765330187045e-06f));
  float32x4_t p = vdupq_n_f32(1.0f / 5040.0f);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 720.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 120.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 24.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 6.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  const int32x4_t n = vcvtq_s32_f32(fn);  // fn is integral already
  const int32x4_t n1 = vshrq_n_s32(n, 1);
  const int32x4_t n2 = vsubq_s32(n, n1);
  const int32x4_t bias = vdupq_n_s32(127);
  const float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, bias), 23));
  const float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, bias), 23));
  const float32x4_t res = vmulq_f32(vmulq_f32(p, s1), s2);
  return vbslq_f32(is_num, res, x);  // NaN in, NaN out
}

// Runs f over n floats in 4-lane steps; the tail goes through a zero-padded buffer so it sees
// exactly the same arithmetic as the body.
template <class F>
inline void neon_map2(const float* a, const float* b, float* out, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(out + i, f(vld1q_f32(a + i), vld1q_f32(b + i)));
  if (i < n) {
    float ta[4] = {}, tb[4] = {}, to[4];
    for (int64_t k = i; k < n; ++k) ta[k - i] = a[k], tb[k - i] = b[k];
    vst1q_f32(to, f(vld1q_f32(ta), vld1q_f32(tb)));
    for (int64_t k = i; k < n; ++k) out[k] = to[k - i];
  }
}

void neon_silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  neon_map2(gate, up, out, n, [](float32x4_t g, float32x4_t u) {
    const float32x4_t e = neon_exp(vnegq_f32(g));
    return vmulq_f32(vdivq_f32(g, vaddq_f32(vdupq_n_f32(1.0f), e)), u);
  });
}

void neon_gelu_mul(const float* gate, const float* up, float* out, int64_t n) {
  neon_map2(gate, up, out, n, [](float32x4_t g, float32x4_t u) {
    const float32x4_t g2 = vmulq_f32(g, g);
    const float32x4_t inner = vfmaq_f32(g, vmulq_f32(g2, vdupq_n_f32(0.044715f)), g);
    // −2y = −2·√(2/π)·(x + 0.044715x³)
    const float32x4_t e = neon_exp(vmulq_f32(inner, vdupq_n_f32(-2.0f * 0.79788456080286535588f)));
    return vmulq_f32(vdivq_f32(g, vaddq_f32(vdupq_n_f32(1.0f), e)), u);
  });
}

void neon_add_f32(const float* x, float* y, int64_t n) {
  neon_map2(x, y, y, n, [](float32x4_t a, float32x4_t b) { return vaddq_f32(a, b); });
}

void neon_axpy_f32(float a, const float* x, float* y, int64_t n) {
  const float32x4_t av = vdupq_n_f32(a);
  neon_map2(x, y, y, n, [av](float32x4_t xv, float32x4_t yv) { return vfmaq_f32(yv, av, xv); });
}

float neon_dot_f32(const float* a, const float* b, int64_t n) {
  float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    acc0 = vfmaq_f32(acc0, vld1q_f32(a + i), vld1q_f32(b + i));
    acc1 = vfmaq_f32(acc1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
  }
  for (; i + 4 <= n; i += 4) acc0 = vfmaq_f32(acc0, vld1q_f32(a + i), vld1q_f32(b + i));
  float s = vaddvq_f32(vaddq_f32(acc0, acc1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Σ x² in double lanes (the reference accumulates in double; each square is exact there).
inline double neon_sum_squares(const float* x, int64_t n) {
  float64x2_t acc0 = vdupq_n_f64(0.0), acc1 = vdupq_n_f64(0.0);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t v = vld1q_f32(x + i);
    const float64x2_t lo = vcvt_f64_f32(vget_low_f32(v));
    const float64x2_t hi = vcvt_high_f64_f32(v);
    acc0 = vfmaq_f64(acc0, lo, lo);
    acc1 = vfmaq_f64(acc1, hi, hi);
  }
  double s = vaddvq_f64(vaddq_f64(acc0, acc1));
  for (; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

void neon_rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(neon_sum_squares(x, n) / n) + eps);
  const float32x4_t sv = vdupq_n_f32(scale);
  int64_t i = 0;
  if (w) {
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_f32(vmulq_f32(vld1q_f32(x + i), sv), vld1q_f32(w + i)));
    for (; i < n; ++i) y[i] = x[i] * scale * w[i];
  } else {
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_f32(vld1q_f32(x + i), sv));
    for (; i < n; ++i) y[i] = x[i] * scale;
  }
}

void neon_softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float32x4_t mv = vdupq_n_f32(-INFINITY);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) mv = vmaxnmq_f32(mv, vld1q_f32(x + i));  // a NaN is skipped, as in the reference
  float mx = vmaxnmvq_f32(mv);
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;

  const float32x4_t mxv = vdupq_n_f32(mx);
  float64x2_t sum = vdupq_n_f64(0.0);
  i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t e = neon_exp(vsubq_f32(vld1q_f32(x + i), mxv));
    vst1q_f32(x + i, e);
    sum = vaddq_f64(sum, vaddq_f64(vcvt_f64_f32(vget_low_f32(e)), vcvt_high_f64_f32(e)));
  }
  double s = vaddvq_f64(sum);
  if (i < n) {
    float t[4];
    for (int k = 0; k < 4; ++k) t[k] = i + k < n ? x[i + k] : -INFINITY;
    vst1q_f32(t, neon_exp(vsubq_f32(vld1q_f32(t), mxv)));
    for (int64_t k = i; k < n; ++k) x[k] = t[k - i], s += t[k - i];
  }
  const float inv_s = static_cast<float>(1.0 / s);
  const float32x4_t inv = vdupq_n_f32(inv_s);
  i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(x + i, vmulq_f32(vld1q_f32(x + i), inv));
  for (; i < n; ++i) x[i] *= inv_s;
}

void fill_float_ops_neon(KernelTable& t) {
  t.rmsnorm = neon_rmsnorm;
  t.softmax = neon_softmax;
  t.dot_f32 = neon_dot_f32;
  t.axpy_f32 = neon_axpy_f32;
  t.silu_mul = neon_silu_mul;
  t.gelu_mul = neon_gelu_mul;
  t.add_f32 = neon_add_f32;
}

}  // namespace
}  // namespace edgellm::kernels
