// AVX-512 VNNI matmul over row-interleaved weights (kernels/packed.h): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q4_K, Q5_K, Q6_K, against Q8_R activations.
//
// A tile is one 16-row group × C activation columns (C ≤ 6). Per 32-element block the group's
// quants are unpacked once into 8 slice registers (lane r = 4 elements of row r), then for each
// column 8 vpdpbusd against broadcast 4-byte groups of the column's Q8_R quants give the 16 rows'
// exact int32 block dots in one register; the offset is removed as an exact integer
// (−offset·Σx), and one convert + one FMA by d_w·d_x (+ one FMA by m_w for the min types)
// accumulates 16 outputs. No horizontal sums; 16 results are stored with one instruction.
//
// Versus the GGUF-layout kernels (matmul_legacy512_x86.inc.h: per (row, column) a dpbusd, a
// convert, a multiply and an FMA for 64 elements) this does ~12 instructions per 512 MACs instead
// of ~40, and decode touches each weight byte once in a sequential stream.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/kernel_errors.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"

// GCC 12's AVX-512 convert intrinsics start from _mm512_undefined_*() and trip its own
// -W(maybe-)uninitialized inside <avx512fintrin.h> (a false positive, as in matmul_legacy512_x86.inc.h).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace edgellm::kernels {
namespace {

// The layout's per-type constants (kernels/packed.h).
template <DType T>
struct P : PackedFormat<T> {};

template <DType T>
constexpr size_t sub_bytes() { return P<T>::kSubBytes; }
template <DType T>
constexpr int subs() { return P<T>::kSubs; }
template <DType T>
constexpr size_t unit_bytes() { return P<T>::kUnitBytes; }

inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The 8 slices of one sub-block as unsigned bytes.
template <DType T>
inline void unpack_slices(const uint8_t* q, __m512i u[8]) {
  if constexpr (P<T>::kNib) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int p = 0; p < 4; ++p) {
      const __m512i v = _mm512_loadu_si512(q + 64 * p);
      u[p] = _mm512_and_si512(v, low4);
      u[p + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
    }
    if constexpr (P<T>::kHigh) {
      const __m512i bit5 = _mm512_set1_epi8(0x10);
      for (int s = 0; s < 8; ++s) {
        uint64_t m;
        std::memcpy(&m, q + 256 + 8 * s, 8);
        u[s] = _mm512_mask_add_epi8(u[s], _cvtu64_mask64(m), u[s], bit5);
      }
    }
    if constexpr (P<T>::kSix) {
      // Bits 2k..2k+1 of H[h] are slice 4h+k's high bits: move them to bits 4..5 of each byte
      // (16-bit shifts; the 0x30 mask drops what crossed a byte boundary).
      const __m512i m30 = _mm512_set1_epi8(0x30);
      for (int h = 0; h < 2; ++h) {
        const __m512i H = _mm512_loadu_si512(q + 256 + 64 * h);
        u[4 * h + 0] = _mm512_or_si512(u[4 * h + 0], _mm512_and_si512(_mm512_slli_epi16(H, 4), m30));
        u[4 * h + 1] = _mm512_or_si512(u[4 * h + 1], _mm512_and_si512(_mm512_slli_epi16(H, 2), m30));
        u[4 * h + 2] = _mm512_or_si512(u[4 * h + 2], _mm512_and_si512(H, m30));
        u[4 * h + 3] = _mm512_or_si512(u[4 * h + 3], _mm512_and_si512(_mm512_srli_epi16(H, 2), m30));
      }
    }
  } else {
    for (int s = 0; s < 8; ++s) u[s] = _mm512_loadu_si512(q + 64 * s);
  }
}

inline __m512 u8x16_to_ps(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512 i8x16_to_ps(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512 half16_to_ps(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// 16 rows (one group) × C columns, all K. y points at (column c, row r); columns are ldy apart.
template <DType T, int C>
void tile(const uint8_t* group, int64_t nu, const uint8_t* x, size_t x_stride, float* y, int64_t ldy) {
  __m512 acc[C];
  for (int j = 0; j < C; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nu; ++b) {
    const uint8_t* unit = group + b * unit_bytes<T>();
    const __m512 d = half16_to_ps(unit);
    __m512 dmin = _mm512_setzero_ps();
    if constexpr (P<T>::kMin) dmin = half16_to_ps(unit + 32);  // Q4_1/Q5_1: m itself; K: dmin
    for (int sb = 0; sb < subs<T>(); ++sb) {
      // Per-row constants of this sub-block (packed.h): da, db (Q6_K only differs), mn.
      __m512 da = d, db = d, mn = dmin;
      if constexpr (P<T>::kK && P<T>::kMin) {
        da = db = _mm512_mul_ps(u8x16_to_ps(unit + 64 + 16 * sb), d);
        mn = _mm512_mul_ps(u8x16_to_ps(unit + 192 + 16 * sb), dmin);  // subtracted below
      }
      if constexpr (P<T>::kSix) {
        da = _mm512_mul_ps(i8x16_to_ps(unit + 32 + 16 * (2 * sb)), d);
        db = _mm512_mul_ps(i8x16_to_ps(unit + 32 + 16 * (2 * sb + 1)), d);
      }
      __m512i u[8];
      unpack_slices<T>(unit + P<T>::kHeader + sb * sub_bytes<T>(), u);
      const int64_t xi = b * subs<T>() + sb;
      for (int j = 0; j < C; ++j) {
        const block_q8_r& xb = reinterpret_cast<const block_q8_r*>(x + j * x_stride)[xi];
        // Two chains of four dots: elements 0..15 and 16..31 (Q6_K scales them apart).
        __m512i s0, s1;
        if constexpr (P<T>::kSix) {
          s0 = _mm512_set1_epi32(-P<T>::kOffset * xb.s[0]);
          s1 = _mm512_set1_epi32(-P<T>::kOffset * xb.s[1]);
        } else {
          s0 = P<T>::kOffset ? _mm512_set1_epi32(-P<T>::kOffset * (xb.s[0] + xb.s[1])) : _mm512_setzero_si512();
          s1 = _mm512_setzero_si512();
        }
        for (int g = 0; g < 4; ++g) {
          s0 = _mm512_dpbusd_epi32(s0, u[g], _mm512_set1_epi32(load_i32(xb.qs + 4 * g)));
          s1 = _mm512_dpbusd_epi32(s1, u[g + 4], _mm512_set1_epi32(load_i32(xb.qs + 16 + 4 * g)));
        }
        const __m512 dx = _mm512_set1_ps(xb.d);
        if constexpr (P<T>::kSix) {
          acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(da, dx), acc[j]);
          acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(db, dx), acc[j]);
        } else {
          acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), _mm512_mul_ps(da, dx), acc[j]);
        }
        if constexpr (P<T>::kMin) {
          const __m512 sx = _mm512_set1_ps(xb.d * static_cast<float>(xb.s[0] + xb.s[1]));
          if constexpr (P<T>::kK)
            acc[j] = _mm512_fnmadd_ps(mn, sx, acc[j]);
          else
            acc[j] = _mm512_fmadd_ps(mn, sx, acc[j]);
        }
      }
    }
  }
  for (int j = 0; j < C; ++j) _mm512_storeu_ps(y + j * ldy, acc[j]);
}

