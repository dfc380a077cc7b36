// The avx2 level's f32 GEMM (x86/gemm_x86.inc.h): 4 rows × 2 vectors (16 columns), 8 of the 16
// registers holding sums.
#include "kernels/x86/gemm_x86.inc.h"

namespace edgellm::kernels {
void fill_avx2_gemm(KernelTable& t) { t.gemm_f32 = gemm_f32_x86<GemmVec256, 4, 2, 2>; }
}  // namespace edgellm::kernels
