// The neon kernel table: armv8-a Advanced SIMD, which every AArch64 CPU has (Raspberry Pi 3 and
// 4's Cortex-A53/A72 included). Int8 dots widen with smull and pairwise-accumulate with sadalp.
// Tile shapes: decode 4 rows, prefill 2 rows × 4 columns.
#include "kernels/kernels.h"

namespace edgellm::kernels {

void fill_neon_quantize(KernelTable& t);
void fill_neon_float_ops(KernelTable& t);
void fill_neon_matmul_float(KernelTable& t);
void fill_neon_matmul_legacy(KernelTable& t);
void fill_neon_matmul_kquant(KernelTable& t);
void fill_neon_matmul_nonlinear(KernelTable& t);
void fill_neon_lora(KernelTable& t);

void fill_neon_table(KernelTable& t) {
  fill_neon_quantize(t);
  fill_neon_float_ops(t);
  fill_neon_matmul_float(t);
  fill_neon_matmul_legacy(t);
  fill_neon_matmul_kquant(t);
  fill_neon_matmul_nonlinear(t);
  fill_neon_lora(t);
}

}  // namespace edgellm::kernels
