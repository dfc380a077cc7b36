// Matmul for the non-linear 4-bit weight formats in their GGUF layout: IQ4_NL and MXFP4 (32-element
// blocks, against Q8_0) through the legacy tile of matmul_legacy_neon.inc.h, IQ4_XS (256-element
// super-blocks, against Q8_K) through the K-quant tile of matmul_kquant_neon.inc.h. One tbl
// (vqtbl1q_s8) turns 16 nibbles into their signed table levels; the rest is the tiles' exact
// int32 dots and per-block f32 scaling, the shape of quant::vec_dot.
#pragma once
#include "kernels/arm/matmul_kquant_neon.inc.h"
#include "kernels/arm/matmul_legacy_neon.inc.h"
#include "quant/blocks.h"

namespace edgellm::kernels {
namespace {

// 32 nibbles (Q4_0 order) as their levels in `table`.
inline void neon_table_levels(const uint8_t* qs, int8x16_t table, int8x16_t* lo, int8x16_t* hi) {
  uint8x16_t l, h;
  neon_nibbles(qs, &l, &h);
  *lo = vqtbl1q_s8(table, l);
  *hi = vqtbl1q_s8(table, h);
}

// MXFP4's scale 2^(e−128), exact (quant::e8m0_to_fp32_half; not called here, see simd_neon.h).
inline float neon_e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

struct NeonIQ4_NL {
  static constexpr DType kType = DType::IQ4_NL;
  using Block = block_iq4_nl;
  using Act = block_q8_0;
  static constexpr bool kMin = false;
  static NeonLegacyBlock unpack(const Block& b) {
    NeonLegacyBlock o;
    neon_table_levels(b.qs, vld1q_s8(kIq4nlValues), &o.lo, &o.hi);
    o.d = half_to_float(b.d);
    o.m = 0.0f;
    return o;
  }
};

struct NeonMXFP4 {
  static constexpr DType kType = DType::MXFP4;
  using Block = block_mxfp4;
  using Act = block_q8_0;
  static constexpr bool kMin = false;
  static NeonLegacyBlock unpack(const Block& b) {
    NeonLegacyBlock o;
    neon_table_levels(b.qs, vld1q_s8(kMxfp4Values), &o.lo, &o.hi);
    o.d = neon_e8m0_half(b.e);
    o.m = 0.0f;
    return o;
  }
};

struct NeonKIQ4_XS {
  static constexpr DType kType = DType::IQ4_XS;
  using Block = block_iq4_xs;
  static void unpack(const Block& b, NeonKBlock& k) {
    const int8x16_t table = vld1q_s8(kIq4nlValues);
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4);
      k.scales[2 * ib] = k.scales[2 * ib + 1] = static_cast<int16_t>(ls - 32);
      neon_table_levels(b.qs + 16 * ib, table, &k.q[2 * ib], &k.q[2 * ib + 1]);
    }
    k.d = half_to_float(b.d);
    k.dmin = 0.0f;
    k.has_min = false;
  }
};

template <int kDecodeRows, int kTileRows>
void fill_matmul_nonlinear_neon(KernelTable& t) {
  fill_tiled<NeonLegacyTile, 32, kDecodeRows, kTileRows, NeonIQ4_NL, NeonMXFP4>(t);
  fill_tiled<NeonKQuantTile, QK_K, kDecodeRows, kTileRows, NeonKIQ4_XS>(t);
}

}  // namespace
}  // namespace edgellm::kernels
