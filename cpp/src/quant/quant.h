// Scalar reference code for every block format: the oracle every SIMD kernel is tested against.
#pragma once
#include <cstdint>

#include "common/dtype.h"

namespace edgellm::quant {

// Dequantize n elements (a multiple of the block size) of type t.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

// Quantize n floats into type t (reference quantizers; for K-quants and IQ4_NL / IQ4_XS a simple
// but valid choice of scales, for the activation formats Q8_0/Q8_1/Q8_K exactly llama.cpp's rounding rule).
void quantize_row(DType t, const float* src, void* dst, int64_t n);

// The activation format a weight type is dotted against (docs/formats.md §2.4): Q8_0, Q8_1, Q8_K, F16, BF16 or F32.
DType vec_dot_type(DType weight);

// dot(weight row, activation row) over n elements; `act` is in vec_dot_type(weight).
float vec_dot(DType weight, int64_t n, const void* w, const void* act);

}  // namespace edgellm::quant
