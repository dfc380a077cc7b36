// Per-type scalar reference code for every block format (layouts in quant/blocks.h, math in
// docs/formats.md §2). SIMD kernels call these for tails and test against
// them; quant.h dispatches to them by DType.
//
// Naming: dequantize_row_<type>, quantize_row_<type> (type in lower case, e.g. q4_k) and
// vec_dot_<weight>_<activation> (block-struct spelling, e.g. vec_dot_q4_K_q8_K).
// n is always a count of elements and must be a multiple of the block size; these functions do
// not check it (quant::dequantize_row & co. do).
//
// Rounding rules of the activation quantizers (SIMD versions must be bit-exact with these):
//   Q8_0, Q8_1: amax = max|x|, d = amax/127 (f32, stored as fp16), q = nearbyint(x * (127/amax))
//               with 127/amax computed in f32 and round-half-to-even — llama.cpp's AVX2 rule, not
//               the C reference's roundf(x * (1/d)). Q8_1 also stores s = fp16(d_f32 * Σq).
//   Q8_K:       max = the signed value of largest |x| (first one on ties), iscale = −127/max,
//               q = min(127, nearbyint(iscale * x)), d = 1/iscale (f32, may be negative),
//               bsums[k] = Σ q[16k .. 16k+15]. An all-zero block gives d = 0, q = 0.
#pragma once
#include <cstdint>

#include "common/fp16.h"
#include "quant/blocks.h"

namespace edgellm::quant {

// ---- float formats (F16 and BF16 are raw uint16 bit patterns) ----
void dequantize_row_f32(const float* x, float* y, int64_t n);
void dequantize_row_f16(const uint16_t* x, float* y, int64_t n);
void dequantize_row_bf16(const uint16_t* x, float* y, int64_t n);
void quantize_row_f32(const float* x, float* y, int64_t n);
void quantize_row_f16(const float* x, uint16_t* y, int64_t n);   // round to nearest even
void quantize_row_bf16(const float* x, uint16_t* y, int64_t n);  // round to nearest even, NaN quiet

// ---- 32-element legacy blocks ----
void dequantize_row_q4_0(const block_q4_0* x, float* y, int64_t n);
void dequantize_row_q4_1(const block_q4_1* x, float* y, int64_t n);
void dequantize_row_q5_0(const block_q5_0* x, float* y, int64_t n);
void dequantize_row_q5_1(const block_q5_1* x, float* y, int64_t n);
void dequantize_row_q8_0(const block_q8_0* x, float* y, int64_t n);
void dequantize_row_q8_1(const block_q8_1* x, float* y, int64_t n);
// llama.cpp's *_ref rules, byte-exact with them and with the gguf Python package.
void quantize_row_q4_0(const float* x, block_q4_0* y, int64_t n);
void quantize_row_q4_1(const float* x, block_q4_1* y, int64_t n);
void quantize_row_q5_0(const float* x, block_q5_0* y, int64_t n);
void quantize_row_q5_1(const float* x, block_q5_1* y, int64_t n);
// Activation rule (see above); may differ from gguf/llama.cpp's roundf reference by one step of q
// on exact ties and when 127/amax and 1/(amax/127) differ in the last bit.
void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n);
void quantize_row_q8_1(const float* x, block_q8_1* y, int64_t n);

// ---- 256-element K-quant super-blocks ----
void dequantize_row_q2_k(const block_q2_K* x, float* y, int64_t n);
void dequantize_row_q3_k(const block_q3_K* x, float* y, int64_t n);
void dequantize_row_q4_k(const block_q4_K* x, float* y, int64_t n);
void dequantize_row_q5_k(const block_q5_K* x, float* y, int64_t n);
void dequantize_row_q6_k(const block_q6_K* x, float* y, int64_t n);
void dequantize_row_q8_k(const block_q8_K* x, float* y, int64_t n);
// Weight quantizers: per-sub-block least-squares scale (and min) search, then the scales
// themselves quantized to the format's 4/6/8 bits. Valid blocks, close to the input; not
// llama.cpp's importance-weighted search, so bytes differ from llama-quantize's.
void quantize_row_q2_k(const float* x, block_q2_K* y, int64_t n);
void quantize_row_q3_k(const float* x, block_q3_K* y, int64_t n);
void quantize_row_q4_k(const float* x, block_q4_K* y, int64_t n);
void quantize_row_q5_k(const float* x, block_q5_K* y, int64_t n);
void quantize_row_q6_k(const float* x, block_q6_K* y, int64_t n);
void quantize_row_q8_k(const float* x, block_q8_K* y, int64_t n);  // activation rule (see above)

