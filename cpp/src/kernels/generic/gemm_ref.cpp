// The scalar reference of KernelTable::gemm_f32 (kernels/gemm_kernels.h).
#include "kernels/gemm_kernels.h"

namespace edgellm::kernels {

void gemm_f32_ref(const GemmArgs& g) {
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      float s = 0.0f;
      for (int64_t p = 0; p < g.k; ++p) s += g.a[i * g.lda + p] * g.b[p * g.ldb + j];
      float* c = g.c + i * g.ldc + j;
      *c = g.accumulate ? *c + g.alpha * s : g.alpha * s;
    }
}

}  // namespace edgellm::kernels
