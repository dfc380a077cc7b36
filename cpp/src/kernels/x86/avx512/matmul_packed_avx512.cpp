// AVX-512 VNNI matmul over row-interleaved weights (kernels/packed.h): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4, against Q8_R activations.
//
// A tile (kernels/packed_driver.inc.h) is one 16-row group × C activation columns (C ≤ 8). Per
// 32-element block the group's quants are unpacked once into 8 slice registers (lane r = 4 elements of row r), then for each
// column 8 vpdpbusd against broadcast 4-byte groups of the column's Q8_R quants give the 16 rows'
// exact int32 block dots in one register; the offset is removed as an exact integer
// (−offset·Σx), and one convert + one FMA by d_w·d_x (+ one FMA by m_w for the min types)
// accumulates 16 outputs. No horizontal sums; 16 results are stored with one instruction.
//
// Versus the GGUF-layout kernels (matmul_legacy512_x86.inc.h: per (row, column) a dpbusd, a
// convert, a multiply and an FMA for 64 elements) this does ~12 instructions per 512 MACs instead
// of ~40, and decode touches each weight byte once in a sequential stream.
#include <cstring>

#include "kernels/packed_driver.inc.h"
#include "kernels/x86/simd_x86.h"

namespace edgellm::kernels {
namespace {

// The layout's per-type constants (kernels/packed.h).
template <DType T>
struct P : PackedFormat<T> {};

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
    if constexpr (P<T>::kLut) {
      // Table types: index → level + 128 (unsigned for vpdpbusd; the driver removes 128·Σx).
      // vpshufb looks up within each 128-bit lane, so the 16 entries are repeated in all four.
      static constexpr LevelBytes kLut = level_bytes<T, 128>();
      const __m512i table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kLut.b)));
      for (int s = 0; s < 8; ++s) u[s] = _mm512_shuffle_epi8(table, u[s]);
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

// acc += u · broadcast(4 bytes at p), with the broadcast as the instruction's memory operand
// ({1to16}). GCC 12 emits a separate vpbroadcastd for _mm512_set1_epi32(load) feeding vpdpbusd:
// in the 6-column tiles that is 8 extra µops per 512 products, a quarter of the tile's µops.
inline void dpbusd_bcst(__m512i& acc, __m512i u, const int8_t* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*reinterpret_cast<const int32_t*>(p)));
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

// The AVX-512 primitives of kernels/packed_driver.inc.h: a part is the whole 16-row group (one zmm).
struct PackedAvx512 {
  static constexpr int kPartRows = 16;
  static constexpr int kTileParts = 1;
  // Single-column matmuls: each unit's bytes 4608 ahead prefetched (two Q4_K units;
  // packed_driver.inc.h has the measurements).
  static constexpr int kDecodePrefetch = 4608;
  template <DType T>
  static constexpr int offset() { return P<T>::kOffset; }
  template <DType T>
  static constexpr int max_cols() { return 8; }
  // Tile width: 8 columns, and below 32 columns the fewest tiles of even width (16 columns: 8 + 8;
  // 12: 6 + 6). kernels_bench, 2 threads, against 6-wide tiles (same-run A/B): 64 columns Q5_0 /
  // Q6_K / Q8_0 / Q4_K +8-10 / +11-14 / +3-7 / +3-4 %, 8 columns +22-30 %. (8-wide tiles once
  // spilled under GCC and ran batched decode at 575 t/s against 920 with 4-wide ones, Gemma 3, 8
  // streams; since the activation scalars are embedded broadcasts they no longer do.)
  template <DType T>
  static int cols(int64_t ncols) {
    if (ncols >= 32) return 8;
    const int64_t tiles = (ncols + 7) / 8;
    return static_cast<int>((ncols + tiles - 1) / tiles);
  }

  template <DType T>
  struct Slices {
    __m512i u[8];
  };
  template <DType T>
  static void unpack(const uint8_t* sub, int, Slices<T>& s) { unpack_slices<T>(sub, s.u); }
  // Two chains of four dots: elements 0..15 and 16..31 (Q6_K scales them apart).
  template <DType T, int H>
  static __m512i dot_half(const Slices<T>& s, const int8_t* xq, __m512i acc) {
    for (int g = 0; g < 4; ++g) dpbusd_bcst(acc, s.u[4 * H + g], xq + 16 * H + 4 * g);
    return acc;
  }
  // One chain of eight: a tile's columns (and, in decode, consecutive sub-blocks, whose chains
  // meet only in the f32 accumulator) are independent chains already; two half chains cost an
  // add and a zeroed register per (column, sub-block).
  template <DType T>
  static __m512i dot(const Slices<T>& s, const int8_t* xq, __m512i init) {
    return dot_half<T, 1>(s, xq, dot_half<T, 0>(s, xq, init));
  }

  using F = __m512;
  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static __m512i set1_i32(int32_t v) { return _mm512_set1_epi32(v); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fmadd(F a, F b, F acc) { return _mm512_fmadd_ps(a, b, acc); }
  static F fnmadd(F a, F b, F acc) { return _mm512_fnmadd_ps(a, b, acc); }
  static F cvt(__m512i v) { return _mm512_cvtepi32_ps(v); }
  static void store(float* y, F v) { _mm512_storeu_ps(y, v); }
  static F half_rows(const uint8_t* p) { return half16_to_ps(p); }
  static F f32_rows(const uint8_t* p) { return _mm512_loadu_ps(reinterpret_cast<const float*>(p)); }
  static F u8_rows(const uint8_t* p) { return u8x16_to_ps(p); }
  static F i8_rows(const uint8_t* p) { return i8x16_to_ps(p); }
};

}  // namespace

void fill_avx512_matmul_packed(KernelTable& t) { fill_packed_matmul<PackedAvx512>(t); }

}  // namespace edgellm::kernels
