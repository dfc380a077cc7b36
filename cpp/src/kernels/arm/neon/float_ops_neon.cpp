// NEON (armv8-a): f32 vector ops.
#include "kernels/arm/float_ops_neon.inc.h"

namespace edgellm::kernels {
void fill_neon_float_ops(KernelTable& t) { fill_float_ops_neon(t); }
}  // namespace edgellm::kernels
