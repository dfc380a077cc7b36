// Tensor element types, numbered as ggml numbers them in GGUF files.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace edgellm {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ4_NL = 20,
  IQ4_XS = 23,
  BF16 = 30,
  MXFP4 = 39,
  // Internal formats (never in files; dtype_info(uint32_t) does not know them):
  // Q8_R: activations for the row-interleaved ("packed") weight kernels, kernels/packed.h.
  Q8_R = 63,
};

constexpr int kDTypeIdLimit = 64;  // ids in files are checked against this before any lookup

struct DTypeInfo {
  DType type;
  const char* name;     // "Q4_K", as ggml and the gguf package spell it
  int64_t block_elems;  // elements per block (1 for float types)
  int64_t block_bytes;  // bytes per block
};

// nullptr when `id` is not a type this engine reads from files (internal formats such as Q8_R
// give nullptr too: a file naming their ids is rejected).
const DTypeInfo* dtype_info(uint32_t id);
const DTypeInfo& dtype_info(DType t);
inline const char* dtype_name(DType t) { return dtype_info(t).name; }

// Bytes of a row of n elements; n must be a multiple of the block size.
inline size_t row_bytes(DType t, int64_t n) {
  const DTypeInfo& i = dtype_info(t);
  return static_cast<size_t>(n / i.block_elems * i.block_bytes);
}

}  // namespace edgellm
