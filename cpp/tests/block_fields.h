// Where a weight block keeps its fp16 scales: what the kernel tests (test_kernels_isa.cpp,
// test_packed.cpp) overwrite with finite values after filling blocks with random bytes.
#pragma once
#include <cstddef>
#include <vector>

#include "common/dtype.h"
#include "quant/blocks.h"

namespace test_blocks {

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
    default: return {};
  }
}

}  // namespace test_blocks
