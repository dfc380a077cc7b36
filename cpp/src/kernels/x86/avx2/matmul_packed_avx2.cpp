// AVX2 + FMA + F16C matmul over row-interleaved weights (kernels/packed.h): Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, against Q8_R activations. No AVX-512, no VNNI: this is the
// level of every x86 machine without AVX-512 VNNI.
//
// A 64-byte slice of the layout (4 elements of each of 16 rows) is two ymm halves: rows 0..7 are
// its first 32 bytes, rows 8..15 the next 32. Per 32-element sub-block and half, the 8 slices are
// unpacked once into unsigned bytes (lane r = 4 elements of row r), then for each column
// maddubs(slice, broadcast 4 activation bytes) gives per row two int16 pair sums; a few of them
// are added in int16 while that cannot saturate (see kGroup), and one madd by ones widens them to
// the 8 rows' int32 block dots. The offset is removed as an exact integer (−offset·Σx), and one
// convert + one FMA by d_w·d_x (+ one FMA by m_w for the min types) accumulates 8 outputs: no
// horizontal sums, 8 results stored with one instruction.
//
// Q8_0 is the exception to "unsigned weights × signed activations": its unsigned quants
// u = q + 128 reach 255 and maddubs' pair sums (2·255·127) would saturate at 32767. So Q8_0 goes
// back to the signed q = u ^ 0x80 and uses the sign trick maddubs(|q|, sign(x, q)) = q·x pairs
// (at most 2·128·127 = 32512), which also needs no −128·Σx correction. It relies on Q8_R quants
// lying in [−127, 127] (Q8_0's d = amax/127), as −(−128) does not exist in int8.
//
// A tile is one half of a 16-row group (8 rows) × C columns (C ≤ kCols of the type), so each
// sub-block's slices are decoded once and reused by all C columns; a single column takes both
// halves in one pass (see tile).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "kernels/kernel_errors.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"

namespace edgellm::kernels {
namespace {

// The layout's per-type constants (kernels/packed.h; Q8_0 is dotted as signed q here), plus
// kGroup: how many maddubs results may be added in int16 before widening. A pair sum is at most
// 2·umax·128 in magnitude (|x| ≤ 128): 4-bit 3840 (8 fit under 32767), 5-bit 7936 (4 fit),
// 6-bit 16128 (2 fit), Q8_0 with the sign trick 32512 (1);
// and kCols: the most columns a tile takes. Each sub-block's slices are unpacked once per tile,
// so the types with a costly unpack (Q5's bit plane, Q6_K's 2-bit plane) amortize it over more
// columns; 4-bit and Q8_0 tiles are smaller so that accumulators and slices spill less. Measured
// single thread, 1536×1536, 64 columns (GFLOP/s, C = 4 / 5 / 6 / 8): Q4_0 243/267/223/220,
// Q4_K 220/249/201/202, Q8_0 177/180/163/157, Q5_0 192/212/226/237, Q5_K 170/186/198/209,
// Q6_K 185/193/204/208.
template <DType T>
struct P : PackedFormat<T> {
  using F = PackedFormat<T>;
  static constexpr int kOffset = T == DType::Q8_0 ? 0 : F::kOffset;  // signed q: no offset (see top)
  static constexpr int kGroup = F::kSix ? 2 : F::kHigh ? 4 : F::kNib ? 8 : 1;
  static constexpr int kCols = F::kHigh || F::kSix ? 8 : 5;
};

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

// Byte i of the result is 0xFF where bit i of m is set, else 0 (i = 0..31).
inline __m256i bits_to_bytes(uint32_t m) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int32_t>(m)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  // Set every bit but bit i%8 of byte i: the byte is all ones exactly when bit i was set.
  const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
  return _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi64x(-1));
}

