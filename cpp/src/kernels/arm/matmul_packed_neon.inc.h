// NEON + dot product (armv8.2-a+dotprod) matmul over row-interleaved weights (kernels/packed.h):
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4, against Q8_R activations. Plain armv8 neon
// has no packed kernels (yet), so on ARM only neon-dotprod and neon-i8mm repack weights at load.
// Included by neon_dotprod/matmul_packed_neon_dotprod.cpp (PackedNeonDotprod as is) and by
// neon_i8mm/matmul_packed_neon_i8mm.cpp (the same slices, dotted two columns at a time by smmla).
//
// A 64-byte slice of the layout (4 elements of each of 16 rows) is 4 int8x16 registers: rows
// 0..3, 4..7, 8..11, 12..15, each register 4 rows × 4 consecutive elements. That is exactly the
// operand shape of `sdot` by element: vdotq_laneq_s32(acc, w, x, lane) multiplies the 4 bytes of
// each row with the broadcast 4-byte group `lane` of x and adds them into that row's int32 lane.
// So per 4-row quad and column, 8 sdots (one per slice, the column's 32 activation bytes held in
// two registers) give the quad's 4 exact int32 sub-block dots: no horizontal sums, and the float
// work (one convert, one FMA by d_w·d_x, one FMA for the mins) is done once per 4 outputs.
//
// Quants are used as signed int8: the unsigned u ≤ 63 of Q4/Q5/Q6 are valid signed bytes and
// their offsets (Q4_0 8, Q5_0 16, Q6_K 32) are removed as exact integers (−offset·Σx from the
// Q8_R half sums). Q8_0's u = q + 128 is not a valid signed byte: it is XOR-ed with 0x80 back to
// the signed q, and then needs no −128·Σx correction at all. The table types (IQ4_NL, IQ4_XS,
// MXFP4) look their 4-bit indices up with one tbl (vqtbl1q_u8) straight into the signed levels.
//
// A tile (kernels/packed_driver.inc.h) is NQ quads (4·NQ rows) × C columns: each sub-block's slices are unpacked once per quad
// and reused by all C columns. Multi-column tiles take 2 quads × 4 columns (8 float accumulators,
// 8 unpacked slices, 2 activation registers per column and the constants fit the 32 vector
// registers); a single column (decode) takes the whole 16-row group in one pass so each 64-byte
// line of the matrix is consumed whole when it arrives from DRAM.
//
// No speed figures: this was written and checked under qemu (no ARM hardware at hand).
#pragma once
#include <cstring>

#include "kernels/arm/simd_neon.h"
#include "kernels/packed_driver.inc.h"

#if !defined(__ARM_FEATURE_DOTPROD)
#error "matmul_packed_neon.inc.h needs -march=armv8.2-a+dotprod (or more)"
#endif

namespace edgellm::kernels {
namespace {

// The layout's per-type constants (kernels/packed.h); Q8_0 is dotted as signed q here.
template <DType T>
struct P : PackedFormat<T> {
  // signed q (Q8_0, and the table types' looked-up levels): no offset (see top)
  static constexpr int kOffset = T == DType::Q8_0 || PackedFormat<T>::kLut ? 0 : PackedFormat<T>::kOffset;
};

// The 8 slices of quad q (rows 4q..4q+3) of one sub-block as signed bytes.
template <DType T>
inline void unpack_quad(const uint8_t* sub, int q, int8x16_t w[8]) {
  if constexpr (P<T>::kNib) {
    const uint8x16_t low4 = vdupq_n_u8(0x0F);
    uint8x16_t u[8];
    for (int p = 0; p < 4; ++p) {
      const uint8x16_t v = vld1q_u8(sub + 64 * p + 16 * q);
      u[p] = vandq_u8(v, low4);
      u[p + 4] = vshrq_n_u8(v, 4);
    }
    if constexpr (P<T>::kLut) {
      // Table types: one tbl turns each 4-bit index into its signed level.
      static constexpr LevelBytes kLut = level_bytes<T, 0>();
      const uint8x16_t table = vld1q_u8(kLut.b);
      for (int s = 0; s < 8; ++s) u[s] = vqtbl1q_u8(table, u[s]);
    }
    if constexpr (P<T>::kHigh) {
      // Slice s's plane is a little-endian u64 with bit 4r+t for row r, element t: quad q is its
      // u16 at byte 2q, and bit i of that u16 belongs to byte i of the quad's register.
      static const uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
      const uint8x16_t bit = vld1q_u8(kBit), bit5 = vdupq_n_u8(0x10);
      for (int s = 0; s < 8; ++s) {
        const uint8_t* h = sub + 256 + 8 * s + 2 * q;
        const uint8x16_t bytes = vcombine_u8(vdup_n_u8(h[0]), vdup_n_u8(h[1]));
        u[s] = vorrq_u8(u[s], vandq_u8(vtstq_u8(bytes, bit), bit5));
      }
    }
    if constexpr (P<T>::kSix) {
      // Bits 2k..2k+1 of H[hh] are slice 4hh+k's high bits: move them to bits 4..5 of each byte.
      const uint8x16_t m30 = vdupq_n_u8(0x30);
      for (int hh = 0; hh < 2; ++hh) {
        const uint8x16_t H = vld1q_u8(sub + 256 + 64 * hh + 16 * q);
        u[4 * hh + 0] = vorrq_u8(u[4 * hh + 0], vandq_u8(vshlq_n_u8(H, 4), m30));
        u[4 * hh + 1] = vorrq_u8(u[4 * hh + 1], vandq_u8(vshlq_n_u8(H, 2), m30));
        u[4 * hh + 2] = vorrq_u8(u[4 * hh + 2], vandq_u8(H, m30));
        u[4 * hh + 3] = vorrq_u8(u[4 * hh + 3], vandq_u8(vshrq_n_u8(H, 2), m30));
      }
    }
    for (int s = 0; s < 8; ++s) w[s] = vreinterpretq_s8_u8(u[s]);
  } else {
    const uint8x16_t flip = vdupq_n_u8(0x80);
    for (int s = 0; s < 8; ++s) w[s] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(sub + 64 * s + 16 * q), flip));
  }
}

