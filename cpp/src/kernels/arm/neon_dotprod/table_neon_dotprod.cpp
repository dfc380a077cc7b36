// The neon-dotprod kernel table: armv8.2-a dot product (sdot: 16 int8 products summed by fours
// into int32 lanes in one instruction), e.g. Raspberry Pi 5's Cortex-A76. It starts as a copy of
// the neon table (dispatch.cpp) and overrides only what sdot speeds up: the int8 matmuls.
// Quantizers, float matmuls and float ops stay the neon ones.
#include "kernels/kernels.h"

namespace edgellm::kernels {

void fill_neon_dotprod_matmul_legacy(KernelTable& t);
void fill_neon_dotprod_matmul_kquant(KernelTable& t);
void fill_neon_dotprod_matmul_nonlinear(KernelTable& t);
void fill_neon_dotprod_matmul_packed(KernelTable& t);

void fill_neon_dotprod_table(KernelTable& t) {
  fill_neon_dotprod_matmul_legacy(t);
  fill_neon_dotprod_matmul_kquant(t);
  fill_neon_dotprod_matmul_nonlinear(t);
  fill_neon_dotprod_matmul_packed(t);  // row-interleaved weights: the loader repacks these types
}

}  // namespace edgellm::kernels
