// AVX-512 (512-bit) form of the K-quant matmul (Q4_K, Q5_K, Q6_K against Q8_K activations).
// Only the AVX-512 unit includes this file; Q2_K / Q3_K stay on the 256-bit body of
// matmul_kquant_x86.inc.h (rare formats, not worth a second body).
//
// Same arithmetic as the 256-bit form — per super-block and (row, column) an exact int32
//   isum = Σ_sub scale_sub · Σ_{i∈sub} u_i · x_i
// then y += d_w·d_x·isum − dmin'·d_x·Σ_k min'_k·bsum_k in f32 — with three changes that cut the
// vector instructions per (row, column, super-block) from ~24 to ~12:
//
// 1. One zmm holds 64 consecutive quants ("group" g = elements 64g..64g+63, two 32-element
//    sub-blocks of Q4_K/Q5_K or four 16-element ones of Q6_K), unpacked once per row and reused
//    for every column of the tile: one vpmaddubsw (u8 × s8 → int16 pairs) plus one vpdpwssd
//    with a per-128-bit-lane scale vector accumulates 64 products, 4 pairs per super-block.
// 2. The scale vectors come from one permute of a per-row int32 table (each sub-block scale
//    duplicated into both int16 halves of a dword) instead of per-sub-block broadcasts.
// 3. The min term needs no integer work per (row, column): per row, fmin_k = −dmin'·min'_k
//    (16 floats, one per 16-element activation sum); per column, fb_k = d_x·bsum_k; their
//    product goes into the same 16-lane float accumulator as the main term with one FMA (only
//    the accumulator's horizontal sum is the result, so both terms can share its lanes).
//
// Tiles are R rows × C columns with C up to kCols (its own runner: run_tiles' 4-column
// grouping is shared with the other matmuls); decode (one column) keeps R-row tiles and the
// one-tile-ahead prefetch of the next row group.
#pragma once
#include "kernels/x86/matmul_kquant_x86.inc.h"

// GCC 12's AVX-512 insert/convert intrinsics start from _mm512_undefined_*() and trip its own
// -W(maybe-)uninitialized inside <avx512fintrin.h> (a false positive; the lanes are all written).
// Not popped: the warnings surface where the templates below are instantiated, at the unit's end.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace edgellm::kernels {
namespace {

// One super-block's per-row constants.
struct KRow512 {
  __m512i sc32;  // dword k (0..15): the scale of activation elements 16k..16k+15, in both int16 halves
  __m512 fmin;   // lane k: −dmin'·min'_k, the weight of bsum k
  float d;
};

// The scale vector of group g: 128-bit lane L covers elements 64g+16L .. +15, i.e. dword 4g+L.
inline __m512i group_scales(const KRow512& k, int g) {
  return _mm512_permutexvar_epi32(_mm512_add_epi32(_mm512_set1_epi32(4 * g), _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0)),
                                  k.sc32);
}

