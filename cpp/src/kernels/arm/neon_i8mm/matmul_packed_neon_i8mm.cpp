// NEON int8 matrix multiply (armv8.2-a+dotprod+i8mm, smmla) over row-interleaved weights
// (kernels/packed.h): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4, against Q8_R.
//
// smmla (vmmlaq_s32) multiplies a 2×8 int8 matrix A by the transpose of a 2×8 matrix B into a
// 2×2 int32 tile: acc[2i + j] += Σ_k A[i][k]·B[j][k]. Here A = 2 weight rows × 8 consecutive
// elements, B = 2 activation columns × the same 8 elements: 32 multiply-adds an instruction where
// sdot does 16, so per 4-row quad and column PAIR 8 smmla replace the 16 sdot of neon-dotprod.
//
// The layout is the packed one every table shares: slice s of a quad is one register, 4 rows ×
// elements 4s..4s+3, i.e. 32-bit lane r = row r. zip1/zip2 on 32-bit lanes of slices 2c and 2c+1
// give exactly smmla's A operands, rows 0-1 and rows 2-3 × elements 8c..8c+7 (8 zips per quad
// and sub-block, made once and reused by every column pair of the tile; the plain 4-bit types zip
// the packed bytes before splitting nibbles, 4 zips). Keeping the layout keeps one pack_rows for
// every table and one packed matrix per model whatever the CPU (tables can be switched on a
// loaded model, and the tests pack once for all tables); a layout stored pre-zipped would need
// the loader and every other table to know two layouts.
// The activation operand of chunk c is column j's 8 bytes then column j+1's (zip1/zip2 on 64-bit
// lanes of the two columns' quants), and the two result tiles [r0c0 r0c1 r1c0 r1c1],
// [r2c0 r2c1 r3c0 r3c1] are de-interleaved (uzp1/uzp2) into the two columns' 4-row dots.
//
// Decode (one column) and the odd column of an odd-width tile take neon-dotprod's sdot path
// (PackedNeonDotprod::dot on the unzipped slices): with one column smmla would multiply a zero
// (or duplicated) second column, the same 8 instructions per quad and sub-block as sdot plus the
// 8 zips, so it can only be slower there. In the single-column instantiations the zips are dead
// and the compiler drops them: decode is neon-dotprod's code.
//
// No speed figures: written and checked under qemu (-cpu max), no i8mm hardware at hand. Static
// counts instead (objdump of GCC 12 -O3: the per-unit loop of the 2-quad × 4-column tile, i.e.
// 8 rows × 4 columns × 32 elements, 256 for the K-quants and IQ4_XS), neon-i8mm / neon-dotprod:
// Q4_0 202 / 210 (32 smmla + 16 zip + 8 uzp against 64 sdot), Q4_1 210 / 218, IQ4_NL 206 / 224,
// MXFP4 204 / 220, Q4_K 264 / 278, IQ4_XS 237 / 252, Q8_0 194 / 198: 2-8% fewer instructions
// and half the int8 multiplies, so the gain is largest where the multiply pipes bound the tile.
// Q6_K's loops are shaped differently in the two units (247 / 238 for the largest) and the Q5
// types' too: not compared. Storing the zipped order in the layout and the two columns'
// activations interleaved would save the remaining 16 zips (about 8% more).
#include "kernels/arm/matmul_packed_neon.inc.h"

#if !defined(__ARM_FEATURE_MATMUL_INT8)
#error "this unit must be compiled with -march=armv8.2-a+dotprod+i8mm"
#endif

namespace edgellm::kernels {
namespace {

struct PackedNeonI8mm : PackedNeonDotprod {
  static constexpr bool kColumnPairs = true;

