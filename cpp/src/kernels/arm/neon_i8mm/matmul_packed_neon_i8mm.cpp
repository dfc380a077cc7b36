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
// and sub-block, made once and reused by every column pair of the tile). Keeping the layout keeps
// one pack_rows for every table and one packed matrix per model whatever the CPU; a layout stored
// pre-zipped would save those 8 zips against 16 smmla + 8 activation zips + the float work per
// quad and 4 columns, while every other table and the loader would have to know two layouts.
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
// counts instead (objdump of GCC 12 -O3, the per-unit loop of the 2-quad × 4-column tile, i.e.
// 8 rows × 4 columns × 32 elements; Q4_K/Q6_K per 256): Q4_0 214 instructions (32 smmla, 24
// zip, 8 uzp) against neon-dotprod's 210 (64 sdot); Q8_0 194 / 198; Q4_K 273 / 278; Q6_K 246 /
// 238. So the same instruction count with half the int8 multiplies: a gain only where the
// multiply pipes, not issue width, bound the tile. Storing the zipped order in the layout
// (−16 zips) and the two columns' activations interleaved (−8) would bring Q4_0 to about 190.
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
    for (int c = 0; c < 4; ++c) {
      const int32x4_t a = vreinterpretq_s32_s8(s.w[2 * c]), b = vreinterpretq_s32_s8(s.w[2 * c + 1]);
      s.z[2 * c] = vreinterpretq_s8_s32(vzip1q_s32(a, b));
      s.z[2 * c + 1] = vreinterpretq_s8_s32(vzip2q_s32(a, b));
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
