// The two low-rank products of a LoRA addition (model/lora.h), in the layout an adapter is
// packed into at load: A as rank rows of K elements; B transposed in blocks of 16 output rows
// (Bᵀ[r][o] at ((o / 16) · rank + r) · 16 + o % 16: each block's rank × 16 elements contiguous, so
// a run of output rows is one sequential read); both F32 or F16. Reference in generic/lora_ref.cpp, SIMD bodies in
// x86/lora_x86.inc.h; KernelTable::lora_down / lora_up hold the active level's.
//
// down: low_c = scale_c · A·x_c — reads A once for all the columns it is given (x in F32, the
//       forward pass's own activations, so nothing is quantized);
// up:   y_c[o0, o1) += Σ_r low_c[r] · Bᵀ[r][o0, o1) — vectorised over the output rows, so each
//       B element costs one multiply-add per column and a task can take any run of output rows
//       (the base matmul's chunk: model/lora_block.cpp adds it in the same pass).
#pragma once
#include <cstdint>

#include "common/dtype.h"

namespace edgellm::kernels {

struct LoraDownArgs {
  DType type = DType::F32;       // A's elements: F32 or F16
  const void* a = nullptr;       // rank rows of K elements, contiguous
  int64_t rank = 0, K = 0;
  const float* x = nullptr;      // column c reads x + rows[c] * ldx
  int64_t ldx = 0;
  const int32_t* rows = nullptr;
  int64_t ncols = 0;
  const float* scale = nullptr;  // per column
  float* low = nullptr;          // low[c * rank + r]
};

struct LoraUpArgs {
  DType type = DType::F32;   // Bᵀ's elements: F32 or F16
  const void* bt = nullptr;  // blocked Bᵀ (above), rank × (n_out rounded up to 16) elements
  int64_t rank = 0;
  int64_t o0 = 0, o1 = 0;    // the output rows to add: o0 a multiple of 16, o1 ≤ n_out
  const float* low = nullptr;  // ncols rows of rank
  int64_t ncols = 0;
  float* y = nullptr;        // column c adds into y + rows[c] * ldy
  const int32_t* rows = nullptr;
  int64_t ldy = 0;
};

constexpr int kLoraBlock = 16;  // output rows per block of Bᵀ

using LoraDownFn = void (*)(const LoraDownArgs&);
using LoraUpFn = void (*)(const LoraUpArgs&);

// The scalar references (also the generic table's entries).
void lora_down_ref(const LoraDownArgs& a);
void lora_up_ref(const LoraUpArgs& a);

}  // namespace edgellm::kernels
