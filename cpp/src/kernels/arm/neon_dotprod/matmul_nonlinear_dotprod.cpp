// NEON + dot product (armv8.2-a+dotprod, sdot): IQ4_NL, IQ4_XS, MXFP4 matmul in the GGUF layout.
// The same kernel bodies as the neon unit; simd_neon.h's dot_s8 compiles to vdotq_s32 here.
#include "kernels/arm/matmul_nonlinear_neon.inc.h"

#if !EDGELLM_NEON_DOTPROD
#error "this unit must be compiled with -march=armv8.2-a+dotprod"
#endif

namespace edgellm::kernels {
void fill_neon_dotprod_matmul_nonlinear(KernelTable& t) { fill_matmul_nonlinear_neon<4, 2>(t); }
}  // namespace edgellm::kernels