// The 8 slices of half h (rows 8h..8h+7) of one sub-block: unsigned quants, or for Q8_0 the
// signed q in sg[] and |q| in u[].
template <DType T>
inline void unpack_half(const uint8_t* q, int h, __m256i u[8], __m256i sg[8]) {
  if constexpr (P<T>::kNib) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int p = 0; p < 4; ++p) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * p + 32 * h));
      u[p] = _mm256_and_si256(v, low4);
      u[p + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    }
    if constexpr (P<T>::kHigh) {
      // Slice s's plane is a little-endian u64 with bit 4r+t for row r: half h is its bytes 4h..4h+3.
      const __m256i bit5 = _mm256_set1_epi8(0x10);
      for (int s = 0; s < 8; ++s) {
        uint32_t m;
        std::memcpy(&m, q + 256 + 8 * s + 4 * h, 4);
        u[s] = _mm256_or_si256(u[s], _mm256_and_si256(bits_to_bytes(m), bit5));
      }
    }
    if constexpr (P<T>::kSix) {
      // Bits 2k..2k+1 of H[hh] are slice 4hh+k's high bits: move them to bits 4..5 of each byte
      // (16-bit shifts; the 0x30 mask drops what crossed a byte boundary).
      const __m256i m30 = _mm256_set1_epi8(0x30);
      for (int hh = 0; hh < 2; ++hh) {
        const __m256i H = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 256 + 64 * hh + 32 * h));
        u[4 * hh + 0] = _mm256_or_si256(u[4 * hh + 0], _mm256_and_si256(_mm256_slli_epi16(H, 4), m30));
        u[4 * hh + 1] = _mm256_or_si256(u[4 * hh + 1], _mm256_and_si256(_mm256_slli_epi16(H, 2), m30));
        u[4 * hh + 2] = _mm256_or_si256(u[4 * hh + 2], _mm256_and_si256(H, m30));
        u[4 * hh + 3] = _mm256_or_si256(u[4 * hh + 3], _mm256_and_si256(_mm256_srli_epi16(H, 2), m30));
      }
    }
    (void)sg;
  } else {
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
    for (int s = 0; s < 8; ++s) {
      sg[s] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * s + 32 * h)), flip);
      u[s] = _mm256_abs_epi8(sg[s]);  // |−128| = 0x80, read as unsigned 128
    }
  }
}

// maddubs of slice s against the column's 4 activation bytes of that slice.
template <DType T>
inline __m256i slice_dot16(const __m256i u[8], const __m256i sg[8], const int8_t* xq, int s) {
  const __m256i bx = _mm256_set1_epi32(load_i32(xq + 4 * s));
  if constexpr (P<T>::kNib) {
    (void)sg;
    return _mm256_maddubs_epi16(u[s], bx);
  } else {
    return _mm256_maddubs_epi16(u[s], _mm256_sign_epi8(bx, sg[s]));
  }
}

// int32 dots of slices [s0, s0 + n) for the 8 rows of the half, plus `init`.
template <DType T>
inline __m256i dot_slices(const __m256i u[8], const __m256i sg[8], const int8_t* xq, int s0, int n, __m256i init) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc = init;
  for (int g = s0; g < s0 + n; g += P<T>::kGroup) {
    __m256i m = slice_dot16<T>(u, sg, xq, g);
    for (int k = 1; k < P<T>::kGroup; ++k) m = _mm256_add_epi16(m, slice_dot16<T>(u, sg, xq, g + k));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(m, ones));
  }
  return acc;
}

inline __m256 u8x8_to_ps(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256 i8x8_to_ps(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256 half8_to_ps(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Rows 8·h0 .. 8·(h0 + NH) of one group (NH halves of 8 rows) × C columns, all K. y points at
// (column 0, row 8·h0); columns are ldy apart.
//
// Two shapes are used. Prefill (NH = 1): the halves are separate tiles, the second pass finding
// the group's lines in L1/L2, because with both halves in one pass the 16 unpacked slices alone
// fill the 16 ymm registers and the compiler spills the shared activation broadcasts instead
// (measured ~30% slower at 64 columns). Single-column decode (NH = 2, C = 1): there is no column
// to reuse slices for, so nothing needs to stay in registers, and one pass that consumes each
// 64-byte line whole keeps a DRAM-bound matrix (an LM head) streaming at full rate, where two
// passes halve the work done per line fetched on the first.
template <DType T, int C, int NH>
void tile(const uint8_t* group, int h0, int64_t nu, const uint8_t* x, size_t x_stride, float* y, int64_t ldy) {
  __m256 acc[NH][C];
  for (int hh = 0; hh < NH; ++hh)
    for (int j = 0; j < C; ++j) acc[hh][j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nu; ++b) {
    const uint8_t* unit = group + b * unit_bytes<T>();
    for (int sb = 0; sb < subs<T>(); ++sb) {
      const int64_t xi = b * subs<T>() + sb;
      for (int hh = 0; hh < NH; ++hh) {
        const int h = h0 + hh;
        // Per-row constants of this sub-block and half (packed.h): da, db (Q6_K only differs), mn.
        const __m256 d = half8_to_ps(unit + 16 * h);
        __m256 da = d, db = d, mn = _mm256_setzero_ps();
        if constexpr (P<T>::kMin) mn = half8_to_ps(unit + 32 + 16 * h);  // Q4_1/Q5_1: m itself; K: dmin
        if constexpr (P<T>::kK && P<T>::kMin) {
          da = db = _mm256_mul_ps(u8x8_to_ps(unit + 64 + 16 * sb + 8 * h), d);
          mn = _mm256_mul_ps(u8x8_to_ps(unit + 192 + 16 * sb + 8 * h), mn);  // subtracted below
        }
        if constexpr (P<T>::kSix) {
          da = _mm256_mul_ps(i8x8_to_ps(unit + 32 + 16 * (2 * sb) + 8 * h), d);
          db = _mm256_mul_ps(i8x8_to_ps(unit + 32 + 16 * (2 * sb + 1) + 8 * h), d);
        }
        __m256i u[8], sg[8];
        unpack_half<T>(unit + P<T>::kHeader + sb * sub_bytes<T>(), h, u, sg);
        for (int j = 0; j < C; ++j) {
          const block_q8_r& xb = reinterpret_cast<const block_q8_r*>(x + j * x_stride)[xi];
          const __m256 dx = _mm256_set1_ps(xb.d);
          __m256& a = acc[hh][j];
          if constexpr (P<T>::kSix) {
            // Elements 0..15 and 16..31 have their own scales.
            const __m256i sa = dot_slices<T>(u, sg, xb.qs, 0, 4, _mm256_set1_epi32(-P<T>::kOffset * xb.s[0]));
            const __m256i sbv = dot_slices<T>(u, sg, xb.qs, 4, 4, _mm256_set1_epi32(-P<T>::kOffset * xb.s[1]));
            a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sa), _mm256_mul_ps(da, dx), a);
            a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sbv), _mm256_mul_ps(db, dx), a);
          } else {
            const __m256i init =
                P<T>::kOffset ? _mm256_set1_epi32(-P<T>::kOffset * (xb.s[0] + xb.s[1])) : _mm256_setzero_si256();
            const __m256i s = dot_slices<T>(u, sg, xb.qs, 0, 8, init);
            a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(da, dx), a);
          }
          if constexpr (P<T>::kMin) {
            const __m256 sx = _mm256_set1_ps(xb.d * static_cast<float>(xb.s[0] + xb.s[1]));
            if constexpr (P<T>::kK)
              a = _mm256_fnmadd_ps(mn, sx, a);
            else
              a = _mm256_fmadd_ps(mn, sx, a);
          }
        }
      }
    }
  }
  for (int hh = 0; hh < NH; ++hh)
    for (int j = 0; j < C; ++j) _mm256_storeu_ps(y + j * ldy + 8 * hh, acc[hh][j]);
}

