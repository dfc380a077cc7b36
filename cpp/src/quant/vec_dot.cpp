// Scalar dot products of a weight row with an activation row in vec_dot_type(weight) (docs/formats.md §2.4).
// Products of integer levels are summed per block in int32 and scaled per block in f32, the
// shape every SIMD kernel follows, so their results agree to float rounding.
#include "common/fp16.h"
#include "quant/reference.h"

namespace edgellm::quant {
namespace {

uint32_t load_qh(const uint8_t* qh) {
  return uint32_t(qh[0]) | uint32_t(qh[1]) << 8 | uint32_t(qh[2]) << 16 | uint32_t(qh[3]) << 24;
}

// Σ level_j · q8_j over one 32-element legacy block, levels unpacked by `level(j)`.
template <typename Level>
int32_t block_sum(const int8_t* q8, Level level) {
  int32_t sum = 0;
  for (int j = 0; j < 32; ++j) sum += level(j) * q8[j];
  return sum;
}

// Σ table[nibble]·q8 over one 32-element block.
int32_t dot_nibbles(const uint8_t* qs, const int8_t* table, const int8_t* q8) {
  int32_t s = 0;
  for (int j = 0; j < 16; ++j) s += table[qs[j] & 0xF] * q8[j] + table[qs[j] >> 4] * q8[j + 16];
  return s;
}

}  // namespace

float vec_dot_q4_0_q8_0(int64_t n, const block_q4_0* x, const block_q8_0* y) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / QK4_0; ++b) {
    const uint8_t* qs = x[b].qs;
    const int32_t s = block_sum(y[b].qs, [&](int j) { return (j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4) - 8; });
    sum += s * fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d);
  }
  return sum;
}

float vec_dot_q4_1_q8_1(int64_t n, const block_q4_1* x, const block_q8_1* y) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / QK4_1; ++b) {
    const uint8_t* qs = x[b].qs;
    const int32_t s = block_sum(y[b].qs, [&](int j) { return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4; });
    // Σ(nib·d + m)·q8·dy = d·dy·Σ nib·q8 + m·(dy·Σq8), and dy·Σq8 is the stored s.
    sum += fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d) * s + fp16_to_fp32(x[b].m) * fp16_to_fp32(y[b].s);
  }
  return sum;
}

float vec_dot_q5_0_q8_0(int64_t n, const block_q5_0* x, const block_q8_0* y) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / QK5_0; ++b) {
    const uint8_t* qs = x[b].qs;
    const uint32_t qh = load_qh(x[b].qh);
    const int32_t s = block_sum(y[b].qs, [&](int j) {
      const int nib = j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4;
      return (nib | int((qh >> j) & 1) << 4) - 16;
    });
    sum += s * fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d);
  }
  return sum;
}

float vec_dot_q5_1_q8_1(int64_t n, const block_q5_1* x, const block_q8_1* y) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / QK5_1; ++b) {
    const uint8_t* qs = x[b].qs;
    const uint32_t qh = load_qh(x[b].qh);
    const int32_t s = block_sum(y[b].qs, [&](int j) {
      const int nib = j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4;
      return nib | int((qh >> j) & 1) << 4;
    });
    sum += fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d) * s + fp16_to_fp32(x[b].m) * fp16_to_fp32(y[b].s);
  }
  return sum;
}

float vec_dot_q8_0_q8_0(int64_t n, const block_q8_0* x, const block_q8_0* y) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / QK8_0; ++b) {
    const int8_t* qs = x[b].qs;
    const int32_t s = block_sum(y[b].qs, [&](int j) { return int(qs[j]); });
    sum += s * fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d);
  }
  return sum;
}

// ---- K-quants: sum_q = Σ_sub scale·Σ(q·q8) and sum_m = Σ_sub min·bsum in int32; per super-block
// result = d·dy·sum_q − dmin·dy·sum_m. A 32-element sub-block's min pairs with two 16-bsums.

float vec_dot_q2_K_q8_K(int64_t n, const block_q2_K* x, const block_q8_K* y) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const int8_t* q8 = y[b].qs;
    int32_t sum_q = 0, sum_m = 0;
    for (int i = 0; i < 16; ++i) sum_m += (x[b].scales[i] >> 4) * y[b].bsums[i];
    int is = 0;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = x[b].qs + 32 * half;
      for (int j = 0; j < 4; ++j)
        for (int sub = 0; sub < 2; ++sub) {
          int32_t s = 0;
          for (int l = 16 * sub; l < 16 * sub + 16; ++l) s += ((q[l] >> (2 * j)) & 3) * *q8++;
          sum_q += (x[b].scales[is++] & 0xF) * s;
        }
    }
    const float dall = y[b].d * fp16_to_fp32(x[b].d), dmin = y[b].d * fp16_to_fp32(x[b].dmin);
    sum += dall * sum_q - dmin * sum_m;
  }
  return sum;
}

