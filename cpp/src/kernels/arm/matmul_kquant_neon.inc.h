// Matmul for K-quant weights (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) against Q8_K activations.
//
// Per 256-element super-block and (row, column) pair, as quant::vec_dot does:
//   isum = Σ_sub scale_sub · Σ_{i∈sub} q_i · x_i     (exact int32)
//   msum = Σ_16 bsum_k · min_k                       (exact int32, from the Q8_K bsums)
//   y   += d_w·d_x · isum − dmin·d_x · msum          (f32)
// NEON multiplies signed bytes, so Q3_K (q − 4) and Q6_K (q − 32) are unpacked straight to their
// signed levels and need no min term; Q2_K, Q4_K and Q5_K have real mins. A super-block's
// quants are unpacked once per tile (for R rows) and reused for C activation columns.
#pragma once
#include "kernels/arm/simd_neon.h"
#include "kernels/tiling.inc.h"
#include "quant/blocks.h"

namespace edgellm::kernels {
namespace {

// A super-block of one weight row, unpacked: 256 signed levels in element order, 16 scales
// (one per 16 elements; the 32-element formats repeat each), 16 mins (one per bsum) and d, dmin.
struct NeonKBlock {
  int8x16_t q[16];
  int16_t scales[16];
  int16_t mins[16];
  float d, dmin;
  bool has_min;
};

// Q4_K / Q5_K: 6-bit scales and mins of the 8 sub-blocks packed in 12 bytes.
inline void neon_scales_mins_k4(const uint8_t* s, int16_t* sc, int16_t* mn) {
  for (int j = 0; j < 8; ++j) {
    int v, m;
    if (j < 4) {
      v = s[j] & 63;
      m = s[j + 4] & 63;
    } else {
      v = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
      m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
    sc[2 * j] = sc[2 * j + 1] = static_cast<int16_t>(v);
    mn[2 * j] = mn[2 * j + 1] = static_cast<int16_t>(m);
  }
}

struct NeonKQ4 {
  static constexpr DType kType = DType::Q4_K;
  using Block = block_q4_K;
  static void unpack(const Block& b, NeonKBlock& k) {
    neon_scales_mins_k4(b.scales, k.scales, k.mins);
    k.d = half_to_float(b.d);
    k.dmin = half_to_float(b.dmin);
    k.has_min = true;
    const uint8x16_t low4 = vdupq_n_u8(0x0F);
    // Chunk c: 32 bytes; low nibbles are elements 64c + l, high nibbles 64c + 32 + l.
    for (int c = 0; c < 4; ++c)
      for (int h = 0; h < 2; ++h) {
        const uint8x16_t q = load_u8(b.qs + 32 * c + 16 * h);
        k.q[4 * c + h] = vreinterpretq_s8_u8(vandq_u8(q, low4));
        k.q[4 * c + 2 + h] = vreinterpretq_s8_u8(vshrq_n_u8(q, 4));
      }
  }
};

struct NeonKQ5 {
  static constexpr DType kType = DType::Q5_K;
  using Block = block_q5_K;
  static void unpack(const Block& b, NeonKBlock& k) {
    neon_scales_mins_k4(b.scales, k.scales, k.mins);
    k.d = half_to_float(b.d);
    k.dmin = half_to_float(b.dmin);
    k.has_min = true;
    const uint8x16_t low4 = vdupq_n_u8(0x0F), sixteen = vdupq_n_u8(16);
    const uint8x16_t qh[2] = {load_u8(b.qh), load_u8(b.qh + 16)};
    // Fifth bit of element 64c + l: bit 2c of qh[l]; of element 64c + 32 + l: bit 2c + 1.
    for (int c = 0; c < 4; ++c)
      for (int h = 0; h < 2; ++h) {
        const uint8x16_t q = load_u8(b.qs + 32 * c + 16 * h);
        const uint8x16_t b_lo = vandq_u8(vtstq_u8(qh[h], vdupq_n_u8(static_cast<uint8_t>(1u << (2 * c)))), sixteen);
        const uint8x16_t b_hi = vandq_u8(vtstq_u8(qh[h], vdupq_n_u8(static_cast<uint8_t>(2u << (2 * c)))), sixteen);
        k.q[4 * c + h] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q, low4), b_lo));
        k.q[4 * c + 2 + h] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q, 4), b_hi));
      }
  }
};

