// The non-linear 4-bit formats IQ4_NL, IQ4_XS and MXFP4 (docs/formats.md §2.6): every nibble is
// an index into a fixed 16-entry table of levels, scaled by the block's scale. Nibble order is
// Q4_0's: element j of a 32-element (sub-)block is the low nibble of qs[j], element j+16 the
// high one.
#include <cmath>
#include <cstring>
#include <initializer_list>

#include "common/fp16.h"
#include "quant/reference.h"
#include "quant/rounding.h"

namespace edgellm::quant {
namespace {

// Index of the table level nearest to v (the lower one on ties). kIq4nlValues is ascending.
int nearest_iq4_level(float v) {
  const int8_t* t = kIq4nlValues;
  if (v <= t[0]) return 0;
  if (v >= t[15]) return 15;
  int lo = 0, hi = 15;  // t[lo] < v < t[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (v < t[mid] ? hi : lo) = mid;
  }
  return v - t[lo] <= t[hi] - v ? lo : hi;
}

// Levels of x[0..31] at scale d (nearest level of x/d) into q; returns Σw·x·t and Σw·t².
void fit_levels(const float* x, const float* w, float d, uint8_t* q, float* sumxt, float* sumt2) {
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  float sxt = 0.0f, st2 = 0.0f;
  for (int j = 0; j < 32; ++j) {
    q[j] = static_cast<uint8_t>(nearest_iq4_level(x[j] * id));
    const float t = kIq4nlValues[q[j]];
    sxt += w[j] * x[j] * t;
    st2 += w[j] * t * t;
  }
  *sumxt = sxt;
  *sumt2 = st2;
}

// The scale search of reference.h for one 32-element block: candidate scales put the value of
// largest magnitude on (or a few steps inside / outside) either end of the table; for each, the
// nearest levels and then their least-squares scale Σwxt/Σwt², which lowers the weighted error
// Σw(x − d·t)² to Σwx² − (Σwxt)²/Σwt². Returns the best scale; q gets its levels.
float search_iq4_scale(const float* x, const float* w, uint8_t* q) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j)
    if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
  if (amax == 0.0f) {
    for (int j = 0; j < 32; ++j) q[j] = 8;  // level 1, the smallest magnitude; d = 0 makes it 0
    return 0.0f;
  }
  constexpr int kSteps = 6;
  float best_gain = -1.0f, best_d = max / kIq4nlValues[0];
  uint8_t cand[32];
  for (const float end : {static_cast<float>(kIq4nlValues[0]), static_cast<float>(kIq4nlValues[15])})
    for (int k = -kSteps; k <= kSteps; ++k) {
      const float denom = end < 0 ? end - k : end + k;  // k > 0: the extreme beyond the table end (clipped)
      float sxt, st2;
      fit_levels(x, w, max / denom, cand, &sxt, &st2);
      if (st2 <= 0.0f) continue;
      const float gain = sxt * sxt / st2;
      if (gain > best_gain) {
        best_gain = gain;
        best_d = sxt / st2;
        std::memcpy(q, cand, 32);
      }
    }
  // One more round with the least-squares scale: its own nearest levels can only do as well or better.
  float sxt, st2;
  fit_levels(x, w, best_d, cand, &sxt, &st2);
  if (st2 > 0.0f && sxt * sxt / st2 > best_gain) {
    best_d = sxt / st2;
    std::memcpy(q, cand, 32);
  }
  return best_d;
}

// Importance weights of a block: w = σ² + x² (σ² the mean square of `ctx`, n elements), so large
// values matter more but small ones are not ignored.
void iq4_weights(const float* x, const float* ctx, int n, float* w) {
  float s2 = 0.0f;
  for (int j = 0; j < n; ++j) s2 += ctx[j] * ctx[j];
  s2 /= static_cast<float>(n);
  for (int j = 0; j < 32; ++j) w[j] = s2 + x[j] * x[j];
}

void pack_nibbles(const uint8_t* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
}

// Levels at a fixed (stored) scale d.
void levels_at(const float* x, float d, uint8_t* q) {
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < 32; ++j) q[j] = static_cast<uint8_t>(nearest_iq4_level(x[j] * id));
}

