// Matmul for the 32-element "legacy" weight blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) against Q8_0 /
// Q8_1 activations. Per block: an exact int32 dot of the quants, converted once and FMA'd with
// d_w·d_x in f32 lanes (plus m_w·s_x for the types with a min), the shape of quant::vec_dot.
//
// NEON multiplies signed by signed bytes, so every weight block is unpacked to its signed levels
// (Q4_0: nibble − 8, Q5_0: 5-bit − 16, Q8_0 as stored; the types with a min keep 0..15 / 0..31)
// and no offset correction is needed.
#pragma once
#include "kernels/arm/simd_neon.h"
#include "kernels/tiling.inc.h"
#include "quant/blocks.h"

namespace edgellm::kernels {
namespace {

struct NeonLegacyBlock {
  int8x16_t lo, hi;  // elements 0..15 and 16..31 as signed levels
  float d, m;
};

// Element j < 16 is the low nibble of qs[j], element j + 16 its high nibble.
inline void neon_nibbles(const uint8_t* qs, uint8x16_t* lo, uint8x16_t* hi) {
  const uint8x16_t q = load_u8(qs);
  *lo = vandq_u8(q, vdupq_n_u8(0x0F));
  *hi = vshrq_n_u8(q, 4);
}

struct NeonQ4_0 {
  static constexpr DType kType = DType::Q4_0;
  using Block = block_q4_0;
  using Act = block_q8_0;
  static constexpr bool kMin = false;
  static NeonLegacyBlock unpack(const Block& b) {
    uint8x16_t lo, hi;
    neon_nibbles(b.qs, &lo, &hi);
    const int8x16_t eight = vdupq_n_s8(8);
    return {vsubq_s8(vreinterpretq_s8_u8(lo), eight), vsubq_s8(vreinterpretq_s8_u8(hi), eight), half_to_float(b.d), 0.0f};
  }
};

struct NeonQ4_1 {
  static constexpr DType kType = DType::Q4_1;
  using Block = block_q4_1;
  using Act = block_q8_1;
  static constexpr bool kMin = true;
  static NeonLegacyBlock unpack(const Block& b) {
    uint8x16_t lo, hi;
    neon_nibbles(b.qs, &lo, &hi);
    return {vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi), half_to_float(b.d), half_to_float(b.m)};
  }
};

struct NeonQ5_0 {
  static constexpr DType kType = DType::Q5_0;
  using Block = block_q5_0;
  using Act = block_q8_0;
  static constexpr bool kMin = false;
  static NeonLegacyBlock unpack(const Block& b) {
    uint8x16_t lo, hi;
    neon_nibbles(b.qs, &lo, &hi);
    const int8x16_t sixteen = vdupq_n_s8(16);
    lo = vorrq_u8(lo, q5_high_bits16(b.qh, 0));
    hi = vorrq_u8(hi, q5_high_bits16(b.qh, 1));
    return {vsubq_s8(vreinterpretq_s8_u8(lo), sixteen), vsubq_s8(vreinterpretq_s8_u8(hi), sixteen), half_to_float(b.d),
            0.0f};
  }
};

struct NeonQ5_1 {
  static constexpr DType kType = DType::Q5_1;
  using Block = block_q5_1;
  using Act = block_q8_1;
  static constexpr bool kMin = true;
  static NeonLegacyBlock unpack(const Block& b) {
    uint8x16_t lo, hi;
    neon_nibbles(b.qs, &lo, &hi);
    lo = vorrq_u8(lo, q5_high_bits16(b.qh, 0));
    hi = vorrq_u8(hi, q5_high_bits16(b.qh, 1));
    return {vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi), half_to_float(b.d), half_to_float(b.m)};
  }
};

struct NeonQ8_0 {
  static constexpr DType kType = DType::Q8_0;
  using Block = block_q8_0;
  using Act = block_q8_0;
  static constexpr bool kMin = false;
  static NeonLegacyBlock unpack(const Block& b) {
    return {load_s8(b.qs), load_s8(b.qs + 16), half_to_float(b.d), 0.0f};
  }
};

template <class T>
struct NeonLegacyTile {
  template <int R, int C>
  struct Fn {
    static void run(const MatmulArgs& a, int64_t r, int64_t c) {
      const int64_t nb = a.K / 32;
      const TileOperands<typename T::Block, typename T::Act, R, C> op(a, r, c, nb);
      float32x4_t acc[R][C];
      float acc_min[R][C] = {};
      fill_tile(acc, vdupq_n_f32(0.0f));

      for (int64_t b = 0; b < nb; ++b) {
        NeonLegacyBlock wb[R];
        for (int i = 0; i < R; ++i) wb[i] = T::unpack(op.w[i][b]);
        for (int j = 0; j < C; ++j) {
          const auto& xb = op.x[j][b];
          const int8x16_t x0 = load_s8(xb.qs), x1 = load_s8(xb.qs + 16);
          const float dx = half_to_float(xb.d);
          float sx = 0.0f;
          if constexpr (T::kMin) sx = half_to_float(xb.s);
          for (int i = 0; i < R; ++i) {
            const int32x4_t s = dot_s8x32(wb[i].lo, wb[i].hi, x0, x1);
            acc[i][j] = vfmaq_n_f32(acc[i][j], vcvtq_f32_s32(s), wb[i].d * dx);
            if constexpr (T::kMin) acc_min[i][j] += wb[i].m * sx;
          }
        }
      }
      for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) a.y[(c + j) * a.ldy + r + i] = vaddvq_f32(acc[i][j]) + acc_min[i][j];
    }
  };
};

template <int kDecodeRows, int kTileRows>
void fill_matmul_legacy_neon(KernelTable& t) {
  fill_tiled<NeonLegacyTile, 32, kDecodeRows, kTileRows, NeonQ4_0, NeonQ4_1, NeonQ5_0, NeonQ5_1, NeonQ8_0>(t);
}

}  // namespace
}  // namespace edgellm::kernels
