// K-quant super-blocks of 256 elements (docs/formats.md §2.3): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K weights and the Q8_K
// activation format. Dequantization is llama.cpp's math exactly; the weight quantizers are our
// own least-squares scale search (see reference.h).
#include <cmath>
#include <cstring>

#include "common/fp16.h"
#include "quant/reference.h"
#include "quant/rounding.h"

namespace edgellm::quant {
namespace {

int clamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// ---------------------------------------------------------------------------------------------
// Sub-block fits. Both try a small grid of inverse scales around "range / levels", round, and
// keep the least-squares optimum for the rounded levels — enough to beat plain min/max scaling
// by a good margin without llama.cpp's importance weights.

constexpr int kSearchSteps = 10;  // candidates iscale·(1 + k/(10·levels)), k = −10..10
constexpr float kSearchDelta = 0.1f;

// x ≈ scale·q − min, q ∈ [0, nmax], scale ≥ 0, min ≥ 0 (K-quant mins are subtracted, so the
// representable offset is never positive).
struct ScaleMin {
  float scale, min;
};

ScaleMin fit_scale_min(const float* x, int n, int nmax) {
  float lo = 0.0f, hi = x[0];
  for (int i = 0; i < n; ++i) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
  }
  if (!(hi > lo)) return {0.0f, -lo};  // constant block (or NaN): represent it by the min alone
  double sum_x = 0, sum_xx = 0;
  for (int i = 0; i < n; ++i) {
    sum_x += x[i];
    sum_xx += double(x[i]) * x[i];
  }
  ScaleMin best{(hi - lo) / nmax, -lo};
  double best_err = INFINITY;
  for (int k = -kSearchSteps; k <= kSearchSteps; ++k) {
    const float iscale = (nmax + kSearchDelta * k) / (hi - lo);
    double sq = 0, sqq = 0, sqx = 0;
    for (int i = 0; i < n; ++i) {
      const int q = clamp(nearest_int((x[i] - lo) * iscale), 0, nmax);
      sq += q;
      sqq += double(q) * q;
      sqx += q * double(x[i]);
    }
    // Least squares for x ≈ a·q + b; b must stay ≤ 0.
    const double det = n * sqq - sq * sq;
    if (det <= 0) continue;
    double a = (n * sqx - sq * sum_x) / det;
    double b = (sqq * sum_x - sq * sqx) / det;
    if (b > 0) {
      b = 0;
      a = sqx / sqq;
    }
    if (!(a > 0)) continue;
    // Σ(a·q + b − x)² expanded, so no second pass over the elements.
    const double err = a * a * sqq + 2 * a * b * sq + n * b * b - 2 * a * sqx - 2 * b * sum_x + sum_xx;
    if (err < best_err) {
      best_err = err;
      best = {static_cast<float>(a), static_cast<float>(-b)};
    }
  }
  return best;
}

// x ≈ scale·q, q ∈ [−nneg, npos]; the scale is signed so the longer negative side of the range
// can take the largest-magnitude value whatever its sign.
float fit_scale_symmetric(const float* x, int n, int nneg, int npos) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  if (!(amax > 0)) return 0.0f;
  float best = 0.0f;
  double best_gain = 0;  // error = Σx² − (Σqx)²/Σq², so maximise (Σqx)²/Σq²
  for (int side = 0; side < 2; ++side) {
    const float levels = side == 0 ? -static_cast<float>(nneg) : static_cast<float>(npos);
    for (int k = -kSearchSteps; k <= kSearchSteps; ++k) {
      const float iscale = (levels + (side == 0 ? -1 : 1) * kSearchDelta * k) / max;
      double sqq = 0, sqx = 0;
      for (int i = 0; i < n; ++i) {
        const int q = clamp(nearest_int(x[i] * iscale), -nneg, npos);
        sqq += double(q) * q;
        sqx += q * double(x[i]);
      }
      if (sqq <= 0) continue;
      const double gain = sqx * sqx / sqq;
      if (gain > best_gain) {
        best_gain = gain;
        best = static_cast<float>(sqx / sqq);
      }
    }
  }
  return best;
}

