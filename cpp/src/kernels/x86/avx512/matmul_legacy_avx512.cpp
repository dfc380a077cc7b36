// AVX-512 F/BW/VL/DQ + VNNI (vpdpbusd / vpdpwssd int8 dots, 32 vector registers): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 matmul.
#include "kernels/x86/matmul_legacy_x86.inc.h"

namespace edgellm::kernels {
void fill_avx512_matmul_legacy(KernelTable& t) { fill_matmul_legacy_x86<4, 4>(t); }
}  // namespace edgellm::kernels