template <DType T>
void tile_n(int n, const uint8_t* group, int64_t nu, const uint8_t* x, size_t xs, float* y, int64_t ldy) {
  switch (n) {
    case 1: tile<T, 1>(group, nu, x, xs, y, ldy); break;
    case 2: tile<T, 2>(group, nu, x, xs, y, ldy); break;
    case 3: tile<T, 3>(group, nu, x, xs, y, ldy); break;
    case 4: tile<T, 4>(group, nu, x, xs, y, ldy); break;
    case 5: tile<T, 5>(group, nu, x, xs, y, ldy); break;
    default: tile<T, 6>(group, nu, x, xs, y, ldy); break;
  }
}

// Columns are taken in blocks of kColBlock so that a block's activations (kColBlock · K · 1.25
// bytes) stay in L2 while every row group of the chunk passes over them.
constexpr int64_t kColBlock = 64;

template <DType T>
void packed_matmul(const MatmulArgs& a) {
  constexpr int64_t kUnit = P<T>::kK ? 256 : 32;
  if (a.K % kUnit != 0) throw_bad_row_length("matmul", T, a.K);
  if (a.r0 % kPackRows != 0 || a.r1 % kPackRows != 0)
    throw std::invalid_argument("packed matmul: rows [" + std::to_string(a.r0) + ", " + std::to_string(a.r1) +
                                ") do not start and end on 16-row groups");
  const int64_t nu = a.K / kUnit;
  const size_t group_bytes = unit_bytes<T>() * static_cast<size_t>(nu);
  const auto* w = static_cast<const uint8_t*>(a.w);
  const auto* x = static_cast<const uint8_t*>(a.x);
  // Tile width: 4 columns for small batches (decode of a few sequences), 6 for prefill. Measured
  // (2 threads): 8-wide tiles ran batched decode at 575 t/s (Gemma 3, 8 streams) against 920 with
  // 4-wide ones — GCC spills at 8 accumulators + 8 slices — and 6-wide tiles prefill best
  // (SmolLM2 pp512 3708 vs 3529 with 4-wide).
  const int W = a.ncols >= 32 ? 6 : 4;
  for (int64_t cb = 0; cb < a.ncols; cb += kColBlock) {
    const int64_t ce = std::min(a.ncols, cb + kColBlock);
    for (int64_t r = a.r0; r < a.r1; r += kPackRows) {
      const uint8_t* group = w + static_cast<size_t>(r / kPackRows) * group_bytes;
      for (int64_t c = cb; c < ce; c += W) {
        const int n = static_cast<int>(std::min<int64_t>(W, ce - c));
        tile_n<T>(n, group, nu, x + c * a.x_stride, a.x_stride, a.y + c * a.ldy + r, a.ldy);
      }
    }
  }
}

}  // namespace

void fill_avx512_matmul_packed(KernelTable& t) {
  t.packed_matmul[static_cast<int>(DType::Q4_0)] = packed_matmul<DType::Q4_0>;
  t.packed_matmul[static_cast<int>(DType::Q4_1)] = packed_matmul<DType::Q4_1>;
  t.packed_matmul[static_cast<int>(DType::Q5_0)] = packed_matmul<DType::Q5_0>;
  t.packed_matmul[static_cast<int>(DType::Q5_1)] = packed_matmul<DType::Q5_1>;
  t.packed_matmul[static_cast<int>(DType::Q8_0)] = packed_matmul<DType::Q8_0>;
  t.packed_matmul[static_cast<int>(DType::Q4_K)] = packed_matmul<DType::Q4_K>;
  t.packed_matmul[static_cast<int>(DType::Q5_K)] = packed_matmul<DType::Q5_K>;
  t.packed_matmul[static_cast<int>(DType::Q6_K)] = packed_matmul<DType::Q6_K>;
}

}  // namespace edgellm::kernels
