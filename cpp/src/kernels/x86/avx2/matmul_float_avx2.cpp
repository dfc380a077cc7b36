// AVX2 + FMA + F16C (maddubs/madd int8 dots): F32, F16, BF16 matmul.
#include "kernels/x86/matmul_float_x86.inc.h"

namespace edgellm::kernels {
void fill_avx2_matmul_float(KernelTable& t) { fill_matmul_float_x86<GemmVecAvx2, 4, 2>(t); }
}  // namespace edgellm::kernels