// int32 lanes holding values in int16 range → the same value in both int16 halves.
inline __m512i dup_low16(__m512i v) {
  return _mm512_or_si512(_mm512_and_si512(v, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(v, 16));
}

// 32 bytes at p in both 256-bit halves.
inline __m512i bcast256(const uint8_t* p) {
  return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Q4_K / Q5_K: 8 six-bit scales and mins (unpacked by unpack_scales_mins_k4, 16 bytes) → row constants.
inline KRow512 row_k4_512(const uint8_t* scales, uint16_t d, uint16_t dmin) {
  alignas(16) uint8_t sm[16];
  unpack_scales_mins_k4(scales, sm);
  const __m128i v = _mm_load_si128(reinterpret_cast<const __m128i*>(sm));
  // Sub-block s covers two 16-element activation sums (2s, 2s+1): duplicate each byte.
  const __m512i sc = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(v, v));
  const __m512i mn = _mm512_cvtepu8_epi32(_mm_unpackhi_epi8(v, v));
  KRow512 k;
  k.sc32 = dup_low16(sc);
  k.fmin = _mm512_mul_ps(_mm512_cvtepi32_ps(mn), _mm512_set1_ps(-half_to_float(dmin)));
  k.d = half_to_float(d);
  return k;
}

// Q4_K group g: the 32 bytes qs[32g..32g+31] hold elements 64g+l (low nibble) and 64g+32+l (high).
inline __m512i nibbles_group(const uint8_t* qs, int g) {
  const __m512i q = bcast256(qs + 32 * g);
  const __m512i hi = _mm512_mask_srli_epi16(q, 0xFFFF0000u, q, 4);  // upper 256 bits: high nibbles
  return _mm512_and_si512(hi, _mm512_set1_epi8(0x0F));
}

struct K4x512 {
  static constexpr DType kType = DType::Q4_K;
  using Block = block_q4_K;
  static KRow512 row(const Block& b) { return row_k4_512(b.scales, b.d, b.dmin); }
  static __m512i group(const Block& b, int g) { return nibbles_group(b.qs, g); }
};

struct K5x512 {
  static constexpr DType kType = DType::Q5_K;
  using Block = block_q5_K;
  static KRow512 row(const Block& b) { return row_k4_512(b.scales, b.d, b.dmin); }
  static __m512i group(const Block& b, int g) {
    // 5th bit of element 64g+l is bit 2g of qh[l], of element 64g+32+l bit 2g+1.
    const __m512i bits = _mm512_broadcast_i64x4(_mm256_set1_epi8(static_cast<char>(1 << (2 * g))));
    const __m512i sel = _mm512_mask_slli_epi16(bits, 0xFFFF0000u, bits, 1);
    const __mmask64 h = _mm512_test_epi8_mask(bcast256(b.qh), sel);
    const __m512i u = nibbles_group(b.qs, g);
    return _mm512_mask_add_epi8(u, h, u, _mm512_set1_epi8(16));
  }
};

struct K6x512 {
  static constexpr DType kType = DType::Q6_K;
  using Block = block_q6_K;
  static KRow512 row(const Block& b) {
    const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    KRow512 k;
    k.d = half_to_float(b.d);
    k.sc32 = dup_low16(sc);
    // u = q + 32: min'_k = 32·scale_k with dmin' = d.
    k.fmin = _mm512_mul_ps(_mm512_cvtepi32_ps(sc), _mm512_set1_ps(-32.0f * k.d));
    return k;
  }
  static __m512i group(const Block& b, int g) {
    // Half h = g/2 (128 elements: ql[64h..], qh[32h..]); within it, for l < 32:
    //   g even: elements l, 32+l   = low nibbles of ql[l], ql[32+l]  | qh[l] bits 0-1, 2-3
    //   g odd:  elements 64+l, 96+l = high nibbles of ql[l], ql[32+l] | qh[l] bits 4-5, 6-7
    // (llamacpp-internals §2.3). The two high bits go to bits 4-5 of each byte.
    const int h = g / 2;
    const __m512i ql = _mm512_loadu_si512(b.ql + 64 * h);
    const __m512i qh = bcast256(b.qh + 32 * h);
    const __m512i m30 = _mm512_set1_epi8(0x30);
    __m512i lo, hb;
    if (g % 2 == 0) {
      lo = ql;
      // bits 0-1 → 4-5 (shift left 4); bits 2-3 → 4-5 (shift left 2) for the upper 256 bits.
      hb = _mm512_mask_slli_epi16(_mm512_slli_epi16(qh, 4), 0xFFFF0000u, qh, 2);
    } else {
      lo = _mm512_srli_epi16(ql, 4);
      // bits 4-5 stay; bits 6-7 → 4-5 (shift right 2) for the upper 256 bits.
      hb = _mm512_mask_srli_epi16(qh, 0xFFFF0000u, qh, 2);
    }
    // (lo & 0x0F) | (hb & 0x30): ternary logic with C = 0x0F selects A's low nibble, B's bits 4-5.
    return _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi8(0x0F)), _mm512_and_si512(hb, m30));
  }
};

template <class T>
struct KQuant512Tile {
  template <int R, int C>
  struct Fn {
    static void run(const MatmulArgs& a, int64_t r, int64_t c) {
      using Block = typename T::Block;
      const int64_t nb = a.K / QK_K;
      const Block* w[R];
      const block_q8_K* x[C];
      for (int i = 0; i < R; ++i) w[i] = static_cast<const Block*>(a.w) + (r + i) * nb;
      for (int j = 0; j < C; ++j) x[j] = act_row_k(a, c + j);

      __m512 acc[R][C];
      for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) acc[i][j] = _mm512_setzero_ps();

