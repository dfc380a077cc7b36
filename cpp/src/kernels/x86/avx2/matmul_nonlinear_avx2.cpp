// AVX2 + FMA + F16C (vpshufb lookups, maddubs/madd int8 dots): IQ4_NL, IQ4_XS, MXFP4 matmul in the GGUF layout.
#include "kernels/x86/matmul_nonlinear_x86.inc.h"

namespace edgellm::kernels {
void fill_avx2_matmul_nonlinear(KernelTable& t) { fill_matmul_nonlinear_x86<4, 2>(t); }
}  // namespace edgellm::kernels
