// AVX2 + FMA + F16C (maddubs/madd int8 dots): Q2_K .. Q6_K matmul.
#include "kernels/x86/matmul_kquant_x86.inc.h"

namespace edgellm::kernels {
void fill_avx2_matmul_kquant(KernelTable& t) { fill_matmul_kquant_x86<4, 2>(t); }
}  // namespace edgellm::kernels