// acc + the quad's dots of slices 0..3 (elements 0..15, activation register x0) and of slices
// 4..7 (elements 16..31, x1). The lane of an sdot must be an immediate, hence spelled out.
inline int32x4_t dot_lo(int32x4_t acc, const int8x16_t w[8], int8x16_t x0) {
  acc = vdotq_laneq_s32(acc, w[0], x0, 0);
  acc = vdotq_laneq_s32(acc, w[1], x0, 1);
  acc = vdotq_laneq_s32(acc, w[2], x0, 2);
  return vdotq_laneq_s32(acc, w[3], x0, 3);
}
inline int32x4_t dot_hi(int32x4_t acc, const int8x16_t w[8], int8x16_t x1) {
  acc = vdotq_laneq_s32(acc, w[4], x1, 0);
  acc = vdotq_laneq_s32(acc, w[5], x1, 1);
  acc = vdotq_laneq_s32(acc, w[6], x1, 2);
  return vdotq_laneq_s32(acc, w[7], x1, 3);
}

// 4 fp16 / u8 / i8 per-row constants as floats.
inline float32x4_t half4_to_f32(const uint8_t* p) {
  uint16_t h[4];
  std::memcpy(h, p, 8);
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
}
inline float32x4_t u8x4_to_f32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  const uint16x8_t w = vmovl_u8(vreinterpret_u8_u32(vdup_n_u32(v)));
  return vcvtq_f32_u32(vmovl_u16(vget_low_u16(w)));
}
inline float32x4_t i8x4_to_f32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  const int16x8_t w = vmovl_s8(vreinterpret_s8_u32(vdup_n_u32(v)));
  return vcvtq_f32_s32(vmovl_s16(vget_low_s16(w)));
}

// The neon-dotprod primitives of kernels/packed_driver.inc.h: a part is a quad (4 rows, one
// register); multi-column tiles take 2 quads × 4 columns (see top).
struct PackedNeonDotprod {
  static constexpr int kPartRows = 4;
  static constexpr int kTileParts = 2;
  // Single-column matmuls: no software prefetch (the x86 tables' one is not measured on a NEON
  // machine yet, packed_driver.inc.h).
  static constexpr int kDecodePrefetch = 0;
  template <DType T>
  static constexpr int offset() { return P<T>::kOffset; }
  template <DType T>
  static constexpr int max_cols() { return 4; }
  template <DType T>
  static int cols(int64_t) { return 4; }

  template <DType T>
  struct Slices {
    int8x16_t w[8];
  };
  template <DType T>
  static void unpack(const uint8_t* sub, int q, Slices<T>& s) { unpack_quad<T>(sub, q, s.w); }
  template <DType T, int H>
  static int32x4_t dot_half(const Slices<T>& s, const int8_t* xq, int32x4_t init) {
    if constexpr (H == 0)
      return dot_lo(init, s.w, vld1q_s8(xq));
    else
      return dot_hi(init, s.w, vld1q_s8(xq + 16));
  }
  template <DType T>
  static int32x4_t dot(const Slices<T>& s, const int8_t* xq, int32x4_t init) {
    return dot_hi(dot_lo(init, s.w, vld1q_s8(xq)), s.w, vld1q_s8(xq + 16));
  }

  using F = float32x4_t;
  static F zero() { return vdupq_n_f32(0.0f); }
  static F set1(float v) { return vdupq_n_f32(v); }
  static int32x4_t set1_i32(int32_t v) { return vdupq_n_s32(v); }
  static F mul(F a, F b) { return vmulq_f32(a, b); }
  static F fmadd(F a, F b, F acc) { return vfmaq_f32(acc, a, b); }
  static F fnmadd(F a, F b, F acc) { return vfmsq_f32(acc, a, b); }
  static F cvt(int32x4_t v) { return vcvtq_f32_s32(v); }
  static void store(float* y, F v) { vst1q_f32(y, v); }
  static F half_rows(const uint8_t* p) { return half4_to_f32(p); }
  static F f32_rows(const uint8_t* p) { return vld1q_f32(reinterpret_cast<const float*>(p)); }
  static F u8_rows(const uint8_t* p) { return u8x4_to_f32(p); }
  static F i8_rows(const uint8_t* p) { return i8x4_to_f32(p); }
};

}  // namespace

}  // namespace edgellm::kernels
