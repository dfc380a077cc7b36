// The kernel dispatch table. One table per instruction-set level; a CPU probe at start-up
// picks the best one this machine runs (EDGELLM_ISA may force a lower level). Every entry of
// every SIMD table has a scalar reference in the generic table and a randomized test against it.
//
// SIMD tables start as a copy of the generic table and override what they implement, so a new
// op is added once in generic/ and is correct everywhere before it is fast.
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/dtype.h"
#include "kernels/lora_kernels.h"

namespace edgellm::kernels {

enum class Isa : int { Scalar = 0, Avx2 = 1, Avx512 = 2, Neon = 3, NeonDotprod = 4, NeonI8mm = 5 };
// Every level, lowest first (what EDGELLM_ISA names, the tests and the bindings iterate).
inline constexpr Isa kAllIsas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon, Isa::NeonDotprod, Isa::NeonI8mm};
const char* isa_name(Isa isa);  // "scalar", "avx2", "avx512", "neon", "neon-dotprod", "neon-i8mm"

// y[c * ldy + r] = dot(W row r, X row c)   for r in [r0, r1), c in [0, ncols)
// W rows are K elements of the weight type, row stride row_bytes(wtype, K); X rows are already
// quantized to quant::vec_dot_type(wtype), row stride x_stride bytes.
struct MatmulArgs {
  const void* w;
  int64_t K;
  int64_t r0, r1;
  const void* x;
  size_t x_stride;
  int64_t ncols;
  float* y;
  int64_t ldy;
};
using MatmulFn = void (*)(const MatmulArgs&);

// Quantize n floats (n a multiple of the block size) into an activation format.
using QuantizeFn = void (*)(const float* x, void* y, int64_t n);

struct PagedAttentionArgs;  // kernels/attention.h

struct KernelTable {
  Isa isa = Isa::Scalar;

  MatmulFn matmul[kDTypeIdLimit] = {};      // by weight type id; nullptr = not supported
  // Float weights (F32 / F16 / BF16) for whole-input models (encoders, vision towers): from
  // kGemmMinCols columns an outer-product GEMM (kernels/matmul_float.inc.h) whose sums run in
  // another order than the tile's, so a column's result depends on the call's column count.
  // `matmul` keeps every column's result independent of the others (a decoder's request gives
  // the same logits alone and in any batch). nullptr = use matmul.
  MatmulFn matmul_wide[kDTypeIdLimit] = {};
  QuantizeFn quantize[kDTypeIdLimit] = {};  // by activation type id (Q8_0, Q8_1, Q8_K, Q8_R, F16, BF16, F32)
  // Row-interleaved weights (kernels/packed.h), by the original weight type: MatmulArgs with
  // w = the packed matrix, x in Q8_R, r0/r1 multiples of kPackRows. nullptr = this level keeps
  // the GGUF layout for that type (the loader then does not pack it).
  MatmulFn packed_matmul[kDTypeIdLimit] = {};

  // ---- float ops (all f32) ----
  // y = x / rms(x) * w  (w may be null: plain RMS normalisation); y may alias x.
  void (*rmsnorm)(const float* x, const float* w, float* y, int64_t n, float eps) = nullptr;
  // In-place softmax over n values.
  void (*softmax)(float* x, int64_t n) = nullptr;
  float (*dot_f32)(const float* a, const float* b, int64_t n) = nullptr;
  // y += a * x
  void (*axpy_f32)(float a, const float* x, float* y, int64_t n) = nullptr;
  // out = silu(gate) * up ; out may alias gate or up
  void (*silu_mul)(const float* gate, const float* up, float* out, int64_t n) = nullptr;
  // out = gelu_tanh(gate) * up
  void (*gelu_mul)(const float* gate, const float* up, float* out, int64_t n) = nullptr;
  // y += x
  void (*add_f32)(const float* x, float* y, int64_t n) = nullptr;

  // Attention of the query heads sharing one KV head over that head's paged cache
  // (kernels/attention.h; reference in generic/attention_ref.cpp).
  void (*paged_attention)(const PagedAttentionArgs& a) = nullptr;

  // LoRA's low-rank products on packed adapters (kernels/lora_kernels.h; reference in
  // generic/lora_ref.cpp).
  LoraDownFn lora_down = nullptr;
  LoraUpFn lora_up = nullptr;
};

// The generic (scalar) table: always present, the reference for all others.
const KernelTable& generic_table();
// The table for `isa`, or nullptr when it is not compiled in or this CPU cannot run it.
const KernelTable* table_for(Isa isa);
// The table in use: the best this CPU runs, or EDGELLM_ISA's choice (read once, at first use).
const KernelTable& active();
// Re-select (tests): nullptr restores the default choice. Throws std::invalid_argument for an
// ISA this machine cannot run.
void set_active(const char* isa_name);

}  // namespace edgellm::kernels
