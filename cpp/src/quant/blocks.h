// GGUF block layouts, byte for byte as llama.cpp writes them (see
// docs/formats.md §2). Every field is little-endian; `d`, `m`, `dmin` are
// IEEE half unless noted. These structs are the contract between the reference code in quant/
// and every SIMD kernel.
#pragma once
#include <cstdint>

namespace edgellm {

constexpr int QK4_0 = 32, QK4_1 = 32, QK5_0 = 32, QK5_1 = 32, QK8_0 = 32, QK8_1 = 32;
constexpr int QK_K = 256;
constexpr int K_SCALE_SIZE = 12;
constexpr int QK4_NL = 32, QK_MXFP4 = 32;

#pragma pack(push, 1)
struct block_q4_0 { uint16_t d; uint8_t qs[QK4_0 / 2]; };
struct block_q4_1 { uint16_t d; uint16_t m; uint8_t qs[QK4_1 / 2]; };
struct block_q5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; };
struct block_q5_1 { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; };
struct block_q8_0 { uint16_t d; int8_t qs[QK8_0]; };
// s = d * sum(qs), used for the min term of Q4_1 / Q5_1 dot products.
struct block_q8_1 { uint16_t d; uint16_t s; int8_t qs[QK8_1]; };

struct block_q2_K { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; uint16_t d; uint16_t dmin; };
struct block_q3_K { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; uint16_t d; };
struct block_q4_K { uint16_t d; uint16_t dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; };
struct block_q5_K { uint16_t d; uint16_t dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
struct block_q6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; };
// Activations only: f32 d (may be negative), bsums = sums of 16 consecutive qs.
struct block_q8_K { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; };

// Non-linear 4-bit formats: each nibble indexes a fixed 16-entry table of levels (below);
// element j of a 32-element (sub-)block is the low nibble of
// qs[j], element j+16 the high nibble, as in Q4_0.
struct block_iq4_nl { uint16_t d; uint8_t qs[QK4_NL / 2]; };
// Sub-block ib (0..7) has the 6-bit scale ls = (scales_l[ib/2] >> 4·(ib%2) & 0xF) |
// (scales_h >> 2·ib & 3) << 4; its weights are d·(ls − 32)·kIq4nlValues[q], quants qs[16·ib..].
struct block_iq4_xs { uint16_t d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; };
// e: E8M0 exponent; weight = 2^(e−128)·kMxfp4Values[q] (the table holds e2m1 values doubled).
struct block_mxfp4 { uint8_t e; uint8_t qs[QK_MXFP4 / 2]; };
#pragma pack(pop)

// The level tables: IQ4_NL / IQ4_XS (sorted ascending) and MXFP4's e2m1 values doubled
// (index 8 is −0), so that its scale is 2^(e−128).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static_assert(sizeof(block_q4_0) == 18, "q4_0");
static_assert(sizeof(block_q4_1) == 20, "q4_1");
static_assert(sizeof(block_q5_0) == 22, "q5_0");
static_assert(sizeof(block_q5_1) == 24, "q5_1");
static_assert(sizeof(block_q8_0) == 34, "q8_0");
static_assert(sizeof(block_q8_1) == 36, "q8_1");
static_assert(sizeof(block_q2_K) == 84, "q2_K");
static_assert(sizeof(block_q3_K) == 110, "q3_K");
static_assert(sizeof(block_q4_K) == 144, "q4_K");
static_assert(sizeof(block_q5_K) == 176, "q5_K");
static_assert(sizeof(block_q6_K) == 210, "q6_K");
static_assert(sizeof(block_q8_K) == 292, "q8_K");
static_assert(sizeof(block_iq4_nl) == 18, "iq4_nl");
static_assert(sizeof(block_iq4_xs) == 136, "iq4_xs");
static_assert(sizeof(block_mxfp4) == 17, "mxfp4");

}  // namespace edgellm