// Runs tile<T, n, 1> (one half) for 1 ≤ n ≤ C.
template <DType T, int C>
void tile_n(int n, const uint8_t* group, int h, int64_t nu, const uint8_t* x, size_t xs, float* y, int64_t ldy) {
  if constexpr (C > 1)
    if (n < C) return tile_n<T, C - 1>(n, group, h, nu, x, xs, y, ldy);
  tile<T, C, 1>(group, h, nu, x, xs, y, ldy);
}

// Columns are taken in blocks of kColBlock so that a block's activations (kColBlock · K · 1.25
// bytes) stay in L2 while every row group of the chunk passes over them.
constexpr int64_t kColBlock = 64;

template <DType T>
void packed_matmul(const MatmulArgs& a) {
  constexpr int64_t kUnit = P<T>::kK ? 256 : 32;
  if (a.K % kUnit != 0) throw_bad_row_length("matmul", T, a.K);
  // A plain const char* message: this unit must not instantiate std::string code (kernel_errors.h).
  if (a.r0 % kPackRows != 0 || a.r1 % kPackRows != 0)
    throw std::invalid_argument("packed matmul: rows do not start and end on 16-row groups");
  const int64_t nu = a.K / kUnit;
  const size_t group_bytes = unit_bytes<T>() * static_cast<size_t>(nu);
  const auto* w = static_cast<const uint8_t*>(a.w);
  const auto* x = static_cast<const uint8_t*>(a.x);
  for (int64_t cb = 0; cb < a.ncols; cb += kColBlock) {
    const int64_t ce = std::min(a.ncols, cb + kColBlock);
    for (int64_t r = a.r0; r < a.r1; r += kPackRows) {
      const uint8_t* group = w + static_cast<size_t>(r / kPackRows) * group_bytes;
      if (ce - cb == 1) {  // one column: both halves in one pass (see tile)
        tile<T, 1, 2>(group, 0, nu, x + cb * a.x_stride, a.x_stride, a.y + cb * a.ldy + r, a.ldy);
        continue;
      }
      for (int h = 0; h < 2; ++h)
        for (int64_t c = cb; c < ce; c += P<T>::kCols) {
          const int n = static_cast<int>(std::min<int64_t>(P<T>::kCols, ce - c));
          tile_n<T, P<T>::kCols>(n, group, h, nu, x + c * a.x_stride, a.x_stride, a.y + c * a.ldy + r + 8 * h, a.ldy);
        }
    }
  }
}

}  // namespace

void fill_avx2_matmul_packed(KernelTable& t) {
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
