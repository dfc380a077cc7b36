// AVX-512 F/BW/VL/DQ + VNNI (vpdpbusd / vpdpwssd int8 dots, 32 vector registers): Q2_K .. Q6_K matmul.
// The table takes the 512-bit form for Q4_K / Q5_K / Q6_K (matmul_kquant512_x86.inc.h; decode 4 rows,
// prefill 3 rows × 8 columns: the best of 4×4 .. 8×4 measured by the kernel bench) and the
// 256-bit VL form for Q2_K / Q3_K.
#include "kernels/x86/matmul_kquant512_x86.inc.h"

namespace edgellm::kernels {
void fill_avx512_matmul_kquant(KernelTable& t) {
  fill_matmul_kquant_x86<4, 4>(t);
  fill_matmul_kquant_avx512<4, 3, 8>(t);
}
}  // namespace edgellm::kernels
