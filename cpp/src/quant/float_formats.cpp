// F32, F16 and BF16 rows: conversions and dot products (docs/formats.md §2.1).
#include <cstring>

#include "common/fp16.h"
#include "quant/reference.h"

namespace edgellm::quant {

void dequantize_row_f32(const float* x, float* y, int64_t n) { std::memcpy(y, x, n * sizeof(float)); }

void dequantize_row_f16(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}

void dequantize_row_bf16(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(x[i]);
}

void quantize_row_f32(const float* x, float* y, int64_t n) { std::memcpy(y, x, n * sizeof(float)); }

void quantize_row_f16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void quantize_row_bf16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
}

// Float dots accumulate in double, as ggml's scalar ggml_vec_dot_f32/f16 do (ggml_float).
float vec_dot_f32(int64_t n, const float* x, const float* y) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * y[i]);
  return static_cast<float>(sum);
}

float vec_dot_f16(int64_t n, const uint16_t* x, const uint16_t* y) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
  return static_cast<float>(sum);
}

float vec_dot_bf16(int64_t n, const uint16_t* x, const uint16_t* y) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(bf16_to_fp32(x[i]) * bf16_to_fp32(y[i]));
  return static_cast<float>(sum);
}

}  // namespace edgellm::quant
