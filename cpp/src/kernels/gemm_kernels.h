// A plain f32 GEMM on row-major operands: C = alpha·A·B (or C += alpha·A·B), the shape of
// attention's two products when every query attends to a block of keys (the vision towers'
// non-causal attention, model/vision/siglip.cpp vision_attention): scores = Q·Kᵀ with Kᵀ laid out
// [dim][key], and out = P·V with V as stored [key][dim]. Unlike the weight matmuls (MatmulArgs:
// dot products along K, a horizontal sum per output) this runs outer products — each A element is
// broadcast against a vector of B's row — so a short K (a head dimension of 64 or 72) costs
// nothing extra and any n is vectorised.
//
// Reference in generic/gemm_ref.cpp, SIMD bodies in x86/gemm_x86.inc.h; KernelTable::gemm_f32 is
// the active level's.
#pragma once
#include <cstdint>

namespace edgellm::kernels {

struct GemmArgs {
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;  // m rows of k, row stride lda floats
  int64_t lda = 0;
  const float* b = nullptr;  // k rows of n, row stride ldb floats
  int64_t ldb = 0;
  float* c = nullptr;        // m rows of n, row stride ldc floats
  int64_t ldc = 0;
  float alpha = 1.0f;
  bool accumulate = false;   // C += alpha·A·B instead of C = alpha·A·B
};

using GemmFn = void (*)(const GemmArgs&);

// The scalar reference (also the generic table's entry).
void gemm_f32_ref(const GemmArgs& g);

}  // namespace edgellm::kernels