struct NeonKQ6 {
  static constexpr DType kType = DType::Q6_K;
  using Block = block_q6_K;
  static void unpack(const Block& b, NeonKBlock& k) {
    for (int i = 0; i < 16; ++i) k.scales[i] = b.scales[i];
    k.d = half_to_float(b.d);
    k.dmin = 0.0f;
    k.has_min = false;
    const uint8x16_t low4 = vdupq_n_u8(0x0F), low2 = vdupq_n_u8(0x03);
    const int8x16_t off = vdupq_n_s8(32);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = b.ql + 64 * half;
      const uint8_t* qh = b.qh + 32 * half;
      for (int h = 0; h < 2; ++h) {  // elements l ∈ [16h, 16h + 16) of each 32-element quarter
        const uint8x16_t l0 = load_u8(ql + 16 * h), l1 = load_u8(ql + 32 + 16 * h);
        const uint8x16_t hb = load_u8(qh + 16 * h);
        // Quarter r: low nibble (r < 2) or high nibble (r ≥ 2) of ql[l + 32·(r & 1)], and bits
        // 2r..2r+1 of qh[l] as bits 4..5.
        const uint8x16_t u0 = vorrq_u8(vandq_u8(l0, low4), vshlq_n_u8(vandq_u8(hb, low2), 4));
        const uint8x16_t u1 = vorrq_u8(vandq_u8(l1, low4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 2), low2), 4));
        const uint8x16_t u2 = vorrq_u8(vshrq_n_u8(l0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 4), low2), 4));
        const uint8x16_t u3 = vorrq_u8(vshrq_n_u8(l1, 4), vshlq_n_u8(vshrq_n_u8(hb, 6), 4));
        int8x16_t* q = k.q + 8 * half;
        q[0 + h] = vsubq_s8(vreinterpretq_s8_u8(u0), off);
        q[2 + h] = vsubq_s8(vreinterpretq_s8_u8(u1), off);
        q[4 + h] = vsubq_s8(vreinterpretq_s8_u8(u2), off);
        q[6 + h] = vsubq_s8(vreinterpretq_s8_u8(u3), off);
      }
    }
  }
};

struct NeonKQ2 {
  static constexpr DType kType = DType::Q2_K;
  using Block = block_q2_K;
  static void unpack(const Block& b, NeonKBlock& k) {
    for (int i = 0; i < 16; ++i) k.scales[i] = b.scales[i] & 0xF, k.mins[i] = b.scales[i] >> 4;
    k.d = half_to_float(b.d);
    k.dmin = half_to_float(b.dmin);
    k.has_min = true;
    const uint8x16_t low2 = vdupq_n_u8(0x03);
    // Element 128·half + 32·g + l takes bits 2g..2g+1 of qs[32·half + l].
    for (int half = 0; half < 2; ++half)
      for (int h = 0; h < 2; ++h) {
        const uint8x16_t q = load_u8(b.qs + 32 * half + 16 * h);
        k.q[8 * half + 0 + h] = vreinterpretq_s8_u8(vandq_u8(q, low2));
        k.q[8 * half + 2 + h] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(q, 2), low2));
        k.q[8 * half + 4 + h] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(q, 4), low2));
        k.q[8 * half + 6 + h] = vreinterpretq_s8_u8(vshrq_n_u8(q, 6));
      }
  }
};

