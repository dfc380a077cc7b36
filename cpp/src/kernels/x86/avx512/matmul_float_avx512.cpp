// AVX-512 F/BW/VL/DQ + VNNI (vpdpbusd / vpdpwssd int8 dots, 32 vector registers): F32, F16, BF16 matmul.
#include "kernels/x86/matmul_float_x86.inc.h"

namespace edgellm::kernels {
void fill_avx512_matmul_float(KernelTable& t) { fill_matmul_float_x86<GemmVecAvx512, 4, 4>(t); }
}  // namespace edgellm::kernels
