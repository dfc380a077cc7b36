// Row-interleaved ("packed") weights for the GEMM micro-kernels.
//
// The GGUF layout keeps each weight row's blocks together, so a SIMD dot product fills a vector
// register with consecutive elements of ONE row and must reduce horizontally and convert/scale
// per (row, column) pair. Repacked, a 512-bit register holds 4 consecutive elements of each of 16
// rows: one vpdpbusd against a broadcast 4-byte group of an activation advances 16 outputs at
// once, and the per-block float work (convert, scale, accumulate) is done once per 16 outputs
// instead of once per output. Packing happens once at load time (pack_rows), is the same on every
// CPU (plain C++), and only a kernel table that has `packed_matmul[type]` uses it.
//
// Layout of a packed matrix: row groups of kPackRows = 16 rows; group g holds rows [16g, 16g+16).
// A group is a sequence of "units", one per block of the GGUF rows (32 elements for the legacy
// types, a 256-element super-block for the K-quants). Quants are stored as "slices": slice s of a
// 32-element sub-block holds elements 4s..4s+3 of each row, row r in bytes 4r..4r+3 (64 bytes),
// byte value = the unsigned quant u. 4-bit quants are stored as 4 packed 64-byte vectors P[0..3]:
// low nibbles of P[p] are slice p, high nibbles slice p+4 (256 bytes a sub-block).
//
//   Q4_0/Q5_0/Q8_0 unit (32):  d[16] fp16 | quants | (Q5) qh
//   Q4_1/Q5_1 unit (32):       d[16] fp16 | m[16] fp16 | quants | (Q5) qh
//       quants: 4-bit packed (256 B), Q8_0: 8 slices of u = q + 128 (512 B)
//       qh: per slice a little-endian u64, bit 4r+t = 5th bit of element 4s+t of row r (64 B)
//   Q4_K/Q5_K unit (256):      d[16] fp16 | dmin[16] fp16 | sc[8][16] u8 | mn[8][16] u8 |
//                              8 × (4-bit packed quants (256 B) | (Q5_K) qh (64 B))
//   Q6_K unit (256):           d[16] fp16 | sc[16][16] i8 |
//                              8 × (low nibbles packed (256 B) | high 2 bits (128 B): two 64-byte
//                              vectors H[0..1], bits 2k..2k+1 of H[h] byte 4r+t = high bits of slice 4h+k)
//   IQ4_NL unit (32):          d[16] fp16 | 4-bit packed table indices (256 B)
//   MXFP4 unit (32):           d[16] f32 (= 2^(e−128), exact) | 4-bit packed table indices (256 B)
//   IQ4_XS unit (256):         d[16] fp16 | sc[8][16] i8 (= ls − 32) | 8 × 4-bit packed table indices (256 B)
//       for these "table types" the unsigned quant is u = level[index] + 128 (level: IQ4_NL's
//       non-linear table, MXFP4's doubled e2m1 values); kernels look the 16 levels up with one
//       byte shuffle (vpshufb / tbl) and use them offset (AVX-512: unsigned u for vpdpbusd) or signed.
//
// so a unit is 16 × the GGUF block (Q4_0 288, Q4_1 320, Q5_0 352, Q5_1 384, Q8_0 544, Q6_K 3360
// bytes) or a few bytes more (Q4_K 2368 vs 2304, Q5_K 2880 vs 2816: the 6-bit scales unpacked;
// IQ4_NL 288 = 16 × 18; IQ4_XS 2208 vs 2176; MXFP4 320 vs 272: f32 scales).
// Per 32-element sub-block j of a unit, row r, the weight is
//   w = da·(u − off) for elements 0..15 and db·(u − off) for 16..31, plus mn
// with (da, db, off, mn) = (d, d, 8 | 16 | 128, 0) for Q4_0 / Q5_0 / Q8_0; (d, d, 0, m) for
// Q4_1 / Q5_1; (d·sc_j, d·sc_j, 0, −dmin·mn_j) for Q4_K / Q5_K; (d·sc_2j, d·sc_2j+1, 32, 0) Q6_K;
// (d, d, 128, 0) for IQ4_NL / MXFP4; (d·sc_j, d·sc_j, 128, 0) for IQ4_XS.
//
// Activations for packed kernels are Q8_R blocks (block_q8_r below): Q8_0's quants and scale
// (the scale rounded through fp16 exactly as Q8_0 stores it) plus the integer sums of the two
// 16-element halves, which turn the offsets into exact integer corrections and the mins into one
// FMA. For the K-quants this is also MORE accurate than llama.cpp's Q8_K activations (one scale
// per 256 elements, where a single outlier coarsens the whole block): on Gemma 3 the teacher-
// forced error against the exact reference falls by about a third (bench/README.md).
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/dtype.h"
#include "kernels/kernels.h"
#include "quant/blocks.h"

