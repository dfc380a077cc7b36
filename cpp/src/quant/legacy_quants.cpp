// The 32-element "legacy" blocks Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the Q8_1 activation format
// (docs/formats.md §2.2): element j of a block is the low nibble of qs[j], element j+16 the high nibble; the Q5
// fifth bit of element j is bit j of the little-endian u32 qh.
#include <cmath>
#include <cstring>

#include "common/fp16.h"
#include "quant/reference.h"
#include "quant/rounding.h"

namespace edgellm::quant {
namespace {

uint32_t load_qh(const uint8_t* qh) {
  return uint32_t(qh[0]) | uint32_t(qh[1]) << 8 | uint32_t(qh[2]) << 16 | uint32_t(qh[3]) << 24;
}

void store_qh(uint32_t v, uint8_t* qh) {
  for (int i = 0; i < 4; ++i) qh[i] = static_cast<uint8_t>(v >> (8 * i));
}

// The signed value of largest magnitude (the first one on ties), as the *_ref quantizers pick it.
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  return max;
}

// Symmetric 4/5-bit: d = max / −half so the largest-magnitude value lands on level 0;
// q = min(levels−1, trunc(x/d + half + 0.5)).
template <int kHalf>
void quantize_symmetric_block(const float* x, float* d_out, uint8_t* q) {
  const float max = signed_absmax(x, 32);
  const float d = max / -kHalf;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < 32; ++j) {
    const int v = static_cast<int8_t>(x[j] * id + (kHalf + 0.5f));
    q[j] = static_cast<uint8_t>(v < 2 * kHalf - 1 ? v : 2 * kHalf - 1);
  }
  *d_out = d;
}

// Asymmetric 4/5-bit: d = (max − min)/(levels−1), m = min, q = min(levels−1, trunc((x−min)/d + 0.5)).
template <int kLevels>
void quantize_affine_block(const float* x, float* d_out, float* m_out, uint8_t* q) {
  float min = x[0], max = x[0];
  for (int j = 1; j < 32; ++j) {
    min = x[j] < min ? x[j] : min;
    max = x[j] > max ? x[j] : max;
  }
  const float d = (max - min) / (kLevels - 1);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < 32; ++j) {
    const int v = static_cast<int8_t>((x[j] - min) * id + 0.5f);
    q[j] = static_cast<uint8_t>(v < kLevels - 1 ? v : kLevels - 1);
  }
  *d_out = d;
  *m_out = min;
}

void pack_nibbles(const uint8_t* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = (q[j] & 0xF) | ((q[j + 16] & 0xF) << 4);
}

uint32_t fifth_bits(const uint8_t* q) {
  uint32_t qh = 0;
  for (int j = 0; j < 32; ++j) qh |= uint32_t((q[j] >> 4) & 1) << j;
  return qh;
}

// Activation rule shared by Q8_0 and Q8_1 (see reference.h): returns d in f32 and Σq.
float quantize_q8_block(const float* x, int8_t* qs, int* sum) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float a = std::fabs(x[j]);
    amax = a > amax ? a : amax;
  }
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  int s = 0;
  for (int j = 0; j < 32; ++j) {
    qs[j] = static_cast<int8_t>(nearest_int(x[j] * id));  // ties to even
    s += qs[j];
  }
  *sum = s;
  return d;
}

}  // namespace

void dequantize_row_q4_0(const block_q4_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK4_0; ++b, y += QK4_0) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = ((x[b].qs[j] & 0xF) - 8) * d;
      y[j + 16] = ((x[b].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_row_q4_1(const block_q4_1* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK4_1; ++b, y += QK4_1) {
    const float d = fp16_to_fp32(x[b].d), m = fp16_to_fp32(x[b].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = (x[b].qs[j] & 0xF) * d + m;
      y[j + 16] = (x[b].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_row_q5_0(const block_q5_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK5_0; ++b, y += QK5_0) {
    const float d = fp16_to_fp32(x[b].d);
    const uint32_t qh = load_qh(x[b].qh);
    for (int j = 0; j < 16; ++j) {
      const int lo = (x[b].qs[j] & 0xF) | ((qh >> j) & 1) << 4;
      const int hi = (x[b].qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
      y[j] = (lo - 16) * d;
      y[j + 16] = (hi - 16) * d;
    }
  }
}

void dequantize_row_q5_1(const block_q5_1* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK5_1; ++b, y += QK5_1) {
    const float d = fp16_to_fp32(x[b].d), m = fp16_to_fp32(x[b].m);
    const uint32_t qh = load_qh(x[b].qh);
    for (int j = 0; j < 16; ++j) {
      const int lo = (x[b].qs[j] & 0xF) | ((qh >> j) & 1) << 4;
      const int hi = (x[b].qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
      y[j] = lo * d + m;
      y[j + 16] = hi * d + m;
    }
  }
}

void dequantize_row_q8_0(const block_q8_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK8_0; ++b, y += QK8_0) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < 32; ++j) y[j] = x[b].qs[j] * d;
  }
}

void dequantize_row_q8_1(const block_q8_1* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK8_1; ++b, y += QK8_1) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < 32; ++j) y[j] = x[b].qs[j] * d;
  }
}

void quantize_row_q4_0(const float* x, block_q4_0* y, int64_t n) {
  uint8_t q[32];
  for (int64_t b = 0; b < n / QK4_0; ++b, x += QK4_0) {
    float d;
    quantize_symmetric_block<8>(x, &d, q);
    y[b].d = fp32_to_fp16(d);
    pack_nibbles(q, y[b].qs);
  }
}

void quantize_row_q4_1(const float* x, block_q4_1* y, int64_t n) {
  uint8_t q[32];
  for (int64_t b = 0; b < n / QK4_1; ++b, x += QK4_1) {
    float d, m;
    quantize_affine_block<16>(x, &d, &m, q);
    y[b].d = fp32_to_fp16(d);
    y[b].m = fp32_to_fp16(m);
    pack_nibbles(q, y[b].qs);
  }
}

void quantize_row_q5_0(const float* x, block_q5_0* y, int64_t n) {
  uint8_t q[32];
  for (int64_t b = 0; b < n / QK5_0; ++b, x += QK5_0) {
    float d;
    quantize_symmetric_block<16>(x, &d, q);
    y[b].d = fp32_to_fp16(d);
    store_qh(fifth_bits(q), y[b].qh);
    pack_nibbles(q, y[b].qs);
  }
}

void quantize_row_q5_1(const float* x, block_q5_1* y, int64_t n) {
  uint8_t q[32];
  for (int64_t b = 0; b < n / QK5_1; ++b, x += QK5_1) {
    float d, m;
    quantize_affine_block<32>(x, &d, &m, q);
    y[b].d = fp32_to_fp16(d);
    y[b].m = fp32_to_fp16(m);
    store_qh(fifth_bits(q), y[b].qh);
    pack_nibbles(q, y[b].qs);
  }
}

void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / QK8_0; ++b, x += QK8_0) {
    int sum;
    y[b].d = fp32_to_fp16(quantize_q8_block(x, y[b].qs, &sum));
  }
}

void quantize_row_q8_1(const float* x, block_q8_1* y, int64_t n) {
  for (int64_t b = 0; b < n / QK8_1; ++b, x += QK8_1) {
    int sum;
    const float d = quantize_q8_block(x, y[b].qs, &sum);
    y[b].d = fp32_to_fp16(d);
    y[b].s = fp32_to_fp16(d * static_cast<float>(sum));
  }
}

}  // namespace edgellm::quant
