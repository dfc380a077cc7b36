// AVX-512 (512-bit) form of the legacy-block matmul: two consecutive 32-element blocks share one
// zmm register, halving the vector instructions per block of the 256-bit form (unpack, vpdpbusd,
// convert, FMA). Same arithmetic as matmul_legacy_x86.inc.h — exact int32 block dots, f32 scale
// FMA per block — so results agree with the scalar reference to float rounding. An odd last block
// goes through the 256-bit body. Only the AVX-512 unit includes this file.
#pragma once
#include "kernels/x86/matmul_legacy_x86.inc.h"


namespace edgellm::kernels {
namespace {

struct UnpackedLegacyPair {
  __m512i u;   // unsigned operand of both blocks (block b in bytes 0..31, block b+1 in 32..63)
  __m512i q;   // Q8_0 only: the signed quants (sign source for x)
  __m512 d;    // d of block b in lanes 0..7, of block b+1 in lanes 8..15
  float m0, m1;
};

inline __m512 pair_bcast(float a, float b) {
  return _mm512_insertf32x8(_mm512_zextps256_ps512(_mm256_set1_ps(a)), _mm256_set1_ps(b), 1);
}

// Two blocks' 16 nibble bytes → 64 bytes: [lo(a), hi(a), lo(b), hi(b)], each block in element order.
inline __m512i unpack_nibbles_pair(const uint8_t* qa, const uint8_t* qb) {
  const __m256i t = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qa))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(qb)), 1);
  const __m512i z = _mm512_zextsi256_si512(t);
  const __m512i dup = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(1, 1, 0, 0));  // [qa, qa, qb, qb]
  const __m512i shifts = _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0, 0,
                                          0x0004000400040004, 0x0004000400040004, 0, 0);
  return _mm512_and_si512(_mm512_srlv_epi16(dup, shifts), _mm512_set1_epi8(0x0F));
}

// Q5 5th bits of two blocks (two little-endian u32) → 0x10 where set, as one 64-bit byte mask.
inline __m512i q5_high_bits_pair(const uint8_t* qha, const uint8_t* qhb) {
  uint32_t a, b;
  std::memcpy(&a, qha, 4);
  std::memcpy(&b, qhb, 4);
  const __mmask64 k = _cvtu64_mask64(static_cast<uint64_t>(b) << 32 | a);
  return _mm512_maskz_mov_epi8(k, _mm512_set1_epi8(0x10));
}

struct PairQ4_0 : LegacyQ4_0 {
  static UnpackedLegacyPair unpack2(const Block& a, const Block& b) {
    return {unpack_nibbles_pair(a.qs, b.qs), _mm512_setzero_si512(), pair_bcast(half_to_float(a.d), half_to_float(b.d)), 0, 0};
  }
};
struct PairQ5_0 : LegacyQ5_0 {
  static UnpackedLegacyPair unpack2(const Block& a, const Block& b) {
    const __m512i u = _mm512_or_si512(unpack_nibbles_pair(a.qs, b.qs), q5_high_bits_pair(a.qh, b.qh));
    return {u, _mm512_setzero_si512(), pair_bcast(half_to_float(a.d), half_to_float(b.d)), 0, 0};
  }
};
struct PairQ4_1 : LegacyQ4_1 {
  static UnpackedLegacyPair unpack2(const Block& a, const Block& b) {
    return {unpack_nibbles_pair(a.qs, b.qs), _mm512_setzero_si512(), pair_bcast(half_to_float(a.d), half_to_float(b.d)),
            half_to_float(a.m), half_to_float(b.m)};
  }
};
struct PairQ5_1 : LegacyQ5_1 {
  static UnpackedLegacyPair unpack2(const Block& a, const Block& b) {
    const __m512i u = _mm512_or_si512(unpack_nibbles_pair(a.qs, b.qs), q5_high_bits_pair(a.qh, b.qh));
    return {u, _mm512_setzero_si512(), pair_bcast(half_to_float(a.d), half_to_float(b.d)), half_to_float(a.m),
            half_to_float(b.m)};
  }
};
struct PairQ8_0 : LegacyQ8_0 {
  static UnpackedLegacyPair unpack2(const Block& a, const Block& b) {
    const __m512i q = _mm512_inserti64x4(
        _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)), 1);
    return {_mm512_abs_epi8(q), q, pair_bcast(half_to_float(a.d), half_to_float(b.d)), 0, 0};
  }
};