// Quantize non-negative sub-block scales (or mins) to `bits` unsigned bits against one fp16
// super-scale; returns the stored super-scale as a float.
template <int kSub>
float quantize_unsigned_scales(const float* v, int bits, uint8_t* l, uint16_t* stored) {
  const int lmax = (1 << bits) - 1;
  float vmax = 0.0f;
  for (int j = 0; j < kSub; ++j) vmax = v[j] > vmax ? v[j] : vmax;
  const float inv = vmax > 0 ? lmax / vmax : 0.0f;
  for (int j = 0; j < kSub; ++j) l[j] = static_cast<uint8_t>(clamp(nearest_int(inv * v[j]), 0, lmax));
  *stored = fp32_to_fp16(vmax / lmax);
  return fp16_to_fp32(*stored);
}

// Signed sub-block scales to [−2^(bits−1), 2^(bits−1)−1]; the largest-magnitude scale goes to
// the negative end, which is one step longer.
template <int kSub>
float quantize_signed_scales(const float* v, int bits, int* l, uint16_t* stored) {
  const int half = 1 << (bits - 1);
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kSub; ++j)
    if (std::fabs(v[j]) > amax) {
      amax = std::fabs(v[j]);
      max = v[j];
    }
  if (!(amax > 0)) {
    for (int j = 0; j < kSub; ++j) l[j] = 0;
    *stored = 0;
    return 0.0f;
  }
  const float iscale = -half / max;
  for (int j = 0; j < kSub; ++j) l[j] = clamp(nearest_int(iscale * v[j]), -half, half - 1);
  *stored = fp32_to_fp16(1.0f / iscale);
  return fp16_to_fp32(*stored);
}

// Final levels of one sub-block for the stored (quantized) scale and min.
void requantize_affine(const float* x, int n, float scale, float min, int nmax, uint8_t* q) {
  const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
  for (int i = 0; i < n; ++i) q[i] = static_cast<uint8_t>(clamp(nearest_int((x[i] + min) * inv), 0, nmax));
}

void requantize_symmetric(const float* x, int n, float scale, int nneg, int npos, int8_t* q) {
  const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
  for (int i = 0; i < n; ++i) q[i] = static_cast<int8_t>(clamp(nearest_int(x[i] * inv), -nneg, npos));
}

// Q4_K / Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins; fills d, dmin, scales[12] and the
// unsigned levels q[256] (0..nmax).
void quantize_k4_like(const float* x, int nmax, uint16_t* d, uint16_t* dmin, uint8_t* scales, uint8_t* q) {
  float sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    const ScaleMin f = fit_scale_min(x + 32 * j, 32, nmax);
    sc[j] = f.scale;
    mn[j] = f.min;
  }
  uint8_t ls[8], lm[8];
  const float dd = quantize_unsigned_scales<8>(sc, 6, ls, d);
  const float dm = quantize_unsigned_scales<8>(mn, 6, lm, dmin);
  for (int j = 0; j < 4; ++j) {
    scales[j] = (ls[j] & 63) | ((ls[j + 4] >> 4) << 6);
    scales[j + 4] = (lm[j] & 63) | ((lm[j + 4] >> 4) << 6);
    scales[j + 8] = (ls[j + 4] & 0xF) | ((lm[j + 4] & 0xF) << 4);
  }
  for (int j = 0; j < 8; ++j) requantize_affine(x + 32 * j, 32, dd * ls[j], dm * lm[j], nmax, q + 32 * j);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Dequantization