namespace edgellm::kernels {

constexpr int kPackRows = 16;

#pragma pack(push, 1)
struct block_q8_r {
  int8_t qs[32];
  float d;        // fp16-exact scale (as Q8_0's)
  int16_t s[2];   // Σ qs[0..15], Σ qs[16..31]
};
#pragma pack(pop)
static_assert(sizeof(block_q8_r) == 40, "q8_r");

// The layout above as compile-time constants of a packable type T: the one definition every
// packed kernel (x86/avx512, x86/avx2, arm/neon_dotprod, arm/neon_i8mm) and packed_layout.cpp build on.
template <DType T>
struct PackedFormat {
  // Non-linear 4-bit types: the nibbles are indices into a 16-entry table of signed levels (kLevels).
  static constexpr bool kLut = T == DType::IQ4_NL || T == DType::IQ4_XS || T == DType::MXFP4;
  static constexpr bool kK = T == DType::Q4_K || T == DType::Q5_K || T == DType::Q6_K || T == DType::IQ4_XS;  // 256-element units
  static constexpr bool kNib = T != DType::Q8_0;                                        // 4-bit packed quants
  static constexpr bool kHigh = T == DType::Q5_0 || T == DType::Q5_1 || T == DType::Q5_K;  // 5th-bit plane
  static constexpr bool kSix = T == DType::Q6_K;                                         // 2-bit high plane
  static constexpr bool kMin = T == DType::Q4_1 || T == DType::Q5_1 || T == DType::Q4_K || T == DType::Q5_K;
  static constexpr bool kSubScale = T == DType::IQ4_XS;  // sc[8][16] i8 = ls − 32 after d
  static constexpr bool kF32Scale = T == DType::MXFP4;   // d[16] is f32 (2^(e−128) does not fit fp16)
  // w = da·(u − kOffset); for the table types u = level + 128
  static constexpr int kOffset = T == DType::Q4_0 ? 8 : T == DType::Q5_0 ? 16 : T == DType::Q8_0 || kLut ? 128
                               : T == DType::Q6_K ? 32 : 0;
  // d[16] (+ m[16] or dmin[16]) (+ K-quant scales)
  static constexpr int kHeader = kF32Scale ? 64 : kSubScale ? 32 + 128 : kK ? (kSix ? 32 + 256 : 64 + 128 + 128) : (kMin ? 64 : 32);
  static constexpr int kSubs = kK ? 8 : 1;  // 32-element sub-blocks per unit
  static constexpr size_t kSubBytes = (kNib ? 256 : 512) + (kHigh ? 64 : 0) + (kSix ? 128 : 0);
  static constexpr size_t kUnitBytes = kHeader + kSubs * kSubBytes;
  static constexpr int64_t kUnitElems = 32 * kSubs;
};

// The signed levels the nibbles of a table type index (IQ4_NL and IQ4_XS share one table).
template <DType T>
constexpr const int8_t* packed_levels() {
  static_assert(PackedFormat<T>::kLut, "packed_levels: not a table type");
  return T == DType::MXFP4 ? kMxfp4Values : kIq4nlValues;
}
// The 16 levels as bytes level + Bias (a byte-shuffle lookup table): Bias 128 gives the unsigned
// u of the layout, 0 the signed levels.
struct LevelBytes {
  alignas(16) uint8_t b[16];
};
template <DType T, int Bias>
constexpr LevelBytes level_bytes() {
  LevelBytes r{};
  for (int k = 0; k < 16; ++k) r.b[k] = static_cast<uint8_t>(packed_levels<T>()[k] + Bias);
  return r;
}

// Whether `t` has a packed layout (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4).
bool packable(DType t);
// Elements of one unit (32 or 256) and bytes of one unit of a 16-row group.
int64_t packed_unit_elems(DType t);
size_t packed_unit_bytes(DType t);
// Bytes of one packed row group of K elements.
inline size_t packed_group_bytes(DType t, int64_t K) {
  return packed_unit_bytes(t) * static_cast<size_t>(K / packed_unit_elems(t));
}

// Packs rows [16·g0, 16·g1) of a row-major GGUF matrix `src` (K elements a row, type t) into
// `dst` (which receives the groups g0..g1-1 at their final offsets). Throws std::invalid_argument
// when t is not packable or K is not a multiple of its block.
void pack_rows(DType t, const void* src, void* dst, int64_t K, int64_t g0, int64_t g1);

// Unpacks one row back to GGUF blocks (32-element types only; tests: packing round-trips exactly).
void unpack_row(DType t, const void* packed, void* dst_row, int64_t K, int64_t row);

// Scalar reference of packed_matmul: y[c·ldy + r] = dot(row r, X column c) for r in [r0, r1)
// (multiples of 16), X in Q8_R. Same contract as MatmulArgs with `w` the packed matrix.
void packed_matmul_ref(DType t, const MatmulArgs& a);

// Scalar Q8_R quantizer (the reference every SIMD quantize[Q8_R] is tested against).
void quantize_q8_r_ref(const float* x, void* y, int64_t n);

}  // namespace edgellm::kernels
