// NEON + dot product (armv8.2-a+dotprod, sdot): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 matmul. The same kernel bodies as the neon
// unit; simd_neon.h's dot_s8 compiles to vdotq_s32 here.
#include "kernels/arm/matmul_legacy_neon.inc.h"

#if !EDGELLM_NEON_DOTPROD
#error "this unit must be compiled with -march=armv8.2-a+dotprod"
#endif

namespace edgellm::kernels {
void fill_neon_dotprod_matmul_legacy(KernelTable& t) { fill_matmul_legacy_neon<4, 2>(t); }
}  // namespace edgellm::kernels
