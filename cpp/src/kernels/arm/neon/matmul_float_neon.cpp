// NEON (armv8-a): F32, F16, BF16 matmul.
#include "kernels/arm/matmul_float_neon.inc.h"

namespace edgellm::kernels {
void fill_neon_matmul_float(KernelTable& t) { fill_matmul_float_neon<4, 2>(t); }
}  // namespace edgellm::kernels