void dequantize_row_q2_k(const block_q2_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d), dmin = fp16_to_fp32(x[b].dmin);
    int is = 0;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = x[b].qs + 32 * half;
      for (int j = 0; j < 4; ++j) {
        const int shift = 2 * j;
        for (int sub = 0; sub < 2; ++sub) {
          const uint8_t sc = x[b].scales[is++];
          const float dl = d * (sc & 0xF), ml = dmin * (sc >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * ((q[l + 16 * sub] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void dequantize_row_q3_k(const block_q3_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    int8_t scales[16];
    get_scales_q3_k(x[b].scales, scales);
    int is = 0;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = x[b].qs + 32 * half;
      for (int j = 0; j < 4; ++j) {
        const int shift = 2 * j;
        const uint8_t mask = static_cast<uint8_t>(1u << (4 * half + j));
        for (int sub = 0; sub < 2; ++sub) {
          const float dl = d * scales[is++];
          for (int l = 16 * sub; l < 16 * sub + 16; ++l)
            *y++ = dl * (((q[l] >> shift) & 3) - ((x[b].hmask[l] & mask) ? 0 : 4));
        }
      }
    }
  }
}

void dequantize_row_q4_k(const block_q4_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d), dmin = fp16_to_fp32(x[b].dmin);
    for (int c = 0; c < 4; ++c) {
      const uint8_t* q = x[b].qs + 32 * c;
      uint8_t sc, m;
      get_scale_min_k4(2 * c, x[b].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      get_scale_min_k4(2 * c + 1, x[b].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

void dequantize_row_q5_k(const block_q5_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d), dmin = fp16_to_fp32(x[b].dmin);
    for (int c = 0; c < 4; ++c) {
      const uint8_t* q = x[b].qs + 32 * c;
      const uint8_t* qh = x[b].qh;
      uint8_t sc, m;
      get_scale_min_k4(2 * c, x[b].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      get_scale_min_k4(2 * c + 1, x[b].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((q[l] & 0xF) + (((qh[l] >> (2 * c)) & 1) << 4)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((q[l] >> 4) + (((qh[l] >> (2 * c + 1)) & 1) << 4)) - m2;
    }
  }
}

void dequantize_row_q6_k(const block_q6_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = x[b].ql + 64 * half;
      const uint8_t* qh = x[b].qh + 32 * half;
      const int8_t* sc = x[b].scales + 8 * half;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
    }
  }
}

void dequantize_row_q8_k(const block_q8_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; ++b)
    for (int j = 0; j < QK_K; ++j) *y++ = x[b].d * x[b].qs[j];
}

// ---------------------------------------------------------------------------------------------
// Quantization

void quantize_row_q2_k(const float* x, block_q2_K* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
    float sc[16], mn[16];
    for (int j = 0; j < 16; ++j) {
      const ScaleMin f = fit_scale_min(x + 16 * j, 16, 3);
      sc[j] = f.scale;
      mn[j] = f.min;
    }
    uint8_t ls[16], lm[16];
    const float dd = quantize_unsigned_scales<16>(sc, 4, ls, &y[b].d);
    const float dm = quantize_unsigned_scales<16>(mn, 4, lm, &y[b].dmin);
    uint8_t q[QK_K];
    for (int j = 0; j < 16; ++j) {
      y[b].scales[j] = ls[j] | (lm[j] << 4);
      requantize_affine(x + 16 * j, 16, dd * ls[j], dm * lm[j], 3, q + 16 * j);
    }
    // Element 128·half + 32·j + m sits at bits 2j of qs[32·half + m].
    std::memset(y[b].qs, 0, sizeof y[b].qs);
    for (int half = 0; half < 2; ++half)
      for (int j = 0; j < 4; ++j)
        for (int m = 0; m < 32; ++m) y[b].qs[32 * half + m] |= q[128 * half + 32 * j + m] << (2 * j);
  }
}

void quantize_row_q3_k(const float* x, block_q3_K* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
    float sc[16];
    for (int j = 0; j < 16; ++j) sc[j] = fit_scale_symmetric(x + 16 * j, 16, 4, 3);
    int l[16];
    const float d = quantize_signed_scales<16>(sc, 6, l, &y[b].d);
    // Stored 6-bit value u = l + 32: low nibbles in bytes 0..7 (scales 8..15 in the high half),
    // the top two bits of scale i at bits 2·(i/4) of byte 8 + i%4.
    std::memset(y[b].scales, 0, sizeof y[b].scales);
    for (int i = 0; i < 16; ++i) {
      const int u = l[i] + 32;
      y[b].scales[i % 8] |= (u & 0xF) << (i < 8 ? 0 : 4);
      y[b].scales[8 + i % 4] |= ((u >> 4) & 3) << (2 * (i / 4));
    }
    int8_t q[QK_K];
    for (int j = 0; j < 16; ++j) requantize_symmetric(x + 16 * j, 16, d * l[j], 4, 3, q + 16 * j);
    // Level u = q + 4 ∈ 0..7: two low bits in qs (Q2_K traversal), bit 2 in hmask[m] bit 4·half+j.
    std::memset(y[b].qs, 0, sizeof y[b].qs);
    std::memset(y[b].hmask, 0, sizeof y[b].hmask);
    for (int half = 0; half < 2; ++half)
      for (int j = 0; j < 4; ++j)
        for (int m = 0; m < 32; ++m) {
          const int u = q[128 * half + 32 * j + m] + 4;
          y[b].qs[32 * half + m] |= (u & 3) << (2 * j);
          y[b].hmask[m] |= ((u >> 2) & 1) << (4 * half + j);
        }
  }
}

void quantize_row_q4_k(const float* x, block_q4_K* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
    uint8_t q[QK_K];
    quantize_k4_like(x, 15, &y[b].d, &y[b].dmin, y[b].scales, q);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) y[b].qs[32 * c + l] = q[64 * c + l] | (q[64 * c + 32 + l] << 4);
  }
}