struct NeonKQ3 {
  static constexpr DType kType = DType::Q3_K;
  using Block = block_q3_K;
  static void unpack(const Block& b, NeonKBlock& k) {
    // 16 six-bit scales: low 4 bits from nibble i of bytes 0..7 (low nibbles first), high 2
    // bits from bits 2·(i/4) of byte 8 + i%4; stored with +32.
    const uint8_t* s = b.scales;
    for (int i = 0; i < 16; ++i) {
      const int lo = i < 8 ? s[i] & 0xF : s[i - 8] >> 4;
      const int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
      k.scales[i] = static_cast<int16_t>((lo | (hi << 4)) - 32);
    }
    k.d = half_to_float(b.d);
    k.dmin = 0.0f;
    k.has_min = false;
    const uint8x16_t low2 = vdupq_n_u8(0x03);
    const uint8x16_t hm[2] = {load_u8(b.hmask), load_u8(b.hmask + 16)};
    // Element 128·half + 32·g + l: bits 2g..2g+1 of qs[32·half + l], minus 4 unless bit
    // 4·half + g of hmask[l] is set.
    for (int half = 0; half < 2; ++half)
      for (int h = 0; h < 2; ++h) {
        const uint8x16_t q = load_u8(b.qs + 32 * half + 16 * h);
        for (int g = 0; g < 4; ++g) {
          const uint8x16_t bit = vdupq_n_u8(static_cast<uint8_t>(1u << (4 * half + g)));
          const uint8x16_t minus4 = vandq_u8(vceqq_u8(vandq_u8(hm[h], bit), vdupq_n_u8(0)), vdupq_n_u8(4));
          const uint8x16_t u = vandq_u8(vshlq_u8(q, vdupq_n_s8(static_cast<int8_t>(-2 * g))), low2);
          k.q[8 * half + 2 * g + h] = vsubq_s8(vreinterpretq_s8_u8(u), vreinterpretq_s8_u8(minus4));
        }
      }
  }
};

// Σ_16 bsums[k] · mins[k] in int32.
inline int32_t neon_min_sum(const int16_t* bsums, const int16_t* mins) {
  const int16x8_t b0 = vld1q_s16(bsums), b1 = vld1q_s16(bsums + 8);
  const int16x8_t m0 = vld1q_s16(mins), m1 = vld1q_s16(mins + 8);
  int32x4_t s = vmull_s16(vget_low_s16(b0), vget_low_s16(m0));
  s = vmlal_high_s16(s, b0, m0);
  s = vmlal_s16(s, vget_low_s16(b1), vget_low_s16(m1));
  s = vmlal_high_s16(s, b1, m1);
  return vaddvq_s32(s);
}

template <class T>
struct NeonKQuantTile {
  template <int R, int C>
  struct Fn {
    static void run(const MatmulArgs& a, int64_t r, int64_t c) {
      const int64_t nb = a.K / QK_K;  // super-blocks per row
      const TileOperands<typename T::Block, block_q8_K, R, C> op(a, r, c, nb);
      float acc[R][C] = {};
      NeonKBlock kb;
      for (int64_t b = 0; b < nb; ++b) {
        for (int i = 0; i < R; ++i) {
          T::unpack(op.w[i][b], kb);
          for (int j = 0; j < C; ++j) {
            const block_q8_K& xb = op.x[j][b];
            int32x4_t isum = vdupq_n_s32(0);
            for (int s = 0; s < 16; ++s)
              isum = vmlaq_n_s32(isum, dot_s8(vdupq_n_s32(0), kb.q[s], load_s8(xb.qs + 16 * s)), kb.scales[s]);
            const float sum_q = static_cast<float>(vaddvq_s32(isum));
            if (kb.has_min) {
              const float sum_m = static_cast<float>(neon_min_sum(xb.bsums, kb.mins));
              acc[i][j] += kb.d * xb.d * sum_q - kb.dmin * xb.d * sum_m;
            } else {
              acc[i][j] += kb.d * xb.d * sum_q;
            }
          }
        }
      }
      for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) a.y[(c + j) * a.ldy + r + i] = acc[i][j];
    }
  };
};

template <int kDecodeRows, int kTileRows>
void fill_matmul_kquant_neon(KernelTable& t) {
  fill_tiled<NeonKQuantTile, QK_K, kDecodeRows, kTileRows, NeonKQ2, NeonKQ3, NeonKQ4, NeonKQ5, NeonKQ6>(t);
}

}  // namespace
}  // namespace edgellm::kernels