template <class T>
struct LegacyPairTile {
  template <int R, int C>
  struct Fn {
    static void run(const MatmulArgs& a, int64_t r, int64_t c) {
      using Block = typename T::Block;
      using Act = typename T::Act;
      const int64_t nb = a.K / 32;
      const TileOperands<Block, Act, R, C> op(a, r, c, nb);
      __m512 acc[R][C];
      float acc_min[R][C] = {};
      fill_tile(acc, _mm512_setzero_ps());

      int64_t b = 0;
      for (; b + 2 <= nb; b += 2) {
        __m512i xq[C], xinit[C];
        __m512 dx[C];
        float sx[C][2];
        for (int j = 0; j < C; ++j) {
          const Act& xa = op.x[j][b];
          const Act& xb = op.x[j][b + 1];
          xq[j] = _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xa.qs))),
                                     _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs)), 1);
          dx[j] = pair_bcast(half_to_float(xa.d), half_to_float(xb.d));
          if constexpr (T::kMin) sx[j][0] = half_to_float(xa.s), sx[j][1] = half_to_float(xb.s);
          if constexpr (T::kOffset != 0)
            xinit[j] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                        _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(T::kOffset), xq[j]));
          else
            xinit[j] = _mm512_setzero_si512();
        }
        for (int i = 0; i < R; ++i) {
          // Prefetch the same blocks of the next row group, one tile ahead (see matmul_kquant_x86.inc.h).
          _mm_prefetch(reinterpret_cast<const char*>(&op.w[i][b]) + R * nb * sizeof(Block) + 64, _MM_HINT_T0);
          const UnpackedLegacyPair u = T::unpack2(op.w[i][b], op.w[i][b + 1]);
          __mmask64 neg = 0;
          if constexpr (T::kSignTrick) neg = _mm512_movepi8_mask(u.q);
          for (int j = 0; j < C; ++j) {
            __m512i xs = xq[j];
            if constexpr (T::kSignTrick) xs = _mm512_mask_sub_epi8(xs, neg, _mm512_setzero_si512(), xs);
            const __m512i s = _mm512_dpbusd_epi32(xinit[j], u.u, xs);
            acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(u.d, dx[j]), acc[i][j]);
            if constexpr (T::kMin) acc_min[i][j] += u.m0 * sx[j][0] + u.m1 * sx[j][1];
          }
        }
      }
      float tail[R][C] = {};
      if (b < nb) {  // odd block count: the last block through the 256-bit body
        for (int j = 0; j < C; ++j) {
          const Act& xb = op.x[j][b];
          const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs));
          const float dx = half_to_float(xb.d);
          __m256i xinit = _mm256_setzero_si256();
          if constexpr (T::kOffset != 0)
            xinit = _mm256_sub_epi32(xinit, dot_u8s8_acc(_mm256_setzero_si256(), _mm256_set1_epi8(T::kOffset), xq));
          for (int i = 0; i < R; ++i) {
            const UnpackedLegacy u = T::unpack(op.w[i][b]);
            const __m256i s = T::kSignTrick ? dot_s8s8_acc(xinit, u.u, u.q, xq) : dot_u8s8_acc(xinit, u.u, xq);
            tail[i][j] = hsum(_mm256_cvtepi32_ps(s)) * (u.d * dx);
            if constexpr (T::kMin) tail[i][j] += u.m * half_to_float(xb.s);
          }
        }
      }
      for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j)
          a.y[(c + j) * a.ldy + r + i] = _mm512_reduce_add_ps(acc[i][j]) + acc_min[i][j] + tail[i][j];
    }
  };
};

template <int kDecodeRows, int kTileRows>
void fill_matmul_legacy_avx512_pairs(KernelTable& t) {
  fill_tiled<LegacyPairTile, 32, kDecodeRows, kTileRows, PairQ4_0, PairQ4_1, PairQ5_0, PairQ5_1, PairQ8_0>(t);
}

}  // namespace
}  // namespace edgellm::kernels