// y[0..31] = d · table[nibble].
template <typename Table>
void dequantize_nibbles(const uint8_t* qs, float d, const Table& table, float* y) {
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(table[qs[j] & 0xF]);
    y[j + 16] = d * static_cast<float>(table[qs[j] >> 4]);
  }
}

}  // namespace

void dequantize_row_iq4_nl(const block_iq4_nl* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK4_NL; ++b, y += QK4_NL) dequantize_nibbles(x[b].qs, fp16_to_fp32(x[b].d), kIq4nlValues, y);
}

void dequantize_row_iq4_xs(const block_iq4_xs* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    for (int ib = 0; ib < 8; ++ib, y += 32)
      dequantize_nibbles(x[b].qs + 16 * ib, d * static_cast<float>(iq4_xs_scale(x[b], ib) - 32), kIq4nlValues, y);
  }
}

void dequantize_row_mxfp4(const block_mxfp4* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_MXFP4; ++b, y += QK_MXFP4)
    dequantize_nibbles(x[b].qs, e8m0_to_fp32_half(x[b].e), kMxfp4Values, y);
}

void quantize_row_iq4_nl(const float* x, block_iq4_nl* y, int64_t n) {
  float w[32];
  uint8_t q[32];
  for (int64_t b = 0; b < n / QK4_NL; ++b, x += QK4_NL) {
    iq4_weights(x, x, 32, w);
    const uint16_t dh = fp32_to_fp16(search_iq4_scale(x, w, q));
    levels_at(x, fp16_to_fp32(dh), q);  // the levels of the scale as stored
    y[b].d = dh;
    pack_nibbles(q, y[b].qs);
  }
}

void quantize_row_iq4_xs(const float* x, block_iq4_xs* y, int64_t n) {
  float w[32], scales[8];
  uint8_t q[32];
  for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
    float smax = 0.0f;
    for (int ib = 0; ib < 8; ++ib) {
      iq4_weights(x + 32 * ib, x, QK_K, w);
      scales[ib] = search_iq4_scale(x + 32 * ib, w, q);
      if (std::fabs(scales[ib]) > std::fabs(smax)) smax = scales[ib];
    }
    // The largest sub-block scale is exactly d·(0 − 32); the others round to ls − 32 in [−32, 31].
    const uint16_t dh = fp32_to_fp16(smax / -32.0f);
    const float d = fp16_to_fp32(dh), id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = dh;
    y[b].scales_h = 0;
    std::memset(y[b].scales_l, 0, sizeof y[b].scales_l);
    for (int ib = 0; ib < 8; ++ib) {
      int l = nearest_int(scales[ib] * id);
      l = l < -32 ? -32 : (l > 31 ? 31 : l);
      const int ls = l + 32;
      y[b].scales_l[ib / 2] |= static_cast<uint8_t>((ls & 0xF) << (4 * (ib % 2)));
      y[b].scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * ib));
      levels_at(x + 32 * ib, d * static_cast<float>(l), q);
      pack_nibbles(q, y[b].qs + 16 * ib);
    }
  }
}

void quantize_row_mxfp4(const float* x, block_mxfp4* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_MXFP4; ++b, x += QK_MXFP4) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fabs(x[j]) > amax ? std::fabs(x[j]) : amax;
    // gguf: e = floor(log2(amax)) − 2 + 127 in float32, so that amax/2^(e−127) is in [4, 8) and
    // the largest value lands near the top levels 4·2 .. 6·2 of the doubled table. Clamped to a
    // byte (only amax < 2^-125 would leave it).
    float e = amax > 0.0f ? std::floor(std::log2(amax)) - 2.0f + 127.0f : 0.0f;
    e = e < 0.0f ? 0.0f : (e > 255.0f ? 255.0f : e);
    y[b].e = static_cast<uint8_t>(e);
    const float d = e8m0_to_fp32_half(y[b].e);
    uint8_t q[32];
    for (int j = 0; j < 32; ++j) {
      int best = 0;
      float best_err = std::fabs(d * static_cast<float>(kMxfp4Values[0]) - x[j]);
      for (int k = 1; k < 16; ++k) {
        const float err = std::fabs(d * static_cast<float>(kMxfp4Values[k]) - x[j]);
        if (err < best_err) best_err = err, best = k;
      }
      q[j] = static_cast<uint8_t>(best);
    }
    pack_nibbles(q, y[b].qs);
  }
}

}  // namespace edgellm::quant
