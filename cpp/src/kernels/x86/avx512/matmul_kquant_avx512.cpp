// AVX-512 F/BW/VL/DQ + VNNI (vpdpbusd / vpdpwssd int8 dots, 32 vector registers): Q2_K .. Q6_K matmul.
#include "kernels/x86/matmul_kquant_x86.inc.h"

namespace edgellm::kernels {
void fill_avx512_matmul_kquant(KernelTable& t) { fill_matmul_kquant_x86<4, 4>(t); }
}  // namespace edgellm::kernels
