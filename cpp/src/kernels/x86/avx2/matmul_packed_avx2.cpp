// AVX2 + FMA + F16C matmul over row-interleaved weights (kernels/packed.h): Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4, against Q8_R activations. No AVX-512, no VNNI: this is the
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
// lying in [−127, 127] (Q8_0's d = amax/127), as −(−128) does not exist in int8. The table types
// (IQ4_NL, IQ4_XS, MXFP4) do the same: one vpshufb turns the 4-bit indices into the signed
// levels q (|q| ≤ 127, pair sums ≤ 2·127·127), dotted with the sign trick and no offset.
//
// A tile (kernels/packed_driver.inc.h) is one half of a 16-row group (8 rows) × C columns
// (C ≤ kCols of the type), so each sub-block's slices are decoded once and reused by all C
// columns; a single column takes both halves in one pass.
//
// Why halves for prefill: with both halves in one pass the 16 unpacked slices alone fill the 16
// ymm registers and the compiler spills the shared activation broadcasts instead (measured ~30%
// slower at 64 columns); the second pass finds the group's lines in L1/L2. Single-column decode
// has no column to reuse slices for, so nothing needs to stay in registers, and one pass that
// consumes each 64-byte line whole keeps a DRAM-bound matrix (an LM head) streaming at full rate.
#include <cstring>

#include "kernels/packed_driver.inc.h"
#include "kernels/x86/simd_x86.h"

namespace edgellm::kernels {
namespace {

// The layout's per-type constants (kernels/packed.h; Q8_0 is dotted as signed q here), plus
// kGroup: how many maddubs results may be added in int16 before widening. A pair sum is at most
// 2·umax·128 in magnitude (|x| ≤ 128): 4-bit 3840 (8 fit under 32767), 5-bit 7936 (4 fit),
// 6-bit 16128 (2 fit), Q8_0 and the table types with the sign trick 32512 (1);
// and kCols: the most columns a tile takes. Each sub-block's slices are unpacked once per tile,
// so the types with a costly unpack (Q5's bit plane, Q6_K's 2-bit plane) amortize it over more
// columns; 4-bit and Q8_0 tiles are smaller so that accumulators and slices spill less. Measured
// single thread, 1536×1536, 64 columns (GFLOP/s, C = 4 / 5 / 6 / 8): Q4_0 243/267/223/220,
// Q4_K 220/249/201/202, Q8_0 177/180/163/157, Q5_0 192/212/226/237, Q5_K 170/186/198/209,
// Q6_K 185/193/204/208.
template <DType T>
struct P : PackedFormat<T> {
  using F = PackedFormat<T>;
  static constexpr bool kSigned = T == DType::Q8_0 || F::kLut;  // dotted as signed q with the sign trick
  static constexpr int kOffset = kSigned ? 0 : F::kOffset;       // signed q: no offset (see top)
  static constexpr int kGroup = kSigned ? 1 : F::kSix ? 2 : F::kHigh ? 4 : 8;
  static constexpr int kCols = F::kHigh || F::kSix ? 8 : 5;
};

// Byte i of the result is 0xFF where bit i of m is set, else 0 (i = 0..31).
inline __m256i bits_to_bytes(uint32_t m) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int32_t>(m)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  // Set every bit but bit i%8 of byte i: the byte is all ones exactly when bit i was set.
  const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
  return _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi64x(-1));
}

// The 8 slices of half h (rows 8h..8h+7) of one sub-block: unsigned quants, or for Q8_0 and the
// table types the signed q in sg[] and |q| in u[].
template <DType T>
inline void unpack_half(const uint8_t* q, int h, __m256i u[8], __m256i sg[8]) {
  if constexpr (P<T>::kNib) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int p = 0; p < 4; ++p) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * p + 32 * h));
      u[p] = _mm256_and_si256(v, low4);
      u[p + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    }
    if constexpr (P<T>::kLut) {
      // Table types: index → signed level (vpshufb looks up within each 128-bit lane).
      static constexpr LevelBytes kLut = level_bytes<T, 0>();
      const __m256i table = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kLut.b)));
      for (int s = 0; s < 8; ++s) {
        sg[s] = _mm256_shuffle_epi8(table, u[s]);
        u[s] = _mm256_abs_epi8(sg[s]);
      }
      return;
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
  if constexpr (!P<T>::kSigned) {
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

// The AVX2 primitives of kernels/packed_driver.inc.h: a part is a half (8 rows, one ymm).
struct PackedAvx2 {
  static constexpr int kPartRows = 8;
  static constexpr int kTileParts = 1;  // prefill tiles take one half (see top)
  // Single-column matmuls: each unit's bytes 4608 ahead prefetched (two Q4_K units;
  // packed_driver.inc.h has the measurements).
  static constexpr int kDecodePrefetch = 4608;
  template <DType T>
  static constexpr int offset() { return P<T>::kOffset; }
  template <DType T>
  static constexpr int max_cols() { return P<T>::kCols; }
  template <DType T>
  static int cols(int64_t) { return P<T>::kCols; }

  template <DType T>
  struct Slices {
    __m256i u[8], sg[8];  // unsigned quants; Q8_0 and table types: |q| and the signed q
  };
  template <DType T>
  static void unpack(const uint8_t* sub, int h, Slices<T>& s) { unpack_half<T>(sub, h, s.u, s.sg); }
  template <DType T>
  static __m256i dot(const Slices<T>& s, const int8_t* xq, __m256i init) { return dot_slices<T>(s.u, s.sg, xq, 0, 8, init); }
  template <DType T, int H>
  static __m256i dot_half(const Slices<T>& s, const int8_t* xq, __m256i init) {
    return dot_slices<T>(s.u, s.sg, xq, 4 * H, 4, init);
  }

  using F = __m256;
  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static __m256i set1_i32(int32_t v) { return _mm256_set1_epi32(v); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fmadd(F a, F b, F acc) { return _mm256_fmadd_ps(a, b, acc); }
  static F fnmadd(F a, F b, F acc) { return _mm256_fnmadd_ps(a, b, acc); }
  static F cvt(__m256i v) { return _mm256_cvtepi32_ps(v); }
  static void store(float* y, F v) { _mm256_storeu_ps(y, v); }
  static F half_rows(const uint8_t* p) { return half8_to_ps(p); }
  static F f32_rows(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
  static F u8_rows(const uint8_t* p) { return u8x8_to_ps(p); }
  static F i8_rows(const uint8_t* p) { return i8x8_to_ps(p); }
};

}  // namespace

void fill_avx2_matmul_packed(KernelTable& t) { fill_packed_matmul<PackedAvx2>(t); }

}  // namespace edgellm::kernels
