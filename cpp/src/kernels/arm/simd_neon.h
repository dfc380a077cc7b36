// AArch64 Advanced SIMD building blocks shared by the neon and neon-dotprod units.
//
// This header and the *_neon.inc.h kernel bodies are included by translation units compiled
// with different -march flags (armv8-a, armv8.2-a+dotprod). Everything lives in an anonymous
// namespace, so each unit has its own copy and the linker can never hand a dotprod body of an
// inline function to code that runs on a CPU without it. For the same reason these units call
// no inline helpers of shared headers (fp16.h, reference.h): GCC auto-vectorizes scalar loops
// with sdot under +dotprod, and an out-of-line copy of such a helper could be the one kept.
//
// The int8 dot product is the one place the two levels differ: armv8.2 `sdot` (vdotq_s32)
// multiplies 16 signed byte pairs and adds each group of 4 into an int32 lane; plain armv8
// widens with smull/smull2 to int16 (|s8·s8| ≤ 16384, never saturates) and pairwise-accumulates
// into int32 with sadalp. Both give exact int32 sums; only the split over lanes differs, and
// every caller reduces the four lanes before using them.
#pragma once
#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#if defined(__ARM_FEATURE_DOTPROD)
#define EDGELLM_NEON_DOTPROD 1
#else
#define EDGELLM_NEON_DOTPROD 0
#endif

namespace edgellm::kernels {
namespace {

// acc + Σ a[i]·b[i] over 16 signed bytes, spread over the 4 int32 lanes.
inline int32x4_t dot_s8(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if EDGELLM_NEON_DOTPROD
  return vdotq_s32(acc, a, b);
#else
  const int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
  const int16x8_t hi = vmull_high_s8(a, b);
  return vpadalq_s16(vpadalq_s16(acc, lo), hi);
#endif
}

// 32-element dot (two vectors each side) as 4 lanes.
inline int32x4_t dot_s8x32(int8x16_t a0, int8x16_t a1, int8x16_t b0, int8x16_t b1) {
  return dot_s8(dot_s8(vdupq_n_s32(0), a0, b0), a1, b1);
}

// IEEE half <-> float with the conversion instructions (exact widening; narrowing rounds to
// nearest even under the default FPCR, as fp16.h's scalar code does).
inline float half_to_float(uint16_t h) {
  return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}
inline uint16_t float_to_half(float f) {
  return vget_lane_u16(vreinterpret_u16_f16(vcvt_f16_f32(vdupq_n_f32(f))), 0);
}

inline int8x16_t load_s8(const void* p) { return vld1q_s8(static_cast<const int8_t*>(p)); }
inline uint8x16_t load_u8(const void* p) { return vld1q_u8(static_cast<const uint8_t*>(p)); }

// The legacy Q5 fifth bits of elements [16·half, 16·half + 16): bit j of the little-endian u32
// qh → byte 0x10 where set, 0 elsewhere.
inline uint8x16_t q5_high_bits16(const uint8_t* qh4, int half) {
  static const uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t bytes = vcombine_u8(vdup_n_u8(qh4[2 * half]), vdup_n_u8(qh4[2 * half + 1]));
  return vandq_u8(vtstq_u8(bytes, vld1q_u8(kBit)), vdupq_n_u8(0x10));
}

}  // namespace
}  // namespace edgellm::kernels
