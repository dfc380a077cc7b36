// Test operands shared by the kernel tests (test_kernels_isa.cpp, test_packed.cpp): where a
// weight block keeps its fp16 scales (overwritten with finite values after filling blocks with
// random bytes), and random activation rows.
#pragma once
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "quant/blocks.h"

namespace kernel_test {

// Byte offsets of a block's fp16 fields: d first, then m / dmin where the format has one.
inline std::vector<size_t> half_fields(edgellm::DType t) {
  using edgellm::DType;
  switch (t) {
    case DType::Q4_0: return {offsetof(edgellm::block_q4_0, d)};
    case DType::Q4_1: return {offsetof(edgellm::block_q4_1, d), offsetof(edgellm::block_q4_1, m)};
    case DType::Q5_0: return {offsetof(edgellm::block_q5_0, d)};
    case DType::Q5_1: return {offsetof(edgellm::block_q5_1, d), offsetof(edgellm::block_q5_1, m)};
    case DType::Q8_0: return {offsetof(edgellm::block_q8_0, d)};
    case DType::Q2_K: return {offsetof(edgellm::block_q2_K, d), offsetof(edgellm::block_q2_K, dmin)};
    case DType::Q3_K: return {offsetof(edgellm::block_q3_K, d)};
    case DType::Q4_K: return {offsetof(edgellm::block_q4_K, d), offsetof(edgellm::block_q4_K, dmin)};
    case DType::Q5_K: return {offsetof(edgellm::block_q5_K, d), offsetof(edgellm::block_q5_K, dmin)};
    case DType::Q6_K: return {offsetof(edgellm::block_q6_K, d)};
    case DType::IQ4_NL: return {offsetof(edgellm::block_iq4_nl, d)};
    case DType::IQ4_XS: return {offsetof(edgellm::block_iq4_xs, d)};
    default: return {};  // MXFP4: an E8M0 byte (see mxfp4_exponent)
  }
}

// A random MXFP4 E8M0 exponent byte of moderate scale (2^-28 .. 2^12), so that dot products of
// random blocks stay finite in float.
inline uint8_t mxfp4_exponent(std::mt19937& rng) { return static_cast<uint8_t>(100 + rng() % 41); }

// ncols rows of K floats: normal values, each row scaled by its own factor in [0.1, 10).
inline std::vector<float> random_activations(int ncols, int64_t K, std::mt19937& rng) {
  std::normal_distribution<float> g;
  std::uniform_real_distribution<float> scale(0.1f, 10.0f);
  std::vector<float> x(static_cast<size_t>(ncols) * K);
  for (int c = 0; c < ncols; ++c) {
    const float s = scale(rng);
    for (int64_t k = 0; k < K; ++k) x[c * K + k] = g(rng) * s;
  }
  return x;
}

}  // namespace kernel_test
