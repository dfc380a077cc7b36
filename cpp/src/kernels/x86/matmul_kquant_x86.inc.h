// Matmul for K-quant weights (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) against Q8_K activations.
//
// Per 256-element super-block and (row, column) pair:
//   isum = Σ_sub scale_sub · Σ_{i∈sub} u_i · x_i          (exact int32; u the unsigned quant)
//   msum = Σ_16 bsum_k · min'_k                           (exact int32, from the Q8_K bsums)
//   y   += d_w·d_x · isum − dmin'·d_x · msum              (f32)
// Types whose quants are signed (Q3_K: q−4, Q6_K: q−32) use unsigned u and fold the offset into
// the "min" term with min'_k = offset·scale_k and dmin' = d. Each K-quant has its own inner
// unpacking; the tile skeleton (scales decoded and quants unpacked once per tile, reused for C
// columns) is shared.
#pragma once
#include "kernels/tiling.inc.h"
#include "kernels/x86/simd_x86.h"
#include "quant/blocks.h"

namespace edgellm::kernels {
namespace {

// A super-block's per-row constants, decoded once per tile.
struct KRow {
  float d, dmin;
  __m256i mins16;  // int16 per bsum (16): the min' multiplying each 16-element activation sum
  alignas(32) int16_t scales[16];  // per sub-block scale (8 used by Q4_K/Q5_K, 16 by the others)
};

// Broadcast int16 scale s to all 16 lanes.
inline __m256i bcast16(int16_t s) { return _mm256_set1_epi16(s); }
// Low 128-bit lane all `lo`, high lane all `hi` (16-element sub-blocks: one scale per lane).
inline __m256i bcast16_lanes(int16_t lo, int16_t hi) {
  return _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo));
}

inline const block_q8_K* act_row_k(const MatmulArgs& a, int64_t col) {
  return reinterpret_cast<const block_q8_K*>(static_cast<const uint8_t*>(a.x) + col * a.x_stride);
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// u8 quants × s8 activations → int16 pair sums, then × scale (int16) into the int32 accumulator.
inline __m256i scaled_dot_acc(__m256i acc, __m256i u, const int8_t* x, __m256i scale16) {
  return madd16_acc(acc, _mm256_maddubs_epi16(u, load256(x)), scale16);
}

// Q4_K / Q5_K: 6-bit scales and mins packed in 12 bytes (docs/formats.md §2.3). Returns 8
// scales in bytes 0..7 and 8 mins in bytes 8..15.
inline void unpack_scales_mins_k4(const uint8_t* s, uint8_t out[16]) {
  uint32_t v[3];
  std::memcpy(v, s, 12);
  const uint32_t low6 = 0x3f3f3f3fu, low4 = 0x0f0f0f0fu, low2 = 0x03030303u;
  const uint32_t sc03 = v[0] & low6;
  const uint32_t mn03 = v[1] & low6;
  const uint32_t sc47 = (v[2] & low4) | (((v[0] >> 6) & low2) << 4);
  const uint32_t mn47 = ((v[2] >> 4) & low4) | (((v[1] >> 6) & low2) << 4);
  std::memcpy(out + 0, &sc03, 4);
  std::memcpy(out + 4, &sc47, 4);
  std::memcpy(out + 8, &mn03, 4);
  std::memcpy(out + 12, &mn47, 4);
}

// 8 unsigned mins → int16 × 16 with each min repeated for its two bsums.
inline __m256i mins_pairs16(const uint8_t* m8) {
  const __m128i m = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m8)));
  return _mm256_set_m128i(_mm_unpackhi_epi16(m, m), _mm_unpacklo_epi16(m, m));
}

// Q4_K / Q5_K row constants: 8 sub-block scales, the 8 mins as 16 bsum pairs, d and dmin.
template <class Block>
inline KRow row_k4(const Block& b) {
  KRow k;
  uint8_t sm[16];
  unpack_scales_mins_k4(b.scales, sm);
  for (int i = 0; i < 8; ++i) k.scales[i] = sm[i];
  k.d = half_to_float(b.d);
  k.dmin = half_to_float(b.dmin);
  k.mins16 = mins_pairs16(sm + 8);
  return k;
}

struct KQ4 {
  static constexpr DType kType = DType::Q4_K;
  using Block = block_q4_K;
  static KRow row(const Block& b) { return row_k4(b); }
  template <int C>
  static void dot(const Block& b, const KRow& k, const block_q8_K* const* xb, __m256i* isum) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int chunk = 0; chunk < 4; ++chunk) {
      const __m256i q = load256(b.qs + 32 * chunk);
      const __m256i lo = _mm256_and_si256(q, low4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      const __m256i s_lo = bcast16(k.scales[2 * chunk]), s_hi = bcast16(k.scales[2 * chunk + 1]);
      for (int j = 0; j < C; ++j) {
        isum[j] = scaled_dot_acc(isum[j], lo, xb[j]->qs + 64 * chunk, s_lo);
        isum[j] = scaled_dot_acc(isum[j], hi, xb[j]->qs + 64 * chunk + 32, s_hi);
      }
    }
  }
};

