// The neon-i8mm kernel table: armv8.2-a dot product plus the int8 matrix multiply extension
// (smmla: a 2×8 by 8×2 int8 product into a 2×2 int32 tile), e.g. Graviton 3/4, Cortex-A710/X2 and
// later, Apple M2+; chosen when HWCAP2 has I8MM (dispatch.cpp). It starts as a copy of the
// neon-dotprod table and overrides the matmuls over row-interleaved weights, where two
// activation columns share each weight operand. The GGUF-layout matmuls (Q2_K, Q3_K, and any
// matrix the loader does not repack) and decode's single-column path stay neon-dotprod's sdot.
#include "kernels/kernels.h"

namespace edgellm::kernels {

void fill_neon_i8mm_matmul_packed(KernelTable& t);

void fill_neon_i8mm_table(KernelTable& t) { fill_neon_i8mm_matmul_packed(t); }

}  // namespace edgellm::kernels
