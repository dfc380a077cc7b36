// Matmul for the non-linear 4-bit weight formats in their GGUF layout: IQ4_NL and MXFP4 (32-element
// blocks, against Q8_0) through the legacy tile of matmul_legacy_x86.inc.h, IQ4_XS (256-element
// super-blocks, against Q8_K) through the K-quant tile of matmul_kquant_x86.inc.h. One vpshufb
// turns 32 nibbles into their signed table levels q; the dot is the sign trick
// maddubs(|q|, sign(x, q)) (|q| ≤ 127, so the int16 pair sums ≤ 2·127·127 cannot saturate), then
// the tiles' exact int32 sums and per-block f32 scaling, the shape of quant::vec_dot.
//
// These run where the weights are not packed (EDGELLM_REPACK=0, row counts not a multiple of 16);
// the packed kernels (matmul_packed_*.cpp) are the usual path.
#pragma once
#include "kernels/x86/matmul_kquant_x86.inc.h"
#include "kernels/x86/matmul_legacy_x86.inc.h"
#include "quant/blocks.h"

namespace edgellm::kernels {
namespace {

// The 16 levels of `table` in both 128-bit lanes (vpshufb looks up within a lane).
inline __m256i level_table(const int8_t* table) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table)));
}

// MXFP4's scale 2^(e−128), exact (quant::e8m0_to_fp32_half; not called here, see simd_x86.h).
inline float x86_e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

struct LegacyIQ4_NL {
  static constexpr DType kType = DType::IQ4_NL;
  using Block = block_iq4_nl;
  using Act = block_q8_0;
  static constexpr int kOffset = 0;
  static constexpr bool kSignTrick = true, kMin = false;
  static UnpackedLegacy unpack(const Block& b) {
    const __m256i q = _mm256_shuffle_epi8(level_table(kIq4nlValues), unpack_nibbles_16(b.qs));
    return {_mm256_abs_epi8(q), q, half_to_float(b.d), 0.0f};
  }
};

struct LegacyMXFP4 {
  static constexpr DType kType = DType::MXFP4;
  using Block = block_mxfp4;
  using Act = block_q8_0;
  static constexpr int kOffset = 0;
  static constexpr bool kSignTrick = true, kMin = false;
  static UnpackedLegacy unpack(const Block& b) {
    const __m256i q = _mm256_shuffle_epi8(level_table(kMxfp4Values), unpack_nibbles_16(b.qs));
    return {_mm256_abs_epi8(q), q, x86_e8m0_half(b.e), 0.0f};
  }
};

// IQ4_XS: 8 signed sub-block scales ls − 32, no min (mins16 = 0, dmin = 0).
struct KIQ4_XS {
  static constexpr DType kType = DType::IQ4_XS;
  using Block = block_iq4_xs;
  static KRow row(const Block& b) {
    KRow k;
    for (int ib = 0; ib < 8; ++ib)
      k.scales[ib] = static_cast<int16_t>(
          (((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4)) - 32);
    k.d = half_to_float(b.d);
    k.dmin = 0.0f;
    k.mins16 = _mm256_setzero_si256();
    return k;
  }
  template <int C>
  static void dot(const Block& b, const KRow& k, const block_q8_K* const* xb, __m256i* isum) {
    const __m256i table = level_table(kIq4nlValues);
    for (int ib = 0; ib < 8; ++ib) {
      const __m256i q = _mm256_shuffle_epi8(table, unpack_nibbles_16(b.qs + 16 * ib));
      const __m256i u = _mm256_abs_epi8(q);
      const __m256i s = bcast16(k.scales[ib]);
      for (int j = 0; j < C; ++j)
        isum[j] = madd16_acc(isum[j], _mm256_maddubs_epi16(u, _mm256_sign_epi8(load256(xb[j]->qs + 32 * ib), q)), s);
    }
  }
};

template <int kDecodeRows, int kTileRows>
void fill_matmul_nonlinear_x86(KernelTable& t) {
  fill_tiled<LegacyTile, 32, kDecodeRows, kTileRows, LegacyIQ4_NL, LegacyMXFP4>(t);
  fill_tiled<KQuantTile, QK_K, kDecodeRows, kTileRows, KIQ4_XS>(t);
}

}  // namespace
}  // namespace edgellm::kernels
