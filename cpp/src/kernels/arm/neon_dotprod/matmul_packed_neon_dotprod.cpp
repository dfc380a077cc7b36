// NEON + dot product (armv8.2-a+dotprod) matmul over row-interleaved weights (kernels/packed.h):
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, against Q8_R activations. Plain armv8 neon
// has no packed kernels (yet), so on ARM only this level repacks weights at load.
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
// the signed q, and then needs no −128·Σx correction at all.
//
// A tile is NQ quads (4·NQ rows) × C columns: each sub-block's slices are unpacked once per quad
// and reused by all C columns. Multi-column tiles take 2 quads × 4 columns (8 float accumulators,
// 8 unpacked slices, 2 activation registers per column and the constants fit the 32 vector
// registers); a single column (decode) takes the whole 16-row group in one pass so each 64-byte
// line of the matrix is consumed whole when it arrives from DRAM.
//
// No speed figures: this was written and checked under qemu (no ARM hardware at hand).
#include <arm_neon.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "kernels/kernel_errors.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"

#if !defined(__ARM_FEATURE_DOTPROD)
#error "this unit must be compiled with -march=armv8.2-a+dotprod"
#endif

namespace edgellm::kernels {
namespace {

// The layout's per-type constants (kernels/packed.h); Q8_0 is dotted as signed q here.
template <DType T>
struct P : PackedFormat<T> {
  static constexpr int kOffset = T == DType::Q8_0 ? 0 : PackedFormat<T>::kOffset;  // signed q: no offset (see top)
};

template <DType T>
constexpr size_t sub_bytes() { return P<T>::kSubBytes; }
template <DType T>
constexpr int subs() { return P<T>::kSubs; }
template <DType T>
constexpr size_t unit_bytes() { return P<T>::kUnitBytes; }

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

// Rows 4·q0 .. 4·(q0 + NQ) of one group (NQ quads of 4 rows) × C columns, all K. y points at
// (column 0, row 4·q0); columns are ldy apart.
template <DType T, int C, int NQ>
void tile(const uint8_t* group, int q0, int64_t nu, const uint8_t* x, size_t x_stride, float* y, int64_t ldy) {
  float32x4_t acc[NQ][C];
  for (int qq = 0; qq < NQ; ++qq)
    for (int j = 0; j < C; ++j) acc[qq][j] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nu; ++b) {
    const uint8_t* unit = group + b * unit_bytes<T>();
    for (int sb = 0; sb < subs<T>(); ++sb) {
      const int64_t xi = b * subs<T>() + sb;
      for (int qq = 0; qq < NQ; ++qq) {
        const int q = q0 + qq;
        // Per-row constants of this sub-block and quad (packed.h): da, db (Q6_K only differs), mn.
        const float32x4_t d = half4_to_f32(unit + 8 * q);
        float32x4_t da = d, db = d, mn = vdupq_n_f32(0.0f);
        if constexpr (P<T>::kMin) mn = half4_to_f32(unit + 32 + 8 * q);  // Q4_1/Q5_1: m itself; K: dmin
        if constexpr (P<T>::kK && P<T>::kMin) {
          da = db = vmulq_f32(u8x4_to_f32(unit + 64 + 16 * sb + 4 * q), d);
          mn = vmulq_f32(u8x4_to_f32(unit + 192 + 16 * sb + 4 * q), mn);  // subtracted below
        }
        if constexpr (P<T>::kSix) {
          da = vmulq_f32(i8x4_to_f32(unit + 32 + 16 * (2 * sb) + 4 * q), d);
          db = vmulq_f32(i8x4_to_f32(unit + 32 + 16 * (2 * sb + 1) + 4 * q), d);
        }
        int8x16_t w[8];
        unpack_quad<T>(unit + P<T>::kHeader + sb * sub_bytes<T>(), q, w);
        for (int j = 0; j < C; ++j) {
          const block_q8_r& xb = reinterpret_cast<const block_q8_r*>(x + j * x_stride)[xi];
          const int8x16_t x0 = vld1q_s8(xb.qs), x1 = vld1q_s8(xb.qs + 16);
          float32x4_t& a = acc[qq][j];
          if constexpr (P<T>::kSix) {
            // Elements 0..15 and 16..31 have their own scales.
            const int32x4_t sa = dot_lo(vdupq_n_s32(-P<T>::kOffset * xb.s[0]), w, x0);
            const int32x4_t sbv = dot_hi(vdupq_n_s32(-P<T>::kOffset * xb.s[1]), w, x1);
            a = vfmaq_f32(a, vcvtq_f32_s32(sa), vmulq_n_f32(da, xb.d));
            a = vfmaq_f32(a, vcvtq_f32_s32(sbv), vmulq_n_f32(db, xb.d));
          } else {
            const int32x4_t init = vdupq_n_s32(-P<T>::kOffset * (xb.s[0] + xb.s[1]));
            const int32x4_t s = dot_hi(dot_lo(init, w, x0), w, x1);
            a = vfmaq_f32(a, vcvtq_f32_s32(s), vmulq_n_f32(da, xb.d));
          }
          if constexpr (P<T>::kMin) {
            const float32x4_t sx = vdupq_n_f32(xb.d * static_cast<float>(xb.s[0] + xb.s[1]));
            if constexpr (P<T>::kK)
              a = vfmsq_f32(a, mn, sx);
            else
              a = vfmaq_f32(a, mn, sx);
          }
        }
      }
    }
  }
  for (int qq = 0; qq < NQ; ++qq)
    for (int j = 0; j < C; ++j) vst1q_f32(y + j * ldy + 4 * qq, acc[qq][j]);
}

constexpr int kCols = 4;   // columns of a multi-column tile
constexpr int kQuads = 2;  // quads of a multi-column tile

// Runs tile<T, n, kQuads> for 1 ≤ n ≤ C.
template <DType T, int C>
void tile_n(int n, const uint8_t* group, int q0, int64_t nu, const uint8_t* x, size_t xs, float* y, int64_t ldy) {
  if constexpr (C > 1)
    if (n < C) return tile_n<T, C - 1>(n, group, q0, nu, x, xs, y, ldy);
  tile<T, C, kQuads>(group, q0, nu, x, xs, y, ldy);
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
      if (ce - cb == 1) {  // one column: the whole group in one pass (see top)
        tile<T, 1, 4>(group, 0, nu, x + cb * a.x_stride, a.x_stride, a.y + cb * a.ldy + r, a.ldy);
        continue;
      }
      for (int q0 = 0; q0 < 4; q0 += kQuads)
        for (int64_t c = cb; c < ce; c += kCols) {
          const int n = static_cast<int>(std::min<int64_t>(kCols, ce - c));
          tile_n<T, kCols>(n, group, q0, nu, x + c * a.x_stride, a.x_stride, a.y + c * a.ldy + r + 4 * q0, a.ldy);
        }
    }
  }
}

}  // namespace

void fill_neon_dotprod_matmul_packed(KernelTable& t) {
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