float vec_dot_q3_K_q8_K(int64_t n, const block_q3_K* x, const block_q8_K* y) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    int8_t scales[16];
    get_scales_q3_k(x[b].scales, scales);
    const int8_t* q8 = y[b].qs;
    int32_t sum_q = 0;
    int is = 0;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = x[b].qs + 32 * half;
      for (int j = 0; j < 4; ++j) {
        const uint8_t mask = static_cast<uint8_t>(1u << (4 * half + j));
        for (int sub = 0; sub < 2; ++sub) {
          int32_t s = 0;
          for (int l = 16 * sub; l < 16 * sub + 16; ++l)
            s += (((q[l] >> (2 * j)) & 3) - ((x[b].hmask[l] & mask) ? 0 : 4)) * *q8++;
          sum_q += scales[is++] * s;
        }
      }
    }
    sum += fp16_to_fp32(x[b].d) * y[b].d * sum_q;
  }
  return sum;
}

namespace {
// Shared body of Q4_K and Q5_K: `level(c, l, hi)` gives the unsigned level of element
// 64c + 32·hi + l.
template <typename Block, typename Level>
float dot_k4_like(const Block& x, const block_q8_K& y, Level level) {
  int32_t sum_q = 0, sum_m = 0;
  for (int c = 0; c < 4; ++c)
    for (int hi = 0; hi < 2; ++hi) {
      const int sub = 2 * c + hi;
      uint8_t sc, m;
      get_scale_min_k4(sub, x.scales, &sc, &m);
      const int8_t* q8 = y.qs + 32 * sub;
      int32_t s = 0;
      for (int l = 0; l < 32; ++l) s += level(c, l, hi) * q8[l];
      sum_q += sc * s;
      sum_m += m * (y.bsums[2 * sub] + y.bsums[2 * sub + 1]);
    }
  return fp16_to_fp32(x.d) * y.d * sum_q - fp16_to_fp32(x.dmin) * y.d * sum_m;
}
}  // namespace

float vec_dot_q4_K_q8_K(int64_t n, const block_q4_K* x, const block_q8_K* y) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const uint8_t* qs = x[b].qs;
    sum += dot_k4_like(x[b], y[b], [&](int c, int l, int hi) { return (qs[32 * c + l] >> (4 * hi)) & 0xF; });
  }
  return sum;
}

float vec_dot_q5_K_q8_K(int64_t n, const block_q5_K* x, const block_q8_K* y) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const uint8_t* qs = x[b].qs;
    const uint8_t* qh = x[b].qh;
    sum += dot_k4_like(x[b], y[b], [&](int c, int l, int hi) {
      return ((qs[32 * c + l] >> (4 * hi)) & 0xF) | (((qh[l] >> (2 * c + hi)) & 1) << 4);
    });
  }
  return sum;
}

float vec_dot_q6_K_q8_K(int64_t n, const block_q6_K* x, const block_q8_K* y) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    int32_t sum_q = 0;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = x[b].ql + 64 * half;
      const uint8_t* qh = x[b].qh + 32 * half;
      const int8_t* sc = x[b].scales + 8 * half;
      const int8_t* q8 = y[b].qs + 128 * half;
      // Four 32-element quarters; quarter r's level of element l comes from ql[l + 32·(r&1)]
      // nibble r/2 and qh[l] bits 2r..2r+1. Scales: one per 16 elements.
      for (int r = 0; r < 4; ++r)
        for (int g = 0; g < 2; ++g) {
          int32_t s = 0;
          for (int l = 16 * g; l < 16 * g + 16; ++l) {
            const int lo = (ql[l + 32 * (r & 1)] >> (4 * (r >> 1))) & 0xF;
            const int q = (lo | (((qh[l] >> (2 * r)) & 3) << 4)) - 32;
            s += q * q8[32 * r + l];
          }
          sum_q += sc[2 * r + g] * s;
        }
    }
    sum += fp16_to_fp32(x[b].d) * y[b].d * sum_q;
  }
  return sum;
}

// ---- non-linear 4-bit formats: the table levels are the integers dotted ----

float vec_dot_iq4_nl_q8_0(int64_t n, const block_iq4_nl* x, const block_q8_0* y) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / QK4_NL; ++b)
    sum += static_cast<float>(dot_nibbles(x[b].qs, kIq4nlValues, y[b].qs)) * (fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d));
  return sum;
}

float vec_dot_iq4_xs_q8_K(int64_t n, const block_iq4_xs* x, const block_q8_K* y) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    int32_t s = 0;
    for (int ib = 0; ib < 8; ++ib)
      s += (iq4_xs_scale(x[b], ib) - 32) * dot_nibbles(x[b].qs + 16 * ib, kIq4nlValues, y[b].qs + 32 * ib);
    sum += fp16_to_fp32(x[b].d) * y[b].d * static_cast<float>(s);
  }
  return sum;
}

float vec_dot_mxfp4_q8_0(int64_t n, const block_mxfp4* x, const block_q8_0* y) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / QK_MXFP4; ++b)
    sum += static_cast<float>(dot_nibbles(x[b].qs, kMxfp4Values, y[b].qs)) *
           (e8m0_to_fp32_half(x[b].e) * fp16_to_fp32(y[b].d));
  return sum;
}

}  // namespace edgellm::quant