void quantize_row_q5_k(const float* x, block_q5_K* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
    uint8_t q[QK_K];
    quantize_k4_like(x, 31, &y[b].d, &y[b].dmin, y[b].scales, q);
    std::memset(y[b].qh, 0, sizeof y[b].qh);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = q[64 * c + l], hi = q[64 * c + 32 + l];
        y[b].qs[32 * c + l] = (lo & 0xF) | ((hi & 0xF) << 4);
        y[b].qh[l] |= ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1));
      }
  }
}

void quantize_row_q6_k(const float* x, block_q6_K* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
    float sc[16];
    for (int j = 0; j < 16; ++j) sc[j] = fit_scale_symmetric(x + 16 * j, 16, 32, 31);
    int l[16];
    const float d = quantize_signed_scales<16>(sc, 8, l, &y[b].d);
    for (int j = 0; j < 16; ++j) y[b].scales[j] = static_cast<int8_t>(l[j]);
    int8_t q[QK_K];
    for (int j = 0; j < 16; ++j) requantize_symmetric(x + 16 * j, 16, d * l[j], 32, 31, q + 16 * j);
    for (int half = 0; half < 2; ++half) {
      uint8_t* ql = y[b].ql + 64 * half;
      uint8_t* qh = y[b].qh + 32 * half;
      const int8_t* qq = q + 128 * half;
      for (int m = 0; m < 32; ++m) {
        const int q1 = qq[m] + 32, q2 = qq[m + 32] + 32, q3 = qq[m + 64] + 32, q4 = qq[m + 96] + 32;
        ql[m] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
        ql[m + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
        qh[m] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
    }
  }
}

void quantize_row_q8_k(const float* x, block_q8_K* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK_K; ++j)
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    if (!(amax > 0)) {
      y[b].d = 0.0f;
      std::memset(y[b].qs, 0, sizeof y[b].qs);
      std::memset(y[b].bsums, 0, sizeof y[b].bsums);
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < QK_K; ++j) {
      const int v = nearest_int(iscale * x[j]);
      y[b].qs[j] = static_cast<int8_t>(v < 127 ? v : 127);
    }
    for (int k = 0; k < QK_K / 16; ++k) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += y[b].qs[16 * k + i];
      y[b].bsums[k] = static_cast<int16_t>(sum);
    }
    y[b].d = 1.0f / iscale;
  }
}

}  // namespace edgellm::quant
