// NEON (armv8-a): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 matmul (smull + sadalp int8 dots).
#include "kernels/arm/matmul_legacy_neon.inc.h"

namespace edgellm::kernels {
void fill_neon_matmul_legacy(KernelTable& t) { fill_matmul_legacy_neon<4, 2>(t); }
}  // namespace edgellm::kernels
