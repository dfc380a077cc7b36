// The avx512 kernel table: AVX-512 F/BW/VL/DQ + VNNI (vpdpbusd / vpdpwssd int8 dots, 32 vector registers).
// Tile shapes (rows per tile for decode / for 4-column prefill tiles) are chosen per level:
// decode 4 rows, prefill 4 rows × 4 columns.
#include "kernels/kernels.h"

namespace edgellm::kernels {

void fill_avx512_quantize(KernelTable& t);
void fill_avx512_matmul_legacy(KernelTable& t);
void fill_avx512_matmul_kquant(KernelTable& t);
void fill_avx512_matmul_nonlinear(KernelTable& t);
void fill_avx512_matmul_float(KernelTable& t);
void fill_avx512_matmul_packed(KernelTable& t);
void fill_avx512_float_ops(KernelTable& t);
void fill_avx512_attention(KernelTable& t);
void fill_avx512_lora(KernelTable& t);

void fill_avx512_table(KernelTable& t) {
  fill_avx512_quantize(t);
  fill_avx512_matmul_legacy(t);
  fill_avx512_matmul_kquant(t);
  fill_avx512_matmul_nonlinear(t);
  fill_avx512_matmul_float(t);
  fill_avx512_matmul_packed(t);
  fill_avx512_float_ops(t);
  fill_avx512_attention(t);
  fill_avx512_lora(t);
}

}  // namespace edgellm::kernels