  // The dotprod slices (w, for single columns) and smmla's A operands: z[2c + h] = rows 2h, 2h+1
  // of the quad × elements 8c..8c+7.
  template <DType T>
  struct Slices : PackedNeonDotprod::Slices<T> {
    int8x16_t z[8];
  };
  template <DType T>
  static void unpack(const uint8_t* sub, int q, Slices<T>& s) {
    unpack_quad<T>(sub, q, s.w);
    if constexpr (P<T>::kNib && !P<T>::kHigh && !P<T>::kSix) {
      // Plain 4-bit types: zip the packed bytes before splitting the nibbles (the split commutes
      // with the zip), 4 zips instead of 8. Low nibbles of P[2m], P[2m+1] are slices 2m, 2m+1
      // (chunk m), their high nibbles slices 2m+4, 2m+5 (chunk m+2).
      const uint8x16_t low4 = vdupq_n_u8(0x0F);
      for (int m = 0; m < 2; ++m) {
        const uint32x4_t a = vreinterpretq_u32_u8(vld1q_u8(sub + 64 * (2 * m) + 16 * q));
        const uint32x4_t b = vreinterpretq_u32_u8(vld1q_u8(sub + 64 * (2 * m + 1) + 16 * q));
        for (int h = 0; h < 2; ++h) {
          const uint8x16_t v = vreinterpretq_u8_u32(h ? vzip2q_u32(a, b) : vzip1q_u32(a, b));
          uint8x16_t lo = vandq_u8(v, low4), hi = vshrq_n_u8(v, 4);
          if constexpr (P<T>::kLut) {
            static constexpr LevelBytes kLut = level_bytes<T, 0>();
            const uint8x16_t table = vld1q_u8(kLut.b);
            lo = vqtbl1q_u8(table, lo);
            hi = vqtbl1q_u8(table, hi);
          }
          s.z[2 * m + h] = vreinterpretq_s8_u8(lo);
          s.z[2 * (m + 2) + h] = vreinterpretq_s8_u8(hi);
        }
      }
    } else {
      for (int c = 0; c < 4; ++c) {
        const int32x4_t a = vreinterpretq_s32_s8(s.w[2 * c]), b = vreinterpretq_s32_s8(s.w[2 * c + 1]);
        s.z[2 * c] = vreinterpretq_s8_s32(vzip1q_s32(a, b));
        s.z[2 * c + 1] = vreinterpretq_s8_s32(vzip2q_s32(a, b));
      }
    }
  }

  // out0/out1 = init0/init1 + the quad's dots with columns xq0 / xq1 over elements 0..31 (H = -1)
  // or 16H..16H+15.
  template <DType T, int H>
  static void dot_pair(const Slices<T>& s, const int8_t* xq0, const int8_t* xq1, int32x4_t init0, int32x4_t init1,
                       int32x4_t& out0, int32x4_t& out1) {
    constexpr int c0 = H == 1 ? 2 : 0, c1 = H == 0 ? 2 : 4;  // 8-element chunks [c0, c1)
    int8x16_t b[4];
    for (int h = c0 / 2; h < c1 / 2; ++h) {
      const int64x2_t x0 = vreinterpretq_s64_s8(vld1q_s8(xq0 + 16 * h)), x1 = vreinterpretq_s64_s8(vld1q_s8(xq1 + 16 * h));
      b[2 * h] = vreinterpretq_s8_s64(vzip1q_s64(x0, x1));
      b[2 * h + 1] = vreinterpretq_s8_s64(vzip2q_s64(x0, x1));
    }
    // The init of a tile [r c0, r c1, r' c0, r' c1] (inits are broadcasts): [i0 i1 i0 i1].
    int32x4_t t01 = vzip1q_s32(init0, init1), t23 = t01;
    for (int c = c0; c < c1; ++c) {
      t01 = vmmlaq_s32(t01, s.z[2 * c], b[c]);
      t23 = vmmlaq_s32(t23, s.z[2 * c + 1], b[c]);
    }
    out0 = vuzp1q_s32(t01, t23);
    out1 = vuzp2q_s32(t01, t23);
  }
};

}  // namespace

void fill_neon_i8mm_matmul_packed(KernelTable& t) { fill_packed_matmul<PackedNeonI8mm>(t); }

}  // namespace edgellm::kernels
