// The avx512 level's f32 GEMM (x86/gemm_x86.inc.h): 4 rows × 4 vectors (64 columns; 5 vectors for n 65..80), 16 (20) of the
// 32 registers holding sums.
#include "kernels/x86/gemm_x86.inc.h"

namespace edgellm::kernels {
void fill_avx512_gemm(KernelTable& t) { t.gemm_f32 = gemm_f32_x86<GemmVec512, 4, 4, 5>; }
}  // namespace edgellm::kernels
