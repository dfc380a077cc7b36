// Matmul for the 32-element "legacy" weight blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) against Q8_0 /
// Q8_1 activations. Per block: an exact int32 dot of the quants, converted once and FMA'd with
// d_w·d_x in f32 (plus m_w·s_x for the types with a min), as quant::vec_dot does.
//
// A weight block is unpacked into 32 unsigned bytes once per tile (see kernels/tiling.inc.h);
// the traits below say how its sign or offset is handled.
#pragma once
#include "kernels/tiling.inc.h"
#include "kernels/x86/simd_x86.h"
#include "quant/blocks.h"

namespace edgellm::kernels {
namespace {

struct UnpackedLegacy {
  __m256i u;  // unsigned operand: nib (offset types), |q| (Q8_0) or q (types with a min)
  __m256i q;  // signed q (Q8_0 only: sign source for x)
  float d;
  float m;    // min (types with a min)
};

// kOffset: quants are stored unsigned with an implicit −kOffset (Q4_0: 8, Q5_0: 16). The dot is
// then Σ u·x − kOffset·Σx: the second term depends on the activation block only, so a tile
// computes it once per column and starts every row's int32 accumulator from it.
// kSignTrick: signed int8 quants (Q8_0) — |q| is the unsigned operand and x takes q's sign.
// kMin: the block has a min m (Q4_1, Q5_1): y += m·s_x with s_x = d_x·Σx from the Q8_1 block.

struct LegacyQ4_0 {
  static constexpr DType kType = DType::Q4_0;
  using Block = block_q4_0;
  using Act = block_q8_0;
  static constexpr int kOffset = 8;
  static constexpr bool kSignTrick = false, kMin = false;
  static UnpackedLegacy unpack(const Block& b) {
    return {unpack_nibbles_16(b.qs), _mm256_setzero_si256(), half_to_float(b.d), 0.0f};
  }
};

struct LegacyQ5_0 {
  static constexpr DType kType = DType::Q5_0;
  using Block = block_q5_0;
  using Act = block_q8_0;
  static constexpr int kOffset = 16;
  static constexpr bool kSignTrick = false, kMin = false;
  static UnpackedLegacy unpack(const Block& b) {
    const __m256i v = _mm256_or_si256(unpack_nibbles_16(b.qs), expand_q5_high_bits(b.qh));
    return {v, _mm256_setzero_si256(), half_to_float(b.d), 0.0f};
  }
};

struct LegacyQ8_0 {
  static constexpr DType kType = DType::Q8_0;
  using Block = block_q8_0;
  using Act = block_q8_0;
  static constexpr int kOffset = 0;
  static constexpr bool kSignTrick = true, kMin = false;
  static UnpackedLegacy unpack(const Block& b) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
    // |−128| = 128 read as unsigned is still right, and 128·127·2 fits the int16 pair sum.
    return {_mm256_abs_epi8(q), q, half_to_float(b.d), 0.0f};
  }
};

struct LegacyQ4_1 {
  static constexpr DType kType = DType::Q4_1;
  using Block = block_q4_1;
  using Act = block_q8_1;
  static constexpr int kOffset = 0;
  static constexpr bool kSignTrick = false, kMin = true;
  static UnpackedLegacy unpack(const Block& b) {
    return {unpack_nibbles_16(b.qs), _mm256_setzero_si256(), half_to_float(b.d), half_to_float(b.m)};
  }
};

struct LegacyQ5_1 {
  static constexpr DType kType = DType::Q5_1;
  using Block = block_q5_1;
  using Act = block_q8_1;
  static constexpr int kOffset = 0;
  static constexpr bool kSignTrick = false, kMin = true;
  static UnpackedLegacy unpack(const Block& b) {
    const __m256i v = _mm256_or_si256(unpack_nibbles_16(b.qs), expand_q5_high_bits(b.qh));
    return {v, _mm256_setzero_si256(), half_to_float(b.d), half_to_float(b.m)};
  }
};

template <class T>
struct LegacyTile {
  template <int R, int C>
  struct Fn {
    static void run(const MatmulArgs& a, int64_t r, int64_t c) {
      using Block = typename T::Block;
      const int64_t nb = a.K / 32;
      const TileOperands<Block, typename T::Act, R, C> op(a, r, c, nb);
      __m256 acc[R][C];
      float acc_min[R][C] = {};
      fill_tile(acc, _mm256_setzero_ps());

      for (int64_t b = 0; b < nb; ++b) {
        // Activation side, once per tile and block.
        __m256i xq[C], xinit[C];
        __m256 dx[C];
        float sx[C];
        for (int j = 0; j < C; ++j) {
          const auto& xb = op.x[j][b];
          xq[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs));
          dx[j] = _mm256_set1_ps(half_to_float(xb.d));
          if constexpr (T::kMin) sx[j] = half_to_float(xb.s);
          if constexpr (T::kOffset != 0)
            xinit[j] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                        dot_u8s8_acc(_mm256_setzero_si256(), _mm256_set1_epi8(T::kOffset), xq[j]));
          else
            xinit[j] = _mm256_setzero_si256();
        }
        for (int i = 0; i < R; ++i) {
          // Prefetch the same block of the next row group, one tile ahead (see matmul_kquant_x86.inc.h).
          _mm_prefetch(reinterpret_cast<const char*>(&op.w[i][b]) + R * nb * sizeof(Block) + 64, _MM_HINT_T0);
          const UnpackedLegacy u = T::unpack(op.w[i][b]);
          const __m256 dw = _mm256_set1_ps(u.d);
          for (int j = 0; j < C; ++j) {
            const __m256i s = T::kSignTrick ? dot_s8s8_acc(xinit[j], u.u, u.q, xq[j]) : dot_u8s8_acc(xinit[j], u.u, xq[j]);
            acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, dx[j]), acc[i][j]);
            if constexpr (T::kMin) acc_min[i][j] += u.m * sx[j];
          }
        }
      }
      for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) a.y[(c + j) * a.ldy + r + i] = hsum(acc[i][j]) + acc_min[i][j];
    }
  };
};

template <int kDecodeRows, int kTileRows>
void fill_matmul_legacy_x86(KernelTable& t) {
  fill_tiled<LegacyTile, 32, kDecodeRows, kTileRows, LegacyQ4_0, LegacyQ4_1, LegacyQ5_0, LegacyQ5_1, LegacyQ8_0>(t);
}

}  // namespace
}  // namespace edgellm::kernels
