// NEON (armv8-a): Q2_K .. Q6_K matmul (smull + sadalp int8 dots).
#include "kernels/arm/matmul_kquant_neon.inc.h"

namespace edgellm::kernels {
void fill_neon_matmul_kquant(KernelTable& t) { fill_matmul_kquant_neon<4, 2>(t); }
}  // namespace edgellm::kernels