// ---- non-linear 4-bit formats: each nibble indexes a fixed table (docs/formats.md §2.6) ----
// (The level tables kIq4nlValues, kMxfp4Values are in quant/blocks.h.)
// MXFP4's scale 2^(e−128) (half the E8M0 value, as the table is doubled), exact for every e.
inline float e8m0_to_fp32_half(uint8_t e) {
  return fp32_from_bits(e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23);
}
// The 6-bit scale (0..63) of IQ4_XS sub-block ib (0..7); the multiplier is ls − 32.
inline int iq4_xs_scale(const block_iq4_xs& b, int ib) {
  return ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4);
}
void dequantize_row_iq4_nl(const block_iq4_nl* x, float* y, int64_t n);
void dequantize_row_iq4_xs(const block_iq4_xs* x, float* y, int64_t n);
void dequantize_row_mxfp4(const block_mxfp4* x, float* y, int64_t n);
// IQ4_NL / IQ4_XS: per 32 elements a search over scales near max/|table extreme| (both signs)
// minimising the x²-weighted squared error with the nearest level per element, then the
// least-squares scale of the chosen levels; IQ4_XS quantizes the 8 scales to 6 bits against the
// super-block d and re-picks the levels. Not llama.cpp's quantizer: bytes differ from llama-quantize's.
void quantize_row_iq4_nl(const float* x, block_iq4_nl* y, int64_t n);
void quantize_row_iq4_xs(const float* x, block_iq4_xs* y, int64_t n);
// MXFP4: the gguf package's rule, byte-exact with it: e = floor(log2 amax) − 2 + 127, nearest
// value (first on ties).
void quantize_row_mxfp4(const float* x, block_mxfp4* y, int64_t n);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K scales[12] field.
inline void get_scale_min_k4(int j, const uint8_t* s, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// The 16 signed 6-bit scales (−32..31) of a Q3_K scales[12] field.
inline void get_scales_q3_k(const uint8_t* s, int8_t* out) {
  for (int i = 0; i < 16; ++i) {
    const int lo = i < 8 ? (s[i] & 0xF) : (s[i - 8] >> 4);
    const int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
    out[i] = static_cast<int8_t>((lo | (hi << 4)) - 32);
  }
}

// ---- dot products: weight row · activation row already in vec_dot_type(weight) ----
// Integer products are summed per block in int32, then scaled in f32 (llama.cpp's math, docs/formats.md §2.4);
// float formats accumulate in double.
float vec_dot_f32(int64_t n, const float* x, const float* y);
float vec_dot_f16(int64_t n, const uint16_t* x, const uint16_t* y);
float vec_dot_bf16(int64_t n, const uint16_t* x, const uint16_t* y);
float vec_dot_q4_0_q8_0(int64_t n, const block_q4_0* x, const block_q8_0* y);
float vec_dot_q4_1_q8_1(int64_t n, const block_q4_1* x, const block_q8_1* y);  // + m·s per block
float vec_dot_q5_0_q8_0(int64_t n, const block_q5_0* x, const block_q8_0* y);
float vec_dot_q5_1_q8_1(int64_t n, const block_q5_1* x, const block_q8_1* y);  // + m·s per block
float vec_dot_q8_0_q8_0(int64_t n, const block_q8_0* x, const block_q8_0* y);
// K-quants: mins applied through the Q8_K bsums.
float vec_dot_q2_K_q8_K(int64_t n, const block_q2_K* x, const block_q8_K* y);
float vec_dot_q3_K_q8_K(int64_t n, const block_q3_K* x, const block_q8_K* y);
float vec_dot_q4_K_q8_K(int64_t n, const block_q4_K* x, const block_q8_K* y);
float vec_dot_q5_K_q8_K(int64_t n, const block_q5_K* x, const block_q8_K* y);
float vec_dot_q6_K_q8_K(int64_t n, const block_q6_K* x, const block_q8_K* y);
// Non-linear: Σ table[q]·q8 per block in int32 (IQ4_XS: times ls − 32 per sub-block).
float vec_dot_iq4_nl_q8_0(int64_t n, const block_iq4_nl* x, const block_q8_0* y);
float vec_dot_iq4_xs_q8_K(int64_t n, const block_iq4_xs* x, const block_q8_K* y);
float vec_dot_mxfp4_q8_0(int64_t n, const block_mxfp4* x, const block_q8_0* y);

}  // namespace edgellm::quant
