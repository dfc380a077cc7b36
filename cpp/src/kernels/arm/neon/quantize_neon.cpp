// NEON (armv8-a): activation quantizers.
#include "kernels/arm/quantize_neon.inc.h"

namespace edgellm::kernels {
void fill_neon_quantize(KernelTable& t) { fill_quantizers_neon(t); }
}  // namespace edgellm::kernels