struct KQ5 {
  static constexpr DType kType = DType::Q5_K;
  using Block = block_q5_K;
  static KRow row(const Block& b) { return row_k4(b); }
  template <int C>
  static void dot(const Block& b, const KRow& k, const block_q8_K* const* xb, __m256i* isum) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i qh = load256(b.qh);
    for (int chunk = 0; chunk < 4; ++chunk) {
      const __m256i q = load256(b.qs + 32 * chunk);
      // 5th bit: bit 2·chunk of qh[l] for the low-nibble half, bit 2·chunk+1 for the high one.
      const __m256i bit_lo = _mm256_set1_epi8(static_cast<char>(1 << (2 * chunk)));
      const __m256i bit_hi = _mm256_set1_epi8(static_cast<char>(1 << (2 * chunk + 1)));
      const __m256i h_lo = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit_lo), bit_lo), _mm256_set1_epi8(16));
      const __m256i h_hi = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit_hi), bit_hi), _mm256_set1_epi8(16));
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, low4), h_lo);
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4), h_hi);
      const __m256i s_lo = bcast16(k.scales[2 * chunk]), s_hi = bcast16(k.scales[2 * chunk + 1]);
      for (int j = 0; j < C; ++j) {
        isum[j] = scaled_dot_acc(isum[j], lo, xb[j]->qs + 64 * chunk, s_lo);
        isum[j] = scaled_dot_acc(isum[j], hi, xb[j]->qs + 64 * chunk + 32, s_hi);
      }
    }
  }
};

struct KQ6 {
  static constexpr DType kType = DType::Q6_K;
  using Block = block_q6_K;
  static KRow row(const Block& b) {
    KRow k;
    for (int i = 0; i < 16; ++i) k.scales[i] = b.scales[i];
    k.d = half_to_float(b.d);
    k.dmin = k.d;  // the −32 offset: min'_k = 32·scale_k, same d
    const __m256i sc = _mm256_load_si256(reinterpret_cast<const __m256i*>(k.scales));
    k.mins16 = _mm256_slli_epi16(sc, 5);
    return k;
  }
  template <int C>
  static void dot(const Block& b, const KRow& k, const block_q8_K* const* xb, __m256i* isum) {
    const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(0x03);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = b.ql + 64 * half;
      const __m256i qh = load256(b.qh + 32 * half);
      const __m256i ql0 = load256(ql), ql1 = load256(ql + 32);
      // Four 32-element groups; group g takes 2 high bits from qh >> 2g (docs/formats.md §2.3).
      const __m256i g0 = _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_slli_epi16(_mm256_and_si256(qh, low2), 4));
      const __m256i g1 = _mm256_or_si256(_mm256_and_si256(ql1, low4),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), low2), 4));
      const __m256i g2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), low2), 4));
      const __m256i g3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), low2), 4));
      const int16_t* sc = k.scales + 8 * half;
      const __m256i s0 = bcast16_lanes(sc[0], sc[1]), s1 = bcast16_lanes(sc[2], sc[3]);
      const __m256i s2 = bcast16_lanes(sc[4], sc[5]), s3 = bcast16_lanes(sc[6], sc[7]);
      for (int j = 0; j < C; ++j) {
        const int8_t* x = xb[j]->qs + 128 * half;
        isum[j] = scaled_dot_acc(isum[j], g0, x, s0);
        isum[j] = scaled_dot_acc(isum[j], g1, x + 32, s1);
        isum[j] = scaled_dot_acc(isum[j], g2, x + 64, s2);
        isum[j] = scaled_dot_acc(isum[j], g3, x + 96, s3);
      }
    }
  }
};

struct KQ2 {
  static constexpr DType kType = DType::Q2_K;
  using Block = block_q2_K;
  static KRow row(const Block& b) {
    KRow k;
    alignas(16) uint8_t mn[16];
    for (int i = 0; i < 16; ++i) k.scales[i] = b.scales[i] & 0xF, mn[i] = b.scales[i] >> 4;
    k.d = half_to_float(b.d);
    k.dmin = half_to_float(b.dmin);
    k.mins16 = _mm256_cvtepu8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(mn)));
    return k;
  }
  template <int C>
  static void dot(const Block& b, const KRow& k, const block_q8_K* const* xb, __m256i* isum) {
    const __m256i low2 = _mm256_set1_epi8(0x03);
    for (int half = 0; half < 2; ++half) {
      const __m256i q = load256(b.qs + 32 * half);
      for (int g = 0; g < 4; ++g) {
        // Elements 128·half + 32·g + l take bits 2g..2g+1 of qs[32·half + l]; 16 per scale.
        const __m256i u = _mm256_and_si256(_mm256_srli_epi16(q, 2 * g), low2);
        const __m256i s = bcast16_lanes(k.scales[8 * half + 2 * g], k.scales[8 * half + 2 * g + 1]);
        for (int j = 0; j < C; ++j) isum[j] = scaled_dot_acc(isum[j], u, xb[j]->qs + 128 * half + 32 * g, s);
      }
    }
  }
};

