// The scalar reference table: plain loops, the oracle for every SIMD unit.
#include <cmath>

#include "kernels/kernels.h"
#include "kernels/packed.h"
#include "quant/quant.h"

namespace edgellm::kernels {
namespace {

template <DType W>
void matmul_ref(const MatmulArgs& a) {
  const size_t w_stride = row_bytes(W, a.K);
  for (int64_t c = 0; c < a.ncols; ++c) {
    const void* x = static_cast<const uint8_t*>(a.x) + c * a.x_stride;
    for (int64_t r = a.r0; r < a.r1; ++r) {
      const void* w = static_cast<const uint8_t*>(a.w) + r * w_stride;
      a.y[c * a.ldy + r] = quant::vec_dot(W, a.K, w, x);
    }
  }
}

template <DType A>
void quantize_ref(const float* x, void* y, int64_t n) {
  quant::quantize_row(A, x, y, n);
}

void rmsnorm_ref(const float* x, const float* w, float* y, int64_t n, float eps) {
  double sum = 0.0;  // llama.cpp accumulates the sum of squares in double too
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float scale = 1.0f / std::sqrt(static_cast<float>(sum / n) + eps);
  if (w)
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
  else
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
}

void softmax_ref(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

float dot_f32_ref(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy_f32_ref(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void silu_mul_ref(const float* g, const float* u, float* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void gelu_mul_ref(const float* g, const float* u, float* o, int64_t n) {
  constexpr float kSqrt2OverPi = 0.79788456080286535588f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    o[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + 0.044715f * x * x))) * u[i];
  }
}

void add_f32_ref(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

template <DType W>
void packed_ref(const MatmulArgs& a) {
  packed_matmul_ref(W, a);
}

template <DType W>
void set_matmul(KernelTable& t) {
  t.matmul[static_cast<int>(W)] = matmul_ref<W>;
}
template <DType A>
void set_quantize(KernelTable& t) {
  t.quantize[static_cast<int>(A)] = quantize_ref<A>;
}

}  // namespace

void fill_generic_attention(KernelTable& t);  // generic/attention_ref.cpp

void fill_generic_table(KernelTable& t) {
  set_matmul<DType::F32>(t);
  set_matmul<DType::F16>(t);
  set_matmul<DType::BF16>(t);
  set_matmul<DType::Q4_0>(t);
  set_matmul<DType::Q4_1>(t);
  set_matmul<DType::Q5_0>(t);
  set_matmul<DType::Q5_1>(t);
  set_matmul<DType::Q8_0>(t);
  set_matmul<DType::Q2_K>(t);
  set_matmul<DType::Q3_K>(t);
  set_matmul<DType::Q4_K>(t);
  set_matmul<DType::Q5_K>(t);
  set_matmul<DType::Q6_K>(t);
  set_matmul<DType::IQ4_NL>(t);
  set_matmul<DType::IQ4_XS>(t);
  set_matmul<DType::MXFP4>(t);
  set_quantize<DType::F32>(t);
  set_quantize<DType::F16>(t);
  set_quantize<DType::BF16>(t);
  set_quantize<DType::Q8_0>(t);
  set_quantize<DType::Q8_1>(t);
  set_quantize<DType::Q8_K>(t);
  t.quantize[static_cast<int>(DType::Q8_R)] = quantize_q8_r_ref;  // packed-weight activations (kernels/packed.h)
  // The scalar level packs too, so it computes what the packed SIMD kernels compute (Q8_R
  // activations for every packable type) and is their reference at model level.
  t.packed_matmul[static_cast<int>(DType::Q4_0)] = packed_ref<DType::Q4_0>;
  t.packed_matmul[static_cast<int>(DType::Q4_1)] = packed_ref<DType::Q4_1>;
  t.packed_matmul[static_cast<int>(DType::Q5_0)] = packed_ref<DType::Q5_0>;
  t.packed_matmul[static_cast<int>(DType::Q5_1)] = packed_ref<DType::Q5_1>;
  t.packed_matmul[static_cast<int>(DType::Q8_0)] = packed_ref<DType::Q8_0>;
  t.packed_matmul[static_cast<int>(DType::Q4_K)] = packed_ref<DType::Q4_K>;
  t.packed_matmul[static_cast<int>(DType::Q5_K)] = packed_ref<DType::Q5_K>;
  t.packed_matmul[static_cast<int>(DType::Q6_K)] = packed_ref<DType::Q6_K>;
  t.packed_matmul[static_cast<int>(DType::IQ4_NL)] = packed_ref<DType::IQ4_NL>;
  t.packed_matmul[static_cast<int>(DType::IQ4_XS)] = packed_ref<DType::IQ4_XS>;
  t.packed_matmul[static_cast<int>(DType::MXFP4)] = packed_ref<DType::MXFP4>;
  t.rmsnorm = rmsnorm_ref;
  t.softmax = softmax_ref;
  t.dot_f32 = dot_f32_ref;
  t.axpy_f32 = axpy_f32_ref;
  t.silu_mul = silu_mul_ref;
  t.gelu_mul = gelu_mul_ref;
  t.add_f32 = add_f32_ref;
  fill_generic_attention(t);
  t.lora_down = lora_down_ref;
  t.lora_up = lora_up_ref;
}

}  // namespace edgellm::kernels