      for (int64_t b = 0; b < nb; ++b) {
        // Per column: d_x and fb_k = d_x·bsum_k, shared by the R rows.
        const block_q8_K* xb[C];
        float dx[C];
        __m512 fb[C];
        for (int j = 0; j < C; ++j) {
          xb[j] = x[j] + b;
          dx[j] = xb[j]->d;
          const __m512 bs = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(load256(xb[j]->bsums)));
          fb[j] = _mm512_mul_ps(bs, _mm512_set1_ps(dx[j]));
        }
        for (int i = 0; i < R; ++i) {
          const Block& wb = w[i][b];
          // Prefetch the same block of the next row group one tile ahead (see matmul_kquant_x86.inc.h).
          const char* next = reinterpret_cast<const char*>(&wb) + R * nb * sizeof(Block);
          for (size_t off = 0; off < sizeof(Block); off += 64) _mm_prefetch(next + off, _MM_HINT_T0);
          const KRow512 k = T::row(wb);
          __m512i isum[C];
          for (int j = 0; j < C; ++j) isum[j] = _mm512_setzero_si512();
          for (int g = 0; g < 4; ++g) {
            const __m512i u = T::group(wb, g);
            const __m512i s = group_scales(k, g);
            for (int j = 0; j < C; ++j) {
              const __m512i xq = _mm512_loadu_si512(xb[j]->qs + 64 * g);
              isum[j] = _mm512_dpwssd_epi32(isum[j], _mm512_maddubs_epi16(u, xq), s);
            }
          }
          const __m512 vd = _mm512_set1_ps(k.d);
          for (int j = 0; j < C; ++j) {
            const __m512 main = _mm512_mul_ps(_mm512_cvtepi32_ps(isum[j]), vd);
            acc[i][j] = _mm512_fmadd_ps(main, _mm512_set1_ps(dx[j]), acc[i][j]);
            acc[i][j] = _mm512_fmadd_ps(k.fmin, fb[j], acc[i][j]);
          }
        }
      }
      for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) a.y[(c + j) * a.ldy + r + i] = _mm512_reduce_add_ps(acc[i][j]);
    }
  };
};

// Columns [c, ncols) with fewer than kCols left: one tile of exactly that width.
template <template <int, int> class TileFn, int R, int N>
inline void run_column_tail512(const MatmulArgs& a, int64_t r, int64_t c) {
  if constexpr (N > 0) {
    if (a.ncols - c == N)
      TileFn<R, N>::run(a, r, c);
    else
      run_column_tail512<TileFn, R, N - 1>(a, r, c);
  }
}

template <template <int, int> class TileFn, int R, int kCols>
inline void run_column_groups512(const MatmulArgs& a, int64_t r) {
  int64_t c = 0;
  for (; c + kCols <= a.ncols; c += kCols) TileFn<R, kCols>::run(a, r, c);
  run_column_tail512<TileFn, R, kCols - 1>(a, r, c);
}

// Like run_tiles (row groups outside, column groups inside) with kCols-wide column groups.
template <template <int, int> class TileFn, int kDecodeRows, int kTileRows, int kCols>
void run_tiles512(const MatmulArgs& a) {
  int64_t r = a.r0;
  if (a.ncols == 1) {
    for (; r + kDecodeRows <= a.r1; r += kDecodeRows) TileFn<kDecodeRows, 1>::run(a, r, 0);
    for (; r < a.r1; ++r) TileFn<1, 1>::run(a, r, 0);
    return;
  }
  for (; r + kTileRows <= a.r1; r += kTileRows) run_column_groups512<TileFn, kTileRows, kCols>(a, r);
  for (; r < a.r1; ++r) run_column_groups512<TileFn, 1, kCols>(a, r);
}

template <class T, int kDecodeRows, int kTileRows, int kCols>
void matmul_kquant512(const MatmulArgs& a) {
  if (a.K % QK_K != 0) throw_bad_row_length("matmul", T::kType, a.K);
  run_tiles512<KQuant512Tile<T>::template Fn, kDecodeRows, kTileRows, kCols>(a);
}

// Q4_K / Q5_K / Q6_K on the 512-bit tiles; Q2_K / Q3_K keep the 256-bit ones (fill that first).
template <int kDecodeRows, int kTileRows, int kCols>
void fill_matmul_kquant_avx512(KernelTable& t) {
  t.matmul[static_cast<int>(DType::Q4_K)] = matmul_kquant512<K4x512, kDecodeRows, kTileRows, kCols>;
  t.matmul[static_cast<int>(DType::Q5_K)] = matmul_kquant512<K5x512, kDecodeRows, kTileRows, kCols>;
  t.matmul[static_cast<int>(DType::Q6_K)] = matmul_kquant512<K6x512, kDecodeRows, kTileRows, kCols>;
}

}  // namespace
}  // namespace edgellm::kernels
