// The avx2 kernel table: AVX2 + FMA + F16C (maddubs/madd int8 dots).
// Tile shapes (rows per tile for decode / for 4-column prefill tiles) are chosen per level:
// decode 4 rows, prefill 2 rows × 4 columns. Packed (row-interleaved) weights: 16-row group ×
// up to 4 columns (matmul_packed_avx2.cpp).
#include "kernels/kernels.h"

namespace edgellm::kernels {

void fill_avx2_quantize(KernelTable& t);
void fill_avx2_matmul_legacy(KernelTable& t);
void fill_avx2_matmul_kquant(KernelTable& t);
void fill_avx2_matmul_nonlinear(KernelTable& t);
void fill_avx2_matmul_float(KernelTable& t);
void fill_avx2_matmul_packed(KernelTable& t);
void fill_avx2_float_ops(KernelTable& t);
void fill_avx2_attention(KernelTable& t);
void fill_avx2_lora(KernelTable& t);

void fill_avx2_table(KernelTable& t) {
  fill_avx2_quantize(t);
  fill_avx2_matmul_legacy(t);
  fill_avx2_matmul_kquant(t);
  fill_avx2_matmul_nonlinear(t);
  fill_avx2_matmul_float(t);
  fill_avx2_matmul_packed(t);  // row-interleaved weights: the loader packs what this fills
  fill_avx2_float_ops(t);
  fill_avx2_attention(t);
  fill_avx2_lora(t);
}

}  // namespace edgellm::kernels
