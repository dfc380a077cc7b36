// NEON (armv8-a): IQ4_NL, IQ4_XS, MXFP4 matmul in the GGUF layout (tbl lookups, smull + sadalp int8 dots).
#include "kernels/arm/matmul_nonlinear_neon.inc.h"

namespace edgellm::kernels {
void fill_neon_matmul_nonlinear(KernelTable& t) { fill_matmul_nonlinear_neon<4, 2>(t); }
}  // namespace edgellm::kernels
