// NEON + dot product (armv8.2-a+dotprod, sdot) matmul over row-interleaved weights: the kernel
// body is arm/matmul_packed_neon.inc.h's, one sdot per 4 rows × 4 elements × 1 column.
#include "kernels/arm/matmul_packed_neon.inc.h"

namespace edgellm::kernels {
void fill_neon_dotprod_matmul_packed(KernelTable& t) { fill_packed_matmul<PackedNeonDotprod>(t); }
}  // namespace edgellm::kernels