struct KQ3 {
  static constexpr DType kType = DType::Q3_K;
  using Block = block_q3_K;
  static KRow row(const Block& b) {
    KRow k;
    // 16 six-bit scales (docs/formats.md §2.3): scale i has low 4 bits from nibble i of
    // bytes 0..7 (low nibbles first) and high 2 bits from bits 2·(i/4) of byte 8 + i%4; minus 32.
    uint64_t lo8;
    uint32_t hi4;
    std::memcpy(&lo8, b.scales, 8);
    std::memcpy(&hi4, b.scales + 8, 4);
    const __m128i nib = _mm_and_si128(_mm_set_epi64x(static_cast<long long>(lo8 >> 4), static_cast<long long>(lo8)),
                                      _mm_set1_epi8(0x0F));
    const __m128i high = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(hi4)), _mm_setr_epi32(0, 2, 4, 6)),
                                       _mm_set1_epi8(0x03));
    const __m128i sc8 = _mm_sub_epi8(_mm_or_si128(nib, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));
    const __m256i sc = _mm256_cvtepi8_epi16(sc8);
    _mm256_store_si256(reinterpret_cast<__m256i*>(k.scales), sc);
    k.d = half_to_float(b.d);
    k.dmin = k.d;  // q = u − 4: min'_k = 4·scale_k, same d
    k.mins16 = _mm256_slli_epi16(sc, 2);
    return k;
  }
  template <int C>
  static void dot(const Block& b, const KRow& k, const block_q8_K* const* xb, __m256i* isum) {
    const __m256i low2 = _mm256_set1_epi8(0x03);
    const __m256i hm = load256(b.hmask);
    for (int half = 0; half < 2; ++half) {
      const __m256i q = load256(b.qs + 32 * half);
      for (int g = 0; g < 4; ++g) {
        // u = 2 low bits + 4 when hmask bit (4·half + g) is set: q + 4 ∈ 0..7.
        const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << (4 * half + g)));
        const __m256i h = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit), _mm256_set1_epi8(4));
        const __m256i u = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * g), low2), h);
        const __m256i s = bcast16_lanes(k.scales[8 * half + 2 * g], k.scales[8 * half + 2 * g + 1]);
        for (int j = 0; j < C; ++j) isum[j] = scaled_dot_acc(isum[j], u, xb[j]->qs + 128 * half + 32 * g, s);
      }
    }
  }
};

template <class T>
struct KQuantTile {
  template <int R, int C>
  struct Fn {
    static void run(const MatmulArgs& a, int64_t r, int64_t c) {
      using Block = typename T::Block;
      const int64_t nb = a.K / QK_K;
      const TileOperands<Block, block_q8_K, R, C> op(a, r, c, nb);
      __m256 acc[R][C];
      fill_tile(acc, _mm256_setzero_ps());

      for (int64_t b = 0; b < nb; ++b) {
        const block_q8_K* xb[C];
        for (int j = 0; j < C; ++j) xb[j] = op.x[j] + b;
        for (int i = 0; i < R; ++i) {
          const Block& wb = op.w[i][b];
          // Decode streams weights from DRAM in short per-row runs the hardware prefetcher barely
          // learns: fetch the same block of the next row group (R rows down) one tile ahead.
          const char* next = reinterpret_cast<const char*>(&wb) + R * nb * sizeof(Block);
          for (size_t off = 0; off < sizeof(Block); off += 64) _mm_prefetch(next + off, _MM_HINT_T0);
          const KRow k = T::row(wb);
          __m256i isum[C];
          for (int j = 0; j < C; ++j) isum[j] = _mm256_setzero_si256();
          T::template dot<C>(wb, k, xb, isum);
          for (int j = 0; j < C; ++j) {
            const __m256i bsums = load256(xb[j]->bsums);
            const __m256i msum = _mm256_madd_epi16(bsums, k.mins16);
            const float dx = xb[j]->d;
            acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_set1_ps(k.d * dx), acc[i][j]);
            acc[i][j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(k.dmin * dx), acc[i][j]);
          }
        }
      }
      for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) a.y[(c + j) * a.ldy + r + i] = hsum(acc[i][j]);
    }
  };
};

template <int kDecodeRows, int kTileRows>
void fill_matmul_kquant_x86(KernelTable& t) {
  fill_tiled<KQuantTile, QK_K, kDecodeRows, kTileRows, KQ2, KQ3, KQ4, KQ5, KQ6>(t);
}

}  // namespace
}  // namespace edgellm::kernels
